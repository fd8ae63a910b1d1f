"""The generic fallback for torch operations the torch language does not define.

An operation without a thunder definition is still traced: its output metadata comes from torch's
own meta kernels, the torch executor runs the torch callable itself, and autodiff differentiates it
with torch's autograd. So an unusual op costs a little readability, never the whole model. Only an
op that cannot produce metadata without data (``nonzero``, ``unique``, ...) stops tracing, with a
``NotImplementedError`` that names it. See [Note: in-place fallback] for operations that update a tensor.
"""
from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.symbol import Symbol, Tag
from thunder.core.trace import get_tracectx
from thunder.torch.registry import signature_of

_NAMESPACES = (("torch.nn.functional", torch.nn.functional), ("torch.special", torch.special),
               ("torch.linalg", torch.linalg), ("torch.fft", torch.fft), ("torch", torch))

_RANDOM_NAMES = frozenset({"bernoulli", "multinomial", "normal", "poisson", "rand", "randn", "randint", "randperm",
                           "rand_like", "randn_like", "randint_like", "dropout", "alpha_dropout", "feature_alpha_dropout",
                           "dropout1d", "dropout2d", "dropout3d", "rrelu", "exponential_", "geometric_", "uniform_",
                           "normal_", "random_", "cauchy_", "log_normal_", "bernoulli_", "gumbel_softmax",
                           "dropout_", "alpha_dropout_", "feature_dropout_", "feature_alpha_dropout_", "rrelu_",
                           "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
                           "orthogonal_", "sparse_"})


_PATHS: dict[int, str] | None = None


def _build_paths() -> dict[int, str]:
    paths: dict[int, str] = {}
    for path, ns in reversed(_NAMESPACES):  # earlier namespaces win: torch.nn.functional.linear over torch.linear
        for name in dir(ns):
            if name.startswith("__"):
                continue
            obj = getattr(ns, name, None)
            if callable(obj):
                paths[id(obj)] = f"{path}.{name}"
    for name, obj in list(torch.Tensor.__dict__.items()) + list(torch._C.TensorBase.__dict__.items()):
        if callable(obj) and id(obj) not in paths:
            paths[id(obj)] = f"torch.Tensor.{name}"
    return paths


def printable_name(fn) -> str | None:
    """A dotted path under ``torch`` that names ``fn``, if there is one."""
    global _PATHS
    if isinstance(fn, torch._ops.OpOverload):
        return f"torch.ops.{fn.namespace}.{fn._opname}.{fn._overloadname}"
    if _PATHS is None:
        _PATHS = _build_paths()
    path = _PATHS.get(id(fn))
    if path is None:
        name = getattr(fn, "__name__", None)
        for cls in (torch.Tensor, torch._C.TensorBase):
            if name and cls.__dict__.get(name) is fn:
                return f"torch.Tensor.{name}"
    return path


def describe(fn) -> str:
    return printable_name(fn) or getattr(fn, "__qualname__", None) or repr(fn)


def _to_meta(x):
    if isinstance(x, TensorProxy):
        return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    if isinstance(x, NumberProxy):
        return x.value
    return x


def meta_outputs(fn, args, kwargs, *, device=None):
    """Outputs of ``fn(*args, **kwargs)`` as fresh proxies, computed by torch's meta kernels."""
    flat, _ = tree_flatten((args, kwargs))
    proxies = [x for x in flat if isinstance(x, TensorProxy)]
    if device is None:
        device = proxies[0].device if proxies else _factory_device(kwargs)
    margs, mkwargs = tree_map(_to_meta, (args, kwargs))
    if "device" in mkwargs and mkwargs["device"] is not None:
        mkwargs["device"] = "meta"
    try:
        with torch._C.DisableTorchFunction():
            out = fn(*margs, **mkwargs)
    except NotImplementedError as e:
        raise NotImplementedError(f"thunder cannot trace {describe(fn)}: torch has no meta kernel for it ({e})") from e
    except RuntimeError as e:
        msg = str(e)
        if "meta" in msg.lower() or "data-dependent" in msg or "Cannot" in msg and "meta" in msg:
            raise NotImplementedError(f"thunder cannot trace {describe(fn)}: its output depends on tensor values ({msg})") from e
        raise
    if proxies and not any(isinstance(x, torch.Tensor) for x in tree_flatten(out)[0]):
        raise NotImplementedError(
            f"thunder cannot trace {describe(fn)}: it returns a Python value ({type(out).__name__}) computed from "
            "tensor data, which is not known while tracing")
    requires_grad = torch.is_grad_enabled() and any(p.requires_grad for p in proxies)
    trace = get_tracectx()

    def to_proxy(x):
        if isinstance(x, torch.Tensor):
            return trace.tensor(tuple(x.shape), x.dtype, device, requires_grad and (x.dtype.is_floating_point or x.dtype.is_complex))
        return x

    return tree_map(to_proxy, out)


def _factory_device(kwargs):
    dev = kwargs.get("device")
    if dev is None:
        return torch.get_default_device()
    return torch.device(dev)


_FALLBACK_SYMBOLS: dict[object, Symbol] = {}


def fallback_symbol(fn) -> Symbol:
    """The symbol that records a call of the torch callable ``fn`` and runs it with torch."""
    sym = _FALLBACK_SYMBOLS.get(fn)
    if sym is not None:
        return sym
    path = printable_name(fn)
    name = path.removeprefix("torch.") if path else getattr(fn, "__name__", "op")
    tags = (Tag.RANDOM,) if getattr(fn, "__name__", "") in _RANDOM_NAMES else ()

    def meta(*args, **kwargs):
        return meta_outputs(fn, args, kwargs)

    sym = Symbol(name, meta, module="torch", is_prim=True, tags=tags, print_name=path)
    sym.torch_impl = fn
    sym.is_fallback = True
    if path is None:
        sym.printer = lambda bsym, printer: _print_constant_call(fn, bsym, printer)
    _FALLBACK_SYMBOLS[fn] = sym
    return sym


def _print_constant_call(fn, bsym, printer):
    callee = printer.constant(fn)
    call = f"{callee}({printer.call_args(bsym.args, bsym.kwargs)})"
    return f"{printer.output(bsym.output)} = {call}" if bsym.output is not None else call


def fallback_call(fn, args, kwargs):
    return fallback_symbol(fn)(*args, **kwargs)


# [Note: in-place fallback]
# A torch operation without a thunder definition may update its first argument in place: a Tensor
# method or torch function named ``op_`` (``scatter_``, ``zero_``, ``bernoulli_``, ``torch.relu_``),
# an augmented assignment (``__ior__``), an ``nn.init`` initializer, or an operation called with
# ``inplace=True``. Recording its call like an out-of-place one would lose the update (later reads
# of the tensor would see the old value), so it is recorded functionally, like the in-place
# operations thunder defines (see [Note: in-place updates] in thunder/core/functionalization.py):
# ``updated_copy(op, a, ...)`` runs ``op`` on a copy of ``a`` and returns the copy, and the tracer
# rebinds ``a`` to it. The same torch kernel runs, so values and random draws are eager's.
# Operations that change a tensor's shape, strides or storage in place cannot be expressed so and
# are refused with an error.

_INPLACE_DUNDERS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__idiv__", "__ifloordiv__",
                              "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                              "__imatmul__"})
_METADATA_INPLACE = frozenset({"resize_", "resize_as_", "resize_as_sparse_", "sparse_resize_",
                               "sparse_resize_and_clear_", "set_", "as_strided_", "squeeze_", "unsqueeze_", "t_",
                               "transpose_", "swapaxes_", "swapdims_", "detach_", "share_memory_", "apply_", "map_",
                               "map2_", "requires_grad_"})


def inplace_call(fn, args, kwargs):
    """``(symbol, args, kwargs)`` recording ``fn(*args, **kwargs)`` as an update of its first argument, which comes
    first in ``args``; None when the call updates nothing in place (see [Note: in-place fallback])."""
    if not _updates_in_place(fn, args, kwargs):
        return None
    if not args:  # nn.init's initializers pass the tensor by keyword
        args, kwargs = first_positional(fn, kwargs)
    if not args or not isinstance(args[0], TensorProxy):
        _refuse(fn, "its first argument is not a tensor")
    return inplace_fallback_symbol(fn), args, kwargs


def _updates_in_place(fn, args, kwargs) -> bool:
    if isinstance(fn, torch._ops.OpOverload):
        written = [a.name for a in fn._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if written and written != [fn._schema.arguments[0].name]:
            _refuse(fn, "it updates several of its arguments")
        return bool(written)
    name = getattr(fn, "__name__", "") or ""
    if name in _INPLACE_DUNDERS or name.endswith("_") and not name.endswith("__"):
        if name in _METADATA_INPLACE:
            _refuse(fn, "it changes a tensor's shape, strides or storage")
        return True
    return kwargs.get("inplace") is True or len(args) > 1 and _bound(fn, args).get("inplace") is True


def _refuse(fn, why: str):
    raise NotImplementedError(
        f"thunder cannot trace the in-place operation {describe(fn)}: {why}, which a functional trace cannot "
        "express. Use the out-of-place operation and assign its result instead")


def _bound(fn, args) -> dict:
    sig = signature_of(fn)
    try:
        return dict(sig.bind_partial(*args).arguments) if sig is not None else {}
    except TypeError:
        return {}


def first_positional(fn, kwargs):
    """``(args, kwargs)`` with ``fn``'s first parameter, given by keyword, passed positionally."""
    sig = signature_of(fn)
    first = next(iter(sig.parameters)) if sig is not None and sig.parameters else None
    if first not in kwargs:
        return (), kwargs
    kwargs = dict(kwargs)
    return (kwargs.pop(first),), kwargs


def updated_copy(fn, a, /, *args, **kwargs):
    """The value the in-place operation ``fn`` gives ``a``, computed on a copy of ``a`` (``a`` is unchanged)."""
    out = a.clone()
    fn(out, *args, **kwargs)
    return out


_INPLACE_SYMBOLS: dict[object, Symbol] = {}


def inplace_fallback_symbol(fn) -> Symbol:
    """The symbol recording ``fn``, an in-place torch operation, as ``updated_copy(fn, a, ...)``."""
    sym = _INPLACE_SYMBOLS.get(fn)
    if sym is not None:
        return sym
    path = printable_name(fn)
    name = path.removeprefix("torch.") if path else getattr(fn, "__name__", "op")
    tags = (Tag.RANDOM,) if getattr(fn, "__name__", "") in _RANDOM_NAMES else ()
    impl = functools.partial(updated_copy, fn)

    def meta(*args, **kwargs):
        return meta_outputs(impl, args, kwargs)

    sym = Symbol(f"updated_copy[{name}]", meta, module="torch", is_prim=True, tags=tags)
    sym.torch_impl = impl
    sym.is_fallback = True
    sym.printer = lambda bsym, printer: _print_updated_copy(fn, path, bsym, printer)
    _INPLACE_SYMBOLS[fn] = sym
    return sym


def _print_updated_copy(fn, path, bsym, printer):
    printer.imports["from thunder.torch.fallback import updated_copy"] = None
    callee = path if path is not None else printer.constant(fn)
    return f"{printer.output(bsym.output)} = updated_copy({callee}, {printer.call_args(bsym.args, bsym.kwargs)})"
