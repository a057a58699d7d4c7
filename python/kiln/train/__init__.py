"""``Model``: the training and evaluation loop (in C++, without the GIL), callbacks and metrics."""
from .. import _kiln
from .callbacks import (Callback, RunContext, ProgressBar, History, LossMonitor, TimeMonitor, ModelCheckpoint,
                        EarlyStopping, ReduceLROnPlateau, MetricsLogger, StopAtStep, LearningRateScheduler, RunTracker)
from .model import Model

Accuracy = _kiln.Accuracy
ClassificationReport = _kiln.ClassificationReport
Metric = _kiln.Metric


def TopKCategoricalAccuracy(k):  # noqa: N802 (MindSpore's class name)
    """The share of samples whose label is among the k highest outputs (MindSpore's metric)."""
    return _kiln.Accuracy(int(k))

__all__ = ["Model", "Callback", "RunContext", "ProgressBar", "History", "LossMonitor", "TimeMonitor",
           "ModelCheckpoint", "EarlyStopping", "ReduceLROnPlateau", "MetricsLogger", "StopAtStep",
           "LearningRateScheduler", "RunTracker", "Accuracy", "TopKCategoricalAccuracy", "ClassificationReport",
           "Metric"]
