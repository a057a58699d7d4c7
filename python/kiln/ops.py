"""Every op in Kiln's registry as a Python function, generated from the schemas.

``kiln.ops.softmax(x, axis=1)`` runs the registered op ``softmax``; inputs are
positional (tensors, NumPy arrays or numbers), attributes are keywords. An
attribute left out takes the op's default, which the function's help shows.
The list is built from the registry when the package loads, so a new op in
the C++ core appears here without any Python change.
"""
import difflib
import inspect as _inspect
import keyword as _keyword

from . import _kiln

_P = _inspect.Parameter


def _input_params(inputs):
    params = []
    for spec in inputs:
        name = spec.rstrip("?*")
        if _keyword.iskeyword(name):
            name += "_"
        if spec.endswith("*"):
            params.append(_P(name, _P.POSITIONAL_OR_KEYWORD))  # a list of tensors
        elif spec.endswith("?"):
            params.append(_P(name, _P.POSITIONAL_OR_KEYWORD, default=None))
        else:
            params.append(_P(name, _P.POSITIONAL_OR_KEYWORD))
    # Required inputs may not follow optional ones in a Python signature.
    seen_optional = False
    for i, p in enumerate(params):
        if p.default is not _P.empty:
            seen_optional = True
        elif seen_optional:
            params[i] = p.replace(default=None)
    return params


def _attr_name(spec):
    return spec.split(":")[0].split("=")[0].rstrip("?").strip()


# Spellings that mean the same attribute in Kiln: Tensor.sum takes axis=,
# the op sum's attribute is axes.
_SAME = {"axis": "axes", "axes": "axis"}
# Other frameworks' names, answered with Kiln's.
_OTHER_NAMES = {"dim": "axis", "dims": "axes", "keepdims": "keepdim", "keep_dims": "keepdim"}


def _explain(name, signature, kwargs, error):
    """The binding error in the caller's terms: the function, what was wrong, and its arguments."""
    text = f"kiln.{name}{signature}: {error}"
    for key in kwargs:
        if key in signature.parameters:
            continue
        wanted = _OTHER_NAMES.get(key)
        if wanted not in signature.parameters:
            close = difflib.get_close_matches(key, list(signature.parameters), n=1)
            wanted = close[0] if close else None
        if wanted:
            text = f"kiln.{name}() has no argument {key!r}; did you mean {wanted}=? Its arguments: {signature}"
        break
    return text


def _make(schema):
    name = schema["name"]
    inputs = _input_params(schema["inputs"])
    attrs = [_attr_name(a) for a in schema["attrs"]]
    signature = _inspect.Signature(
        inputs + [_P(a, _P.KEYWORD_ONLY, default=None) for a in attrs])
    input_names = [p.name for p in inputs]

    params = set(signature.parameters)
    attr_names = frozenset(attrs)
    count = len(input_names)
    required = len([p for p in inputs if p.default is _P.empty])  # (sum is an op here)
    counts = name == "sum"  # the registered op takes no bool; the C++ function casts first, and so does this

    def op(*args, **kwargs):
        # The common call, inputs by position and attributes by name, goes
        # straight to the dispatcher: binding a Signature costs more than the op.
        if required <= len(args) <= count and attr_names.issuperset(kwargs) and not counts:
            tensors = list(args)
            while tensors and tensors[-1] is None:
                tensors.pop()
            return _kiln.call_op(name, tensors, kwargs)
        for key in [k for k in kwargs if k not in params and _SAME.get(k) in params]:
            kwargs[_SAME[key]] = kwargs.pop(key)  # axis= for an op whose attribute is axes, and back
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(_explain(name, signature, kwargs, e)) from None
        values = bound.arguments
        tensors = [values.get(n) for n in input_names]
        while tensors and tensors[-1] is None:
            tensors.pop()
        if counts and isinstance(tensors[0], _kiln.Tensor) and tensors[0].dtype == _kiln.dtype.bool:
            tensors[0] = tensors[0].astype(_kiln.dtype.int64)  # a count, as kiln::sum (Tensor.sum) gives
        return _kiln.call_op(name, tensors, {a: values[a] for a in attrs if a in values})

    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__signature__ = signature
    lines = [f"The registered op ``{name}``: ({', '.join(schema['inputs'])}) -> ({', '.join(schema['outputs'])})."]
    if schema["attrs"]:
        lines.append("Attributes: " + "; ".join(schema["attrs"]) + ".")
    if schema["tags"]:
        lines.append("Tags: " + schema["tags"] + ".")
    lines.append("Differentiable." if schema["differentiable"] else "Not differentiable.")
    if schema["package"]:
        lines.append(f"From the op package ``{schema['package']}``.")
    op.__doc__ = "\n".join(lines)
    return op


SCHEMAS = {}
__all__ = []


def _add_new_ops():
    """Adds the registry's ops this module lacks (an op package loaded since); returns their names."""
    added = []
    for schema in _kiln.op_schemas():
        if schema["name"] not in SCHEMAS:
            SCHEMAS[schema["name"]] = schema
            globals()[schema["name"]] = _make(schema)
            __all__.append(schema["name"])
            added.append(schema["name"])
    return added


_add_new_ops()
