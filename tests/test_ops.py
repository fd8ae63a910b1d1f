"""Every operation of the torch language against eager PyTorch, table-driven by ``tests/opinfos.py``.

Two checks per (op, dtype):

* ``test_op``: every torch spelling of the op (function, Tensor method, operator, in-place method)
  under ``thunder.jit`` against the same call in eager. The torch executor runs torch's own kernels,
  so results must match bitwise; where eager raises, thunder must raise too.
* ``test_decomposition``: the trace's torch-language symbols replaced by their decompositions and
  run as prims only (with the torch executor's prim implementations). Thunder must be right when
  an op runs as its prims (fusion executors, autodiff), so this must match eager within tolerance,
  and every value computed must have the shape and dtype its proxy claims.
"""
from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map

import thunder
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.executors import torchex
from thunder.torch import INPLACE_TO_SYMBOL, SYMBOLS, TORCH_TO_SYMBOL
from thunder.torch.fallback import describe
from tests.metadata_check import CheckMetadata
from tests.opinfos import OPINFOS, SKIPPED, Compare, OpInfo, SampleInput

# Tensor.T of a tensor that is not 2-D is deprecated, but still thunder's to match
pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`", "ignore:Tensor.T is deprecated")

# ---------------------------------------------------------------------------------------------
# Spellings: the torch callables that reach a symbol
# ---------------------------------------------------------------------------------------------


def _symbol_name(target):
    return getattr(target, "name", None) or getattr(target, "__name__", None)


def _as_callable(key):
    """A getset descriptor (``Tensor.T``) is called as ``descriptor.__get__(a)``, which is ``a.T``."""
    if type(key).__name__ == "getset_descriptor":
        return lambda a: key.__get__(a)
    return key


def _inplace(method):
    def call(a, *args, **kwargs):
        a = a.clone()
        out = method(a, *args, **kwargs)
        assert out is a, "an in-place method returns its input"
        return a

    call.__name__ = f"inplace({describe(method)})"
    return call


def _label(key) -> str:
    name = getattr(key, "__name__", "")
    if torch._C.TensorBase.__dict__.get(name) is key and torch.Tensor.__dict__.get(name, key) is not key:
        return f"torch._C.TensorBase.{name}"  # the C method under a Python override (Tensor.split)
    return describe(key)


def spellings(info: OpInfo) -> list[tuple[str, object]]:
    out = [(describe(s), s) for s in info.spellings]
    if info.registered_spellings:
        out += [(_label(k), _as_callable(k)) for k, s in TORCH_TO_SYMBOL.items() if _symbol_name(s) == info.name]
        out += [(f"inplace {_label(k)}", _inplace(k)) for k, s in INPLACE_TO_SYMBOL.items() if s.name == info.name]
    labels = [label for label, _ in out]
    assert len(set(labels)) == len(labels), f"two spellings print as one: {labels}"
    return out


def primary_op(info: OpInfo):
    if info.op is not None:
        return info.op
    sym = SYMBOLS[info.name]
    if sym.torch_impl is not None and TORCH_TO_SYMBOL.get(sym.torch_impl) is sym:
        return _as_callable(sym.torch_impl)
    return spellings(info)[0][1]


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def _leaves(x) -> list:
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in _leaves(item)]
    return [x]


def assert_same(actual, expected, *, tol=None, compare=Compare.VALUES, what="", check_type=True):
    """``tol`` None: bitwise (NaN equal to NaN); else {dtype: (rtol, atol)} by the result's dtype (bitwise for others)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"{what}: expected a sequence, got {type(actual)}"
        if check_type and type(expected).__module__ == "torch.return_types":  # values, indices = torch.max(a, 0) keeps its names
            assert type(actual) is type(expected), f"{what}: expected {type(expected)}, got {type(actual)}"
    a, e = _leaves(actual), _leaves(expected)
    assert len(a) == len(e), f"{what}: {len(a)} outputs, eager has {len(e)}"
    for i, (x, y) in enumerate(zip(a, e)):
        where = f"{what} output {i}"
        if not isinstance(y, torch.Tensor):
            assert x == y or (x != x and y != y), f"{where}: {x!r} != {y!r}"
            continue
        assert isinstance(x, torch.Tensor), f"{where}: expected a tensor, got {type(x)}"
        assert x.shape == y.shape and x.dtype == y.dtype, f"{where}: {x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}"
        if compare is Compare.METADATA:
            continue
        rtol, atol = (tol or {}).get(y.dtype, (0, 0))
        if not _close(x, y, rtol, atol):  # assert_close is slow: only for the message
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{where}: {m}")


def _close(x, y, rtol, atol) -> bool:
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        return torch.equal(x, y)
    if rtol == 0 and atol == 0:
        nan = x.isnan()
        signs = x.signbit() if x.dtype.is_floating_point else None  # of zeros too: bit for bit
        return (torch.equal(nan, y.isnan()) and torch.equal(x.masked_fill(nan, 0), y.masked_fill(nan, 0))
                and (signs is None or torch.equal(signs | nan, y.signbit() | nan)))
    return torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True)


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(y) for y in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _seed(seed: int):
    """Seeds the CPU generator (``torch.manual_seed`` also queues CUDA seeding, which costs a stack trace per call)."""
    torch.default_generator.manual_seed(seed)


def _call(fn, sample: SampleInput, seed: int | None):
    args, kwargs = _clone(sample.args), _clone(sample.kwargs)
    if seed is not None:
        _seed(seed)
    return fn(*args, **kwargs)


def _cases():
    cases = []
    for info in OPINFOS:
        for dtype in info.dtypes:
            marks = []
            if info.requires_cuda:
                marks.append(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"))
            cases.append(pytest.param(info, dtype, id=f"{info.name}-{str(dtype).removeprefix('torch.')}", marks=marks))
    return cases


def _samples(info: OpInfo, dtype):
    _seed(0)
    samples = list(info.sample_inputs(dtype))
    assert samples, f"{info.name}: no samples for {dtype}"
    return samples


# ---------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------

_SEED = 1234


@pytest.mark.parametrize("info,dtype", _cases())
def test_op(info: OpInfo, dtype):
    for label, fn, sample in _spelled_samples(info, dtype):
        what = f"{label} on {sample}"
        jfn = thunder.jit(lambda *a, **k: fn(*a, **k), transforms=[CheckMetadata()])  # tensors as their proxies say
        try:
            expected = _call(fn, sample, _SEED)
        except Exception as e:  # thunder must reject what eager rejects
            try:
                _call(jfn, sample, _SEED)
            except Exception:
                continue
            pytest.fail(f"{what}: eager raises {type(e).__name__}({e}), thunder does not")
        actual = _call(jfn, sample, _SEED)
        assert_same(actual, expected, compare=info.compare, what=what)


def _autocast_cases():
    return [c for c in _cases() if c.values[1] in (torch.float32, torch.bfloat16) and not c.values[0].random]


@pytest.mark.parametrize("info,dtype", _autocast_cases())
def test_op_under_cpu_autocast(info: OpInfo, dtype):
    """Under ``torch.autocast("cpu", dtype=torch.bfloat16)``: the casts eager's autocast makes (float32 inputs of the
    listed operations in bfloat16, bfloat16 inputs of float32 ones in float32, for some arguments only: a weighted
    mse_loss computes in Python, a reflect pad runs reflection_pad), and those the torch functions thunder runs as is
    make inside them."""
    op = primary_op(info)
    for sample in _samples(info, dtype):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            try:
                expected = _call(op, sample, _SEED)
            except Exception:  # noqa: BLE001 - test_op checks that thunder rejects what eager rejects
                continue
            jfn = thunder.jit(lambda *a, **k: op(*a, **k), transforms=[CheckMetadata()])
            actual = _call(jfn, sample, _SEED)
        assert_same(actual, expected, compare=info.compare, what=f"{info.name} on {sample} under autocast")


def _spelled_samples(info: OpInfo, dtype):
    """Every sample through the primary spelling, and through one other spelling in turn, so that every
    spelling sees at least one sample without running all samples through all spellings."""
    spelled = spellings(info)
    assert spelled, f"{info.name}: no torch spelling reaches this symbol; give the OpInfo spellings"
    primary = primary_op(info)
    spelled.sort(key=lambda item: item[1] is not primary)  # stable: the primary first
    (label, fn), others = spelled[0], spelled[1:]
    samples = _samples(info, dtype)
    for i in range(max(len(samples), len(others))):
        sample = samples[i % len(samples)]
        if i < len(samples):
            yield label, fn, sample
        if others:
            yield (*others[i % len(others)], sample)


@pytest.mark.parametrize("info,dtype", _cases())
def test_decomposition(info: OpInfo, dtype):
    op = primary_op(info)
    for sample in _samples(info, dtype):
        what = f"{info.name} on {sample}"
        try:
            expected = _call(op, sample, _SEED)
        except Exception:
            continue  # test_op checks that thunder rejects it too
        trace, flat = trace_of(op, sample)
        names = {b.sym.name for b in trace.bound_symbols}
        assert info.name in names or len(trace.bound_symbols) == 1, f"{what}: {info.name} was not recorded:\n{trace}"
        _seed(_SEED)
        actual = run_as_prims(trace, flat)
        compare = Compare.METADATA if info.random else info.compare
        tol = {**_DEFAULT_TOL, **info.decomp_tol}
        # the trace returns the output's leaves: the jitted function rebuilds containers such as torch.return_types
        assert_same(actual, expected, tol=tol, compare=compare, what=f"decomposition of {what}", check_type=False)


# bfloat16: a decomposition rounds where the fused kernel does not (and vice versa), which near a cancellation
# (log_softmax of the largest logit, a loss near 0) is off by an ulp of the inputs, not of the result
_DEFAULT_TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.bfloat16: (1.6e-2, 1e-2)}

# ---------------------------------------------------------------------------------------------
# Running a trace as prims only
# ---------------------------------------------------------------------------------------------


def _flatten_tensors(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
        return lambda it: next(it)
    if isinstance(x, (list, tuple)):
        builds = [_flatten_tensors(y, out) for y in x]
        return lambda it: type(x)(b(it) for b in builds)
    if isinstance(x, dict):
        builds = {k: _flatten_tensors(v, out) for k, v in x.items()}
        return lambda it: {k: b(it) for k, b in builds.items()}
    return lambda it: x


def trace_of(op, sample: SampleInput):
    """The un-transformed trace of ``op`` on ``sample``, whose parameters are the sample's tensors in order."""
    flat = []
    build = _flatten_tensors((_clone(sample.args), _clone(sample.kwargs)), flat)

    def fn(*tensors):
        args, kwargs = build(iter(tensors))
        return op(*args, **kwargs)

    jfn = thunder.jit(fn)
    _seed(_SEED)
    jfn(*_clone(flat))  # on copies: the trace may update its inputs in place (batch norm's running statistics)
    trace = thunder.last_traces(jfn)[0]
    assert [p.name for p in trace.params] == [f"tensors_{i}" for i in range(len(flat))], trace.params
    return trace, flat


def _read(env, x):
    if isinstance(x, (TensorProxy, NumberProxy)):
        if x.name not in env:
            raise AssertionError(f"{x.name} is read before it is defined")
        return env[x.name]
    if isinstance(x, (list, tuple)):
        items = [_read(env, y) for y in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        return {k: _read(env, v) for k, v in x.items()}
    if isinstance(x, slice):
        return slice(_read(env, x.start), _read(env, x.stop), _read(env, x.step))
    return x


def _write(env, proxy, value, bsym):
    if isinstance(proxy, TensorProxy):
        assert isinstance(value, torch.Tensor), f"{bsym.sym.id} produced {type(value)} for {proxy.name}"
        assert tuple(value.shape) == tuple(proxy.shape) and value.dtype == proxy.dtype, (
            f"{bsym.sym.id}: {proxy.name} is {proxy.dtype}{list(proxy.shape)} in the trace, but the "
            f"computed value is {value.dtype}{list(value.shape)}\n{bsym}")
        env[proxy.name] = value
    elif isinstance(proxy, NumberProxy):
        env[proxy.name] = value
    elif isinstance(proxy, (list, tuple)):
        assert isinstance(value, (list, tuple)) and len(value) == len(proxy), f"{bsym.sym.id}: output structure differs"
        for p, v in zip(proxy, value):
            _write(env, p, v, bsym)


def _run_bsym(env, bsym):
    sym = bsym.sym
    if getattr(sym, "is_fallback", False):
        impl = sym.torch_impl  # an op thunder has no definition for is its own decomposition
    elif sym.is_prim and sym.module == "prims":
        impl = torchex.ex.implmap[sym.id].op.impl
    elif sym.is_prim:
        raise AssertionError(f"unexpected executor symbol {sym.id} in an un-transformed trace")
    else:
        if not bsym.subsymbols:
            undefined = [p.name for p in bsym.flat_outs if p.name not in env]
            assert not undefined, f"{sym.id} has no decomposition, yet defines {undefined}:\n{bsym}"
        for sub in bsym.subsymbols:
            _run_bsym(env, sub)
        for p in bsym.flat_outs:
            _write(env, p, _read(env, p), bsym)  # checks the composite's outputs exist and match their metadata
        return
    value = impl(*_read(env, bsym.args), **_read(env, bsym.kwargs))
    _write(env, bsym.output, value, bsym)


def run_as_prims(trace, inputs):
    env = {p.name: v for p, v in zip(trace.params, inputs)}
    for bsym in trace.bound_symbols:
        if bsym.sym.id == "python.python_return":
            return _read(env, bsym.args[0])
        _run_bsym(env, bsym)
    raise AssertionError("the trace has no return")


# ---------------------------------------------------------------------------------------------
# Coverage, the generic fallback, and operations that cannot be traced
# ---------------------------------------------------------------------------------------------


def _grad_rule_kernels() -> set:
    """Backward kernels the gradient rules define as symbols: no torch spelling reaches them (see SKIPPED)."""
    return {name for name, sym in SYMBOLS.items() if getattr(sym.fn, "__module__", "") == "thunder.torch.grad_rules"}


def test_every_symbol_has_an_opinfo():
    covered = {info.name for info in OPINFOS}
    assert len(covered) == len(OPINFOS), "two OpInfos for one symbol"
    missing = sorted(set(SYMBOLS) - covered - set(SKIPPED) - _grad_rule_kernels())
    assert not missing, f"symbols with neither an OpInfo nor a reason to skip: {missing}"
    stale = sorted((covered | set(SKIPPED)) - set(SYMBOLS))
    assert not stale, f"OpInfos or skips for symbols that do not exist: {stale}"
    assert not covered & set(SKIPPED), f"both tested and skipped: {sorted(covered & set(SKIPPED))}"


_FALLBACK_CASES = {
    "special.erfcx": (lambda a: torch.special.erfcx(a) * 2, (3, 4)),
    "cummax": (lambda a: torch.cummax(a, 1), (3, 4)),
    "cummax-values": (lambda a: torch.cummax(a, 1).values + 1, (3, 4)),
    "max_pool2d": (lambda a: F.max_pool2d(a, 2), (1, 2, 6, 6)),
    "interpolate": (lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), (1, 2, 4, 4)),
    "Tensor.cumprod": (lambda a: a.cumprod(0).sin(), (3, 4)),
}


@pytest.mark.parametrize("name", list(_FALLBACK_CASES))
def test_generic_fallback(name):
    """An op with no ltorch definition is traced with torch's meta kernel and run as itself."""
    fn, shape = _FALLBACK_CASES[name]
    a = torch.randn(shape)
    jfn = thunder.jit(fn)
    assert_same(jfn(a), fn(a), what=name)
    trace = thunder.last_traces(jfn)[0]
    assert any(getattr(b.sym, "is_fallback", False) for b in trace.bound_symbols), str(trace)


@pytest.mark.parametrize("fn,name", [
    (lambda a: torch.nonzero(a), "nonzero"),
    (lambda a: a.nonzero(), "nonzero"),
    (lambda a: a[a > 0], "boolean mask"),
    (lambda a: torch.masked_select(a, a > 0), "masked_select"),
    (lambda a: torch.unique(a), "unique"),
    (lambda a: torch.where(a > 0), "where"),
], ids=["nonzero", "Tensor.nonzero", "bool-mask-index", "masked_select", "unique", "where-1-arg"])
def test_data_dependent_shapes_trace(fn, name):
    """Ops whose output shape depends on tensor values trace with run-time extents (tests/test_dynamic_shapes.py)."""
    a = torch.randn(3, 4)
    assert_same(thunder.jit(fn)(a), fn(a), what=name)


# Found by the generated programs (tests/program_generator.py): eager's results where thunder crashed
_FOUND = {
    "masked_fill_mask_broadcasting_beyond_self": (lambda x, m: x.masked_fill(m, -3.0),
                                                   lambda: (torch.zeros(3, 1), torch.tensor([[True, False]] * 3))),
    "masked_fill_value_tensor": (lambda x, m: x.masked_fill(m, torch.tensor(2.0)),
                                 lambda: (torch.zeros(3, 1), torch.tensor([[True, False]] * 3))),
    "bool_add_with_alpha": (lambda x: (lambda m: (m.add_(m, alpha=2), torch.add(m, m, alpha=0))[1])(x > 0),
                            lambda: (torch.randn(3),)),
    "int_add_with_int_alpha": (lambda x: torch.add(x, x, alpha=3), lambda: (torch.arange(4),)),
}


@pytest.mark.parametrize("other,alpha", [(True, 2), (True, True), (False, 3), (1, 2), (True, 0)])
def test_add_of_a_bool_tensor_and_a_number_scaled_by_alpha_has_eagers_dtype(other, alpha):
    """``torch.add(mask, True, alpha=2)`` is a bool tensor: eager reads alpha as a bool for bool tensors, so the scaled
    number is ``True``; thunder multiplied the Python numbers (``True * True`` is the int 1) and traced an int64
    result (the metadata check of generated program 17635)."""
    def fn(m):
        out = torch.add(m, other, alpha=alpha)
        return out, out.dtype

    m = torch.tensor([True, False])
    (actual, actual_dtype), (expected, expected_dtype) = thunder.jit(fn)(m), fn(m)
    assert actual_dtype == expected_dtype == expected.dtype and torch.equal(actual, expected)


@pytest.mark.parametrize("op", [torch.add, torch.sub], ids=["add", "sub"])
@pytest.mark.parametrize("a_dtype,b_dtype,alpha", [
    (torch.int32, torch.bool, 2), (torch.bfloat16, torch.bool, 2), (torch.bfloat16, torch.int64, 0.5),
    (torch.float64, torch.int32, 0.1), (torch.int64, torch.bool, 3), (torch.float32, torch.bool, 0.25),
], ids=str)
@pytest.mark.parametrize("a_shape,b_shape", [((), ()), ((), (3,)), ((3,), (3,))], ids=str)
def test_alpha_takes_no_part_in_the_promotion_of_add_and_sub(op, a_dtype, b_dtype, alpha, a_shape, b_shape):
    """``torch.add(int32_tensor, bool_tensor, alpha=2)`` is int32: eager casts b to the result's dtype, then scales
    it. Thunder scaled b first (a bool tensor times 2 is int64) and traced an int64 result where torch's kernel
    wrote int32 (the metadata check of generated program nn 136547); a fused region would have computed int64."""
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(a_shape, generator=g) * 100).to(a_dtype)
    b = torch.randn(b_shape, generator=g) > 0 if b_dtype is torch.bool else (torch.randn(b_shape, generator=g) * 100).to(b_dtype)

    def fn(a, b):
        return op(a, b, alpha=alpha)

    jfn = thunder.jit(fn, transforms=[CheckMetadata()])
    if op is torch.sub and b_dtype is torch.bool:  # eager refuses to subtract a bool tensor; so does thunder
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
            fn(a, b)
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
            jfn(a, b)
        return
    expected, actual = fn(a, b), jfn(a, b)
    assert actual.dtype == expected.dtype and torch.equal(actual, expected)


@pytest.mark.parametrize("name", list(_FOUND))
def test_found_by_generated_programs(name):
    fn, make = _FOUND[name]
    inputs = make()
    expected, actual = fn(*[x.clone() for x in inputs]), thunder.jit(fn)(*[x.clone() for x in inputs])
    assert expected.dtype == actual.dtype and expected.stride() == actual.stride() and torch.equal(expected, actual)


@pytest.mark.parametrize("empty_dtype,dtype", [(torch.float32, torch.bfloat16), (torch.float64, torch.float32),
                                               (torch.int64, torch.float16), (torch.float32, torch.int64)], ids=str)
def test_cat_promotes_over_the_empty_tensors_it_skips(empty_dtype, dtype):
    """``torch.cat`` skips 1-D empty tensors (a legacy) for the shape, not for the result's dtype: Hugging Face's
    key-value cache starts as ``torch.tensor([])``, so under autocast it concatenates bfloat16 values to float32."""
    fn = lambda empty, x: (lambda y: (y, y.dtype))(torch.cat([empty, x, empty], -1))  # noqa: E731
    inputs = torch.tensor([], dtype=empty_dtype), torch.randn(2, 3).to(dtype)
    (expected, expected_dtype), (actual, traced_dtype) = fn(*inputs), thunder.jit(fn)(*inputs)
    assert expected.dtype == actual.dtype == expected_dtype == traced_dtype and torch.equal(expected, actual)


@pytest.mark.parametrize("fn,error,match", [
    (lambda x: torch.add(x, x, alpha=1.5), RuntimeError, "For integral input tensors, argument alpha must not be"),
    (lambda x: x[..., ..., :1], NotImplementedError, "at most one Ellipsis"),
])
def test_found_refusals(fn, error, match):
    with pytest.raises(error, match=match):
        thunder.jit(fn)(torch.arange(4))


def _laid_out(x, layout: str):
    """``x`` with the same values laid out ``layout`` ("transposed": its last two dims; "channels_last": a 4-D tensor),
    for floating-point tensors; other arguments as they are. (Integer index tensors stay: eager's advanced indexing
    lays out its result by the index tensors' layouts too, which torch's meta kernel does not follow and thunder does
    not model.)"""
    if isinstance(x, torch.Tensor) and x.dim() >= 2 and not x.is_sparse and x.is_floating_point():
        if layout == "transposed":
            y = x.mT.contiguous().mT
        elif x.dim() == 4:
            y = x.contiguous(memory_format=torch.channels_last)
        else:
            return x
        return y.requires_grad_(x.requires_grad) if x.is_leaf else y
    if isinstance(x, (list, tuple)):
        return type(x)(_laid_out(y, layout) for y in x)
    return x


def _strides(out):
    return [t.stride() if isinstance(t, torch.Tensor) else None for t in _leaves(out)]


# the strides of indexing by a 0-dim tensor (``x[torch.tensor(1)]``: a select where its value says) are not computed
# while tracing: asked, thunder refuses
_LAYOUT_REFUSED = {"getitem": "the strides of t2: running __getitem__ on meta tensors failed"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_attention_on_chunks_of_a_permuted_projection_is_laid_out_as_eager(dtype, training):
    """torch's CPU flash kernel lays its result out as the query (``empty_like``), where the meta kernel's is contiguous:
    chunks of a permuted projection (timm's CPUBone) give heads before positions in memory. A dropout after it draws
    its mask in that memory order, and a batch norm in training lays out its result as its input (a channels-last
    convolution's, in float64 too): thunder once drew other masks than eager there, with the same seed."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 24, 1).to(dtype)
    norm = torch.nn.BatchNorm2d(24).to(dtype).train(training)

    def f(x):
        y = norm(conv(x))  # channels-last, as its input
        q, k, v = y.reshape(2, 2, 12, 4).permute(0, 1, 3, 2).chunk(3, -1)  # heads, positions, channels
        o = F.scaled_dot_product_attention(q, k, v)
        return o.stride(), y.stride(), F.dropout(o, 0.5, training=True), F.dropout(y, 0.5, training=True)

    x = torch.randn(2, 8, 2, 2, dtype=dtype).contiguous(memory_format=torch.channels_last)
    torch.manual_seed(1)
    expected = f(x)
    torch.manual_seed(1)
    actual = thunder.jit(f)(x)
    assert actual[:2] == expected[:2]
    assert torch.equal(actual[2], expected[2]) and torch.equal(actual[3], expected[3])


_WITH_A_0DIM_OPERAND = ["logaddexp", "logaddexp2", "heaviside", "copysign", "floor_divide", "logical_and",
                        "xlogy", "atan2", "add", "hypot", "fmax"]


@pytest.mark.parametrize("first", [True, False], ids=["0dim-first", "0dim-second"])
@pytest.mark.parametrize("name", _WITH_A_0DIM_OPERAND)
def test_the_layout_of_a_binary_op_with_a_0dim_operand_is_eagers(name, first):
    """A binary op of a 0-dim tensor and a transposed one: the CPU kernel lays the result out as the transposed operand
    (TensorIterator), where the meta kernels of logaddexp, logaddexp2 and heaviside, whose 0-dim operand comes first, say
    contiguous. Thunder's layouts decide
    whether a later ``flatten`` views or copies: it viewed where eager copied, and an update of the result reached
    the flattened value (a wrong value, generated program nn 17667 called with its input transposed)."""
    op = getattr(torch, name)

    def fn(a, b):
        t = op(a, b) if first else op(b, a)
        flat = t.flatten()
        t.logical_not_() if t.dtype == torch.bool else t.mul_(2)
        return flat, t.stride()

    a, b = torch.tensor(0.75, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64).abs().t() + 0.5
    (expected, expected_strides), (actual, actual_strides) = fn(a, b), thunder.jit(fn)(a, b)
    assert actual_strides == expected_strides and torch.equal(actual, expected)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no-grad", "grad"])
def test_max_pool1d_of_a_transposed_input_is_laid_out_as_eager_with_and_without_grad(requires_grad):
    """ATen's CPU ``max_pool1d`` writes a contiguous result, unless autograd records it: then it runs
    ``max_pool1d_with_indices``, whose result follows a transposed input. Thunder said contiguous for both, so a
    ``reshape`` of the result was taken for a view where eager's copies, and a ``fill_`` through it reached the result
    (generated program nn 31774, called with its input transposed)."""
    def fn(x):
        y = F.max_pool1d(x, 2, stride=2, padding=1)
        flat = y.reshape(-1)
        flat.fill_(2.0)
        return y, y.stride()

    x = torch.randn(2, 4, 3).mT.detach().requires_grad_(requires_grad)
    (expected, expected_strides), (actual, actual_strides) = fn(x), thunder.jit(fn)(x)
    assert actual_strides == expected_strides and torch.equal(actual, expected)


# shapes with extents of one, and strides for them that address nothing (as a transpose, a slice or an unsqueeze leave
# them): some kernels keep them (``empty_like``), TensorIterator's fast setup replaces them, and the next kernel orders
# its dimensions by them
_UNIT_LAYOUTS = [((4, 3, 1), (3, 1, 3)), ((4, 3, 1), (1, 4, 5)), ((1, 4, 3), (7, 1, 4)), ((2, 1, 3, 1), (3, 9, 1, 2)),
                 ((3, 1), (1, 1)), ((1, 3), (1, 1))]


def _in_unit_layout(x, shape, strides):
    if not isinstance(x, torch.Tensor):
        return x
    y = torch.empty_strided(shape, strides, dtype=x.dtype)
    if x.dtype == torch.bool:
        y.copy_(torch.rand(shape) > 0.5)
    elif x.dtype.is_floating_point:
        y.copy_(torch.rand(shape) * 0.8 + 0.1)  # in every op's domain (logs, inverse sines, probabilities)
    else:
        y.copy_(torch.randint(0, 3, shape))
    return y.requires_grad_(x.requires_grad) if x.dtype.is_floating_point else y


@pytest.mark.parametrize("info", [info for info in OPINFOS if not info.requires_cuda], ids=lambda info: info.name)
def test_op_output_layouts_follow_eager_for_strides_of_extents_of_one(info: OpInfo):
    """As ``test_op_output_layouts_follow_eager``, the samples whose tensors share one shape given instead tensors with
    extents of one laid out oddly (``_UNIT_LAYOUTS``). Where a torch function runs several ATen kernels (``F.softsign``,
    ``isfinite``, a loss), each kernel's result is laid out as the kernel that runs lays it out
    (``kernel_layouts.KernelLayouts``); 29 ops differed before (``hardtanh``, ``nan_to_num``, ``log_softmax``,
    ``mse_loss``, ``logical_and``, ``F.normalize``, ...)."""
    fn = primary_op(info)
    checked = 0
    for sample in _samples(info, info.dtypes[0]):
        tensors = [t for t in _leaves((sample.args, sample.kwargs)) if isinstance(t, torch.Tensor)]
        if not tensors or tensors[0].dim() < 1 or any(t.shape != tensors[0].shape for t in tensors):
            continue
        for shape, strides in _UNIT_LAYOUTS:
            _seed(0)
            relaid = SampleInput(*tree_map(lambda x: _in_unit_layout(x, shape, strides), (sample.args, sample.kwargs)))
            try:
                expected = _strides(_call(fn, relaid, _SEED))
            except Exception:  # noqa: BLE001 - the op rejects this shape: nothing to compare
                continue
            actual = _call(thunder.jit(lambda *a, **k: _strides(fn(*a, **k))), relaid, _SEED)
            assert actual == expected, f"{info.name} on {relaid} laid out {strides}"
            checked += 1
    if checked == 0:
        pytest.skip("no sample whose tensors share one shape that the op accepts with extents of one")


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
@pytest.mark.parametrize("info", [info for info in OPINFOS if not info.requires_cuda], ids=lambda info: info.name)
def test_op_output_layouts_follow_eager(info: OpInfo, layout):
    """The strides thunder computes while tracing (``.stride()``, and whether a later ``reshape`` views or copies and an
    in-place update writes back) are those eager's CPU kernels give, on operands laid out transposed or channels-last.
    They come from torch's meta kernels, except where those lay out otherwise (thunder/driver/kernel_layouts.py)."""
    fn = primary_op(info)
    for sample in _samples(info, info.dtypes[0]):
        sample = SampleInput(_laid_out(sample.args, layout), {k: _laid_out(v, layout) for k, v in sample.kwargs.items()})
        try:
            expected = _strides(_call(fn, sample, _SEED))
        except Exception:  # noqa: BLE001 - eager rejects it: test_op checks that thunder does too
            continue
        jfn = thunder.jit(lambda *a, **k: _strides(fn(*a, **k)))
        if info.name in _LAYOUT_REFUSED:
            try:
                actual = _call(jfn, sample, _SEED)
            except NotImplementedError as e:
                assert _LAYOUT_REFUSED[info.name] in str(e)
                continue
        else:
            actual = _call(jfn, sample, _SEED)
        assert actual == expected, f"{info.name} on {sample}"


def test_the_opinfo_sweeps_comparison_tells_every_kind_of_difference():
    """``scripts/sweep_opinfo.py`` (torch's OpInfo samples against eager; it needs ``expecttest``, so it is not run
    here) reports a result as WRONG by ``difference``: values, dtypes, shapes, layouts, a missing gradient."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "sweep_opinfo.py"
    spec = importlib.util.spec_from_file_location("sweep_opinfo", path)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    x = torch.randn(3, 4)
    nan = torch.tensor([float("nan"), 1.0])
    assert sweep.difference((x, 2), (x.clone(), 2), fused=False) is None
    assert sweep.difference(nan, nan.clone(), fused=False) is None
    assert "values" in sweep.difference(x, x + 1e-6, fused=False)
    assert sweep.difference(x, x + 1e-6, fused=True) is None
    assert "float64" in sweep.difference(x, x.double(), fused=False)
    assert "(4, 3)" in sweep.difference(x, x.t(), fused=False)
    assert "strides" in sweep.difference(x, x.t().contiguous().t(), fused=False)
    assert "thunder 'no gradient'" in sweep.difference([x], ["no gradient"], fused=False)
    assert "results" in sweep.difference((x, x), (x,), fused=False)
    h = torch.randn(3, 4, dtype=torch.bfloat16)
    assert sweep.difference(h, h + 0.004, fused=True) is None and "values" in sweep.difference(h, h + 1, fused=True)
    # an in-place variant returns the input too, with its new value
    op = types.SimpleNamespace(op=torch.add, method_variant=torch.Tensor.add, inplace_variant=torch.Tensor.add_)
    y = torch.zeros(2)
    out, updated = sweep._callable(op, "inplace")(y, 1)
    assert out is y and updated is y and y.eq(1).all()
    assert sweep._callable(op, "method") is torch.Tensor.add
