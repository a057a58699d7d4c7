#!/usr/bin/python3
"""PyTorch's eager dispatch overhead for the figure bench_dispatch prints:
torch.add on 1-element tensors, with and without autograd recording. The
Python loop is part of what a PyTorch user pays, and is measured separately."""
import timeit

import torch

torch.set_num_threads(2)
a, b = torch.ones(1), torch.ones(1)
w = torch.ones(1, requires_grad=True)
n = 200000
loop = timeit.timeit("pass", number=n) / n
no_grad = timeit.timeit("torch.add(a, b)", globals=globals(), number=n) / n
rec = timeit.timeit("torch.add(w, b)", globals=globals(), number=n) / n
print(f"python loop alone      {loop * 1e9:8.0f} ns")
print(f"torch.add              {no_grad * 1e9:8.0f} ns (incl. Python call)")
print(f"torch.add + autograd   {rec * 1e9:8.0f} ns (incl. Python call)")
