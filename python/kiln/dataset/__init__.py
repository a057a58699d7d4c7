"""Datasets, in the shape of ``mindspore.dataset``, run by Kiln's C++ pipeline.

A dataset is a source (NumPy arrays, a Python object with ``__getitem__`` and
``__len__``, a generator, or a built-in reader) plus stages: ``map`` (Kiln's
vision transforms, which run in C++, or Python functions of NumPy arrays),
``shuffle``, ``batch``, ``repeat``. The stages run in the pipeline's worker
threads when a Model trains on it, or when it is iterated.
"""
import copy
import itertools

import numpy as np

from .. import _kiln
from . import vision, transforms

__all__ = ["Dataset", "NumpySlicesDataset", "GeneratorDataset", "FashionMnistDataset", "MnistDataset",
           "Cifar10Dataset", "ImageFolderDataset", "vision", "transforms", "config"]

_seed_counter = itertools.count()


class config:
    """Process-wide dataset settings (MindSpore's ``dataset.config``)."""
    _seed = 0
    _workers = 2

    @staticmethod
    def set_seed(seed):
        config._seed = int(seed)

    @staticmethod
    def get_seed():
        return config._seed

    @staticmethod
    def set_num_parallel_workers(n):
        config._workers = int(n)


def _transforms(operations):
    ops = operations if isinstance(operations, (list, tuple)) else [operations]
    out = []
    for op in ops:
        if isinstance(op, _kiln.Transform):
            out.append(op)
        elif callable(op):
            out.append(_kiln.Transform(op))
        else:
            raise TypeError(f"map() takes transforms or Python callables, not {type(op).__name__}")
    return out


class Dataset:
    """A source and the stages applied to it; every stage returns a new Dataset."""

    def __init__(self, source, column_names, shuffle=False):
        self._source = source  # a _kiln.Dataset
        self._columns = list(column_names)
        self._shuffle = shuffle
        self._seed = config.get_seed() + next(_seed_counter)
        self._maps = []  # (transforms, column)
        self._batch = None  # (size, drop_remainder)
        self._repeat = 1
        self._skip = 0
        self._take = -1
        self._workers = config._workers

    def _with(self, **changes):
        other = copy.copy(self)
        other._maps = list(self._maps)
        for k, v in changes.items():
            setattr(other, k, v)
        return other

    def _column(self, name):
        """The position of a column (0 the input, 1 the label, then the further columns)."""
        if name is None:
            return 0
        if isinstance(name, (list, tuple)):
            if len(name) != 1:
                raise ValueError(f"map() applies to one column at a time, got {list(name)}; call map() once per column")
            name = name[0]
        if name not in self._columns:
            raise ValueError(f"no column {name!r}; the columns are {self._columns}")
        return self._columns.index(name)

    def map(self, operations, input_columns=None, num_parallel_workers=None, **unused):
        """Applies transforms to one column of every sample (the first column by default)."""
        out = self._with()
        out._maps.append((_transforms(operations), self._column(input_columns)))
        if num_parallel_workers:
            out._workers = int(num_parallel_workers)
        return out

    def batch(self, batch_size, drop_remainder=False, num_parallel_workers=None, **unused):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        out = self._with(_batch=(int(batch_size), bool(drop_remainder)))
        if num_parallel_workers:
            out._workers = int(num_parallel_workers)
        return out

    def shuffle(self, buffer_size=None):
        """A new random order every epoch (a full shuffle: ``buffer_size`` is not needed)."""
        return self._with(_shuffle=True)

    def repeat(self, count=1):
        return self._with(_repeat=int(count))

    def skip(self, count):
        return self._with(_skip=int(count))

    def take(self, count):
        return self._with(_take=int(count))

    def get_col_names(self):
        return list(self._columns)

    def get_dataset_size(self):
        """Batches per epoch (samples without batch())."""
        return self._batch_source().batches_per_epoch

    def get_batch_size(self):
        return self._batch[0] if self._batch else 1

    def _batch_source(self):
        pipeline = _kiln.Pipeline(self._source)
        for ts, column in self._maps:
            pipeline.map(ts, column)
        if self._shuffle:
            pipeline.shuffle(self._seed)
        else:
            pipeline.seed(self._seed)
        if self._skip:
            pipeline.skip(self._skip)
        if self._take >= 0:
            pipeline.take(self._take)
        size, drop = self._batch or (1, False)
        pipeline.batch(size, drop)
        pipeline.repeat(self._repeat)
        pipeline.num_parallel_workers(self._workers)
        return pipeline

    def create_tuple_iterator(self, num_epochs=1, output_numpy=False, do_copy=True):
        """Batches as tuples of the columns, in order; one epoch per pass. Without batch(), one sample at a time."""
        source = self._batch_source()
        for _ in range(num_epochs if num_epochs > 0 else 1):
            source.start_epoch()
            while True:
                item = source.next()
                if item is None:
                    break
                row = item[:len(self._columns)]
                if self._batch is None:
                    row = tuple(t[0] for t in row)
                yield tuple(t.numpy() for t in row) if output_numpy else row

    def create_dict_iterator(self, num_epochs=1, output_numpy=False):
        for row in self.create_tuple_iterator(num_epochs, output_numpy):
            yield dict(zip(self._columns, row))

    def __iter__(self):
        return self.create_tuple_iterator()

    def __len__(self):
        return self.get_dataset_size()


def _columns_of(data, column_names):
    """Columns as MindSpore reads them: a dict or a tuple holds columns; anything else is one column."""
    if isinstance(data, dict):
        names = list(data)
        arrays = [data[n] for n in names]
    elif isinstance(data, tuple):
        arrays = list(data)
        names = _default_names(len(arrays))
    else:
        arrays = [data]
        names = ["data"]
    arrays = [np.ascontiguousarray(np.asarray(a)) for a in arrays]
    rows = [len(a) for a in arrays]
    if len(set(rows)) > 1:
        raise ValueError(f"the columns have {rows} rows; they must have as many")
    return arrays, _names(column_names or names, len(arrays))


def _default_names(count):
    """MindSpore's first two names, then column_2, column_3, ..."""
    return ["data", "label", *[f"column_{i}" for i in range(2, count)]][:count]


def _names(names, count):
    names = [names] if isinstance(names, str) else list(names)
    if len(names) != count:
        raise ValueError(f"{len(names)} column names {names} for {count} columns; give one name per column")
    return names


def _tensor_dataset(arrays):
    x = _kiln.from_numpy(arrays[0])
    y = _kiln.from_numpy(arrays[1]) if len(arrays) > 1 else _kiln.zeros((len(arrays[0]),), _kiln.dtype.int64)
    return _kiln.TensorDataset(x, y, [_kiln.from_numpy(a) for a in arrays[2:]])


class NumpySlicesDataset(Dataset):
    """Samples are the rows of NumPy arrays: ``NumpySlicesDataset((x, y), ["image", "label"])`` or a dict."""

    def __init__(self, data, column_names=None, shuffle=True, num_parallel_workers=None, **unused):
        arrays, names = _columns_of(data, column_names)
        super().__init__(_tensor_dataset(arrays), names, shuffle)
        self._arrays = arrays  # the tensors share their memory


class GeneratorDataset(Dataset):
    """Samples from Python: an object with ``__getitem__`` and ``__len__`` (read by the pipeline's
    workers, one sample at a time), or a generator / iterable / generator function (read once, into memory).
    Each sample is a tuple of columns, ``(input, label, ...)``: NumPy arrays or numbers.
    """

    def __init__(self, source, column_names=None, shuffle=True, num_parallel_workers=None, **unused):
        names = [column_names] if isinstance(column_names, str) else list(column_names or ["data", "label"])
        if hasattr(source, "__getitem__") and hasattr(source, "__len__"):
            if len(source):  # the first item tells how many columns there are
                first = source[0]
                count = len(first) if isinstance(first, (tuple, list)) else 1
                names = _names(names if column_names is not None else _default_names(count), count)
            super().__init__(_kiln.SourceDataset(source), names, shuffle)
        else:
            items = source() if callable(source) else source
            rows = [tuple(r) if isinstance(r, (tuple, list)) else (r,) for r in items]
            if not rows:
                raise ValueError("GeneratorDataset: the source produced no samples")
            if any(len(r) != len(rows[0]) for r in rows):
                raise ValueError("GeneratorDataset: the samples have different numbers of columns")
            arrays = [np.ascontiguousarray(np.stack([np.asarray(r[i]) for r in rows])) for i in range(len(rows[0]))]
            if column_names is None:
                names = _default_names(len(arrays))
            super().__init__(_tensor_dataset(arrays), _names(names, len(arrays)), shuffle)
            self._arrays = arrays
        if num_parallel_workers:
            self._workers = int(num_parallel_workers)


def _mnist_like(images_labels, column_names):
    """MindSpore's MNIST columns: image uint8 [28, 28, 1] (HWC) and label int64."""
    images = images_labels.inputs.numpy()  # float32 [N, 1, 28, 28] in [0, 1]
    images = np.ascontiguousarray(np.rint(images * 255.0).astype(np.uint8).transpose(0, 2, 3, 1))
    labels = np.ascontiguousarray(images_labels.labels.numpy())
    return [images, labels]


class FashionMnistDataset(Dataset):
    """Fashion-MNIST (Debian's dataset-fashion-mnist by default): columns "image" (uint8 [28, 28, 1]) and "label"."""

    def __init__(self, dataset_dir=None, usage="train", shuffle=None, num_samples=None, **unused):
        loaded = _kiln.load_fashion_mnist(_split(usage), dataset_dir or "/usr/share/datasets/fashion-mnist")
        arrays = _mnist_like(loaded, None)
        if num_samples:
            arrays = [a[:num_samples] for a in arrays]
        super().__init__(_tensor_dataset(arrays), ["image", "label"], shuffle if shuffle is not None else usage == "train")
        self._arrays = arrays


class MnistDataset(Dataset):
    """MNIST idx files in ``dataset_dir``: columns "image" (uint8 [28, 28, 1]) and "label"."""

    def __init__(self, dataset_dir, usage="train", shuffle=None, num_samples=None, **unused):
        arrays = _mnist_like(_kiln.load_mnist(dataset_dir, _split(usage)), None)
        if num_samples:
            arrays = [a[:num_samples] for a in arrays]
        super().__init__(_tensor_dataset(arrays), ["image", "label"], shuffle if shuffle is not None else usage == "train")
        self._arrays = arrays


class Cifar10Dataset(Dataset):
    """CIFAR-10 binary files: columns "image" (uint8 [32, 32, 3]) and "label"."""

    def __init__(self, dataset_dir, usage="train", shuffle=None, **unused):
        loaded = _kiln.load_cifar10(dataset_dir, _split(usage))
        super().__init__(loaded, ["image", "label"], shuffle if shuffle is not None else usage == "train")


class ImageFolderDataset(Dataset):
    """One subfolder per class of JPEG/PNG files: columns "image" (uint8 [H, W, 3], or file bytes) and "label"."""

    def __init__(self, dataset_dir, decode=True, shuffle=True, skip_unreadable=False, **unused):
        source = _kiln.ImageFolderDataset(dataset_dir, decode, skip_unreadable)
        super().__init__(source, ["image", "label"], shuffle)
        self.class_names = source.class_names


def _split(usage):
    if usage not in ("train", "test"):
        raise ValueError(f"usage is 'train' or 'test', not {usage!r}")
    return usage
