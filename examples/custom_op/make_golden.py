#!/usr/bin/python3
"""Writes golden.json: inputs, outputs and input gradients of the package's
ops computed by PyTorch, in the format of Kiln's generic op suite, which runs
them (forward, gradients, finite differences, every registered dtype) when
the package is loaded:

    KILN_PLUGIN_PATH=libcustom_ops.so KILN_EXTRA_GOLDEN=golden.json ops_tests

Run by hand after changing an op (Debian's python3-torch); the tests read the
committed file and need no torch.
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def swiglu(gate, up):
    return F.silu(gate) * up


def tensor(t, dtype=None):
    return {"dtype": dtype or str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "data": t.detach().double().flatten().tolist()}


def case(name, op, dtype, attrs, inputs, fn):
    # Inputs are rounded to the case's dtype; the reference is computed in float64 from them.
    rounded = [t.to(DTYPES[dtype]).double().requires_grad_(True) for t in inputs]
    out = fn(*rounded)
    upstream = torch.randn(out.shape, dtype=torch.float64).to(DTYPES[dtype]).double()
    grads = torch.autograd.grad(out, rounded, upstream)
    return {"name": name, "op": op, "dtype": dtype, "attrs": attrs,
            "inputs": [tensor(t.detach().to(DTYPES[dtype])) for t in rounded],
            "outputs": [tensor(out, "out")],
            "upstream": tensor(upstream.to(DTYPES[dtype])),
            "grads": {str(i): tensor(g, "out") for i, g in enumerate(grads)}}


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    cases = []
    for dtype in ("float32", "float64"):
        for i, (shape, eps) in enumerate((((3, 8), 1e-6), ((2, 3, 5), 1e-2), ((7,), 1e-5))):
            x, w = torch.randn(shape, dtype=torch.float64), torch.randn(shape[-1:], dtype=torch.float64)
            cases.append(case(f"rms_norm.{i}.{dtype}", "rms_norm", dtype, [["eps", "float", eps]], [x, w],
                              lambda a, b, eps=eps: rms_norm(a, b, eps)))
    for dtype in DTYPES:
        for i, shape in enumerate(((4, 6), (2, 3, 4))):
            gate, up = torch.randn(shape, dtype=torch.float64) * 2, torch.randn(shape, dtype=torch.float64)
            cases.append(case(f"swiglu.{i}.{dtype}", "swiglu", dtype, [], [gate, up], swiglu))
    with open(os.path.join(HERE, "golden.json"), "w") as f:
        json.dump({"generator": "examples/custom_op/make_golden.py", "torch": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} cases")


if __name__ == "__main__":
    main()
