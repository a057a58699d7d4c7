#!/usr/bin/python3
"""Exports the int8 benchmark's float models with Debian's PyTorch and
torchvision (untrained weights: speed does not depend on them), with four
calibration batches of random inputs for each beside it: ResNet-18 and
MobileNetV2 (3x224x224), and a BERT-style encoder (4 layers, d_model 256,
8 heads, FFN 1024, sequence 128), all at batch 1.
Usage: make_int8_models.py OUT_DIR"""
import os
import sys

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as missing:
    sys.exit(f"{missing}: install Debian's python3-torch and python3-torchvision (apt install python3-torchvision)")

out = sys.argv[1]
torch.manual_seed(0)


def export(name, model, shape):
    model.eval()
    x = torch.randn(*shape)
    torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), opset_version=17, input_names=["input"],
                      output_names=["output"])
    calib = os.path.join(out, name + "_calibration")
    os.makedirs(calib, exist_ok=True)
    for i in range(4):
        np.save(os.path.join(calib, f"batch{i}.npy"), torch.randn(*shape).numpy())


export("resnet18", torchvision.models.resnet18(weights=None), (1, 3, 224, 224))
export("mobilenet_v2", torchvision.models.mobilenet_v2(weights=None), (1, 3, 224, 224))
layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
export("bert_encoder", torch.nn.TransformerEncoder(layer, 4), (1, 128, 256))
