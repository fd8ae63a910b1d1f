"""Generated programs (tests/program_generator.py) run under thunder.jit must match eager PyTorch bitwise.

Each seed is one program over 1-3 inputs (contiguous, transposed, sliced or expanded; float32/float64/int64/bool)
built from elementwise ops, reductions, matmuls, views, in-place updates of intermediates, of views of them and
(in forward-only programs) of inputs, casts, indexing, gather/scatter, shape-dependent control flow, and selections
by data-dependent masks (run-time extents) that are then sliced and differenced; with ``nn=True``, neural-network
ops too (convolutions, pooling, normalizations, resampling, attention, losses, embeddings). The runner
compares outputs (values, dtype, shape, strides, requires_grad), updated inputs, gradients of sum(out * cotangent)
a second call with fresh inputs (the cache-hit path) and a third with the inputs laid out otherwise (transposed,
sliced or contiguous: ``program_generator.relaid``). A WRONG result or a CRASH (an internal error where eager
works) fails; a clear refusal (NotImplementedError and the like) is allowed.

Seeds that fail today because of thunder bugs are listed in KNOWN_FAILURES (strict xfail: fixing the bug makes the
test fail until the seed is removed from the list). A failing seed's standalone repro is printed by
``python -c "import sys; sys.path.insert(0, 'tests'); import program_generator as pg; print(pg.generate(SEED).repro())"``
and ``scripts/fuzz_programs.py`` runs many more seeds.
"""
from __future__ import annotations

import pytest
import torch

import program_generator as pg
from parity import regions_compile

N_SEEDS = 600

KNOWN_FAILURES: dict[int, str] = {}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize(
    "seed",
    [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[s])) if s in KNOWN_FAILURES else s
     for s in range(N_SEEDS)],
)
def test_generated_program_matches_eager(seed):
    prog = pg.generate(seed)
    if prog is None:
        pytest.skip("no program eager runs for this seed")
    res = pg.run_program(prog, relayout=True)
    assert res.kind not in ("WRONG", "CRASH"), f"{res.kind}: {res.detail}\n\nrepro:\n{prog.repro()}"


N_NN_SEEDS = 200


@pytest.mark.parametrize("seed", range(N_NN_SEEDS))
def test_generated_program_with_neural_network_ops_matches_eager(seed):
    """``generate(seed, nn=True)``: convolutions, pooling, normalizations (batch norm's running statistics updated in
    place), resampling, attention and losses join the rules above."""
    prog = pg.generate(seed, nn=True)
    if prog is None:
        pytest.skip("no program eager runs for this seed")
    res = pg.run_program(prog, relayout=True)
    assert res.kind not in ("WRONG", "CRASH"), f"{res.kind}: {res.detail}\n\nrepro:\n{prog.repro()}"


def test_comparison_detects_a_wrong_result():
    """The runner's comparison is not vacuous: spoiling one element of thunder's output is reported as WRONG."""
    for seed in range(20):
        prog = pg.generate(seed)
        if prog is None or seed in KNOWN_FAILURES or prog.grad:
            continue
        if pg.run_program(prog).kind != "OK":
            continue
        assert pg.run_program(prog, perturb=True).kind == "WRONG"
        return
    pytest.fail("no program to perturb")


def test_the_call_with_other_layouts_is_compared_too():
    """``relayout=True``: a third call passes every input laid out otherwise, and its results are compared: spoiling
    one element of that call's output is reported as WRONG."""
    for seed in range(20):
        prog = pg.generate(seed)
        if prog is None or prog.grad or (other := pg.relaid(prog)) is None:
            continue
        assert [s.layout for s in other.inputs] != [s.layout for s in prog.inputs]
        try:  # (eager may refuse the other layouts: a view of a transposed input; then there is no third call)
            pg._run(other, other.load(), 2)
        except RuntimeError:
            continue
        if pg.run_program(prog, relayout=True).kind != "OK":
            continue
        assert pg.run_program(prog, perturb=3, relayout=True).kind == "WRONG"
        return
    pytest.fail("no program to perturb")


def test_float64_referee_admits_rounding_only():
    """The float64 referee of fused runs: values as close to float64's as eager's pass, a spoiled value does not."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, generator=g, dtype=torch.float64)
    ref = torch.sin(x) * torch.cos(x)
    eager = torch.sin(x.float()) * torch.cos(x.float())
    other = 0.5 * torch.sin(2 * x.float())  # the same values, rounded otherwise
    assert not torch.equal(other, eager)
    assert pg._rounding_only(eager, eager + eager.abs() * 2e-7, ref)
    assert pg._rounding_only(eager, other, ref)
    spoiled = eager.clone()
    spoiled[5] += 1e-3 * spoiled[5].abs() + 1e-3
    assert not pg._rounding_only(eager, spoiled, ref)
    nan = eager.clone()
    nan[3] = float("nan")
    assert not pg._rounding_only(eager, nan, ref)
    for seed in range(20):
        prog = pg.generate(seed)
        if prog is None or seed in KNOWN_FAILURES or prog.grad or pg.run_program(prog).kind != "OK":
            continue
        assert pg.run_program(prog, perturb=True, referee64=True).kind == "WRONG"
        return
    pytest.fail("no program to perturb")


def test_generator_exercises_aliasing_broadcasting_layouts_and_grads():
    progs = [p for p in (pg.generate(s) for s in range(200)) if p is not None]
    tags = set().union(*(p.tags for p in progs))
    for needed in ("inplace_view", "inplace_view_of_input", "inplace_input", "binary_broadcast_op", "view", "matmul",
                   "reduce_sum", "softmax", "gather", "scatter", "cat", "shape_control_flow", "cast", "where", "select",
                   "advanced_index"):
        assert needed in tags, needed
    nn_tags = set().union(*(p.tags for p in (pg.generate(s, nn=True) for s in range(N_NN_SEEDS)) if p is not None))
    for needed in ("nn_conv", "nn_pool", "nn_norm", "nn_batch_norm", "nn_resample", "nn_classes", "nn_misc"):
        assert needed in nn_tags, needed
    layouts = {spec.layout for p in progs for spec in p.inputs}
    assert layouts == {"contiguous", "transposed", "sliced", "expanded"}
    assert sum(p.grad for p in progs) > 50


# Run fused by the inductor executor (within float tolerance, or as close to the values in float64 as eager's: its
# kernels round otherwise), the seeds whose fused runs found bugs, as regressions tests; those still failing go in
# _FUSED_KNOWN_FAILURES as strict xfails: differences from eager's artifacts, documented in the README.
_FUSED_SEEDS = ([(False, s) for s in (1, 53, 54, 141, 165, 175, 190, 228, 253, 258, 500, 644, 780, 960, 1196, 1856,
                                      1981, 2090, 2591, 2611, 2948, 4003, 31839, 32936)]
                + [(True, s) for s in (5, 39, 100, 184, 274, 276, 278, 320, 805, 977, 981, 1854, 1944, 1955, 2747, 14742,
                                     20709)])
# Fused runs with a third call of inputs laid out otherwise (``relayout``) that found bugs: TensorIterator's strides of
# extents of one, which meta kernels keep where the CPU kernels give standard ones (kernel_layouts._tensor_iterator_layout); an
# as_strided of a broadcast, which inductor reads from a copy of its own (21588); a 1-D view of a fused value (31202); a
# stack of a part of a concatenation, which inductor returned as a view of the concatenation's memory (34521); a
# concatenation of one column, which inductor returned as the column itself, a strided view (4853).
_FUSED_RELAYOUT_SEEDS = [(True, 13839), (True, 14325), (False, 21588), (False, 31202), (False, 34521), (False, 4853)]
_FUSED_KNOWN_FAILURES: dict = {
    (True, 2026): "std_mean's mean over infinities: inf fused (as torch.compile), NaN in eager (Welford's update)",
}


@pytest.mark.parametrize(
    "nn,seed,relayout",
    [(nn, s, False) for nn, s in _FUSED_SEEDS] + [(nn, s, True) for nn, s in _FUSED_RELAYOUT_SEEDS]
    + [pytest.param(*k, False, marks=pytest.mark.xfail(strict=True, reason=r)) for k, r in _FUSED_KNOWN_FAILURES.items()],
)
def test_generated_program_fused_by_inductor_matches_eager(monkeypatch, nn, seed, relayout):
    import functools
    import shutil

    import thunder

    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("inductor needs a C++ compiler")
    monkeypatch.setattr(thunder, "jit", functools.partial(thunder.jit, executors=["inductor", "torch"]))
    monkeypatch.setattr(pg, "_same_values", pg.close_values)
    prog = pg.generate(seed, nn=nn)
    with regions_compile():
        res = pg.run_program(prog, referee64=True, relayout=relayout)
    assert res.kind in ("OK", "REFUSED"), f"{res.kind}: {res.detail}\n\nrepro:\n{prog.repro()}"

