#!/usr/bin/python3
"""PyTorch's training throughput on the Fashion-MNIST workloads W1-W3 of the
benchmarks, with the same model, optimizer and batch size as Kiln's recipes:
the peer figure for bench/peers/train_throughput.sh. Needs Debian's
python3-torch; prints one line per workload: name, samples/s, peak RSS MB."""
import gzip
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn

torch.set_num_threads(2)
D = "/usr/share/datasets/fashion-mnist/"


def load(name, offset):
    return np.frombuffer(gzip.open(D + name).read(), np.uint8, offset=offset)


X = torch.from_numpy(load("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32) / np.float32(255))
Y = torch.tensor(load("train-labels-idx1-ubyte.gz", 8).astype(np.int64))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


class Block(nn.Module):
    def __init__(self, i, o, s):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o)
        self.c2, self.b2 = nn.Conv2d(o, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o)
        self.sc = nn.Sequential(nn.Conv2d(i, o, 1, s, bias=False), nn.BatchNorm2d(o)) if s != 1 or i != o else None

    def forward(self, x):
        h = torch.relu(self.b1(self.c1(x)))
        h = self.b2(self.c2(h))
        return torch.relu(h + (self.sc(x) if self.sc is not None else x))


def resnet8():
    return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), Block(16, 16, 1),
                         Block(16, 32, 2), Block(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def run(name, make, lr, steps):
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    perm = torch.randperm(len(X))
    start = None
    for step in range(steps + 10):
        if step == 10:  # after warm-up
            start = time.perf_counter()
        idx = perm[(step * 64) % 59968:(step * 64) % 59968 + 64]
        loss = nn.functional.cross_entropy(model(X[idx]), Y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    rate = steps * 64 / (time.perf_counter() - start)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{name} {rate:.0f} {rss:.0f}", flush=True)


if __name__ == "__main__":
    which = sys.argv[1:] or ["w1", "w2", "w3"]
    table = {"w1": (mlp, 0.05, 900), "w2": (cnn, 0.05, 300), "w3": (resnet8, 0.1, 150)}
    for w in which:
        make, lr, steps = table[w]
        run(w, make, lr, steps)
