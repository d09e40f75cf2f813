"""Optimisers, gradient clipping and learning-rate schedulers (in-place updates).

Optimisers: ``SGD`` (momentum, Nesterov), ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad``,
``Adadelta``, ``Adamax``, ``NAdam`` (elementwise; compiled steps replay them) and ``LBFGS``
(with a closure; eager only). Schedules: ``StepLR``, ``MultiStepLR``, ``ExponentialLR``,
``CosineAnnealingLR``, ``OneCycleLR``, ``LambdaLR`` and ``ReduceLROnPlateau`` (stepped with
a metric). Clipping: ``clip_grad_norm_``, ``clip_grad_value_``.
"""

from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .clip import clip_grad_norm_, clip_grad_value_
from .lbfgs import LBFGS
from .lr_scheduler import (
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    MultiStepLR,
    OneCycleLR,
    ReduceLROnPlateau,
    StepLR,
)
from .nadam import NAdam
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "Adamax",
    "NAdam",
    "LBFGS",
    "clip_grad_norm_",
    "clip_grad_value_",
    "lr_scheduler",
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "OneCycleLR",
    "LambdaLR",
    "ReduceLROnPlateau",
]
