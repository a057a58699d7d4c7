#!/usr/bin/python3
"""Exports one model of each torchvision 0.14 family (classification and
segmentation, untrained weights: speed does not depend on them) to ONNX
opset 17 at batch 1, 3x224x224, with Debian's python3-torch and
python3-torchvision; and single-layer LSTM and GRU classifiers at batch 1
(64 steps of 128 features, hidden 256). Models that do not export are
skipped, with a line on stderr saying why.
Usage: make_torchvision_models.py OUT_DIR [NAME...]   (names: the list below)"""
import os
import sys

try:
    import torch
    import torchvision
except ImportError as missing:
    sys.exit(f"{missing}: install Debian's python3-torch and python3-torchvision (apt install python3-torchvision)")

CLASSIFICATION = ["alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s", "googlenet",
                  "inception_v3", "mnasnet1_0", "mobilenet_v2", "mobilenet_v3_large", "regnet_x_400mf",
                  "regnet_y_400mf", "resnet50", "resnext50_32x4d", "shufflenet_v2_x1_0", "squeezenet1_1", "swin_t",
                  "vgg11_bn", "vit_b_32", "wide_resnet50_2"]
SEGMENTATION = ["deeplabv3_mobilenet_v3_large", "fcn_resnet50", "lraspp_mobilenet_v3_large"]


class Recurrent(torch.nn.Module):
    """One recurrent layer over the sequence, a linear classifier on its last step."""

    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(128, 256, batch_first=True)
        self.head = torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


class SegmentationOutput(torch.nn.Module):
    """torchvision's segmentation models return a dict; its 'out' entry."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def make(name):
    if name in ("lstm", "gru"):
        return Recurrent(torch.nn.LSTM if name == "lstm" else torch.nn.GRU), torch.randn(1, 64, 128)
    if name in SEGMENTATION:
        return SegmentationOutput(getattr(torchvision.models.segmentation, name)(weights=None,
                                                                                 weights_backbone=None)), None
    kwargs = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    return getattr(torchvision.models, name)(weights=None, **kwargs), None


out = sys.argv[1]
names = sys.argv[2:] or CLASSIFICATION + SEGMENTATION + ["lstm", "gru"]
torch.manual_seed(0)
for name in names:
    model, x = make(name)
    model.eval()
    x = torch.randn(1, 3, 224, 224) if x is None else x
    try:
        torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), opset_version=17, input_names=["input"],
                          output_names=["output"])
    except Exception as e:  # an op torch cannot export at opset 17
        print(f"{name}: not exported: {str(e).splitlines()[0]}", file=sys.stderr)
