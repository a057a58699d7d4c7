#!/usr/bin/python3
"""W4 in PyTorch, set up as examples/kjv/w4_char_transformer.yaml: the King
James Bible from bible-kjv, a vocabulary of its distinct bytes, the last 10%
of the text held out, non-overlapping windows of 128 characters shuffled each
epoch, batch 32, AdamW (lr 3e-4, weight decay 0.01), 1000 steps, then the mean
loss and next-character accuracy on the held-out windows. Needs Debian's
python3-torch. Prints: val_loss, val_accuracy, tokens/s, peak RSS MB."""
import resource
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)
torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
T, B = 128, 32

text = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, check=True).stdout
chars = sorted(set(text))
index = {c: i for i, c in enumerate(chars)}
ids = torch.tensor([index[c] for c in text], dtype=torch.int64)
cut = int(len(ids) * 0.9)


def windows(tokens):
    n = (len(tokens) - T - 1) // T + 1
    starts = torch.arange(n) * T
    x = torch.stack([tokens[s:s + T] for s in starts.tolist()])
    y = torch.stack([tokens[s + 1:s + T + 1] for s in starts.tolist()])
    return x, y


train_x, train_y = windows(ids[:cut])
val_x, val_y = windows(ids[cut:])


class CharTransformer(nn.Module):
    def __init__(self, vocab, d=128, heads=4, layers=2, ffn=512):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(T, d)
        layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(self, x):
        h = self.tokens(x) + self.positions(torch.arange(x.shape[1]))
        h = self.layers(h, mask=self.mask[:x.shape[1], :x.shape[1]])
        return self.head(self.norm(h))


model = CharTransformer(len(chars))
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
step = 0
start = time.perf_counter()
while step < steps:
    order = torch.randperm(len(train_x))
    for b in range(0, len(order), B):
        idx = order[b:b + B]
        loss = F.cross_entropy(model(train_x[idx]).reshape(-1, len(chars)), train_y[idx].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}", file=sys.stderr)
        if step == steps:
            break
seconds = time.perf_counter() - start

model.eval()
total, correct, count = 0.0, 0, 0
with torch.no_grad():
    for b in range(0, len(val_x), B):
        out = model(val_x[b:b + B])
        y = val_y[b:b + B]
        total += F.cross_entropy(out.reshape(-1, len(chars)), y.reshape(-1)).item() * len(y)
        correct += (out.argmax(-1) == y).sum().item()
        count += len(y)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"torch_w4 val_loss {total / count:.4f} val_accuracy {correct / (count * T):.4f} "
      f"tokens_per_s {steps * B * T / seconds:.0f} peak_rss_mb {rss:.0f}")
