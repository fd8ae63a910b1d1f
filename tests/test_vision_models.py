"""Vision models train under thunder.jit exactly as in eager, BatchNorm running statistics included.

Each model is compared with a deep copy run eagerly in train mode (BatchNorm batch statistics and
running-stat updates, dropout, stochastic depth) and in eval mode: one forward+backward of the
cross-entropy loss and three SGD steps (``tests/parity.py``). ``tests/vision_models.py`` reproduces
torchvision's and timm's patterns on CPU; the real torchvision and timm models run where those
libraries import (they skip with the reason otherwise; tests/libraries.py imports a CUDA build of torchvision
on a CPU torch).
"""
from __future__ import annotations

import copy

import shutil

import pytest
import torch
import torch.nn.functional as F

import thunder

from tests import vision_models as vm
from tests.libraries import import_library
from tests.parity import NotBitwise, check_training_parity, one_thread

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


def _torchvision(name: str, **kwargs):
    return "torchvision", lambda tv: getattr(tv.models, name)(num_classes=10, **kwargs)


def _timm(name: str, **kwargs):
    return "timm", lambda timm: timm.create_model(name, pretrained=False, num_classes=10, **kwargs)


# Each model at 64x64 (the smallest that every one of them takes), batch 2.
LIBRARY_MODELS = {
    **{f"torchvision_{name}": _torchvision(name) for name in (
        "resnet18", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf", "shufflenet_v2_x0_5", "squeezenet1_1",
        "mnasnet0_5", "densenet121", "convnext_tiny", "swin_t", "swin_v2_t")},
    # timm's own test models: one small model of each family (ResNet, ByobNet, EfficientNet with batch, group and
    # layer norms, ConvNeXt, NFNet, MambaOut, CoAtNet, MaxViT, ViTs with class or register tokens, RMSNorm, relative
    # position biases)
    **{name: _timm(name) for name in (
        "test_resnet", "test_byobnet", "test_efficientnet", "test_efficientnet_evos", "test_efficientnet_gn",
        "test_efficientnet_ln", "test_convnext", "test_convnext2", "test_convnext3", "test_nfnet", "test_mambaout")},
    **{name: _timm(name, img_size=64) for name in (
        "test_coatnet", "test_maxvit", "test_vit", "test_vit2", "test_vit3", "test_vit4", "test_vit_relpos")},
    "timm_resnet18": _timm("resnet18"),
    "timm_vit_tiny": _timm("vit_tiny_patch16_224", img_size=64, patch_size=16),
    "timm_convnext_atto": _timm("convnext_atto"),
    "timm_shvit_s1": _timm("shvit_s1"),  # group norm of a channel slice
    # window attention (2x2 windows at 64x64: head-split k transposed), relative position biases, ResMLP's affine
    # before a mean over tokens, focal modulation, conv-attention hybrids
    **{f"timm_{name}": _timm(name, img_size=64) for name in (
        "swin_tiny_patch4_window7_224", "resmlp_12_224", "coat_lite_mini", "tnt_s_patch16_224", "gcvit_xxtiny",
        "lambda_resnet26t")},
    # linear layers on transposed tokens (gMLP's spatial gating, CaiT's talking heads, DaViT's channel attention):
    # eager's matmul-and-add_ path of F.linear, whose bias gradient sums as laid out
    **{f"timm_{name}": _timm(name, img_size=64) for name in ("gmlp_ti16_224", "cait_xxs24_224")},
    "timm_davit_tiny": _timm("davit_tiny"),
    # a batch times a matrix needing gradients, one mm of eager's layouts (BoTNet's q @ rel_k.transpose(-1, -2))
    "timm_botnet26t_256": _timm("botnet26t_256", img_size=64),
    # an unsqueezed, batch-normed key into attention: the gradient of unsqueeze keeps its layout (iFormer)
    "timm_iformer_t": _timm("iformer_t"),
    # its first call replaces a buffer by one of another shape (position indices), the second compiles for that
    "timm_convit_tiny": _timm("convit_tiny", img_size=64),
    **{f"timm_{name}": _timm(name) for name in ("edgenext_xx_small", "focalnet_tiny_srf", "swiftformer_xs",
                                                 "mambaout_femto")},
}


def _torchvision_convnext_2_stages(tv):
    """torchvision's ConvNeXt with two small stages (its blocks, a stage's downsampling, the head): a third of the
    compilations of timm's four-stage test ConvNeXt, for the suite's time; layer scale 0.5 (the library's 1e-6
    leaves the blocks' gradients insignificant)."""
    config = tv.models.convnext.CNBlockConfig
    return tv.models.convnext.ConvNeXt([config(24, 32, 1), config(32, None, 2)], layer_scale=0.5, num_classes=10)


FUSED_ONLY_MODELS = {"torchvision_convnext_2_stages": ("torchvision", _torchvision_convnext_2_stages)}
LIBRARY_XFAIL = {}
# (timm's MambaOut, once not bitwise, is since compact saves keep views that elementwise backwards read)
LIBRARY_NOT_BITWISE = {}
LIBRARY_COMPILATIONS = {"timm_convit_tiny": 2}


def _library_case(name: str):
    """The library model ``name`` (skipping where its library does not import) and a batch for it."""
    library, make = LIBRARY_MODELS[name] if name in LIBRARY_MODELS else FUSED_ONLY_MODELS[name]
    module = import_library(library)
    torch.manual_seed(0)
    model = make(module)
    g = torch.Generator().manual_seed(1)
    return model, torch.randn(2, 3, 64, 64, generator=g), torch.randint(0, 10, (2,), generator=g)


@pytest.mark.parametrize("name,train", _params(LIBRARY_MODELS, LIBRARY_XFAIL))
def test_library_training_parity(name, train):
    model, images, targets = _library_case(name)
    # lr 0.01: in eval mode BatchNorm does not renormalize, and larger steps overflow some models
    check_training_parity(ClassifierWithLoss(model).train(train), (images, targets), loss_of=lambda loss: loss,
                          lr=0.01, not_bitwise=LIBRARY_NOT_BITWISE.get(name),
                          compilations=LIBRARY_COMPILATIONS.get(name, 1))




# Fused by the inductor executor (train mode: batch norm's statistics in the regions): the same steps within float
# tolerance (inductor's kernels sum in other orders than eager's). ResNets fused (convolution, batch norm, ReLU,
# residual, max pool: also the model suite's CNN in tests/test_fusion_inductor.py) are left to
# ``scripts/sweep_vision.py torchvision --fused``, which runs all five, for the suite's time; so is MobileNetV3 (its
# blocks of many widths: a minute of cold compilations here).
FUSED_LIBRARY_MODELS = ["test_vit", "torchvision_convnext_2_stages"]


@pytest.mark.parametrize("name", FUSED_LIBRARY_MODELS)
def test_library_training_parity_with_inductor_fusion(name):
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("inductor's CPU kernels need a C++ compiler")
    model, images, targets = _library_case(name)
    jm, _ = check_training_parity(
        ClassifierWithLoss(model).train(True), (images, targets), loss_of=lambda loss: loss, lr=0.01,
        executors=["inductor", "torch"], compilations=LIBRARY_COMPILATIONS.get(name, 1),
        not_bitwise=NotBitwise("inductor's fused kernels sum in other orders than eager's (batch norm's statistics: "
                               "the first convolutions' gradients within 2e-5 of eager's)", atol=1e-4, rtol=1e-3,
                               depends_on_machine=True))
    assert "InductorFusion" in str(thunder.last_backward_traces(jm)[-1])


# ---------------------------------------------------------------------------------------------
# Hugging Face transformers' vision models (small configurations, random weights)
# ---------------------------------------------------------------------------------------------


def _hf(model_cls: str, config_cls: str, **config):
    def make(transformers):
        return getattr(transformers, model_cls)(getattr(transformers, config_cls)(num_labels=10, **config))

    return make


_HF_VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
               patch_size=8)
_HF_STAGES = dict(hidden_sizes=[16, 32, 32, 64], depths=[1, 1, 1, 1])
HF_VISION_MODELS = {
    "vit": _hf("ViTForImageClassification", "ViTConfig", **_HF_VIT),
    "deit": _hf("DeiTForImageClassification", "DeiTConfig", **_HF_VIT),
    "beit": _hf("BeitForImageClassification", "BeitConfig", use_relative_position_bias=True, **_HF_VIT),
    "data2vec_vision": _hf("Data2VecVisionForImageClassification", "Data2VecVisionConfig",
                           use_relative_position_bias=True, **_HF_VIT),
    "dinov2": _hf("Dinov2ForImageClassification", "Dinov2Config", hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=8),
    "swin": _hf("SwinForImageClassification", "SwinConfig", image_size=32, patch_size=2, embed_dim=16,
                depths=[1, 1], num_heads=[2, 2], window_size=4),
    "swinv2": _hf("Swinv2ForImageClassification", "Swinv2Config", image_size=32, patch_size=2, embed_dim=16,
                  depths=[1, 1], num_heads=[2, 2], window_size=4),
    "hiera": _hf("HieraForImageClassification", "HieraConfig", image_size=[32, 32], patch_size=[3, 3],
                 patch_stride=[2, 2], patch_padding=[1, 1], embed_dim=16, num_heads=[1, 2], depths=[1, 1],
                 embed_dim_multiplier=2.0, num_query_pool=1, masked_unit_size=[4, 4]),
    "convnext": _hf("ConvNextForImageClassification", "ConvNextConfig", num_stages=2, hidden_sizes=[16, 32],
                    depths=[1, 1]),
    "convnextv2": _hf("ConvNextV2ForImageClassification", "ConvNextV2Config", num_stages=2, hidden_sizes=[16, 32],
                      depths=[1, 1]),
    "resnet": _hf("ResNetForImageClassification", "ResNetConfig", embedding_size=16, hidden_sizes=[16, 32],
                  depths=[1, 1]),
    "regnet": _hf("RegNetForImageClassification", "RegNetConfig", embedding_size=16, hidden_sizes=[16, 32],
                  depths=[1, 1], groups_width=8),
    "efficientnet": _hf("EfficientNetForImageClassification", "EfficientNetConfig", image_size=32,
                        width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320),
    "mobilenet_v2": _hf("MobileNetV2ForImageClassification", "MobileNetV2Config", image_size=32, depth_multiplier=0.35),
    "mobilevit": _hf("MobileViTForImageClassification", "MobileViTConfig", image_size=32, hidden_sizes=[32, 32, 32],
                     neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
    "poolformer": _hf("PoolFormerForImageClassification", "PoolFormerConfig", **_HF_STAGES),
    "segformer": _hf("SegformerForImageClassification", "SegformerConfig", num_attention_heads=[1, 1, 2, 2],
                     **_HF_STAGES),
    "pvt": _hf("PvtForImageClassification", "PvtConfig", image_size=32, num_attention_heads=[1, 1, 2, 2],
               **_HF_STAGES),
    "focalnet": _hf("FocalNetForImageClassification", "FocalNetConfig", image_size=32, patch_size=2, embed_dim=16,
                    depths=[1, 1]),
}
# LeViT keeps its attention biases in a dict in eval mode, as timm's (see test_library_attention_bias_cache_in_eval_mode)
HF_VISION_TRAIN_ONLY = {
    "levit": _hf("LevitForImageClassification", "LevitConfig", image_size=32, hidden_sizes=[32, 48, 64],
                 num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8]),
}


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


@pytest.mark.parametrize("name,train", [(n, t) for n in HF_VISION_MODELS for t in (True, False)] +
                         [(n, True) for n in HF_VISION_TRAIN_ONLY],
                         ids=lambda v: v if isinstance(v, str) else ("train" if v else "eval"))
def test_hugging_face_vision_training_parity(name, train):
    transformers = import_library("transformers")
    torch.manual_seed(0)
    model = {**HF_VISION_MODELS, **HF_VISION_TRAIN_ONLY}[name](transformers)
    g = torch.Generator().manual_seed(1)
    images, targets = torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g)
    check_training_parity(ClassifierWithLoss(_Logits(model)).train(train), (images, targets),
                          loss_of=lambda loss: loss, lr=0.01)


@pytest.mark.parametrize("library,name", [("timm", "levit_128s"), ("timm", "efficientformerv2_s0"),
                                          ("transformers", "levit")])
def test_library_attention_bias_cache_in_eval_mode(library, name):
    """timm's LeViT and EfficientFormerV2 attention (and Hugging Face's LeViT) keep, in eval mode, a bias gathered from
    a parameter in a dict on the module (``attention_bias_cache``), filled on the first call: a tensor the program
    computes, stored in Python state. thunder fills the dict after the call as eager does (see [Note: state writes]),
    and the next calls, which find the dict filled, read it, as eager's do. Before, the first call left a traced value
    in the dict (the next call failed), and later it was refused."""
    module = import_library(library)
    torch.manual_seed(0)
    if library == "timm":
        model, size = module.create_model(name, pretrained=False, num_classes=10, img_size=64), 64
    else:
        model, size = _Logits(HF_VISION_TRAIN_ONLY[name](module)), 32
    model.eval()
    ref = copy.deepcopy(model)
    jmodel = thunder.jit(model)
    with torch.no_grad(), one_thread():
        for i in range(3):
            x = torch.randn(2, 3, size, size)
            assert torch.equal(jmodel(x), ref(x)), i
            caches = [(m.attention_bias_cache, r.attention_bias_cache) for m, r in zip(model.modules(), ref.modules())
                      if hasattr(m, "attention_bias_cache")]
            assert caches and all(c.keys() == r.keys() and all(torch.equal(c[k], r[k]) for k in c) for c, r in caches)
    assert thunder.cache_misses(jmodel) == 2 and thunder.cache_hits(jmodel) == 1  # filled, then read
