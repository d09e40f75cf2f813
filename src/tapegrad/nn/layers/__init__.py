"""The layers, one file per family."""

from .activation import Identity, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from .conv import Conv1d, Conv2d, MaxPool1d, MaxPool2d
from .dropout import Dropout
from .embedding import Embedding
from .linear import Linear
from .recurrent import GRU, LSTM, RNN
from .shape import Flatten, Permute, Reshape

__all__ = [
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
]
