"""Optimizers with MindSpore's names and arguments, and learning-rate schedules.

``learning_rate`` is a number, a list (one value per step, as MindSpore's
dynamic learning rates) or a callable ``step -> lr`` (``kiln.nn.schedules``).
``opt.step()`` applies the gradients in the parameters' ``.grad`` (a
hand-written loop); ``opt(grads)`` applies given gradients (MindSpore's form).
"""
import math

from .. import _kiln

schedules = _kiln.schedules
Optimizer = _kiln.Optimizer
clip_grad_norm = _kiln.clip_grad_norm


def _schedule(learning_rate):
    if callable(learning_rate):
        return float(learning_rate(0)), learning_rate
    if isinstance(learning_rate, (list, tuple)):
        values = [float(v) for v in learning_rate]
        if not values:
            raise ValueError("an empty learning_rate list")
        return values[0], lambda step: values[min(step, len(values) - 1)]
    return float(learning_rate), None


class _Scheduled:
    """What every optimizer here adds to its C++ class: a schedule, and applying given gradients."""

    def _set_schedule(self, schedule):
        self.schedule = schedule

    def step(self):
        if self.schedule is not None:
            self.lr = float(self.schedule(self.steps))
        super().step()

    def __repr__(self):
        count = sum(int(p.numel()) for p in self.parameters)
        schedule = ", scheduled" if self.schedule is not None else ""
        return (f"{type(self).__name__}({len(self.parameters)} parameters, {count} values, "
                f"learning_rate={self.lr:g}{schedule})")

    def __call__(self, grads):
        params = self.parameters
        if len(grads) != len(params):
            raise ValueError(f"{len(grads)} gradients for {len(params)} parameters")
        for p, g in zip(params, grads):
            p.grad = g
        self.step()
        return True


class SGD(_Scheduled, _kiln.SGD):
    """Stochastic gradient descent, with momentum, Nesterov momentum and weight decay."""

    def __init__(self, params, learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 loss_scale=1.0):
        if dampening:
            raise ValueError("SGD: dampening is not supported")
        params = list(params)
        lr, schedule = _schedule(learning_rate)
        _kiln.SGD.__init__(self, params, lr, momentum, weight_decay, nesterov)
        self.parameters = _flat(params)
        self._set_schedule(schedule)


class Momentum(SGD):
    """MindSpore's name for SGD with momentum: ``Momentum(params, learning_rate, momentum)``."""

    def __init__(self, params, learning_rate, momentum, weight_decay=0.0, loss_scale=1.0, use_nesterov=False):
        super().__init__(params, learning_rate, momentum, 0.0, weight_decay, use_nesterov)


class Adam(_Scheduled, _kiln.Adam):
    """Adam: per-parameter step sizes from running moments of the gradients (L2 weight decay added to them)."""

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                 loss_scale=1.0, use_nesterov=False):
        params = list(params)
        lr, schedule = _schedule(learning_rate)
        _kiln.Adam.__init__(self, params, lr, beta1, beta2, eps, weight_decay, False)
        self.parameters = _flat(params)
        self._set_schedule(schedule)


class AdamW(_Scheduled, _kiln.Adam):
    """Adam with decoupled weight decay (PyTorch's AdamW; MindSpore's AdamWeightDecay)."""

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
        params = list(params)
        lr, schedule = _schedule(learning_rate)
        _kiln.Adam.__init__(self, params, lr, beta1, beta2, eps, weight_decay, True)
        self.parameters = _flat(params)
        self._set_schedule(schedule)


class AdamWeightDecay(AdamW):
    """MindSpore's name for AdamW (decoupled weight decay); its default eps is 1e-6."""

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0):
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay)


class RMSProp(_Scheduled, _kiln.RMSProp):
    """RMSProp: steps scaled by a running mean of squared gradients, with optional momentum."""

    def __init__(self, params, learning_rate=0.1, decay=0.9, momentum=0.0, epsilon=1e-10, weight_decay=0.0):
        params = _flat(list(params))
        lr, schedule = _schedule(learning_rate)
        _kiln.RMSProp.__init__(self, params, lr, decay, epsilon, weight_decay, momentum)
        self.parameters = params
        self._set_schedule(schedule)


def _flat(params):
    out = []
    for p in params:
        out.extend(p["params"] if isinstance(p, dict) else [p])
    return out


def cosine_decay_lr(min_lr, max_lr, total_step, step_per_epoch, decay_epoch):
    """MindSpore's list form: one learning rate per step, cosine-decayed per epoch."""
    out = []
    for i in range(total_step):
        epoch = min(i // step_per_epoch, decay_epoch)
        out.append(min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * epoch / decay_epoch)))
    return out


def piecewise_constant_lr(milestone, learning_rates):
    """One learning rate per step: learning_rates[i] up to step milestone[i]."""
    out, last = [], 0
    for m, lr in zip(milestone, learning_rates):
        out.extend([lr] * (m - last))
        last = m
    return out


def exponential_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    out = []
    for i in range(total_step):
        p = (i // step_per_epoch) / decay_epoch
        out.append(learning_rate * decay_rate ** (math.floor(p) if is_stair else p))
    return out
