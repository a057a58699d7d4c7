#!/usr/bin/python3
"""Writes tests/golden/recurrent_golden.json: PyTorch's nn.LSTM, nn.GRU and
nn.RNN with their state dicts, inputs, initial states, outputs, final states
and the gradients of sum(output * u) + sum(h_n * v) (+ sum(c_n * w)) with
respect to the input, the initial states and every weight, for the C++ tests
of Kiln's recurrent layers. Run once by hand with Debian's python3-torch; CI
reads the committed JSON."""
import json
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def enc(t):
    return {"shape": list(t.shape), "data": t.detach().double().reshape(-1).tolist()}


def run(name, module, x, with_state, config):
    module = module.double()
    x = x.double().requires_grad_(True)
    layers = module.num_layers * (2 if module.bidirectional else 1)
    batch = x.shape[0] if module.batch_first else x.shape[1]
    lstm = isinstance(module, torch.nn.LSTM)
    states = []
    if with_state:
        states = [torch.randn(layers, batch, module.hidden_size, dtype=torch.float64).requires_grad_(True)
                  for _ in range(2 if lstm else 1)]
    out, final = module(x, tuple(states) if lstm and states else (states[0] if states else None))
    finals = list(final) if lstm else [final]
    ups = [torch.randn_like(t) for t in [out] + finals]
    loss = sum((t * u).sum() for t, u in zip([out] + finals, ups))
    names = [n for n, _ in module.named_parameters()]
    leaves = [x] + states + [p for _, p in module.named_parameters()]
    grads = torch.autograd.grad(loss, leaves)
    return {
        "name": name, "config": config,
        "weights": {k: enc(v) for k, v in module.state_dict().items()},
        "input": enc(x), "states": [enc(s) for s in states],
        "outputs": [enc(t) for t in [out] + finals], "upstream": [enc(u) for u in ups],
        "grad_input": enc(grads[0]), "grad_states": [enc(g) for g in grads[1:1 + len(states)]],
        "grad_weights": {n: enc(g) for n, g in zip(names, grads[1 + len(states):])},
    }


def main():
    torch.manual_seed(0)
    cases = []
    cfg = dict(num_layers=2, batch_first=True, bidirectional=True, bias=True)
    cases.append(run("lstm_2layer_bidirectional_batch_first", torch.nn.LSTM(3, 4, **cfg), torch.randn(2, 5, 3), True,
                     dict(kind="LSTM", input=3, hidden=4, **cfg)))
    cfg = dict(num_layers=1, batch_first=False, bidirectional=False, bias=True)
    cases.append(run("lstm_defaults_no_state", torch.nn.LSTM(3, 5, **cfg), torch.randn(4, 3, 3), False,
                     dict(kind="LSTM", input=3, hidden=5, **cfg)))
    cfg = dict(num_layers=2, batch_first=False, bidirectional=True, bias=False)
    cases.append(run("gru_2layer_bidirectional_no_bias", torch.nn.GRU(3, 4, **cfg), torch.randn(6, 2, 3), True,
                     dict(kind="GRU", input=3, hidden=4, **cfg)))
    cfg = dict(num_layers=2, batch_first=True, bidirectional=False, bias=True)
    cases.append(run("rnn_relu_2layer", torch.nn.RNN(3, 4, nonlinearity="relu", **cfg), torch.randn(2, 5, 3), True,
                     dict(kind="RNN", input=3, hidden=4, nonlinearity="relu", **cfg)))
    path = os.path.join(ROOT, "tests/golden/recurrent_golden.json")
    with open(path, "w") as f:
        json.dump({"generator": "tests/golden/make_recurrent_golden.py", "torch": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
