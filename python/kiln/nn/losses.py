"""Losses: ``loss(logits, labels) -> Tensor``. Subclass ``LossBase`` and write ``construct`` for your own."""
from .. import _kiln, ops


class LossBase(_kiln.LossCell):
    """Base of losses written in Python: ``construct(logits, labels)`` returns the loss.

    ``get_loss(x)`` applies the reduction given at construction.
    """

    def __init__(self, reduction="mean"):
        _kiln.LossCell.__init__(self)
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction is 'mean', 'sum' or 'none', not {reduction!r}")
        self.reduction = reduction

    def get_loss(self, x):
        if self.reduction == "mean":
            return x.mean()
        if self.reduction == "sum":
            return x.sum()
        return x


class CrossEntropyLoss(_kiln.CrossEntropyLoss):
    """Cross entropy of logits [N, C] (or [N, C, ...]) and class indices [N] (any integer dtype)."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(weight, ignore_index, reduction, label_smoothing)
        self.reduction = reduction


class SoftmaxCrossEntropyWithLogits(LossBase):
    """MindSpore's loss: ``sparse=True`` takes class indices, otherwise one-hot or soft labels."""

    def __init__(self, sparse=False, reduction="none"):
        super().__init__(reduction)
        self.sparse = sparse
        self._indexed = _kiln.CrossEntropyLoss(None, -100, reduction, 0.0)

    def construct(self, logits, labels):
        if self.sparse:
            return self._indexed(logits, labels)
        return self.get_loss(-(labels * ops.log_softmax(logits, axis=-1)).sum(axis=-1))


class NLLLoss(_kiln.NLLLoss):
    """Negative log-likelihood of log-probabilities [N, C] and class indices [N]; ``weight`` per class."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(weight, ignore_index, reduction)
        self.reduction = reduction


class MSELoss(_kiln.MSELoss):
    """Mean squared error of predictions and targets of one shape."""

    def __init__(self, reduction="mean"):
        super().__init__(reduction)
        self.reduction = reduction


class L1Loss(_kiln.L1Loss):
    """Mean absolute error of predictions and targets of one shape."""

    def __init__(self, reduction="mean"):
        super().__init__(reduction)
        self.reduction = reduction


class SmoothL1Loss(_kiln.SmoothL1Loss):
    """Huber-style loss: squared below ``beta``, absolute above it."""

    def __init__(self, beta=1.0, reduction="mean"):
        super().__init__(beta, reduction)
        self.reduction = reduction


class BCEWithLogitsLoss(_kiln.BCEWithLogitsLoss):
    """Binary cross entropy of logits and 0/1 (or soft) targets of one shape, computed stably from the logits."""

    def __init__(self, reduction="mean", weight=None, pos_weight=None):
        if weight is not None or pos_weight is not None:
            raise ValueError("BCEWithLogitsLoss: weight and pos_weight are not supported")
        super().__init__(reduction)
        self.reduction = reduction


def _loss_repr(self):
    reduction = getattr(self, "reduction", None)
    return f"{type(self).__name__}(reduction={reduction!r})" if isinstance(reduction, str) else f"{type(self).__name__}()"


_kiln.LossCell.__repr__ = _loss_repr
