#!/usr/bin/python3
"""Writes tests/golden/op_golden.json: inputs, outputs and input gradients of
every op case below, computed by PyTorch. Run once by hand after adding ops or
cases (Debian's python3-torch); CI reads the committed JSON and needs no torch.

The dtypes each op is tested in come from docs/ops.md, which `kiln ops
--markdown` generates from the registry, so a newly registered (op, dtype)
gets golden values the next time this script runs, and the C++ suite fails
until it does.
"""
import json
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "int8": torch.int8, "bool": torch.bool,
}
FLOATS = {"float32", "float64", "float16", "bfloat16"}


def registered():
    """op -> (cpu dtypes, differentiable, tags), read from docs/ops.md by column name."""
    table, columns = {}, None
    for line in open(os.path.join(ROOT, "docs/ops.md")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if columns is None and cells[:1] == ["op"]:
            columns = {name: i for i, name in enumerate(cells)}
            continue
        m = re.match(r"`([a-z0-9_]+)`$", cells[0]) if columns else None
        if m and len(cells) == len(columns):
            table[m.group(1)] = (cells[columns["cpu dtypes"]].split(), cells[columns["grad"]] == "yes",
                                 cells[columns["tags"]])
    return table


# Input kinds: f = normal floats (differentiable), p = positive floats (diff),
# c = floats not differentiated (running stats, class weights), u = uniform
# [0,1] (diff), w = normal floats times 4 (diff: both sides of a kink at +-3), I = integers in [lo, hi) in the case dtype, i = int64 indices
# in [lo, hi), b = bool, n = nonzero values, s = uniform (-0.9, 0.9) (diff), g = floats
# above 1.2 (diff), N = omitted optional input.
def make_input(rng, spec, dtype):
    kind, shape = spec[0], spec[1]
    if kind == "N":
        return None
    if kind == "i":
        return torch.tensor(rng.integers(spec[2], spec[3], size=shape), dtype=torch.int64)
    if kind == "b":
        return torch.tensor(rng.integers(0, 2, size=shape).astype(bool))
    if kind == "I":
        return torch.tensor(rng.integers(spec[2], spec[3], size=shape)).to(TORCH_DTYPES[dtype])
    if dtype not in FLOATS:
        if dtype == "bool":
            return torch.tensor(rng.integers(0, 2, size=shape).astype(bool))
        lo = 1 if kind in ("p", "n") else (0 if dtype == "uint8" else -5)
        vals = rng.integers(lo, 6, size=shape)
        return torch.tensor(vals).to(TORCH_DTYPES[dtype])
    if kind == "p" or kind == "c":
        v = np.abs(rng.standard_normal(shape)) + 0.5
    elif kind == "u":
        v = rng.uniform(0, 1, size=shape)
    elif kind == "s":
        v = rng.uniform(-0.9, 0.9, size=shape)
    elif kind == "g":
        v = np.abs(rng.standard_normal(shape)) + 1.2
    elif kind == "w":
        v = 4 * rng.standard_normal(shape)
    elif kind == "n":
        v = rng.standard_normal(shape)
        v = np.where(np.abs(v) < 0.3, 0.3 * np.sign(v) + (v == 0), v)
    else:
        v = rng.standard_normal(shape)
    # Round through the case dtype so Kiln and the reference see the same values.
    return torch.tensor(v).to(TORCH_DTYPES[dtype]).to(torch.float64)


CASES = []


def case(op, inputs, fn, attrs=(), grad=True, int_fn=None, only=None, tag=""):
    CASES.append(dict(op=op, inputs=inputs, fn=fn, attrs=list(attrs), grad=grad, int_fn=int_fn, only=only, tag=tag))


def A(name, kind, value):
    return (name, kind, value)


# --- elementwise unary ---
S = [3, 4]
for op, fn in [("neg", torch.neg), ("abs", torch.abs), ("exp", torch.exp), ("sin", torch.sin), ("cos", torch.cos),
               ("tanh", torch.tanh), ("sigmoid", torch.sigmoid), ("relu", torch.relu), ("silu", F.silu),
               ("erf", torch.erf), ("sign", torch.sign), ("floor", torch.floor), ("ceil", torch.ceil),
               ("round", torch.round), ("copy", lambda x: x.clone())]:
    case(op, [("f", S)], fn)
for op, fn in [("log", torch.log), ("log1p", torch.log1p), ("sqrt", torch.sqrt), ("rsqrt", torch.rsqrt)]:
    case(op, [("p", S)], fn)
case("hardsigmoid", [("w", [4, 5])], F.hardsigmoid)
case("hardswish", [("w", [4, 5])], F.hardswish)
case("leaky_relu", [("f", S)], lambda x: F.leaky_relu(x, 0.1), [A("negative_slope", "float", 0.1)])
case("gelu", [("f", S)], lambda x: F.gelu(x), [A("approximate", "string", "none")], tag="exact")
case("gelu", [("f", S)], lambda x: F.gelu(x, approximate="tanh"), [A("approximate", "string", "tanh")], tag="tanh")
case("softplus", [("f", S)], lambda x: F.softplus(x * 3, 2.0, 5.0), [A("beta", "float", 2.0), A("threshold", "float", 5.0)],
     tag="_", grad=True)
CASES[-1]["fn"] = lambda x: F.softplus(x, 2.0, 5.0)
case("clamp", [("f", [4, 5])], lambda x: torch.clamp(x, -0.5, 0.7), [A("min", "float", -0.5), A("max", "float", 0.7)],
     int_fn=lambda x: torch.clamp(x, 0, 0))
case("clamp", [("f", [4, 5])], lambda x: torch.clamp(x, min=-2.0), [A("min", "float", -2.0)],
     int_fn=lambda x: torch.clamp(x, min=-2), tag="min_only")

# --- elementwise binary (with broadcasting) ---
for op, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("maximum", torch.maximum),
               ("minimum", torch.minimum)]:
    case(op, [("f", [3, 4]), ("f", [4])], fn)
    case(op, [("f", [2, 1, 3]), ("f", [4, 1])], fn, tag="outer")
case("div", [("f", [3, 4]), ("n", [4])], torch.div, int_fn=lambda a, b: torch.div(a, b, rounding_mode="trunc"))
case("div", [("f", [2, 1, 3]), ("n", [4, 1])], torch.div, int_fn=lambda a, b: torch.div(a, b, rounding_mode="trunc"),
     tag="outer")
case("pow", [("p", [3, 4]), ("f", [4])], torch.pow)
for op, fn in [("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt), ("ge", torch.ge)]:
    case(op, [("f", [3, 4]), ("f", [4])], fn, grad=False)
case("where", [("b", [3, 4]), ("f", [3, 4]), ("f", [4])], torch.where)
for target in ["float32", "int64", "float64"]:
    case("cast", [("f", [3, 4])], lambda x, t=target: x.to(TORCH_DTYPES[t]), [A("dtype", "dtype", target)], tag=target)
case("assign", [("c", [3, 4]), ("f", [4])], lambda dst, src: src.expand(3, 4).clone(), grad=False)

# --- shape ---
case("view", [("f", [2, 3, 2])], lambda x: x.reshape(-1, 6), [A("shape", "ints", [-1, 6])])
case("permute", [("f", [2, 3, 4])], lambda x: x.permute(2, 0, 1), [A("order", "ints", [2, 0, 1])])
case("slice", [("f", [3, 7])], lambda x: x[:, 1:6:2], [A("axis", "int", 1), A("start", "int", 1), A("end", "int", 6),
                                                         A("step", "int", 2)])
case("slice", [("f", [5, 2])], lambda x: x[-3:], [A("axis", "int", 0), A("start", "int", -3), A("end", "int", 100)],
     tag="negative")
case("expand", [("f", [3, 1])], lambda x: x.expand(2, 3, 4), [A("shape", "ints", [2, 3, 4])])
case("split", [("f", [2, 5])], lambda x: torch.split(x, [2, 3], 1), [A("sizes", "ints", [2, 3]), A("axis", "int", 1)])
case("concat", [("f", [2, 3]), ("f", [2, 2]), ("f", [2, 1])], lambda *t: torch.cat(t, 1), [A("axis", "int", 1)])
case("pad", [("f", [2, 3])], lambda x: F.pad(x, [1, 2], value=0.5),
     [A("pads", "ints", [1, 2]), A("mode", "string", "constant"), A("value", "float", 0.5)])
case("pad", [("f", [1, 3, 4])], lambda x: F.pad(x, [1, 2, 2, 0], mode="reflect"),
     [A("pads", "ints", [1, 2, 2, 0]), A("mode", "string", "reflect")], tag="reflect", only=FLOATS)
case("pad", [("f", [1, 2, 3, 4])], lambda x: F.pad(x, [2, 1, 1, 3], mode="replicate"),
     [A("pads", "ints", [2, 1, 1, 3]), A("mode", "string", "replicate")], tag="replicate", only=FLOATS)
case("pad", [("f", [1, 2, 3, 4])], lambda x: F.pad(x, [3, 1, 2, 1], mode="circular"),
     [A("pads", "ints", [3, 1, 2, 1]), A("mode", "string", "circular")], tag="circular", only=FLOATS)
case("tril", [("f", [3, 4])], torch.tril)
case("triu", [("f", [2, 3, 4])], lambda x: torch.triu(x, 1), [A("diagonal", "int", 1)])
for op, fn, kind in [("asin", torch.asin, "s"), ("acos", torch.acos, "s"), ("atan", torch.atan, "f"),
                     ("asinh", torch.asinh, "f"), ("acosh", torch.acosh, "g"), ("atanh", torch.atanh, "s")]:
    case(op, [(kind, [3, 4])], fn)
case("cumsum", [("f", [3, 4])], lambda x: torch.cumsum(x, 1), [A("axis", "int", 1)])
# Integer products keep the input's type and wrap around, as ONNX's CumProd
# does (PyTorch widens them to int64).
case("cumprod", [("f", [3, 4])], lambda x: torch.cumprod(x, 1), [A("axis", "int", 1)],
     int_fn=lambda x: torch.cumprod(x, 1).to(x.dtype))
case("cumprod", [("f", [2, 5])], lambda x: torch.flip(torch.cumprod(torch.flip(x, [1]), 1), [1]),
     [A("axis", "int", 1), A("reverse", "bool", True)], tag="reverse")

# --- reductions ---
R = [3, 4, 2]
case("sum", [("f", R)], lambda x: x.sum(1), [A("axes", "ints", [1])])
case("sum", [("f", R)], lambda x: x.sum(), [A("axes", "ints", [])], tag="all")
case("mean", [("f", R)], lambda x: x.mean((0, 2), keepdim=True), [A("axes", "ints", [0, 2]), A("keepdim", "bool", True)])
case("amax", [("f", R)], lambda x: x.amax(1), [A("axes", "ints", [1])])
case("amin", [("f", R)], lambda x: x.amin((0, 2)), [A("axes", "ints", [0, 2])])
case("prod", [("f", [3, 4])], lambda x: x.prod(1), [A("axes", "ints", [1])])
case("logsumexp", [("f", R)], lambda x: torch.logsumexp(x, 1), [A("axes", "ints", [1])])
case("var", [("f", R)], lambda x: torch.var(x, 1, unbiased=True), [A("axes", "ints", [1])])
case("std", [("f", R)], lambda x: torch.std(x, (0, 2), unbiased=False, keepdim=True),
     [A("axes", "ints", [0, 2]), A("correction", "int", 0), A("keepdim", "bool", True)])
case("argmax", [("f", R)], lambda x: torch.argmax(x, 1), [A("axis", "int", 1)], grad=False)
case("argmin", [("f", R)], lambda x: torch.argmin(x, 0, keepdim=True), [A("axis", "int", 0), A("keepdim", "bool", True)],
     grad=False)
case("softmax", [("f", R)], lambda x: torch.softmax(x, 1), [A("axis", "int", 1)])


def attention(q, k, v, mask=None, causal=False, scale=0.0, weights=False):
    """torch 1.13 has no scaled_dot_product_attention: its definition."""
    scores = (q * (scale or q.shape[-1] ** -0.5)) @ k.transpose(-1, -2)
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        scores = scores + mask
    p = torch.softmax(scores, -1)
    return (p @ v, p) if weights else p @ v


case("attention", [("f", [2, 3, 4, 5]), ("f", [2, 3, 6, 5]), ("f", [2, 3, 6, 4])], attention)
case("attention", [("f", [1, 2, 5, 4]), ("f", [1, 2, 5, 4]), ("f", [1, 2, 5, 3]), ("c", [5, 5])],
     lambda q, k, v, m: attention(q, k, v, m, causal=True, scale=0.3),
     [A("causal", "bool", True), A("scale", "float", 0.3)], tag="causal_mask")
case("attention", [("f", [3, 4, 2]), ("f", [3, 3, 2]), ("f", [3, 3, 2])],
     lambda q, k, v: attention(q, k, v, weights=True), [A("save_weights", "bool", True)], tag="weights")
case("log_softmax", [("f", [3, 5])], lambda x: torch.log_softmax(x, -1), [A("axis", "int", -1)])

# --- linear algebra, convolution, pooling ---
case("matmul", [("f", [2, 1, 3, 4]), ("f", [3, 4, 2])], torch.matmul)
case("matmul", [("f", [5, 3]), ("f", [3, 4])], torch.matmul, tag="2d")
case("linear", [("f", [2, 3, 4]), ("f", [5, 4]), ("f", [5])], F.linear)
case("linear", [("f", [3, 4]), ("f", [2, 4]), ("N", [])], lambda x, w, b: F.linear(x, w), tag="nobias")
conv_attrs = [A("stride", "ints", [2, 1]), A("padding", "ints", [1, 2]), A("dilation", "ints", [1, 2]),
              A("groups", "int", 2)]
case("conv2d", [("f", [2, 4, 7, 6]), ("f", [6, 2, 3, 3]), ("f", [6])],
     lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 2), (1, 2), 2), conv_attrs)
case("conv2d", [("f", [1, 1, 5, 5]), ("f", [2, 1, 3, 3]), ("N", [])], lambda x, w, b: F.conv2d(x, w), tag="plain")
case("conv2d", [("f", [2, 4, 6, 6]), ("f", [3, 4, 1, 1]), ("N", [])], lambda x, w, b: F.conv2d(x, w, stride=2),
     [A("stride", "ints", [2, 2])], tag="1x1_stride2")
case("conv2d", [("f", [2, 5, 9, 8]), ("f", [5, 1, 3, 3]), ("f", [5])], lambda x, w, b: F.conv2d(x, w, b, 2, 1, 1, 5),
     [A("stride", "ints", [2, 2]), A("padding", "ints", [1, 1]), A("groups", "int", 5)], tag="depthwise")
case("conv2d", [("f", [1, 3, 7, 9]), ("f", [3, 1, 5, 3]), ("N", [])],
     lambda x, w, b: F.conv2d(x, w, None, 1, (2, 1), (1, 2), 3),
     [A("padding", "ints", [2, 1]), A("dilation", "ints", [1, 2]), A("groups", "int", 3)], tag="depthwise_dilated")
case("conv2d", [("f", [2, 6, 5, 7]), ("f", [4, 6, 1, 1]), ("f", [4])], lambda x, w, b: F.conv2d(x, w, b), tag="pointwise")
case("conv2d", [("f", [1, 4, 6, 6]), ("f", [4, 1, 3, 3]), ("f", [4])], lambda x, w, b: F.relu(F.conv2d(x, w, b, 1, 1, 1, 4)),
     [A("padding", "ints", [1, 1]), A("groups", "int", 4), A("activation", "string", "relu")], tag="depthwise_relu")
case("conv2d", [("f", [1, 6, 4, 5]), ("f", [3, 6, 1, 1]), ("f", [3])], lambda x, w, b: F.relu(F.conv2d(x, w, b)),
     [A("activation", "string", "relu")], tag="pointwise_relu")
case("conv_transpose2d", [("f", [1, 4, 4, 5]), ("f", [4, 3, 3, 3]), ("f", [3])],
     lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1),
     [A("stride", "ints", [2, 2]), A("padding", "ints", [1, 1]), A("output_padding", "ints", [1, 1])])
case("conv_transpose2d", [("f", [2, 4, 3, 3]), ("f", [4, 1, 2, 2]), ("N", [])],
     lambda x, w, b: F.conv_transpose2d(x, w, groups=2), [A("groups", "int", 2)], tag="groups")
def int_max_pool(*args, **kwargs):
    """max_pool2d of integers (quantized values; torch pools only floats): through float64, exact for them."""
    def pool(x):
        y, i = F.max_pool2d(x.to(torch.float64), *args, return_indices=True, **kwargs)
        return y.to(x.dtype), i
    return pool


case("max_pool2d", [("f", [2, 3, 7, 7])], lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
     [A("kernel", "ints", [3, 3]), A("stride", "ints", [2, 2]), A("padding", "ints", [1, 1])],
     int_fn=int_max_pool(3, 2, 1))
case("max_pool2d", [("f", [2, 3, 6, 5])], lambda x: F.max_pool2d(x, 2, return_indices=True),
     [A("kernel", "ints", [2, 2]), A("stride", "ints", [2, 2])], tag="2x2", int_fn=int_max_pool(2))
case("max_pool2d", [("f", [2, 3, 8, 9])], lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
     [A("kernel", "ints", [3, 3]), A("stride", "ints", [2, 2]), A("padding", "ints", [1, 1]),
      A("ceil_mode", "bool", True)], tag="ceil", only=FLOATS)
case("max_pool2d", [("f", [1, 2, 7, 5])], lambda x: F.max_pool2d(x, 2, ceil_mode=True, return_indices=True),
     [A("kernel", "ints", [2, 2]), A("stride", "ints", [2, 2]), A("ceil_mode", "bool", True)], tag="ceil_2x2",
     only=FLOATS)
case("interpolate", [("f", [2, 3, 5, 4])], lambda x: F.interpolate(x, size=(7, 9), mode="nearest"),
     [A("size", "ints", [7, 9]), A("mode", "string", "nearest"), A("coordinates", "string", "asymmetric"),
      A("nearest_mode", "string", "floor")], tag="nearest")
case("interpolate", [("f", [1, 2, 6, 5])], lambda x: F.interpolate(x, size=(4, 8), mode="bilinear", align_corners=False),
     [A("size", "ints", [4, 8]), A("mode", "string", "linear"), A("coordinates", "string", "pytorch_half_pixel")],
     tag="bilinear")
case("interpolate", [("f", [1, 3, 4, 3])], lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
     [A("size", "ints", [8, 6]), A("mode", "string", "linear"), A("coordinates", "string", "pytorch_half_pixel"),
      A("scales", "floats", [2.0, 2.0])], tag="bilinear_scale")
case("interpolate", [("f", [2, 2, 5, 6])], lambda x: F.interpolate(x, size=(3, 7), mode="bilinear", align_corners=True),
     [A("size", "ints", [3, 7]), A("mode", "string", "linear"), A("coordinates", "string", "align_corners")],
     tag="align_corners")
case("interpolate", [("f", [1, 2, 5, 6])], lambda x: F.interpolate(x, size=(8, 4), mode="bicubic", align_corners=False),
     [A("size", "ints", [8, 4]), A("mode", "string", "cubic"), A("coordinates", "string", "pytorch_half_pixel")],
     tag="bicubic")
case("interpolate", [("f", [1, 2, 4, 5])], lambda x: F.interpolate(x, size=(7, 3), mode="bicubic", align_corners=True),
     [A("size", "ints", [7, 3]), A("mode", "string", "cubic"), A("coordinates", "string", "align_corners")],
     tag="bicubic_corners")
# Antialiased resizing follows ONNX's definition (edge pixels repeated), which
# PyTorch's differs from at the borders: the ONNX conformance tests check it.
case("avg_pool2d", [("f", [2, 3, 7, 6])], lambda x: F.avg_pool2d(x, (2, 3), 2, 1),
     [A("kernel", "ints", [2, 3]), A("stride", "ints", [2, 2]), A("padding", "ints", [1, 1])])
case("avg_pool2d", [("f", [1, 2, 5, 5])], lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
     [A("kernel", "ints", [3, 3]), A("stride", "ints", [2, 2]), A("padding", "ints", [1, 1]),
      A("count_include_pad", "bool", False)], tag="exclude_pad")
case("adaptive_avg_pool2d", [("f", [2, 3, 7, 5])], lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
     [A("output_size", "ints", [3, 2])])


# --- normalization ---
def bn_train(x, w, b, rm, rv):
    y = F.batch_norm(x, rm.clone(), rv.clone(), w, b, True, 0.1, 1e-5)
    mean = x.mean((0, 2, 3))
    rstd = 1 / torch.sqrt(x.var((0, 2, 3), unbiased=False) + 1e-5)
    return y, mean, rstd


def bn_eval(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5), rm, 1 / torch.sqrt(rv + 1e-5)


def ln(x, w, b):
    mean = x.mean((1, 2), keepdim=True)
    rstd = 1 / torch.sqrt(x.var((1, 2), unbiased=False, keepdim=True) + 1e-5)
    return F.layer_norm(x, [3, 4], w, b, 1e-5), mean, rstd


def gn(x, w, b):
    xr = x.reshape(2, 2, -1)
    mean = xr.mean(2, keepdim=True)
    rstd = 1 / torch.sqrt(xr.var(2, unbiased=False, keepdim=True) + 1e-5)
    return F.group_norm(x, 2, w, b, 1e-5), mean, rstd


case("batch_norm", [("f", [4, 3, 2, 2]), ("f", [3]), ("f", [3]), ("c", [3]), ("c", [3])], bn_train,
     [A("training", "bool", True), A("momentum", "float", 0.1), A("eps", "float", 1e-5)])
case("batch_norm", [("f", [2, 3, 2, 2]), ("f", [3]), ("f", [3]), ("c", [3]), ("c", [3])], bn_eval,
     [A("training", "bool", False), A("eps", "float", 1e-5)], tag="eval")
case("layer_norm", [("f", [2, 3, 4]), ("f", [3, 4]), ("f", [3, 4])], ln, [A("normalized_ndim", "int", 2)])
case("group_norm", [("f", [2, 4, 3, 3]), ("f", [4]), ("f", [4])], gn, [A("groups", "int", 2)])

# --- indexing ---
case("embedding", [("f", [10, 4]), ("i", [2, 3], 0, 10)], lambda w, i: F.embedding(i, w))
case("gather", [("f", [3, 4]), ("i", [3, 2], 0, 4)], lambda x, i: torch.gather(x, 1, i), [A("axis", "int", 1)])
case("index_select", [("f", [4, 3]), ("i", [5], 0, 4)], lambda x, i: torch.index_select(x, 0, i), [A("axis", "int", 0)])
case("scatter_add", [("f", [3, 5]), ("i", [2, 3], 0, 5), ("f", [2, 3])], lambda x, i, s: torch.scatter_add(x, 1, i, s),
     [A("axis", "int", 1)])
# Indices repeat along the axis, so several src values meet at one position.
for reduce in ("prod", "amax", "amin"):
    case("scatter_reduce", [("f", [3, 4]), ("i", [4, 4], 0, 3), ("f", [4, 5])],
         lambda x, i, s, r=reduce: torch.scatter_reduce(x, 0, i, s[:, :4], r, include_self=True),
         [A("axis", "int", 0), A("reduce", "string", reduce)], tag=reduce)
case("mod", [("w", [3, 4]), ("n", [3, 4])], torch.remainder)
case("mod", [("w", [3, 4]), ("n", [4])], torch.fmod, [A("fmod", "bool", True)], tag="fmod")


def topk(x, k, dim, largest=True):
    """torch.topk with ONNX's tie rule (the lower index first), so integer and half cases have one answer."""
    pos = torch.arange(x.shape[dim], dtype=torch.float64).reshape([-1] + [1] * (x.dim() - 1 - dim)) * 1e-3
    key = x.detach().to(torch.float64) + (-pos if largest else pos)
    idx = torch.topk(key, k, dim, largest=largest)[1]
    return torch.gather(x, dim, idx), idx


case("topk", [("f", [3, 6])], lambda x: topk(x, 3, 1), [A("k", "int", 3), A("axis", "int", 1)])
case("topk", [("f", [4, 2, 3])], lambda x: topk(x, 2, 0, largest=False),
     [A("k", "int", 2), A("axis", "int", 0), A("largest", "bool", False)], tag="smallest")
case("one_hot", [("I", [4], 0, 5)], lambda i: F.one_hot(i.long(), 5), [A("num_classes", "int", 5)], grad=False)

# --- recurrent (one layer, one direction, time first; PyTorch's kernels) ---
def recurrent(vf, x, params, h0, c0=None, reverse=False, hidden=None):
    """torch._VF.{lstm,gru,rnn_*} on one layer; reverse runs on the flipped sequence."""
    n, h = x.shape[1], hidden
    params = [p for p in params if p is not None]
    z = torch.zeros(1, n, h, dtype=x.dtype)
    h0 = z if h0 is None else h0[None]
    xs = x.flip(0) if reverse else x
    if c0 is not None or vf is torch._VF.lstm:
        c0 = z if c0 is None else c0[None]
        y, hn, cn = vf(xs, (h0, c0), params, len(params) == 4, 1, 0.0, False, False, False)
        return (y.flip(0) if reverse else y), hn[0], cn[0]
    y, hn = vf(xs, h0, params, len(params) == 4, 1, 0.0, False, False, False)
    return (y.flip(0) if reverse else y), hn[0]


def gru_reset_after_matmul(x, w_ih, w_hh, b_ih, b_hh, h0):
    """ONNX GRU with linear_before_reset=0: n = tanh(W_in x + b_in + W_hn (r * h) + b_hn)."""
    h = h0
    ys = []
    for t in range(x.shape[0]):
        gi = x[t] @ w_ih.T + b_ih
        r = torch.sigmoid(gi[:, :4] + h @ w_hh[:4].T + b_hh[:4])
        zg = torch.sigmoid(gi[:, 4:8] + h @ w_hh[4:8].T + b_hh[4:8])
        n = torch.tanh(gi[:, 8:] + (r * h) @ w_hh[8:].T + b_hh[8:])
        h = (1 - zg) * n + zg * h
        ys.append(h)
    return torch.stack(ys), h


X, H4 = [5, 2, 3], 4
case("lstm", [("f", X), ("f", [16, 3]), ("f", [16, 4]), ("f", [16]), ("f", [16]), ("f", [2, 4]), ("f", [2, 4])],
     lambda x, wi, wh, bi, bh, h0, c0: recurrent(torch._VF.lstm, x, [wi, wh, bi, bh], h0, c0, hidden=H4))
case("lstm", [("f", X), ("f", [16, 3]), ("f", [16, 4]), ("N", []), ("N", []), ("N", []), ("N", [])],
     lambda x, wi, wh, bi, bh, h0, c0: recurrent(torch._VF.lstm, x, [wi, wh], None, None, True, hidden=H4),
     [A("reverse", "bool", True)], tag="reverse_no_bias")
case("gru", [("f", X), ("f", [12, 3]), ("f", [12, 4]), ("f", [12]), ("f", [12]), ("f", [2, 4])],
     lambda x, wi, wh, bi, bh, h0: recurrent(torch._VF.gru, x, [wi, wh, bi, bh], h0, hidden=H4))
case("gru", [("f", X), ("f", [12, 3]), ("f", [12, 4]), ("N", []), ("N", []), ("N", [])],
     lambda x, wi, wh, bi, bh, h0: recurrent(torch._VF.gru, x, [wi, wh], None, reverse=True, hidden=H4),
     [A("reverse", "bool", True)], tag="reverse_no_bias")
case("gru", [("f", X), ("f", [12, 3]), ("f", [12, 4]), ("f", [12]), ("f", [12]), ("f", [2, 4])],
     gru_reset_after_matmul, [A("linear_before_reset", "bool", False)], tag="reset_after_matmul")
case("rnn", [("f", X), ("f", [4, 3]), ("f", [4, 4]), ("f", [4]), ("f", [4]), ("f", [2, 4])],
     lambda x, wi, wh, bi, bh, h0: recurrent(torch._VF.rnn_tanh, x, [wi, wh, bi, bh], h0, hidden=H4))
case("rnn", [("f", X), ("f", [4, 3]), ("f", [4, 4]), ("f", [4]), ("f", [4]), ("N", [])],
     lambda x, wi, wh, bi, bh, h0: recurrent(torch._VF.rnn_relu, x, [wi, wh, bi, bh], None, reverse=True, hidden=H4),
     [A("reverse", "bool", True), A("nonlinearity", "string", "relu")], tag="relu_reverse")

# --- losses ---
case("cross_entropy", [("f", [5, 4]), ("i", [5], 0, 4), ("N", [])], lambda x, t, w: F.cross_entropy(x, t))
case("cross_entropy", [("f", [6, 4]), ("i", [6], 0, 4), ("c", [4])],
     lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=2, label_smoothing=0.1),
     [A("ignore_index", "int", 2), A("label_smoothing", "float", 0.1)], tag="smooth_weight_ignore")
case("cross_entropy", [("f", [5, 3]), ("i", [5], 0, 3), ("N", [])], lambda x, t, w: F.cross_entropy(x, t, reduction="none"),
     [A("reduction", "string", "none")], tag="none")
case("nll_loss", [("f", [5, 4]), ("i", [5], 0, 4), ("c", [4])], lambda x, t, w: F.nll_loss(x, t, w))
case("nll_loss", [("f", [5, 4]), ("i", [5], 0, 4), ("N", [])], lambda x, t, w: F.nll_loss(x, t, ignore_index=1, reduction="sum"),
     [A("ignore_index", "int", 1), A("reduction", "string", "sum")], tag="sum_ignore")
case("mse_loss", [("f", [3, 4]), ("f", [3, 4])], F.mse_loss)
case("mse_loss", [("f", [3, 4]), ("f", [3, 4])], lambda a, b: F.mse_loss(a, b, reduction="none"),
     [A("reduction", "string", "none")], tag="none")
case("l1_loss", [("f", [3, 4]), ("f", [3, 4])], lambda a, b: F.l1_loss(a, b, reduction="sum"),
     [A("reduction", "string", "sum")])
case("smooth_l1_loss", [("f", [3, 4]), ("f", [3, 4])], lambda a, b: F.smooth_l1_loss(a, b, beta=0.5),
     [A("beta", "float", 0.5)])
case("binary_cross_entropy_with_logits", [("f", [3, 4]), ("u", [3, 4])], F.binary_cross_entropy_with_logits)
# (Random normal values are finite: tests/autograd/autocast_test.cpp puts inf and NaN in.)
case("all_finite", [("f", [2, 3, 4]), ("f", [4])], lambda *t: torch.tensor(all(bool(torch.isfinite(x).all()) for x in t)),
     grad=False)

# Ops whose values cannot be reproduced outside Kiln (random) are checked by
# property tests in tests/ops instead.
NO_GOLDEN = {"dropout", "to_device"}


def flat(t):
    t = t.detach()
    if t.dtype == torch.bool:
        return [bool(v) for v in t.reshape(-1).tolist()]
    return t.to(torch.float64).reshape(-1).tolist() if t.is_floating_point() else t.reshape(-1).tolist()


def encode(t, dtype):
    if t is None:
        return None
    return {"dtype": dtype, "shape": list(t.shape), "data": flat(t)}


def main():
    table = registered()
    entries = []
    missing = []
    for name in sorted(table):
        dtypes, differentiable, tags = table[name]
        if "backward" in tags or name in NO_GOLDEN:
            continue
        op_cases = [c for c in CASES if c["op"] == name]
        if not op_cases:
            missing.append(name)
            continue
        for ci, c in enumerate(op_cases):
            for dtype in dtypes:
                if c["only"] is not None and dtype not in c["only"]:
                    continue
                if dtype not in FLOATS and any(s[0] == "u" for s in c["inputs"]):
                    continue
                rng = np.random.default_rng(1000 + ci * 17 + len(name))
                ins = [make_input(rng, s, dtype) for s in c["inputs"]]
                is_float = dtype in FLOATS
                run_ins = [t.clone() if t is not None else None for t in ins]
                diff = []
                if is_float and c["grad"] and differentiable:
                    for k, (s, t) in enumerate(zip(c["inputs"], run_ins)):
                        if s[0] in ("f", "p", "u", "n", "w", "s", "g"):
                            t.requires_grad_(True)
                            diff.append(k)
                fn = c["fn"] if (is_float or c["int_fn"] is None) else c["int_fn"]
                out = fn(*run_ins)
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                entry = {
                    "name": f"{name}{'.' + c['tag'] if c['tag'] else ''}.{ci}.{dtype}",
                    "op": name, "dtype": dtype,
                    "attrs": [[a[0], a[1], a[2]] for a in c["attrs"]],
                    "inputs": [encode(t, dtype if (s[0] not in ("i", "b") and not (s[0] == "I")) else
                                      ("int64" if s[0] == "i" else ("bool" if s[0] == "b" else dtype)))
                               for s, t in zip(c["inputs"], ins)],
                    "outputs": [encode(o, "out") for o in outs],
                }
                if diff and not outs[0].requires_grad:
                    print(f"note: {name} ({c['tag']}) output does not depend on its inputs in torch", file=sys.stderr)
                    diff = []
                if diff:
                    up = torch.tensor(rng.standard_normal(tuple(outs[0].shape))).to(TORCH_DTYPES[dtype]).to(torch.float64)
                    grads = torch.autograd.grad((outs[0] * up).sum(), [run_ins[k] for k in diff], allow_unused=True)
                    entry["upstream"] = encode(up, dtype)
                    entry["grads"] = {str(k): encode(g if g is not None else torch.zeros_like(run_ins[k]), "out")
                                      for k, g in zip(diff, grads)}
                entries.append(entry)
    if missing:
        print("ops without golden cases:", ", ".join(missing), file=sys.stderr)
    out_path = os.path.join(ROOT, "tests/golden/op_golden.json")
    with open(out_path, "w") as f:
        json.dump({"generator": "tests/golden/make_op_golden.py", "torch": torch.__version__, "cases": entries}, f)
    print(f"wrote {len(entries)} cases to {out_path}")


if __name__ == "__main__":
    main()
