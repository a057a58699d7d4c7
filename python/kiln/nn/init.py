"""Initialisers: fill a tensor in place (no gradient recorded).

``apply(tensor, init)`` takes MindSpore's initialiser names ("normal",
"zeros", "ones", "xavier_uniform", "he_normal", "uniform", "truncated_normal")
or a tensor / array of the same shape; None leaves the tensor as it is.
"""
from .. import _kiln

uniform = _kiln.init.uniform
normal = _kiln.init.normal
constant = _kiln.init.constant
zeros = _kiln.init.zeros
ones = _kiln.init.ones
xavier_uniform = _kiln.init.xavier_uniform
he_normal = _kiln.init.he_normal


def he_uniform(tensor):
    fan_in, _ = _kiln.init.fans(tensor)
    bound = (6.0 / fan_in) ** 0.5
    _kiln.init.uniform(tensor, -bound, bound)


def apply(tensor, init):
    if init is None:
        return
    if isinstance(init, str):
        name = init.lower()
        fns = {"normal": lambda t: normal(t, 0.0, 0.01), "zeros": zeros, "ones": ones,
               "xavier_uniform": xavier_uniform, "he_normal": he_normal, "he_uniform": he_uniform,
               "uniform": lambda t: uniform(t, -0.07, 0.07), "truncated_normal": lambda t: normal(t, 0.0, 0.01)}
        if name not in fns:
            raise ValueError(f"unknown initialiser {init!r}; known: {', '.join(sorted(fns))}")
        fns[name](tensor)
        return
    if callable(init):
        init(tensor)
        return
    with_grad = _kiln.is_grad_enabled()
    _kiln.set_grad_enabled(False)
    try:
        value = _kiln.tensor(init)
        if tuple(value.shape) != tuple(tensor.shape):
            raise ValueError(f"initial value of shape {value.shape} for a tensor of shape {tensor.shape}")
        tensor.copy_(value)
    finally:
        _kiln.set_grad_enabled(with_grad)
