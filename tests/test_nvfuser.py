"""The nvFuser executor (thunder/executors/nvfuserex.py), against eager PyTorch.

nvFuser cannot be installed here, so the executor runs with a stub ``nvfuser`` (tests/nvfuser_stub.py:
it records the FusionDefinition the executor builds, checks its calls as nvFuser's bindings do, and computes
them with torch), on CPU tensors (``device_types=("cpu",)``) and, where a GPU is present, on CUDA tensors with
torch's CUDA generator. The last tests run the real nvFuser where it imports and CUDA is available.
"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import thunder
import thunder.extend
from tests import nvfuser_stub
from thunder.executors import nvfuserex
from thunder.executors.nvfuserex import NvFuserExecutor

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvfuser", nvfuser_stub)
    nvfuser_stub.DEFINITIONS.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield nvfuser_stub
    fallbacks = [str(w.message) for w in caught if "nvFuser executor" in str(w.message)]
    assert not fallbacks, f"regions fell back to torch: {fallbacks}"


@pytest.fixture
def nvex(stub):
    return NvFuserExecutor(device_types=("cpu",))


def jit(fn, ex):
    return thunder.jit(fn, executors=[ex, "torch"])


def fused_prims(jfn, backward=False) -> list[str]:
    """The names of the primitives the last trace runs in nvFusion regions."""
    trace = (thunder.last_backward_traces if backward else thunder.last_traces)(jfn)[-1]
    return [p.sym.name for b in trace.bound_symbols if b.sym.name.startswith("nvFusion") for p in b.subsymbols]


def relu_dropout(x, p=0.1):
    """The seed's MLP activation: relu as ``where(x > 0, x, 0)``, then dropout."""
    return F.dropout(torch.where(x > 0.0, x, 0.0), p)


def mlp(x, w1, b1, w2, b2, p=0.1):
    return F.linear(relu_dropout(F.linear(x, w1, b1), p), w2, b2)


def test_seed_trace_format(nvex):
    torch.manual_seed(0)
    args = [torch.randn(8, 16), *(torch.randn(s, requires_grad=True) for s in [(32, 16), (32,), (4, 32), (4,)])]
    jf = jit(mlp, nvex)
    jf(*args)
    text = str(thunder.last_traces(jf)[-1])
    call = re.search(r"^  \[(t\d+, )+t\d+\] = nvFusion0\(t\d+\)  # .*\n((    # .*\n)+)", text, re.M)
    assert call, text
    comments = call.group(2).splitlines()
    assert re.fullmatch(r"    # t\d+ = prims\.gt\(t\d+, 0\.0\)  # t\d+: \"cpu b8\[8, 32\]\"", comments[0])
    assert [re.search(r"prims\.(\w+)", c).group(1) for c in comments] == [
        "gt", "where", "uniform", "lt", "convert_element_type", "mul", "mul"]
    assert "nvFusion1" not in text and text.count("torch.nn.functional.linear(") == 2


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_mask_is_kept_scaled_and_used_by_the_backward(nvex, p):
    x = torch.randn(64, 64, requires_grad=True)
    jf = jit(lambda x: relu_dropout(x, p), nvex)
    out = jf(x)
    assert fused_prims(jf)[:3] == ["gt", "where", "uniform"]
    relu = torch.where(x > 0, x, 0.0).detach()
    kept = out != 0
    torch.testing.assert_close(out[kept], (relu / (1 - p))[kept])
    assert abs((~kept & (relu != 0)).sum().item() / (relu != 0).sum().item() - p) < 0.1
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, kept * (x > 0) / (1 - p))


def test_random_draws_follow_the_seed_and_differ_per_call_and_primitive(nvex):
    jf = jit(lambda x: (torch.rand_like(x), torch.randn_like(x), torch.rand_like(x)), nvex)
    x = torch.empty(32, 32)
    torch.manual_seed(1)
    first, second = jf(x), jf(x)
    torch.manual_seed(1)
    again = jf(x)
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], second[0]) and not torch.equal(first[0], first[2])
    assert 0 <= first[0].min() and first[0].max() < 1 and abs(first[1].mean()) < 0.2
    (fd,) = nvfuser_stub.DEFINITIONS
    scalars = [v for v in fd.inputs if v.kind == "S"]
    assert [v.kind for v in fd.inputs] == ["T"] * (len(fd.inputs) - 6) + ["S"] * 6
    draws = [kw for name, _, kw, _ in fd.records if name in ("uniform", "normal")]
    assert [(kw["rng_seed"], kw["rng_offset"]) for kw in draws] == list(zip(scalars[::2], scalars[1::2]))


def layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def mixed_shapes(x, y):
    z = torch.cat([x, y], 1).permute(1, 0).reshape(-1)[3:40]
    return F.pad(z, (2, 1), value=1.5) * 2, x.sum(0) / 3, x.amax(1), torch.var(y, 1), x.amin()


# name -> (program, inputs, the primitives the first region must hold)
PROGRAMS = {
    "softmax": (lambda x: torch.softmax(x, -1), [(8, 16)], {"amax", "exp", "sum", "div"}),
    "log_softmax": (lambda x: torch.log_softmax(x, 1), [(8, 16)], {"amax", "exp", "log"}),
    "layer_norm": (layer_norm, [(4, 8, 16), (16,), (16,)], {"var_mean", "rsqrt", "mul", "add"}),
    "gelu_silu": (lambda x: F.gelu(x) + F.silu(x) * torch.tanh(x), [(8, 16)], {"erf", "sigmoid", "tanh"}),
    "shapes_reductions": (mixed_shapes, [(4, 6), (4, 5)], {"cat", "transpose", "reshape", "slice_prim", "pad", "var"}),
    "creation": (lambda x: x + torch.arange(16) + torch.ones_like(x) * 0.5, [(8, 16)], {"iota", "full", "add"}),
    "casts_and_comparisons": (lambda x: (x > 0).to(torch.float64) * 3 + torch.maximum(x, x.exp() - 2).double(),
                              [(8, 16)], {"gt", "convert_element_type", "maximum"}),
    "bfloat16": (lambda x: (x.bfloat16() * 2).exp().float(), [(8, 16)], {"convert_element_type", "exp"}),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_programs_equal_eager(nvex, name):
    fn, shapes, expected = PROGRAMS[name]
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    jf = jit(fn, nvex)
    torch.testing.assert_close(jf(*args), fn(*args))
    assert expected <= set(fused_prims(jf))
    torch.testing.assert_close(jf(*args), fn(*args))  # the cached definition
    assert len(nvfuser_stub.DEFINITIONS) == 1 and nvfuser_stub.DEFINITIONS[0].executions == 2


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "gelu_silu"])
def test_gradients_equal_eager(nvex, name):
    fn, shapes, _ = PROGRAMS[name]
    torch.manual_seed(0)
    args = [torch.randn(s, requires_grad=True) for s in shapes]
    expected = torch.autograd.grad(fn(*args), args, torch.ones(shapes[0]))
    jf = jit(fn, nvex)
    torch.testing.assert_close(torch.autograd.grad(jf(*args), args, torch.ones(shapes[0])), expected)
    assert fused_prims(jf)  # the backward runs torch's softmax and layer-norm backward kernels


def test_integer_programs(nvex):
    i = torch.randint(-50, 50, (8, 16))
    fn = lambda i: ((i + 3) * 2 - torch.where(i > 0, i, 7)).abs().amax(0)  # noqa: E731
    jf = jit(fn, nvex)
    assert torch.equal(jf(i), fn(i)) and {"add", "mul", "where", "abs", "amax"} <= set(fused_prims(jf))


@pytest.mark.parametrize("fn, dtype", [
    (lambda i: i // 3 + i % 2, torch.int64),  # C division and remainder on integers: not fused
    (lambda i: torch.bitwise_left_shift(i, 2) + i, torch.int64),  # shifts: not fused
    (lambda x: (x.to(torch.int8) + 1).to(torch.int16) * 2, torch.float32),  # int8, int16: no nvFuser dtype
    (lambda x: torch.flip(x, [0]).cumsum(1) * 2, torch.float32),  # flip, cumsum: no translation
    (lambda x: x @ x.T + 1, torch.float32),  # a matmul is left to torch; one add is not worth a kernel
])
def test_unsupported_operations_are_left_to_torch(nvex, fn, dtype):
    x = (torch.randn(8, 8) * 10).to(dtype)
    jf = jit(fn, nvex)
    torch.testing.assert_close(jf(x), fn(x))
    assert not fused_prims(jf)


def test_a_definition_per_layout(nvex):
    jf = jit(lambda x: (x * 2).exp(), nvex)
    x = torch.randn(6, 4)
    for t in (x, x.T.contiguous().T, x, x[:, :2].contiguous()):
        torch.testing.assert_close(jf(t), (t * 2).exp())
    defs = nvfuser_stub.DEFINITIONS
    assert len(defs) == 3 and [d.executions for d in defs] == [2, 1, 1]
    assert [d.inputs[0].spec[2] for d in defs] == [[1, 0], [0, 1], [1, 0]]  # stride orders


def test_outputs_that_may_be_their_inputs_are_copies(nvex, monkeypatch):
    x = torch.randn(4, 4)
    out = jit(lambda x: (x.T, (x + 1).exp().T), nvex)(x)  # x.T, a view the program sees, runs after the region
    assert out[0]._base is x and len(nvfuser_stub.DEFINITIONS[0].outputs) == 1
    # where the region computes it (here made to), a square transpose keeps the shape: maybe the identity
    import thunder.extend

    monkeypatch.setattr(thunder.extend, "_returned_views_taken_out", lambda members, *_: (members, []))
    nvfuser_stub.DEFINITIONS.clear()
    jf = jit(lambda x: (x.T, (x + 1).exp().T), nvex)
    torch.testing.assert_close(jf(x), (x.T, (x + 1).exp().T))
    (fd,) = nvfuser_stub.DEFINITIONS
    made_by = {id(out): name for name, _, _, outs in fd.records for out in outs}
    assert [made_by[id(o)] for o in fd.outputs] == ["set", "set"]


@cuda
def test_a_region_on_two_devices_runs_with_torch(stub):
    jf = jit(lambda x, y: ((x + 1).exp(), (y * 2).sin()), NvFuserExecutor(device_types=("cpu", "cuda")))
    x, y = torch.randn(4), torch.randn(4, device="cuda")
    out = jf(x, y)
    assert fused_prims(jf) == ["add", "exp", "mul", "sin"] and not stub.DEFINITIONS
    torch.testing.assert_close(out, ((x + 1).exp(), (y * 2).sin()))


def test_a_rejected_region_runs_with_torch_with_a_warning(nvex, monkeypatch):
    def fail(a, device):
        raise RuntimeError("nvFuser: no scheduler accepted this fusion")

    monkeypatch.setitem(nvfuser_stub.OPS, "exp", (*nvfuser_stub.OPS["exp"][:3], fail))
    jf = jit(lambda x: (x * 2).exp() + 1, nvex)
    x = torch.randn(4, 4)
    with pytest.warns(UserWarning, match="nvFuser executor could not run a fused region of 3 primitives.*no scheduler"):
        torch.testing.assert_close(jf(x), (x * 2).exp() + 1)
    torch.testing.assert_close(jf(x), (x * 2).exp() + 1)
    assert [d.executions for d in nvfuser_stub.DEFINITIONS] == [0]


def test_not_registered_without_nvfuser_and_jit_works():
    code = """if True:
        import sys, torch
        sys.modules["nvfuser"] = None  # `import nvfuser` raises ImportError
        torch.cuda.is_available = lambda: True  # so that thunder tries it
        import thunder, thunder.extend
        assert "nvfuser" not in [ex.name for ex in thunder.extend.get_all_executors()]
        x = torch.randn(5)
        assert torch.equal(thunder.jit(lambda x: torch.softmax(x, 0) * 2)(x), torch.softmax(x, 0) * 2)
    """
    subprocess.run([sys.executable, "-c", code], check=True, cwd=pathlib.Path(__file__).parents[1])
    if not nvfuserex.nvfuser_available():  # here too, and thunder did not import it
        assert "nvfuser" not in [ex.name for ex in thunder.extend.get_all_executors()]
        assert "nvfuser" not in sys.modules


def test_registered_first_where_nvfuser_imports_and_cuda_is_available(monkeypatch):
    monkeypatch.setattr(thunder.extend, "_EXECUTORS", dict(thunder.extend._EXECUTORS))
    monkeypatch.setattr(thunder.extend, "_DEFAULT_EXECUTORS", list(thunder.extend._DEFAULT_EXECUTORS))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "nvfuser", nvfuser_stub)
    assert not nvfuserex.register_if_available()  # no CUDA: nvfuser is not even imported
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "nvfuser", None)  # an import of nvfuser raises ImportError
    assert not nvfuserex.register_if_available()
    assert "nvfuser" not in [ex.name for ex in thunder.extend.get_all_executors()]
    monkeypatch.setitem(sys.modules, "nvfuser", nvfuser_stub)
    before = thunder.extend.get_default_executors()
    assert nvfuserex.register_if_available()
    assert thunder.extend.get_default_executors() == (nvfuserex.ex, *before)  # ahead of torch
    assert thunder.extend.get_executor("nvfuser") is nvfuserex.ex


@cuda
def test_cuda_regions_draw_from_torchs_cuda_generator(stub):
    ex = NvFuserExecutor()
    jf = jit(lambda x: relu_dropout(x, 0.5) + torch.randn_like(x), ex)
    x = torch.randn(64, 64, device="cuda")
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    torch.cuda.manual_seed(7)
    out = jf(x)
    assert gen.get_offset() == 8  # four 32-bit draws reserved per random primitive
    (fd,) = stub.DEFINITIONS
    assert fd.executions == 1 and out.device == x.device
    torch.cuda.manual_seed(7)
    assert torch.equal(jf(x), out)
    assert not torch.equal(jf(x), out)
    assert nvfuserex.rng_seed_and_offset(x.device) == [7, 4]  # offset 16 of torch is nvFuser's 4


@cuda
def test_cuda_mlp_trains_like_eager_without_dropout(stub):
    torch.manual_seed(0)
    args = [torch.randn(s, device="cuda", requires_grad=i > 0) for i, s in
            enumerate([(8, 16), (32, 16), (32,), (4, 32), (4,)])]
    jf = jit(lambda *a: mlp(*a, p=0.0), NvFuserExecutor())
    out = jf(*args)
    torch.testing.assert_close(out, mlp(*args, p=0.0))
    grads = torch.autograd.grad(out.sum(), args[1:])
    torch.testing.assert_close(grads, torch.autograd.grad(mlp(*args, p=0.0).sum(), args[1:]))
    assert fused_prims(jf) and fused_prims(jf, backward=True)


real_nvfuser = pytest.mark.skipif(not nvfuserex.nvfuser_available(), reason="needs nvfuser and a CUDA device")


@real_nvfuser
def test_real_nvfuser_mlp_with_dropout():
    torch.manual_seed(0)
    args = [torch.randn(s, device="cuda", requires_grad=i > 0) for i, s in
            enumerate([(8, 784), (784, 784), (784,), (10, 784), (10,)])]
    jf = thunder.jit(mlp)  # the default executors: nvfuser first
    out = jf(*args)
    assert re.search(r"\[(t\d+, )+t\d+\] = nvFusion0\(t\d+\)", str(thunder.last_traces(jf)[-1]))
    assert out.shape == (8, 10) and torch.isfinite(out).all()
    jf0 = thunder.jit(lambda *a: mlp(*a, p=0.0))
    torch.testing.assert_close(jf0(*args), mlp(*args, p=0.0))
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    jd = thunder.jit(lambda x: relu_dropout(x, 0.5))
    y = jd(x)
    y.backward(torch.ones_like(y))
    kept = y != 0
    torch.testing.assert_close(x.grad, kept * (x > 0) / 0.5)
