"""Gradients that are bitwise eager's (see [Note: bitwise gradients of elementwise ops]).

Activations, the elementwise operations models are built from, normalizations, losses and fused matrix
products, in float32, float64 and bfloat16,
and a small EfficientNet-like network trained for three SGD steps: every gradient and every updated
parameter must equal eager's bit for bit.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import thunder

DTYPES = (torch.float32, torch.float64, torch.bfloat16)

ACTIVATIONS = {
    "relu": F.relu, "relu6": F.relu6, "elu": F.elu, "elu-alpha": lambda x: F.elu(x, 0.5), "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7), "leaky_relu": F.leaky_relu, "gelu": F.gelu,
    "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "mish": F.mish, "hardtanh": F.hardtanh,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "hardshrink": F.hardshrink, "softshrink": F.softshrink,
    "tanhshrink": F.tanhshrink, "softplus": F.softplus, "softplus-beta": lambda x: F.softplus(x, 2.0, 5.0),
    "softsign": F.softsign, "logsigmoid": F.logsigmoid, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "F.sigmoid": F.sigmoid, "F.tanh": F.tanh, "threshold": lambda x: F.threshold(x, 0.1, 20.0),
    "softmax": lambda x: F.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, -1),
    "softmin": lambda x: F.softmin(x, -1), "glu": lambda x: F.glu(x, -1),
    "prelu": lambda x: F.prelu(x, torch.tensor([0.25], dtype=x.dtype)), "rrelu-eval": lambda x: F.rrelu(x),
    "silu-by-hand": lambda x: x * torch.sigmoid(x),
    # in place on an intermediate: eager's formulas for the in-place forms read the result
    **{f"{name}_": (lambda f: lambda x: f(x * 1, inplace=True))(f)
       for name, f in (("relu", F.relu), ("elu", F.elu), ("selu", F.selu), ("celu", F.celu), ("leaky_relu", F.leaky_relu),
                       ("hardtanh", F.hardtanh), ("relu6", F.relu6), ("hardswish", F.hardswish), ("silu", F.silu),
                       ("hardsigmoid", F.hardsigmoid), ("mish", F.mish))},
}

ELEMENTWISE = {
    "exp": torch.exp, "expm1": torch.expm1, "exp2": torch.exp2, "log": lambda x: (x.abs() + 0.5).log(),
    "log1p": lambda x: x.abs().log1p(), "log2": lambda x: (x.abs() + 0.5).log2(), "sqrt": lambda x: (x.abs() + 0.1).sqrt(),
    "rsqrt": lambda x: (x.abs() + 0.1).rsqrt(), "reciprocal": lambda x: (x.abs() + 0.5).reciprocal(), "sin": torch.sin,
    "cos": torch.cos, "tan": lambda x: torch.tan(x * 0.3), "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh,
    "asinh": torch.asinh, "erf": torch.erf, "erfc": torch.erfc, "abs": torch.abs, "square": torch.square,
    "pow-3": lambda x: x.pow(3), "pow-2.5": lambda x: x.abs().pow(2.5), "pow-tensor": lambda x: x.abs().pow(x * 0.1),
    "div": lambda x: x / (x.abs() + 1), "mul-broadcast": lambda x: x * x[:1], "atan2": lambda x: torch.atan2(x, x.flip(-1)),
    "hypot": lambda x: torch.hypot(x, x.flip(0)), "logsumexp": lambda x: torch.logsumexp(x, -1),
    "prod": lambda x: x.prod(-1), "rms_norm": lambda x: F.rms_norm(x, (x.shape[-1],)),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)), "group_norm": lambda x: F.group_norm(x.reshape(4, 8, 4), 2),
    "normalize": lambda x: F.normalize(x, dim=-1), "clamp": lambda x: x.clamp(-0.5, 0.5),
    "clamp-tensor": lambda x: x.clamp(x.flip(0) - 1, x.flip(1) + 1), "lerp": lambda x: torch.lerp(x, x.flip(0), 0.3),
    "addcmul": lambda x: torch.addcmul(x, x, x.flip(0), value=0.5), "addcdiv": lambda x: torch.addcdiv(x, x, x.abs() + 1),
    "addcdiv-value": lambda x: torch.addcdiv(x, x.flip(0), x.abs() + 1, value=3.14),  # ATen's value / t2 (OpInfo)
    "where": lambda x: torch.where(x > 0, x, x * 2), "bce-with-logits": lambda x: F.binary_cross_entropy_with_logits(
        x, torch.sigmoid(x.flip(0)).detach()), "smooth_l1": lambda x: F.smooth_l1_loss(x, x.flip(0).detach()),
    "cross_entropy": lambda x: F.cross_entropy(x, torch.arange(x.shape[0]) % x.shape[1]),
    "mse": lambda x: F.mse_loss(x, x.flip(0).detach()),
    "cross_entropy-label-smoothing": lambda x: F.cross_entropy(x, torch.arange(16) % 8, label_smoothing=0.1),
    # a selected element's gradient -0.0 (the cotangent's negative half times 0): eager writes it into zeros
    "max-dim": lambda x: torch.max(x, -1)[0] * 0.0, "min-dim-keepdim": lambda x: x.min(0, keepdim=True).values * 0.0,
    # rolled back (generated program 33497: as a cat of slices, its pieces' zero-padded gradients were summed)
    "roll-amin": lambda x: torch.amin(x.roll(1, 0), 0, keepdim=True), "roll-dims": lambda x: x.roll((3, -1), (0, 1)) * 0.0,
    "roll-flat": lambda x: x.roll(5) * 0.0,
    # sgn's gradient is a ZeroTensor: the products after it stay zeros (0.0), never -0.0 (generated program nn 79552)
    "sgn-of-cos": lambda x: (x * x).cos().sgn().exp(),
    "sum": lambda x: x.sum(-1), "mean": lambda x: x.mean(), "var": lambda x: x.var(-1), "softmax": lambda x: x.softmax(0),
    "rms_norm-weight": lambda x: F.rms_norm(x, (8,), torch.arange(1.0, 9.0).to(x.dtype)),
    "layer_norm-affine": lambda x: F.layer_norm(x, (8,), torch.arange(1.0, 9.0).to(x.dtype), torch.ones(8, dtype=x.dtype)),
    "batch_norm": lambda x: F.batch_norm(x, None, None, training=True),
    "linear": lambda x: F.linear(x, x[:5].detach() * 2, x[0, :5]),
    "addmm": lambda x: torch.addmm(x[:, :5], x, x[:8, :5].detach()),
    "baddbmm": lambda x: torch.baddbmm(x.reshape(2, 8, 8), x.reshape(2, 8, 8), x.reshape(2, 8, 8), beta=0.5, alpha=2),
}


def _input(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(16, 8, generator=g) * 3).to(dtype)
    x[0, :6] = torch.tensor([0.0, -3.0, 3.0, 6.0, -1.0, 1.0])  # kinks of relu6, hardtanh, hardswish, ...
    return x


def _output_and_grad(fn, x):
    x = x.clone().requires_grad_()
    out = fn(x)
    ct = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    (grad,) = torch.autograd.grad(out, x, ct)
    return out.detach(), grad


def assert_bitwise(actual, expected, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    same = torch.eq(actual, expected) | (actual.isnan() & expected.isnan())
    if actual.is_floating_point():  # bit for bit: a zero's sign too
        same &= torch.signbit(actual) == torch.signbit(expected) | actual.isnan()
    assert bool(same.all()), f"{what}: {int((~same).sum())} elements differ, at most by {(actual - expected).abs().max()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ACTIVATIONS) + list(ELEMENTWISE))
def test_gradient_bitwise(name, dtype):
    fn = ACTIVATIONS.get(name) or ELEMENTWISE[name]
    x = _input(dtype)
    expected_out, expected = _output_and_grad(fn, x)
    out, grad = _output_and_grad(thunder.jit(fn), x)
    assert_bitwise(out, expected_out, f"{name} output")
    assert_bitwise(grad, expected, f"{name} gradient")


# ---------------------------------------------------------------------------------------------
# A small EfficientNet: stem, MBConv blocks (expand, depthwise, squeeze-excitation, project), head
# ---------------------------------------------------------------------------------------------


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, reduced):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MBConv(nn.Module):
    def __init__(self, cin, cout, expand, stride):
        super().__init__()
        mid = cin * expand
        self.use_residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
            SqueezeExcitation(mid, max(1, cin // 4)),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_residual else y


class TinyEfficientNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.SiLU())
        self.blocks = nn.Sequential(MBConv(8, 8, 1, 1), MBConv(8, 12, 4, 2), MBConv(12, 12, 4, 1))
        self.head = nn.Sequential(nn.Conv2d(12, 32, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU())
        self.classifier = nn.Linear(32, classes)

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def test_efficientnet_three_sgd_steps_bitwise():
    torch.manual_seed(0)
    model = TinyEfficientNet()
    jmodel = thunder.jit(copy.deepcopy(model))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, jmodel)]
    g = torch.Generator().manual_seed(1)
    for step in range(3):
        x, y = torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 5, (4,), generator=g)
        for m, opt in zip((model, jmodel), opts):
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
        for (name, p), q in zip(model.named_parameters(), jmodel.parameters()):
            assert_bitwise(q.grad, p.grad, f"step {step}: gradient of {name}")
        for opt in opts:
            opt.step()
        for (name, p), q in zip(model.named_parameters(), jmodel.parameters()):
            assert_bitwise(q.detach(), p.detach(), f"step {step}: {name}")
        for (name, b), c in zip(model.named_buffers(), jmodel.buffers()):
            assert torch.equal(b, c), f"step {step}: buffer {name}"


# ---------------------------------------------------------------------------------------------
# Norms of inputs in other layouts than the standard contiguous one
# ---------------------------------------------------------------------------------------------

LAYOUTS = {
    "contiguous": lambda base: base[:, :6].contiguous(),
    "channel slice": lambda base: base[:, 2:8],  # timm's SHViT: a group norm of a split's first part
    "channels_last": lambda base: base[:, :6].contiguous(memory_format=torch.channels_last),
    "channels_last slice": lambda base: base.contiguous(memory_format=torch.channels_last)[:, 2:8],
    "transposed": lambda base: base[:, :6].transpose(2, 3),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_group_norm_of_any_layout_is_bitwise(layout):
    """eager's group norm hands its kernels the input and the gradient contiguous in the input's suggested memory
    format; the kernels refuse others (a channel slice raised) and round by layout."""
    layout_of = LAYOUTS[layout]
    base = torch.randn(2, 10, 5, 6, generator=torch.Generator().manual_seed(0))
    w, b = torch.linspace(0.5, 2, 6), torch.linspace(-1, 1, 6)

    def f(base, w, b):
        return F.group_norm(layout_of(base), 3, w, b)

    def run(fn):
        args = [t.clone().requires_grad_() for t in (base, w, b)]
        out = fn(*args)
        ct = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        return out, torch.autograd.grad(out, args, ct)

    (out, grads), (expected_out, expected_grads) = run(thunder.jit(f)), run(f)
    assert_bitwise(out, expected_out, "output")
    assert out.stride() == expected_out.stride()
    for what, g, e in zip(("input", "weight", "bias"), grads, expected_grads):
        assert_bitwise(g, e, f"gradient of the {what}")


@pytest.mark.parametrize("norm", ["rms_norm", "rms_norm-weight", "layer_norm", "mean-square"])
def test_a_residual_around_a_decomposed_norm_sums_gradients_as_eager(norm):
    """``x + f(norm(x))``: eager's engine adds the gradient parts of ``x`` as they arrive, the residual's first and
    then those of the pieces of a composite (``F.rms_norm`` is ``x * rsqrt(mean(x**2))``: two uses of ``x``). thunder
    differentiates ``F.rms_norm`` through its decomposition: its parts are added to the residual's one by one, as
    eager does, not summed apart first (timm's ViTs with RMSNorm were not bitwise)."""
    g = torch.Generator().manual_seed(0)
    x, w, lin = torch.randn(2, 17, 96, generator=g), torch.randn(96, generator=g), torch.randn(96, 96, generator=g)
    norms = {
        "rms_norm": lambda x, w: F.rms_norm(x, (96,), eps=1e-6),
        "rms_norm-weight": lambda x, w: F.rms_norm(x, (96,), w, 1e-6),
        "layer_norm": lambda x, w: F.layer_norm(x, (96,), w),
        "mean-square": lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
    }

    def f(x, w):
        return x + norms[norm](x, w) @ lin

    def run(fn):
        args = [t.clone().requires_grad_() for t in (x, w)]
        out = fn(*args)
        ct = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        return torch.autograd.grad(out, args, ct, allow_unused=True, materialize_grads=True)

    for what, a, e in zip(("input", "weight"), run(thunder.jit(f)), run(f)):
        assert_bitwise(a, e, f"gradient of the {what}")


@pytest.mark.parametrize("scale", ["addcmul", "mul", "layer_norm"])
def test_the_gradient_of_a_mean_is_a_full_tensor_as_eager(scale):
    """Eager differentiates a mean by expanding the cotangent and dividing it: a full tensor. A broadcast scale's
    gradient sums ``g * x`` over the other dims, and that sum rounds by the layout of ``g`` (timm's ResMLP: an
    affine ``addcmul`` before a mean over the tokens). Dividing first and expanding after gave a stride-0 ``g``."""
    g = torch.Generator().manual_seed(0)
    alpha, beta = torch.randn(96, generator=g), torch.randn(96, generator=g)
    x, lin = torch.randn(2, 17, 96, generator=g), torch.randn(96, 10, generator=g)
    scales = {"addcmul": lambda a, b, x: torch.addcmul(b, a, x), "mul": lambda a, b, x: x * a + b,
              "layer_norm": lambda a, b, x: F.layer_norm(x, (96,), a, b)}

    def f(a, b, x):
        return scales[scale](a, b, x).mean(dim=1) @ lin

    def run(fn):
        args = [t.clone().requires_grad_() for t in (alpha, beta, x)]
        out = fn(*args)
        return torch.autograd.grad(out, args, torch.linspace(-1, 1, out.numel()).reshape(out.shape))

    for what, a, e in zip(("scale", "shift", "input"), run(thunder.jit(f)), run(f)):
        assert_bitwise(a, e, f"gradient of the {what}")


@pytest.mark.parametrize("case", ["attention scores", "attention values", "broadcast batch", "broadcast heads"])
def test_batched_matmul_gradients_are_eager_products(case):
    """torch's matmul folds batched operands to 3-D (copying a transposed, head-split ``k`` it cannot view) and its
    gradients are ``bmm``s of those copies; BLAS rounds by layout, so thunder's gradients use the same folded
    operands (timm's window attention at 2x2 windows, head size 32, was not bitwise)."""
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 4, 3, 3, 32, generator=g)  # (batch, tokens, q/k/v, heads, head size), as timm splits it
    operands = {
        "attention scores": lambda t: (t.permute(2, 0, 3, 1, 4)[0] * 0.1, t.permute(2, 0, 3, 1, 4)[1].transpose(-2, -1)),
        "attention values": lambda t: (t[:, :, 0, :, :4].permute(0, 2, 1, 3).softmax(-1), t.permute(2, 0, 3, 1, 4)[2]),
        "broadcast batch": lambda t: (t[:, :, 0], t[0, :, 1].transpose(-2, -1)),
        "broadcast heads": lambda t: (t[:, :, 0].transpose(1, 2), t[:1, :, 1, :1].permute(0, 2, 3, 1)),
    }

    def f(t):
        a, b = operands[case](t)
        return a @ b

    def run(fn):
        t = qkv.clone().requires_grad_()
        out = fn(t)
        (grad,) = torch.autograd.grad(out, t, torch.linspace(-1, 1, out.numel()).reshape(out.shape))
        return out, grad

    (out, grad), (expected_out, expected_grad) = run(thunder.jit(f)), run(f)
    assert_bitwise(out, expected_out, "output")
    assert_bitwise(grad, expected_grad, "gradient")


class _BmmOperands(TorchDispatchMode):
    """The (shape, strides) of every ``bmm``'s operands run under it."""

    def __init__(self):
        super().__init__()
        self.operands = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten.bmm:
            self.operands.append(tuple((tuple(t.shape), t.stride()) for t in args))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("case", ["one key", "one query", "attention values"])
def test_batched_matmul_gradients_read_operands_with_eagers_strides(case):
    """Eager's ``BmmBackward`` runs ``bmm`` on the transposed folded operands, whose extents of one keep the strides
    the fold's view gave them; thunder's gradients called ``matmul``, which folds them again and restrides those
    extents (a transposed ``(2, 16, 1)`` probability: ``(16, 1, 1)`` for eager, ``(16, 16, 1)`` for thunder). An
    AVX512-FP16 Xeon's ``bmm`` rounds by those strides: PVT's and SegFormer's value gradients differed there (their
    reduced sequence of one key). The strides are compared, so the test fails on every machine."""
    g = torch.Generator().manual_seed(0)
    shapes = {"one key": ((2, 1, 16, 32), (2, 1, 1, 32)), "one query": ((2, 2, 1, 8), (2, 2, 16, 8)),
              "attention values": ((2, 2, 16, 8), (2, 2, 16, 8))}[case]
    q, kv = (torch.randn(s, generator=g) for s in shapes)

    def f(q, kv):
        probs = (q @ kv.transpose(-1, -2) * 0.5).softmax(-1)
        return probs @ kv

    def bmms(fn):
        args = [t.clone().requires_grad_() for t in (q, kv)]
        out = fn(*args)
        with _BmmOperands() as mode:
            grads = torch.autograd.grad(out, args, torch.linspace(-1, 1, out.numel()).reshape(out.shape))
        return sorted(mode.operands), grads

    (operands, grads), (expected_operands, expected_grads) = bmms(thunder.jit(f)), bmms(f)
    assert operands == expected_operands
    for a, e in zip(grads, expected_grads):
        assert_bitwise(a, e, "gradient")


@pytest.mark.parametrize("activation", ["gelu", "silu", "mish", "softplus", "erf"])
def test_a_saved_view_read_by_an_elementwise_backward_is_the_view(activation):
    """``act(conv(x)[:, :, :-1])`` (Hugging Face's wav2vec2 positional convolution drops its last frame): eager saves
    the slice, and the backward's elementwise kernel reads it as a view, in rows too short for its vectorized loop.
    A compact copy (kept for views only matrix products read, which eager copies too) rounded differently."""
    fn = {"gelu": F.gelu, "silu": F.silu, "mish": F.mish, "softplus": F.softplus, "erf": torch.erf}[activation]
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 64, 9, generator=g), torch.randn(64, 16, 16, generator=g) * 0.1

    def f(x, w):
        return fn(F.conv1d(x, w, padding=8, groups=4)[:, :, :-1]).square().sum()

    def run(f):
        weight = w.clone().requires_grad_()
        (grad,) = torch.autograd.grad(f(x, weight), weight)
        return grad

    assert_bitwise(run(thunder.jit(f)), run(f), "gradient of the weight")


@pytest.mark.parametrize("a_layout", ["rows", "columns"])
@pytest.mark.parametrize("b_layout", ["rows", "columns"])
def test_matrix_product_gradients_follow_the_operands_layouts(a_layout, b_layout):
    """Eager's mm backward computes a column-major operand's gradient column-major (``b.mm(g.t()).t()``, not
    ``g.mm(b.t())``): BLAS rounds by layout. CLIP's ``text @ image.t()`` was not bitwise."""
    g = torch.Generator().manual_seed(0)
    a0, b0 = torch.randn(33, 7, generator=g), torch.randn(33, 13, generator=g)

    def operands():
        a = (a0.clone() if a_layout == "columns" else a0.t().contiguous()).requires_grad_()
        b = (b0.t().contiguous() if b_layout == "columns" else b0.clone()).requires_grad_()
        return a, b

    def f(a, b):
        return (a.t() if a_layout == "columns" else a) @ (b.t() if b_layout == "columns" else b)

    def run(fn):
        a, b = operands()
        out = fn(a, b)
        return (out, *torch.autograd.grad(out, (a, b), torch.linspace(-1, 1, out.numel()).reshape(out.shape)))

    for what, x, y in zip(("output", "gradient of a", "gradient of b"), run(thunder.jit(f)), run(f)):
        assert_bitwise(x, y, what)


@pytest.mark.parametrize("a_shape", [(24, 64), (2, 12, 64)], ids=["matrix", "batch"])
@pytest.mark.parametrize("b_of", ["parameter", "transposed", "computed-transposed"])
def test_product_with_a_matrix_that_alone_needs_a_gradient_follows_its_layout(b_of, a_shape):
    """``x @ w`` where only ``w`` needs a gradient: eager's mm keeps ``w``'s strides (not ``w``) and computes its
    gradient column-major when ``w`` is (PEFT's AdaLoRA: ``x @ (lora_A * lora_E).T``); the forward here keeps a
    memoryless tensor laid out as ``w`` for the backward."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*a_shape, generator=g)
    a0, e0 = torch.randn(4, 64, generator=g), torch.randn(4, 1, generator=g)

    def f(x, a, e):
        b = {"parameter": lambda: a.t().contiguous() * 1.0, "transposed": lambda: a.T,
             "computed-transposed": lambda: (a * e).T}[b_of]()
        return x @ b

    def run(fn):
        a, e = a0.clone().requires_grad_(), e0.clone().requires_grad_()
        out = fn(x, a, e)
        grads = torch.autograd.grad(out, (a, e), torch.linspace(-1, 1, out.numel()).reshape(out.shape),
                                    allow_unused=True)
        return (out, *(gr for gr in grads if gr is not None))

    expected, actual = run(f), run(thunder.jit(f))
    assert len(actual) == len(expected)
    for what, p, q in zip(("output", "gradient of a", "gradient of e"), actual, expected):
        assert_bitwise(p, q, what)


_SIZE_ONE_SELECTS = {  # of a (3, 1, 4) tensor; each result is transposed after, so its gradient comes transposed
    "x[:, 0]": lambda x: x[:, 0],
    "x[:, -1, :]": lambda x: x[:, -1, :],
    "select": lambda x: x.select(1, 0),
    "unbind": lambda x: x.unbind(1)[0],
    "x[0] of a batch of one": lambda x: x.permute(1, 0, 2)[0],
    "x[..., 0] of size 1": lambda x: x.reshape(3, 4, 1)[..., 0],
    "x[:, 0] then a slice": lambda x: x[:, 0][1:],
    "a slice and an index": lambda x: x[1:, 0],
    "squeeze (a view's gradient)": lambda x: x.squeeze(1),
}


@pytest.mark.parametrize("case", list(_SIZE_ONE_SELECTS))
def test_selects_from_a_dimension_of_size_one_lay_out_their_gradient_as_eager(case):
    """Eager's select_backward writes a select's gradient into zeros laid out contiguously, whatever the layout of
    the gradient it receives; a squeeze's gradient is a view of it. The layout then decides the order of a
    reduction's additions after it (OLMo-Hybrid's gated delta rule differed by an ulp)."""
    def f(x):
        y = _SIZE_ONE_SELECTS[case](x * 1)
        return (y.transpose(0, 1) * torch.linspace(0.5, 2, y.shape[0])).sum(0)

    def run(fn):
        x = torch.linspace(-2, 3, 12).reshape(3, 1, 4).requires_grad_()
        y = fn(x)
        (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
        return y, g

    (out, grad), (expected_out, expected_grad) = run(thunder.jit(f)), run(f)
    assert_bitwise(out, expected_out, "output")
    assert_bitwise(grad, expected_grad, "gradient")
    assert grad.stride() == expected_grad.stride(), (grad.stride(), expected_grad.stride())


_LINEAR_INPUTS = {  # name: input of F.linear made from a (4, 16, 30) tensor x, eager's path
    "2-D rows": lambda x: x[0, :, :15],  # addmm
    "2-D columns": lambda x: x[0, :15].t(),  # addmm, a column-major operand
    "3-D contiguous": lambda x: x[:, :, :15].contiguous(),  # flattened into one addmm
    # contiguous, yet its strides do not fold (a size-1 dim's stride): flattened too, by a frozen weight not matmul's
    "3-D contiguous by strides of a size-1 dim": lambda x: x[:3, 0, :15].contiguous().unsqueeze(-1).mT,
    "3-D transposed": lambda x: x[:, :15].transpose(1, 2),  # matmul and add_ (gMLP's token mixing)
    "3-D strided": lambda x: x[:, ::2, :15],  # matmul of a view and add_
    "4-D transposed": lambda x: x.reshape(4, 2, 8, 30)[..., :15].transpose(1, 2),
    "1-D": lambda x: x[0, 0, :15],
}


@pytest.mark.parametrize("weight", ["contiguous", "columns", "sliced", "frozen", "frozen row"])
@pytest.mark.parametrize("inputs", list(_LINEAR_INPUTS))
def test_linear_gradients_follow_eager_paths_by_layout(inputs, weight):
    """Eager's ``F.linear`` takes ``addmm`` for a 2-D or contiguous input and ``matmul`` plus ``add_`` for any other,
    whose bias gradient sums the output gradient as laid out (timm's gMLP, CaiT, DaViT were not bitwise); its
    matrix products' gradients follow the operands' layouts (a transposed or sliced weight). A frozen weight: the
    input is not saved (eager does not save it), only a memoryless tensor laid out as it, for the bias gradient and
    the input's: eager's matmul of a batch whose rows are no view of it by a frozen weight is one ``bmm`` (a single
    output row with zeros in it: ``mm`` gives the gradient -0.0 where ``bmm`` gives 0.0; generated program 10742)."""
    g = torch.Generator().manual_seed(0)
    x0, w0, b0 = torch.randn(4, 16, 30, generator=g), torch.randn(22, 19, generator=g), torch.randn(11, generator=g)

    def weight_of(w):
        return {"columns": lambda: w.t(), "sliced": lambda: w[::2, 2:17]}.get(weight, lambda: w)()

    def run(fn):
        w = {"columns": w0[:15, :11], "sliced": w0, "frozen row": w0[:1, :15] * (torch.arange(15) % 3 > 0)}.get(
            weight, w0[:11, :15]).clone()
        frozen = weight.startswith("frozen")
        x, w, b = x0.clone().requires_grad_(), w.requires_grad_(not frozen), b0[:w.shape[0]].clone().requires_grad_()
        out = fn(x, w, b)
        wrt = (x, b) if frozen else (x, w, b)
        return (out, *torch.autograd.grad(out, wrt, torch.linspace(-1, 1, out.numel()).reshape(out.shape)))

    def f(x, w, b):
        out = F.linear(_LINEAR_INPUTS[inputs](x), weight_of(w), b)
        return (out.transpose(-1, -2) if out.ndim >= 2 else out) * 3  # a gradient laid out otherwise than the output

    names = ("output", "gradient of x", "gradient of b") if weight.startswith("frozen") else (
        "output", "gradient of x", "gradient of w", "gradient of b")
    for what, actual, expected in zip(names, run(thunder.jit(f)), run(f)):
        assert_bitwise(actual, expected, what)


@pytest.mark.parametrize("b_layout", ["rows", "columns", "sliced"])
@pytest.mark.parametrize("a_layout", ["3-D", "4-D", "3-D transposed"])
def test_a_batch_times_a_matrix_is_one_product_by_layout(a_layout, b_layout):
    """Eager's matmul of a batch by a matrix both needing gradients folds the batch into the rows of one ``mm``,
    whose gradients follow the operands' layouts: BoTNet's ``q @ rel_k.transpose(-1, -2)`` (a column-major
    operand) was not bitwise."""
    g = torch.Generator().manual_seed(0)
    a0, b0 = torch.randn(4, 6, 5, 9, generator=g), torch.randn(22, 30, generator=g)

    def f(a, b):
        a = {"3-D": lambda: a.reshape(4, 30, 9), "4-D": lambda: a,
             "3-D transposed": lambda: a.reshape(4, 30, 9).transpose(0, 1)}[a_layout]()
        b = {"rows": lambda: b[:9, :13].contiguous(), "columns": lambda: b[:13, :9].contiguous().t(),
             "sliced": lambda: b[::2, 2:15][:9]}[b_layout]()
        return a @ b

    def run(fn):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        out = fn(a, b)
        return (out, *torch.autograd.grad(out, (a, b), torch.linspace(-1, 1, out.numel()).reshape(out.shape)))

    for what, actual, expected in zip(("output", "gradient of a", "gradient of b"), run(thunder.jit(f)), run(f)):
        assert_bitwise(actual, expected, what)


@pytest.mark.parametrize("consumer", ["attention", "transposed product"])
def test_the_gradient_of_unsqueeze_keeps_its_layout(consumer):
    """Eager's unsqueeze backward is a squeeze, a view keeping the gradient's layout, by which the batch norm's
    backward then sums; a sum over the new dimension wrote it contiguous (timm's iFormer: a batch-normed key,
    ``k.flatten(2).transpose(-1, -2).unsqueeze(1)``, into attention, was not bitwise)."""
    g = torch.Generator().manual_seed(0)
    x0, w0, b0 = torch.randn(2, 16, 4, 4, generator=g), torch.rand(16, generator=g) + 0.5, torch.randn(16, generator=g)

    def f(x, w, b):
        k = F.batch_norm(x, None, None, w, b, training=True).flatten(2).transpose(-1, -2).unsqueeze(1)
        if consumer == "attention":
            return F.scaled_dot_product_attention(k * 0.5, k, k.sin())
        return k.transpose(-1, -2) * torch.arange(16.0).reshape(16, 1)

    def run(fn):
        x, w, b = x0.clone().requires_grad_(), w0.clone().requires_grad_(), b0.clone().requires_grad_()
        out = fn(x, w, b)
        return (out, *torch.autograd.grad(out, (x, w, b), torch.linspace(-1, 1, out.numel()).reshape(out.shape)))

    for what, actual, expected in zip(("output", "gradient of x", "gradient of w", "gradient of b"),
                                      run(thunder.jit(f)), run(f)):
        assert_bitwise(actual, expected, what)


_SINGULAR = [0.0, -0.0, 1e-30, -1e-30, 1e-20, 2.0, -3.0, float("inf"), -float("inf"), 1e20]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_atan2_gradient_at_singular_points_is_eager_bit_for_bit(dtype):
    """At (0, 0) and where the squares underflow to 0 eager's gradient is zero (PyG's PPFConv takes atan2 of a
    self-loop's zero vectors); denormal squares and infinities give eager's infinities and NaNs. Compared as bits,
    so signed zeros count."""
    y = torch.tensor([a for a in _SINGULAR for _ in _SINGULAR], dtype=dtype)
    x = torch.tensor([b for _ in _SINGULAR for b in _SINGULAR], dtype=dtype)
    ct = torch.linspace(-1.5, 1.5, y.numel(), dtype=dtype)
    bits = torch.int32 if dtype == torch.float32 else torch.int64
    expected = torch.autograd.grad(torch.atan2(y.requires_grad_(), x.requires_grad_()), (y, x), ct)
    actual = torch.autograd.grad(thunder.jit(torch.atan2)(y, x), (y, x), ct)
    for a, e in zip(actual, expected):
        assert torch.equal(a.view(bits), e.view(bits)), torch.stack([y, x, a, e], 1)[a.view(bits) != e.view(bits)]


# Every path of eager's matmul (tensor and vector products, folds of a batch into one mm, the transposed fold of a
# matrix times a batch, the squeeze of a batch of one, broadcast bmm) for every requires-grad pattern and operand
# layout: outputs, gradients and their strides bit for bit (eager's path depends on which operands require grad).
_MATMUL_A = [(4,), (3, 4), (1, 3, 4), (2, 3, 4), (2, 1, 3, 4), (1, 2, 3, 4)]
_MATMUL_B = [(4,), (4, 5), (1, 4, 5), (2, 4, 5), (2, 1, 4, 5)]


def _operand(shape, layout):
    if layout == "columns":
        return torch.randn(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)
    if layout == "strided":
        return torch.randn(*shape[:-1], 2 * shape[-1])[..., ::2]
    return torch.randn(shape)


def _matmul_cases():
    for sa in _MATMUL_A:
        for sb in _MATMUL_B:
            if len(sa) == 1 and len(sb) == 1:
                continue
            for la in ("rows", "columns", "strided") if len(sa) >= 2 else ("rows",):
                for lb in ("rows", "columns") if len(sb) >= 2 else ("rows",):
                    for grads in ("a", "b", "ab"):
                        yield pytest.param(sa, sb, la, lb, grads, id=f"{sa}{la}@{sb}{lb}-{grads}")


@pytest.mark.parametrize("a_shape,b_shape,a_layout,b_layout,grads", list(_matmul_cases()))
def test_matmul_paths_and_gradients_are_eager_bit_for_bit(a_shape, b_shape, a_layout, b_layout, grads):
    torch.manual_seed(0)
    a, b = _operand(a_shape, a_layout), _operand(b_shape, b_layout)
    g = torch.randn((a @ b).shape)
    results = []
    for fn in (torch.matmul, thunder.jit(lambda x, y: x @ y)):
        x = torch.empty_strided(a.shape, a.stride()).copy_(a).requires_grad_("a" in grads)
        y = torch.empty_strided(b.shape, b.stride()).copy_(b).requires_grad_("b" in grads)
        out = fn(x, y)
        results.append((out, torch.autograd.grad(out, [t for t in (x, y) if t.requires_grad], g)))
    (expected, expected_grads), (out, out_grads) = results
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    for actual, e in zip(out_grads, expected_grads):
        assert torch.equal(actual, e) and actual.stride() == e.stride()


# Found by the generated programs (tests/program_generator.py): gradients summed or computed otherwise than eager's
_FOUND_GRADS = {
    "square_and_another_use": lambda x: (x.square(), x * 1),  # eager's square is pow(x, 2): one term, 2 * x
    "stack_of_one_tensor_thrice": lambda x: torch.stack([x, x, x]),  # parts summed in the inputs' order
    "copysign_of_both": lambda x: x.copysign(x.flip(0) * 1),  # the sign's gradient is zeros, not None
    "softmax_to_float64": lambda x: torch.softmax(torch.softmax(x, 0), 0, dtype=torch.float64),
    "log_softmax_and_softmax_to_float64": lambda x: (x.log_softmax(0), x.softmax(0, dtype=torch.float64)),
    "negative_indices": lambda x: x[torch.tensor([-1, 0, -1])],
    "empty_batched_product": lambda x: (x.reshape(2, 500, 1)[..., 1:] @ x.reshape(2, 500, 1)[..., 1:].mT).reciprocal(),
    # the cotangent converted to the input's dtype before the reversed sum, as eager's CumsumBackward does
    "cumsum_to_float64": lambda x: x.cumsum(0, dtype=torch.float64),
    "cumsum_to_bfloat16": lambda x: x.cumsum(0, dtype=torch.bfloat16),
    # an op differentiated by torch's autograd goes on with the sum of its input used twice: ((y*2's + x1's) + x2's)
    "cdist_of_one_tensor_and_another_use": lambda x: (lambda y: (torch.cdist(y, y), y * 2))(x.reshape(50, 20) * 1),
    # eager's batched product makes the operands' views in order: the second's part reaches a shared sum first
    "batched_product_of_one_tensor": lambda x: (lambda y: (y @ y, y * 2))(x.reshape(10, 10, 10) * 1),
    "bmm_of_one_tensor": lambda x: (lambda y: (torch.bmm(y, y), y * 2))(x.reshape(10, 10, 10) * 1),  # no views
    # x.contiguous() is x in eager: its uses' parts go to x's sum between x's other uses', as they arrive
    "contiguous_between_uses": lambda x: (lambda y: (y * 2, x * 3, y * 4))(x.contiguous()),
    "contiguous_of_contiguous_between_uses": lambda x: (lambda y: (y * 2, x * 3, y.contiguous() * 4))(x.contiguous()),
    "contiguous_and_a_decomposition": lambda x: (lambda y: (y * 2, F.rms_norm(x, (1000,)), y * 4))(x.contiguous()),
    "contiguous_in_one_call": lambda x: (lambda y: (y * 2, torch.addcmul(x, y, x), y * 4))(x.contiguous()),
    # eager's CatBackward gives a bfloat16 tensor concatenated twice with float32 its two parts in the inputs' order,
    # each rounded to bfloat16 (generated program 873645): not its type promotions' conversions, the last first
    # eager's masked_fill gradient is grad.masked_fill(mask, 0), laid out as the gradient: where(mask, 0, g) took the
    # layout of a mask computed from a gather by transposed indices, and the gather's backward (an accumulating
    # index_put) adds the gradient's duplicates in its layout's order (generated program 17359)
    "masked_fill_of_a_gather_by_transposed_indices": lambda x: (lambda y: y.masked_fill(y == 0.001, 0.25))(
        x[:4].view(2, 2)[torch.tensor([[1, 0, 1], [1, 1, 1], [1, 1, 0]]).t(),
                         torch.tensor([[0, 1, 1], [1, 0, 0], [1, 1, 1]])]),
    **{f"{name}_promoting_a_tensor_used_twice": (lambda cat: lambda x: (lambda t: (cat(t, x), t))(x.bfloat16()))(cat)
       for name, cat in (("cat", lambda t, x: torch.cat([t, x, t])), ("hstack", lambda t, x: torch.hstack([t, t, x])),
                         ("roll_of_cat", lambda t, x: torch.roll(torch.cat([t, x, t]), 7)))},
}


@pytest.mark.parametrize("name", list(_FOUND_GRADS))
def test_found_gradients_are_eager_bit_for_bit(name):
    fn = _FOUND_GRADS[name]
    x0 = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    results = []
    for f in (fn, thunder.jit(fn)):
        x = x0.clone().requires_grad_()
        outs = f(x)
        outs = outs if isinstance(outs, tuple) else (outs,)
        cotangents = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i), dtype=o.dtype)
                      for i, o in enumerate(outs)]
        results.append((outs, torch.autograd.grad(outs, x, cotangents)))
    (outs, grads), (j_outs, j_grads) = results
    for a, b in zip(outs + grads, j_outs + j_grads):
        assert a.dtype == b.dtype and torch.equal(a, b), name


@pytest.mark.parametrize("norm", [lambda x: torch.norm(x, p=0), lambda x: torch.linalg.vector_norm(x, ord=0),
                                  lambda x: x.norm(0, dim=0, keepdim=True)], ids=["norm", "vector_norm", "method"])
def test_zero_norm_requires_grad_and_gives_no_gradient_as_eager(norm):
    """Eager's 0-norm (a count) is in the autograd graph, and its backward gives its input ``None``."""
    results = []
    for f in (norm, thunder.jit(norm)):
        x = torch.tensor([1.0, 0.0, -2.0, 3.0], requires_grad=True)
        out = f(x) * 1
        results.append((out.requires_grad, out.detach(), torch.autograd.grad(out.sum(), x, allow_unused=True)[0]))
    (rg, value, grad), (j_rg, j_value, j_grad) = results
    assert rg == j_rg is True and torch.equal(value, j_value) and grad is None and j_grad is None


@pytest.mark.parametrize("extra", ["cache_of_keys", "keys_themselves"])
def test_an_output_no_loss_uses_leaves_the_gradients_layouts_as_eager(extra):
    """Hugging Face attention returns its keys in a cache no loss reads. Eager adds nothing for that output; thunder
    adds a zero cotangent, which once came laid out contiguous and so made the keys' gradient contiguous where
    eager's is permuted: a norm weight's gradient, a sum over that gradient, then rounded otherwise."""
    b, s, h, d = 2, 16, 4, 16

    def fn(kp, w):
        k = w * kp.view(b, s, h, d).transpose(1, 2)
        kept = torch.cat([torch.tensor([]), k], dim=-2) if extra == "cache_of_keys" else k  # DynamicCache.update
        return torch.matmul(torch.ones(b, h, s, d), kept.transpose(2, 3)), kept

    kp, w = torch.randn(b, s, h * d), torch.randn(d)
    cot = torch.randn(b, h, s, s)
    grads = []
    for f in (fn, thunder.jit(fn)):
        inputs = [kp.clone().requires_grad_(), w.clone().requires_grad_()]
        grads.append(torch.autograd.grad(f(*inputs)[0], inputs, cot))
    assert all(torch.equal(a, b) for a, b in zip(*grads))


# An input the program returns as itself, also used inside: eager adds the output's cotangent to its gradient first,
# then the parts of its uses one by one ([Note: the gradient of a returned input] in thunder/transforms/autodiff.py)
_RETURNED = {
    "itself": lambda x: (x * 2, x.exp(), x),
    "positive": lambda x: (x * 2, x.sin() * 3, +x),
    "float": lambda x: (x.float(), torch.where(x > 0, x * 3, x), x.cos()),
    "dropout_p0": lambda x: (x.tanh(), F.dropout(x, 0.0), x * x),
    "type_as": lambda x: ((x * 2).sum(), x.type_as(x), x.abs()),
    "contiguous": lambda x: (x.contiguous(), x * 2, x.contiguous() * 3),
    "twice": lambda x: (x, x * 2, x, x.exp()),
    "broadcast_parts": lambda x: (x, x * torch.ones(3, 1, dtype=x.dtype), x.unsqueeze(0) + 1),
    "cdist": lambda x: (torch.cdist(x.reshape(-1, 2), x.reshape(-1, 2)), x * 2, x),
    "batched_product": lambda x: (x.reshape(2, 2, 2) @ x.reshape(2, 2, 2), x),
    "decomposition": lambda x: (F.softsign(x), x * 2, x),  # x / (1 + |x|): its two parts arrive one by one
    "flatten_of_a_vector": lambda x: (F.softsign(x.flatten()), x.flatten()),  # x itself in eager
    # both arguments of an op torch's autograd differentiates: its node's two parts arrive one by one (fuzz 1376,
    # 27227, 32775), where torch's engine had summed them first; and where the op is a graph of several nodes, the sum
    "logaddexp_of_itself": lambda x: (torch.logaddexp(x, F.dropout(x, 0.5, training=False)), x),
    "logaddexp_of_itself_squared": lambda x: (torch.logaddexp(x, x.float()) ** 2, x.float()),
    "tensordot_of_itself": lambda x: (
        torch.tensordot(x.reshape(2, 4), F.dropout(x, 0.0).reshape(2, 4), dims=([1], [1])), x),
    # a composite op: the parts come from the nodes inside it, as many as its graph has edges into the input (fuzz
    # nn 47640, 7293, 39310)
    "pairwise_distance_of_itself": lambda x: (F.pairwise_distance(x, x) * x, x.type_as(x)),
    "tensordot_of_itself_directly": lambda x: (torch.tensordot(x, x, dims=1) * x, x),
    "cosine_similarity_of_itself": lambda x: (F.cosine_similarity(x, x, dim=0) * x, x),
    "cosine_similarity_once": lambda x: (F.cosine_similarity(x, x.flip(0), dim=0) * x, x),
}


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf", "computed"])
@pytest.mark.parametrize("name", list(_RETURNED))
def test_a_returned_input_gets_its_gradient_in_eager_order(name, leaf):
    fn = _RETURNED[name]
    jfn = thunder.jit(fn)
    for seed in range(4):  # rounding shows on some values only; the later calls take the cache-hit path
        base = torch.randn(8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64 if seed % 2 else
                           torch.float32)
        results = []
        for f in (fn, jfn):
            leaf_x = base.clone().requires_grad_()
            x = leaf_x if leaf else leaf_x * 1
            outs = f(x)
            assert (outs[-1] is x) == (fn(x)[-1] is x)  # the input itself, as eager returns it
            outs = [o for o in outs if o.requires_grad]
            cotangents = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i), dtype=o.dtype)
                          for i, o in enumerate(outs)]
            results.append((outs, torch.autograd.grad(outs, leaf_x, cotangents)))
        (outs, grads), (j_outs, j_grads) = results
        for a, b in zip(outs + list(grads), j_outs + list(j_grads)):
            assert a.dtype == b.dtype and torch.equal(a, b), (name, seed)


# An in-place update computed in a wider dtype than the tensor it updates: eager's backward evaluates the op's
# derivative formulas with the gradient in the updated tensor's dtype (``a_bf16.mul_(b_f32)``: b's gradient is
# ``grad * a`` rounded to bfloat16), not the out-of-place product's gradient in float32
_NARROWING_UPDATES = {
    "mul_": lambda a, b: a.mul_(b),
    "imul": lambda a, b: a.__imul__(b),
    "add_alpha": lambda a, b: a.add_(b, alpha=3),
    "sub_alpha": lambda a, b: a.sub_(b, alpha=0.3),
    "div_": lambda a, b: a.div_(b),
    "addcmul_": lambda a, b: a.addcmul_(b, b, value=0.7),
    "addcdiv_": lambda a, b: a.addcdiv_(b, b.exp(), value=0.7),
    "pow_": lambda a, b: a.abs_().pow_(b),
    "atan2_": lambda a, b: a.atan2_(b),
    "hypot_": lambda a, b: a.hypot_(b),
    "xlogy_": lambda a, b: a.abs_().xlogy_(b.abs()),
    "clamp_": lambda a, b: a.clamp_(min=b),
}


@pytest.mark.parametrize("narrow,wide", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                         (torch.float32, torch.float64)], ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("name", list(_NARROWING_UPDATES))
def test_an_update_computed_in_a_wider_dtype_is_differentiated_as_eager(name, narrow, wide):
    update = _NARROWING_UPDATES[name]

    def fn(x, y):
        a = (x * 1.5).to(narrow)
        update(a, y)
        return a.float().sum(-1) * 1.3

    gen = torch.Generator().manual_seed(0)
    x0, y0 = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen, dtype=wide)
    results = []
    for f in (fn, thunder.jit(fn)):
        x, y = x0.clone().requires_grad_(), y0.clone().requires_grad_()
        out = f(x, y)
        results.append((out, *torch.autograd.grad(out.sum(), (x, y))))
    for a, b in zip(*results):
        assert a.dtype == b.dtype and torch.equal(a, b), name


# The in-place functions of the ELU family: eager differentiates them from their result (elu_backward with
# is_result), as F.elu(x, inplace=True); they were once traced as the out-of-place function, differentiated from the
# input (PyTorch Geometric's AttentiveFP calls F.elu_)
_INPLACE_FUNCTIONS = {
    "F.elu_": lambda a: F.elu_(a * 1.0), "F.celu_": lambda a: F.celu_(a * 1.0, 0.7), "F.selu_": lambda a: F.selu_(a * 1.0),
    "torch.selu_": lambda a: torch.selu_(a * 1.0), "torch.celu_": lambda a: torch.celu_(a * 1.0),
    "F.leaky_relu_": lambda a: F.leaky_relu_(a * 1.0, 0.3), "F.hardtanh_": lambda a: F.hardtanh_(a * 1.0),
    "F.threshold_": lambda a: F.threshold_(a * 1.0, 0.1, 2.0),
}


@pytest.mark.parametrize("name", list(_INPLACE_FUNCTIONS))
def test_in_place_activation_functions_are_differentiated_from_their_result(name):
    fn = _INPLACE_FUNCTIONS[name]
    results = []
    for f in (fn, thunder.jit(fn)):
        a = torch.randn(1000, generator=torch.Generator().manual_seed(0), requires_grad=True)
        out = f(a)
        results.append((out, *torch.autograd.grad(out, a, torch.randn(1000, generator=torch.Generator().manual_seed(1)))))
    for x, y in zip(*results):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("a_shape", [(1,), (3, 1, 4, 1), (1, 2, 1, 2)])
@pytest.mark.parametrize("fill", ["number", "tensor"])
def test_masked_fill_gradient_sums_in_eagers_order_whatever_the_masks_layout(a_shape, fill):
    """Eager's gradient of ``a.masked_fill(mask, v)`` is ``grad.masked_fill(mask, 0)``, contiguous, summed to ``a``'s
    shape where ``a`` was broadcast; thunder's went through ``where(mask, 0, grad)``, laid out as a permuted mask, so the
    sum added in another order (generated program 503)."""
    def f(a, x):
        mask = x.permute(2, 0, 3, 1) > 0
        return a.masked_fill(mask, torch.tensor(3.5) if fill == "tensor" else 3.5)

    torch.manual_seed(0)
    a, x = torch.randn(a_shape, requires_grad=True), torch.randn(2, 2, 3, 4)
    cot = torch.randn(3, 2, 4, 2)
    expected = torch.autograd.grad(f(a, x), a, cot)
    actual = torch.autograd.grad(thunder.jit(f)(a, x), a, cot)
    assert torch.equal(actual[0], expected[0])


def test_masked_fill_gradient_of_generated_program_503():
    def program(x0, x1):
        t1 = x1[:, torch.tensor([[2, 2], [3, 2], [1, 0]]).t(), :, torch.tensor([[3, 1, 0], [0, 1, 1]])]
        return x0.masked_fill(torch.eq(t1.permute(1, 2, 0, 3), x0), 3.5)

    g = torch.Generator().manual_seed(0)
    x0, x1 = torch.randn((1,), generator=g, requires_grad=True), torch.randn((2, 4, 3, 4), generator=g)
    cot = torch.randn((3, 2, 2, 3), generator=torch.Generator().manual_seed(7))
    (expected,) = torch.autograd.grad(program(x0, x1), x0, cot)
    (actual,) = torch.autograd.grad(thunder.jit(program)(x0, x1), x0, cot)
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("value_shape", [(), (1,), (1, 1)])
@pytest.mark.parametrize("value_dtype", [torch.float32, torch.float64])
def test_a_masked_assignment_sums_the_values_gradient_over_the_selection_as_eager(value_shape, value_dtype, seed):
    """``t[mask] = v`` runs ``index_put_`` in eager: ``v``'s gradient is the sum of the selected elements of the
    cotangent; thunder summed ``where(mask, grad, 0)`` over the whole tensor, which adds in another order
    (generated program 57055)."""
    def f(x, v):
        t = x % 1.5
        t[t > 0.5] = v.sum() if v.dtype != x.dtype else v
        return t

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 40, 7, generator=g, requires_grad=True)
    v = torch.randn(value_shape, generator=g, dtype=value_dtype, requires_grad=True)
    cot = torch.randn(3, 40, 7, generator=g)
    expected = torch.autograd.grad(f(x, v), (x, v), cot)
    actual = torch.autograd.grad(thunder.jit(f)(x, v), (x, v), cot)
    for a, e in zip(actual, expected):
        assert torch.equal(a, e) and torch.equal(a.signbit(), e.signbit())


_OVERWRITES_OF_PERMUTED = {
    "copy_mean_into_rot90": lambda x, v: torch.rot90(x, 1, (-2, -1)).copy_(v),
    "fill_into_transposed_double": lambda x, v: (x.mT * 2).fill_(v),
    "copy_into_permuted_sin": lambda x, v: x.permute(2, 0, 1).sin().copy_(v.reshape(1, 1)),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", list(_OVERWRITES_OF_PERMUTED))
def test_a_value_written_over_a_permuted_tensor_sums_its_gradient_in_the_tensors_memory_order(name, seed):
    """``t.copy_(v)`` of a tensor laid out permuted (``rot90``'s result): ``v``'s gradient is the sum of ``t``'s, which
    eager adds in ``t``'s memory order (its gradient is laid out as ``t``); thunder's was laid out contiguous (generated
    program nn 32823)."""
    def f(x, w):
        t = _OVERWRITES_OF_PERMUTED[name](x, w.mean())
        return torch.where(t != w[0, 0], t, w[0, 0])

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, 10, generator=g)[..., ::2].requires_grad_()
    w = torch.randn(4, 7, generator=g, requires_grad=True)
    out = f(x, w)
    cot = torch.randn(out.shape, generator=g)
    expected = torch.autograd.grad(out, (x, w), cot)
    actual = torch.autograd.grad(thunder.jit(f)(x, w), (x, w), cot)
    for a, e in zip(actual, expected):
        assert torch.equal(a, e)


_SLICE_ASSIGNMENTS = {
    "empty_slice": lambda t: t.__setitem__(slice(1, None), 1.0),
    "row": lambda t: t.__setitem__(0, 2.5),
    "strided_columns": lambda t: t.__setitem__((..., slice(None, None, 2)), -1.0),
    "block_from_a_tensor": lambda t: t.__setitem__((slice(None), slice(1, 3)), torch.arange(7.0)),
    "mask": lambda t: t.__setitem__(t > 1, 0.5),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", list(_SLICE_ASSIGNMENTS))
def test_an_assignment_into_slices_of_a_permuted_tensor_lays_its_gradient_out_as_the_tensor(name, seed):
    """``t[1:] = v`` copies into a view of ``t`` (eager's ``CopySlices``), whose gradient is laid out as ``t``'s memory:
    a permuted ``t`` (the quotient of a transposed integer tensor) gives the divisor's gradient summed in that order
    (generated program nn 73566); a mask's ``index_put_`` keeps the layout of the gradient it receives."""
    def f(x, d):
        t = x / d
        _SLICE_ASSIGNMENTS[name](t)
        return t

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, (2, 4, 7, 5), generator=g).mT
    d = torch.randn((), generator=g).requires_grad_()
    cot = torch.randn(2, 4, 5, 7, generator=g)
    (expected,) = torch.autograd.grad(f(x, d), d, cot)
    (actual,) = torch.autograd.grad(thunder.jit(f)(x, d), d, cot)
    assert torch.equal(actual, expected)


_ZERO_PARTS = {  # sgn's gradient of a real tensor is a ZeroTensor
    "sgn_then_pow": lambda x: x.sgn().cummax(0)[0].pow(x),
    "sgn_beside_a_product_by_zero": lambda x: torch.sgn(x) + x * 0.0 * -1.0,
    "fmax_of_sgn": lambda x: torch.fmax((x % 1.0) / x, torch.sgn(x)),
}


@pytest.mark.parametrize("name", list(_ZERO_PARTS))
def test_a_zero_tensor_part_turns_the_negative_zeros_of_a_gradient_sum_positive_as_eager(name):
    """Eager's engine adds a part to a gradient sum it holds alone in place: a ZeroTensor part (``sgn``'s gradient)
    materializes as zeros, and -0.0 + 0.0 is 0.0; thunder handed the sum to the engine, which added the ZeroTensor out
    of place and kept -0.0 (generated programs 40586, 73332, nn 34435)."""
    fn = _ZERO_PARTS[name]
    jfn = thunder.jit(fn)
    for seed in range(3):
        x = torch.randn(4, 1, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        x[0, 0, 0] = 0.0
        grads = []
        for f in (fn, jfn):
            leaf = x.clone().requires_grad_()
            out = f(leaf)
            cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype)
            grads.append(torch.autograd.grad(out, leaf, cot)[0])
        e, a = grads
        assert torch.equal(a.nan_to_num(1.5), e.nan_to_num(1.5)) and torch.equal(a.signbit(), e.signbit()), (seed, e, a)


_EXPANSIONS = {
    "expand_new_leading_one": lambda x: x.expand(1, *x.shape),
    "expand_new_leading_dims": lambda x: x.expand(2, 1, *x.shape),
    "broadcast_to_new_leading_one": lambda x: x.broadcast_to((1, *x.shape)),
    "expand_as_new_leading_one": lambda x: x.expand_as(torch.empty(1, *x.shape)),
    "unsqueeze": lambda x: x.unsqueeze(0),  # a view: its gradient is squeezed, not summed
    "expand_to_its_own_shape": lambda x: x.expand(*x.shape) * 2,  # x itself: no rule of its own
    "expand_new_leading_one_with_minus_one": lambda x: x.expand(1, -1, 4),
}


@pytest.mark.parametrize("name", list(_EXPANSIONS))
def test_an_expansions_gradient_sums_its_new_leading_dims_as_eager(name):
    """Eager's ``ExpandBackward`` sums the gradient over every new leading dimension (``sum_to``), one of extent 1 too,
    which turns -0.0 into 0.0; ``unsqueeze``'s reshapes it away (generated program nn 78642: a multi-margin loss of
    ``x.expand(1, *x.shape)``)."""
    fn = _EXPANSIONS[name]
    x = torch.randn(3, 4, requires_grad=True)
    out = fn(x)
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    cot.view(-1)[::3] = -0.0
    (expected,) = torch.autograd.grad(out, x, cot)
    (actual,) = torch.autograd.grad(thunder.jit(fn)(x), x, cot)
    assert torch.equal(actual, expected) and torch.equal(actual.signbit(), expected.signbit())


_BROADCAST_COPIES = {  # (source shape, source dtype, destination dtype, how the source is written)
    "float64_scalar_into_float32": ((), torch.float64, torch.float32, "copy_"),
    "float32_row_into_float64": ((1, 300), torch.float32, torch.float64, "copy_"),
    "bfloat16_row_into_float32": ((300,), torch.bfloat16, torch.float32, "copy_"),
    "float64_scalar_fill_into_float32": ((), torch.float64, torch.float32, "fill_"),
}


@pytest.mark.parametrize("case", list(_BROADCAST_COPIES))
def test_a_broadcast_copy_sums_the_sources_gradient_in_its_dtype_as_eager(case):
    """Eager's CopyBackwards converts the gradient to the source's dtype, and the engine then sums the broadcast
    dimensions in that dtype (generated program 873206: a float64 scalar copied into float32 got a float32 sum);
    ``fill_``'s formula for a 0-dim tensor value is the gradient's sum, in the filled tensor's dtype."""
    shape, src_dtype, dst_dtype, method = _BROADCAST_COPIES[case]

    def program(a, s):
        t = a * 1
        getattr(t, method)(s)
        return t * 2

    grads = []
    for f in (program, thunder.jit(program)):
        a = torch.randn(200, 300, dtype=dst_dtype, generator=torch.Generator().manual_seed(0)).requires_grad_()
        s = torch.randn(shape, dtype=src_dtype, generator=torch.Generator().manual_seed(1)).requires_grad_()
        out = f(a, s)
        cotangent = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(2))
        grads.append(torch.autograd.grad(out, (a, s), cotangent))
    for e, t in zip(*grads):
        assert e.dtype == t.dtype and torch.equal(e, t)


def _mean_update_of_an_earlier_view(x):  # generated program 925211
    t = x * 1.5
    v = t.unsqueeze(1)
    v.addcmul_(t.mean(), t.mean(), value=0.5)
    return t


def _augmented_assignment_reading_the_base(x):  # Python takes t[:, :2] before it evaluates the right side
    t = x * 1.5
    t[:, :2] += t.mean() * t.sum(0)[:2]
    return t


def _update_of_a_view_after_another_use(x):
    t = x * 2
    v = t[1:]
    u = (t * 3).sum()
    v.mul_((t * 3)[1:])
    return t, u


def _assignment_into_a_view_of_a_view(x):
    t = x * 2
    v = t[1:].t()
    w = t + 1
    v[0] += w[0, 1:].sum() * w[2, 2]
    return t


_VIEW_UPDATES = {f.__name__.strip("_"): f for f in (_mean_update_of_an_earlier_view,
                 _augmented_assignment_reading_the_base, _update_of_a_view_after_another_use,
                 _assignment_into_a_view_of_a_view)}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", list(_VIEW_UPDATES))
def test_an_update_of_a_view_gives_its_part_of_the_gradient_when_eager_does(case, seed):
    """Eager's CopySlices takes the view again from its base at the update, so the update's part of the base's
    gradient is added before the parts of the base's uses since the view was taken (a mean on the right side):
    thunder's update reads the view taken again there (fuzz 925211 and 920459 summed them the other way round)."""
    fn = _VIEW_UPDATES[case]
    grads = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(6, 5, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        outs = f(x)
        outs = outs if isinstance(outs, tuple) else (outs,)
        cotangents = [torch.randn(o.shape, generator=torch.Generator().manual_seed(seed + 1)) for o in outs]
        grads.append(torch.autograd.grad(outs, x, cotangents)[0])
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0].signbit(), grads[1].signbit())


def _part_of_a_view_assigned(x):  # generated program 2888
    t = x * 2
    v = t[:]
    v[:, :1] += 0.25
    u = t * 3
    return v.sum(-1), u, t


def _row_of_a_view_assigned(x):
    t = x * 2
    v = t.view(5, 6)
    v[1] = v[2] * 0.5
    u = t * 3
    return v.sum(-1), u, t


def _column_of_a_transposed_view_assigned(x):
    t = x * 2
    v = t.t()
    v[..., 1] = 0.0
    u = t * 3
    return v.sum(0), u, t


def _whole_view_assigned(x):  # full slices: eager writes into the view itself
    t = x * 2
    v = t[:]
    v[:] = v * 0.5
    u = t * 3
    return v.sum(-1), u, t


def _view_assigned_by_mask(x):  # a tensor index: eager writes into the view itself
    t = x * 2
    v = t[:]
    v[v > 0] = 0.5
    u = t * 3
    return v.sum(-1), u, t


_VIEW_ASSIGNMENTS = {f.__name__.strip("_"): f for f in (_part_of_a_view_assigned, _row_of_a_view_assigned,
                     _column_of_a_transposed_view_assigned, _whole_view_assigned, _view_assigned_by_mask)}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", list(_VIEW_ASSIGNMENTS))
def test_a_view_assigned_into_gives_its_part_of_the_gradient_when_eager_does(case, seed):
    """``v[key] = value`` with a key selecting part of ``v`` updates a view of ``v`` in eager, whose autograd makes
    ``v``'s node again at its next use: ``v``'s part of the base's gradient comes before those of the base's uses in
    between (``t * 3``), where thunder took ``v`` again at the assignment and gave it after them (fuzz 2888). A key
    of full slices or tensor indices updates ``v`` itself, whose node eager makes again at the assignment."""
    fn = _VIEW_ASSIGNMENTS[case]
    grads = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(6, 5, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        outs = f(x)
        cotangents = [torch.randn(o.shape, generator=torch.Generator().manual_seed(seed + 1)) for o in outs]
        grads.append(torch.autograd.grad(outs, x, cotangents)[0])
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0].signbit(), grads[1].signbit())


_OUTERS = {"torch.outer": torch.outer, "torch.ger": torch.ger, "Tensor.outer": torch.Tensor.outer}


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("name", list(_OUTERS))
def test_outer_sums_the_gradient_of_its_second_vector_over_the_rows_as_eager(name, rows):
    """Eager's outer product is ``a.reshape(n, 1) * b``: ``b``'s gradient is summed over the rows even when there is
    one, which makes a -0 +0; thunder's product of ``b`` unsqueezed reshaped it instead (fuzz 1508: signs of zeros)."""
    fn = _OUTERS[name]
    grads = []
    for f in (fn, thunder.jit(fn)):
        a = (-0.5 - torch.rand(rows, generator=torch.Generator().manual_seed(0))).requires_grad_()
        b = torch.randn(4, generator=torch.Generator().manual_seed(1)).requires_grad_()
        out = f(a, b)
        cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
        cotangent[:, ::2] = 0
        grads.append(torch.autograd.grad(out, (a, b), cotangent))
    for e, t in zip(*grads):
        assert torch.equal(e, t) and torch.equal(e.signbit(), t.signbit())


# In-place updates of views whose gradient holds zeros: eager's CopySlices copies the view's gradient into the root's,
# keeping a -0 on either side, where a sum of the root's two parts (the write's, the view's elements zeroed; the
# read's, scattered into zeros) makes it +0 ([Note: the gradient of a view's root updated in place]; fuzz 1170, 2728)
_VIEW_UPDATES_OF_ZEROS = {
    "slice_then_floor": lambda x: (lambda t: (t[:, ::2].mul_(-3), t.floor_())[1])(x * 1),
    "slice_then_times_zero": lambda x: (lambda t: (t[:, ::2].mul_(-3), t.mul_(0))[1])(x * 1),
    "select_then_times_zero": lambda x: (lambda t: (t[..., 0].mul_(-3), t.mul_(0))[1])(x * 1),
    "diagonal_then_times_zero": lambda x: (lambda t: (t.diagonal().mul_(-3), t.mul_(0))[1])(x * 1),
    "view_then_times_zero": lambda x: (lambda t: (t.view(-1).mul_(-3), t.mul_(0))[1])(x * 1),
    "strided_slice_returned_with_its_root": lambda x: _strided_slice_updated(x.clip(-1, 2)),
    "ellipsis_of_a_scalar_then_times_zero": lambda x: (lambda t: (t[...].mul_(-3), t.mul_(0))[1])(x[0, 0] * 1),  # 38100
}


def _strided_slice_updated(t):
    v = t[..., ::2]
    v.mul_(-0.5)
    t.floor_()
    return v, t


@pytest.mark.parametrize("name", list(_VIEW_UPDATES_OF_ZEROS))
def test_a_view_updated_in_place_keeps_the_signs_of_zeros_of_its_roots_gradient(name):
    fn = _VIEW_UPDATES_OF_ZEROS[name]
    grads = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)
        out = f(x)
        outs = out if isinstance(out, tuple) else (out,)
        cotangents = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i + 1)) for i, o in enumerate(outs)]
        grads.append(torch.autograd.grad(outs, x, cotangents)[0])
    assert bool((grads[0] == 0).any()) and bool(grads[0].signbit()[grads[0] == 0].any()), "no -0 to keep"
    assert_bitwise(grads[1], grads[0], name)


# A view taken before its base is updated in place and used after: eager's autograd makes its node again as
# AsStridedBackward, whose gradient is laid out as the base, where the view's own gradient (a transpose's) is laid
# out as the view; a reduction of it after (the gradient of a 0-dim divisor) sums in that layout's order
# (``root_of_a_retaken_view``; generated program 1744)
_RETAKEN_VIEWS = {
    "transpose": lambda x, t: _retaken(x, t, lambda v: v.t()),
    "permute_of_a_gather": lambda x, t: _retaken(x, t, lambda v: v.permute(1, 0), gather=True),
    "strided_slice": lambda x, t: _retaken(x, t, lambda v: v[:, ::2]),
}


def _retaken(x, t, view, gather=False):
    x = x.detach()  # the gradient reaches the divisor alone (sigmoid_ saves its output, which div_ then changes)
    base = x[torch.arange(40).reshape(8, 5).t(), torch.arange(40).reshape(5, 8) % 64] if gather else x * 1
    v = view(base)
    torch.sigmoid_(v)
    base.div_(t.mean())
    return v


@pytest.mark.parametrize("name", list(_RETAKEN_VIEWS))
def test_a_view_taken_again_after_its_bases_update_gets_its_gradient_laid_out_as_the_base(name):
    fn = _RETAKEN_VIEWS[name]
    results = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(40, 64, generator=torch.Generator().manual_seed(0)).requires_grad_()
        t = torch.randn(1, 4, generator=torch.Generator().manual_seed(1)).requires_grad_()
        out = f(x, t)
        cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
        results.append((out, *torch.autograd.grad(out, t, cotangent)))
    for a, b in zip(*results):
        assert_bitwise(b, a, name)


_PASSING_ON = {  # ops whose eager gradient is the cotangent itself (or masked, or scaled by one) somewhere
    "frac": torch.frac, "positive": torch.positive, "fmod": lambda x: torch.fmod(x, 0.3),
    "remainder": lambda x: torch.remainder(x, 0.3), "fmod-tensor": lambda x: torch.fmod(x, torch.full_like(x, 0.3)),
    "remainder-tensor": lambda x: torch.remainder(x, torch.full_like(x, 0.3)), "nan_to_num": torch.nan_to_num,
    "clamp": lambda x: x.clamp(-0.4, 0.4), "clamp_min": lambda x: x.clamp_min(0.1), "clamp_max": lambda x: x.clamp_max(0.1),
    "x-minus-trunc": lambda x: x - x.trunc(), "trunc": torch.trunc, "floor": torch.floor, "round-decimals": lambda x: x.round(decimals=2),
    "where": lambda x: torch.where(x > 0, x, x * 2), "copysign": lambda x: torch.copysign(x, torch.tensor(-1.0)),
    "mul-one": lambda x: x * 1, "div-one": lambda x: x / 1, "add-zero": lambda x: x + 0, "pow-one": lambda x: x ** 1,
    "lerp-weight-zero": lambda x: torch.lerp(x, torch.ones_like(x), 0.0), "maximum": lambda x: torch.maximum(x, torch.zeros_like(x)),
    "fmax": lambda x: torch.fmax(x, torch.zeros_like(x)), "abs": torch.abs, "relu": torch.relu, "hardtanh": F.hardtanh,
    "hardshrink": F.hardshrink, "softshrink": F.softshrink, "threshold": lambda x: F.threshold(x, 0.1, 0.0),
    "leaky_relu": F.leaky_relu, "elu": F.elu, "relu6": F.relu6, "deg2rad": torch.deg2rad, "float": lambda x: x.float(),
    # a cumulative sum over one element (generated program nn 137417): eager's cumsum_backward hands the cotangent on
    "cumsum-extent-one": lambda x: torch.cumsum(x.unsqueeze(1), 1).squeeze(1),
    "cumsum-extent-one-dtype": lambda x: torch.cumsum(x.unsqueeze(1), 1, dtype=torch.float32).squeeze(1),
}
_SIGNED_ZERO_COTANGENTS = {
    "zeros": [-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0],
    "mixed": [-1.0, 1.0, -1.0, 1.0, -0.0, -0.0, 0.0, 0.0],
}


@pytest.mark.parametrize("cotangent", list(_SIGNED_ZERO_COTANGENTS))
@pytest.mark.parametrize("name", list(_PASSING_ON))
def test_a_gradient_passed_on_keeps_the_signs_of_the_cotangents_zeros(name, cotangent):
    """Where eager's formula passes the cotangent on (``FracBackward`` is ``grad``), a -0.0 in it stays -0.0;
    a decomposition that adds a zero part (``frac`` as ``a - trunc(a)``: -0.0 + 0.0 is 0.0) loses it
    (generated program nn 90640)."""
    fn = _PASSING_ON[name]
    x = torch.tensor([0.5, -0.25, 0.0, -0.0, 1.5, -2.5, 0.05, -0.05], dtype=torch.float64)
    ct = torch.tensor(_SIGNED_ZERO_COTANGENTS[cotangent], dtype=torch.float64)
    grads = []
    for f in (fn, thunder.jit(fn)):
        xx = x.clone().requires_grad_()
        out = f(xx)
        grads.append(torch.autograd.grad(out, xx, ct.to(out.dtype))[0])
    assert_bitwise(grads[1], grads[0], f"{name} gradient")


_UNUSED_COTANGENTS = {  # the first output's cotangent is -0.0 everywhere; the others are left unused
    "input_scaled_in_place": lambda x: (x.mul_(2), x * 1)[1],
    "input_assigned_a_row": lambda x: (x.__setitem__(0, 0.5), x * 1)[1],
    "input_relu_in_place": lambda x: (F.relu(x, inplace=True), x + 1)[1],
    "input_updated_and_returned": lambda x: x.mul_(2),
    "an_output_also_read_inside": lambda x: (lambda y: (y.sum(0), y))(x * 2),
}


@pytest.mark.parametrize("name", list(_UNUSED_COTANGENTS))
def test_an_unused_outputs_zero_cotangent_leaves_the_others_signs_of_zero(name):
    """Eager never reaches an output no loss uses (an input updated in place that the caller does not read again);
    thunder adds its zero cotangent to the rest, -0.0 so that a -0.0 there stays -0.0 (0.0 turned it into 0.0)."""
    fn = _UNUSED_COTANGENTS[name]
    grads = []
    for f in (fn, thunder.jit(fn)):
        x0 = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], dtype=torch.float64, requires_grad=True)
        out = f(x0 * 1)
        out = out[0] if isinstance(out, tuple) else out
        grads.append(torch.autograd.grad(out, x0, torch.full_like(out, -0.0))[0])
    assert_bitwise(grads[1], grads[0], f"{name} gradient")


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_a_frozen_linear_layers_input_gradient_of_a_transposed_batch_of_one_is_laid_out_as_eagers(bias):
    """``F.linear(x, w)`` of a frozen ``w`` and an ``x`` of shape (1, n, m) laid out transposed: its rows reshape to a
    column-major view, but ATen's ``matmul`` does not fold them (its test exempts no extent of one) and runs a
    ``bmm``, whose input gradient is contiguous; thunder gave it column-major, and the gradient of a 0-dim divisor of
    ``x``, summed over it, came out a rounding apart (generated program nn 36052)."""
    w = torch.linspace(-1, 1, 16).reshape(4, 4)
    b = torch.linspace(-0.5, 0.5, 4) if bias else None

    def fn(x, s):
        return F.linear(x / s, w, b)

    grads = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(1, 4, 5, generator=torch.Generator().manual_seed(0)).mT.detach().requires_grad_()
        s = torch.tensor(0.7, requires_grad=True)
        out = f(x, s)
        grads.append(torch.autograd.grad(out, (x, s), torch.randn(out.shape, generator=torch.Generator().manual_seed(7))))
    for e, a in zip(*grads):
        assert_bitwise(a, e, "gradient")
    assert grads[1][0].stride() == grads[0][0].stride()  # x's gradient: laid out as the linear layer's input gradient


@pytest.mark.parametrize("seed", range(3))
def test_copysigns_zero_gradient_for_the_sign_is_contiguous_as_eagers(seed):
    """Eager gives ``copysign(a, b)``'s ``b`` contiguous zeros whatever ``b``'s layout; thunder gave them ``b``'s. A
    gradient sum starting from them is laid out as they are, and a broadcast operand's gradient, summed from it,
    came out a rounding apart (generated program nn 32091: ``b`` transposed, also indexed by a mask)."""
    def fn(x0, x1):
        t2 = torch.logaddexp(x0, x1)
        return F.softmax(torch.copysign(x1, t2), dim=-1), t2[t2.flatten(1).sum(1) > 0]

    grads = []
    for f in (fn, thunder.jit(fn)):
        g = torch.Generator().manual_seed(seed)
        x0 = torch.randn(8, generator=g)[::2].detach().requires_grad_()
        x1 = torch.randn(3, 4, 4, 2, generator=g).mT.detach().requires_grad_()
        outs = f(x0, x1)
        gen = torch.Generator().manual_seed(7)
        grads.append(torch.autograd.grad(outs, (x0, x1), [torch.randn(o.shape, generator=gen) for o in outs]))
    for e, a in zip(*grads):
        assert_bitwise(a, e, "gradient")
    eager_sign, thunder_sign = (torch.autograd.grad(f(torch.randn(3, 4, 2, 4), s), s, torch.ones(3, 4, 2, 4))[0]
                                for f, s in ((torch.copysign, torch.randn(3, 4, 4, 2).mT.requires_grad_()),
                                             (thunder.jit(torch.copysign), torch.randn(3, 4, 4, 2).mT.requires_grad_())))
    assert thunder_sign.stride() == eager_sign.stride()


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("shape", [(30, 7), (6, 5, 7), (2, 3, 5, 7)], ids=lambda s: f"{len(s)}d")
@pytest.mark.parametrize("bias_shape", [(), (1,), (4,)], ids=["0-dim bias", "bias of one", "bias"])
def test_a_linear_layers_bias_of_any_broadcastable_shape_gets_eagers_gradient(bias_shape, shape, transposed):
    """A bias that broadcasts (one element, 0-dim or of shape (1,)): its gradient is the output gradient summed to
    its shape as eager sums it (thunder's layer rule assumed a bias per output feature: a (1,) bias failed its shape
    check, a 0-dim one was summed in two steps)."""
    grads = []
    for f in (F.linear, thunder.jit(F.linear)):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(*shape, generator=g)
        x = (x.mT.contiguous().mT if transposed else x).requires_grad_()
        w = torch.randn(4, 7, generator=g, requires_grad=True)
        b = torch.randn(bias_shape, generator=g, requires_grad=True)
        out = f(x, w, b)
        grads.append(torch.autograd.grad(out, (x, w, b), torch.randn(out.shape, generator=g)))
    for e, a in zip(*grads):
        assert_bitwise(a, e, "gradient")
        assert a.stride() == e.stride()
