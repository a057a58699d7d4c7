"""General transforms (MindSpore's ``dataset.transforms``)."""
from .. import _kiln


def TypeCast(data_type):
    """Casts the column to ``data_type`` (a kiln dtype, a NumPy dtype or a name)."""
    return _kiln.vision.type_cast(data_type)


def Compose(transforms):
    """The transforms in order, as one list for map()."""
    return list(transforms)


def PyFunc(fn):
    """A Python function of a NumPy array as a transform."""
    return _kiln.Transform(fn)
