"""MindSpore's wrapper cells: a network with its loss, one training step, and evaluation.

``TrainOneStepCell(WithLossCell(net, loss_fn), optimizer)`` is the loop body
MindSpore code writes by hand; calling it runs forward, backward and the
update and returns the loss.
"""
from .. import _kiln
from ..autograd import no_grad, value_and_grad
from .cell import Cell


class WithLossCell(Cell):
    """``loss_fn(backbone(data), label)``: a network and its loss as one cell."""

    def __init__(self, backbone, loss_fn):
        super().__init__()
        self._backbone = backbone
        self._loss_fn = loss_fn

    def construct(self, data, label):
        return self._loss_fn(self._backbone(data), label)

    @property
    def backbone_network(self):
        return self._backbone


class TrainOneStepCell(Cell):
    """One training step of ``network`` (which returns the loss) with ``optimizer``: returns the loss.

    ``sens`` scales the gradients, as the loss scale MindSpore passes there.
    """

    def __init__(self, network, optimizer, sens=1.0):
        super().__init__()
        self.network = network
        self.optimizer = optimizer
        self.weights = list(optimizer.parameters)
        self.sens = float(sens)
        self._step = value_and_grad(lambda *inputs: self.network(*inputs), grad_position=None, weights=self.weights)

    def construct(self, *inputs):
        loss, grads = self._step(*inputs)
        if self.sens != 1.0:
            grads = tuple(g * self.sens for g in grads)
        self.optimizer(grads)
        return loss


class WithEvalCell(Cell):
    """``(loss, outputs, label)`` of ``network`` on a batch, in inference mode: what evaluation reads."""

    def __init__(self, network, loss_fn, add_cast_fp32=False):
        super().__init__()
        self._network = network
        self._loss_fn = loss_fn
        self._cast = add_cast_fp32

    def construct(self, data, label):
        with no_grad():
            outputs = self._network(data)
            if self._cast and outputs.dtype != _kiln.dtype.float32:
                outputs = outputs.astype(_kiln.dtype.float32)
            return self._loss_fn(outputs, label), outputs, label
