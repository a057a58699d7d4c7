"""``Model(net, loss_fn=..., optimizer=..., metrics=...)``: train, eval and predict, MindSpore's shape."""
from .. import _kiln
from .callbacks import adapt


def _metrics(metrics):
    if metrics is None:
        return []
    if isinstance(metrics, dict):
        return list(metrics.values())
    out = []
    for m in metrics:
        if isinstance(m, _kiln.Metric):
            out.append(m)
            continue
        name = str(m).lower()
        k = name[4:-9] if name.startswith("top_") and name.endswith("_accuracy") else ""
        if name in ("accuracy", "acc", "top_1_accuracy"):
            out.append(_kiln.Accuracy(1))
        elif k.isdigit() and int(k) >= 1:
            out.append(_kiln.Accuracy(int(k)))
        elif name == "top_k_categorical_accuracy":
            raise ValueError("'top_k_categorical_accuracy' needs its k: name it 'top_5_accuracy' (any k), or pass "
                             "kiln.train.TopKCategoricalAccuracy(5)")
        else:
            raise ValueError(f"unknown metric {m!r}; use 'accuracy', 'top_5_accuracy' (any k) or a kiln.train metric "
                             "object")
    return out


def _batches(dataset, what, two_columns=True):
    if isinstance(dataset, _kiln.BatchSource):
        return dataset
    columns = getattr(dataset, "_columns", [])
    if two_columns and len(columns) > 2:
        raise ValueError(f"Model(net, loss_fn=...) trains and evaluates on (input, label) datasets, but {what} has "
                         f"the columns {columns}; give Model a network that takes every column and returns the loss "
                         "(loss_fn=None), or write the step as a loop over dataset.create_tuple_iterator()")
    if hasattr(dataset, "_batch_source"):
        return dataset._batch_source()
    raise TypeError(f"{what} must be a kiln.dataset dataset, not {type(dataset).__name__}")


class Model:
    """The training loop around a network, a loss and an optimizer.

    With ``loss_fn=None`` the network computes its own loss from every
    column of a batch, ``network(*columns) -> loss`` (MindSpore's
    ``Model(net_with_loss, optimizer=...)``): datasets may then have any
    number of columns, training runs eagerly, and ``eval`` gives the loss.

    ``train`` and ``eval`` run in C++ without holding the GIL; Python cells,
    losses, callbacks and transforms take it when they run. In graph mode
    (``kiln.set_context(mode=kiln.GRAPH_MODE)``) the training step and
    inference are compiled. Ctrl-C stops training after the current step
    and raises KeyboardInterrupt, with the weights of the steps done.

    ``amp_level`` trains in mixed precision (``kiln.amp``): ``"O1"`` and
    ``"auto"`` under autocast in float16, ``"O2"`` with the network in
    float16 but its norms (``keep_batchnorm_fp32``), ``"O3"`` all in
    float16; the loss is computed in float32, and float16 trains with a
    dynamic loss scale unless ``loss_scale_manager`` names another. A network
    ``amp.auto_mixed_precision`` set up (bfloat16 too) keeps its setting
    with ``amp_level="O0"``, its loss computed under the same autocast.
    """

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, eval_network=None, amp_level="O0",
                 loss_scale_manager=None, keep_batchnorm_fp32=True, **options):
        for key in options:
            if key not in ("eval_indexes", "boost_level"):
                raise TypeError(f"Model() got an unexpected keyword argument {key!r}")
        if optimizer is None and loss_fn is None:
            raise ValueError("Model needs a loss_fn to evaluate, and an optimizer as well to train: "
                             "Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=nn.SGD(net.trainable_params()))")
        self.network = network
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        if loss_fn is None:
            if metrics:
                raise ValueError("metrics need the network's outputs, and a network without loss_fn gives its loss; "
                                 "evaluate the inner network with a Model of its own")
            columns = self._columns = [2]  # how many of a batch's columns the network takes (set per dataset)
            self._model = _kiln.Model.with_loss_network(network, lambda *batch: network(*batch[:columns[0]]),
                                                        optimizer)
        else:
            self._columns = None
            self._model = _kiln.Model(network, loss_fn, optimizer, _metrics(metrics))
        from ..amp import _configure
        _configure(self._model, network, amp_level, loss_scale_manager, keep_batchnorm_fp32)
        from ..nn.cell import dynamic_axes
        declared = dynamic_axes(network)
        if declared:  # graph mode: a short last batch, text of any length, compile as expected
            self._model.set_dynamic_axes(declared)
        self.epochs_planned = 0

    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, valid_dataset=None, **options):
        """Trains for ``epoch`` epochs; returns one dict per epoch (loss, val_loss, val_accuracy, seconds, ...).

        MindSpore's ``sink_size``, ``initial_epoch`` and ``valid_frequency`` are accepted and have no effect here.
        """
        for key in options:
            if key not in ("sink_size", "initial_epoch", "valid_frequency", "valid_dataset_sink_mode"):
                raise TypeError(f"Model.train() got an unexpected keyword argument {key!r}")
        if self.optimizer is None:
            raise ValueError("this Model has no optimizer, so it evaluates and predicts only; to train, make it "
                             "with one: Model(net, loss_fn, optimizer=nn.SGD(net.trainable_params()), metrics=...)")
        if callbacks is not None and not isinstance(callbacks, (list, tuple)):
            callbacks = [callbacks]
        self.epochs_planned = epoch
        cbs = adapt(callbacks, self, epoch)
        tracker = _kiln.RunTracker.from_environment()  # inside a Kiln Studio job: metrics go to the studio
        if tracker is not None:
            cbs.append(tracker)
        schedule = getattr(self.optimizer, "schedule", None)
        if schedule is not None:
            cbs.insert(0, _kiln.LearningRateScheduler(schedule))
        valid = self._batches(valid_dataset, "valid_dataset") if valid_dataset is not None else None
        valid_columns = self._columns and self._columns[0]
        batches = self._batches(train_dataset, "train_dataset")
        if valid is not None and self._columns is not None and valid_columns != self._columns[0]:
            raise ValueError(f"train_dataset has {self._columns[0]} columns and valid_dataset {valid_columns}; the "
                             "network takes the same columns from both")
        self._place()
        history = self._model.train(epoch, batches, cbs, valid)
        return [h.as_dict() for h in history]

    def eval(self, valid_dataset, callbacks=None, dataset_sink_mode=False):
        """The mean loss and the metrics over a dataset, in inference mode: {'loss': ..., 'accuracy': ...}."""
        self._place()
        return self._model.eval(self._batches(valid_dataset, "valid_dataset"))

    def _place(self):
        # The network on set_context's device (its parameters move in place,
        # so the optimizer's follow); batches are copied there as they come.
        from ..context import device
        self.network.to(device())

    def _batches(self, dataset, what):
        if self._columns is None:
            return _batches(dataset, what)
        # The network takes the dataset's columns (a one-column dataset's
        # batches also carry a placeholder label, which it does not get).
        self._columns[0] = len(getattr(dataset, "_columns", [])) or 2
        return _batches(dataset, what, two_columns=False)

    def predict(self, *predict_data):
        if len(predict_data) != 1:
            raise ValueError("predict takes one input tensor")
        x = predict_data[0]
        self._place()
        return self._model.predict(x if isinstance(x, _kiln.Tensor) else _kiln.tensor(x))

    def __repr__(self):
        loss = type(self.loss_fn).__name__ if self.loss_fn is not None else "in the network"
        optimizer = type(self.optimizer).__name__ if self.optimizer is not None else "none (evaluation only)"
        return f"Model(network={type(self.network).__name__}, loss_fn={loss}, optimizer={optimizer})"

    def stop_training(self):
        self._model.stop_training()

    @property
    def global_step(self):
        return self._model.global_step

    @property
    def compiled_graphs(self):
        """(training-step graphs, inference graphs) compiled so far; (0, 0) in eager mode."""
        return self._model.compiled_graphs
