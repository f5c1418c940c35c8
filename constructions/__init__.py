"""Teachers and the networks built from them."""

from constructions.encodings import ENCODING_NAMES, LINEAR_ENCODINGS, TaskEncoder, make_encoder
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
from constructions.shallow import ShallowConstruction, build_construction
from constructions.splits import SPLITS, TaskSplit, make_split

__all__ = [
    "ENCODINGS", "WEIGHTS", "Hyperteacher", "HyperteacherConfig", "ShallowConstruction",
    "build_construction", "build_memorizer", "dense_latents", "enumerate_supports", "n_supports",
    "sample_hyperteacher", "sample_inputs", "sample_supports", "support_weights",
    "ENCODING_NAMES", "LINEAR_ENCODINGS", "TaskEncoder", "make_encoder",
    "SPLITS", "TaskSplit", "make_split",
]
