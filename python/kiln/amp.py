"""Mixed precision, MindSpore's ``mindspore.amp``: compute in float16 or
bfloat16 on float32 weights, with a loss scale for float16.

``auto_mixed_precision(net, "auto", kiln.bfloat16)`` makes ``net`` compute
under autocast: matrix products and convolutions in the low precision,
reductions, softmax, normalizations, exp/log and losses in float32, every
other op in its inputs' dtype (``docs/ops.md`` lists each op's rule).
``Model(net, loss, opt, amp_level=..., loss_scale_manager=...)`` trains so,
eagerly or compiled, and skips the updates whose gradients overflowed.
``with amp.autocast(kiln.bfloat16):`` does the same for a block of code.
"""
from . import _kiln

_LEVELS = ("O0", "O1", "O2", "O3", "auto")
# The cells O2 keeps in float32 (MindSpore's black list).
_FLOAT32_CELLS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LayerNorm", "GroupNorm")


def _low_precision(dtype, what):
    if dtype not in (_kiln.dtype.float16, _kiln.dtype.bfloat16):
        raise ValueError(f"{what}: dtype must be kiln.float16 or kiln.bfloat16, not {dtype}")
    return dtype


def _check_level(amp_level, what):
    if amp_level not in _LEVELS:
        raise ValueError(f"{what}: amp_level must be one of {', '.join(_LEVELS)}, not {amp_level!r}")


def auto_mixed_precision(network, amp_level="O0", dtype=_kiln.dtype.float16):
    """Returns ``network`` set to compute in ``dtype`` as ``amp_level`` says:

    - ``"O0"``: unchanged (float32);
    - ``"O1"`` and ``"auto"``: autocast, each op in the precision its rule names;
    - ``"O2"``: every op in ``dtype``, batch and layer norms kept in float32;
    - ``"O3"``: every op in ``dtype``.

    The parameters stay float32 and train through the casts.
    """
    _check_level(amp_level, "auto_mixed_precision")
    _low_precision(dtype, "auto_mixed_precision")
    if amp_level == "O0":
        return network
    if amp_level in ("O1", "auto"):
        network.set_autocast(dtype)
        return network
    network.to_float(dtype)
    if amp_level == "O2":
        for _, cell in network.cells_and_names():
            if cell.type_name() in _FLOAT32_CELLS:
                cell.to_float(_kiln.dtype.float32)
    return network


class autocast:
    """``with amp.autocast(kiln.bfloat16):`` runs the block under autocast (see the module's help)."""

    def __init__(self, dtype=_kiln.dtype.float16):
        self._scope = _kiln._Autocast(_low_precision(dtype, "autocast"))

    def __enter__(self):
        self._scope.__enter__()
        return self

    def __exit__(self, *exc):
        return self._scope.__exit__(*exc)


class LossScaleManager:
    """Base of the loss scale managers ``Model(loss_scale_manager=...)`` takes."""

    def get_loss_scale(self):
        return self._scale["initial"]

    def get_drop_overflow_update(self):
        return True


class FixedLossScaleManager(LossScaleManager):
    """A loss scale that stays ``loss_scale``; a step whose gradients overflow is skipped."""

    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        if not loss_scale > 0:
            raise ValueError(f"FixedLossScaleManager: loss_scale must be positive, got {loss_scale}")
        if not drop_overflow_update:
            raise ValueError("FixedLossScaleManager(drop_overflow_update=False): Kiln always skips the update of a "
                             "step whose gradients overflowed (an update from inf or NaN gradients ruins the "
                             "weights); leave drop_overflow_update=True")
        self._scale = dict(initial=float(loss_scale), growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                           dynamic=False)


class DynamicLossScaleManager(LossScaleManager):
    """A loss scale divided by ``scale_factor`` when gradients overflow (the step is skipped) and
    multiplied by it after ``scale_window`` steps without."""

    def __init__(self, init_loss_scale=2 ** 24, scale_factor=2, scale_window=2000):
        if not init_loss_scale > 0 or not scale_factor > 1 or not scale_window >= 1:
            raise ValueError("DynamicLossScaleManager: init_loss_scale must be positive, scale_factor above 1 and "
                             f"scale_window at least 1; got {init_loss_scale}, {scale_factor}, {scale_window}")
        self._scale = dict(initial=float(init_loss_scale), growth_factor=float(scale_factor),
                           backoff_factor=1.0 / scale_factor, growth_interval=int(scale_window), dynamic=True)


def all_finite(inputs):
    """A bool scalar tensor: True when no value of any of ``inputs`` is inf or NaN."""
    from . import ops
    return ops.all_finite(list(inputs))


def _configure(model, network, amp_level, loss_scale_manager, keep_batchnorm_fp32):
    """``Model``'s amp_level and loss_scale_manager on its C++ model."""
    _check_level(amp_level, "Model")
    if loss_scale_manager is not None and not isinstance(loss_scale_manager, LossScaleManager):
        raise TypeError("loss_scale_manager must be a kiln.amp.FixedLossScaleManager or DynamicLossScaleManager, not "
                        f"{type(loss_scale_manager).__name__}")
    scale = loss_scale_manager._scale if loss_scale_manager is not None else None
    dtype = _kiln.dtype.float16
    if amp_level == "O0":
        dtype = network.autocast  # a network auto_mixed_precision set up: its loss under autocast too
        if dtype is None and scale is None:
            return
    elif amp_level == "O2" and not keep_batchnorm_fp32:
        auto_mixed_precision(network, "O3", dtype)
    elif amp_level in ("O2", "O3"):
        auto_mixed_precision(network, amp_level, dtype)
    # The forward pass and the loss under autocast (O2 and O3's casts inside
    # the network win there), and float16's loss scale.
    model.set_mixed_precision(dtype, scale)
