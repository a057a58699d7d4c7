#!/usr/bin/python3
"""Writes tests/golden/module_golden.json: weights, inputs and outputs of
PyTorch's MultiheadAttention and TransformerEncoderLayer (batch first), for
the C++ tests of the matching Kiln cells. Run once by hand with Debian's
python3-torch; CI reads the committed JSON."""
import json
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def enc(t):
    return {"shape": list(t.shape), "data": t.detach().double().reshape(-1).tolist()}


def run(name, module, inputs, masks, call, config):
    module.eval()
    with torch.no_grad():
        out = call(module, inputs, masks)
    return {
        "name": name, "config": config,
        "weights": {k: enc(v) for k, v in module.state_dict().items()},
        "inputs": [enc(t) for t in inputs],
        "masks": {k: {"shape": list(v.shape), "data": v.reshape(-1).tolist()} for k, v in masks.items()},
        "output": enc(out),
    }


def main():
    torch.manual_seed(0)
    cases = []
    e, h = 8, 2
    mha = torch.nn.MultiheadAttention(e, h, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    x = torch.randn(2, 5, e)
    cfg = {"embed_dim": e, "heads": h}
    cases.append(run("mha_self", mha, [x, x, x], {}, lambda m, i, k: m(*i, need_weights=False)[0], cfg))
    q, kv = torch.randn(2, 3, e), torch.randn(2, 5, e)
    pad = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])
    cases.append(run("mha_cross_padding", mha, [q, kv, kv], {"key_padding_mask": pad},
                     lambda m, i, k: m(*i, key_padding_mask=k["key_padding_mask"], need_weights=False)[0], cfg))
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    cases.append(run("mha_causal", mha, [x, x, x], {"causal": causal},
                     lambda m, i, k: m(*i, attn_mask=k["causal"], need_weights=False)[0], cfg))
    for norm_first, act in [(False, "relu"), (True, "gelu")]:
        layer = torch.nn.TransformerEncoderLayer(e, h, dim_feedforward=16, dropout=0.0, activation=act,
                                                 batch_first=True, norm_first=norm_first)
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(0.1 * torch.randn_like(p))
        cfg = {"d_model": e, "heads": h, "dim_feedforward": 16, "norm_first": norm_first, "gelu": act == "gelu"}
        cases.append(run(f"encoder_{'pre' if norm_first else 'post'}_{act}", layer, [x], {"causal": causal},
                         lambda m, i, k: m(i[0], src_mask=k["causal"]), cfg))
    path = os.path.join(ROOT, "tests/golden/module_golden.json")
    with open(path, "w") as f:
        json.dump({"generator": "tests/golden/make_module_golden.py", "torch": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
