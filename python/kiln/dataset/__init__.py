"""Datasets, in the shape of ``mindspore.dataset``, run by Kiln's C++ pipeline.

A dataset is a source (NumPy arrays, a Python object with ``__getitem__`` and
``__len__``, a generator, or a built-in reader) plus stages: ``map`` (Kiln's
vision transforms, which run in C++, or Python functions of NumPy arrays),
``shuffle``, ``batch``, ``repeat``. The stages run in the pipeline's worker
threads when a Model trains on it, or when it is iterated.
"""
import copy
import difflib
import inspect
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


# MindSpore keywords that change nothing here (Kiln's pipeline runs in C++
# threads, caches nothing and has no row-size limit): accepted and ignored.
_IGNORED = {"python_multiprocessing", "max_rowsize", "cache", "callbacks", "offload", "num_shards_hint"}
# MindSpore keywords whose feature Kiln's pipeline does not have: refused with what to do instead.
_UNSUPPORTED = {
    "per_batch_map": "map a function over single samples before batch(), or over a batch's arrays in your loop",
    "input_columns": "a batch-level map is not supported; map() before batch()",
    "output_columns": "a map gives back the column it read; add columns in the source instead",
    "column_order": "columns keep their order; name them in the source in the order you want",
    "pad_info": "pad the samples in a map() before batch()",
    "num_shards": "shard with kiln.dataset.DistributedSampler or the distributed recipe's sampler",
    "shard_id": "shard with kiln.dataset.DistributedSampler or the distributed recipe's sampler",
    "sampler": "use shuffle=True/False; sharding goes through the distributed recipe",
}


def _limit(dataset, count):
    """MindSpore's ``num_samples=``: the first that many samples (after any shuffle)."""
    if count is not None:
        if int(count) < 1:
            raise ValueError(f"num_samples must be 1 or more, got {count}")
        dataset._take = int(count)


def _check_keywords(fn, given, allowed=()):
    """Unknown keywords are errors, not silently dropped: a misspelt ``shufle=`` would change nothing.
    ``fn``: the method or constructor that took them, whose own parameters are suggested too."""
    where = fn.__qualname__.replace(".__init__", "")
    for key in given:
        if key in _IGNORED or key in allowed:
            continue
        if key in _UNSUPPORTED:
            raise ValueError(f"{where}: {key}= is not supported by Kiln's dataset pipeline; {_UNSUPPORTED[key]}")
        own = [p for p in inspect.signature(fn).parameters if p not in ("self", "options")]
        close = difflib.get_close_matches(key, own + sorted(_IGNORED | set(allowed)), n=1)
        hint = f"; did you mean {close[0]}=?" if close else ""
        raise TypeError(f"{where}() got an unexpected keyword argument {key!r}{hint}")


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
        self._skip = 0  # in samples, before batching
        self._take = -1  # in samples after the skip; -1: all
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

    def map(self, operations, input_columns=None, num_parallel_workers=None, **options):
        """Applies transforms to one column of every sample (the first column by default)."""
        _check_keywords(Dataset.map, options, allowed=("output_columns",) if options.get("output_columns") in
                        (None, input_columns) else ())
        out = self._with()
        out._maps.append((_transforms(operations), self._column(input_columns)))
        if num_parallel_workers:
            out._workers = int(num_parallel_workers)
        return out

    def batch(self, batch_size, drop_remainder=False, num_parallel_workers=None, **options):
        _check_keywords(Dataset.batch, options)
        if self._batch is not None:
            raise ValueError("this dataset is batched already; batch() once, after map() and shuffle()")
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

    def _unit(self):
        """What skip() and take() count: the rows of the stage they follow, so batches after batch()."""
        return self._batch[0] if self._batch else 1

    def skip(self, count):
        """Leaves out the first ``count`` rows of the stage before it (batches after batch(), else samples)."""
        if int(count) < 0:
            raise ValueError(f"skip() takes a count of 0 or more, got {count}")
        n = int(count) * self._unit()
        return self._with(_skip=self._skip + n, _take=-1 if self._take < 0 else max(0, self._take - n))

    def take(self, count):
        """Keeps the first ``count`` rows of the stage before it (batches after batch(), else samples)."""
        if int(count) < 0:
            raise ValueError(f"take() takes a count of 0 or more, got {count}")
        n = int(count) * self._unit()
        return self._with(_take=n if self._take < 0 else min(self._take, n))

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

    def __repr__(self):
        stages = [f"columns={self._columns}", f"samples={len(self._source)}"]
        if self._maps:
            stages.append(f"maps={len(self._maps)}")
        if self._shuffle:
            stages.append("shuffled")
        if self._skip:
            stages.append(f"skip={self._skip} samples")
        if self._take >= 0:
            stages.append(f"take={self._take} samples")
        if self._batch:
            stages.append(f"batch={self._batch[0]}" + (" drop_remainder" if self._batch[1] else ""))
        if self._repeat != 1:
            stages.append(f"repeat={self._repeat}")
        return f"{type(self).__name__}({', '.join(stages)})"


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

    def __init__(self, data, column_names=None, shuffle=True, num_parallel_workers=None, num_samples=None, **options):
        _check_keywords(NumpySlicesDataset.__init__, options)
        arrays, names = _columns_of(data, column_names)
        super().__init__(_tensor_dataset(arrays), names, shuffle)
        self._arrays = arrays  # the tensors share their memory
        _limit(self, num_samples)


class GeneratorDataset(Dataset):
    """Samples from Python: an object with ``__getitem__`` and ``__len__`` (read by the pipeline's
    workers, one sample at a time), or a generator / iterable / generator function (read once, into memory).
    Each sample is a tuple of columns, ``(input, label, ...)``: NumPy arrays or numbers.
    """

    def __init__(self, source, column_names=None, shuffle=True, num_parallel_workers=None, num_samples=None,
                 **options):
        _check_keywords(GeneratorDataset.__init__, options)
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
        _limit(self, num_samples)


def _mnist_like(images_labels, column_names):
    """MindSpore's MNIST columns: image uint8 [28, 28, 1] (HWC) and label int64."""
    images = images_labels.inputs.numpy()  # float32 [N, 1, 28, 28] in [0, 1]
    images = np.ascontiguousarray(np.rint(images * 255.0).astype(np.uint8).transpose(0, 2, 3, 1))
    labels = np.ascontiguousarray(images_labels.labels.numpy())
    return [images, labels]


class FashionMnistDataset(Dataset):
    """Fashion-MNIST (Debian's dataset-fashion-mnist by default): columns "image" (uint8 [28, 28, 1]) and "label"."""

    def __init__(self, dataset_dir=None, usage="train", shuffle=None, num_samples=None, **options):
        _check_keywords(FashionMnistDataset.__init__, options)
        loaded = _kiln.load_fashion_mnist(_split(usage), dataset_dir or "/usr/share/datasets/fashion-mnist")
        arrays = _mnist_like(loaded, None)
        if num_samples:
            arrays = [a[:num_samples] for a in arrays]
        super().__init__(_tensor_dataset(arrays), ["image", "label"], shuffle if shuffle is not None else usage == "train")
        self._arrays = arrays


class MnistDataset(Dataset):
    """MNIST idx files in ``dataset_dir``: columns "image" (uint8 [28, 28, 1]) and "label"."""

    def __init__(self, dataset_dir, usage="train", shuffle=None, num_samples=None, **options):
        _check_keywords(MnistDataset.__init__, options)
        arrays = _mnist_like(_kiln.load_mnist(dataset_dir, _split(usage)), None)
        if num_samples:
            arrays = [a[:num_samples] for a in arrays]
        super().__init__(_tensor_dataset(arrays), ["image", "label"], shuffle if shuffle is not None else usage == "train")
        self._arrays = arrays


class Cifar10Dataset(Dataset):
    """CIFAR-10 binary files: columns "image" (uint8 [32, 32, 3]) and "label"."""

    def __init__(self, dataset_dir, usage="train", shuffle=None, num_samples=None, **options):
        _check_keywords(Cifar10Dataset.__init__, options)
        loaded = _kiln.load_cifar10(dataset_dir, _split(usage))
        super().__init__(loaded, ["image", "label"], shuffle if shuffle is not None else usage == "train")
        _limit(self, num_samples)


class ImageFolderDataset(Dataset):
    """One subfolder per class of JPEG/PNG files: columns "image" (uint8 [H, W, 3], or file bytes) and "label"."""

    def __init__(self, dataset_dir, decode=True, shuffle=True, skip_unreadable=False, num_samples=None, **options):
        _check_keywords(ImageFolderDataset.__init__, options)
        source = _kiln.ImageFolderDataset(dataset_dir, decode, skip_unreadable)
        super().__init__(source, ["image", "label"], shuffle)
        self.class_names = source.class_names
        _limit(self, num_samples)


def _split(usage):
    if usage not in ("train", "test"):
        raise ValueError(f"usage is 'train' or 'test', not {usage!r}")
    return usage
