"""The oneDNN executor (thunder/executors/onednnex.py): float32 CPU products through oneDNN, against eager.

oneDNN rounds otherwise than MKL (eager's kernel), so products match eager within float32 tolerance, not
bitwise: checked relative to the largest entry of each result (a product's error grows with its entries,
not with each entry). What the executor does not claim runs with torch's kernels, bitwise eager.
"""
from __future__ import annotations

import importlib.util
import re

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.executors.onednnex import OneDNNExecutor, onednn_available
from tests.parity import NotBitwise, check_training_parity
from tests.test_fusion_inductor import requires_compiler

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")

# Every product, however small: the model cases are tiny.
EVERY_PRODUCT = OneDNNExecutor("onednn_every_product", min_multiply_adds=0)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _assert_close_to_largest(actual, expected, rtol=2e-6):
    """Within ``rtol`` of the largest entry of ``expected``: float32 products of these sizes, another order."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    scale = expected.abs().max().item()
    diff = (actual - expected).abs().max().item()
    assert diff <= rtol * scale, f"max abs diff {diff:.3g} against entries up to {scale:.3g}"


def _onednn_calls(jf) -> int:
    src = str(thunder.last_traces(jf)[-1])
    return src.count("= onednn_linear(") + src.count("= onednn_matmul(")


# ---------------------------------------------------------------------------------------------
# 1. Products of each layout against eager (sizes the default executor claims)
# ---------------------------------------------------------------------------------------------

M, K, N = 256, 128, 192  # 6.3M multiply-adds: above MIN_MULTIPLY_ADDS

PRODUCTS = {
    "linear": (lambda x, w: F.linear(x, w), lambda: (_randn(M, K), _randn(N, K, seed=1))),
    "linear_bias": (lambda x, w, b: F.linear(x, w, b), lambda: (_randn(M, K), _randn(N, K, seed=1), _randn(N, seed=2))),
    "linear_3d": (lambda x, w: F.linear(x, w), lambda: (_randn(4, M // 4, K), _randn(N, K, seed=1))),
    "linear_3d_every_other_row": (lambda x, w: F.linear(x[:, ::2], w),
                                  lambda: (_randn(4, M // 2, K), _randn(N, K, seed=1))),
    "linear_3d_transposed": (lambda x, w: F.linear(x.transpose(0, 1), w),
                             lambda: (_randn(M // 4, 4, K), _randn(N, K, seed=1))),
    "linear_transposed_weight": (lambda x, w: F.linear(x, w.t()), lambda: (_randn(M, K), _randn(K, N, seed=1))),
    "linear_strided_weight": (lambda x, w: F.linear(x, w[:, ::2]), lambda: (_randn(M, K), _randn(N, 2 * K, seed=1))),
    "linear_transposed_input": (lambda x, w: F.linear(x.t(), w), lambda: (_randn(K, M), _randn(N, K, seed=1))),
    "matmul": (lambda a, b: a @ b, lambda: (_randn(M, K), _randn(K, N, seed=1))),
    "matmul_3d": (lambda a, b: torch.matmul(a, b), lambda: (_randn(2, M // 2, K), _randn(K, N, seed=1))),
    "mm_transposed_right": (lambda a, b: torch.mm(a, b.t()), lambda: (_randn(M, K), _randn(N, K, seed=1))),
    # a weight gradient, g.T @ x: the transposed operand larger than the other and the result together
    "matmul_transposed_left_large": (lambda g, x: g.t() @ x, lambda: (_randn(4 * M, N), _randn(4 * M, 32, seed=1))),
    # the transposed operand the smaller one: read by copying it
    "matmul_transposed_left_small": (lambda a, b: a.t() @ b, lambda: (_randn(K, M), _randn(K, N, seed=1))),
    "matmul_of_a_view": (lambda a, b: a[:, 1:K + 1] @ b, lambda: (_randn(M, K + 2), _randn(K, N, seed=1))),
}


@pytest.mark.parametrize("name", list(PRODUCTS))
def test_products_match_eager(name):
    fn, make_args = PRODUCTS[name]
    args = make_args()
    expected = fn(*args)
    jf = thunder.jit(fn, executors=["onednn", "torch"])
    actual = jf(*args)
    _assert_close_to_largest(actual, expected)
    assert actual.is_contiguous(), "a product is returned contiguous, as torch returns it"
    assert _onednn_calls(jf) == 1


# ---------------------------------------------------------------------------------------------
# 2. What it does not claim runs with torch's kernels, bitwise
# ---------------------------------------------------------------------------------------------

NOT_CLAIMED = {
    "small": (lambda a, b: a @ b, lambda: (_randn(8, 16), _randn(16, 8, seed=1))),
    "float64": (lambda a, b: a @ b, lambda: (_randn(M, K).double(), _randn(K, N, seed=1).double())),
    "bfloat16": (lambda a, b: a @ b, lambda: (_randn(M, K).bfloat16(), _randn(K, N, seed=1).bfloat16())),
    "batched": (lambda a, b: a @ b, lambda: (_randn(4, M, K), _randn(4, K, N, seed=1))),
    "vector": (lambda a, b: a @ b, lambda: (_randn(M, K), _randn(K, seed=1))),
    "integer": (lambda a, b: a @ b, lambda: (torch.randint(-4, 4, (M, K)), torch.randint(-4, 4, (K, N)))),
}


@pytest.mark.parametrize("name", list(NOT_CLAIMED))
def test_other_products_run_with_torch_bitwise(name):
    fn, make_args = NOT_CLAIMED[name]
    args = make_args()
    jf = thunder.jit(fn, executors=["onednn", "torch"])
    assert torch.equal(jf(*args), fn(*args))
    assert _onednn_calls(jf) == 0


def test_the_threshold_is_the_executors():
    fn, make_args = PRODUCTS["matmul"]
    args = make_args()
    high = thunder.jit(fn, executors=[OneDNNExecutor("onednn_high", min_multiply_adds=M * K * N + 1), "torch"])
    assert torch.equal(high(*args), fn(*args)) and _onednn_calls(high) == 0
    at = thunder.jit(fn, executors=[OneDNNExecutor("onednn_at", min_multiply_adds=M * K * N), "torch"])
    at(*args)
    assert _onednn_calls(at) == 1


def test_the_trace_names_the_products():
    fn, make_args = PRODUCTS["linear_bias"]
    jf = thunder.jit(fn, executors=["onednn", "torch"])
    jf(*make_args())
    src = str(thunder.last_traces(jf)[-1])
    assert "from thunder.executors.onednnex import onednn_linear" in src
    assert "= onednn_linear(x, w, b)" in src and "= ltorch.linear(x, w, b)" in src  # the symbol beneath, as a comment


# ---------------------------------------------------------------------------------------------
# 3. Training: forward and backward (weight gradients g.T @ x included) of models nobody here wrote
# ---------------------------------------------------------------------------------------------

# Whether oneDNN's products round as MKL's depends on the sizes and the CPU (short sums of these tiny models often
# come out alike, the longer ones of the product cases above do not).
_TOLERANCE = NotBitwise("oneDNN's float32 products may round otherwise than MKL's", atol=1e-5, rtol=1e-4,
                        depends_on_machine=True)


def _gpt():
    from tests.models import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=96, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0))
    return model, (torch.randint(0, 96, (2, 16)),)


def _bench_llama():
    from benchmarks.bench_models import llama

    torch.manual_seed(0)
    w = llama("tiny", "manual")
    return w.make_model(), (torch.randint(0, w.vocab_size, (2, 32)), torch.randint(0, w.vocab_size, (2, 32)))


_MODELS = {"gpt": (_gpt, lambda out: out[0].square().mean()), "llama_manual_attention": (_bench_llama, lambda out: out)}


@pytest.mark.parametrize("fused", [False, pytest.param(True, marks=requires_compiler)],
                         ids=["onednn", "onednn+inductor"])
@pytest.mark.parametrize("name", list(_MODELS))
def test_models_train_as_eager(name, fused):
    make, loss_of = _MODELS[name]
    model, inputs = make()
    executors = [EVERY_PRODUCT, "inductor", "torch"] if fused else [EVERY_PRODUCT, "torch"]
    jm, _ = check_training_parity(model, inputs, loss_of=loss_of, not_bitwise=_TOLERANCE, executors=executors)
    _assert_products_by_onednn(jm)


def _assert_products_by_onednn(jm):
    """The forward's and the backward's products (weight gradients included) ran with oneDNN."""
    assert "onednn_linear(" in str(thunder.last_traces(jm)[-1])
    backward = str(thunder.last_backward_traces(jm)[-1])
    assert "onednn_matmul(" in backward or "onednn_linear_backward(" in backward
    assert not re.search(r"= (linear_backward|mm_backward)\(", backward), "a product left to torch"


_LINEAR_GRADIENTS = {  # name: (input of F.linear, with a bias, weight requires grad)
    "2-D": (lambda x: x, True, True),
    "3-D": (lambda x: x.reshape(4, M // 4, K), True, True),
    "3-D transposed": (lambda x: x.reshape(4, K, M // 4).transpose(1, 2), True, True),
    "no bias": (lambda x: x, False, True),
    "frozen weight": (lambda x: x.reshape(4, M // 4, K), True, False),
}


@pytest.mark.parametrize("name", list(_LINEAR_GRADIENTS))
def test_linear_gradients_by_onednn(name):
    input_of, with_bias, trains_weight = _LINEAR_GRADIENTS[name]

    def f(x, w, b):
        return F.linear(input_of(x), w, b if with_bias else None).sin()

    def grads(fn):
        x, w, b = _randn(M, K).requires_grad_(), _randn(N, K, seed=1).requires_grad_(trains_weight), _randn(N, seed=2)
        b.requires_grad_()
        out = fn(x, w, b)
        wrt = [t for t in (x, w, b) if t.requires_grad and (t is not b or with_bias)]
        return torch.autograd.grad(out, wrt, torch.ones_like(out))

    jf = thunder.jit(f, executors=["onednn", "torch"])
    for actual, expected in zip(grads(jf), grads(f), strict=True):
        _assert_close_to_largest(actual, expected, rtol=1e-5)
    backward = str(thunder.last_backward_traces(jf)[-1])
    assert "onednn_linear_backward(" in backward  # a frozen weight's too (given its input's layout alone)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt2", "bert", "t5", "mixtral"])
def test_hf_models_train_as_eager(name):
    from tests.test_hf_models import CASES, make_inputs, make_model

    case = CASES[name]
    jm, _ = check_training_parity(make_model(case), make_inputs(case, mask=case.model_type in ("bert", "t5")),
                                  not_bitwise=_TOLERANCE, executors=[EVERY_PRODUCT, "torch"])
    _assert_products_by_onednn(jm)
