"""ONNX Runtime's outputs for a model, through onnxruntime-node (ort_run.js
beside this file), for the scripts that make Kiln's test fixtures."""
import json
import os
import subprocess
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
         "int8": np.int8}
NAMES = {v: k for k, v in TYPES.items()}


def run_ort(model, feeds):
    """ONNX Runtime's outputs for `feeds` (name -> array), by name, in the
    session's order."""
    with tempfile.TemporaryDirectory() as work:
        spec = {"inputs": []}
        for name, a in feeds.items():
            path = os.path.join(work, name + ".in.bin")
            a.tofile(path)
            spec["inputs"].append({"name": name, "type": NAMES[a.dtype.type], "dims": list(a.shape), "file": path})
        with open(os.path.join(work, "spec.json"), "w") as f:
            json.dump(spec, f)
        subprocess.run(["node", os.path.join(HERE, "ort_run.js"), model, os.path.join(work, "spec.json"), work],
                       check=True)
        with open(os.path.join(work, "outputs.json")) as f:
            report = json.load(f)
        return {o["name"]: np.fromfile(o["file"], TYPES[o["type"]]).reshape(o["dims"]) for o in report["outputs"]}
