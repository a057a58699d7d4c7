"""Cells, layers, losses, optimizers and initialisers, with MindSpore's names and arguments.

Subclass :class:`Cell` and write ``construct``; parameters (:class:`Parameter`)
and child cells assigned as attributes are registered by name, so they are
trained, saved and listed. Built-in layers are C++ cells; Python cells and
C++ cells nest in both directions.
"""
from .. import _kiln
from .cell import Cell, Parameter, SequentialCell, CellList
from .layers import (Dense, Conv1d, Conv2d, Conv2dTranspose, BatchNorm1d, BatchNorm2d, LayerNorm, GroupNorm,
                     ReLU, ReLU6, HSwish, HSigmoid, Softplus, get_activation, SiLU, Sigmoid, Tanh, Flatten,
                     LeakyReLU, GELU, Softmax, LogSoftmax, Dropout, MaxPool2d,
                     AvgPool2d, AdaptiveAvgPool2d, Upsample, Embedding, LSTM, GRU, RNN, MultiheadAttention,
                     TransformerEncoderLayer, make_model)
from .losses import (LossBase, CrossEntropyLoss, SoftmaxCrossEntropyWithLogits, NLLLoss, MSELoss, L1Loss,
                     SmoothL1Loss, BCEWithLogitsLoss)
from .optim import (Optimizer, SGD, Momentum, Adam, AdamW, AdamWeightDecay, RMSProp, clip_grad_norm,
                    cosine_decay_lr, piecewise_constant_lr, exponential_decay_lr, schedules)
from .wrappers import WithLossCell, TrainOneStepCell, WithEvalCell
from . import init

__all__ = [n for n in dir() if not n.startswith("_")]
