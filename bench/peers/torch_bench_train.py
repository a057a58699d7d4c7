#!/usr/bin/env python3
"""PyTorch's side of `kiln bench-train`: the same zoo model, optimizer, batch
and precision, on random data with one batch reused, in eager mode or under
torch.compile. Prints one JSON line with the same keys as
`kiln bench-train --json`. Usage:
  torch_bench_train.py MODEL --device cuda --precision bf16 --batch 128 [--compile] [--image-size 224 --channels 3
  --classes 1000] [--seq-len 1024] [--steps 20 --warmup 5]"""
import argparse
import contextlib
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(a):
    return nn.Sequential(nn.Flatten(), nn.Linear(a.channels * a.image_size ** 2, 512), nn.ReLU(), nn.Linear(512, 256),
                         nn.ReLU(), nn.Linear(256, a.classes))


def cnn(a):
    s = a.image_size // 4
    return nn.Sequential(nn.Conv2d(a.channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * s * s, 128), nn.ReLU(), nn.Linear(128, a.classes))


class Bottleneck(nn.Module):  # torchvision's v1.5, as Kiln's zoo builds it
    def __init__(self, i, w, stride):
        super().__init__()
        o = 4 * w
        self.body = nn.Sequential(nn.Conv2d(i, w, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                                  nn.Conv2d(w, w, 3, stride, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                                  nn.Conv2d(w, o, 1, bias=False), nn.BatchNorm2d(o))
        self.short = (nn.Sequential(nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))
                      if stride != 1 or i != o else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


def resnet50(a):
    layers = [nn.Conv2d(a.channels, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    i = 64
    for s, (w, n) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for b in range(n):
            layers.append(Bottleneck(i, w, 2 if b == 0 and s > 0 else 1))
            i = 4 * w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(i, a.classes))


class Gpt2(nn.Module):  # pre-norm GELU layers, the token embedding tied to the logits
    def __init__(self, vocab, seq_len, d=768, heads=12, layers=12, ff=3072):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.01)
        layer = lambda: nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu", batch_first=True,
                                                   norm_first=True)
        self.layers = nn.ModuleList([layer() for _ in range(layers)])
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        t = ids.shape[1]
        h = self.tokens(ids) + self.positions.weight[:t]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=ids.device), 1)
        for layer in self.layers:
            h = layer(h, src_mask=mask)
        return self.norm(h) @ self.tokens.weight.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["mlp", "cnn", "resnet50", "gpt2"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="float32")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--image-size", type=int, default=28)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    dev = torch.device(a.device)
    half = {"float32": None, "fp32": None, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16, "fp16": torch.float16}[a.precision]
    torch.manual_seed(0)
    text = a.model == "gpt2"
    net = (Gpt2(50257, a.seq_len) if text else {"mlp": mlp, "cnn": cnn, "resnet50": resnet50}[a.model](a)).to(dev)
    if text:
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.01)
        x = torch.randint(0, 50257, (a.batch, a.seq_len), device=dev)
        y = torch.randint(0, 50257, (a.batch, a.seq_len), device=dev)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(a.batch, a.channels, a.image_size, a.image_size, device=dev)
        y = torch.randint(0, a.classes, (a.batch,), device=dev)
    model = torch.compile(net) if a.compile else net
    scale = 1024.0 if half == torch.float16 else 1.0

    def step():
        with torch.autocast(dev.type, dtype=half) if half else contextlib.nullcontext():
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss * scale).backward()
        if scale != 1.0:
            for q in net.parameters():
                q.grad.div_(scale)
        opt.step()
        return loss

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step().item()
    warmup_s = time.perf_counter() - t0
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    last = loss.item()
    seconds = time.perf_counter() - t0
    per_s = a.batch * a.steps * (a.seq_len if text else 1) / seconds
    peak = torch.cuda.max_memory_allocated() / 1e6 if dev.type == "cuda" else 0.0
    print(json.dumps({"model": a.model, "device": a.device, "mode": "compile" if a.compile else "eager",
                      "precision": a.precision, "batch": a.batch, "seq_len": a.seq_len if text else 0,
                      "steps": a.steps, "step_ms": seconds / a.steps * 1e3,
                      ("tokens_per_s" if text else "samples_per_s"): per_s, "warmup_s": warmup_s, "loss": last,
                      "peak_mb": peak, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
