"""Execution mode (eager or graph) and ``kiln.jit``."""
import functools
import warnings

from . import _kiln
from .autograd import no_grad

GRAPH_MODE = 0
PYNATIVE_MODE = 1


# MindSpore's device targets and Kiln's backends.
_TARGETS = {"cpu": "cpu", "gpu": "cuda"}
_device = "cpu"


def set_context(mode=None, device_target=None, device_id=None, **options):
    """Sets the process-wide execution mode and device, as MindSpore's ``set_context``.

    ``mode=kiln.GRAPH_MODE``: ``Model.train/eval/predict`` trace the network
    and run it as a compiled graph; ``kiln.PYNATIVE_MODE`` (the default) runs
    every op eagerly. ``device_target`` is ``"CPU"`` (the default) or
    ``"GPU"`` (the CUDA backend, GPU ``device_id``), or a device of another
    backend by Kiln's name (``"reference"``): ``Model`` moves its network
    there and copies each batch to it. Other MindSpore options have no
    meaning here and are ignored with a warning naming them.
    """
    global _device
    if mode is not None:
        if mode not in (GRAPH_MODE, PYNATIVE_MODE):
            raise ValueError(f"mode must be kiln.GRAPH_MODE or kiln.PYNATIVE_MODE, not {mode!r}")
        _kiln.set_mode("graph" if mode == GRAPH_MODE else "eager")
    if device_target is not None or device_id is not None:
        target = str(device_target if device_target is not None else get_context("device_target")).lower()
        if target == "ascend":
            raise ValueError("device_target 'Ascend' is not a Kiln backend; use 'CPU' or 'GPU'")
        name = _TARGETS.get(target, target)
        if device_id is not None:
            if not isinstance(device_id, int) or device_id < 0:
                raise ValueError(f"device_id must be a non-negative int, not {device_id!r}")
            name = f"{name.split(':')[0]}:{device_id}"
        _device = _kiln.checked_device(name)  # a backend this build lacks is named, with those it has
    if options:
        warnings.warn("set_context ignores " + ", ".join(sorted(options)), stacklevel=2)


def get_context(key):
    if key == "mode":
        return GRAPH_MODE if _kiln.get_mode() == "graph" else PYNATIVE_MODE
    if key == "device_target":
        kind = _device.split(":")[0]
        return {"cpu": "CPU", "cuda": "GPU"}.get(kind, kind)
    if key == "device_id":
        return int(_device.split(":")[1]) if ":" in _device else 0
    raise ValueError(f"unknown context key {key!r}; known: 'mode', 'device_target', 'device_id'")


def device():
    """The device ``set_context`` chose, by Kiln's name ("cpu", "cuda:0")."""
    return _device


class _Compiled:
    """A function or Cell traced on its first call and run as a compiled graph after."""

    def __init__(self, target, inference, dynamic=None):
        self._target = target
        self._inference = inference
        self._dynamic = dynamic
        self._compiled = None
        functools.update_wrapper(self, target if callable(target) and hasattr(target, "__name__") else self.__call__)

    def __call__(self, *args):
        inputs = [a if isinstance(a, _kiln.Tensor) else _kiln.tensor(a) for a in args]
        dynamic = self._dynamic
        if isinstance(self._target, _kiln.Cell):
            from .nn.cell import dynamic_axes
            declared = dynamic_axes(self._target, inputs)  # checks the call against set_inputs
            if dynamic is None:
                dynamic = declared
        if self._compiled is None:
            if isinstance(self._target, _kiln.Cell) and len(inputs) == 1:
                self._compiled = _kiln.compile_cell(self._target, inputs, self._inference, dynamic)
            elif isinstance(self._target, _kiln.Cell):
                # A Python cell of several inputs, traced through its call; its
                # parameters and buffers are read live, as a one-input cell's.
                cell = self._target

                def call(*xs):
                    with no_grad():
                        return cell(*xs)
                self._compiled = _kiln.compile_function(call, inputs, cell.type_name(), dynamic)
            else:
                name = getattr(self._target, "__name__", "function")
                self._compiled = _kiln.compile_function(self._target, inputs, name, dynamic)
        outputs = self._compiled(inputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    @property
    def graph(self):
        """The optimized graph last run, as text (after the first call)."""
        return self._compiled.graph if self._compiled else None

    @property
    def compiles(self):
        return self._compiled.compiles if self._compiled else 0


def jit(fn=None, *, inference=False, dynamic=None):
    """Compiles a function of tensors, or a Cell, into a graph on its first call.

    The function is traced at the op level: Python control flow on shapes and
    constants runs while tracing, and reading a tensor's value (``.item()``,
    ``if x.sum() > 0``) fails naming the cell, the line and the way out. A new
    input shape compiles again. Use as ``@kiln.jit`` or ``kiln.jit(net)``.

    ``dynamic`` declares input axes whose size varies (a batch, a length):
    ``[(0, 0)]``, or ``[{'input': 0, 'axis': 1, 'buckets': [32, 64, 128]}]``
    to pad that axis up to the next bucket (with ``pad_value``, 0 unless
    given) and cut the outputs back, so that at most one graph per bucket is
    compiled. Pad only axes whose padded positions cannot reach the real
    ones (a batch in inference, a masked sequence). A Cell given
    ``set_inputs`` with ``None`` dimensions has those axes dynamic unless
    ``dynamic`` says otherwise, and calls that do not fit the declaration
    are refused.
    """
    if fn is None:
        return lambda f: _Compiled(f, inference, dynamic)
    return _Compiled(fn, inference, dynamic)
