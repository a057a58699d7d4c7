"""Tensors with unknown dimensions, as MindSpore writes them for ``Cell.set_inputs``:
``Tensor(shape=[None, 784], dtype=kiln.float32)``. Such a tensor holds zeros
with each unknown dimension 1; which dimensions are unknown is kept here."""
import weakref

from . import _kiln

_unknown = {}  # id(tensor) -> its shape with None for the unknown dimensions
_tensor_init = _kiln.Tensor.__init__


def _init(self, data=None, dtype=None, shape=None):
    if data is None and isinstance(shape, (list, tuple)) and any(d is None for d in shape):
        _tensor_init(self, None, dtype, [1 if d is None else d for d in shape])
        _unknown[id(self)] = list(shape)
        weakref.finalize(self, _unknown.pop, id(self), None)
        return
    _tensor_init(self, data, dtype, shape)


def install():
    _kiln.Tensor.__init__ = _init


def shape_with_unknowns(t):
    """A tensor's shape, with None where ``Tensor(shape=...)`` left a dimension unknown."""
    return list(_unknown.get(id(t), t.shape))
