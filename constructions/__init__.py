"""Teachers and the networks built from them."""

from constructions.deep import DeepConstruction, build_deep
from constructions.encodings import ENCODING_NAMES, LINEAR_ENCODINGS, TaskEncoder, make_encoder
from constructions.exact import ExactConstruction, build_exact
from constructions.hyperteacher import (
    ENCODINGS,
    WEIGHTS,
    Hyperteacher,
    HyperteacherConfig,
    dense_latents,
    enumerate_supports,
    n_supports,
    sample_hyperteacher,
    sample_inputs,
    sample_supports,
    support_weights,
)
from constructions.memorize import build_memorizer
from constructions.multilayer import MultiLayerConstruction, MultiLayerHyperteacher, build_multilayer
from constructions.optimal import OptimalConstruction, build_optimal
from constructions.registry import CONSTRUCTIONS, build
from constructions.shallow import ShallowConstruction, build_construction
from constructions.splits import SPLITS, TaskSplit, make_split

__all__ = [
    "ENCODINGS", "WEIGHTS", "Hyperteacher", "HyperteacherConfig", "ShallowConstruction",
    "build_construction", "build_memorizer", "dense_latents", "enumerate_supports", "n_supports",
    "sample_hyperteacher", "sample_inputs", "sample_supports", "support_weights",
    "ENCODING_NAMES", "LINEAR_ENCODINGS", "TaskEncoder", "make_encoder",
    "SPLITS", "TaskSplit", "make_split",
    "CONSTRUCTIONS", "build", "DeepConstruction", "build_deep", "ExactConstruction", "build_exact",
    "MultiLayerConstruction", "MultiLayerHyperteacher", "build_multilayer", "OptimalConstruction",
    "build_optimal",
]
