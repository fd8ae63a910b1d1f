"""Vision models train under thunder.jit exactly as in eager, BatchNorm running statistics included.

Each model is compared with a deep copy run eagerly in train mode (BatchNorm batch statistics and
running-stat updates, dropout, stochastic depth) and in eval mode: one forward+backward of the
cross-entropy loss and three SGD steps (``tests/parity.py``). ``tests/vision_models.py`` reproduces
torchvision's and timm's patterns on CPU; the real torchvision and timm models run where those
libraries import (they skip with the reason otherwise).
"""
from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from tests import vision_models as vm
from tests.parity import NotBitwise, check_training_parity

class ClassifierWithLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images, targets):
        return F.cross_entropy(self.model(images), targets)


def _check(model, train: bool, not_bitwise: NotBitwise | None = None):
    g = torch.Generator().manual_seed(1)
    images, targets = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
    check_training_parity(ClassifierWithLoss(model).train(train), (images, targets), loss_of=lambda loss: loss,
                          not_bitwise=not_bitwise)


CPU_MODELS = {
    "resnet_basic": lambda: vm.ResNet(vm.BasicBlock, layers=(2, 1)),
    "resnet_bottleneck": lambda: vm.ResNet(vm.Bottleneck, layers=(1, 1)),
    "mobilenet_v3": lambda: vm.MobileNetV3(),
    "efficientnet": lambda: vm.EfficientNet(),
    # The same blocks (MBConv, SiLU, squeeze-excitation, stochastic depth) with an out-of-place classifier dropout.
    "efficientnet_dropout_out_of_place": lambda: vm.EfficientNet(inplace_dropout=False),
    "vit_torchvision": lambda: vm.VisionTransformer(),
    "vit_timm": lambda: vm.VisionTransformer(timm_style=True),
    "convnext": lambda: vm.ConvNeXt(),
}
CPU_XFAIL = {}

NOT_BITWISE = {}  # every model is bitwise


def _params(models, xfails):
    return [pytest.param(name, train, id=f"{name}-{'train' if train else 'eval'}",
                         marks=[xfails[name]] if name in xfails else [])
            for name in models for train in (True, False)]


@pytest.mark.parametrize("name,train", _params(CPU_MODELS, CPU_XFAIL))
def test_training_parity(name, train):
    torch.manual_seed(0)
    _check(CPU_MODELS[name](), train, NOT_BITWISE.get(name))


# ---------------------------------------------------------------------------------------------
# The libraries' own models, where they import
# ---------------------------------------------------------------------------------------------


def _library(name: str):
    try:
        return importlib.import_module(name)
    except Exception as e:  # a CUDA torchvision build fails to load its extension against a CPU torch
        pytest.skip(f"{name} does not import here ({type(e).__name__}: {e})")


LIBRARY_MODELS = {
    "torchvision_resnet18": ("torchvision", lambda tv: tv.models.resnet18(num_classes=10)),
    "torchvision_mobilenet_v3_small": ("torchvision", lambda tv: tv.models.mobilenet_v3_small(num_classes=10)),
    "torchvision_efficientnet_b0": ("torchvision", lambda tv: tv.models.efficientnet_b0(num_classes=10)),
    "timm_resnet18": ("timm", lambda timm: timm.create_model("resnet18", pretrained=False, num_classes=10)),
    "timm_vit_tiny": ("timm", lambda timm: timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10,
                                                             img_size=32, patch_size=8)),
    "timm_convnext_atto": ("timm", lambda timm: timm.create_model("convnext_atto", pretrained=False, num_classes=10)),
}
LIBRARY_XFAIL = {}


@pytest.mark.parametrize("name,train", _params(LIBRARY_MODELS, LIBRARY_XFAIL))
def test_library_training_parity(name, train):
    library, make = LIBRARY_MODELS[name]
    module = _library(library)
    torch.manual_seed(0)
    _check(make(module), train, NOT_BITWISE.get(name))
