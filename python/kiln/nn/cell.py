"""``Cell``: subclass it, assign parameters and cells as attributes, write ``construct``."""
import weakref
from collections import OrderedDict

from .. import _kiln


class Parameter(_kiln.Tensor):
    """A tensor that a Cell registers as a parameter when assigned as its attribute.

    ``requires_grad=False`` makes it a non-trainable parameter: saved and
    loaded with the Cell, never updated by an optimizer.
    """

    def __init__(self, default_input, name=None, requires_grad=True):
        value = default_input if isinstance(default_input, _kiln.Tensor) else _kiln.tensor(default_input)
        if value.dtype not in (_kiln.dtype.float32, _kiln.dtype.float64, _kiln.dtype.float16, _kiln.dtype.bfloat16) \
                and requires_grad:
            raise TypeError(f"a trainable Parameter must be floating point, not {value.dtype}; "
                            "pass requires_grad=False for an integer one")
        _kiln.Tensor.__init__(self, value)
        self.name = name
        self.requires_grad = requires_grad


def _cell_call(self, *args, **kwargs):
    """Runs ``construct``; a single tensor goes through the C++ call, which names the cell in errors
    (and applies ``to_float``)."""
    if len(args) == 1 and not kwargs and isinstance(args[0], _kiln.Tensor):
        return self._call(args[0])
    dtype = self.compute_dtype
    if dtype is None:
        return self.construct(*args, **kwargs)

    def cast(value):
        floating = isinstance(value, _kiln.Tensor) and value.dtype.is_floating_point
        return value.astype(dtype) if floating and value.dtype != dtype else value
    args = [cast(a) for a in args]
    kwargs = {k: cast(v) for k, v in kwargs.items()}
    return _kiln._run_in_compute_dtype(dtype, lambda: self.construct(*args, **kwargs))


def _cell_repr(self):
    if self.__dict__.get("_init_failed") if hasattr(self, "__dict__") else False:
        return f"<{type(self).__name__}: its __init__ failed>"
    lines = []
    for name, child in self.name_cells().items():
        inner = repr(child).replace("\n", "\n  ")
        lines.append(f"  ({name}): {inner}")
    head = type(self).__name__ + "(" + self.extra_repr()
    if not lines:
        return head + ")"
    return head + "\n" + "\n".join(lines) + "\n)"


def _is_cell_collection(value):
    return isinstance(value, (list, tuple)) and value and any(isinstance(v, _kiln.Cell) for v in value)


class Cell(_kiln.Cell):
    """Base class of networks written in Python.

    ``__init__`` must call ``super().__init__()``; then ``self.fc = nn.Dense(...)``
    registers a child cell and ``self.w = Parameter(...)`` a parameter.
    ``construct(x)`` computes the output; calling the cell runs it.
    """

    def __init__(self, auto_prefix=True, flags=None):
        _kiln.Cell.__init__(self)
        self._set_python_type(type(self).__name__)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            value = self._register_parameter(name, value, value.requires_grad)
        elif isinstance(value, _kiln.Cell):
            self._register_cell(name, value)
        elif _is_cell_collection(value):
            raise TypeError(f"cells in a Python {type(value).__name__} ('{name}') are not registered, so they would "
                            f"not be trained or saved; use nn.CellList([...]) or nn.SequentialCell([...])")
        object.__setattr__(self, name, value)

    def register_buffer(self, name, value):
        """Registers a tensor that is saved with the cell but not trained (running statistics, tables)."""
        object.__setattr__(self, name, self._register_buffer(name, value))

    def construct(self, *args):
        raise NotImplementedError(f"{type(self).__name__} does not define construct()")

    def insert_param_to_cell(self, param_name, param, check_name_contain_dot=True):
        setattr(self, param_name, param if isinstance(param, Parameter) else Parameter(param, name=param_name))


class SequentialCell(_kiln.SequentialCell):
    """Cells applied in order: ``SequentialCell([a, b])`` or ``SequentialCell(a, b)``."""

    def __init__(self, *args):
        cells = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
        super().__init__(cells)
        self._cells = cells  # the Python side of Python cells lives as long as this


class CellList(_kiln.CellList):
    """A list of cells registered under the names "0", "1", ...; it has no construct of its own."""

    def __init__(self, cells=()):
        cells = list(cells)
        super().__init__(cells)
        self._cells = cells

    def append(self, cell):
        super().append(cell)
        self._cells.append(cell)

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])


def _parameters_dict(self, recurse=True):
    """An ordered dict of name -> parameter (MindSpore's ``Cell.parameters_dict``)."""
    return OrderedDict(self.parameters_and_names())


def _untrainable_params(self, recurse=True):
    """The parameters that no optimizer updates (``requires_grad=False``)."""
    return [p for _, p in self.parameters_and_names() if not p.requires_grad]


def _state_dict(self):
    """Parameters and buffers as name -> NumPy array (copies), with PyTorch's names.

    Batch norms get ``num_batches_tracked`` as PyTorch's do, so a PyTorch model
    of the same layers loads it strictly:
    ``torch_net.load_state_dict({k: torch.from_numpy(v) for k, v in net.state_dict().items()})``.
    """
    import numpy as np
    out = OrderedDict()
    for name, t in list(self.parameters_and_names()) + list(self.buffers_and_names()):
        out[name] = np.array(t.detach().numpy(), copy=True)
    norms = [n for n, c in self.cells_and_names() if c.type_name() in ("BatchNorm1d", "BatchNorm2d")]
    if self.type_name() in ("BatchNorm1d", "BatchNorm2d"):
        norms.append("")
    for n in norms:
        key = (n + "." if n else "") + "num_batches_tracked"
        out.setdefault(key, np.array(0, dtype=np.int64))
    return out


_input_specs = {}  # id(cell) -> [(shape with None for dimensions that vary, dtype)], from set_inputs


def _set_inputs(self, *inputs):
    """Declares the inputs the Cell is called with, as MindSpore's ``set_inputs``:
    ``net.set_inputs(Tensor(shape=[None, 784], dtype=kiln.float32))``. A ``None``
    dimension varies: ``kiln.jit(net)`` and graph-mode ``Model`` compile a new
    size there as expected, not as a mistake, and ``kiln.export`` writes a
    ``None`` batch as a dynamic batch. Calls with another rank, dtype or size
    of a fixed dimension are refused."""
    from .._placeholders import shape_with_unknowns
    specs = []
    for i, t in enumerate(inputs):
        if not isinstance(t, _kiln.Tensor):
            raise TypeError(f"set_inputs takes Tensors, such as Tensor(shape=[None, 784], dtype=kiln.float32); "
                            f"input {i} is {type(t).__name__}")
        specs.append((shape_with_unknowns(t), t.dtype))
    if id(self) not in _input_specs:
        weakref.finalize(self, _input_specs.pop, id(self), None)
    _input_specs[id(self)] = specs


def _get_inputs(self):
    """The inputs set_inputs declared (zeros, unknown dimensions 1), or None."""
    specs = _input_specs.get(id(self))
    if specs is None:
        return None
    from .. import Tensor
    return [Tensor(shape=shape, dtype=dtype) for shape, dtype in specs]


def input_specs(cell):
    """set_inputs' declaration of a cell: [(shape with None, dtype)], or None."""
    return _input_specs.get(id(cell))


def dynamic_axes(cell, inputs=None):
    """The (input, axis) pairs set_inputs left unknown; with `inputs`, checked against the declaration."""
    specs = _input_specs.get(id(cell))
    if specs is None:
        return None
    if inputs is not None:
        if len(inputs) != len(specs):
            raise ValueError(f"{type(cell).__name__} was given {len(inputs)} inputs; set_inputs declared {len(specs)}")
        for i, (x, (shape, dtype)) in enumerate(zip(inputs, specs)):
            fits = x.dtype == dtype and len(x.shape) == len(shape) and all(
                d is None or d == n for d, n in zip(shape, x.shape))
            if not fits:
                declared = "[" + ", ".join("None" if d is None else str(d) for d in shape) + "]"
                raise ValueError(f"{type(cell).__name__}'s input {i} is {x.dtype} {list(x.shape)}; set_inputs declared "
                                 f"{dtype} {declared} (None: any size)")
    return [(i, a) for i, (shape, _) in enumerate(specs) for a, d in enumerate(shape) if d is None]


_kiln.Cell.set_inputs = _set_inputs
_kiln.Cell.get_inputs = _get_inputs
_kiln.Cell.__call__ = _cell_call
_kiln.Cell.__repr__ = _cell_repr
_kiln.Cell.parameters_dict = _parameters_dict
_kiln.Cell.untrainable_params = _untrainable_params
_kiln.Cell.state_dict = _state_dict
