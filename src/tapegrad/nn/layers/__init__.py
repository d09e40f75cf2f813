"""The layers, one file per family."""

from .activation import Identity, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from .attention import MultiheadAttention
from .conv import (
    Conv1d,
    Conv2d,
    ConvTranspose1d,
    ConvTranspose2d,
    MaxPool1d,
    MaxPool2d,
    MaxUnpool1d,
    MaxUnpool2d,
)
from .dropout import Dropout, Dropout2d
from .embedding import Embedding
from .linear import Linear
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm
from .pooling import AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool2d
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .shape import Flatten, Permute, Reshape
from .transformer import TransformerEncoder, TransformerEncoderLayer
from .upsampling import Upsample

__all__ = [
    "Linear",
    "Conv1d",
    "Conv2d",
    "MaxPool1d",
    "MaxPool2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "AvgPool1d",
    "AvgPool2d",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "Upsample",
    "BatchNorm1d",
    "BatchNorm2d",
    "LayerNorm",
    "GroupNorm",
    "Flatten",
    "Permute",
    "Reshape",
    "Embedding",
    "RNN",
    "LSTM",
    "GRU",
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "Dropout",
    "Dropout2d",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "Identity",
    "Softmax",
    "LogSoftmax",
]
