"""Tensor methods for the registered ops: ``x.exp()``, ``x.softmax(axis=1)``, ...

Ops whose first input is a tensor become methods, unless the Tensor class
already has a method of that name (``sum``, ``reshape``, ... have Pythonic
signatures of their own).
"""
from . import _kiln, ops


def _method(fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


def _iter(self):
    for i in range(len(self)):
        yield self[i]


def install():
    tensor = _kiln.Tensor
    for name in ops.__all__:
        schema = ops.SCHEMAS[name]
        if not schema["inputs"] or schema["inputs"][0].endswith("*") or "backward" in schema["tags"]:
            continue
        if not hasattr(tensor, name):
            setattr(tensor, name, _method(getattr(ops, name)))
    tensor.__iter__ = _iter
    tensor.clip = lambda self, min=None, max=None: ops.clamp(self, min=min, max=max)
    tensor.matmul = lambda self, other: _kiln.matmul(self, other)
    tensor.add = lambda self, other: _kiln.add(self, other)
    tensor.sub = lambda self, other: _kiln.sub(self, other)
    tensor.mul = lambda self, other: _kiln.mul(self, other)
    tensor.div = lambda self, other: _kiln.div(self, other)
