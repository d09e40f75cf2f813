"""Neural-network library: modules, layers, losses, initialisers.

    from tapegrad import nn
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    loss = nn.functional.cross_entropy(model(x), labels)

Layout: ``parameter.py`` (Parameter), ``module.py`` (Module, Sequential, ModuleList),
``layers/`` (one file per layer family), ``losses.py`` (loss modules), ``functional.py``
(stateless forms of all of them), ``init.py`` (initialisers and the seedable default generator).
"""

from . import functional, init
from .layers import (
    GRU,
    LSTM,
    RNN,
    Conv1d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    Linear,
    LogSoftmax,
    MaxPool1d,
    MaxPool2d,
    Permute,
    ReLU,
    Reshape,
    Sigmoid,
    Softmax,
    Tanh,
)
from .losses import (
    BCELoss,
    BCEWithLogitsLoss,
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
    "manual_seed",
    "Parameter",
    "Module",
    "ModuleList",
    "Sequential",
    "StateDictError",
    "LoadResult",
    "Linear",
    "Conv1d",
    "Conv2d",
    "MaxPool1d",
    "MaxPool2d",
    "Flatten",
    "Permute",
    "Reshape",
    "Embedding",
    "RNN",
    "LSTM",
    "GRU",
    "Dropout",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "Identity",
    "Softmax",
    "LogSoftmax",
    "CrossEntropyLoss",
    "BCEWithLogitsLoss",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "KLDivLoss",
    "NLLLoss",
]
