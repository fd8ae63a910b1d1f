"""The torch language's definitions against torch's own signatures, generated over every registered torch callable.

A program calls torch as torch documents it: any argument by any name torch accepts, in any overload's positional
order. These tests read torch's signatures (Python signatures, and the operator schemas of builtins) and check
that each spelling reaches thunder's definition as the argument torch means; and, reading thunder's and torch's
sources, that no definition takes an argument it then ignores, and that the frontend recovers the arguments torch
leaves out when it dispatches to a TorchFunctionMode. A new torch version that adds a keyword fails here first.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.core.symbol import Symbol
from thunder.driver.frontend import DISPATCH_DROPS, torch_arguments
from thunder.torch.registry import SYMBOLS, TORCH_TO_SYMBOL, signature_of, torch_overloads


def _name(fn) -> str:
    module = getattr(fn, "__module__", None) or getattr(getattr(fn, "__objclass__", None), "__module__", "")
    return f"{module}.{getattr(fn, '__qualname__', fn)}"


def torch_keywords(fn) -> dict[str, int | None]:
    """Every keyword torch's ``fn`` accepts, with its position where it may also be given positionally."""
    sig = signature_of(fn)
    if sig is not None:
        return {p.name: (i if p.kind is not p.KEYWORD_ONLY else None) for i, p in enumerate(sig.parameters.values())
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    names: dict[str, int | None] = {}
    for arguments in torch_overloads(fn):
        position = 0
        for a in arguments:
            names.setdefault("input" if a.name == "self" else a.name, None if a.kwarg_only else position)
            position += not a.kwarg_only
    return names


REGISTERED = [(fn, sym) for fn, sym in TORCH_TO_SYMBOL.items() if isinstance(sym, Symbol) and sym.signature is not None]

# (torch callable, keyword): why thunder refuses it (a TypeError naming the keyword)
REFUSED_KEYWORDS = {
    **{(f"{m}.{op}", "out_dtype"): "mixed-precision products (CUDA only in torch)"
       for m in ("torch._VariableFunctionsClass", "torch._C.TensorBase") for op in ("mm", "bmm", "addmm", "baddbmm")},
    ("torch._C.TensorBase.expand", "implicit"): "TorchScript's internal flag",
    ("torch._VariableFunctionsClass.layer_norm", "cudnn_enable"): "the builtin's cuDNN flag (F.layer_norm has none)",
    ("torch._VariableFunctionsClass.group_norm", "cudnn_enabled"): "the builtin's cuDNN flag (F.group_norm has none)",
}

_ARG = object()


def _bind(fn, sym, args, kwargs):
    args, kwargs = torch_arguments(sym, fn, args, kwargs)
    return sym.signature.bind_partial(*args, **kwargs)


def test_every_keyword_torch_accepts_reaches_the_definition():
    refused = {}
    for fn, sym in REGISTERED:
        for name, position in torch_keywords(fn).items():
            if name == "out" or name.startswith("_"):  # out= is the frontend's; _stacklevel and the like unused
                continue
            args = (_ARG,) * (position or 0) if position is not None else ((_ARG,) if name != "input" else ())
            try:
                bound = _bind(fn, sym, args, {name: "value"})
            except TypeError as e:
                refused[(_name(fn), name)] = str(e)
                continue
            got = [p for p, v in bound.arguments.items() if v == "value" or (isinstance(v, tuple) and "value" in v)
                   or (isinstance(v, dict) and "value" in v.values())]
            assert got, f"{_name(fn)}(..., {name}=...): the value reaches no parameter of {sym.id}"
    unexpected = {k: v for k, v in refused.items() if k not in REFUSED_KEYWORDS}
    assert not unexpected, "torch keywords thunder's definitions do not take:\n  " + "\n  ".join(
        f"{fn}({name}=...): {err}" for (fn, name), err in sorted(unexpected.items()))
    assert set(REFUSED_KEYWORDS) <= set(refused), f"accepted now, remove from REFUSED_KEYWORDS: {set(REFUSED_KEYWORDS) - set(refused)}"


def test_every_positional_argument_reaches_the_parameter_torch_means():
    """A position where all of torch's overloads name the same argument: the value binds to a parameter of that
    name, or, where the definition names it otherwise, to the parameter at that position (signatures mirror)."""
    checked = 0
    for fn, sym in REGISTERED:
        params = list(sym.signature.parameters.values())
        keywords = torch_keywords(fn)
        by_position: dict[int, set] = {}
        for name, position in keywords.items():
            if position is not None:
                by_position.setdefault(position, set()).add(name)
        for position, names in by_position.items():
            if len(names) != 1 or position == 0:
                continue
            (name,) = names
            if name.startswith("_") or not any(p.name == name for p in params):
                continue  # spelled otherwise by the definition: mirrored by position
            args = tuple(_ARG for _ in range(position)) + ("value",)
            try:
                bound = _bind(fn, sym, args, {})
            except TypeError:
                continue  # fewer positional parameters in the definition than torch has: refused, not misread
            got = [p for p, v in bound.arguments.items() if v == "value" or (isinstance(v, tuple) and "value" in v)]
            assert got == [name], f"{_name(fn)}: its argument {position} ({name}) binds to {got} of {sym.id}"
            checked += 1
    assert checked > 300


@pytest.mark.parametrize("call", [
    lambda x: torch.softmax(x, 1, torch.float64),
    lambda x: x.log_softmax(1, torch.float64),
    lambda x: torch.tensor_split(x, indices=(1, 3), dim=1),
    lambda x: torch.tensor_split(x, dim=1, sections=2),
    lambda x: torch.pow(input=x, exponent=2),
    lambda x: torch.mm(x, mat2=x.t()),
    lambda x: torch.addcmul(x, tensor1=x, tensor2=x, value=0.5),
    lambda x: x.repeat(repeats=(2, 1)),
    lambda x: torch.swapaxes(x, axis0=0, axis1=1),
    lambda x: torch.outer(x[0], vec2=x[1]),
    lambda x: x.view(dtype=torch.float32),
    lambda x: torch.randint(low=0, high=3, size=(3,)).shape,
    lambda x: torch.round(x * 100, decimals=-1),
    lambda x: torch.zeros(2, dtype=int),
    lambda x: x.to(float),
], ids=["softmax dtype", "log_softmax dtype", "tensor_split indices", "tensor_split sections", "pow exponent",
        "mm mat2", "addcmul tensor1", "repeat repeats", "swapaxes axis0", "outer vec2", "view dtype",
        "randint low high", "round decimals", "dtype=int", "to(float)"])
def test_torch_spellings_run_as_in_eager(call):
    x = torch.randn(4, 5)
    expected, actual = call(x), thunder.jit(call)(x)
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and torch.equal(actual, expected)
    elif isinstance(expected, tuple) and expected and isinstance(expected[0], torch.Tensor):
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))
    else:
        assert actual == expected


# ---------------------------------------------------------------------------------------------
# Arguments a definition takes and ignores
# ---------------------------------------------------------------------------------------------

# parameter name: where it is handled, if not in the definition
READ_ELSEWHERE = {
    "inplace": "the frontend, which rebinds the program's tensor (Symbol.has_inplace_param)",
    "out": "the frontend, which copies the result into out=",
    "_stacklevel": "warnings only",
    "memory_format": "the torch executor runs the program's call; the frontend's layouts give its strides",
    "layout": "factories refuse all but strided (thunder.torch.creation._plain_tensor)",
    "pin_memory": "the torch executor runs the program's call",
    "requires_grad": "factories refuse True (thunder.torch.creation._plain_tensor)",
    "non_blocking": "copies are synchronous in traces",
    "sparse_grad": "the gradient's values are the same; its layout dense",
    "groups": "the rule's own argument, read by the autograd function",
}
# (symbol, parameter): why the definition does not read it
IGNORED = {
    ("embedding", "padding_idx"): "forward unaffected; the gradient rule reads it from the bound symbol",
    ("embedding", "scale_grad_by_freq"): "forward unaffected; the gradient rule reads it from the bound symbol",
    ("embedding", "norm_type"): "only used with max_norm, which is refused",
    ("manual_seed", "seed"): "the torch executor reseeds with it; the definition records the call",
    ("assert_all_true", "t"): "the torch executor checks it when the program runs; the definition records the call",
    ("assert_all_true", "what"): "the torch executor's error message",
    ("torch_autograd_backward", "graph"): "the executor's",
    ("torch_autograd_backward", "cotangents"): "the executor's",
    ("contiguous_as_suggested", "like"): "the torch executor lays the value out as torch suggests for it",
    ("root_of_a_view_update", "strides"): "an identity forward; the gradient rule lays the gradient out with them",
    ("root_of_a_retaken_view", "strides"): "an identity forward; the gradient rule lays the gradient out with them",
}


def _function_ast(fn) -> ast.FunctionDef | None:
    try:
        f = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError):
        return None
    return f if isinstance(f, ast.FunctionDef) else None


def _parameters(f: ast.FunctionDef) -> list[str]:
    return [a.arg for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs]


def _definition_parameters_not_read():
    found = {}
    seen = set()
    for name, sym in sorted(SYMBOLS.items()):
        fn = inspect.unwrap(sym.fn)
        if fn in seen:
            continue
        seen.add(fn)
        f = _function_ast(fn)
        if f is None:
            continue
        params = _parameters(f) + [a.arg for a in (f.args.vararg, f.args.kwarg) if a is not None]
        read = {n.id for n in ast.walk(f) if isinstance(n, ast.Name)}
        for p in params:
            if p not in read and p not in READ_ELSEWHERE:
                found[(name, p)] = f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    return found


def test_no_definition_ignores_an_argument():
    """An argument a definition accepts and does not read is a silently wrong result waiting (``F.mse_loss``'s
    ``weight`` was one): each is read, handled elsewhere, or listed with the reason it changes nothing."""
    found = _definition_parameters_not_read()
    unexpected = {k: v for k, v in found.items() if k not in IGNORED}
    assert not unexpected, "parameters accepted and never read:\n  " + "\n  ".join(
        f"{sym}({p}): {where}" for (sym, p), where in sorted(unexpected.items()))
    assert set(IGNORED) <= set(found), f"read now, remove from IGNORED: {set(IGNORED) - set(found)}"


FACTORIES = {
    "zeros": lambda **kw: torch.zeros(3, **kw), "ones": lambda **kw: torch.ones(3, **kw),
    "empty": lambda **kw: torch.empty(3, **kw), "full": lambda **kw: torch.full((3,), 2.0, **kw),
    "arange": lambda **kw: torch.arange(3.0, **kw), "linspace": lambda **kw: torch.linspace(0, 1, 3, **kw),
    "eye": lambda **kw: torch.eye(3, **kw), "rand": lambda **kw: torch.rand(3, **kw),
    "randn": lambda **kw: torch.randn(3, **kw), "zeros_like": lambda x, **kw: torch.zeros_like(x, **kw),
    "full_like": lambda x, **kw: torch.full_like(x, 2.0, **kw), "rand_like": lambda x, **kw: torch.rand_like(x, **kw),
    "new_zeros": lambda x, **kw: x.new_zeros(3, **kw), "new_full": lambda x, **kw: x.new_full((3,), 2.0, **kw),
    "tensor": lambda **kw: torch.tensor([1.0, 2.0], **kw),
}


@pytest.mark.parametrize("factory, option", [(f, o) for f in FACTORIES for o in ("requires_grad=True", "layout=torch.sparse_coo")
                                              if not (f == "tensor" and o.startswith("layout"))])  # torch.tensor: no layout
def test_factories_refuse_what_a_proxy_cannot_stand_for(factory, option):
    """A tensor created inside the program that requires grad, or is sparse, runs in eager but would be a plain
    tensor in thunder's trace (its gradient lost, or dense): refused by name."""
    make = FACTORIES[factory]
    kwargs = {"requires_grad": True} if option.startswith("requires_grad") else {"layout": torch.sparse_coo}

    def f(x):
        return make(x, **kwargs) if "x" in inspect.signature(make).parameters else make(**kwargs)

    with pytest.raises(NotImplementedError, match=rf"{factory}\(\.\.\., {option.split('=')[0]}="):
        thunder.jit(f)(torch.ones(3))


# ---------------------------------------------------------------------------------------------
# Arguments torch leaves out when it dispatches to a TorchFunctionMode
# ---------------------------------------------------------------------------------------------


def _dropped_by_torch_dispatch() -> dict:
    """Python functions of torch whose ``handle_torch_function`` call passes on fewer arguments than they take."""
    dropped = {}
    for module in (F, torch.functional, torch.nn.init):
        for name in dir(module):
            fn = getattr(module, name)
            if not inspect.isfunction(fn) or not getattr(fn, "__module__", "").startswith("torch"):
                continue
            f = _function_ast(fn)
            if f is None:
                continue
            params = _parameters(f)
            for node in ast.walk(f):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "handle_torch_function":
                    passed = {a.id for a in node.args[2:] if isinstance(a, ast.Name)}
                    passed |= {a.value.id for a in node.args[2:] if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name)}
                    passed |= {k.value.id for k in node.keywords if isinstance(k.value, ast.Name)}
                    missing = tuple(p for p in params if p not in passed and p != "out")
                    if missing and f.args.vararg is None:
                        dropped[fn] = missing
    return dropped


def test_the_frontend_knows_every_argument_torch_drops_when_dispatching():
    dropped = _dropped_by_torch_dispatch()
    unknown = {fn.__qualname__: names for fn, names in dropped.items() if not set(names) <= set(DISPATCH_DROPS.get(fn, ()))}
    assert not unknown, f"torch drops these arguments when it dispatches; add them to DISPATCH_DROPS: {unknown}"


@pytest.mark.parametrize("loss", [F.l1_loss, F.mse_loss])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_weighted_regression_losses_match_eager(loss, reduction):
    x = torch.randn(4, 5, requires_grad=True)
    w = torch.rand(4, 5, requires_grad=True)
    y = torch.randn(4, 5)

    def f(x, w):
        return loss(x, y, weight=w, reduction=reduction).sum()

    for executors in (None, ["inductor", "torch"]):  # torch's kernels: bitwise; the decomposition, fused: close
        jf = thunder.jit(f, executors=executors)
        expected, actual = f(x, w), jf(x, w)
        expected, actual = (expected, *torch.autograd.grad(expected, (x, w))), (actual, *torch.autograd.grad(actual, (x, w)))
        for a, e in zip(actual, expected, strict=True):
            if executors is None:
                assert torch.equal(a, e)
            else:
                torch.testing.assert_close(a, e)


# Tensor methods whose one list of ints torch's parser also takes one by one (``x.broadcast_to(2, 3)``), with such a
# call on a (2, 1, 1, 3) tensor: every one registered must be listed (checked below)
VARARGS_CALLS = {
    "broadcast_to": (2, 2, 1, 1, 3), "expand": (2, 2, 1, 1, 3), "reshape": (3, 2), "view": (3, 2),
    "new_empty": (2, 3), "new_ones": (2, 3), "new_zeros": (2, 3), "flip": (0, 3), "permute": (3, 2, 1, 0),
    "tile": (1, 2, 1, 1), "repeat": (1, 2, 1, 1), "squeeze": (1, 2), "count_nonzero": (0, 3),
}


def test_every_method_taking_its_list_one_by_one_is_checked():
    from thunder.torch.registry import takes_list_as_varargs

    found = {key.__name__ for key in TORCH_TO_SYMBOL if takes_list_as_varargs(key)}
    assert found == set(VARARGS_CALLS)


@pytest.mark.parametrize("name", sorted(VARARGS_CALLS))
def test_a_list_of_ints_given_one_by_one(name):
    """HF diffusers' SVD UNet calls ``x.broadcast_to(b, c, h, w)``; ``x.squeeze(1, 2)`` squeezes two dims."""
    x = torch.arange(6.0).reshape(2, 1, 1, 3)

    def f(x):
        out = getattr(x, name)(*VARARGS_CALLS[name])
        return out.fill_(1.0) if name == "new_empty" else out

    expected = f(x)
    actual = thunder.jit(f)(x)
    assert actual.shape == expected.shape and torch.equal(actual, expected)
