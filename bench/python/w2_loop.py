"""W2 trained by a hand-written Python loop against the C++ recipe, same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/w2_loop.py [steps] [rounds]

The loop is what a PyTorch user writes: forward, loss, backward, optimizer
step, zero_grad, over batches of 64 from Fashion-MNIST. The C++ side is
`kiln train examples/fashion_mnist/w2_cnn.yaml --max-steps N` (the recipe's
samples/s from metrics.json). Rounds alternate; the best of each is kept and
the ratio (Python / C++; goal >= 0.95) printed.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import kiln
from kiln import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("KILN_CLI", os.path.join(ROOT, "build", "kiln"))


def python_loop(steps):
    kiln.manual_seed(0)
    net = nn.make_model("cnn")
    opt = nn.SGD(net.trainable_params(), learning_rate=nn.schedules.cosine(0.05, steps), momentum=0.9,
                 weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    train = kiln._kiln.load_fashion_mnist("train")
    batches = kiln._kiln.BatchIterator(train, 64, True, False, 0)
    batches.start_epoch()
    start = time.perf_counter()
    for _ in range(steps):
        images, labels = batches.next()
        loss = loss_fn(net(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    loss.item()
    return steps * 64 / (time.perf_counter() - start)


def cpp_recipe(steps):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([CLI, "train", os.path.join(ROOT, "examples/fashion_mnist/w2_cnn.yaml"), "--epochs", "1",
                        "--max-steps", str(steps), "--output", out], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "metrics.json")) as f:
            return json.load(f)["train_samples_per_s"]


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    best_py = best_cpp = 0.0
    for r in range(rounds):
        cpp = cpp_recipe(steps)
        py = python_loop(steps)
        print(f"round {r + 1}: Python loop {py:7.0f} samples/s   C++ recipe {cpp:7.0f} samples/s")
        best_py, best_cpp = max(best_py, py), max(best_cpp, cpp)
    print(f"W2, {steps} steps of 64: Python loop {best_py:.0f} samples/s, C++ recipe {best_cpp:.0f} samples/s, "
          f"ratio {best_py / best_cpp:.2f} (goal >= 0.95)")


if __name__ == "__main__":
    main()
