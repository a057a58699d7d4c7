"""Autograd from Python: ``backward``, ``grad``, ``no_grad`` and MindSpore's ``value_and_grad``."""
import functools

from . import _kiln


class no_grad:
    """Context manager (and decorator) under which ops record no gradients."""

    def __enter__(self):
        self._previous = _kiln.is_grad_enabled()
        _kiln.set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        _kiln.set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Context manager that turns gradient recording back on inside ``no_grad``."""

    def __enter__(self):
        self._previous = _kiln.is_grad_enabled()
        _kiln.set_grad_enabled(True)
        return self


def grad(outputs, inputs, grad_outputs=None, retain_graph=False):
    """Gradients of ``outputs`` with respect to ``inputs`` (a tensor or a list), without touching ``.grad``.

    Returns one tensor per input (a single tensor when ``inputs`` is one tensor).
    """
    single = isinstance(inputs, _kiln.Tensor)
    outs = [outputs] if isinstance(outputs, _kiln.Tensor) else list(outputs)
    ins = [inputs] if single else list(inputs)
    gouts = [] if grad_outputs is None else ([grad_outputs] if isinstance(grad_outputs, _kiln.Tensor)
                                             else list(grad_outputs))
    result = _kiln.grad(outs, ins, gouts, retain_graph)
    return result[0] if single else tuple(result)


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False):
    """A function that returns ``(fn(*args), gradients)``, as MindSpore's ``value_and_grad``.

    ``grad_position``: the positional argument (or tuple of them) to differentiate
    with respect to; None for none. ``weights``: parameters (e.g.
    ``net.trainable_params()``) to differentiate with respect to as well. With
    both, the gradients are ``(input_grads, weight_grads)``. With ``has_aux``,
    ``fn`` returns ``(loss, aux...)`` and only the loss is differentiated.
    """
    if grad_position is None and weights is None:
        raise ValueError("value_and_grad needs grad_position or weights: there is nothing to differentiate")
    positions = (grad_position,) if isinstance(grad_position, int) else tuple(grad_position or ())
    weights = list(weights) if weights is not None else None

    def wrapper(*args):
        args = list(args)
        for p in positions:
            if p >= len(args):
                raise ValueError(f"grad_position {p} but the function got {len(args)} arguments")
            args[p] = _kiln.tensor(args[p]).detach().requires_grad_(True)
        with enable_grad():
            value = fn(*args)
        loss = value[0] if has_aux else value
        targets = [args[p] for p in positions] + (weights or [])
        grads = list(_kiln.grad([loss], targets, [], False))
        input_grads = grads[:len(positions)]
        input_grads = input_grads[0] if isinstance(grad_position, int) else tuple(input_grads)
        if weights is None:
            return value, input_grads
        weight_grads = tuple(grads[len(positions):])
        if grad_position is None:
            return value, weight_grads
        return value, (input_grads, weight_grads)

    return wrapper
