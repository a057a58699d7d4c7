"""Kiln: define, train, export and serve deep learning models from Python.

The package is a thin face over Kiln's C++ core (the same ``libkiln`` the
``kiln`` command uses): tensors, every registered op, autograd, cells, the
training loop, checkpoints, ONNX export and the inference runtime. Names
follow MindSpore where it has them (``nn.Cell``, ``construct``, ``nn.Dense``,
``Model``), so MindSpore code moves over with its import lines changed.
"""
from . import _kiln
from ._kiln import (Tensor, dtype, Error, UnsupportedError, from_numpy, from_dlpack, tensor, zeros, ones, full,
                    empty, zeros_like, ones_like, arange, linspace, eye, rand, randn, randint, manual_seed,
                    set_num_threads, get_num_threads)

__version__ = _kiln.__version__

# pybind11 2.10 turns an enum's `name` into a method once `__str__` is
# defined on it; the names come from the members instead.
_dtype_names = {value: name for name, value in dtype.__members__.items()}
dtype.name = property(lambda self: _dtype_names[self])
dtype.__str__ = dtype.__repr__ = lambda self: "kiln." + _dtype_names[self]
float32 = dtype.float32
float64 = dtype.float64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
int32 = dtype.int32
int64 = dtype.int64
uint8 = dtype.uint8
int8 = dtype.int8
bool_ = dtype.bool
float_ = float32



def _shape_and_dtype(fn, args, shape, dtype):
    """A shape given as ints, one sequence or ``shape=``, then an optional dtype, as NumPy, PyTorch
    and MindSpore callers write it: ``randn(64, 1, 28, 28)``, ``zeros((2, 3), kiln.int64)``."""
    args = list(args)
    if args and isinstance(args[-1], _DType) and dtype is None:
        dtype = args.pop()
    if shape is not None:
        if args:
            raise TypeError(f"kiln.{fn}() got the shape twice: as arguments and as shape=")
        return shape, dtype
    if len(args) == 1:
        return args[0], dtype
    if args and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return tuple(args), dtype
    raise TypeError(f"kiln.{fn}() takes a shape as ints or one sequence, then an optional dtype: "
                    f"kiln.{fn}(64, 1, 28, 28) or kiln.{fn}((64, 1, 28, 28), kiln.float32); got {tuple(args)!r}")


def _shaped(name, make):
    def create(*shape, dtype=None, device=None, **kwargs):
        given = kwargs.pop("shape", kwargs.pop("size", None))
        if kwargs:
            raise TypeError(f"kiln.{name}() got an unexpected keyword argument {next(iter(kwargs))!r}")
        s, d = _shape_and_dtype(name, shape, given, dtype)
        return make(s, d, device)
    create.__name__ = create.__qualname__ = name
    create.__doc__ = getattr(_kiln, name).__doc__
    return create


_DType = dtype
zeros = _shaped("zeros", _kiln.zeros)
ones = _shaped("ones", _kiln.ones)
empty = _shaped("empty", _kiln.empty)
rand = _shaped("rand", _kiln.rand)
randn = _shaped("randn", _kiln.randn)

_kiln.load_op_libraries_from_environment()  # op packages in KILN_PLUGIN_PATH join kiln.ops below
from . import ops  # noqa: E402  (every registered op, generated from the registry)

# Every op as kiln.<name>, unless a hand-written function below has the name.
for _name in ops.__all__:
    globals()[_name] = getattr(ops, _name)
del _name

from ._kiln import add, sub, mul, div, matmul, relu, concat, stack, einsum, cross_entropy  # noqa: E402,F811
from ._tensor_methods import install as _install_methods  # noqa: E402
from ._placeholders import install as _install_placeholders  # noqa: E402
from .autograd import no_grad, enable_grad, grad, value_and_grad  # noqa: E402
from .context import set_context, get_context, GRAPH_MODE, PYNATIVE_MODE, jit  # noqa: E402
from .serialization import (save_checkpoint, load_checkpoint, load_param_into_net, load_torch_weights,  # noqa: E402
                            export, InferenceSession, serve, quantize)
from . import nn, dataset, train, amp  # noqa: E402
from .train import Model  # noqa: E402

_install_methods()
_install_placeholders()


def load_op_library(path):
    """Loads an op package (a shared library built with kiln_add_op_library) and
    makes its ops ``kiln.ops.<name>`` and ``kiln.<name>``, with gradients, graph
    mode and export like built-in ops. Returns the package's name. A file that
    is not a package, was built for another plugin ABI or clashes with an
    existing op raises ``kiln.Error`` naming the file and the reason."""
    name = _kiln.load_op_library(str(path))
    for op in ops._add_new_ops():
        globals().setdefault(op, getattr(ops, op))
    return name
set_seed = manual_seed
Parameter = nn.Parameter
cat = concat
