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


def quantize_aware(net, activations="uint8", reduce_range=False):
    """Quantization-aware training: every Dense and Conv2d in ``net`` computes on
    its input and weights fake-quantized to int8 from now on (gradients pass
    straight through the rounding). Returns how many layers. Train as usual;
    then export with fake quantization off (``set_fake_quantization(net, False)``)
    and quantize the file with ``kiln.quantize``."""
    if activations not in ("uint8", "int8"):
        raise ValueError(f"activations {activations!r}: use 'uint8' or 'int8'")
    return _kiln.quantize_aware(net, activations, reduce_range)


def set_fake_quantization(net, enabled):
    """Turns the fake quantization of quantize_aware's layers off (for export) or on again."""
    _kiln.set_fake_quantization(net, bool(enabled))


__all__ = [n for n in dir() if not n.startswith("_")]
