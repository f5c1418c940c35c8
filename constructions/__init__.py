"""Teachers and the networks built from them. The task family (the hyperteachers, their
encodings and splits) lives in `constructions.tasks`, which imports nothing else from here:
it is what the constructions approximate.

The names below are loaded on first use (PEP 562), so `import constructions.catalogue` (what
the CLIs read before their arguments are parsed) does not import torch.
"""

from importlib import import_module

_WHERE = {
    "Claim": "base", "Construction": "base", "count_hidden_units": "base",
    "DeepConstruction": "deep", "build_deep": "deep",
    **dict.fromkeys(("ENCODING_NAMES", "LINEAR_ENCODINGS", "ENCODINGS", "WEIGHTS", "SPLITS"),
                    "tasks.task_names"),
    "CONSTRUCTIONS": "catalogue", "REGISTRY": "catalogue",
    "TaskEncoder": "tasks.encodings", "make_encoder": "tasks.encodings",
    "ExactConstruction": "exact", "build_exact": "exact",
    "Hyperteacher": "tasks.hyperteacher", "HyperteacherConfig": "tasks.hyperteacher",
    "dense_latents": "tasks.hyperteacher", "enumerate_supports": "tasks.hyperteacher",
    "n_supports": "tasks.hyperteacher", "sample_hyperteacher": "tasks.hyperteacher",
    "sample_inputs": "tasks.hyperteacher", "sample_supports": "tasks.hyperteacher",
    "support_weights": "tasks.hyperteacher",
    "build_memorizer": "memorize",
    "MultiLayerConstruction": "multilayer", "MultiLayerHyperteacher": "tasks.multilayer",
    "sample_multilayer_hyperteacher": "tasks.multilayer",
    "build_multilayer": "multilayer",
    "OptimalConstruction": "optimal", "build_optimal": "optimal",
    "build": "registry",
    "ShallowConstruction": "shallow", "build_shallow": "shallow", "build_construction": "shallow",
    "TaskSplit": "tasks.splits", "make_split": "tasks.splits",
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
