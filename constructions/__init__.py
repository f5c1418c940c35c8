"""Teachers and the networks built from them.

The names below are loaded on first use (PEP 562), so `import constructions.names` (what
the CLIs read before their arguments are parsed) does not import torch.
"""

from importlib import import_module

_WHERE = {
    "Claim": "base", "Construction": "base", "count_hidden_units": "base",
    "DeepConstruction": "deep", "build_deep": "deep",
    "ENCODING_NAMES": "names", "LINEAR_ENCODINGS": "names", "ENCODINGS": "names", "WEIGHTS": "names",
    "SPLITS": "names", "CONSTRUCTIONS": "names", "REGISTRY": "names",
    "TaskEncoder": "encodings", "make_encoder": "encodings",
    "ExactConstruction": "exact", "build_exact": "exact",
    "Hyperteacher": "hyperteacher", "HyperteacherConfig": "hyperteacher",
    "dense_latents": "hyperteacher", "enumerate_supports": "hyperteacher", "n_supports": "hyperteacher",
    "sample_hyperteacher": "hyperteacher", "sample_inputs": "hyperteacher",
    "sample_supports": "hyperteacher", "support_weights": "hyperteacher",
    "build_memorizer": "memorize",
    "MultiLayerConstruction": "multilayer", "MultiLayerHyperteacher": "multilayer",
    "build_multilayer": "multilayer",
    "OptimalConstruction": "optimal", "build_optimal": "optimal",
    "build": "registry",
    "ShallowConstruction": "shallow", "build_construction": "shallow",
    "TaskSplit": "splits", "make_split": "splits",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'constructions' has no attribute {name!r}")
    value = getattr(import_module(f"constructions.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
