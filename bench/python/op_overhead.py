"""Per-op overhead from Python: kiln.add against torch.add on 1-element tensors, same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/op_overhead.py

Prints each figure and the ratio (Kiln's time / PyTorch's; goal <= 0.6), best
of interleaved rounds so that a busy machine hurts both alike.
"""
import time

import kiln
import torch

torch.set_num_threads(1)
kiln.set_num_threads(1)


def per_call(fn, a, b, calls=20000):
    start = time.perf_counter()
    for _ in range(calls):
        fn(a, b)
    return (time.perf_counter() - start) / calls


def compare(label, kiln_args, torch_args, fn_kiln, fn_torch, rounds=7):
    for _ in range(2000):  # warm up both
        fn_kiln(*kiln_args)
        fn_torch(*torch_args)
    best_k = best_t = float("inf")
    for _ in range(rounds):
        best_k = min(best_k, per_call(fn_kiln, *kiln_args))
        best_t = min(best_t, per_call(fn_torch, *torch_args))
    print(f"{label:34s} kiln {best_k * 1e9:7.0f} ns   torch {best_t * 1e9:7.0f} ns   ratio {best_k / best_t:.2f}")


def main():
    print("per-op time from Python, 1-element float32 tensors (ratio = kiln / torch; goal <= 0.60)")
    ka, kb = kiln.ones(1), kiln.ones(1)
    ta, tb = torch.ones(1), torch.ones(1)
    compare("add, no autograd", (ka, kb), (ta, tb), kiln.add, torch.add)
    compare("a + b, no autograd", (ka, kb), (ta, tb), lambda a, b: a + b, lambda a, b: a + b)
    ka.requires_grad = True
    ta.requires_grad_(True)
    compare("add, recording autograd", (ka, kb), (ta, tb), kiln.add, torch.add)


if __name__ == "__main__":
    main()
