"""The CUDA paths, against eager on the same GPU (skipped where there is no GPU).

cuDNN is made deterministic, so eager and thunder's torch executor, which run the same kernels, agree
bitwise; dropout draws its mask on CUDA with the fused ``native_dropout`` kernel, as eager does. The
default executors on CUDA fuse with inductor ("inductor_cuda"): those runs agree within float tolerance,
and their dropout masks are drawn as thunder's decomposition draws them (see [Note: random numbers in
fused regions] in thunder/executors/inductorex.py).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from tests.libraries import import_library
from tests.models import GPT, GPTConfig, LMLoss
from tests.parity import NotBitwise, check_training_parity

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
TORCH = ["torch"]  # eager's kernels, for the bitwise comparisons


@pytest.fixture(autouse=True)
def deterministic():
    old = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = old


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpt_training_parity_on_cuda(dtype):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=128, block_size=32, dropout=0.1))
    model = LMLoss(model).to("cuda", dtype)
    idx = torch.randint(0, 128, (4, 32), device="cuda")
    check_training_parity(model.train(), (idx, idx), loss_of=lambda loss: loss, executors=TORCH)


def test_dropout_mask_is_eagers_on_cuda():
    def f(x):
        return F.dropout(x, 0.3) * 2

    x = torch.randn(64, 64, device="cuda")
    jf = thunder.jit(f, executors=TORCH)
    for seed in range(3):
        torch.manual_seed(seed)
        expected = f(x)
        torch.manual_seed(seed)
        assert torch.equal(jf(x), expected)


@pytest.mark.parametrize("how", ["F.dropout(inplace=True)", "torch.dropout_", "nn.Dropout(inplace=True) on a view"])
def test_inplace_dropout_mask_is_eagers_on_cuda(how):
    """In-place dropout draws its mask with bernoulli_ on CUDA too (not the fused kernel): as eager does."""
    drop = nn.Dropout(0.2, inplace=True)

    def f(x):
        y = x * 1
        if how == "F.dropout(inplace=True)":
            F.dropout(y, 0.3, inplace=True)
        elif how == "torch.dropout_":
            torch.dropout_(y, 0.3, True)
        else:
            drop(y.flatten(1))
        return y * 2

    x = torch.randn(16, 64, device="cuda", requires_grad=True)
    jf = thunder.jit(f, executors=TORCH)
    torch.manual_seed(0)
    expected = f(x)
    expected.sum().backward()
    expected_grad, x.grad = x.grad, None
    torch.manual_seed(0)
    actual = jf(x)
    actual.sum().backward()
    assert torch.equal(actual, expected) and torch.equal(x.grad, expected_grad)


def test_autocast_on_cuda():
    lin = nn.Linear(32, 32).cuda()

    def f(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return lin(x).relu().sum(-1)

    x = torch.randn(8, 32, device="cuda")
    assert torch.equal(thunder.jit(f, executors=TORCH)(x), f(x))


def test_inplace_and_views_on_cuda():
    def f(x, buf):
        y = x * 1
        y[:, 1:].masked_fill_(y[:, 1:] > 0, 0.0)
        buf[0] += y.sum()
        return y

    x = torch.randn(4, 5, device="cuda")
    b1, b2 = torch.zeros(3, device="cuda"), torch.zeros(3, device="cuda")
    assert torch.equal(thunder.jit(f, executors=TORCH)(x, b1), f(x, b2))
    assert torch.equal(b1, b2)


def test_data_dependent_shapes_on_cuda():
    def f(x):
        idx = torch.nonzero(x > 0).squeeze(1)
        return x[idx].sum() + x[x < 0].abs().mean()

    jf = thunder.jit(f, executors=TORCH)
    for _ in range(3):
        x = torch.randn(100, device="cuda")
        torch.testing.assert_close(jf(x), f(x))


@pytest.mark.parametrize("cudnn", [False, True], ids=["native kernels", "cudnn"])
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "efficientnet_b0"])
def test_torchvision_training_parity_on_cuda(name, cudnn):
    """With cuDNN off, eager and thunder run the same kernels: bitwise. With cuDNN on, eager's ``F.batch_norm`` runs
    cuDNN's batch norm and thunder ATen's native one (its functional form, which thunder needs): sums in another
    order. TF32 is off for the convolutions: in TF32, those last-bit differences of a layer's input round its
    products otherwise, and through the network the first convolutions' gradients differed by 0.12 (ResNet-18)
    to 0.29 (EfficientNet-B0) on an H200; without TF32 the largest difference there was 0.012 (one element of an
    EfficientNet-B0 gradient, after an optimizer step)."""
    tv = import_library("torchvision")
    torch.manual_seed(0)
    model = getattr(tv.models, name)(num_classes=10).cuda()

    class WithLoss(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, images, targets):
            return F.cross_entropy(self.m(images), targets)

    images = torch.randn(4, 3, 64, 64, device="cuda")
    targets = torch.randint(0, 10, (4,), device="cuda")
    cudnn_bn = NotBitwise("BatchNorm: eager runs cuDNN's kernels, thunder ATen's native ones", atol=3e-2, rtol=5e-2)
    with torch.backends.cudnn.flags(enabled=cudnn, deterministic=True, benchmark=False, allow_tf32=False):
        check_training_parity(WithLoss(model).train(), (images, targets), loss_of=lambda loss: loss, steps=1,
                              not_bitwise=cudnn_bn if cudnn else None, executors=TORCH)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_default_executors_fuse_on_cuda(dtype):
    """The default executors on CUDA fuse with inductor: GPT training (no dropout) matches eager within tolerance."""
    torch.manual_seed(0)
    model = LMLoss(GPT(GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=128, block_size=32, dropout=0.0)))
    model = model.to("cuda", dtype)
    ref = copy.deepcopy(model)
    jm = thunder.jit(model)
    idx = torch.randint(0, 128, (4, 32), device="cuda")
    loss, ref_loss = jm(idx, idx), ref(idx, idx)
    loss.backward()
    ref_loss.backward()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype is torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss, ref_loss, **tol)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
    assert "InductorFusion0" in str(thunder.last_traces(jm)[-1])
    assert "InductorFusion0" in str(thunder.last_backward_traces(jm)[-1])


def test_fused_dropout_on_cuda_is_deterministic_and_uses_the_forward_mask():
    def f(x):
        return F.dropout(x.sin(), 0.3) * 2

    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    jf = thunder.jit(f)
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        out = jf(x)
        out.sum().backward()
        outs.append((out.detach(), x.grad.clone()))
        x.grad = None
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(outs[0][0] == 0, outs[0][1] == 0)  # the gradient is zero exactly where the mask dropped
    assert "InductorFusion0" in str(thunder.last_traces(jf)[-1])
