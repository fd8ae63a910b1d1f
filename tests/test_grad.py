"""Gradients of every differentiable operation of the torch language against torch.autograd.

Table-driven by ``tests/opinfos.py`` (the same records as the forward tests): for each sample in
float64, float32 and bfloat16, every floating-point tensor argument requires grad; thunder's gradients
(a forward and a backward trace behind a torch.autograd.Function) must equal eager autograd's bit for
bit, zeros' signs too, for a random cotangent holding zeros of both signs (the rules compute as eager's
formulas do, in the same dtypes: see [Note: bitwise gradients of elementwise ops]), and every tensor the traces compute must have the
metadata its proxy says. Samples whose outputs are not differentiable in eager are skipped
automatically, as are samples eager cannot differentiate.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false

import thunder
from thunder.core.trace_checker import check_trace
from tests.metadata_check import CheckMetadata
from tests.opinfos import OPINFOS, OpInfo
from tests.test_ops import primary_op

_SEED = 4321


def _grad_cases():
    for info in OPINFOS:
        for dtype in (torch.float64, torch.float32, torch.bfloat16):
            if dtype in info.dtypes and not info.requires_cuda:
                yield pytest.param(info, dtype, id=f"{info.name}-{str(dtype).removeprefix('torch.')}")


def _with_grad(x):
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
        return x.detach().clone().requires_grad_(True)
    if isinstance(x, list):
        return [_with_grad(y) for y in x]
    if isinstance(x, tuple):
        return tuple(_with_grad(y) for y in x)
    return x


def _grad_leaves(x, out):
    if isinstance(x, torch.Tensor) and x.requires_grad:
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _grad_leaves(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _grad_leaves(y, out)
    return out


def _diff_outputs(out):
    leaves = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in leaves if isinstance(o, torch.Tensor) and o.requires_grad]


def _with_signed_zeros(ct):
    """``ct`` with every third element -0.0 and every fifth 0.0: a gradient keeps their signs where eager's does (a
    rule that adds a zero part, or writes 0.0 where eager multiplies by 0, turns -0.0 into 0.0 or the reverse)."""
    flat = ct.reshape(-1)
    flat[::3] = -0.0
    flat[1::5] = 0.0
    return flat.reshape(ct.shape)


def _assert_same_signs(actual, expected, what):
    if actual.is_complex():
        actual, expected = torch.view_as_real(actual), torch.view_as_real(expected)
    if actual.is_floating_point():
        differ = (actual.signbit() != expected.signbit()) & ~actual.isnan() & ~expected.isnan()
        assert not bool(differ.any()), f"{what}: signs of zeros differ at {differ.nonzero().tolist()[:5]}"


def _grads(fn, args, kwargs, cotangent_seed):
    torch.manual_seed(_SEED)
    out = fn(*args, **kwargs)
    outs = _diff_outputs(out)
    inputs = _grad_leaves((args, kwargs), [])
    g = torch.Generator().manual_seed(cotangent_seed)
    cts = [_with_signed_zeros(torch.randn(o.shape, dtype=o.dtype, generator=g)) for o in outs]
    grads = torch.autograd.grad(outs, inputs, cts, allow_unused=True)
    return [torch.zeros_like(i) if gr is None else gr for i, gr in zip(inputs, grads)]


@pytest.mark.parametrize("info,dtype", list(_grad_cases()))
def test_grad(info: OpInfo, dtype):
    op = primary_op(info)
    checked = 0
    for i, sample in enumerate(info.sample_inputs(dtype)):
        args, kwargs = _with_grad(sample.args), _with_grad(sample.kwargs)
        if not _grad_leaves((args, kwargs), []):
            continue
        try:
            torch.manual_seed(_SEED)
            out = op(*args, **kwargs)
            if not _diff_outputs(out):
                continue
            expected = _grads(op, args, kwargs, i)
        except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError):
            continue  # eager cannot differentiate this sample (or rejects it): nothing to compare
        jop = thunder.jit(lambda *a, **k: op(*a, **k), transforms=[CheckMetadata()])  # tensors as their proxies say
        args2, kwargs2 = _with_grad(sample.args), _with_grad(sample.kwargs)
        actual = _grads(jop, args2, kwargs2, i)
        for trace in (thunder.last_traces(jop)[-1], thunder.last_backward_traces(jop)[-1]):
            check_trace(trace)  # decompositions included: fusion executors run those
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e, atol=0, rtol=0, equal_nan=True,
                                       msg=lambda m: f"{info.name} gradient on {sample}: {m}")
            _assert_same_signs(a, e, f"{info.name} gradient on {sample}")
        checked += 1
    if checked == 0:
        pytest.skip(f"{info.name}: no differentiable {dtype} sample")


def _laid_out_otherwise(x, how):
    """``x`` with the same values, each floating-point tensor of two dims or more laid out transposed (``"mT"``) or
    with its dims reversed (``"reversed"``); None: ``x``."""
    if how is None:
        return x
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and x.ndim >= 2:
        dims = list(range(x.ndim))
        order = dims[:-2] + dims[-1:-3:-1] if how == "mT" else dims[::-1]
        return x.detach().permute(*order).contiguous().permute(*order).requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_laid_out_otherwise(y, how) for y in x)
    if isinstance(x, dict):
        return {k: _laid_out_otherwise(v, how) for k, v in x.items()}
    return x


def _memory_order(t):
    return tuple((st, n) for st, n in zip(t.stride(), t.shape) if n != 1) if t.numel() else ()


def _flags_and_grads(fn, args, kwargs, seed, cotangent_layout=None):
    """(the outputs' requires_grad, the inputs' gradients as ``torch.autograd.grad(..., allow_unused=True)`` gives
    them: None where no gradient reaches an input), for cotangents laid out as ``cotangent_layout`` says."""
    torch.manual_seed(_SEED)
    out = fn(*args, **kwargs)
    flags = [o.requires_grad for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
    outs = _diff_outputs(out)
    g = torch.Generator().manual_seed(seed)
    cts = [_laid_out_otherwise(torch.randn(o.shape, dtype=o.dtype, generator=g), cotangent_layout) for o in outs]
    grads = torch.autograd.grad(outs, _grad_leaves((args, kwargs), []), cts, allow_unused=True) if outs else ()
    return flags, grads


@pytest.mark.parametrize("inputs, cotangents", [("mT", None), ("reversed", None), (None, "mT"), (None, "reversed"),
                                                 ("mT", "reversed")])
@pytest.mark.parametrize("info", [info for info in OPINFOS if torch.float32 in info.dtypes and not info.requires_cuda],
                         ids=lambda info: info.name)
def test_gradients_of_tensors_laid_out_otherwise_are_eagers_with_their_layouts_and_flags(info: OpInfo, inputs,
                                                                                           cotangents):
    """For inputs or cotangents laid out otherwise than contiguous: the outputs that require grad, the inputs a
    gradient reaches (eager gives ``nextafter``'s direction zeros, not none), and each gradient's values and memory
    order are eager's (a gradient sum that starts from a part is laid out as it: ``copysign``'s zeros for the sign,
    ``max()``'s share written into contiguous zeros, ``addmm``'s products chosen by its operands' layouts, ``tril``'s
    contiguous triangle, ``narrow``'s of a whole dimension, ``a[mask] = 0``'s copy laid out as the gradient;
    generated program nn 32091)."""
    op = primary_op(info)
    checked = 0

    def sample_args(sample):
        return _laid_out_otherwise(_with_grad(sample.args), inputs), _laid_out_otherwise(_with_grad(sample.kwargs), inputs)

    for i, sample in enumerate(info.sample_inputs(torch.float32)):
        args, kwargs = sample_args(sample)
        if not _grad_leaves((args, kwargs), []):
            continue
        try:
            e_flags, expected = _flags_and_grads(op, args, kwargs, i, cotangents)
        except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError):
            continue
        args, kwargs = sample_args(sample)
        try:
            t_flags, actual = _flags_and_grads(thunder.jit(lambda *a, **k: op(*a, **k)), args, kwargs, i, cotangents)
        except NotImplementedError:
            continue  # refused with a clear error (requires_grad_(False) of an input that requires grad)
        assert t_flags == e_flags, f"{info.name} on {sample}: outputs' requires_grad"
        assert len(actual) == len(expected)
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert (a is None) == (e is None), f"{info.name} on {sample}: gradient {k} is {a} where eager's is {e}"
            if e is None:
                continue
            torch.testing.assert_close(a, e, atol=0, rtol=0, equal_nan=True)
            if is_non_overlapping_and_dense_or_false(a) and is_non_overlapping_and_dense_or_false(e):
                assert _memory_order(a) == _memory_order(e), \
                    f"{info.name} on {sample}: gradient {k} strides {a.stride()}, eager's {e.stride()}"
        checked += 1
    if checked == 0:
        pytest.skip(f"{info.name}: no differentiable float32 sample")


# ---------------------------------------------------------------------------------------------
# Grad mode switched inside the program: autodiff follows the mode in force at each operation
# ---------------------------------------------------------------------------------------------


def _enable_inside(x, w):
    with torch.enable_grad():
        y = x * w
    return y, y.sin()


def _no_grad_inside(x, w):
    with torch.no_grad():
        y = x * w
    return y * x, y


def _set_grad_enabled_inside(x, w):
    torch.set_grad_enabled(False)
    y = x * w
    torch.set_grad_enabled(True)
    return y * x + w, y


def _nested_modes(x, w):
    with torch.no_grad():
        a = x.exp()
        with torch.enable_grad():
            b = a * w
    return b.tanh(), a


@pytest.mark.parametrize("outer", ["grad", "no_grad"])
@pytest.mark.parametrize("fn", [_enable_inside, _no_grad_inside, _set_grad_enabled_inside, _nested_modes],
                         ids=lambda f: f.__name__.strip("_"))
def test_grad_mode_inside_the_program(fn, outer):
    jfn = thunder.jit(fn)
    mode = torch.enable_grad if outer == "grad" else torch.no_grad
    for _ in range(2):  # the cached entry behaves as the first call
        x = torch.randn(3, dtype=torch.float64, requires_grad=True)
        w = torch.randn(3, dtype=torch.float64, requires_grad=True)
        with mode():
            expected, actual = fn(x, w), jfn(x, w)
        assert [o.requires_grad for o in actual] == [o.requires_grad for o in expected]
        for e, a in zip(expected, actual):
            torch.testing.assert_close(a, e, rtol=0, atol=0)
        if not any(o.requires_grad for o in expected):
            continue
        ge, ga = (torch.autograd.grad(sum(o.sum() for o in outs if o.requires_grad), [x, w], allow_unused=True,
                                      materialize_grads=True) for outs in (expected, actual))
        for g1, g2 in zip(ga, ge):
            torch.testing.assert_close(g1, g2, rtol=0, atol=0)


def test_enable_grad_inside_inference_mode_records_nothing():
    def fn(x):
        with torch.enable_grad():
            return x * 2

    x = torch.randn(3, requires_grad=True)
    with torch.inference_mode():
        assert not thunder.jit(fn)(x).requires_grad and not fn(x).requires_grad


def test_grad_mode_left_changed_raises():
    def fn(x):
        torch.set_grad_enabled(False)
        return x * 2

    with pytest.raises(NotImplementedError, match="changes the grad mode and does not restore it"):
        thunder.jit(fn)(torch.randn(3, requires_grad=True))
    assert torch.is_grad_enabled()


# ---------------------------------------------------------------------------------------------
# backward twice, hooks on intermediates
# ---------------------------------------------------------------------------------------------


def _twice_saving(x):
    return (x * x).sin()


def _twice_fallback(x):
    return torch.special.erfcx(x).cumprod(0)  # differentiated by torch's autograd (the generic path)


@pytest.mark.parametrize("fn", [_twice_saving, _twice_fallback], ids=["rules", "torch-autograd"])
def test_backward_with_retain_graph_then_again(fn):
    grads = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(4, dtype=torch.float64, requires_grad=True)
        with torch.no_grad():
            x.copy_(torch.linspace(-1, 1, 4))
        out = f(x)
        out.sum().backward(retain_graph=True)
        first = x.grad.clone()
        out.sum().backward()
        grads.append((first, x.grad.clone()))
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            out.sum().backward()
    (e1, e2), (a1, a2) = grads
    assert torch.equal(a1, e1) and torch.equal(a2, e2) and torch.equal(a2, 2 * a1)


def _hook(x):
    y = x * 2
    y.register_hook(lambda g: g * 10)
    return y.sum()


def _post_accumulate_hook(x):
    x.register_post_accumulate_grad_hook(lambda p: None)
    return (x * 2).sum()


def _retain_grad(x):
    y = x * 2
    y.retain_grad()
    return y.sum()


@pytest.mark.parametrize("fn,what", [(_hook, "Tensor.register_hook"),
                                     (_post_accumulate_hook, "Tensor.register_post_accumulate_grad_hook"),
                                     (_retain_grad, "Tensor.retain_grad")], ids=["hook", "post-accumulate", "retain_grad"])
def test_autograd_hooks_inside_refused(fn, what):
    """Never silently ignored: a hook inside the program would not be called, so tracing refuses it."""
    with pytest.raises(NotImplementedError, match=f"{what} inside a jitted function is not supported"):
        thunder.jit(fn)(torch.randn(3, requires_grad=True))


def _gradient_penalty(x):
    y = (x * 2).sin().sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    return y + g.square().sum()


def _backward_inside(x):
    y = (x * 2).sin().sum()
    y.backward()
    return y


def _autograd_backward_inside(x):
    y = (x * 2).sin().sum()
    torch.autograd.backward([y])
    return y


class _GradInBackward(torch.autograd.Function):
    """A backward that recomputes its forward and differentiates it (as zuko's Gauss-Legendre quadrature does)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            return torch.autograd.grad(x.sin(), x, grad)


@pytest.mark.parametrize("fn,what", [(_gradient_penalty, "torch.autograd.grad"), (_backward_inside, "Tensor.backward"),
                                     (_autograd_backward_inside, "torch.autograd.backward"),
                                     (lambda x: _GradInBackward.apply(x).sum(), "torch.autograd.grad|requires_grad_")],
                         ids=["grad", "Tensor.backward", "autograd.backward", "in-a-custom-backward"])
def test_gradients_taken_inside_refused(fn, what):
    """Refused by name: they ran torch's autograd on thunder's traced values, which raised "element 0 of tensors does
    not require grad and does not have a grad_fn", as if the user's tensors were at fault."""
    x = torch.randn(3, requires_grad=True)
    fn(x)  # eager computes them
    with pytest.raises(NotImplementedError, match=f"({what}).* inside a jitted function is not supported"):
        thunder.jit(fn)(x)


class _LinearSin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).sin()


def _double_grad_input(module, grad_input, grad_output):
    return (grad_input[0] * 2,)


def _triple_grad_output(module, grad_output):
    return (grad_output[0] * 3,)


_MODULE_HOOKS = {
    "full": (lambda m: m.register_full_backward_hook(_double_grad_input), "register_full_backward_hook"),
    "full-pre": (lambda m: m.register_full_backward_pre_hook(_triple_grad_output), "register_full_backward_hook"),
    "global-full": (lambda m: torch.nn.modules.module.register_module_full_backward_hook(_double_grad_input),
                    "register_full_backward_hook"),
    "old": (lambda m: m.register_backward_hook(lambda *args: None), "Module.register_backward_hook"),
}


@pytest.mark.filterwarnings("ignore:Using a non-full backward hook")
@pytest.mark.parametrize("where", ["submodule", "jitted-module"])
@pytest.mark.parametrize("kind", list(_MODULE_HOOKS))
def test_module_backward_hooks_inside_refused(kind, where):
    """A module's backward hooks run from hooks on autograd nodes around it, which thunder's backward (one compiled
    program) would never call: refused with a message that says so, not torch's "Error while setting up backward
    hooks. Please open an issue" (full hooks) or an AttributeError of thunder's grad_fn (the deprecated hooks)."""
    model = _LinearSin()
    register, what = _MODULE_HOOKS[kind]
    handle = register(model.linear if where == "submodule" else model)
    try:
        x = torch.randn(2, 4, requires_grad=True)
        model(x).sum().backward()  # eager runs them
        with pytest.raises(NotImplementedError, match=f"{what}.*are not supported: thunder's backward is one compiled"):
            thunder.jit(model)(x)
    finally:
        handle.remove()


@pytest.mark.parametrize("kind", ["full", "full-pre"])
def test_module_backward_hooks_around_the_jitted_module_run_as_eager(kind):
    """What the refusal suggests: the hooks on a module that calls the jitted one run around thunder's backward, with
    eager's gradients and eager's changes to them."""
    grads, calls = [], []
    for jit in (False, True):
        torch.manual_seed(0)
        model = _LinearSin()
        outer = torch.nn.Sequential(thunder.jit(model) if jit else model)
        _MODULE_HOOKS[kind][0](outer)
        outer.register_full_backward_hook(lambda m, gi, go: calls.append((jit, gi[0].clone(), go[0].clone())))
        x = torch.randn(2, 4, requires_grad=True)
        outer(x).square().sum().backward()
        grads.append((x.grad, model.linear.weight.grad))
    assert all(torch.equal(a, e) for a, e in zip(*grads))
    (_, egi, ego), (_, agi, ago) = calls
    assert torch.equal(agi, egi) and torch.equal(ago, ego)


class _BuildsALayerInForward(torch.nn.Module):
    """As Hugging Face's BigBird when it switches attention kinds: a new layer (its parameters) made in forward."""

    def forward(self, x):
        return torch.nn.Linear(3, 3)(x)


def _set_requires_grad(t, flag: bool):
    t.requires_grad = flag
    return t


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("reduce", [lambda x: x.sum(), lambda x: x.sum(0), lambda x: x.sum(1, keepdim=True),
                                    lambda x: x.sum(dtype=torch.float64)], ids=["all", "dim", "keepdim", "dtype"])
def test_the_gradient_of_a_sum_is_eagers_expanded_cotangent(dtype, reduce):
    """eager's ``sum_backward`` expands the cotangent (strides 0); a float16/bfloat16 sum, accumulated in float32,
    had its gradient converted through float32, materialized (torch's OpInfo samples, bfloat16)."""
    x = torch.randn(2, 3, dtype=dtype, requires_grad=True)
    out, expected = thunder.jit(reduce)(x), reduce(x)
    cotangent = torch.full_like(expected, 0.5)
    (grad,), (expected_grad,) = torch.autograd.grad(out, x, cotangent), torch.autograd.grad(expected, x, cotangent)
    assert torch.equal(grad, expected_grad) and grad.stride() == expected_grad.stride()


@pytest.mark.parametrize("hooks", [lambda: torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t),
                                   lambda: torch.autograd.graph.save_on_cpu()], ids=["doubling", "save_on_cpu"])
def test_saved_tensor_hooks_inside_the_program_refused(hooks):
    """Inside the program they would act on nothing thunder saves: a hook that changes what it saves gave a
    gradient other than eager's (2x for eager's 4x). Around the jitted call they apply to what thunder saves."""
    def fn(x):
        with hooks():
            return x * x

    with pytest.raises(NotImplementedError, match="saved tensor hooks"):
        thunder.jit(fn)(torch.randn(3, requires_grad=True))
    model = torch.nn.Linear(3, 3)
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3)
    with torch.autograd.graph.save_on_cpu():
        thunder.jit(model)(x).sum().backward()
        reference(x).sum().backward()
    assert torch.equal(model.weight.grad, reference.weight.grad)


def test_a_layer_built_in_forward_refused():
    """A parameter the program makes would be a leaf whose gradient no one sees: refused, with a message that names
    the usual cause."""
    with pytest.raises(NotImplementedError, match=r"Tensor.requires_grad_\(\) inside a jitted function is not "
                                                  r"supported \(nn.Parameter calls it"):
        thunder.jit(_BuildsALayerInForward())(torch.randn(3, requires_grad=True))


def _marks_its_input(how):
    def fn(x, w):
        before = x * 2  # read before the flag is set: no gradient of x through it, as in eager
        if how == "method":
            x.requires_grad_()
        else:
            x.requires_grad = True
        return (x * w + before).sum(), x.is_leaf, x.grad_fn is None

    return fn


@pytest.mark.parametrize("how", ["method", "setter"])
def test_an_input_the_program_makes_require_grad_gets_eagers_gradient(how):
    """``x.requires_grad_()`` (or ``= True``) of an input inside the program: as in eager, the caller's ``x`` requires
    grad after the call and its gradient comes from the uses after the setting alone (the reads before it see a
    detached copy in the trace); a later call with that tensor, which requires grad now, compiles again, and the
    setting is nothing there. (Refused before: vector-quantize-pytorch's ``self.zero.requires_grad_()``; ``= True``
    reached the traced value alone: the caller's x had no gradient.)"""
    fn = _marks_its_input(how)
    jfn = thunder.jit(fn)
    for call in range(2):
        x, w = torch.randn(3), torch.randn(3, requires_grad=True)
        xe, we = x.clone(), w.detach().clone().requires_grad_()
        out, expected = jfn(x, w), fn(xe, we)
        assert out[1:] == expected[1:] == (True, True)
        out[0].backward()
        expected[0].backward()
        assert x.requires_grad and torch.equal(x.grad, xe.grad) and torch.equal(w.grad, we.grad)
    assert thunder.cache_misses(jfn) == 1
    out, expected = jfn(x, w), fn(xe, we)  # x requires grad now: its reads before the setting are differentiated too
    out[0].backward()
    expected[0].backward()
    assert torch.equal(x.grad, xe.grad) and thunder.cache_misses(jfn) == 2
    trace = str(thunder.last_traces(jfn)[0])
    assert "detach" not in trace
    with torch.no_grad():  # the flag is set under no_grad too, as eager sets it
        x = torch.randn(3)
        jfn(x, w)
    assert x.requires_grad


class _ZeroBufferLoss(torch.nn.Module):
    """As vector-quantize-pytorch's VectorQuantize: ``loss = self.zero; loss.requires_grad_()`` of a buffer, then
    terms added to it."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("zero", torch.tensor(0.0), persistent=False)

    def forward(self, x):
        loss = self.zero
        loss.requires_grad_()
        return loss + self.lin(x).pow(2).mean()


def test_a_buffer_the_program_makes_require_grad_trains_as_eager():
    torch.manual_seed(0)
    model = _ZeroBufferLoss()
    ref = copy.deepcopy(model)
    jmodel = thunder.jit(model)
    x = torch.randn(4, 3)
    for _ in range(3):
        jmodel(x).backward()
        ref(x).backward()
        assert model.zero.requires_grad and torch.equal(model.zero.grad, ref.zero.grad)
        assert torch.equal(model.lin.weight.grad, ref.lin.weight.grad)
    assert thunder.cache_misses(jmodel) == 2  # the buffer requires grad from the second call on


def test_a_value_the_program_makes_require_grad_is_differentiated_from_there_but_not_returned():
    """A value computed inside made to require grad (HF's wav2vec2 feature encoder marks a view of its input): eager's
    leaf of autograd; the gradients of the inputs are eager's. Returned, it is refused: in eager a leaf whose .grad
    the backward fills, which thunder's computed output is not."""
    def fn(x, w):
        z = torch.zeros_like(x)
        z.requires_grad_()
        return z * x + x * w

    x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    xe, we = (t.detach().clone().requires_grad_() for t in (x, w))
    thunder.jit(fn)(x, w).sum().backward()
    fn(xe, we).sum().backward()
    assert torch.equal(x.grad, xe.grad) and torch.equal(w.grad, we.grad)
    with pytest.raises(NotImplementedError, match="a tensor it computed and then set requires_grad on"):
        thunder.jit(lambda x: torch.zeros_like(x).requires_grad_())(x)


@pytest.mark.parametrize("case", ["view", "updated"])
def test_requires_grad_of_an_input_view_or_updated_input_inside_refused(case):
    def fn(x):
        if case == "updated":
            x.add_(1)
        x.requires_grad_()
        return x * 2

    x = torch.randn(4)[:3] if case == "view" else torch.randn(3)
    with pytest.raises(NotImplementedError, match="supported only for a tensor as the call passed it"):
        thunder.jit(fn)(x)
    assert not x.requires_grad


def test_setting_requires_grad_of_an_input_inside_refused():
    """``x.requires_grad = False`` of an input that requires grad: eager changes the caller's leaf, and the result
    no longer requires grad; the traced program's did (the setter reached the proxy alone: a wrong result). Refused
    as ``requires_grad_(False)``; setting the flag a tensor has is nothing to refuse. (``= True``: the tests
    above.)"""
    with pytest.raises(NotImplementedError, match=r"requires_grad_\(False\) of a tensor that requires grad"):
        thunder.jit(lambda x: _set_requires_grad(x, False) * 2)(torch.randn(3, requires_grad=True))
    x = torch.randn(3)
    out = thunder.jit(lambda x: _set_requires_grad(x, False) * 2)(x)
    assert torch.equal(out, x * 2) and not out.requires_grad


# ---------------------------------------------------------------------------------------------
# clamp with tensor bounds: values and gradients of the input and of both bounds
# ---------------------------------------------------------------------------------------------


def _bounds_case(seed, a_shape=(4, 5), lo_shape=(4, 5), hi_shape=(4, 5), dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    a, lo, hi = (torch.randn(s, generator=g, dtype=dtype) for s in (a_shape, lo_shape, hi_shape))
    a.view(-1)[:3] = torch.tensor([float("nan"), 0.25, -0.25], dtype=dtype)  # NaN, and ties with the bounds below
    if lo.numel() >= 3:
        lo.view(-1)[:3] = torch.tensor([0.0, 0.25, 0.5], dtype=dtype)
    if hi.numel() >= 3:
        hi.view(-1)[:3] = torch.tensor([1.0, 0.1, -0.25], dtype=dtype)  # crossing bounds (min > max) at 1 and 2
    return a, lo, hi


_CLAMP_FNS = {
    "clamp": lambda a, lo, hi: torch.clamp(a, lo, hi),
    "clip": lambda a, lo, hi: torch.clip(a, min=lo, max=hi),
    "Tensor.clamp": lambda a, lo, hi: a.clamp(lo, hi),
    "clamp-min-only": lambda a, lo, hi: torch.clamp(a, min=lo),
    "clamp-max-only": lambda a, lo, hi: torch.clamp(a, max=hi),
    "clamp_min": lambda a, lo, hi: torch.clamp_min(a, lo),
    "clamp_max": lambda a, lo, hi: torch.clamp_max(a, hi),
    "Tensor.clamp_-on-intermediate": lambda a, lo, hi: (a * 1).clamp_(lo, hi),
    "Tensor.clip_-on-intermediate": lambda a, lo, hi: (a * 1).clip_(lo, hi),
}
_CLAMP_SHAPES = {"same": ((4, 5), (4, 5), (4, 5)), "broadcast-bounds": ((4, 5), (5,), (4, 1)),
                 "broadcast-input": ((5,), (4, 5), (4, 5)), "scalar-tensor-bounds": ((4, 5), (), ())}


@pytest.mark.parametrize("shapes", list(_CLAMP_SHAPES))
@pytest.mark.parametrize("name", list(_CLAMP_FNS))
def test_clamp_tensor_bounds(name, shapes):
    fn = _CLAMP_FNS[name]
    a, lo, hi = _bounds_case(0, *_CLAMP_SHAPES[shapes])
    results = []
    for f in (fn, thunder.jit(fn)):
        leaves = [t.clone().requires_grad_() for t in (a, lo, hi)]
        try:
            out = f(*leaves)
        except RuntimeError as e:  # broadcast-input with an in-place update: eager refuses the shape change
            results.append(type(e))
            continue
        grads = torch.autograd.grad(out, leaves, torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape),
                                    allow_unused=True, materialize_grads=True)
        results.append((out.detach(), grads))
    expected, actual = results
    if not isinstance(expected, tuple):
        assert actual is expected
        return
    torch.testing.assert_close(actual[0], expected[0], rtol=0, atol=0, equal_nan=True)
    for what, x, y in zip(("input", "min", "max"), actual[1], expected[1]):
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{name} gradient of {what}: {m}")


@pytest.mark.parametrize("dtypes", [(torch.int64, torch.float32), (torch.float32, torch.float64),
                                    (torch.bfloat16, torch.float32)], ids=str)
def test_clamp_tensor_bounds_type_promotion(dtypes):
    a_dtype, bound_dtype = dtypes
    a = torch.tensor([1, 5, -3, 2], dtype=a_dtype)
    lo, hi = torch.tensor([0.5], dtype=bound_dtype), torch.tensor([2.5], dtype=bound_dtype)
    fn = lambda a, lo, hi: torch.clamp(a, lo, hi)  # noqa: E731
    expected, actual = fn(a, lo, hi), thunder.jit(fn)(a, lo, hi)
    assert actual.dtype == expected.dtype and torch.equal(actual, expected)


def test_clamp_mixed_tensor_and_number_bounds_raise_as_eager():
    fn = lambda a, lo: torch.clamp(a, min=lo, max=0.5)  # noqa: E731
    a, lo = torch.randn(3), torch.zeros(3)
    with pytest.raises(TypeError):
        fn(a, lo)
    with pytest.raises(TypeError, match="clamp"):
        thunder.jit(fn)(a, lo)


# ---------------------------------------------------------------------------------------------
# Complex gradients: torch's convention (the conjugate Wirtinger derivative), for complex -> complex,
# real -> complex and complex -> real operations
# ---------------------------------------------------------------------------------------------


def _c(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=torch.complex128, generator=g)


def _r(*shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=torch.float64, generator=g)


_COMPLEX_CASES = {
    "abs": (torch.abs, (_c(4),)), "abs-at-zero": (torch.abs, (torch.tensor([0j, 1 + 1j]),)),
    "abs-squared": (lambda z: z.abs() ** 2, (_c(4),)), "real": (torch.real, (_c(4),)), "imag": (torch.imag, (_c(4),)),
    "angle": (torch.angle, (_c(4),)), "conj": (lambda z: torch.conj(z) * 1, (_c(4),)), "sgn": (torch.sgn, (_c(4),)),
    "view_as_real": (torch.view_as_real, (_c(4),)), "view_as_complex": (torch.view_as_complex, (_r(4, 2),)),
    "complex": (torch.complex, (_r(4), _r(4, seed=2))), "polar": (torch.polar, (_r(4).abs(), _r(4, seed=2))),
    "mul": (torch.mul, (_c(4), _c(4, seed=1))), "mul-real": (torch.mul, (_c(4), _r(4))),
    "mul-python-complex": (lambda z: z * (1 + 2j), (_c(4),)), "div": (torch.div, (_c(4), _c(4, seed=1))),
    "div-real-by-complex": (torch.div, (_r(4), _c(4))), "add-real": (torch.add, (_c(4), _r(4))),
    "sub": (torch.sub, (_c(4), _c(4, seed=1))), "z*conj(z)": (lambda z: z * z.conj(), (_c(4),)),
    "pow-2": (lambda z: z ** 2, (_c(4),)), "pow-tensor": (torch.pow, (_c(4), _c(4, seed=1))),
    "square": (torch.square, (_c(4),)), "exp": (torch.exp, (_c(4),)), "log": (torch.log, (_c(4),)),
    "sqrt": (torch.sqrt, (_c(4),)), "rsqrt": (torch.rsqrt, (_c(4),)), "reciprocal": (torch.reciprocal, (_c(4),)),
    "sin": (torch.sin, (_c(4),)), "cos": (torch.cos, (_c(4),)), "tan": (torch.tan, (_c(4),)),
    "tanh": (torch.tanh, (_c(4),)), "sigmoid": (torch.sigmoid, (_c(4),)), "sinh": (torch.sinh, (_c(4),)),
    "cosh": (torch.cosh, (_c(4),)), "asin": (torch.asin, (_c(4),)), "atan": (torch.atan, (_c(4),)),
    "expm1": (torch.expm1, (_c(4),)), "log1p": (torch.log1p, (_c(4),)),
    "matmul": (torch.matmul, (_c(3, 4), _c(4, 2, seed=1))), "matmul-vector": (torch.matmul, (_c(3, 4), _c(4, seed=1))),
    "dot": (torch.dot, (_c(4), _c(4, seed=1))), "bmm-broadcast": (torch.matmul, (_c(2, 3, 4), _c(4, 2, seed=1))),
    "linear": (torch.nn.functional.linear, (_c(2, 4), _c(3, 4, seed=1), _c(3, seed=2))),
    "sum": (lambda z: z.sum(0), (_c(3, 4),)), "mean": (lambda z: z.mean(), (_c(3, 4),)),
    "prod": (lambda z: z.prod(-1), (_c(3, 4),)), "cumsum": (lambda z: z.cumsum(1), (_c(3, 4),)),
    "var": (lambda z: z.var(), (_c(6),)), "vector_norm": (torch.linalg.vector_norm, (_c(6),)),
    "real-to-complex": (lambda r: r.to(torch.complex128) * (1 + 2j), (_r(4),)),
    "complex-to-real-part": (lambda z: z.real * 2 + z.imag * z.real, (_c(4),)),
    "where": (lambda z, w: torch.where(z.real > 0, z, w), (_c(4), _c(4, seed=1))),
    "fft": (lambda z: torch.fft.fft(z), (_c(8),)), "rfft-abs": (lambda r: torch.fft.rfft(r).abs(), (_r(8),)),
}


@pytest.mark.parametrize("name", list(_COMPLEX_CASES))
def test_complex_gradient(name):
    fn, inputs = _COMPLEX_CASES[name]
    results = []
    for f in (fn, thunder.jit(fn)):
        leaves = [x.clone().requires_grad_() for x in inputs]
        out = f(*leaves)
        g = torch.Generator().manual_seed(7)
        ct = torch.randn(out.shape, dtype=out.dtype, generator=g)
        results.append((out.detach(), torch.autograd.grad(out, leaves, ct)))
    (expected_out, expected), (actual_out, actual) = results
    torch.testing.assert_close(actual_out, expected_out, rtol=0, atol=0)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12, msg=lambda m: f"{name}: {m}")


# ---------------------------------------------------------------------------------------------
# An input updated in place whose old value the backward needs (see [Note: saved values overwritten
# by in-place updates]): eager saves a copy or refuses; thunder's gradients are the correct ones
# ---------------------------------------------------------------------------------------------


def _mul_into_input(y, x):
    y.mul_(x)  # eager keeps the old y for x's gradient
    return y * 2


def _view_saved_then_input_updated(y, x):
    out = y.reshape(-1) * x.reshape(-1)  # the reshape of y is a view of it when run
    y.mul_(2)
    return out


def _input_saved_then_updated(y, x):
    z = x * y
    y.add_(1)
    return z


def _transpose_saved_then_zeroed(y, x):
    z = (x * y.t()).sum()
    y.zero_()
    return z


_OLD_Y = {  # the gradient of x in terms of y's value before the call
    _mul_into_input: lambda y: 2 * y, _view_saved_then_input_updated: lambda y: y,
    _input_saved_then_updated: lambda y: y, _transpose_saved_then_zeroed: lambda y: y.t(),
}


@pytest.mark.parametrize("fn", list(_OLD_Y), ids=lambda f: f.__name__.strip("_"))
def test_input_updated_in_place_keeps_old_value_for_backward(fn):
    g = torch.Generator().manual_seed(0)
    y0, x0 = torch.randn(3, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64)
    eager_y, eager_x = y0.clone(), x0.clone().requires_grad_()
    try:
        fn(eager_y, eager_x).sum().backward()
        eager_ok = True
    except RuntimeError as e:  # a value saved by an earlier operation was modified: eager refuses
        assert "modified by an inplace operation" in str(e)
        eager_ok = False
    jfn = thunder.jit(fn)
    for _ in range(2):  # and on a cache hit
        y, x = y0.clone(), x0.clone().requires_grad_()
        jfn(y, x).sum().backward()
        torch.testing.assert_close(x.grad, _OLD_Y[fn](y0), rtol=0, atol=0)
        assert torch.equal(y, eager_y)  # the input's update, as eager's forward made it
        if eager_ok:
            assert torch.equal(x.grad, eager_x.grad)
    assert eager_ok == (fn is _mul_into_input)


def test_batch_norm_training_saves_no_running_statistics():
    """The running statistics are written back in place; the backward does not read them (nothing to protect)."""
    model = torch.nn.BatchNorm1d(4)
    jmodel = thunder.jit(model)
    jmodel(torch.randn(8, 4, requires_grad=True)).sum().backward()
    backward = str(thunder.last_backward_traces(jmodel)[-1])
    assert "running" not in backward and "clone" not in str(thunder.last_traces(jmodel)[-1])


def _update_then_use_outside(y, x):
    y.mul_(x)
    return x.sum()


def _overwrite_with_grad_value(y, x):
    y.copy_(x.exp())
    return (x * 2).sum()


@pytest.mark.parametrize("fn", [_update_then_use_outside, _overwrite_with_grad_value], ids=lambda f: f.__name__.strip("_"))
def test_input_updated_in_place_joins_the_graph(fn):
    """As in eager, an input updated with a value that requires grad gets that history (see [Note: dirty inputs])."""
    results = []
    for f in (fn, thunder.jit(fn), thunder.jit(fn)):
        g = torch.Generator().manual_seed(0)
        y = torch.randn(3, generator=g, dtype=torch.float64)
        x, w = (torch.randn(3, generator=g, dtype=torch.float64).requires_grad_() for _ in range(2))
        out = f(y, x)
        assert y.requires_grad and y.grad_fn is not None
        ((y * w).sum() + out).backward()
        results.append((y.detach(), x.grad, w.grad))
    for actual in results[1:]:
        for a, e in zip(actual, results[0]):
            torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_batch_norm_running_statistics_stay_out_of_the_graph():
    model = torch.nn.BatchNorm1d(3)
    thunder.jit(model)(torch.randn(4, 3, requires_grad=True)).sum().backward()
    assert not any(b.requires_grad for b in model.buffers())


# ---------------------------------------------------------------------------------------------
# Losses of an input and a target of different dtypes: each loss has its own dtype rule (the promoted dtype for
# mse_loss, the input's for huber_loss and soft_margin_loss, whose meta kernels say otherwise, the target's for
# binary_cross_entropy_with_logits), and the traces must say what the kernels compute.
# ---------------------------------------------------------------------------------------------

_F = torch.nn.functional
_MIXED_LOSSES = {
    "mse_loss": lambda a, b, r: _F.mse_loss(a, b, reduction=r),
    "l1_loss": lambda a, b, r: _F.l1_loss(a, b, reduction=r),
    "smooth_l1_loss": lambda a, b, r: _F.smooth_l1_loss(a, b, reduction=r, beta=0.5),
    "huber_loss": lambda a, b, r: _F.huber_loss(a, b, reduction=r),
    "soft_margin_loss": lambda a, b, r: _F.soft_margin_loss(a, b.sign().detach(), reduction=r),  # eager: no target grad
    "bce_with_logits": lambda a, b, r: _F.binary_cross_entropy_with_logits(a, b.sigmoid(), reduction=r),
    "bce_with_logits-weights": lambda a, b, r: _F.binary_cross_entropy_with_logits(
        a, b.sigmoid(), torch.linspace(0.5, 1, 5), reduction=r, pos_weight=torch.full((5,), 2.0)),
    "kl_div": lambda a, b, r: _F.kl_div(a.log_softmax(-1), b.softmax(-1), reduction=r),
    "poisson_nll_loss": lambda a, b, r: _F.poisson_nll_loss(a, b.abs(), reduction=r),
    "margin_ranking_loss": lambda a, b, r: _F.margin_ranking_loss(a, b, b.sign(), reduction=r),
    "cosine_similarity": lambda a, b, r: _F.cosine_similarity(a, b),
}
_MIXED_DTYPES = [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16), (torch.float32, torch.float64),
                 (torch.float64, torch.float32)]


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtypes", _MIXED_DTYPES, ids=lambda d: "-".join(str(t).removeprefix("torch.") for t in d))
@pytest.mark.parametrize("name", list(_MIXED_LOSSES))
def test_losses_of_mixed_dtypes_are_eagers(name, dtypes, reduction):
    fn = _MIXED_LOSSES[name]
    for requires_grad in (False, True):
        runs = []
        for f in (lambda a, b: fn(a, b, reduction), thunder.jit(lambda a, b: fn(a, b, reduction),
                                                               transforms=[CheckMetadata()])):
            g = torch.Generator().manual_seed(0)
            a, b = (torch.randn(4, 5, generator=g).to(d).requires_grad_(requires_grad) for d in dtypes)
            out = f(a, b)
            grads = ()
            if requires_grad:
                try:
                    grads = torch.autograd.grad(out, (a, b), torch.ones_like(out), allow_unused=True)
                except RuntimeError:  # eager's backward refuses some dtype pairs (huber_loss, mse_loss): so does thunder
                    grads = None
            runs.append((out.detach(), grads))
        (actual, actual_grads), (expected, expected_grads) = runs[1], runs[0]
        assert actual.dtype is expected.dtype, f"{name}: {actual.dtype} where eager gives {expected.dtype}"
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)
        assert (actual_grads is None) == (expected_grads is None)
        for a, e in zip(actual_grads or (), expected_grads or ()):
            assert (a is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(a, e, rtol=0, atol=0)


@pytest.mark.parametrize("fn", [
    lambda a, b: _F.hinge_embedding_loss(a, b.sign()),  # the target is compared only
    lambda a, b: torch.bucketize(b, torch.linspace(-1, 1, 5)).to(a.dtype) * a,  # an integer result
    lambda a, b: _F.multilabel_soft_margin_loss(a, (b > 0).to(b.dtype)),
    lambda a, b: torch.linalg.norm(b.flatten(), 0) * a,  # the graph reaches b, the backward formula gives it none (OpInfo)
], ids=["hinge_embedding_loss", "bucketize", "multilabel_soft_margin_loss", "linalg.norm-0"])
def test_an_input_the_graph_does_not_reach_gets_no_gradient(fn):
    """As eager: None, not zeros (an optimizer skips a parameter without a gradient, but decays one with zeros).
    Where the graph reaches the input but eager's backward formula leaves its gradient undefined (the 0-norm), the
    same."""
    grads = []
    for f in (fn, thunder.jit(fn)):
        a, b = torch.randn(4, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True)
        grads.append(torch.autograd.grad(f(a, b).sum(), (a, b), allow_unused=True))
    (ea, eb), (ja, jb) = grads
    assert (eb is None) == (jb is None) and ea is not None and ja is not None


@pytest.mark.parametrize("op", [torch.maximum, torch.minimum], ids=["maximum", "minimum"])
def test_maximum_minimum_gradients_sum_in_the_layout_of_eagers_in_place_fill(op):
    """Eager's formula fills ``where(a == b, g / 2, g)`` in place, keeping its layout (here the transposed one of
    ``a``), and sums it to the broadcast input's shape in that order; an out-of-place fill would be contiguous and
    add in another order (generated program 810665)."""
    gen = torch.Generator().manual_seed(0)
    a0 = torch.randn(2, 1, 5, 4, generator=gen)
    b0 = torch.randn(1, 4, generator=gen)
    ct = torch.randn(2, 1, 4, 5, generator=torch.Generator().manual_seed(7))
    fn = lambda a, b: op(a.mT * 1, b.mT)  # noqa: E731 - a laid out transposed
    results = []
    for f in (fn, thunder.jit(fn)):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        results.append(torch.autograd.grad(f(a, b), (a, b), ct))
    for e, j in zip(*results):
        assert torch.equal(e, j)


@pytest.mark.parametrize("fn", [
    lambda x: torch.cat([torch.diff(x), torch.diff(x)]),
    lambda x: (lambda t: torch.cat([t, t, x[1:]]))(torch.diff(x)),
    lambda x: torch.cat([torch.diff(x)]),
], ids=["one_tensor_twice", "one_tensor_twice_and_another", "one"])
def test_cat_of_empty_vectors_only(fn):
    """Legacy empty vectors are skipped by cat; when all are (fuzz 987951: one of them twice), each gets an empty
    gradient, and the result is empty."""
    results = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(1, dtype=torch.float64, requires_grad=True)
        out = f(x)
        results.append((out.shape, out.dtype, out.requires_grad, torch.autograd.grad(out.sum(), x)[0]))
    (s, d, r, g), (js, jd, jr, jg) = results
    assert (s, d, r) == (js, jd, jr) and torch.equal(g, jg)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_batch_as_eager(training):
    """Eager's own path for an empty batch: an empty output, zero gradients for the weight and bias, the running
    statistics untouched (torch's kernels refuse such a batch, and its backward kernel crashes on one)."""
    def fn(x, w, b, rm, rv):
        return _F.batch_norm(x, rm, rv, w, b, training=training)

    results = []
    for f in (fn, thunder.jit(fn)):
        x = torch.randn(0, 2, 3, requires_grad=True)
        w, b = torch.tensor([1.5, 0.5], requires_grad=True), torch.tensor([0.25, -1.0], requires_grad=True)
        rm, rv = torch.tensor([0.1, 0.2]), torch.tensor([1.0, 2.0])
        out = f(x, w, b, rm, rv)
        results.append((out, rm, rv, *torch.autograd.grad(out.sum(), (x, w, b))))
    for e, a in zip(*results):
        assert e.shape == a.shape and e.dtype == a.dtype and torch.equal(e, a)


def test_batch_norm_training_on_one_value_per_channel_raises_as_eager():
    fn = lambda x: _F.batch_norm(x, None, None, training=True)  # noqa: E731
    for f in (fn, thunder.jit(fn)):
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
            f(torch.randn(1, 2, 1))


@pytest.mark.parametrize("fn,shape", [(lambda x: torch.mean(x, -1, keepdim=True).sgn(), ()),
                                      (lambda x: (x.sgn() * 3).sum(0), (3,))], ids=["mean-sgn", "sgn-sum"])
def test_a_zero_tensor_gradient_keeps_the_traced_dtype(fn, shape):
    """``sgn``'s gradient is a ZeroTensor (torch's autograd computes it); divided by a number (a mean's gradient) it
    came out float64 where the backward trace says float32 (generated program nn 45882). Eager's engine casts each
    gradient to its input's dtype; thunder's backward now reads a 0-dim ZeroTensor as zeros (others stay ZeroTensors:
    ``test_gradient_bitwise[sgn-of-cos]``)."""
    x = torch.randn(shape, requires_grad=True)
    jf = thunder.jit(fn, transforms=[CheckMetadata()])
    out, expected = jf(x), fn(x)
    (g,) = torch.autograd.grad(out, x, torch.ones_like(out))
    (e,) = torch.autograd.grad(expected, x, torch.ones_like(expected))
    assert g.dtype == e.dtype and torch.equal(g, e)


def test_index_add_of_a_0dim_tensor_differentiates_with_pytorch_geometric_imported():
    """PyTorch Geometric replaces ``torch.index_select`` with a wrapper that refuses a 0-dim input (its HashTensor);
    the torch executor's ``take`` (index_add's gradient of its source) runs torch's own binding. Before, the gradient
    raised IndexError in any process that had imported PyG (the suite's workers, by test order)."""
    pytest.importorskip("torch_geometric")
    import torch_geometric.hash_tensor  # noqa: F401 - installs the wrapper

    fn = lambda x, i, s: torch.index_add(x, 0, i, s, alpha=-1)  # noqa: E731
    grads = []
    for f in (fn, thunder.jit(fn)):
        x, src = torch.randn((), requires_grad=True), torch.randn((), requires_grad=True)
        grads.append(torch.autograd.grad(f(x, torch.tensor([0]), src), (x, src)))
    assert all(torch.equal(a, e) for a, e in zip(*grads))
