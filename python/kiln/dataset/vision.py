"""Image transforms (MindSpore's ``dataset.vision`` names), run in C++ by the pipeline's workers.

Images are HWC unless ``is_hwc=False``; ``HWC2CHW`` turns them into what Kiln's
convolution layers take.
"""
from .. import _kiln

_v = _kiln.vision


def _hw(size):
    return (size, size) if isinstance(size, int) else tuple(size)


def Rescale(rescale, shift=0.0):
    """x * rescale + shift, as float32."""
    return _v.rescale(rescale, shift)


def Normalize(mean, std, is_hwc=True):
    return _v.normalize(list(mean), list(std), is_hwc)


def HWC2CHW():
    return _v.hwc_to_chw()


def Decode(channels=3):
    return _v.decode(channels)


def Resize(size, is_hwc=True):
    return _v.resize(*_hw(size), is_hwc)


def RandomCrop(size, padding=0, fill_value=0, is_hwc=True):
    return _v.random_crop(*_hw(size), padding if isinstance(padding, int) else padding[0], fill_value, is_hwc)


def CenterCrop(size, is_hwc=True):
    return _v.center_crop(*_hw(size), is_hwc)


def RandomHorizontalFlip(prob=0.5, is_hwc=True):
    return _v.random_horizontal_flip(prob, is_hwc)


def RandomRotation(degrees, fill_value=0, is_hwc=True):
    return _v.random_rotation(degrees if not isinstance(degrees, (tuple, list)) else max(map(abs, degrees)),
                              fill_value, is_hwc)


def RandomErasing(prob=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, is_hwc=False):
    return _v.random_erasing(prob, tuple(scale), tuple(ratio), value, is_hwc)
