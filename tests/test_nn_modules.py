"""Every ``torch.nn`` module against eager, in train and eval mode: outputs, input and parameter gradients, buffers.

The modules are enumerated from ``torch.nn.modules.__all__``; ``CASES`` gives each one's constructor arguments
and inputs (a default-constructed module on one floating-point input where nothing is given). Every module is
either compared with eager (bitwise, or within ``TOLERANCES`` where thunder runs other kernels than eager, with
the reason), or listed in ``EXPECTED_ERRORS`` with the clear error thunder raises, which the test asserts. A
module that eager itself rejects (``SyncBatchNorm`` training on CPU) must be rejected with the same error type.
Random modules run under the same seed in eager and thunder.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from typing import Callable

import pytest
import torch
import torch.nn as nn
from torch.utils._pytree import tree_flatten

import thunder
from thunder.core.proxies import DataDependentError
from tests.metadata_check import CheckMetadata

# Not modules one calls: base classes and containers (covered by the model tests), and options objects.
NOT_CALLABLE = {"Module", "Container", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
                "RNNBase", "RNNCellBase", "LinearCrossEntropyOptions"}


def _f(*shape, low=None):
    def make(g):
        t = torch.randn(*shape, generator=g)
        return t.abs() + low if low is not None else t
    return make


def _long(high, *shape):
    return lambda g: torch.randint(0, high, shape, generator=g)


def _bf16(*shape):  # a reduced-precision input, made from float32 values as _f makes them
    return lambda g: torch.randn(*shape, generator=g).bfloat16()


def _sign(*shape):
    return lambda g: torch.randint(0, 2, shape, generator=g).float() * 2 - 1


def _prob(*shape):
    return lambda g: torch.rand(*shape, generator=g) * 0.98 + 0.01


def _log_prob(*shape, dim=-1):
    return lambda g: torch.randn(*shape, generator=g).log_softmax(dim)


def _const(value):
    return lambda g: value.clone()


@dataclasses.dataclass(frozen=True)
class Case:
    """A module's constructor arguments and inputs. ``inputs`` are factories taking a generator; ``grad`` are the
    indices of the inputs that require grad (default: the first, if floating point); ``pre`` is applied to the
    inputs inside the jitted program (e.g. to pass an intermediate to an in-place module)."""

    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    inputs: tuple = (_f(2, 3, 4),)
    grad: tuple | None = None
    pre: Callable | None = None
    cls: str | None = None  # the module class, for variants (``ReLU-inplace``)
    warmup: bool = False  # call the module once eagerly before jitting it (a lazy module then has its parameters)


def _im(c=4):  # an image batch
    return (_f(2, c, 6, 6),)


def _vol(c=3):
    return (_f(2, c, 4, 4, 4),)


def _seq(c=3):
    return (_f(2, c, 8),)


_PAIR = (_f(5, 4), _f(5, 4))
_ENC = dict(d_model=8, nhead=2, dim_feedforward=16)


def _max_unpool_inputs(n):
    pool = getattr(nn, f"MaxPool{n}d")(2, return_indices=True)
    shape = {1: (2, 3, 8), 2: (2, 3, 6, 6), 3: (2, 3, 4, 4, 4)}[n]

    def values(g):
        return pool(torch.randn(*shape, generator=torch.Generator().manual_seed(5)))[0]

    def indices(g):
        return pool(torch.randn(*shape, generator=torch.Generator().manual_seed(5)))[1]

    return (values, indices)


def _multilabel_target(g):
    t = torch.randint(0, 4, (3, 4), generator=g)
    t[:, 2:] = -1
    return t


_INPLACE = ("ReLU", "ReLU6", "ELU", "SELU", "CELU", "LeakyReLU", "Hardtanh", "Hardswish", "Hardsigmoid", "SiLU", "Mish",
            "RReLU", "Dropout", "AlphaDropout", "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout")


_IGNORE_INPLACE = ("AlphaDropout", "FeatureAlphaDropout")  # their forward never passes inplace to the functional


def _inplace_input(name):
    return {"Dropout1d": _seq(), "Dropout2d": _im(), "Dropout3d": _vol(), "FeatureAlphaDropout": _im()}.get(name, (_f(2, 3, 4),))


CASES: dict[str, Case] = {
    **{f"AdaptiveAvgPool{n}d": Case((2,), inputs=i) for n, i in ((1, _seq()), (2, _im()), (3, _vol()))},
    **{f"AdaptiveMaxPool{n}d": Case((2,), inputs=i) for n, i in ((1, _seq()), (2, _im()), (3, _vol()))},
    "AdaptiveLogSoftmaxWithLoss": Case((8, 10, [4, 8]), inputs=(_f(6, 8), _long(10, 6))),
    **{f"AvgPool{n}d": Case((2,), inputs=i) for n, i in ((1, _seq()), (2, _im()), (3, _vol()))},
    **{f"LPPool{n}d": Case((2, 2), inputs=i) for n, i in ((1, _seq()), (2, _im()), (3, _vol()))},
    **{f"MaxPool{n}d": Case((2,), inputs=i) for n, i in ((1, _seq()), (2, _im()), (3, _vol()))},
    **{f"MaxUnpool{n}d": Case((2,), inputs=_max_unpool_inputs(n)) for n in (1, 2, 3)},
    "FractionalMaxPool2d": Case((2,), dict(output_size=(3, 3)), inputs=(_f(2, 3, 8, 8),)),
    "FractionalMaxPool3d": Case((2,), dict(output_size=(2, 2, 2)), inputs=(_f(2, 3, 5, 5, 5),)),
    "BCELoss": Case(inputs=(_prob(5, 3), _prob(5, 3))),
    "BCEWithLogitsLoss": Case(inputs=(_f(5, 3), _prob(5, 3))),
    "CrossEntropyLoss": Case(inputs=(_f(5, 4), _long(4, 5))),
    "CTCLoss": Case(inputs=(_log_prob(10, 2, 5), lambda g: torch.randint(1, 5, (2, 4), generator=g),
                            _const(torch.tensor([10, 9])), _const(torch.tensor([4, 3])))),
    "CosineEmbeddingLoss": Case(inputs=(_f(5, 4), _f(5, 4), _sign(5))),
    "GaussianNLLLoss": Case(inputs=(_f(5, 3), _f(5, 3), _f(5, 3, low=0.1))),
    "HingeEmbeddingLoss": Case(inputs=(_f(5, 3), _sign(5, 3))),
    "HuberLoss": Case(inputs=(_f(5, 3), _f(5, 3))),
    "KLDivLoss": Case(kwargs=dict(reduction="batchmean"), inputs=(_log_prob(5, 3), _prob(5, 3))),
    "L1Loss": Case(inputs=(_f(5, 3), _f(5, 3)), grad=(0, 1)),
    "MSELoss": Case(inputs=(_f(5, 3), _f(5, 3)), grad=(0, 1)),
    "MarginRankingLoss": Case(inputs=(_f(5), _f(5), _sign(5))),
    "MultiLabelMarginLoss": Case(inputs=(_f(3, 4), _multilabel_target)),
    "MultiLabelSoftMarginLoss": Case(inputs=(_f(3, 4), lambda g: torch.randint(0, 2, (3, 4), generator=g).float())),
    "MultiMarginLoss": Case(inputs=(_f(3, 4), _long(4, 3))),
    "NLLLoss": Case(inputs=(_log_prob(5, 4), _long(4, 5))),
    "NLLLoss2d": Case(inputs=(_log_prob(2, 4, 3, 3, dim=1), _long(4, 2, 3, 3))),
    "PoissonNLLLoss": Case(inputs=(_f(5, 3), _f(5, 3, low=0.0))),
    "SmoothL1Loss": Case(inputs=(_f(5, 3), _f(5, 3))),
    "SoftMarginLoss": Case(inputs=(_f(5, 3), _sign(5, 3))),
    "TripletMarginLoss": Case(inputs=(_f(5, 4), _f(5, 4), _f(5, 4)), grad=(0, 1, 2)),
    "TripletMarginWithDistanceLoss": Case(inputs=(_f(5, 4), _f(5, 4), _f(5, 4)), grad=(0, 1, 2)),
    "LinearCrossEntropyLoss": Case((4, 6), inputs=(_f(5, 4), _long(6, 5))),
    **{f"BatchNorm{n}d": Case((4,), inputs=i) for n, i in ((1, (_f(3, 4),)), (2, _im()), (3, _vol(4)))},
    **{f"LazyBatchNorm{n}d": Case(inputs=i) for n, i in ((1, (_f(3, 4),)), (2, _im()), (3, _vol(4)))},
    **{f"LazyBatchNorm{n}d-initialized": Case(inputs=i, cls=f"LazyBatchNorm{n}d", warmup=True)
       for n, i in ((1, (_f(3, 4),)), (2, _im()), (3, _vol(4)))},
    **{f"InstanceNorm{n}d": Case((4,), inputs=i) for n, i in ((1, _seq(4)), (2, _im()), (3, _vol(4)))},
    **{f"InstanceNorm{n}d-affine-tracked": Case((4,), dict(affine=True, track_running_stats=True), inputs=i,
                                               cls=f"InstanceNorm{n}d")
       for n, i in ((1, _seq(4)), (2, _im()), (3, _vol(4)))},
    **{f"LazyInstanceNorm{n}d": Case(inputs=i) for n, i in ((1, _seq(4)), (2, _im()), (3, _vol(4)))},
    **{f"LazyInstanceNorm{n}d-initialized": Case(inputs=i, cls=f"LazyInstanceNorm{n}d", warmup=True)
       for n, i in ((1, _seq(4)), (2, _im()), (3, _vol(4)))},
    "SyncBatchNorm": Case((4,), inputs=_im()),
    "GroupNorm": Case((2, 4), inputs=_seq(4)),
    "LayerNorm": Case((4,)),
    "RMSNorm": Case((4,)),
    "LocalResponseNorm": Case((2,), inputs=_im()),
    "CrossMapLRN2d": Case((3,), inputs=_im()),
    **{f"Conv{n}d": Case((3, 4, 3), inputs=i) for n, i in ((1, _seq()), (2, _im(3)), (3, _vol()))},
    **{f"ConvTranspose{n}d": Case((3, 4, 3), inputs=i) for n, i in ((1, _seq()), (2, _im(3)), (3, _vol()))},
    **{f"LazyConv{n}d": Case((4, 3), inputs=i) for n, i in ((1, _seq()), (2, _im(3)), (3, _vol()))},
    **{f"LazyConvTranspose{n}d": Case((4, 3), inputs=i) for n, i in ((1, _seq()), (2, _im(3)), (3, _vol()))},
    **{f"Lazy{kind}{n}d-initialized": Case((4, 3), inputs=i, cls=f"Lazy{kind}{n}d", warmup=True)
       for kind in ("Conv", "ConvTranspose") for n, i in ((1, _seq()), (2, _im(3)), (3, _vol()))},
    "Linear": Case((4, 5)),
    "LazyLinear": Case((5,)),
    "LazyLinear-initialized": Case((5,), cls="LazyLinear", warmup=True),
    "Bilinear": Case((3, 4, 5), inputs=(_f(6, 3), _f(6, 4)), grad=(0, 1)),
    "Identity": Case(),
    "Embedding": Case((10, 3), inputs=(_long(10, 2, 4),)),
    "EmbeddingBag": Case((10, 3), inputs=(_long(10, 2, 4),)),
    "Flatten": Case(),
    "Unflatten": Case((1, (2, 2)), inputs=(_f(3, 4),)),
    "Fold": Case(((4, 5), (2, 2)), inputs=(_f(1, 12, 12),)),
    "Unfold": Case(((2, 2),), inputs=(_f(1, 3, 4, 5),)),
    "ChannelShuffle": Case((2,), inputs=_im()),
    "PixelShuffle": Case((2,), inputs=(_f(1, 8, 3, 3),)),
    "PixelUnshuffle": Case((2,), inputs=(_f(1, 2, 4, 4),)),
    "Upsample": Case(kwargs=dict(scale_factor=2), inputs=(_f(1, 2, 3, 3),)),
    "UpsamplingBilinear2d": Case(kwargs=dict(scale_factor=2), inputs=(_f(1, 2, 3, 3),)),
    "UpsamplingNearest2d": Case(kwargs=dict(scale_factor=2), inputs=(_f(1, 2, 3, 3),)),
    **{f"{kind}Pad{n}d": Case((2,) if kind != "Constant" else (2, 3.5), inputs=i)
       for kind in ("Circular", "Constant", "Reflection", "Replication", "Zero")
       for n, i in ((1, _seq()), (2, _im(3)), (3, _vol()))},
    "CosineSimilarity": Case(inputs=_PAIR, grad=(0, 1)),
    "PairwiseDistance": Case(inputs=_PAIR, grad=(0, 1)),
    "GLU": Case(inputs=(_f(4, 6),)),
    "LogSoftmax": Case(kwargs=dict(dim=1)),
    "Softmax": Case(kwargs=dict(dim=1)),
    "Softmin": Case(kwargs=dict(dim=1)),
    "Softmax2d": Case(inputs=_im(3)),
    "Threshold": Case((0.1, 20.0)),
    "PReLU": Case(),
    "MultiheadAttention": Case((8, 2), inputs=(_f(3, 2, 8), _f(4, 2, 8), _f(4, 2, 8)), grad=(0, 1, 2)),
    **{name: Case((4, 5), inputs=(_f(3, 2, 4),)) for name in ("RNN", "GRU", "LSTM")},
    **{name: Case((4, 5), inputs=(_f(2, 4),)) for name in ("RNNCell", "GRUCell", "LSTMCell")},
    "Transformer": Case(kwargs=dict(num_encoder_layers=1, num_decoder_layers=1, **_ENC),
                        inputs=(_f(4, 2, 8), _f(3, 2, 8)), grad=(0, 1)),
    "TransformerEncoderLayer": Case(kwargs=_ENC, inputs=(_f(4, 2, 8),)),
    "TransformerDecoderLayer": Case(kwargs=_ENC, inputs=(_f(3, 2, 8), _f(4, 2, 8)), grad=(0, 1)),
    "TransformerEncoder": Case((nn.TransformerEncoderLayer(**_ENC), 1), inputs=(_f(4, 2, 8),)),
    "TransformerDecoder": Case((nn.TransformerDecoderLayer(**_ENC), 1), inputs=(_f(3, 2, 8), _f(4, 2, 8)), grad=(0, 1)),
    # in-place activations and dropouts, on an intermediate (eager refuses an in-place update of a leaf requiring grad)
    **{f"{name}-inplace": Case(kwargs=dict(inplace=True), inputs=_inplace_input(name), pre=lambda x: x * 1, cls=name)
       for name in _INPLACE},
    **{f"{name}-inplace-on-view": Case(kwargs=dict(inplace=True), inputs=_inplace_input(name),
                                       pre=lambda x: (x * 1)[:, 1:], cls=name) for name in _INPLACE},
}

def _kpm(g):  # a key padding mask: the last key of the second batch element is padding
    m = torch.zeros(2, 4, dtype=torch.bool)
    m[1, -1] = True
    return m


_W4 = _const(torch.tensor([1.0, 2.0, 0.5, 1.5]))

# Non-default arguments: the paths of the same modules that default construction does not reach.
VARIANTS: dict[str, Case] = {
    "Conv2d-same-dilated-grouped-nobias": Case((4, 8, 3), dict(padding="same", dilation=2, groups=2, bias=False),
                                               inputs=_im()),
    "Conv1d-strided-reflect": Case((3, 4, 3), dict(stride=2, padding=1, padding_mode="reflect"), inputs=_seq()),
    "Conv2d-circular": Case((3, 4, 3), dict(padding=1, padding_mode="circular"), inputs=_im(3)),
    "ConvTranspose2d-strided-output-padding": Case((3, 4, 3), dict(stride=2, padding=1, output_padding=1),
                                                   inputs=_im(3)),
    "Linear-nobias": Case((4, 5), dict(bias=False)),
    "Bilinear-nobias": Case((3, 4, 5), dict(bias=False), inputs=(_f(6, 3), _f(6, 4)), grad=(0, 1)),
    "BatchNorm2d-untracked": Case((4,), dict(track_running_stats=False), inputs=_im()),
    "BatchNorm1d-cumulative": Case((4,), dict(momentum=None), inputs=(_f(3, 4, 5),)),
    "BatchNorm2d-no-affine": Case((4,), dict(affine=False), inputs=_im()),
    # reduced precision: the CPU kernel saves its statistics in the input's dtype, or in float32 where the parameters
    # are float32 ("mixed type"); in evaluation it saves none (empty tensors)
    "BatchNorm2d-bfloat16": Case((4,), dict(dtype=torch.bfloat16), inputs=(_bf16(2, 4, 6, 6),)),
    "BatchNorm2d-bfloat16-input": Case((4,), inputs=(_bf16(2, 4, 6, 6),)),
    "BatchNorm1d-bfloat16-no-affine": Case((4,), dict(affine=False, dtype=torch.bfloat16), inputs=(_bf16(3, 4, 5),)),
    "LayerNorm-bfloat16": Case((4,), dict(dtype=torch.bfloat16), inputs=(_bf16(2, 3, 4),)),
    "LayerNorm-bfloat16-input": Case((4,), inputs=(_bf16(2, 3, 4),)),
    "GroupNorm-bfloat16": Case((2, 4), dict(dtype=torch.bfloat16), inputs=(_bf16(2, 4, 6, 6),)),
    "GroupNorm-bfloat16-input": Case((2, 4), inputs=(_bf16(2, 4, 6, 6),)),
    "RMSNorm-bfloat16": Case((4,), dict(dtype=torch.bfloat16), inputs=(_bf16(2, 3, 4),)),
    "RMSNorm-bfloat16-input": Case((4,), inputs=(_bf16(2, 3, 4),)),
    "InstanceNorm1d-bfloat16-input-affine": Case((4,), dict(affine=True, track_running_stats=True),
                                                 inputs=(_bf16(2, 4, 5),)),
    "InstanceNorm2d-bfloat16-affine": Case((4,), dict(affine=True, track_running_stats=True, dtype=torch.bfloat16),
                                           inputs=(_bf16(2, 4, 6, 6),)),
    "InstanceNorm2d-affine": Case((4,), dict(affine=True), inputs=_im()),
    "LayerNorm-no-affine-2d": Case(((3, 4),), dict(elementwise_affine=False)),
    "LayerNorm-no-bias": Case((4,), dict(bias=False)),
    "GroupNorm-no-affine": Case((2, 4), dict(affine=False), inputs=_im()),
    "RMSNorm-eps": Case(((3, 4),), dict(eps=1e-3)),
    "LocalResponseNorm-args": Case((3,), dict(alpha=1e-3, beta=0.5, k=2.0), inputs=_im()),
    "Embedding-padding-idx": Case((10, 3), dict(padding_idx=0), inputs=(_long(10, 2, 4),)),
    "Embedding-max-norm": Case((10, 3), dict(max_norm=1.0), inputs=(_long(10, 2, 4),)),
    "Embedding-scale-grad-by-freq": Case((10, 3), dict(scale_grad_by_freq=True), inputs=(_long(10, 2, 4),)),
    "EmbeddingBag-sum-per-sample-weights": Case((10, 3), dict(mode="sum"), inputs=(
        _const(torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])), _const(torch.tensor([0, 4])), _f(8)), grad=(2,)),
    "EmbeddingBag-max": Case((10, 3), dict(mode="max"), inputs=(_long(10, 2, 4),)),
    "CrossEntropyLoss-weight-ignore-smoothing": Case(kwargs=dict(weight=torch.tensor([1.0, 2.0, 0.5, 1.5]),
                                                                 ignore_index=1, label_smoothing=0.1),
                                                     inputs=(_f(5, 4), _long(4, 5))),
    "CrossEntropyLoss-probabilities": Case(inputs=(_f(5, 4), lambda g: torch.rand(5, 4, generator=g).softmax(-1))),
    "CrossEntropyLoss-sum-4d": Case(kwargs=dict(reduction="sum"), inputs=(_f(2, 4, 3, 3), _long(4, 2, 3, 3))),
    "NLLLoss-weight-ignore": Case(kwargs=dict(weight=torch.tensor([1.0, 2.0, 0.5, 1.5]), ignore_index=2),
                                  inputs=(_log_prob(5, 4), _long(4, 5))),
    "BCELoss-weight": Case(kwargs=dict(weight=torch.tensor([1.0, 2.0, 0.5])), inputs=(_prob(5, 3), _prob(5, 3))),
    "BCEWithLogitsLoss-pos-weight": Case(kwargs=dict(pos_weight=torch.tensor([1.0, 2.0, 0.5])),
                                         inputs=(_f(5, 3), _prob(5, 3))),
    "KLDivLoss-log-target": Case(kwargs=dict(reduction="sum", log_target=True), inputs=(_log_prob(5, 3), _log_prob(5, 3))),
    "PoissonNLLLoss-full": Case(kwargs=dict(log_input=False, full=True), inputs=(_f(5, 3, low=0.1), _f(5, 3, low=1.0))),
    "HuberLoss-delta": Case(kwargs=dict(delta=0.5, reduction="sum"), inputs=(_f(5, 3), _f(5, 3))),
    "SmoothL1Loss-beta": Case(kwargs=dict(beta=0.5, reduction="none"), inputs=(_f(5, 3), _f(5, 3))),
    "L1Loss-sum": Case(kwargs=dict(reduction="sum"), inputs=(_f(5, 3), _f(5, 3))),
    "MSELoss-none": Case(kwargs=dict(reduction="none"), inputs=(_f(5, 3), _f(5, 3)), grad=(0, 1)),
    "MarginRankingLoss-margin": Case(kwargs=dict(margin=0.5), inputs=(_f(5), _f(5), _sign(5))),
    "TripletMarginLoss-swap-p1": Case(kwargs=dict(swap=True, p=1.0), inputs=(_f(5, 4), _f(5, 4), _f(5, 4)),
                                      grad=(0, 1, 2)),
    "MultiMarginLoss-p2-weight": Case(kwargs=dict(p=2, margin=0.5, weight=torch.tensor([1.0, 2.0, 0.5, 1.5])),
                                      inputs=(_f(3, 4), _long(4, 3))),
    "Upsample-bilinear-align-corners": Case(kwargs=dict(scale_factor=2, mode="bilinear", align_corners=True),
                                            inputs=(_f(1, 2, 3, 3),)),
    "Upsample-bicubic": Case(kwargs=dict(size=(5, 7), mode="bicubic"), inputs=(_f(1, 2, 3, 3),)),
    "Upsample-nearest-exact": Case(kwargs=dict(scale_factor=1.5, mode="nearest-exact"), inputs=(_f(1, 2, 4, 4),)),
    "Upsample-trilinear": Case(kwargs=dict(scale_factor=2, mode="trilinear"), inputs=(_f(1, 2, 2, 3, 3),)),
    "MaxPool2d-indices-ceil-dilated": Case((2,), dict(return_indices=True, ceil_mode=True, dilation=2), inputs=_im()),
    "AvgPool2d-padded-exclusive": Case((3,), dict(stride=2, padding=1, count_include_pad=False, ceil_mode=True),
                                       inputs=_im()),
    "AvgPool2d-divisor": Case((2,), dict(divisor_override=3), inputs=_im()),
    "AdaptiveAvgPool2d-none": Case(((None, 2),), inputs=_im()),
    "AdaptiveMaxPool2d-indices": Case((2,), dict(return_indices=True), inputs=_im()),
    "LPPool2d-fractional-norm": Case((1.5, 2), inputs=(_f(2, 3, 6, 6, low=0.1),)),
    "ZeroPad2d-asymmetric": Case(((1, 2, 0, 3),), inputs=_im()),
    "ReflectionPad2d-asymmetric": Case(((1, 0, 2, 1),), inputs=_im()),
    "LeakyReLU-slope": Case((0.2,)), "Hardtanh-range": Case((-2.0, 2.0)), "ELU-alpha": Case((0.5,)),
    "CELU-alpha": Case((0.5,)), "Softplus-beta-threshold": Case(kwargs=dict(beta=2.0, threshold=5.0)),
    "GELU-tanh": Case(("tanh",)), "Threshold-negative": Case((0.5, -1.0)), "RReLU-range": Case((0.1, 0.3)),
    "PReLU-channels": Case(kwargs=dict(num_parameters=3)), "Softmax-dim0": Case(kwargs=dict(dim=0)),
    "LogSoftmax-last": Case(kwargs=dict(dim=-1)), "Softshrink-lambda": Case((0.8,)), "Hardshrink-lambda": Case((0.8,)),
    "CosineSimilarity-dim0": Case(kwargs=dict(dim=0, eps=1e-6), inputs=_PAIR, grad=(0, 1)),
    "PairwiseDistance-p1-keepdim": Case(kwargs=dict(p=1.0, keepdim=True), inputs=_PAIR, grad=(0, 1)),
    "Flatten-all": Case((0, -1)),
    "Fold-strided-padded": Case(((5, 6), (2, 2)), dict(stride=2, padding=1), inputs=(_f(1, 12, 16),)),
    "Unfold-dilated": Case(((2, 2),), dict(dilation=2, padding=1, stride=2), inputs=(_f(1, 3, 5, 6),)),
    "MultiheadAttention-batch-first-kdim-vdim-masked": Case(
        (8, 2), dict(batch_first=True, kdim=6, vdim=5), inputs=(_f(2, 3, 8), _f(2, 4, 6), _f(2, 4, 5), _kpm),
        grad=(0, 1, 2)),
    "MultiheadAttention-bias-kv-zero-attn": Case((8, 2), dict(add_bias_kv=True, add_zero_attn=True),
                                                  inputs=(_f(3, 2, 8), _f(4, 2, 8), _f(4, 2, 8)), grad=(0, 1, 2)),
    "TransformerEncoderLayer-norm-first-gelu-batch-first": Case(
        kwargs=dict(norm_first=True, activation="gelu", batch_first=True, **_ENC), inputs=(_f(2, 4, 8),)),
    "LSTM-2-layers-bidirectional-batch-first-projected": Case(
        (4, 5), dict(num_layers=2, bidirectional=True, batch_first=True, proj_size=3), inputs=(_f(2, 3, 4),)),
    "GRU-bidirectional": Case((4, 5), dict(bidirectional=True), inputs=(_f(3, 2, 4),)),
    "RNN-relu-nobias": Case((4, 5), dict(nonlinearity="relu", bias=False), inputs=(_f(3, 2, 4),)),
    "LSTM-unbatched": Case((4, 5), inputs=(_f(3, 4),)),
    "Dropout-p0": Case((0.0,)), "Dropout-p1": Case((1.0,)),
}
for _name, _case in VARIANTS.items():
    CASES[_name] = dataclasses.replace(_case, cls=_name.split("-")[0])

_MODULES = [n for n in nn.modules.__all__ if n not in NOT_CALLABLE]
# Cases for classes newer than the oldest torch we run on (2.11): dropped where this torch lacks them.
_NEWER_THAN_TORCH_2_11 = {"LinearCrossEntropyLoss"}
for _name in _NEWER_THAN_TORCH_2_11 - set(_MODULES):
    CASES.pop(_name, None)
for _name in _MODULES:  # the generated rows: the default constructor, on one floating-point input
    CASES.setdefault(_name, Case())

# Where thunder's kernels differ from eager's, compared within (rtol, atol), with the reason.
TOLERANCES: dict[str, tuple[float, float, str]] = {}

_LAZY = "uninitialized (lazy) parameters"
_VALUES = "it reads tensor values"
# Modules thunder refuses, with the error it raises: (exception type, message, reason[, the modes it applies to]).
EXPECTED_ERRORS: dict[str, tuple[type, str, str]] = {
    **{name: (NotImplementedError, _LAZY, "parameter shapes are only known after a first call (see *-initialized)")
       for name in _MODULES if name.startswith("Lazy")},
    "AdaptiveLogSoftmaxWithLoss": (DataDependentError, "needs the value of i0, the number of True elements",
                                   "nonzero().squeeze(): whether the selection's run-time extent is 1 decides the shape"),
    "GaussianNLLLoss": (NotImplementedError, "gaussian_nll_loss: " + _VALUES,
                        "F.gaussian_nll_loss checks var >= 0 by reading the values"),
    "Embedding-max-norm": (NotImplementedError, "embedding with max_norm renormalizes the weight in place",
                           "eager renormalizes the looked-up rows of the weight in place, under no_grad"),
    "BatchNorm1d-cumulative": (DataDependentError, "computed from t_num_batches_tracked, which is not a tensor argument",
                               "momentum=None averages with 1 / float(num_batches_tracked), a Python number read from "
                               "a buffer (training only)", ("train",)),
}


def _xfail_reason(name, mode):
    """Failing for a reason outside this sweep's scope: xfail(strict=True) with that reason (none at present)."""
    return None


def test_every_module_has_a_case():
    unknown = sorted(n for n, c in CASES.items() if (c.cls or n) not in _MODULES)
    assert not unknown, f"cases for classes torch.nn does not have: {unknown}"
    assert not set(EXPECTED_ERRORS) - set(CASES) and not set(TOLERANCES) - set(CASES)


class _Pre(nn.Module):
    """Applies ``pre`` to the first input, then the module (so the module sees an intermediate)."""

    def __init__(self, module, pre):
        super().__init__()
        self.module, self.pre = module, pre

    def forward(self, x, *rest):
        return self.module(self.pre(x), *rest)


def _build(name: str) -> nn.Module:
    case = CASES[name]
    torch.manual_seed(0)
    module = getattr(nn, case.cls or name)(*copy.deepcopy(case.args), **case.kwargs)
    if case.warmup:
        with torch.no_grad():
            module(*_inputs(case))
    return _Pre(module, case.pre) if case.pre else module


def _inputs(case: Case):
    g = torch.Generator().manual_seed(1)
    values = [make(g) for make in case.inputs]
    grad = case.grad if case.grad is not None else ((0,) if values[0].dtype.is_floating_point else ())
    return [v.requires_grad_(True) if i in grad else v for i, v in enumerate(values)]


def _run(module: nn.Module, case: Case, call):
    """Output, gradients (inputs, then parameters; None where there is none) and buffers after one call."""
    inputs = _inputs(case)
    torch.manual_seed(1234)
    out = call(*inputs)
    leaves = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    diff = [o for o in leaves if o.requires_grad]
    wrt = [x for x in inputs if x.requires_grad] + [p for p in module.parameters() if p.requires_grad]
    grads = []
    if diff and wrt:
        g = torch.Generator().manual_seed(2)
        cts = [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in diff]
        grads = list(torch.autograd.grad(diff, wrt, cts, allow_unused=True))
    return [o.detach() for o in leaves], grads, [b.clone() for b in module.buffers()]


def _compare(actual, expected, name, what, tol):
    assert len(actual) == len(expected), f"{name}: number of {what} differs"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if e is None or a is None:
            assert a is None and e is None, f"{name}: {what} {i} is {a} in thunder and {e} in eager"
            continue
        rtol, atol = tol
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{name} ({what} {i}): {m}")


def _params(names):
    out = []
    for name in names:
        for mode in ("train", "eval"):
            reason = _xfail_reason(name, mode)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(name, mode, id=f"{name}-{mode}", marks=marks))
    return out


@pytest.mark.parametrize("name,mode", _params(CASES))
def test_nn_module(name, mode):
    case = CASES[name]
    eager, jitted_module = _build(name), _build(name)  # built alike (a lazy module cannot be copied)
    for m in (eager, jitted_module):
        m.train(mode == "train")
    try:
        expected = _run(eager, case, eager)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:  # eager rejects it: so must thunder
        with pytest.raises(type(e)):
            _run(jitted_module, case, thunder.jit(jitted_module))
        return
    jitted = thunder.jit(jitted_module, transforms=[CheckMetadata()])  # every traced tensor as its proxy says
    exc, match, _, *modes = EXPECTED_ERRORS.get(name, (None, None, None))
    if exc is not None and (not modes or mode in modes[0]):
        with pytest.raises(exc, match=re.escape(match)):
            _run(jitted_module, case, jitted)
        return
    tol = TOLERANCES.get(name, (0, 0))[:2]
    for call in range(2):  # the first call compiles, the second runs the cached program
        actual = _run(jitted_module, case, jitted)
        for what, a, e in zip(("outputs", "gradients", "buffers"), actual, expected):
            _compare(a, e, name, f"call {call}: {what}", tol)
        expected = _run(eager, case, eager)  # the buffers (running statistics) move on
    assert thunder.cache_misses(jitted) == 1, f"{name}: the second call traced again instead of hitting the cache"
