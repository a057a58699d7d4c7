"""Callbacks written in Python, Kiln's built-in ones, and a progress bar for terminals and notebooks.

Subclass :class:`Callback` and override ``on_train_begin(model)``,
``on_step_end(model, info)``, ``on_epoch_end(model, info)``, ``on_train_end(model)``,
or MindSpore's ``begin/step_end/epoch_end/end(run_context)``.
"""
import sys
import types

from .. import _kiln

LossMonitor = _kiln.LossMonitor
TimeMonitor = _kiln.TimeMonitor
ModelCheckpoint = _kiln.ModelCheckpoint
EarlyStopping = _kiln.EarlyStopping
ReduceLROnPlateau = _kiln.ReduceLROnPlateau
MetricsLogger = _kiln.MetricsLogger
StopAtStep = _kiln.StopAtStep
RunTracker = _kiln.RunTracker
LearningRateScheduler = _kiln.LearningRateScheduler


class Callback:
    """Base of Python callbacks; every method is optional."""

    def on_train_begin(self, model):
        pass

    def on_step_end(self, model, info):
        pass

    def on_epoch_end(self, model, info):
        pass

    def on_train_end(self, model):
        pass


class RunContext:
    """MindSpore's view of a training run, for ``step_end(run_context)`` callbacks."""

    def __init__(self, model):
        self._model = model
        self._params = types.SimpleNamespace(train_network=model.network, optimizer=model.optimizer,
                                             cur_epoch_num=0, cur_step_num=0, batch_num=0, epoch_num=0,
                                             net_outputs=None)

    def original_args(self):
        return self._params

    def request_stop(self):
        self._model.stop_training()


class _Adapter(_kiln.Callback):
    """Runs a Python callback from the C++ loop, handing it the Python Model."""

    def __init__(self, callback, model, epochs):
        _kiln.Callback.__init__(self)
        self.callback = callback
        self.model = model
        self.context = RunContext(model)
        self.context._params.epoch_num = epochs

    def on_train_begin(self, _):
        if hasattr(self.callback, "on_train_begin"):
            self.callback.on_train_begin(self.model)
        if hasattr(self.callback, "begin"):
            self.callback.begin(self.context)

    def on_step_end(self, _, info):
        if hasattr(self.callback, "on_step_end"):
            self.callback.on_step_end(self.model, info)
        if hasattr(self.callback, "step_end"):
            p = self.context._params
            p.cur_epoch_num, p.cur_step_num, p.batch_num = info.epoch, info.step, info.batches_per_epoch
            p.net_outputs = _kiln.tensor(info.loss)
            self.callback.step_end(self.context)

    def on_epoch_end(self, _, info):
        if hasattr(self.callback, "on_epoch_end"):
            self.callback.on_epoch_end(self.model, info)
        if hasattr(self.callback, "epoch_end"):
            self.context._params.cur_epoch_num = info.epoch
            self.context._params.net_outputs = _kiln.tensor(info.loss)
            self.callback.epoch_end(self.context)

    def on_train_end(self, _):
        if hasattr(self.callback, "on_train_end"):
            self.callback.on_train_end(self.model)
        if hasattr(self.callback, "end"):
            self.callback.end(self.context)


def adapt(callbacks, model, epochs):
    out = []
    for cb in callbacks or []:
        out.append(cb if isinstance(cb, _kiln.Callback) else _Adapter(cb, model, epochs))
    return out


class History(Callback):
    """Records the loss of every step and the summary of every epoch."""

    def __init__(self):
        self.step_losses = []
        self.epochs = []

    def on_step_end(self, model, info):
        self.step_losses.append(info.loss)

    def on_epoch_end(self, model, info):
        self.epochs.append(info.as_dict())


def _in_notebook():
    try:
        from IPython import get_ipython
        shell = get_ipython()
        return shell is not None and "Terminal" not in type(shell).__name__
    except ImportError:
        return False


class ProgressBar(Callback):
    """A progress bar per epoch with the running loss: a widget in Jupyter (with ipywidgets), text elsewhere."""

    def __init__(self, every=10):
        self.every = every
        self._bar = None

    def _make(self, total, epoch, epochs):
        try:
            if _in_notebook():
                try:
                    import ipywidgets  # noqa: F401
                    from tqdm.notebook import tqdm
                except ImportError:
                    from tqdm import tqdm
            else:
                from tqdm import tqdm
            return tqdm(total=total, desc=f"epoch {epoch}/{epochs}", file=sys.stdout, leave=True)
        except ImportError:
            return None

    def on_step_end(self, model, info):
        if self._bar is None:
            self._bar = self._make(info.batches_per_epoch, info.epoch, self._epochs)
            self._done = 0
        if info.batch % self.every == 0 or info.batch == info.batches_per_epoch:
            if self._bar is not None:
                self._bar.update(info.batch - self._done)
                self._bar.set_postfix(loss=f"{info.loss:.4f}")
            else:
                print(f"epoch {info.epoch} step {info.batch}/{info.batches_per_epoch} loss {info.loss:.4f}")
            self._done = info.batch

    def on_train_begin(self, model):
        self._epochs = model.epochs_planned

    def on_epoch_end(self, model, info):
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{info.loss:.4f}")
            self._bar.close()
        self._bar = None
