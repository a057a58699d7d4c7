#!/usr/bin/python3
"""Exports the inference benchmark models with Debian's PyTorch: ResNet-18
(full width, 3x224x224) and a Transformer encoder (4 layers, d_model 256, 8
heads, FFN 1024, sequence 128), both with a dynamic batch axis; with
Debian's python3-torchvision also ShuffleNetV2 x0.5, SqueezeNet 1.1 and
MobileNetV3-small (untrained weights: speed does not depend on them).
Usage: make_inference_models.py OUT_DIR"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "onnx"))
from make_onnx_fixtures import ResNet18  # noqa: E402  (the same layout as the fixture, at full width)

out = sys.argv[1]
torch.manual_seed(0)


def export(name, model, x):
    model.eval()
    torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), opset_version=17, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


export("resnet18", ResNet18(width=64, classes=1000), torch.randn(1, 3, 224, 224))
layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
export("transformer_encoder", torch.nn.TransformerEncoder(layer, 4), torch.randn(1, 128, 256))
try:
    import torchvision
except ImportError:
    torchvision = None
if torchvision is not None:
    for name, make in [("shufflenet_v2", torchvision.models.shufflenet_v2_x0_5),
                       ("squeezenet", torchvision.models.squeezenet1_1),
                       ("mobilenet_v3", torchvision.models.mobilenet_v3_small)]:
        export(name, make(weights=None), torch.randn(1, 3, 224, 224))
