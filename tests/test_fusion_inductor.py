"""The inductor executor (thunder/executors/inductorex.py): fused regions compiled by torch._inductor give eager's
results within float tolerance, forward and backward, on an op suite and on the model suite; random draws as the
unfused program; identical regions compiled once; the torch fallback; executor priorities; per-layout recompiles.

Inductor compiles each distinct region with the C++ compiler (one to a few seconds each on two cores): the tests
share the module-level executor (identical regions compile once per process) and reuse shapes and programs, to
keep the whole file to about 60 distinct regions.
"""
from __future__ import annotations

import collections
import copy
import shutil

import threading
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
import thunder.torch as ltorch
from thunder.executors.inductorex import InductorExecutor
from thunder.extend import OperatorExecutor

from models import CNN, GPT, MLP, GPTBlock, GPTConfig, Llama, LlamaConfig
from parity import regions_compile

requires_compiler = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                                       reason="inductor needs a C++ compiler (g++ or c++) on the CPU")
FUSED = ["inductor", "torch"]


@pytest.fixture(autouse=True)
def _regions_compile():
    """Every test here runs its regions compiled (the test of the fallback expects its warning with ``pytest.warns``,
    which takes it first)."""
    with regions_compile():
        yield


def _fused_ops(trace) -> list:
    """The primitives of each inductor region of ``trace``."""
    return [[s.sym.name for s in b.subsymbols] for b in trace.bound_symbols
            if isinstance(b.sym.executor, InductorExecutor)]


def _tolerance(dtype) -> dict:
    return {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}[dtype]


# ---------------------------------------------------------------------------------------------
# 3. Numerics: an op suite, forward and backward
# ---------------------------------------------------------------------------------------------


def _unary(x):
    p = x.abs() + 1
    return (x.sin() + x.cos() * x.tanh() - x.sigmoid() + x.exp() * 0.1 + p.log() + p.sqrt() + p.rsqrt()
            + p.reciprocal() + x.erf() + x.expm1() * 0.1 + x.atan() + p.log1p() + x.sinh() * 0.1 - (-x).abs())


def _binary(x, y, b):
    p = y.abs() + 0.5
    m = torch.where(x > y, x * y, x - y)
    return ((x + b) / p + p.pow(1.5) + x ** 2 + torch.maximum(x, y) - torch.minimum(x, b) + m + x.clamp(-0.5, 0.5)
            + torch.atan2(x, p) + (x >= 0).to(x.dtype) * y + x.double().sin().to(x.dtype) + _integers(x).to(x.dtype))


def _integers(x):
    i = (x * 10).long()  # negative ones too: remainder and floor division round as torch's do
    return (i % 7) * 3 - i // 3 + (torch.where(x > 0, i, -i) & 5)


def _reductions(x):
    return x.sum(-1), x.amax(-1), x.mean(0), x.var(-1), x.softmax(-1), F.log_softmax(x, 0), x.std(0, keepdim=True)


def _norms(x, w, b):
    ln = F.layer_norm(x, (8,), w, b)
    rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return F.silu(ln), F.gelu(rms), F.gelu(x, approximate="tanh"), ln.tanh(), rms.sigmoid(), F.relu(x)


def _views(x, y):
    a = x.reshape(2, 16).t()
    c = torch.cat([x, y * 2], dim=0)
    return ((a * 2).sin(), c[1:5, ::2].exp(), x.transpose(0, 1).unsqueeze(0).expand(3, 8, 4).cos(), x.flip(0) + y,
            x[:, 2:6] * y[:, :4], x.permute(1, 0).reshape(32).tanh())


_OP_SUITE = {"unary": (_unary, [(4, 8)]), "binary": (_binary, [(4, 8), (4, 8), (8,)]),
             "reductions": (_reductions, [(4, 8)]), "norms": (_norms, [(4, 8), (8,), (8,)]),
             "views": (_views, [(4, 8), (4, 8)])}


def _forward_backward(fn, args, cotangent_seed=0):
    """``fn``'s outputs and the gradients of its inputs for random cotangents."""
    args = [a.detach().clone().requires_grad_() for a in args]
    outs = fn(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    gen = torch.Generator().manual_seed(cotangent_seed)
    cots = [torch.randn(o.shape, generator=gen).to(o.dtype) for o in outs]
    grads = torch.autograd.grad(outs, args, cots)
    return [o.detach() for o in outs], list(grads)


# bfloat16 where rounding matters most (each region is one more compilation): casts, reductions, normalizations
_OP_CASES = [(name, torch.float32) for name in _OP_SUITE] + [(name, torch.bfloat16) for name in
                                                             ("binary", "reductions", "norms")]


@requires_compiler
@pytest.mark.parametrize("name, dtype", _OP_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_op_suite_matches_eager(name, dtype):
    fn, shapes = _OP_SUITE[name]
    torch.manual_seed(0)
    args = [torch.randn(s, dtype=dtype) for s in shapes]
    jf = thunder.jit(fn, executors=FUSED)
    outs, grads = _forward_backward(jf, args)
    expected_outs, expected_grads = _forward_backward(fn, args)
    torch.testing.assert_close(outs, expected_outs, **_tolerance(dtype))
    torch.testing.assert_close(grads, expected_grads, **_tolerance(dtype))
    assert _fused_ops(thunder.last_traces(jf)[-1]) and _fused_ops(thunder.last_backward_traces(jf)[-1])


# ---------------------------------------------------------------------------------------------
# 3. Numerics: the model suite, one training step
# ---------------------------------------------------------------------------------------------

_MODEL_SUITE = {  # name: (model, inputs, whether the forward has regions (the MLP's ReLUs are one primitive each))
    "mlp": (lambda: MLP(width=32, n_layers=3), lambda: (torch.randn(4, 32),), False),
    "cnn": (lambda: CNN(3, 8, 10, image_size=16), lambda: (torch.randn(4, 3, 16, 16),), True),
    "gpt": (lambda: GPT(GPTConfig()), lambda: (torch.randint(0, 96, (2, 12)),), True),  # dropout 0.1
    "llama": (lambda: Llama(LlamaConfig()), lambda: (torch.randint(0, 96, (2, 12)),), True),
    # benchmarks/fusion.py's Llama, small: attention by hand (q, k, v permuted views), its own loss
    "llama_manual_attention": (lambda: _bench_llama().make_model(),
                               lambda: (torch.randint(0, 512, (2, 64)), torch.randint(0, 512, (2, 64))), True),
}


def _bench_llama():
    from benchmarks.bench_models import llama

    return llama("tiny", "manual")


def _loss(out):
    if isinstance(out, tuple):  # GPT: (logits, None)
        out = out[0]
    return (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(1))).sum()


def _train_step(model, inputs, seed=0):
    """The loss, every parameter's gradient and every buffer after one step (dropout drawn under ``seed``)."""
    torch.manual_seed(seed)
    loss = _loss(model(*inputs))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return loss.detach(), grads, {n: b.clone() for n, b in model.named_buffers()}


def _models(name):
    """The model for eager, a copy for thunder with the torch executor and one for the inductor executor."""
    make_model, make_inputs, _ = _MODEL_SUITE[name]
    torch.manual_seed(0)
    model = make_model()
    inputs = make_inputs()
    return model, copy.deepcopy(model), copy.deepcopy(model), inputs


@requires_compiler
@pytest.mark.parametrize("name", list(_MODEL_SUITE))
def test_model_suite_matches_eager_and_the_torch_executor(name):
    model, unfused, fused, inputs = _models(name)
    expected = _train_step(model, inputs)
    junfused = thunder.jit(unfused, executors=["torch"])
    jfused = thunder.jit(fused, executors=FUSED)
    unfused_result = _train_step(junfused, inputs)
    fused_result = _train_step(jfused, inputs)
    torch.testing.assert_close(unfused_result, expected, rtol=0, atol=0)  # the torch executor: bitwise
    torch.testing.assert_close(fused_result, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fused_result, unfused_result, rtol=1e-4, atol=1e-5)
    assert _fused_ops(thunder.last_backward_traces(jfused)[-1])
    assert bool(_fused_ops(thunder.last_traces(jfused)[-1])) == _MODEL_SUITE[name][2]


def _inplace(x, y):
    v = x.view(4, 8)
    x.add_(1)
    z = (x * y).exp()
    x.mul_(z.tanh())
    return z + x, v * 2  # v sees both updates


@requires_compiler
def test_inplace_updates_of_inputs_match_eager():
    x, y = torch.randn(32), torch.randn(32)
    x_eager = x.clone()
    jf = thunder.jit(_inplace, executors=FUSED)
    for _ in range(2):
        torch.testing.assert_close(jf(x, y), _inplace(x_eager, y))
        torch.testing.assert_close(x, x_eager)
    trace = thunder.last_traces(jf)[-1]
    assert _fused_ops(trace) and any(b.sym.name == "copy_" for b in trace.bound_symbols)


# ---------------------------------------------------------------------------------------------
# 4. A region inductor cannot compile runs with the torch executor
# ---------------------------------------------------------------------------------------------


class _FailingInductor(InductorExecutor):
    def inductor_compile(self, gm, example_inputs, donated=()):
        raise RuntimeError("no compiler in this test")


def test_a_region_inductor_cannot_compile_runs_with_the_torch_executor():
    jf = thunder.jit(_unary, executors=[_FailingInductor("failing_inductor"), "torch"])
    x = torch.randn(4, 8)
    with pytest.warns(UserWarning, match=r"could not compile a fused region \(RuntimeError: no compiler in this "
                                         r"test\); it runs with the torch executor instead"):
        outs, grads = _forward_backward(jf, [x])
    expected_outs, expected_grads = _forward_backward(_unary, [x])
    torch.testing.assert_close(outs, expected_outs, rtol=0, atol=0)  # the torch executor's kernels: bitwise
    torch.testing.assert_close(grads, expected_grads, rtol=0, atol=0)
    assert _fused_ops(thunder.last_traces(jf)[-1]) and _fused_ops(thunder.last_backward_traces(jf)[-1])


# ---------------------------------------------------------------------------------------------
# 5. Random numbers: dropout draws as the unfused program (and eager) draws
# ---------------------------------------------------------------------------------------------


def _dropout(x):
    y = F.dropout((x * 2).sin(), 0.5, training=True)
    return (y * 3).tanh()


def _seeded(jf, x, seed):
    torch.manual_seed(seed)
    return _forward_backward(jf, [x])


@requires_compiler
def test_dropout_draws_as_unfused_and_the_backward_uses_the_forward_mask():
    x = torch.randn(16, 16)
    jfused, junfused = thunder.jit(_dropout, executors=FUSED), thunder.jit(_dropout, executors=["torch"])
    fused = _seeded(jfused, x, 3)
    torch.testing.assert_close(_seeded(jfused, x, 3), fused, rtol=0, atol=0)  # the same seed, the same numbers
    torch.testing.assert_close(fused, _seeded(junfused, x, 3), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused, _seeded(_dropout, x, 3), rtol=1e-5, atol=1e-5)
    (out,), (grad,) = fused
    dropped = out == 0
    assert 0.3 < dropped.float().mean() < 0.7
    assert torch.equal(grad == 0, dropped)  # the backward's mask is the forward's
    assert not torch.equal(_seeded(jfused, x, 4)[0][0] == 0, dropped)
    assert _fused_ops(thunder.last_traces(jfused)[-1]) and _fused_ops(thunder.last_backward_traces(jfused)[-1])


def _dropout_of_transposed_softmax(s, w, dims):
    # eager's softmax writes its output contiguous; the region writes it in its input's (transposed) order
    return F.dropout(torch.softmax(s.transpose(*dims) * w, -1), 0.3, training=True)


@requires_compiler
@pytest.mark.parametrize("dims", [(1, 2), (0, 2)])
def test_dropout_of_a_value_a_region_lays_out_otherwise_draws_eagers_mask(dims):
    """A region may lay a value out otherwise than eager (here: HF Longformer's attention probabilities); dropout's
    mask is drawn in eager's layout of it (known while tracing), so each element gets eager's number."""
    s, w = torch.randn(2, 4, 16, 9), torch.randn(9)
    jf = thunder.jit(_dropout_of_transposed_softmax, executors=FUSED)
    fused, eager = [], []
    for fn, out in ((jf, fused), (_dropout_of_transposed_softmax, eager)):
        torch.manual_seed(3)
        out += _forward_backward(lambda s, w: fn(s, w, dims), [s, w])
    torch.testing.assert_close(fused, eager, rtol=1e-5, atol=1e-5)
    masks = [b for b in thunder.last_traces(jf)[-1].bound_symbols if b.sym.name == "dropout_mask"]
    assert [b.kwargs["strides"] for b in masks] == [torch.softmax(s.transpose(*dims) * w, -1).stride()]


@requires_compiler
def test_fused_random_draws_deterministically_and_the_backward_uses_the_forward_mask():
    """``fuse_random=True``: dropout's mask is drawn inside the region (``prims.uniform`` and a comparison):
    deterministic under a seed, another sample than eager's, and the backward reads the forward's mask."""
    ex = InductorExecutor("inductor_fuse_random", fuse_random=True)
    jf = thunder.jit(_dropout, executors=[ex, "torch"])
    x = torch.randn(16, 16)
    fused = _seeded(jf, x, 3)
    assert "prims.uniform" in str(thunder.last_traces(jf)[-1])  # the draw is inside a fused region
    assert "uniform" not in str(thunder.last_backward_traces(jf)[-1])  # never drawn again
    torch.testing.assert_close(_seeded(jf, x, 3), fused, rtol=0, atol=0)
    (out,), (grad,) = fused
    dropped = out == 0
    assert 0.3 < dropped.float().mean() < 0.7
    assert torch.equal(grad == 0, dropped)
    (eager_out,), _ = _seeded(_dropout, x, 3)
    assert not torch.equal(eager_out == 0, dropped)  # another sample than eager's bernoulli_ (documented)


@requires_compiler
def test_gpt_with_dropout_is_deterministic_under_a_seed():
    _, _, model, inputs = _models("gpt")  # the model suite's GPT (dropout 0.1): its regions are compiled already
    jmodel = thunder.jit(model, executors=FUSED)
    first = _train_step(jmodel, inputs, seed=5)
    torch.testing.assert_close(_train_step(jmodel, inputs, seed=5), first, rtol=0, atol=0)
    assert not torch.equal(_train_step(jmodel, inputs, seed=6)[0], first[0])


# ---------------------------------------------------------------------------------------------
# 6. Identical regions compile once
# ---------------------------------------------------------------------------------------------


def _first_step(n_layers):
    """A fresh executor's regions compiled, inductor compilations run and regions in the traces for a stack of
    ``n_layers`` GPT blocks (the model suite's GPT's blocks), after a first training step."""
    ex = InductorExecutor(f"inductor_{n_layers}_layers")
    compilations = []
    compile_region = ex.inductor_compile

    def counting(*args, **kwargs):
        compilations.append(args[0])
        return compile_region(*args, **kwargs)

    ex.inductor_compile = counting
    torch.manual_seed(0)
    stack = thunder.jit(nn.Sequential(*[GPTBlock(GPTConfig()) for _ in range(n_layers)]), executors=[ex, "torch"])
    x = torch.randn(2, 12, 32, requires_grad=True)
    stack(x).sum().backward()
    regions = _fused_ops(thunder.last_traces(stack)[-1]) + _fused_ops(thunder.last_backward_traces(stack)[-1])
    return len(ex._compiled), len(compilations), len(regions)


@requires_compiler
def test_identical_blocks_compile_once():
    compiled2, compilations2, regions2 = _first_step(2)
    compiled6, compilations6, regions6 = _first_step(6)
    # four more layers add regions to the traces, not compilations (the first call's cost: BENCHMARKS.md)
    assert compiled6 == compiled2 < regions2 < regions6
    assert compilations6 == compilations2  # some regions also compile for a second input layout


def _region_between_products(a, b, w, keep_first: bool):
    x, y = a @ w, b @ w  # the products feed one region; the one not returned dies in it and lends it its memory
    z = (x * 2).sin() + y.cos()
    return (z, x) if keep_first else (z, y)


@requires_compiler
def test_a_region_compiled_again_is_read_from_inductors_graph_cache():
    """A second process (here: a second executor, whose regions thunder has not compiled) reads the compiled code
    of a region from inductor's graph cache instead of generating it again: the first call of a program run before
    costs a fraction. The key tells apart compilations that reuse the memory of different inputs: a hit of
    another's would write the region's result over a value the program still returns."""
    from torch._dynamo.utils import counters

    a, b, w = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8, 8)
    for keep_first in (True, False):
        expected = _region_between_products(a, b, w, keep_first)
        hits = []
        for name in ("inductor_cache_first", "inductor_cache_again"):
            before = counters["inductor"]["fxgraph_cache_hit"]
            ex = InductorExecutor(f"{name}_{keep_first}")
            jf = thunder.jit(_region_between_products, executors=[ex, "torch"])
            for out, exp in zip(jf(a, b, w, keep_first), expected):
                torch.testing.assert_close(out, exp)
            [region] = ex._compiled.values()
            assert region.donate == ((1 if keep_first else 0, False),)  # the input that dies in the region
            hits.append(counters["inductor"]["fxgraph_cache_hit"] - before)
        assert hits[1] == 1, hits


# ---------------------------------------------------------------------------------------------
# 7. Executor priorities, 8. progress, 9. per-layout recompilation
# ---------------------------------------------------------------------------------------------


def _softmax_program(x):
    return ((x * 2).sin().softmax(-1) * 3).tanh()


@requires_compiler
def test_an_operator_executor_listed_first_keeps_its_op_out_of_regions():
    softmax_ex = OperatorExecutor("fusion_test_softmax")
    op = softmax_ex.register_operator("fusion_test_softmax", fn=lambda a, dim, *args, **kwargs: torch.softmax(a, dim))
    softmax_ex.register_implementation(ltorch.softmax, op)
    x = torch.randn(4, 8)
    for executors, softmax_fused in (([softmax_ex, *FUSED], False), (FUSED, True)):
        jf = thunder.jit(_softmax_program, executors=executors)
        torch.testing.assert_close(jf(x), _softmax_program(x))
        trace = thunder.last_traces(jf)[-1]
        regions = _fused_ops(trace)
        assert regions and any("amax" in r for r in regions) == softmax_fused
        assert any(b.sym is op for b in trace.bound_symbols) != softmax_fused


@requires_compiler
def test_long_compilations_report_progress(capsys):
    jf = thunder.jit(_reductions, executors=[InductorExecutor("inductor_progress", progress_after_s=0), "torch"])
    jf(torch.randn(4, 8))
    assert "thunder: inductor: compiled a region of" in capsys.readouterr().err


# These programs return reductions: a returned 2-D value computed from an input laid out otherwise has other
# strides in eager, and the program is traced again for it (test_outputs_follow_eagers_layouts_for_other_input_layouts);
# a 1-D one is laid out alike for every layout of its operands, so another layout reaches the region's compilations.
def _after_transpose(x):
    y = F.softshrink(x.t(), 0.1)  # the fallback keeps its input's layout: y is transposed at run time
    return ((y * 2).sin() + y).sum(0)


def _region_only(x):
    return ((x * 2).sin() + x).sum(0)  # the region of _after_transpose


@requires_compiler
def test_region_inputs_laid_out_otherwise_are_compiled_for_their_layout():
    from thunder.executors.inductor_compile import COMPILATIONS
    from thunder.executors.inductorex import wait_for_compilation

    wait_for_compilation()  # no background compilation of an earlier test's counts here
    before = collections.Counter(COMPILATIONS)
    ex = InductorExecutor("inductor_layouts")
    jf = thunder.jit(_after_transpose, executors=[ex, "torch"])
    x = torch.randn(4, 6)
    torch.testing.assert_close(jf(x), _after_transpose(x))
    jg = thunder.jit(_region_only, executors=[ex, "torch"])
    for a in (torch.randn(6, 4), torch.randn(4, 6).t(), torch.randn(12, 4)[::2], torch.randn(6, 1).expand(6, 4),
              torch.randn(30)[6:].view(6, 4)):
        torch.testing.assert_close(jg(a), _region_only(a))
    torch.testing.assert_close(jf(x), _after_transpose(x))
    # one region in both programs, compiled apart: in jf its input dies in it and its memory may be reused
    by_donation = {c.donate: c for c in ex._compiled.values()}
    assert set(by_donation) == {(), ((0, False),)}
    assert set(by_donation[()].by_layout) == {((4, 1),), ((1, 6),), ((8, 1),), ((1, 0),)}
    assert set(by_donation[((0, False),)].by_layout) == {((4, 1),), ((1, 6),)}
    # counted by kind: each region's first (contiguous) compilation, then one per other layout
    assert COMPILATIONS - before == collections.Counter({"first": 2, "layout": 4})


def _sin_of_sum(x, y):
    return (x + y).sin(), (x * 2).t()  # (the second: a view of a fused value, taken after the region)


@requires_compiler
@pytest.mark.parametrize("make", [lambda: torch.randn(6, 4).t(), lambda: torch.randn(4, 12)[:, ::2],
                                  lambda: torch.randn(1, 6).expand(4, 6), lambda: torch.randn(12, 6)[4:8]],
                         ids=["transposed", "sliced", "expanded", "offset"])
def test_outputs_follow_eagers_layouts_for_other_input_layouts(make):
    """A fused region writes a returned value as eager lays it out, for the layouts of the inputs traced. Called again
    with an input laid out otherwise, eager lays the result out otherwise too (an elementwise result follows its
    operands' layout): the prologue checks the strides of the inputs those layouts follow, and the program is
    traced again (before, the output kept the traced strides: found by the generated programs' third call,
    ``relayout=True``, fused seeds 20788 and others). Where such an input only starts elsewhere in memory (a slice
    of a batch), the strides are the same and the entry is reused."""
    jf = thunder.jit(_sin_of_sum, executors=FUSED)
    y = torch.randn(4, 6)
    first = torch.randn(4, 6)
    for x in (first, make(), first):
        for actual, expected in zip(jf(x, y), _sin_of_sum(x, y)):
            torch.testing.assert_close(actual, expected)
            assert actual.stride() == expected.stride()
    assert "check_strides(x, (6, 1))" in str(thunder.last_prologue_traces(jf)[-1])
    assert thunder.cache_misses(jf) == (1 if make().stride() == (6, 1) else 2)


def _a_column_of_a_fused_value(x):  # a 1-D view of a region's value, which the region returns (fused 31202)
    v = (x / 3).unbind(1)[0][..., ::2]
    return v, v + 1


@requires_compiler
def test_a_one_dimensional_view_of_a_fused_value_follows_eagers_layout_for_other_input_layouts():
    """A fresh 1-D value is laid out alike whatever its operands' layouts, a 1-D view is not: a column of a value
    computed from ``x`` has strides (4,) where ``x`` is a contiguous (5, 2), (2,) where it is transposed. The prologue
    checks ``x``'s strides, and the transposed call is traced again (it was given the traced strides)."""
    jf = thunder.jit(_a_column_of_a_fused_value, executors=FUSED)
    for x in (torch.randn(5, 2), torch.randn(2, 5).t(), torch.randn(5, 2)):
        for actual, expected in zip(jf(x), _a_column_of_a_fused_value(x)):
            torch.testing.assert_close(actual, expected, rtol=0, atol=0)
            assert actual.stride() == expected.stride()
    assert thunder.cache_misses(jf) == 2


def _a_concatenation_of_a_column(x):  # fused generated program 4853
    t = torch.frac(x.double())
    c = torch.cat([t.view(t.size(0), -1)[:, 0]])
    return torch.index_select(c, 0, torch.tensor([3])), c


@requires_compiler
def test_a_concatenation_of_one_column_is_laid_out_as_eagers_for_other_input_layouts():
    """Inductor compiles ``torch.cat([t])`` to ``t`` itself; for an input transposed, the column it concatenates is
    a strided view of a value inductor lays out row-major, where eager's concatenation is contiguous (as
    ``torch.compile``'s result is not). A compilation's first call compares the outputs' strides with eager's and
    the region copies the ones inductor laid out otherwise (before, the output had strides (3,), eager's (1,))."""
    jf = thunder.jit(_a_concatenation_of_a_column, executors=FUSED)
    for x in (torch.randn(5, 3), torch.randn(3, 5).t(), torch.randn(3, 5).t(), torch.randn(5, 3)):
        for actual, expected in zip(jf(x), _a_concatenation_of_a_column(x)):
            torch.testing.assert_close(actual, expected, rtol=0, atol=0)
            assert actual.stride() == expected.stride()


@requires_compiler
def test_a_region_always_given_one_other_layout_calls_its_compilation_directly():
    """Compiled for contiguous inputs, a region that always receives transposed ones (an attention output laid out
    as its kernel writes it) runs that layout's compilation from then on, without looking the layout up on every
    call; a second change of layout makes every call look its layout up."""
    ex = InductorExecutor("inductor_one_layout")
    jg = thunder.jit(_region_only, executors=[ex, "torch"])
    a = torch.randn(6, 4)  # traced contiguous (a program input traced transposed is compiled for that layout first)
    torch.testing.assert_close(jg(a), _region_only(a))
    for _ in range(3):
        a = torch.randn(4, 6).t()
        torch.testing.assert_close(jg(a), _region_only(a))
    [compiled] = ex._compiled.values()
    assert compiled.layout_changes == 1 and compiled.fn is compiled.by_layout[((1, 6),)]
    for a in (torch.randn(12, 4)[::2], torch.randn(4, 6).t(), torch.randn(6, 4)):
        torch.testing.assert_close(jg(a), _region_only(a))
    assert compiled.layout_changes == 2 and compiled.fn == compiled._by_layout
    assert set(compiled.by_layout) == {((4, 1),), ((1, 6),), ((8, 1),)}


def _returns_a_view_of_an_input(x, y):
    return (y * 2).sin() + 1, x.transpose(0, 1)  # x is only viewed: inductor returns a view of it


@requires_compiler
def test_an_input_the_region_only_views_is_checked_for_its_layout(monkeypatch):
    """An input the compiled graph only returns a view of is read by no kernel: its layout is checked all the
    same, and another layout gets its own compilation instead of a view computed for the wrong strides (a
    silently wrong result). (Views the program sees returned run after the region, where the fusion pass can tell:
    here it is made to leave them in.)"""
    import thunder.extend

    monkeypatch.setattr(thunder.extend, "_returned_views_taken_out", lambda members, *_: (members, []))
    ex = InductorExecutor("inductor_view_layouts")
    jf = thunder.jit(_returns_a_view_of_an_input, executors=[ex, "torch"])
    y = torch.randn(4, 6)
    for x in (torch.randn(6, 4), torch.randn(4, 6).t(), torch.randn(12, 4)[::2]):
        (a, view), (expected_a, expected_view) = jf(x, y), _returns_a_view_of_an_input(x, y)
        torch.testing.assert_close(a, expected_a)
        torch.testing.assert_close(view, expected_view, rtol=0, atol=0)
        assert view.stride() == expected_view.stride()
    assert _fused_ops(thunder.last_traces(jf)[-1]) == [["mul", "sin", "add", "transpose"]]
    # the returned view's strides follow x's: each layout is traced again (the prologue checks x's strides), and its
    # region compiled for it
    assert thunder.cache_misses(jf) == 3
    layouts = [k for c in ex._compiled.values() for k in c.by_layout]
    assert len(layouts) == len(set(layouts)) == 3


# ---------------------------------------------------------------------------------------------
# 10. Background compilation: torch kernels first, compiled kernels once ready
# ---------------------------------------------------------------------------------------------


@requires_compiler
def test_background_compilation_runs_unfused_until_ready_then_fused():
    from thunder.executors.inductorex import wait_for_compilation

    ex = InductorExecutor("inductor_background_test", background=True)
    compiling_threads = []
    compile_region = ex.inductor_compile

    def recording(*args, **kwargs):
        compiling_threads.append(threading.current_thread())
        return compile_region(*args, **kwargs)

    ex.inductor_compile = recording
    x = torch.randn(16, 16)
    jf = thunder.jit(_dropout, executors=[ex, "torch"])
    first = _seeded(jf, x, 3)  # runs at once, with the torch executor where regions are not compiled yet
    torch.testing.assert_close(first, _seeded(_dropout, x, 3), rtol=1e-5, atol=1e-5)
    regions = list(ex._compiled.values())
    wait_for_compilation()
    assert regions and all(r.fn is not r._torch_boxed and r.failed is None for r in regions)
    torch.testing.assert_close(_seeded(jf, x, 3), first, rtol=1e-5, atol=1e-5)
    # a compiled region that may not reuse its inputs' memory on this call (saved values kept by retain_graph)
    # needs another compilation: it too is compiled in the background, and the call runs unfused meanwhile
    h, w, t = _lm_batch()
    expected = _grads_of(_lm_loss, h, w, t, retain_graph=True)
    jl = thunder.jit(_lm_loss, executors=[ex, "torch"])
    torch.testing.assert_close(_grads_of(jl, h, w, t), expected, rtol=1e-5, atol=1e-6)
    wait_for_compilation()
    for _ in range(2):
        torch.testing.assert_close(_grads_of(jl, h, w, t, retain_graph=True), expected, rtol=1e-5, atol=1e-6)
        wait_for_compilation()
    assert any(fn != r._torch_boxed for r in ex._compiled.values() for fn in r.plain_by_layout.values())
    assert compiling_threads and threading.main_thread() not in compiling_threads


@requires_compiler
def test_background_compilation_leaves_the_random_stream_alone(monkeypatch):
    """Inductor saves the random-number state when a compilation starts and restores it when it ends: in the
    background thread that would rewind the draws the training thread made meanwhile. Inductor's test hook (a
    sleep between saving the state and compiling) holds the compilation while this thread draws."""
    import time

    import torch._inductor.config as inductor_config
    from thunder.executors.inductorex import wait_for_compilation

    holding, drawn, hold = threading.Event(), threading.Event(), 1234.5
    real_sleep = time.sleep

    def sleep(seconds):
        if seconds == hold:
            holding.set()
            drawn.wait(60)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    ex = InductorExecutor("inductor_background_rng", background=True)
    compile_region, settings = ex.inductor_compile, {"sleep_sec_TESTING_ONLY": hold}

    def holding_compile(*args, **kwargs):  # inductor's settings are the compiling thread's
        with inductor_config.patch(fx_graph_cache=False, **settings):  # a cached graph is not compiled
            return compile_region(*args, **kwargs)

    ex.inductor_compile = holding_compile
    jf = thunder.jit(lambda x: (x * 2).sin().exp(), executors=[ex, "torch"])
    torch.manual_seed(0)
    jf(torch.randn(8))
    assert holding.wait(60)
    during = torch.rand(4)
    drawn.set()
    wait_for_compilation()
    after = torch.rand(4)
    torch.manual_seed(0)
    torch.randn(8)
    assert torch.equal(during, torch.rand(4)) and torch.equal(after, torch.rand(4))
    # and compiling draws none: with this thread idle, the state is as it was
    settings.clear()
    state = torch.random.get_rng_state()
    thunder.jit(lambda x: (x * 3).cos().exp(), executors=[ex, "torch"])(torch.ones(8))
    wait_for_compilation()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(r.fn is not r._torch_boxed and r.failed is None for r in ex._compiled.values())


# ---------------------------------------------------------------------------------------------
# 11. Losses: cross-entropy's fused forward and backward (the scatter of its gradient is a select)
# ---------------------------------------------------------------------------------------------

_CE_CASES = {"mean": {}, "ignored": {"ignore_index": 3}, "smoothed_sum": {"label_smoothing": 0.1, "reduction": "sum"},
             "weighted": {"weighted": True}, "none": {"reduction": "none"}, "unbatched": {"unbatched": True}}


@requires_compiler
@pytest.mark.parametrize("case", list(_CE_CASES))
def test_cross_entropy_matches_eager(case):
    kwargs = dict(_CE_CASES[case])
    weighted, unbatched = kwargs.pop("weighted", False), kwargs.pop("unbatched", False)

    def f(h, w, t, cw):
        return F.cross_entropy(h @ w.t(), t, weight=cw if weighted else None, **kwargs)

    torch.manual_seed(0)
    h, w, cw = torch.randn(16, 8), torch.randn(256, 8), torch.rand(256)
    t = torch.randint(0, 256, (16,))
    t[::5] = kwargs.get("ignore_index", -100)  # ignored targets
    if unbatched:  # one sample: logits [C], a target of no dimensions
        h, t = h[1], t[1]
    jf = thunder.jit(f, executors=FUSED)
    (out,), grads = _forward_backward(lambda h, w: jf(h, w, t, cw), [h, w])
    (expected,), expected_grads = _forward_backward(lambda h, w: f(h, w, t, cw), [h, w])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads, expected_grads, rtol=1e-4, atol=1e-5)  # sums of 256 terms, reordered
    assert _fused_ops(thunder.last_backward_traces(jf)[-1])


# ---------------------------------------------------------------------------------------------
# 12. Memory: outputs only matmuls read are written contiguous; inputs that die in a region lend it their memory
# ---------------------------------------------------------------------------------------------


def _attention_of_one_projection(x, w):
    B, T, C = x.shape
    q, k, v = (x @ w).view(B, T, 3, 2, C // 2).permute(2, 0, 3, 1, 4)
    q, k = q.sin(), k.cos()  # unfused, laid out as the projection: matmul would copy them
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v


def _copies(fn, *args) -> list:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn(*args)
    return [e.input_shapes for e in prof.events() if e.name in ("aten::copy_", "aten::clone")
            and e.input_shapes and len(e.input_shapes[0]) >= 3]


@requires_compiler
def test_outputs_only_matmuls_read_are_written_contiguous():
    x, w = torch.randn(2, 8, 16), torch.randn(16, 48)
    jf, junfused = thunder.jit(_attention_of_one_projection, executors=FUSED), thunder.jit(
        _attention_of_one_projection, executors=["torch"])
    expected = _attention_of_one_projection(x, w)
    torch.testing.assert_close(jf(x, w), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(junfused(x, w), expected, rtol=0, atol=0)
    assert _copies(junfused, x, w), "the unfused program copies q, k and v for its matmuls"
    assert _copies(jf, x, w) == []



def _attention_of_normalized_queries(x, w):
    B, T, C = x.shape
    q, k, v = (x @ w).view(B, T, 3, 2, C // 2).permute(2, 0, 3, 1, 4)
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # reductions: saved for the backward, not recomputed
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ (v * 0.5)


@requires_compiler
def test_saved_outputs_only_matmuls_read_are_written_contiguous():
    """In training q and k are also saved for the backward: the forward still writes them contiguous and copies
    nothing. The backward copies one operand: ``k.transpose(-2, -1)`` folded to 3-D, as torch's matmul folds it, so
    that its gradient products are eager's (see ``_batched_matmul_backward``); eager makes that copy and three
    more."""
    x, w = torch.randn(2, 8, 16, requires_grad=True), torch.randn(16, 48, requires_grad=True)
    jf = thunder.jit(_attention_of_normalized_queries, executors=FUSED)
    junfused = thunder.jit(_attention_of_normalized_queries, executors=["torch"])
    outs, grads = _forward_backward(jf, [x, w])
    expected_outs, expected_grads = _forward_backward(_attention_of_normalized_queries, [x, w])
    torch.testing.assert_close((outs, grads), (expected_outs, expected_grads), rtol=1e-5, atol=1e-5)
    assert _copies(lambda: junfused(x, w).sum().backward())
    assert _copies(lambda: jf(x, w)) == []
    backward = _copies(lambda: jf(x, w).sum().backward())
    assert [c[0] for c in backward] == [[4, 8, 8], [4, 8, 8]], backward  # the fold's clone and its copy_


def _heads_read_twice(x, w, k, v):
    B, T, C = x.shape
    h = (x @ w).reshape(B, T, 2, C // 2).permute(0, 2, 1, 3)  # a view no matmul reads in place
    return h @ k, h @ v


def _heads_read_twice_and_returned(x, w, k, v):
    B, T, C = x.shape
    h = (x @ w).reshape(B, T, 2, C // 2).permute(0, 2, 1, 3)
    return h @ k, h


@requires_compiler
def test_views_two_matmuls_would_copy_are_written_contiguous_once():
    """Views alone are no region, unless an output goes only to matmuls that cannot read it in place: then one
    region (views and a copy, nothing compiled) writes it contiguous, where each matmul would copy it (a
    backward's attention does that twice for each block)."""
    torch.manual_seed(0)
    x, w, k, v = torch.randn(2, 8, 16), torch.randn(16, 16), torch.randn(2, 2, 8, 5), torch.randn(2, 2, 8, 3)
    jf, junfused = thunder.jit(_heads_read_twice, executors=FUSED), thunder.jit(_heads_read_twice, executors=["torch"])
    expected = _heads_read_twice(x, w, k, v)
    torch.testing.assert_close(jf(x, w, k, v), expected, rtol=0, atol=0)
    assert _fused_ops(thunder.last_traces(jf)[-1]) == [["reshape", "transpose"]]
    copies = _copies(junfused, x, w, k, v)  # a clone and its copy_ for each matmul
    assert len(copies) == 4 and all(c[0] == [2, 2, 8, 8] for c in copies), copies
    assert _copies(jf, x, w, k, v) == copies[:2], "one copy, which both matmuls read"
    # h returned: the program sees its layout, so it stays a view and the views stay unfused
    jr = thunder.jit(_heads_read_twice_and_returned, executors=FUSED)
    outs, expected = jr(x, w, k, v), _heads_read_twice_and_returned(x, w, k, v)
    torch.testing.assert_close(outs, expected, rtol=0, atol=0)
    assert outs[1].stride() == expected[1].stride()
    assert _fused_ops(thunder.last_traces(jr)[-1]) == []


def _permuted(x):
    return (x * 2).sin().permute(2, 0, 1), (x + 1).transpose(0, 1)


def _stacked(x):  # eager's stack writes contiguous; the region's (a broadcast and a cat) follows its input's layout
    return torch.stack([x], 1), torch.stack([x], 1).sum(1)


def _softmax_returned(x):  # eager's softmax writes contiguous; the region's follows its input's layout
    return F.softmax(-x, dim=-1), torch.atan2(-x, x)


def _slice_returned(x):  # a layout with gaps: inductor keeps only the order of the strides of a view it returns
    return (x * 2).double()[..., 1:2], x + 1


def _every_third_element_of_a_clone(x):  # dims interleaved with gaps: (20, 1, 15) for (3, 5, 2) (fused program 9009)
    return x.clone()[..., ::3], x.sum()


def _column_of_a_computed_value(x):  # dense in eager's layout, a slice of inductor's (generated program 6150)
    t = (x[0] / 2).narrow(-1, 0, 1)
    return t.flatten(), t


def _softmax_of_a_masked_row(x):  # eager's layout of the row depends on extents known only at run time: the same for all
    return F.softmax((x * 2)[x.sum((1, 2)) > -1e9][0], dim=-1), x.sum()


def _sign_of_a_broadcast(x):  # sgn reads the broadcast the region returns: in eager's layout (fused program 21588)
    t = torch.stack([x.relu().flatten()], 1).t().expand(2, 1, 60)
    return torch.sgn(t), x.sum()


def _returned_beside_a_number(x):  # the forward's outputs are the program's proxies: the number is none of them
    return 4, -x, torch.remainder(x, -x), x.shape[0]


@requires_compiler
@pytest.mark.parametrize("fn", [_permuted, _stacked, _softmax_returned, _slice_returned, _column_of_a_computed_value,
                                _every_third_element_of_a_clone, _softmax_of_a_masked_row, _returned_beside_a_number,
                                _sign_of_a_broadcast],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("grad", [False, True])
def test_outputs_the_program_sees_keep_eager_layouts(fn, grad):
    """A region writes an output the program sees as eager lays it out (known while tracing), forward alone or with
    the backward (whose forward names its values anew)."""
    x = torch.randn(3, 4, 5).transpose(1, 2).requires_grad_(grad)
    jf = thunder.jit(fn, executors=FUSED)
    for out, expected in zip(jf(x), fn(x)):
        if not isinstance(out, torch.Tensor):
            assert out == expected
            continue
        torch.testing.assert_close(out, expected)
        assert out.stride() == expected.stride()
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _atanh_inside(x):
    return torch.atanh(x.clamp(-0.9, 0.9))


# where fused values are not eager's bit for bit: the bound of their error relative to float64's
_NEAR_ZERO_NOT_BITWISE = {("selu", torch.float32): 3e-7, ("selu", torch.float64): 1e-15,
                          ("erf", torch.float32): 5e-7, ("erf", torch.float64): 1e-15}


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("op", [torch.expm1, _atanh_inside, F.elu, F.celu, F.selu, torch.erf], ids=lambda f: f.__name__)
def test_fused_ops_near_zero_keep_their_relative_accuracy(op, dtype):
    """Inductor's C++ vector code computes expm1 as ``exp(x) - 1`` and atanh as ``0.5 log((1 + x) / (1 - x))``, and
    ATen's vector erf, which it calls, as ``1 - t P(t) exp(-x^2)``: near zero each lost every digit (fused,
    ``expm1(-1e-8)`` was 0, and so were ELU's, CELU's and SELU's small negative values). Fused now, they are eager's
    bit for bit (ATen's vector expm1 and atanh, which eager's kernels call; bfloat16 and float16 erf computed in float
    as eager's kernels compute it), or, where another formula runs (float32 erf's series near zero, SELU's scales),
    within a few ulp of float64's values."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(64, generator=g) * s for s in (1e-30, 1e-8, 1e-4, 0.1, 1, 3)]).to(dtype)

    def f(v):
        return op(v) * 2

    jf = thunder.jit(f, executors=FUSED)
    actual, expected = jf(x), f(x)
    assert _fused_ops(thunder.last_traces(jf)[-1])
    bound = _NEAR_ZERO_NOT_BITWISE.get((op.__name__, dtype))
    if bound is None:
        assert torch.equal(actual, expected)
        return
    exact = f(x.double())
    normal = exact.abs() > torch.finfo(dtype).tiny
    assert ((actual.double() - exact).abs() / exact.abs())[normal].max() <= bound


@requires_compiler
@pytest.mark.parametrize("fn", [lambda x: torch.std(x, 1), lambda x: torch.var(x, 1, correction=0),
                                lambda x: torch.var_mean(x, 0)[0], lambda x: torch.std_mean(x, 1), lambda x: torch.std_mean(x)],
                         ids=["std", "var", "var_mean", "std_mean", "std_mean_all"])
@pytest.mark.parametrize("scale", [1.0, 1e-25], ids=["ordinary", "tiny"])
def test_fused_float32_moments_are_eagers_bit_for_bit(fn, scale):
    """torch's CPU kernels of var, std and their _mean forms compute float32 moments in float64; fused, they are
    computed so too: in float32 the variance of values near 1e-25 underflowed (std 0, eager's about 1e-25) and other
    values differed in their last bits."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 100, generator=g) * scale + 5 * scale

    def f(v):
        return [t * 2 for t in torch.utils._pytree.tree_leaves(fn(v))]

    jf = thunder.jit(f, executors=FUSED)
    for actual, expected in zip(jf(x), f(x)):
        assert torch.equal(actual, expected)
    assert _fused_ops(thunder.last_traces(jf)[-1])


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("values", ["equal", "random"])
@pytest.mark.parametrize("shape,dim,keepdim", [((30,), None, False), ((1, 3, 2, 5), None, False), ((1, 30), 1, True),
                                               ((3, 1, 7), (0, 2), False)], ids=["1d", "4d", "rows", "two_dims"])
@pytest.mark.parametrize("op", [torch.var, torch.std], ids=["var", "std"])
def test_fused_variance_to_one_element_is_eagers_bit_for_bit(op, shape, dim, keepdim, values, dtype):
    """torch's CPU var and std that leave one element take the mean in the input's dtype (its sum in the kernel's
    order of additions), then sum the squared deviations in float64: the variance of thirty float32 copies of -0.1 is
    5.55e-17. Fused, it was 0, and ``t // t.var()`` inf where eager's was 1.8e16 (generated program 32936)."""
    x = (torch.full(shape, -0.1) if values == "equal" else torch.randn(shape, generator=torch.Generator().manual_seed(0))).to(dtype)

    def f(v):
        w = v.abs().neg()
        return op(w, dim, keepdim=keepdim) * 2, w // op(w, dim, keepdim=keepdim, correction=0)

    jf = thunder.jit(f, executors=FUSED)
    for actual, expected in zip(jf(x), f(x)):
        assert torch.equal(actual, expected)
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _views_of_a_returned_value(x):  # a slice with gaps and a flatten were written apart from their base
    y = x * 2
    return y, y[..., ::2], y.flatten(), y.t()[0]


def _views_of_an_input_through_views(x):  # seed nn 805
    return x.reshape(x.shape[0], -1).t()[0], x.sum()


def _two_views_of_one_value(x):  # their base is no output: it becomes one, laid out as in eager (seed nn 320)
    t = x.clamp(-1, 2)
    return t.flatten(), t.transpose(0, -1)


def _two_views_of_a_transposed_value(x):  # its layout eager's: the views' strides are eager's (seed nn 1944)
    t = x.t().clamp(-1, 2)
    return t[1:], t.unbind(1)[0]


def _one_of_split_returned(x):  # seed 175
    y = x.sin()
    return y, y.split([1, x.shape[1] - 1], 1)[-1]


def _a_view_of_a_copy(x):  # nan_to_num of integers copies in eager: its view is no view of x (seed 500)
    return x.nan_to_num().view(-1), x * 2


def _a_view_returned_of_a_view_inside(x):  # the region wrote x[:, ::2].t() anew, in eager's layout (seed 960)
    return x[:, ::2].t().detach().diagonal(), x.sin()


def _views_taken_again_after_an_update(x):  # from the updated base: the row is taken of the slice (seed 2948)
    t = torch.stack([x, x * 2], -1)
    v = t[:, 1:]
    w = v[0]
    w.sin_()
    return w, v


def _a_reduction_over_nothing(x):  # a region may return it as its input itself (seed nn 278)
    return torch.amin(x[0, 0], -1, keepdim=True), x.sum(), x[:, :1].sum(1, keepdim=True)


def _an_expanded_reduction(x):  # zero strides no kernel writes: expanded after the region (seed nn 3082)
    t = x[0, 0].pow(1.0).min()
    return t.expand(3), torch.nonzero(t), x.amax().expand(2, 2), x.sin().sum(0).unsqueeze(0).expand(2, 4)


def _a_detached_tensor_updated(x):  # the update's value is a detach of it: one memory (seed nn 3878)
    t = -x
    d = t.detach()
    d.add_(x)
    return d, t


def _a_diagonal_of_a_returned_slice_updated(x):  # diagonal runs whole (by torch's autograd in training): its output a
    t = x.triu(1).roll(1)[..., :1]  # view of the slice, which the region returns (fused generated program nn 5683)
    d = t.diagonal()
    d.mul_(2)
    return t, d


def _an_unfold_of_a_slice_of_a_returned_value(x):  # Tensor.unfold: a view thunder runs with torch as it is
    t = (x * 2).sin()
    return t, t[:, 1:].unfold(1, 2, 1)


def _views_after_an_update_shaped_as_a_value_of_another_region(x):  # fused generated program 15715: view_as(y, t)
    t = 0 * x  # of the first region reads t whole, taken out of the second region to run after it (t was no output)
    g = F.gelu(x.t())
    v = t.view_as(t)[..., ::2].flatten()
    v.copy_(1.0)
    return v, t.view_as(t)[..., ::2], g, t


def _an_update_through_a_detach_of_a_returned_value(x):  # fused generated program 17231: in training, the update's
    t = torch.cat([x, x]).unsqueeze(1).erf().sign()  # value is laid out as t's memory (laid_out_as: an extent of one),
    d = t.detach()  # which eager's t, its detach and the expand of that share: the region wrote them apart
    d.div_(torch.cat([x, x]).unsqueeze(1))
    return t, d.expand(1, *d.shape), d


@requires_compiler
def _views_of_a_value_an_inplace_method_updated(x):  # x.relu_()'s replay took F.relu's inplace flag (fused nn 20709)
    t = x[:1, :1].clamp(max=1)
    t.relu_()
    return t.view(t.size(0), -1), t.reshape(-1)


def _a_stack_of_a_part_of_a_concatenation(x):  # fused generated program 34521: inductor computes the part into the
    t = x.unsqueeze(1) / -3  # concatenation's memory, and the stack of one tensor (a concatenation of one) returned a
    part = torch.lerp(t, t.flip(0), 0.25)  # view of it: a slice of extent one, laid out as a tensor of its own
    whole = torch.cat([part, t, t], dim=1)
    batch = part.unsqueeze(0)
    clamped = batch.clamp_min(0.1)
    return torch.stack([batch], -5), clamped, whole, clamped.softmax(0)


@pytest.mark.parametrize("fn,integers,grad", [
    (fn, False, grad) for fn in (_a_stack_of_a_part_of_a_concatenation, _views_of_a_returned_value, _views_of_an_input_through_views, _two_views_of_one_value,
                                 _two_views_of_a_transposed_value,
                                 _one_of_split_returned, _a_view_returned_of_a_view_inside,
                                 _views_taken_again_after_an_update, _a_reduction_over_nothing, _an_expanded_reduction,
                                 _a_detached_tensor_updated, _a_diagonal_of_a_returned_slice_updated,
                                 _an_unfold_of_a_slice_of_a_returned_value, _an_update_through_a_detach_of_a_returned_value,
                                 _views_of_a_value_an_inplace_method_updated)
    for grad in (False, True)] + [(_a_view_of_a_copy, True, False),
                                  (_views_after_an_update_shaped_as_a_value_of_another_region, False, False)],
    ids=lambda v: getattr(v, "__name__", str(v)))
def test_outputs_share_memory_as_in_eager(fn, integers, grad):
    """The tensors a fused program returns share memory with each other and with its inputs exactly as eager's do:
    a later in-place update of one shows in the others, or not (found by generated programs)."""
    x = torch.randint(-4, 5, (3, 4)) if integers else torch.randn(3, 4, requires_grad=grad)
    jf = thunder.jit(fn, executors=FUSED)
    expected, actual = fn(x), jf(x)

    def sharing(outs):
        tensors = [*outs, x]
        ptrs = [t.untyped_storage().data_ptr() for t in tensors]
        return [[a == b for b in ptrs] for a in ptrs]

    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
        assert a.stride() == e.stride() and a.requires_grad == e.requires_grad
    assert sharing(actual) == sharing(expected)
    assert _fused_ops(thunder.last_traces(jf)[-1])


@requires_compiler
@pytest.mark.parametrize("fn", [lambda x: x.log_softmax(1), lambda x: F.softmax(x, -2),
                                lambda x: x.softmax(1, dtype=torch.float64)], ids=["log_softmax", "softmax", "to_float64"])
@pytest.mark.parametrize("executors", [None, FUSED], ids=["unfused", "fused"])
def test_softmax_along_a_dimension_without_elements(fn, executors):
    """Eager's softmax along an empty dimension is an empty tensor; the decomposition's maximum had no element to take
    and raised where a region ran it (generated program nn 2747)."""
    x = torch.randn(4, 0, 3, requires_grad=True)
    out, expected = thunder.jit(fn, executors=executors)(x), fn(x)
    assert out.shape == expected.shape and out.dtype == expected.dtype and out.stride() == expected.stride()
    assert torch.autograd.grad(out.sum(), x)[0].shape == x.shape


def _detached_beside(x):
    t = (x * 2).sin()
    return t.detach(), t, t.detach() * 1


@requires_compiler
def test_an_output_returned_detached_beside_itself_keeps_the_others_gradient():
    """The region writes one buffer for ``t`` and ``t.detach()``; the detached output, marked non-differentiable,
    must not be the very tensor of ``t``, whose gradient would stop (found by generated programs)."""
    x = torch.randn(3, 4, requires_grad=True)
    outs = thunder.jit(_detached_beside, executors=FUSED)(x)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in _detached_beside(x)] == [False, True, False]
    (g,) = torch.autograd.grad(outs[1].sum(), x)
    torch.testing.assert_close(g, 2 * (2 * x).cos())


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_a_reduced_precision_group_norm_is_eagers_bit_for_bit(dtype, affine):
    """torch's group norm kernels apply the weight and bias in float32 and round once: so does a region (it rounded
    before them, up to 4 ulps off, bfloat16 -10.5 for eager's -10.4375: torch's OpInfo samples)."""
    torch.manual_seed(0)
    x = torch.randn(4, 8, 5, 5, dtype=dtype) * 3 + 1
    w, b = (torch.randn(8, dtype=dtype) * 4, torch.randn(8, dtype=dtype) * 4) if affine else (None, None)

    def fn(x, w, b):
        return F.group_norm(x, 4, w, b)

    assert torch.equal(thunder.jit(fn, executors=FUSED)(x, w, b), fn(x, w, b))


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_round_trip_through_a_lower_precision_rounds_as_in_eager(dtype):
    """Inside a region, ``x.half().float()`` rounds as eager's two casts do (inductor would drop the rounding: found by
    generated programs)."""
    def fn(x):
        return ((x * 3).to(dtype).float() * 2).sin(), torch.atan2(x.to(dtype), x)

    x = torch.randn(64)
    for out, expected in zip(thunder.jit(fn, executors=FUSED)(x), fn(x)):
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


@requires_compiler
@pytest.mark.parametrize("make", [lambda: torch.arange(-1, 1, 0.07, dtype=torch.float32),
                                  lambda: torch.linspace(-1.3, 2.1, 29), lambda: torch.linspace(-1, 1, 29)],
                         ids=["arange", "linspace", "linspace_with_zero"])
def test_float_ranges_are_eagers_values_bitwise(make):
    """ATen's arange and linspace kernels compute ``start + step * i`` with fused multiply-adds, which their
    decompositions in a region round otherwise (``torch.all`` of a linspace with its zero came out otherwise: found
    by generated programs): a fusion executor runs them whole."""
    def fn(x):
        r = make()
        return r * x[: r.numel()], torch.all(r.view(-1, 1) * x[:3], dim=1)

    x = torch.randn(64)
    jf = thunder.jit(fn, executors=FUSED)
    for out, expected in zip(jf(x), fn(x)):
        assert torch.equal(out, expected)
    assert _fused_ops(thunder.last_traces(jf)[-1])


@requires_compiler
def test_the_variance_of_a_single_nan_is_nan():
    """Inductor gives 0 for the variance over one element whatever it is; eager's NaN (a diverging run's signal) stays:
    such a reduction runs with torch's kernel (found by generated programs)."""
    def fn(x):
        return torch.std_mean(torch.rsqrt(x), -1, unbiased=False)[0], torch.var(x.float().sqrt() * 2, 0, unbiased=False)

    x = torch.tensor([-2])
    for out, expected in zip(thunder.jit(fn, executors=FUSED)(x), fn(x)):
        torch.testing.assert_close(out, expected, equal_nan=True)
        assert out.isnan().all()


def _clone_then_update(x, b):
    y = x.clone()
    x.mul_(b).add_(1).sin_()
    return y


def _clone_of_transposed_then_copy(x, b):
    y = x.t().clone()
    x.copy_(b.exp() + 1)
    return y + 0, y


def _running_average(x, b):  # a buffer's old value kept, then the buffer updated (an EMA, running statistics)
    old = b.clone()
    b.mul_(0.9).add_(x * 0.1)
    return old, b * 1


def _clone_of_detached_then_setitem(x, b):
    y = x.detach().clone()
    x[0] = 5
    return y, x.sum() + b.sum()


def _copying_to_then_update(x, b):  # a shallow_copy in the region, which inductor returns as its input
    y = x.to(torch.float32, copy=True)
    x.mul_(b).add_(1).sin_()
    return y


def _copy_into_new_then_update(x, b):  # empty_like + copy_: a reshape of x in the region, beside a full
    y = torch.empty_like(x)
    y.copy_(x)
    x.mul_(b).add_(1).sin_()
    return y


@requires_compiler
@pytest.mark.parametrize("fn", [_clone_then_update, _clone_of_transposed_then_copy, _running_average,
                                _clone_of_detached_then_setitem, _copying_to_then_update,
                                _copy_into_new_then_update], ids=lambda f: f.__name__)
def test_a_copy_of_memory_written_later_keeps_the_old_values(fn):
    """``clone`` decomposes to a reshape to its own shape, which a region runs as a view: of an input the program
    then updates in place, the region's output would change with it. A region output that may be such an input
    (through views, or identities: ``x.to(copy=True)``, ``empty_like(x).copy_(x)``) is copied where the region
    returns the input's memory (found by generated programs)."""
    x, b = torch.randn(3, 3), torch.randn(3, 3)
    ex, eb, tx, tb = x.clone(), b.clone(), x.clone(), b.clone()
    expected = fn(ex, eb)
    jf = thunder.jit(fn, executors=FUSED)
    torch.testing.assert_close(jf(tx, tb), expected)  # (the updates round as inductor's kernels do)
    torch.testing.assert_close((tx, tb), (ex, eb))
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _clone_of_a_product_returned_beside_it(x):  # clone and mT alone: a region of views run by the torch executor
    t = x @ x.mT
    c = t.clone()
    return t, c, c.mT @ x


def _clone_of_input_returned(x):
    c = x.clone()
    return c, (c * 2).exp()


def _clone_of_a_clone(x):
    c1 = (x * 2).clone()
    c2 = c1.clone()
    return c1, c2, c1.exp()


def _clone_of_a_diagonal(x):  # the view's layout has gaps: eager's clone is dense (found by seed 4003)
    d = (x @ x.mT).diagonal()
    return d.clone(), (d.mT * 2).exp()


def _views_returned(x):  # views stay views
    y = x * 2
    return y, y.view(-1), y.mT


def _memory_pattern(tensors):
    ptrs = [t.untyped_storage().data_ptr() for t in tensors]
    return [[j for j, q in enumerate(ptrs) if q == p] for p in ptrs]


@requires_compiler
@pytest.mark.parametrize("fn", [_clone_of_a_product_returned_beside_it, _clone_of_input_returned, _clone_of_a_clone,
                                _clone_of_a_diagonal, _views_returned], ids=lambda f: f.__name__)
def test_a_clone_never_shares_memory_with_what_it_copies(fn):
    """A region runs ``clone`` as a reshape to its own shape, which its kernels return as their input itself: a clone
    the program sees would be its input (an argument, another output), and updating one would change the other. Such
    outputs are copied where they share memory; views stay views. Which outputs and arguments share memory, the
    values and the strides are eager's."""
    x = torch.randn(2, 4, 4)
    jf = thunder.jit(fn, executors=FUSED)
    out, expected = jf(x), fn(x)
    torch.testing.assert_close(out, expected)
    assert _memory_pattern([*out, x]) == _memory_pattern([*expected, x])
    assert [o.stride() for o in out] == [o.stride() for o in expected]
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _remainders(a, b):
    return (torch.remainder(a, b), torch.remainder(a * 2, -1.5), a.remainder(b).exp(), torch.remainder(a, 1.0).abs(),
            -0.0 % (a > 0), 2.5 % b)


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_remainder_is_eagers_at_infinities_and_zeros(dtype):
    """Inductor's remainder (``a - floor(a / b) * b``) gives NaN by an infinite divisor and +0.0 where eager gives
    -0.0; thunder has it compute eager's (``fmod``, then ``b`` added where the signs differ). Found by generated
    programs (``remainder(t, exp(...))`` where the exponential overflows)."""
    inf = float("inf")
    a = torch.tensor([-3.0, -0.0, 0.0, 3.0, -2.5, 2.5, 1e-8, -1e-8, inf, -inf, 7.0, -4.0])
    b = torch.tensor([inf, inf, -inf, -inf, 2.0, -2.0, 1.0, 1.0, 2.0, inf, 0.0, 2.0])
    if not dtype.is_floating_point:
        a, b = torch.tensor([-3, 4, -7, 0, 5, -6]), torch.tensor([2, -3, 3, 5, 5, -3])
    a, b = a.to(dtype), b.to(dtype)
    jf = thunder.jit(_remainders, executors=FUSED)
    for out, expected in zip(jf(a, b), _remainders(a, b)):
        assert out.dtype == expected.dtype
        assert torch.equal(out.isnan(), expected.isnan())
        numbers = ~expected.isnan()
        assert torch.equal(out[numbers], expected[numbers]), (out, expected)
        if out.is_floating_point():  # zeros' signs too (NaN's sign is no number's)
            assert torch.equal(out[numbers].signbit(), expected[numbers].signbit()), (out, expected)
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _floor_divisions(a, b):
    return ((a // b) + 1, (a.to(torch.int64) * 1) // (b * 1), torch.div(a * 1, b, rounding_mode="floor") - 0,
            torch.div(a * 1, 0.2, rounding_mode="floor") * 1, (a * 1) // 0.2 + 0, (a.to(torch.int64) * 3) // 2 + 0,
            torch.div(a * 1, b, rounding_mode="trunc") * 1)


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_floor_division_is_eagers(dtype):
    """Inductor computes a float ``a // b`` as ``floor(a / b)``, one more than eager where the quotient rounds up to an
    integer (``5.0 // 0.2``: 24 in eager, 0.2 being a little over a fifth); thunder has it compute eager's (from
    ``fmod``), at zeros and infinities too. Found by a generated program (seed 2611: ``t2 // (x / t2)``)."""
    inf = float("inf")
    a = torch.tensor([5.0, -15.0, 5.0, 7.0, -7.0, 1e-30, 1.0, 3.0, 0.0, -0.0, inf, 5.0, -3.0, 1.0, 0.3, -0.7], dtype=dtype)
    b = torch.tensor([0.2, 0.2, -0.2, 0.1, 0.1, 3.0, 0.1, 0.3, 2.0, 2.0, 2.0, inf, 0.0, -inf, 0.1, 0.1], dtype=dtype)
    jf = thunder.jit(_floor_divisions, executors=FUSED)
    for out, expected in zip(jf(a, b), _floor_divisions(a, b)):
        assert out.dtype == expected.dtype
        assert torch.equal(out.nan_to_num(1.5), expected.nan_to_num(1.5)), (out, expected)
        if out.is_floating_point():
            assert torch.equal(out.signbit(), expected.signbit()), (out, expected)
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _convolutions_of_an_updated_input(x, w):
    x.clamp_(-1, 1)
    return (F.conv_transpose1d(x, w, stride=2), F.conv1d(x, w.transpose(0, 1)), F.batch_norm(x * 2, None, None, training=True),
            F.conv1d(F.layer_norm(x, x.shape[-1:]), w.transpose(0, 1)))  # layer norm: contiguous (fused nn 8849)


@requires_compiler
def test_a_region_output_keeps_eagers_strides_in_extents_of_one():
    """A region's output that an unfused kernel reads keeps eager's strides also where its extent is one: they address
    nothing, but a convolution chooses its result's layout from them (a ``(1, 3, 1).mT`` input, strides ``(3, 1, 1)``,
    is channels-last to it: its transposed convolution's result has strides ``(28, 1, 4)``; inductor wrote the
    clamped input ``(3, 3, 1)``, giving ``(28, 7, 1)``). Found by a generated program (nn seed 7322)."""
    x, w = torch.randn(1, 3, 1).mT, torch.linspace(-1, 1, 12).reshape(1, 4, 3)
    x_ = x.clone().mT.contiguous().mT
    jf = thunder.jit(_convolutions_of_an_updated_input, executors=FUSED)
    outs, expected = jf(x_, w), _convolutions_of_an_updated_input(x, w)
    for out, e in zip(outs, expected):
        torch.testing.assert_close(out, e)
        assert out.stride() == e.stride()
    assert torch.equal(x_, x)
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _divisions_of_an_index(x, b):
    i = torch.arange(32, dtype=torch.int64).to(torch.float32)
    fourier = 10000.0 ** (2 * torch.div(i, 2, rounding_mode="floor") / 32)  # timm's EdgeNeXt (positional encoding)
    return (x / fourier, x * (i % 3), x * ((i - 7) % -3), x * (7.0 // (i + 1)), x * torch.remainder(7.0, i - 5),
            x * torch.div(i - 7, -2, rounding_mode="floor"), x * (i // b), x * torch.remainder(i - 9, b))


@requires_compiler
@pytest.mark.parametrize("divisor", [3.0, -2.5])
def test_divisions_of_a_value_computed_from_an_index_compile(divisor):
    """Floor division and remainder of ``arange(n).float()`` (by numbers and by tensors) compile: inductor's analysis of
    index expressions failed on the comparison of signs in thunder's decompositions (``(b < 0) != (mod < 0)``: sympy's
    "A Boolean argument can only be used in Eq and Ne"), and the region ran unfused with a warning (timm's EdgeNeXt)."""
    x, b = torch.randn(2, 32), torch.full((32,), divisor)
    jf = thunder.jit(_divisions_of_an_index, executors=FUSED)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*could not compile")
        outs = jf(x, b)
    for out, expected in zip(outs, _divisions_of_an_index(x, b)):
        assert torch.equal(out.nan_to_num(1.5), expected.nan_to_num(1.5)), (out, expected)
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _reads_conj_imag(x, y):
    return x.conj().imag * 2 + y, (x.mH * 2).real.exp()


def _reads_inputs(x, y):
    return x * 2 + y, (x * y).exp().sum(0)


def _lazy_inputs(kind: str):
    g = torch.Generator().manual_seed(0)
    c = torch.randn(3, 4, dtype=torch.complex64, generator=g)
    y = torch.randn(3, 4, generator=g)
    if kind == "negative-view":  # x.conj().imag: the negation bit
        return c.conj().imag, y
    leaf = torch.randn(3, 4, requires_grad=True)
    zero = torch.autograd.grad(torch.sgn(leaf).sum(), leaf)[0]  # sgn's gradient: a ZeroTensor, without memory
    assert zero._is_zerotensor()
    return zero, y


@requires_compiler
@pytest.mark.parametrize("kind", ["negative-view", "zero-tensor"])
def test_inputs_whose_memory_is_not_their_values(kind):
    """Inputs whose memory does not hold their values (a lazily negated view, a ZeroTensor): a fused region reads them
    resolved, as eager's kernels do (read raw, the signs were wrong, and a ZeroTensor's null pointer crashed the
    process). (Lazily conjugated views are complex, which regions do not take.)"""
    x, y = _lazy_inputs(kind)
    jf = thunder.jit(_reads_inputs, executors=FUSED)
    if kind == "zero-tensor":  # traced for a tensor with memory; then called with the ZeroTensor (a cache hit)
        torch.testing.assert_close(jf(torch.ones_like(x), y), _reads_inputs(torch.ones_like(x), y))
    torch.testing.assert_close(jf(x, y), _reads_inputs(x, y))
    assert _fused_ops(thunder.last_traces(jf)[-1])
    assert x.is_neg() or x._is_zerotensor()  # the caller's tensor left as it was


@requires_compiler
def test_a_clone_of_a_zero_tensor_input():
    """A region that copies its outputs where they share an input's memory looks at no ZeroTensor's memory (it has
    none: reading it raised)."""
    x, y = _lazy_inputs("zero-tensor")
    jf = thunder.jit(_clone_of_input_returned, executors=FUSED)
    jf(torch.ones_like(x))  # traced with a tensor with memory (tracing refuses a ZeroTensor argument)
    torch.testing.assert_close(jf(x), _clone_of_input_returned(x))


@requires_compiler
def test_a_lazily_negated_view_the_program_makes():
    """``x.conj().imag`` (the imaginary part of a lazy conjugation: a lazily negated view) read by a fused region."""
    x, y = torch.randn(4, 3, dtype=torch.complex64), torch.randn(4, 3)
    jf = thunder.jit(_reads_conj_imag, executors=FUSED)
    torch.testing.assert_close(jf(x, y), _reads_conj_imag(x, y))
    assert _fused_ops(thunder.last_traces(jf)[-1])


def _sgn_branch(x, w):  # sgn's gradient flows on through fused work: 2 * it, added to tanh's
    h = x * w
    return (torch.sgn(h * 2 - 1) * 3 + h.tanh()).sum()


@requires_compiler
@pytest.mark.parametrize("downstream_sgn", [False, True], ids=["in-program", "after-the-program"])
def test_zero_tensor_gradients_in_a_fused_backward(downstream_sgn):
    """``sgn``'s gradient (torch's autograd runs it) is a ZeroTensor, as is the cotangent of an output that only
    ``sgn`` reads after the program: a fused backward region reads it as zeros (it crashed the process reading a
    null pointer; found by a generated program, seed 2591)."""
    x, w = torch.randn(5, dtype=torch.float64, requires_grad=True), torch.randn(5, dtype=torch.float64,
                                                                               requires_grad=True)
    fn = (lambda x, w: ((x * w).exp() * 2, (x + w).tanh())) if downstream_sgn else _sgn_branch
    jx, jw = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    jf = thunder.jit(fn, executors=FUSED)
    out, jout = fn(x, w), jf(jx, jw)
    if downstream_sgn:  # the first output's cotangent: sgn's gradient, a ZeroTensor
        out, jout = (torch.sgn(out[0]) + out[1]).sum(), (torch.sgn(jout[0]) + jout[1]).sum()
    out.backward()
    jout.backward()
    torch.testing.assert_close((jout, jx.grad, jw.grad), (out, x.grad, w.grad))
    assert _fused_ops(thunder.last_backward_traces(jf)[-1])


def _lm_loss(h, w, t):
    return F.cross_entropy(h @ w.t(), t)


def _lm_batch():
    torch.manual_seed(0)
    return torch.randn(32, 16, requires_grad=True), torch.randn(512, 16, requires_grad=True), torch.randint(0, 512, (32,))


def _grads_of(loss_fn, h, w, t, **backward_kwargs):
    h.grad = w.grad = None
    loss = loss_fn(h, w, t)
    loss.backward(**backward_kwargs)
    return loss.detach(), h.grad.clone(), w.grad.clone()


def _jitted_lm_loss(name):
    """A fresh executor, the loss jitted with it, a batch and eager's loss and gradients on it."""
    ex = InductorExecutor(name)
    h, w, t = _lm_batch()
    return ex, thunder.jit(_lm_loss, executors=[ex, "torch"]), (h, w, t), _grads_of(_lm_loss, h, w, t)


@requires_compiler
def test_a_loss_gradient_reuses_the_memory_of_the_saved_logits():
    ex, jf, (h, w, t), expected = _jitted_lm_loss("inductor_reuse")
    for _ in range(2):
        torch.testing.assert_close(_grads_of(jf, h, w, t), expected, rtol=1e-5, atol=1e-6)
    received = [c for c in ex._compiled.values() if any(r for _, r in c.donate)]
    assert received, "the backward's loss region may reuse the logits' memory"
    assert all(not c.plain_by_layout for c in ex._compiled.values()), "every call reused the memory"


@requires_compiler
def test_with_retain_graph_saved_values_are_not_reused():
    ex, jf, (h, w, t), expected = _jitted_lm_loss("inductor_retain")
    h.grad = w.grad = None
    loss = jf(h, w, t)
    loss.backward(retain_graph=True)
    first = (h.grad.clone(), w.grad.clone())
    h.grad = w.grad = None
    loss.backward()  # the saved logits must be intact
    torch.testing.assert_close((loss.detach(), *first), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close((h.grad, w.grad), first, rtol=0, atol=0)
    assert any(c.plain_by_layout for c in ex._compiled.values() if any(r for _, r in c.donate))


def _loss_and_logits(h, w, t):
    logits = h @ w.t()
    return F.cross_entropy(logits, t), logits


@requires_compiler
def test_saved_values_the_program_returns_are_not_reused():
    jf = thunder.jit(_loss_and_logits, executors=FUSED)
    h, w, t = _lm_batch()
    loss, logits = jf(h, w, t)
    kept = logits.detach().clone()
    loss.backward()
    torch.testing.assert_close(logits.detach(), kept, rtol=0, atol=0)
    torch.testing.assert_close(logits, h @ w.t())


def _exp_of_product(a, b, m):
    return ((a @ b) - m).exp() * 2  # a @ b: made by the program, dies in the region


@requires_compiler
def test_a_region_reuses_an_input_only_when_nothing_else_can_see_it():
    ex = InductorExecutor("inductor_reuse_checks")
    a, b, m = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 1)
    jf = thunder.jit(_exp_of_product, executors=[ex, "torch"])
    torch.testing.assert_close(jf(a, b, m), _exp_of_product(a, b, m))
    [region] = ex._compiled.values()
    [(at, received)] = region.donate  # the product, made by the program
    assert not received and tuple(region.region.params[at].shape) == (8, 8)

    def as_a_trace_calls(make_input, keep=False):
        product = make_input()  # the trace's variable: with keep, also held elsewhere
        held = {"reference": [product], "view": [product[0]], "detached": [product.detach()]}.get(keep, [])
        before = product.clone()
        (out,) = region.call((product, m) if at == 0 else (m, product))
        torch.testing.assert_close(out, ((before - m).exp() * 2))
        return out.untyped_storage().data_ptr() == product.untyped_storage().data_ptr(), torch.equal(product, before), held

    reused, _, _ = as_a_trace_calls(lambda: a @ b)
    assert reused
    for keep in ("reference", "view", "detached"):  # held elsewhere too, seen through a view, sharing its memory
        reused, intact, _ = as_a_trace_calls(lambda: a @ b, keep=keep)
        assert not reused and intact, keep
    # a view of a tensor nothing else holds (F.linear of a 3-D input returns one): as if alone; not where the base
    # is held too
    reused, _, _ = as_a_trace_calls(lambda: (a @ b).t().t())
    assert reused
    bases = []
    reused, intact, _ = as_a_trace_calls(lambda: (bases.append(a @ b), bases[-1].t().t())[1])
    assert not reused and intact


def _cos_of_product(a, b, m):
    return ((a @ b) + m).cos() * 3  # a @ b: made by the program, dies in the region


@requires_compiler
def test_a_kernel_failing_to_build_under_a_first_call_that_reuses_nothing_falls_back(monkeypatch):
    """A region's first call with an input it may not reuse (held elsewhere) compiles the function that reuses
    nothing, then waits for the kernels of both compilations: where one failed to build (inductor reports it then,
    from its worker processes; a cache file left empty by a killed compilation does it too), the call runs with the
    torch executor, not the compiled function whose kernel never came (fused generated program nn 4647)."""
    from thunder.executors import inductor_compile

    ex = InductorExecutor("inductor_kernel_fails")
    a, b, m = torch.randn(7, 5), torch.randn(5, 7), torch.randn(7, 1)
    jf = thunder.jit(_cos_of_product, executors=[ex, "torch"])
    torch.testing.assert_close(jf(a, b, m), _cos_of_product(a, b, m))
    [region] = ex._compiled.values()
    [(at, _)] = region.donate

    def failing(scope):
        raise RuntimeError("a kernel failed to build")

    monkeypatch.setattr(inductor_compile, "wait_for_kernels", failing)
    fresh = inductor_compile.CompiledRegion(region.region, ex, donate=region.donate)
    product = a @ b
    held = [product]  # another reference: the call may not reuse its memory
    with pytest.warns(UserWarning, match=r"could not compile a fused region \(RuntimeError: a kernel failed to build"):
        (out,) = fresh.call((product, m) if at == 0 else (m, product))
    torch.testing.assert_close(out, _cos_of_product(a, b, m), rtol=0, atol=0)  # the torch executor's kernels
    assert fresh.failed is not None and held[0] is product


def _two_layers(x, w1, w2):
    return F.linear(F.linear(x, w1).sin(), w2).sum()


@requires_compiler
def test_a_linear_layers_input_gradient_is_reused_by_the_region_it_dies_in():
    """A linear layer's input gradient (3-D: a batch of rows) is one product of the rows laid out as the input,
    no view of another tensor: the backward's region for ``sin`` (the gradient times ``cos``) writes into its
    memory on every call, where a view's base would make each call run the compilation that reuses nothing."""
    ex = InductorExecutor("inductor_reuse_linear")
    jf = thunder.jit(_two_layers, executors=[ex, "torch"])
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(2, 4, 8), torch.randn(6, 8, requires_grad=True), torch.randn(5, 6, requires_grad=True)
    for _ in range(2):
        expected = torch.autograd.grad(_two_layers(x, w1, w2), (w1, w2))
        torch.testing.assert_close(torch.autograd.grad(jf(x, w1, w2), (w1, w2)), expected)
    donors = [c for c in ex._compiled.values() if c.donate]
    assert donors, "the backward's region may reuse the input gradient's memory"
    assert all(not c.plain_by_layout for c in ex._compiled.values()), "every call reused the memory"


@requires_compiler
def test_regions_check_their_input_strides_in_place_of_inductors_asserts():
    """Inductor's generated code asserts no sizes and strides (0.3 us an input; thunder's shapes are static):
    thunder checks every input's strides before a call, so an input laid out otherwise, whichever it is, still
    gets a compilation for its layout."""
    sources = []

    class Capturing(InductorExecutor):
        def inductor_compile(self, gm, example_inputs, donated=()):
            compiled = super().inductor_compile(gm, example_inputs, donated)
            sources.append(getattr(compiled, "source_code", None))
            return compiled

    jf = thunder.jit(_sin_of_product_plus, executors=[Capturing("inductor_own_checks"), "torch"])
    y = torch.randn(4, 6)
    layouts = (torch.randn(4, 6), torch.randn(6, 4).t(), torch.randn(4, 12)[:, ::2])
    for x in layouts:
        torch.testing.assert_close(jf(x, y), _sin_of_product_plus(x, y))
        torch.testing.assert_close(jf(y, x), _sin_of_product_plus(y, x))
    assert len(sources) == 5 and all(isinstance(s, str) and "assert_size_stride(" not in s for s in sources)


def _sin_of_product_plus(x, y):
    return ((x * y).sin() + y).sum(0)  # (1-D: laid out alike for any operands, so no program traced again)


def test_cpu_isa_answers_are_what_inductors_probes_find():
    """Where thunder answers inductor's instruction-set probes from ATen's CPU detection and the compiler's version
    (sparing a compiled and loaded test program each), the answers are the probes' own: run here for real, with
    the flags inductor would add."""
    from torch._inductor.cpu_vec_isa import VecAMX, VecAVX512, VecAVX512VNNI

    from thunder.executors import inductor_compile as ic

    if not ic._cpu_isa_settings() or not ic._gcc_at_least(10):
        pytest.skip("thunder leaves inductor's probes to inductor on this machine")
    bf16 = VecAVX512()
    bf16._arch_flags = VecAVX512._arch_flags + " -mavx512bf16"
    amx_fp16 = VecAMX()
    amx_fp16._arch_flags = VecAMX._arch_flags + " -mamx-fp16"
    probes = [(bf16, VecAVX512._avx512_bf16_code, torch.cpu._is_avx512_bf16_supported()),
              (VecAVX512VNNI(), VecAVX512VNNI._avx512_vnni_code, torch.cpu._is_vnni_supported()),
              (VecAMX(), VecAMX._amx_code, True),  # asked wherever the CPU lists amx_tile
              (amx_fp16, VecAMX._amx_fp16_code, torch.cpu._is_amx_fp16_supported())]
    with ic._answered_probes():
        answered = [isa.check_build(code) for isa, code, _ in probes]
    probed = [isa.check_build(code) for isa, code, _ in probes]
    # inductor asks a probe only where ATen reports the extension: compare there
    assert [a for a, (*_, asked) in zip(answered, probes) if asked] == \
        [p for p, (*_, asked) in zip(probed, probes) if asked]
    assert answered[:2] == [asked for *_, asked in probes[:2]]


def test_inductor_picks_the_same_cpu_isa_with_thunders_answers():
    """In a fresh process, inductor's choice of vector instructions (and their compiler flags)
    under thunder's settings and answers is the one its own probes make."""
    code = (
        "import torch, torch._inductor.config as c\n"
        "from torch._inductor.cpu_vec_isa import pick_vec_isa\n"
        "import contextlib, sys\n"
        "ctx = contextlib.ExitStack()\n"
        "if sys.argv[1] == 'thunder':\n"
        "    from thunder.executors import inductor_compile as ic\n"
        "    ctx.enter_context(c.patch(**ic._cpu_isa_settings()))\n"
        "    ctx.enter_context(ic._answered_probes()) if ic._cpu_isa_settings() and ic._gcc_at_least(10) else None\n"
        "with ctx:\n"
        "    isa = pick_vec_isa()\n"
        "    print(repr(str(isa)), repr(isa.build_arch_flags()) if isa else None)\n")
    import subprocess
    import sys

    picks = {how: subprocess.run([sys.executable, "-c", code, how], check=True, capture_output=True,
                                 text=True).stdout.strip() for how in ("inductor", "thunder")}
    assert picks["thunder"] == picks["inductor"], picks


class _DeviceRecorder(OperatorExecutor):
    def __init__(self):
        super().__init__("device_recorder")
        self.calls = []

    def before_tracing(self, device_types):
        self.calls.append(device_types)


@pytest.mark.parametrize("how", ["module", "function"])
def test_executors_hear_of_the_calls_devices_before_tracing(how):
    """``Executor.before_tracing`` is called once per compilation, with the device types of the call's tensors (a
    module's parameters included); cache hits call nothing."""
    recorder = _DeviceRecorder()
    if how == "module":
        jf, args = thunder.jit(nn.Linear(4, 4), executors=[recorder, "torch"]), (torch.randn(2, 4),)
    else:
        jf, args = thunder.jit(lambda x, d: x * d["y"], executors=[recorder, "torch"]), (torch.randn(3), {"y": 2.0})
    jf(*args)
    jf(*args)
    assert recorder.calls == [frozenset({"cpu"})]


@pytest.mark.parametrize("devices, warms", [({"cuda"}, True), ({"cpu", "cuda"}, True), ({"cpu"}, False)])
@pytest.mark.parametrize("device_types", [("cpu", "cuda"), ("cuda",), ("cpu",)])
def test_inductor_starts_its_compile_workers_before_tracing_for_cuda(monkeypatch, devices, warms, device_types):
    """Inductor builds Triton kernels in this process, one at a time, until its pool of workers is ready (seconds
    after it starts): an executor that will compile CUDA regions starts the pool before tracing, as torch.compile
    does; CPU programs, and executors that fuse CPU regions only, leave it alone."""
    import torch._inductor.async_compile as async_compile

    started = []
    monkeypatch.setattr(async_compile, "maybe_warm_pool", lambda: started.append(True))
    InductorExecutor("probe", device_types=device_types).before_tracing(frozenset(devices))
    assert started == ([True] if warms and "cuda" in device_types else [])


def _attention_between_regions(x):
    B, T, C = x.shape  # q, k and v written contiguous by a region, as the benchmark Llama's rotary embedding writes them
    q, k, v = ((x * s).view(B, 4, T, C // 4) for s in (1.5, 2.0, 0.5))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return (o.transpose(1, 2).reshape(B, T, C) * 3.0).sin()


@requires_compiler
@pytest.mark.parametrize("hints", [True, False])
def test_regions_reading_attention_compile_first_for_its_kernels_layouts(monkeypatch, hints):
    """Attention's kernels lay out their output and gradients otherwise than contiguous (the CPU's flash kernel
    writes its gradients as [B, T, H, D] seen as [B, H, T, D]): tracing notes the layouts torch's fake kernels give
    (``layout_hint``), and the regions reading them compile for those layouts at once, instead of for contiguous
    inputs first and again at the first call. Without the hints, the backward's regions compile twice."""
    import thunder.torch.autograd_rule as autograd_rule
    from thunder.executors.inductor_compile import COMPILATIONS
    from thunder.executors.inductorex import wait_for_compilation

    if not hints:
        monkeypatch.setattr(autograd_rule, "_predicted_layouts", lambda *args: None)
    wait_for_compilation()
    before = collections.Counter(COMPILATIONS)
    x = torch.randn(2, 16, 32, requires_grad=True)
    jf = thunder.jit(_attention_between_regions, executors=[InductorExecutor(f"inductor_hints_{hints}"), "torch"])
    xj = x.detach().clone().requires_grad_()
    g = torch.randn(2, 16, 32)
    out = jf(xj)
    out.backward(g)
    expected = _attention_between_regions(x)
    expected.backward(g)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(xj.grad, x.grad)
    compiled = COMPILATIONS - before
    if hints:
        assert compiled["layout"] == 0 and compiled["first"] > 0, compiled
    else:
        assert compiled["layout"] > 0, compiled


def test_layout_predictions_that_fail_give_no_hint():
    from thunder.torch.autograd_rule import _predicted_layouts, _TensorMeta

    def unsupported(a):
        raise NotImplementedError("no fake kernel")

    a = _TensorMeta((2, 3), torch.float32, torch.device("cpu"))
    spec = thunder.core.pytree.tree_flatten(((None,), {}))[1]  # one leaf, as a tensor argument flattens
    assert _predicted_layouts(unsupported, [a], spec, [[0]]) is None
    assert _predicted_layouts(torch.sin, [a], spec, [[0]]) == ([(3, 1)], [(3, 1)])
    assert _predicted_layouts(lambda t: t.t().contiguous(), [a], spec, [[0]]) == ([(2, 1)], [(1, 2)])


def _broadcast_read_by_two_regions(x, w, b):
    bb = b.expand(x.shape)  # joins the first region that reads it, which hands it on to the second: a view of b
    h = torch.sin(x * bb) @ w
    return torch.cos(h * bb)


@requires_compiler
def test_a_region_reading_another_regions_output_compiles_for_its_layout_first():
    """A region's outputs are laid out as its traced graph lays them out (a broadcast it hands on is a view with a zero
    stride): the regions reading them compile for that layout first, not for contiguous inputs and again at the first
    call."""
    from thunder.executors.inductor_compile import COMPILATIONS
    from thunder.executors.inductorex import wait_for_compilation

    wait_for_compilation()
    before = collections.Counter(COMPILATIONS)
    x, w, b = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
    jf = thunder.jit(_broadcast_read_by_two_regions, executors=[InductorExecutor("inductor_out_layouts"), "torch"])
    torch.testing.assert_close(jf(x, w, b), _broadcast_read_by_two_regions(x, w, b))
    compiled = COMPILATIONS - before
    assert compiled == collections.Counter({"first": 2}), compiled
    regions = [bs for bs in thunder.last_traces(jf)[-1].bound_symbols if bs.sym.name.startswith("InductorFusion")]
    assert len(regions) == 2  # the second reads the broadcast the first hands on
    assert {o.name for o in regions[0].flat_outs} & {a.name for a in regions[1].flat_args}


# ---------------------------------------------------------------------------------------------
# Inductor's known faults (thunder/executors/inductor_workarounds.py)
# ---------------------------------------------------------------------------------------------


def _padded_gelu_matmul(x):
    # pytorch/pytorch#196681's program: inductor reduces the matmul (one output column) with a 2-D tiled kernel whose
    # tiled axes have a loop level between them; the output axis (66) has a tail of 2 lanes
    v = (x * 0.5) * (torch.erf(x * 0.7071067811865476) + 1)
    p = F.pad(v.permute(3, 2, 1, 0), (0, 0, 0, 58), value=0.5)
    q = F.pad(v, (0, 0, 0, 0, 0, 58), value=0.5)
    return (torch.matmul(q, p),)


@requires_compiler
@pytest.mark.parametrize("tail_vectorized", [True, False])
def test_a_2d_tiled_reductions_tail_is_stored_masked_or_the_region_is_refused(tail_vectorized):
    """Left alone, inductor stores the reduction's tail at full vector width, past each row (heap corruption, or
    wrong values in the next row). Within thunder's compilations the tail's masked store runs; where the tail kernel
    is the scalar one, the compilation is refused (the region then runs unfused)."""
    import torch._inductor.config as inductor_config
    from torch.fx.experimental.proxy_tensor import make_fx

    from thunder.executors.inductor_compile import _decompositions
    from thunder.executors.inductor_workarounds import _ACTIVE, inductor_workarounds

    x = torch.randn(1, 8, 66, 66).contiguous(memory_format=torch.channels_last)
    gm = make_fx(_padded_gelu_matmul, decomposition_table=_decompositions())(x)
    custom_pass = inductor_config.post_grad_custom_post_pass
    with inductor_config.patch({"cpp.enable_loop_tail_vec": tail_vectorized}):
        with inductor_workarounds():
            if tail_vectorized:
                compiled = InductorExecutor("inductor_tail").inductor_compile(gm, [x])
            else:
                with pytest.raises(Exception, match="pytorch/pytorch#196681"):
                    InductorExecutor("inductor_tail").inductor_compile(gm, [x])
    assert not getattr(_ACTIVE, "on", False) and inductor_config.post_grad_custom_post_pass is custom_pass
    if tail_vectorized:
        for _ in range(3):
            torch.testing.assert_close(compiled([x])[0], _padded_gelu_matmul(x)[0], rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Memory read by strides (as_strided): the layout eager gives the tensor, whatever a region gives it
# ---------------------------------------------------------------------------------------------


def _softmax_of_transposed(s):  # eager writes it contiguous, a region in its input's (transposed) order
    return torch.softmax(s.transpose(0, 1) * 2, -1)


def _as_strided_read(s):
    return _softmax_of_transposed(s).as_strided((3, 4), (1, 3)) * torch.arange(12.0).view(3, 4)


def _as_strided_function(s):
    return torch.as_strided(_softmax_of_transposed(s), (4,), (2,), 1) * 2


def _as_strided_write(s):
    y = _softmax_of_transposed(s) + 0  # (softmax's backward reads its output: not that one)
    y.as_strided((2, 2), (1, 2)).mul_(3)
    return y + 1


def _as_strided_scatter(s):  # writes the elements as_strided reaches in eager's layout of its input
    return torch.as_strided_scatter(_softmax_of_transposed(s), torch.arange(4.0), (4,), (2,), 1) * 2


def _as_strided_scatter_method(s):
    return _softmax_of_transposed(s).as_strided_scatter(torch.arange(6.0).view(2, 3), (2, 3), (1, 3), storage_offset=2)


@requires_compiler
@pytest.mark.parametrize("fn", [_as_strided_read, _as_strided_function, _as_strided_write, _as_strided_scatter,
                                _as_strided_scatter_method], ids=lambda f: f.__name__)
def test_as_strided_of_a_value_a_region_lays_out_otherwise_reads_eagers_layout(fn):
    """``as_strided`` reads memory by strides: its input is laid out as eager lays it out (``prims.in_layout``, a
    copy only where the run-time layout differs), forward and backward. A write through it: the gradient of the tensor
    written is eager's (torch's ``as_strided_scatter`` gets it wrong; thunder's does not), fused or not."""
    s = torch.randn(4, 3, 5)
    expected = _forward_backward(fn, [s])
    jf = thunder.jit(fn, executors=FUSED)
    torch.testing.assert_close(_forward_backward(jf, [s]), expected, rtol=1e-5, atol=1e-5)
    trace = thunder.last_traces(jf)[-1]
    assert _fused_ops(trace) and any(b.sym.name == "in_layout" for b in trace.bound_symbols)
    torch.testing.assert_close(_forward_backward(thunder.jit(fn), [s]), expected, rtol=0, atol=0)


def _as_strided_beyond_its_input(s):
    return _softmax_of_transposed(s)[1:].as_strided((2, 2), (1, 2), 0) + 1


@requires_compiler
def test_as_strided_beyond_its_input_laid_out_otherwise_is_an_error():
    """Reaching memory beyond its input's elements, ``as_strided`` could not read a copy: a run-time layout other than
    eager's is an error, never another tensor's values."""
    s = torch.randn(4, 3, 5)
    assert torch.equal(thunder.jit(_as_strided_beyond_its_input)(s), _as_strided_beyond_its_input(s))  # unfused
    with pytest.raises(RuntimeError, match="as_strided reads memory outside its input"):
        thunder.jit(_as_strided_beyond_its_input, executors=FUSED)(s)


@requires_compiler
def test_a_numbers_power_of_a_tensor_in_a_region():
    """``10000 ** t`` (timm's EdgeNeXt positional encoding): the check whether a region may return a power as its
    input compared the tensor exponent with 1, which thunder's proxies refuse."""
    def f(x):
        d = torch.arange(8, dtype=torch.float32)
        return (x / 10000 ** (2 * (d // 2) / 8)).sin(), x ** 1

    x = torch.randn(3, 8)
    for a, e in zip(thunder.jit(f, executors=FUSED)(x), f(x)):
        torch.testing.assert_close(a, e)


@requires_compiler
@pytest.mark.parametrize("grad", [False, True])
def test_a_value_handed_to_an_unfused_operation_is_written_as_eager_lays_it_out(grad):
    """Generated program 5510 (fused): eager's out-of-place ``masked_fill`` of a transposed tensor is contiguous, and
    the rows a mask selects from it follow its layout; the region wrote it transposed, as its input, so the selected
    rows (and what is computed from them) were laid out otherwise than eager's. A region's output that an operation
    outside regions reads is now written as eager lays it out, in a training forward too."""
    def f(x):
        t = x.masked_fill(x <= 2.0, 2.0)
        rows = t[t.flatten(1).sum(1) > 0]
        return rows[1:] - rows[:-1]

    x = torch.randn(3, 2, 3, requires_grad=grad).mT * 1
    expected, actual = f(x), thunder.jit(f, executors=FUSED)(x)
    torch.testing.assert_close(actual, expected)
    assert actual.stride() == expected.stride()


_AFTER_A_ZERO_GRADIENT = {  # sgn's gradient of a real tensor is a ZeroTensor, which eager's products keep zero
    "pow_of_negative_bases": lambda x: torch.sgn(torch.pow(x, torch.log_softmax(x, -1))),
    "product_with_infinities": lambda x: torch.sgn(x * (1 / (x - x.detach()))),
    "division_by_zero": lambda x: torch.sgn((x * 3).exp() / x.detach().abs().floor()),
}


@requires_compiler
@pytest.mark.parametrize("name", list(_AFTER_A_ZERO_GRADIENT))
def test_a_region_reading_a_zero_tensor_gradient_gives_eagers_zeros(name):
    """A region whose input is a ZeroTensor at run time runs as the torch executor: eager's operations keep a
    ZeroTensor's products zero, where a kernel reading it as zeros gives NaN for 0 * inf (fused generated program
    18397: the gradient of a power of negative bases behind ``sgn``)."""
    fn = _AFTER_A_ZERO_GRADIENT[name]
    x = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    jf = thunder.jit(fn, executors=FUSED)
    for call in range(2):
        grads = []
        for f in (fn, jf):
            leaf = x.clone().requires_grad_()
            out = f(leaf)
            grads.append(torch.autograd.grad(out, leaf, torch.ones_like(out))[0])
        expected, actual = grads
        assert torch.equal(actual.nan_to_num(1.5), expected.nan_to_num(1.5)), (call, expected, actual)
    assert _fused_ops(thunder.last_backward_traces(jf)[-1])


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_a_number_to_the_power_of_a_transposed_integer_tensor_fused(dtype):
    """``5 ** t`` of an integer tensor: inductor runs ATen's ``pow.Scalar`` and reads its result laid out as the meta
    kernel says (as ``t``), where the CPU kernel writes it contiguous. With ``t`` transposed the region's values came
    out transposed (fused generated program 21320, called with its input laid out otherwise): such a power now runs
    with torch's kernel, outside the region."""
    def fn(x):
        return (5 ** x) * 1 + x

    x = torch.randint(-3, 4, (2, 3, 4), generator=torch.Generator().manual_seed(0)).to(dtype).mT
    expected, actual = fn(x), thunder.jit(fn, executors=FUSED)(x)
    assert torch.equal(actual, expected) and actual.stride() == expected.stride()


_EMPTY_REDUCTIONS = {
    "sum": lambda t: t.sum(), "mean": lambda t: t.mean(), "mean over dim": lambda t: t.mean(1),
    "prod": lambda t: t.prod(), "var": lambda t: t.var(), "std": lambda t: t.std(1),
    "var_mean": lambda t: torch.var_mean(t), "var_mean over dim": lambda t: torch.var_mean(t, 1, correction=0),
    "std_mean": lambda t: torch.std_mean(t), "logsumexp": lambda t: torch.logsumexp(t, 1),
    "norm": lambda t: torch.linalg.vector_norm(t, dim=1), "softmax": lambda t: F.softmax(t, 1),
    "log_softmax": lambda t: F.log_softmax(t, 1), "nanmean": lambda t: t.nanmean(), "amax": lambda t: t.amax(0),
    "layer_norm": lambda t: F.layer_norm(t, (0,)), "cumsum": lambda t: t.cumsum(1), "any": lambda t: (t > 0).any(1),
}


@requires_compiler
@pytest.mark.filterwarnings("ignore:var\\(\\)|std\\(\\)|std_mean\\(\\)|var_mean\\(\\):UserWarning")
@pytest.mark.parametrize("case", list(_EMPTY_REDUCTIONS))
def test_fused_reductions_of_no_elements_are_eagers(case):
    """Reductions over an extent of 0 (an empty slice of a computed value) give eager's values: the mean of
    ``var_mean`` is NaN, where inductor's reduction gives 0 (fused generated program nn 14742)."""
    op = _EMPTY_REDUCTIONS[case]
    fn = lambda x: op(x.exp()[:, 2:] * 2)  # noqa: E731
    x = torch.randn(3, 2)
    expected = fn(x)
    actual = thunder.jit(fn, executors=FUSED)(x)
    for e, a in zip(expected if isinstance(expected, tuple) else (expected,), actual if isinstance(actual, tuple)
                    else (actual,)):
        assert e.shape == a.shape and e.dtype == a.dtype
        assert torch.equal(e.nan_to_num(7.5), a.nan_to_num(7.5)), (e, a)


@requires_compiler
@pytest.mark.parametrize("grad", [False, True])
def test_a_copy_the_trace_takes_for_a_view_keeps_eagers_layout_on_a_new_input_layout(grad):
    """``torch.roll`` by a whole extent is the trace's reshape of its input, and eager's result a contiguous copy: a
    region returning it copies it (its memory is the input's), laid out as eager's, also when a call with the input
    transposed traces again (fused relayout nn 15515: the copy followed the transposed input)."""
    def fn(x0):
        t1 = torch.roll(x0, -2, -4)
        F.tanhshrink(x0)
        t1.floor_divide(5)
        return t1.long(), t1

    jfn = thunder.jit(fn, executors=FUSED)
    x = torch.randn(2, 2, 3, 4).requires_grad_(grad)
    jfn(x)
    y = torch.randn(2, 2, 4, 3).mT.detach().requires_grad_(grad)
    for out, expected in zip(jfn(y), fn(y)):
        assert out.stride() == expected.stride()
        assert torch.equal(out, expected)


def _reduced_precision_program(a, z, i):
    """Ops of a float16 or bfloat16 tensor ``a`` with Python numbers, a 0-dim float32 tensor ``z`` and an integer
    tensor ``i``, and activations torch computes in one kernel (not ``gelu``'s exact form: inductor's ``erf`` is not
    ATen's)."""
    return (a + 0.3, 0.3 - a, a * 0.3, a / 0.3, a + z, z + a, a * z, z * a, a / z, z / a, a + i, a + 257,
            torch.floor_divide(z, a), torch.eq(a, z), torch.lt(z, a), torch.atan2(a, z), torch.remainder(z, a),
            a.abs() ** 0.3, a ** 3, a ** -2, a.abs() ** z, torch.add(a, a.flip(0), alpha=0.7),
            torch.sub(z, a, alpha=0.3),
            torch.addcmul(a, a, a.flip(0), value=0.3), torch.addcdiv(a, a, a.flip(0), value=0.3),
            torch.lerp(a, a * 2, z), torch.nextafter(a, z), F.silu(a), F.gelu(a, approximate="tanh"),
            F.softplus(a), F.mish(a), F.elu(a), F.selu(a), F.celu(a), F.hardswish(a), F.hardsigmoid(a),
            F.logsigmoid(a), F.cosine_similarity(a, a.flip(0), 1))


@requires_compiler
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_fused_ops_of_reduced_precision_are_eagers_bit_for_bit(dtype):
    """torch's CPU kernels round operands to the common dtype before computing in float32 (but ``mul``'s and
    ``div``'s second operand of one element), read ``alpha`` in it, and compute each activation and ``addcmul`` in
    one kernel, rounding once; thunder's fused regions did each step in float32 with operands unrounded, or rounded
    each step (``floor_divide`` of a 0-dim float32 tensor by its bfloat16 rounding gave 0 where eager gives 1: fused
    generated program nn 17936). See [Note: operands rounded to the common dtype] in thunder/torch/utils.py."""
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(8, 64, generator=g) * 2).to(dtype)
    z, i = torch.tensor(0.3), torch.randint(0, 1000, (8, 64), generator=g, dtype=torch.int32)
    expected = _reduced_precision_program(a, z, i)
    actual = thunder.jit(_reduced_precision_program, executors=FUSED)(a, z, i)
    for k, (x, y) in enumerate(zip(expected, actual)):
        assert x.dtype == y.dtype and torch.equal(x.nan_to_num(7), y.nan_to_num(7)), f"output {k}"


@requires_compiler
def test_fused_sums_of_negative_zeros_are_positive_zeros_as_eagers():
    """ATen's sum starts from +0.0; inductor's code for a short row added its elements to each other, so a row of
    -0.0 summed to -0.0, and ``1 // sum`` gave -inf for eager's inf (fused generated program 26571)."""
    def fn(x, mask):
        t = torch.where(mask, -0.0, x)
        return t.sum(-1, keepdim=True), t.mean(-1), t.sum(), 1 // (t.sum(-1) * 2)

    x, mask = torch.randn(1, 5, 2), torch.rand(4, 3, 5, 2) < 2
    for e, t in zip(fn(x, mask), thunder.jit(fn, executors=FUSED)(x, mask)):
        assert torch.equal(e, t) and torch.equal(e.signbit(), t.signbit())
