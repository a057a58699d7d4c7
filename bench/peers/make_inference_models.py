#!/usr/bin/python3
"""Exports the inference benchmark models with Debian's PyTorch: ResNet-18
(full width, 3x224x224) and a Transformer encoder (4 layers, d_model 256, 8
heads, FFN 1024, sequence 128), both with a dynamic batch axis; at batch 1, a
bidirectional two-layer LSTM text classifier (vocabulary 20000, embedding
128, hidden 256, 64 tokens), a three-level U-Net (32-64-128 channels,
bilinear upsampling, 3x128x128) and a GPT-style decoder block (d_model 256,
8 heads, 128 tokens); with Debian's python3-torchvision also ShuffleNetV2
x0.5, SqueezeNet 1.1 and MobileNetV3-small (untrained weights: speed does
not depend on them).
Usage: make_inference_models.py OUT_DIR"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "onnx"))
from make_onnx_fixtures import GPTBlock, ResNet18, TextLSTM  # noqa: E402  (the fixtures' layouts, at full size)

out = sys.argv[1]
torch.manual_seed(0)


def export(name, model, x, dynamic=True):
    model.eval()
    axes = {"input": {0: "batch"}, "output": {0: "batch"}} if dynamic else None
    torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), opset_version=17, input_names=["input"],
                      output_names=["output"], dynamic_axes=axes)


class UNet(torch.nn.Module):
    """Three levels of two 3x3 convolutions, max-pool down, bilinear up, skips concatenated."""

    def __init__(self):
        super().__init__()
        nn = torch.nn

        def level(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.ReLU(), nn.Conv2d(o, o, 3, padding=1), nn.ReLU())

        self.down1, self.down2, self.down3 = level(3, 32), level(32, 64), level(64, 128)
        self.up2, self.up1 = level(128 + 64, 64), level(64 + 32, 32)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.head = nn.Conv2d(32, 2, 1)

    def forward(self, x):
        a = self.down1(x)
        b = self.down2(self.pool(a))
        c = self.down3(self.pool(b))
        y = self.up2(torch.cat([self.up(c), b], 1))
        return self.head(self.up1(torch.cat([self.up(y), a], 1)))


export("resnet18", ResNet18(width=64, classes=1000), torch.randn(1, 3, 224, 224))
layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
export("transformer_encoder", torch.nn.TransformerEncoder(layer, 4), torch.randn(1, 128, 256))
export("text_lstm", TextLSTM(vocab=20000, d=128, hidden=256, classes=4), torch.randint(0, 20000, (1, 64)), False)
export("unet", UNet(), torch.randn(1, 3, 128, 128), False)
export("gpt_decoder", GPTBlock(vocab=2000, seq=128, d=256, heads=8), torch.randint(0, 2000, (1, 128)), False)
try:
    import torchvision
except ImportError:
    torchvision = None
if torchvision is not None:
    for name, make in [("shufflenet_v2", torchvision.models.shufflenet_v2_x0_5),
                       ("squeezenet", torchvision.models.squeezenet1_1),
                       ("mobilenet_v3", torchvision.models.mobilenet_v3_small)]:
        export(name, make(weights=None), torch.randn(1, 3, 224, 224))
