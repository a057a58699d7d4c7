"""Built-in layers: Kiln's C++ cells under MindSpore's names and arguments.

Where MindSpore's defaults differ from PyTorch's, MindSpore's hold:
``Conv2d`` has ``pad_mode="same"`` and no bias by default, ``BatchNorm``'s
``momentum`` is the weight of the running statistics (0.9), pooling strides
default to 1, ``Dropout`` takes ``keep_prob`` (or ``p``).
"""
import functools as _functools
import inspect as _inspect
import re as _re

from .. import _kiln
from .. import ops as _ops
from . import init as _init
from .cell import Cell as _Cell


def _square(value, what):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) for v in value):
        raise TypeError(f"{what} must be an int or a pair of equal ints, not {type(value).__name__} ({value!r})")
    values = tuple(value)
    if len(set(values)) != 1:
        raise ValueError(f"{what} {values}: only square {what}s are supported; pass one int")
    return values[0]


def _padding(pad_mode, padding, kernel_size, dilation, what):
    mode = pad_mode.lower()
    if mode == "pad":
        return _square(padding, "padding")
    if mode == "valid":
        return 0
    if mode == "same":
        span = (kernel_size - 1) * dilation
        if span % 2:
            raise ValueError(f"{what}: pad_mode='same' needs an odd kernel_size (got {kernel_size}); "
                             "use pad_mode='pad' with explicit padding")
        return span // 2
    raise ValueError(f"{what}: pad_mode is 'same', 'valid' or 'pad', not {pad_mode!r}")


class Dense(_kiln.Dense):
    """y = x W^T + b; weight [out_channels, in_channels]."""

    def __init__(self, in_channels, out_channels, weight_init=None, bias_init=None, has_bias=True, activation=None):
        super().__init__(in_channels, out_channels, has_bias)
        _init.apply(self.weight, weight_init)
        if has_bias:
            _init.apply(self.bias, bias_init)
        if activation is not None:
            self._set_activation(get_activation(activation) if isinstance(activation, str) else
                                 _checked_activation(activation))

    def extra_repr(self):
        w = self.weight.shape
        return f"in_channels={w[1]}, out_channels={w[0]}"


class Conv2d(_kiln.Conv2d):
    """2-D convolution over [N, C, H, W]."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0, dilation=1,
                 group=1, has_bias=False, weight_init=None, bias_init=None, data_format="NCHW"):
        if data_format != "NCHW":
            raise ValueError(f"data_format {data_format!r}: Kiln's layers take NCHW")
        k = _square(kernel_size, "kernel_size")
        d = _square(dilation, "dilation")
        super().__init__(in_channels, out_channels, k, _square(stride, "stride"),
                         _padding(pad_mode, padding, k, d, "Conv2d"), d, group, has_bias)
        _init.apply(self.weight, weight_init)
        if has_bias:
            _init.apply(self.bias, bias_init)


class Conv1d(_kiln.Conv1d):
    """1-D convolution over [N, C, L]."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0, dilation=1,
                 group=1, has_bias=False, weight_init=None, bias_init=None):
        super().__init__(in_channels, out_channels, kernel_size, stride,
                         _padding(pad_mode, padding, kernel_size, dilation, "Conv1d"), dilation, group, has_bias)
        _init.apply(self.weight, weight_init)


class Conv2dTranspose(_kiln.Conv2dTranspose):
    """Transposed 2-D convolution (padding as in PyTorch's ConvTranspose2d)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, pad_mode="pad", padding=0, output_padding=0,
                 dilation=1, group=1, has_bias=False, weight_init=None):
        k = _square(kernel_size, "kernel_size")
        pad = 0 if pad_mode == "valid" else _square(padding, "padding")
        super().__init__(in_channels, out_channels, k, _square(stride, "stride"), pad, output_padding,
                         _square(dilation, "dilation"), group, has_bias)
        _init.apply(self.weight, weight_init)


class BatchNorm2d(_kiln.BatchNorm2d):
    """Batch normalization over [N, C, H, W]; ``momentum`` weighs the running statistics (MindSpore's sense)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True, gamma_init="ones", beta_init="zeros",
                 use_batch_statistics=None, data_format="NCHW"):
        super().__init__(num_features, 1.0 - momentum, eps)
        if not affine:
            self.freeze("")


class BatchNorm1d(_kiln.BatchNorm1d):
    """Batch normalization over [N, C] or [N, C, L]."""

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True):
        super().__init__(num_features, 1.0 - momentum, eps)


class LayerNorm(_kiln.LayerNorm):
    """Normalizes over the trailing ``normalized_shape`` axes."""

    def __init__(self, normalized_shape, begin_norm_axis=-1, begin_params_axis=-1, epsilon=1e-7, eps=None,
                 elementwise_affine=True):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        super().__init__(shape, epsilon if eps is None else eps, elementwise_affine)


class GroupNorm(_kiln.GroupNorm):
    """Normalizes [N, C, ...] over groups of channels (``num_groups`` of them), with a per-channel scale and shift."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True):
        super().__init__(num_groups, num_channels, eps)


class ReLU(_kiln.ReLU):
    """max(x, 0), elementwise."""


class SiLU(_kiln.SiLU):
    """x * sigmoid(x) (also called swish), elementwise."""


class Sigmoid(_kiln.Sigmoid):
    """1 / (1 + exp(-x)), elementwise."""


class Tanh(_kiln.Tanh):
    """The hyperbolic tangent, elementwise."""


class ReLU6(_Cell):
    """min(max(x, 0), 6)."""

    def construct(self, x):
        return _ops.clamp(x, min=0.0, max=6.0)


class HSwish(_Cell):
    """x * relu6(x + 3) / 6 (MobileNetV3's hard swish)."""

    def construct(self, x):
        return _ops.hardswish(x)


class HSigmoid(_Cell):
    """relu6(x + 3) / 6."""

    def construct(self, x):
        return _ops.hardsigmoid(x)


class Softplus(_Cell):
    """log(1 + exp(x))."""

    def construct(self, x):
        return _ops.softplus(x)


_ACTIVATIONS = {
    "relu": lambda: ReLU(), "relu6": lambda: ReLU6(), "sigmoid": lambda: Sigmoid(), "tanh": lambda: Tanh(),
    "gelu": lambda: GELU(), "fast_gelu": lambda: GELU(approximate=True), "silu": lambda: SiLU(),
    "swish": lambda: SiLU(), "leakyrelu": lambda: LeakyReLU(), "hswish": lambda: HSwish(),
    "hsigmoid": lambda: HSigmoid(), "softplus": lambda: Softplus(), "softmax": lambda: Softmax(),
    "logsoftmax": lambda: LogSoftmax(),
}


def get_activation(name):
    """The activation cell MindSpore's ``nn.get_activation`` gives for ``name`` ('relu', 'gelu', ...)."""
    make = _ACTIVATIONS.get(str(name).lower())
    if make is None:
        raise ValueError(f"activation {name!r} is not one Kiln has; use one of {', '.join(sorted(_ACTIVATIONS))}, "
                         "or pass a Cell")
    return make()


def _checked_activation(activation):
    if not isinstance(activation, _kiln.Cell):
        raise TypeError(f"activation must be a name such as 'relu' or a Cell, not {type(activation).__name__}")
    return activation


class Flatten(_kiln.Flatten):
    """[N, ...] -> [N, prod(...)]."""


class LeakyReLU(_kiln.LeakyReLU):
    """x where x > 0, ``alpha * x`` elsewhere."""

    def __init__(self, alpha=0.2):
        super().__init__(alpha)


class GELU(_kiln.GELU):
    """x * Phi(x), the Gaussian error linear unit (``approximate=True``: the tanh form)."""

    def __init__(self, approximate=True):
        super().__init__(approximate)


class Softmax(_kiln.Softmax):
    """exp(x) normalized to sum to 1 along ``axis`` (the last by default)."""

    def __init__(self, axis=-1):
        super().__init__(axis)


class LogSoftmax(_kiln.LogSoftmax):
    """log(softmax(x)) along ``axis``, computed stably."""

    def __init__(self, axis=-1):
        super().__init__(axis)


class Dropout(_kiln.Dropout):
    """Zeroes elements with probability ``p`` (= 1 - ``keep_prob``) in training, scaling the rest."""

    def __init__(self, keep_prob=None, p=None):
        if p is None:
            p = 0.5 if keep_prob is None else 1.0 - keep_prob
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p}")
        super().__init__(p)


class MaxPool2d(_kiln.MaxPool2d):
    """The maximum over each window of [N, C, H, W]; the stride defaults to 1, as in MindSpore."""

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0, ceil_mode=False):
        k = _square(kernel_size, "kernel_size")
        super().__init__(k, _square(stride, "stride"), _padding(pad_mode, padding, k, 1, "MaxPool2d"), ceil_mode)


class AvgPool2d(_kiln.AvgPool2d):
    """The mean over each window of [N, C, H, W]; the stride defaults to 1, as in MindSpore."""

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid", padding=0):
        k = _square(kernel_size, "kernel_size")
        super().__init__(k, _square(stride, "stride"), _padding(pad_mode, padding, k, 1, "AvgPool2d"))


class AdaptiveAvgPool2d(_kiln.AdaptiveAvgPool2d):
    """Averages [N, C, H, W] down to ``output_size`` whatever H and W are (1: a global average)."""

    def __init__(self, output_size):
        super().__init__(_square(output_size, "output_size"))


class Upsample(_kiln.Upsample):
    """Resizes [N, C, H, W] by ``scale_factor`` or to ``size``, nearest or bilinear."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        if size is not None or scale_factor is None:
            raise ValueError("Upsample takes scale_factor; for a target size use kiln.ops.interpolate(x, sizes=...)")
        super().__init__(float(scale_factor), "bilinear" if mode in ("bilinear", "linear") else mode,
                         bool(align_corners))


class Embedding(_kiln.Embedding):
    """A lookup table; ``padding_idx`` (negative counts from the end) names the row that starts at zero and
    is never trained."""

    def __init__(self, vocab_size, embedding_size, use_one_hot=False, embedding_table="normal", padding_idx=None):
        if padding_idx is not None and not -vocab_size <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx {padding_idx} is not a row of a table of {vocab_size}")
        row = -1 if padding_idx is None else padding_idx % vocab_size
        super().__init__(vocab_size, embedding_size, row)
        if embedding_table != "normal":
            _init.apply(self.weight, embedding_table)
            if row >= 0:
                _init.apply(self.weight[row], "zeros")


def _recurrent_call(self, x, hx=None, seq_length=None):
    if hx is None:
        return self.forward(x)
    if isinstance(hx, (tuple, list)):
        return self.forward(x, hx[0], hx[1])
    return self.forward(x, hx)


class LSTM(_kiln.LSTM):
    """PyTorch's LSTM layout and numerics (so torch weights load); returns (output, (h_n, c_n))."""

    def __init__(self, input_size, hidden_size, num_layers=1, has_bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False):
        super().__init__(input_size, hidden_size, num_layers, has_bias, batch_first, dropout, bidirectional)

    __call__ = _recurrent_call


class GRU(_kiln.GRU):
    """A gated recurrent unit over [N, L, input_size] (batch first) or [L, N, ...]: layers, bidirectional, PyTorch
    weight names."""

    def __init__(self, input_size, hidden_size, num_layers=1, has_bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False):
        super().__init__(input_size, hidden_size, num_layers, has_bias, batch_first, dropout, bidirectional)

    __call__ = _recurrent_call


class RNN(_kiln.RNN):
    """An Elman recurrent layer (tanh or relu) over sequences: layers, bidirectional, PyTorch weight names."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", has_bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False):
        super().__init__(input_size, hidden_size, num_layers, has_bias, batch_first, dropout, bidirectional,
                         nonlinearity)

    __call__ = _recurrent_call


class MultiheadAttention(_kiln.MultiheadAttention):
    """Batch-first multi-head attention: ``mha(query, key, value, attn_mask=None, key_padding_mask=None)``."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, has_bias=True, batch_first=True):
        if not batch_first:
            raise ValueError("MultiheadAttention is batch first ([N, L, E]); pass batch_first=True")
        super().__init__(embed_dim, num_heads, has_bias)

    def __call__(self, query, key=None, value=None, attn_mask=None, key_padding_mask=None, causal=False):
        key = query if key is None else key
        value = key if value is None else value
        return self.forward(query, key, value, attn_mask, key_padding_mask, causal)


class TransformerEncoderLayer(_kiln.TransformerEncoderLayer):
    """Self-attention and a feed-forward block, each with a residual and layer norm (pre-norm with
    ``norm_first=True``)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=True, norm_first=False):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, norm_first, layer_norm_eps)

    def __call__(self, src, src_mask=None, src_key_padding_mask=None, causal=False):
        return self.forward(src, src_mask, src_key_padding_mask, causal)


make_model = _kiln.make_model


_PY_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def _argument_errors_in_python(cls):
    """Wraps a layer's ``__init__`` so that arguments of the wrong type are named in Python's terms,
    not as the C++ binding's "incompatible constructor arguments"."""
    init = cls.__init__
    signature = _inspect.signature(init)

    @_functools.wraps(init)
    def checked(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except TypeError as e:
            object.__setattr__(self, "_init_failed", True)  # no C++ cell behind it: repr must not ask for one
            text = str(e)
            if "incompatible constructor arguments" not in text:
                raise TypeError(text if text.startswith("nn.") else f"nn.{cls.__name__}: {text}") from None
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError as wrong:
                raise TypeError(f"nn.{cls.__name__}: {wrong}") from None
            expected = dict(_re.findall(r"(\w+): (int|float|bool|str)\b", text.split("Invoked with")[0]))
            problems = []
            for name, value in list(bound.arguments.items())[1:]:
                kinds = _PY_TYPES.get(expected.get(name, ""))
                wrong_bool = isinstance(value, bool) and expected.get(name) in ("int", "float")
                if kinds and (not isinstance(value, kinds) or wrong_bool):
                    problems.append(f"{name} must be {expected[name]}, not {type(value).__name__} ({value!r})")
            detail = "; ".join(problems) or "the arguments do not fit " + str(signature).replace("(self, ", "(")
            raise TypeError(f"nn.{cls.__name__}: {detail}") from None
        except BaseException:
            object.__setattr__(self, "_init_failed", True)
            raise

    cls.__init__ = checked
    return cls


for _layer in list(globals().values()):
    if isinstance(_layer, type) and issubclass(_layer, _kiln.Cell) and _layer.__module__ == __name__ \
            and "__init__" in _layer.__dict__:
        _argument_errors_in_python(_layer)
del _layer
