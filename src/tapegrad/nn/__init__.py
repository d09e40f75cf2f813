"""Neural-network library: modules, layers, losses, initialisers.

    from tapegrad import nn
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    loss = nn.functional.cross_entropy(model(x), labels)

Layout: ``parameter.py`` (Parameter), ``module.py`` (Module, Sequential, ModuleList, buffers),
``layers/`` (one file per layer family), ``losses.py`` (loss modules), ``functional.py``
(stateless forms of all of them; the larger families in ``_functional/``: normalisation,
pooling and resizing, attention, losses), ``init.py`` (initialisers and the seedable default
generator).
"""

from . import functional, init, utils
from .containers import ModuleDict, ParameterDict, ParameterList
from .layers import *  # noqa: F403
from .layers import __all__ as _layers
from .losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CosineSimilarity,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import LoadResult, Module, ModuleList, Sequential, StateDictError
from .parameter import Parameter

manual_seed = init.manual_seed

__all__ = [
    "functional",
    "init",
    "utils",
    "manual_seed",
    "Parameter",
    "Module",
    "ModuleList",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "Sequential",
    "StateDictError",
    "LoadResult",
    *_layers,
    "CrossEntropyLoss",
    "BCEWithLogitsLoss",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "KLDivLoss",
    "NLLLoss",
    "CosineEmbeddingLoss",
    "CosineSimilarity",
]
