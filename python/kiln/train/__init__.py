"""``Model``: the training and evaluation loop (in C++, without the GIL), callbacks and metrics."""
from .. import _kiln
from .callbacks import (Callback, RunContext, ProgressBar, History, LossMonitor, TimeMonitor, ModelCheckpoint,
                        EarlyStopping, ReduceLROnPlateau, MetricsLogger, StopAtStep, LearningRateScheduler, RunTracker)
from .model import Model

Accuracy = _kiln.Accuracy
ClassificationReport = _kiln.ClassificationReport
Metric = _kiln.Metric

__all__ = ["Model", "Callback", "RunContext", "ProgressBar", "History", "LossMonitor", "TimeMonitor",
           "ModelCheckpoint", "EarlyStopping", "ReduceLROnPlateau", "MetricsLogger", "StopAtStep",
           "LearningRateScheduler", "RunTracker", "Accuracy", "ClassificationReport", "Metric"]
