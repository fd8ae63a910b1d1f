"""The map from torch callables to thunder's torch-language symbols.

``@torchsymbol(torch.add, torch.Tensor.add, ...)`` defines an ``ltorch`` symbol and registers the torch
callables the tracing frontend translates to it. The torch executor runs a symbol registered this
way with its first torch callable, so a symbol's signature mirrors that callable's.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable

import torch

from thunder.core.proxies import NumberProxy
from thunder.core.pytree import tree_leaves, tree_map
from thunder.core.symbol import Symbol

# torch callable (function, method descriptor, getset descriptor) -> ltorch symbol
TORCH_TO_SYMBOL: dict[object, Symbol] = {}
# torch in-place callable -> (out-of-place symbol): ``x.add_(y)`` records ``ltorch.add`` and rebinds ``x``
INPLACE_TO_SYMBOL: dict[object, Symbol] = {}
# every ltorch symbol by name
SYMBOLS: dict[str, Symbol] = {}


def _method(name: str):
    return torch._C.TensorBase.__dict__.get(name) or getattr(torch.Tensor, name, None)


def _methods(name: str) -> list:
    """The C method and, where ``torch.Tensor`` overrides it in Python (``norm``, ``split``), the override too."""
    found = [torch._C.TensorBase.__dict__.get(name), torch.Tensor.__dict__.get(name)]
    found = [m for m in found if m is not None] or [getattr(torch.Tensor, name, None)]
    return [m for i, m in enumerate(found) if m is not None and m not in found[:i]]


def torchsymbol(*torch_fns, methods: tuple = (), inplace_methods: tuple = (), name: str | None = None, tags=(),
                torch_impl: Callable | None = None, view: bool = False, numbers: bool = False):
    """Defines an ltorch symbol from its decomposition.

    ``torch_fns`` and ``methods`` (Tensor method names) are translated to it while tracing;
    ``inplace_methods`` (``"add_"``) are translated to it followed by rebinding the tensor.
    ``torch_impl`` is what the torch executor runs (default: the first of ``torch_fns``).
    ``view`` marks operations whose torch result aliases their first input.
    ``numbers``: the definition takes NumberProxy arguments as they are (scalars of elementwise ops,
    fill values); otherwise it sees their values and the trace is specialized on them (see
    [Note: Python number semantics] in thunder/core/proxies.py). Run-time extents are always passed as they are.
    """

    def deco(fn):
        sym = Symbol(name or fn.__name__, fn if numbers else _number_values(fn), module="ltorch", tags=tags)
        sym.torch_impl = torch_impl if torch_impl is not None else (torch_fns[0] if torch_fns else None)
        sym.is_view = view
        sym.has_inplace_param = sym.signature is not None and "inplace" in sym.signature.parameters
        for tf in torch_fns:
            TORCH_TO_SYMBOL[tf] = sym
        for m in methods:
            for attr in _methods(m):
                TORCH_TO_SYMBOL[attr] = sym
        for m in inplace_methods:
            for attr in _methods(m):
                INPLACE_TO_SYMBOL[attr] = sym
        SYMBOLS[sym.name] = sym
        return sym

    return deco


@dataclasses.dataclass(frozen=True)
class Updates:
    """Returned by a torch-language function whose torch callable also updates some of its tensor arguments in
    place, the way autograd does not record (``F.batch_norm``'s running statistics): the call's result, and
    ``(argument, new value)`` pairs that the frontend applies as in-place updates."""

    result: Any
    updates: tuple


number_torchsymbol = functools.partial(torchsymbol, numbers=True)


def _number_values(fn):
    """``fn`` called with the values of its NumberProxy arguments (specializing the trace on them)."""

    @functools.wraps(fn)
    def definition(*args, **kwargs):
        return fn(*number_values(args), **number_values(kwargs))

    return definition


def has_number_proxy(x) -> bool:
    return any(isinstance(y, NumberProxy) for y in tree_leaves(x))


def number_values(x):
    """``x`` with the values of its NumberProxies (specializing the trace on them); run-time extents stay."""
    if not has_number_proxy(x):
        return x
    return tree_map(_number_value, x)


def _number_value(x):
    return x._specialize() if isinstance(x, NumberProxy) and x.origin is None else x


def property_key(func):
    """Key for a Tensor property getter: ``Tensor.shape.__get__`` arrives as a fresh method-wrapper."""
    owner = getattr(func, "__self__", None)
    if owner is not None and type(owner).__name__ == "getset_descriptor":
        return owner
    return func


def torch_overloads(fn) -> list[list]:
    """The arguments (``torch._C.Argument``, out= ones left out) of each overload of the builtin ``fn`` that Python
    calls: those taking a tensor (or a number) first; TorchScript's overloads on lists, strings and numbers are not."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{fn.__name__}")
    except (AttributeError, RuntimeError):
        return []
    overloads = []
    for schema in schemas:
        first = schema.arguments[0] if schema.arguments else None
        if first is not None and first.name in ("self", "input") and str(first.type) in ("Tensor", "number", "Scalar"):
            overloads.append([a for a in schema.arguments if not a.is_out])
    return overloads


@functools.cache
def torch_positions(fn) -> tuple[dict[str, int], dict[int, str]]:
    """Where torch's ``fn`` takes its arguments positionally, by the names torch accepts as keywords, and the other
    way round: from its Python signature, or for a builtin from the operator schemas of its overloads that take a
    tensor (or a number) first, ``self`` there being ``input`` to functions. A name found at two positions, or a
    position with two names (``torch.var(x, True)``: ``unbiased``; ``torch.var(x, 0)``: ``dim``), is left out.

    The frontend passes by position what torch names otherwise than thunder's definition
    (``torch.pow(x, exponent=2)``, ``torch.tensor_split(x, indices=(1,))``: a symbol's signature mirrors its torch
    callable's), and by name what one torch callable takes at another position than the definition's
    (``torch.softmax(x, 1, torch.float64)``: the definition's is ``F.softmax(x, dim, _stacklevel, dtype)``)."""
    sig = signature_of(fn)
    found: dict[str, set] = {}
    if sig is not None:
        positional = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        found = {name: {i} for i, name in enumerate(positional)}
    else:
        for arguments in torch_overloads(fn):
            for i, a in enumerate(a for a in arguments if not a.kwarg_only):
                found.setdefault(a.name, set()).add(i)
                if a.name == "self":
                    found.setdefault("input", set()).add(i)
    names: dict[int, set] = {}
    for name, where in found.items():
        for i in where:
            names.setdefault(i, set()).add(name)
    return ({name: i for name, (i, *more) in found.items() if not more},
            {i: name for i, (name, *more) in names.items() if not more and i > 0})


@functools.cache
def takes_list_as_varargs(fn) -> bool:
    """Whether torch's Python argument parser lets ``fn`` take its one list of ints one by one: a Tensor method whose
    only positional parameter besides ``self`` is an int list, in one of its overloads (``x.broadcast_to(2, 3)``,
    ``x.squeeze(0, 2)``, ``x.flip(0, 1)``)."""
    if getattr(fn, "__objclass__", None) is not torch._C.TensorBase:
        return False
    for arguments in torch_overloads(fn):
        positional = [a for a in arguments if not a.kwarg_only and a.name != "self"]
        if len(positional) == 1 and str(positional[0].type) in ("List[int]", "List[SymInt]", "int[]", "SymInt[]"):
            return True
    return False


def signature_of(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None
