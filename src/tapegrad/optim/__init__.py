"""Optimisers, gradient clipping and learning-rate schedulers (in-place updates)."""

from . import lr_scheduler
from .adam import Adam, AdamW
from .clip import clip_grad_norm_, clip_grad_value_
from .lr_scheduler import CosineAnnealingLR, OneCycleLR, StepLR
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "clip_grad_norm_",
    "clip_grad_value_",
    "lr_scheduler",
    "StepLR",
    "CosineAnnealingLR",
    "OneCycleLR",
]
