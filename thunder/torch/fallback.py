"""The generic fallback for torch operations the torch language does not define.

An operation without a thunder definition is still traced: its output metadata comes from torch's
own meta kernels, the torch executor runs the torch callable itself, and autodiff differentiates it
with torch's autograd. So an unusual op costs a little readability, never the whole model. Only an
op that cannot produce metadata without data (``nonzero``, ``unique``, ...) stops tracing, with a
``NotImplementedError`` that names it.
"""
from __future__ import annotations

import inspect

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.symbol import Symbol, Tag
from thunder.core.trace import get_tracectx
from thunder.torch.registry import property_key

_NAMESPACES = (("torch.nn.functional", torch.nn.functional), ("torch.special", torch.special),
               ("torch.linalg", torch.linalg), ("torch.fft", torch.fft), ("torch", torch))

_RANDOM_NAMES = frozenset({"bernoulli", "multinomial", "normal", "poisson", "rand", "randn", "randint", "randperm",
                           "rand_like", "randn_like", "randint_like", "dropout", "alpha_dropout", "feature_alpha_dropout",
                           "dropout1d", "dropout2d", "dropout3d", "rrelu", "exponential_", "geometric_", "uniform_",
                           "normal_", "random_", "cauchy_", "log_normal_", "bernoulli_", "gumbel_softmax"})


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
    manual = _MANUAL_META.get(fn)
    try:
        with torch._C.DisableTorchFunction():
            out = manual(*margs, **mkwargs) if manual is not None else fn(*margs, **mkwargs)
    except NotImplementedError as e:
        if "data-independent" in str(e) or "data-dependent" in str(e):
            raise NotImplementedError(_VALUE_DEPENDENT.format(describe(fn), e)) from e
        raise NotImplementedError(f"thunder cannot trace {describe(fn)}: torch has no meta kernel for it ({e})") from e
    except RuntimeError as e:
        msg = str(e)
        if "meta" in msg.lower() or "data-dependent" in msg or "Cannot" in msg and "meta" in msg:
            raise NotImplementedError(_VALUE_DEPENDENT.format(describe(fn), msg)) from e
        raise
    if proxies and not any(isinstance(x, torch.Tensor) for x in tree_flatten(out)[0]):
        raise NotImplementedError(
            f"thunder cannot trace {describe(fn)}: it returns a Python value ({type(out).__name__}) computed from "
            "tensor data, which is not known while tracing")
    requires_grad = (torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
                     and any(p.requires_grad for p in proxies))
    trace = get_tracectx()

    def to_proxy(x):
        if isinstance(x, torch.Tensor):
            return trace.tensor(tuple(x.shape), x.dtype, device, requires_grad and (x.dtype.is_floating_point or x.dtype.is_complex))
        return x

    return tree_map(to_proxy, out)


_VALUE_DEPENDENT = ("thunder cannot trace {}: it reads tensor values (its output's shape depends on them, or it "
                    "validates its inputs by value), and thunder traces without values ({}). Call it outside the "
                    "jitted function, or express it with operations whose output shapes do not depend on values.")


def _ctc_loss_meta(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    batch = () if log_probs.ndim == 2 else (log_probs.shape[1],)
    return torch.empty(batch if reduction == "none" else (), dtype=log_probs.dtype, device="meta")


# Output metadata of torch operations that have no meta kernel, computed from their arguments' metadata.
_MANUAL_META = {torch.nn.functional.ctc_loss: _ctc_loss_meta}


def _factory_device(kwargs):
    dev = kwargs.get("device")
    if dev is None:
        return torch.get_default_device()
    return torch.device(dev)


# Tensor methods that act on eager autograd's graph of the tensor itself. Inside a jitted function the
# tensor is a traced value and the backward one compiled program, so they could only be ignored: refused.
_HOOK_FIX = "Register it on a tensor outside the jitted function: an input before the call, or an output after it."
_REFUSED = {
    torch.Tensor.register_hook: "Tensor.register_hook inside a jitted function is not supported: thunder's backward is "
                                "one compiled program, and the hook would never be called. " + _HOOK_FIX,
    torch.Tensor.register_post_accumulate_grad_hook: "Tensor.register_post_accumulate_grad_hook inside a jitted "
                                                     "function is not supported. " + _HOOK_FIX,
    torch._C.TensorBase.retain_grad: "Tensor.retain_grad inside a jitted function is not supported: the tensor is a "
                                     "value inside thunder's compiled program and its .grad would stay None. Return the "
                                     "tensor and call retain_grad() on the result of the jitted call.",
}

_FALLBACK_SYMBOLS: dict[object, Symbol] = {}
_FALLBACK_IDS: set[str] = set()


def _getter_name(fn) -> str | None:
    """``Tensor.real`` for the getter of the ``real`` property (it arrives as a method-wrapper ``__get__``)."""
    owner = getattr(fn, "__self__", None)
    if getattr(fn, "__name__", None) == "__get__" and type(owner).__name__ == "getset_descriptor":
        return f"Tensor.{owner.__name__}"
    return None


# [Note: fallback symbol identity]
# One symbol per torch callable, keyed by the callable (a property getter by its descriptor, see
# ``registry.property_key``), and each symbol's id unique: executors map ids to implementations, so
# two callables sharing a name (the getters of ``Tensor.real`` and ``Tensor.imag`` are both
# ``__get__``) must never share an id, or one would run as the other.
def fallback_symbol(fn) -> Symbol:
    """The symbol that records a call of the torch callable ``fn`` and runs it with torch."""
    key = property_key(fn)
    sym = _FALLBACK_SYMBOLS.get(key)
    if sym is not None:
        return sym
    refused = _REFUSED.get(key)
    if refused is not None:
        raise NotImplementedError(refused)
    path = printable_name(fn)
    name = path.removeprefix("torch.") if path else _getter_name(fn) or getattr(fn, "__name__", "op")
    unique, i = name, 1
    while f"torch.{unique}" in _FALLBACK_IDS:
        unique, i = f"{name}_{i}", i + 1
    _FALLBACK_IDS.add(f"torch.{unique}")
    tags = (Tag.RANDOM,) if getattr(fn, "__name__", "") in _RANDOM_NAMES else ()
    inplace = _is_inplace(path)
    sig = _inplace_param_signature(fn)
    impl = _on_a_copy(fn) if inplace else _out_of_place(fn, sig) if sig is not None else fn

    def meta(*args, **kwargs):
        out = meta_outputs(fn, args, kwargs)
        if inplace or sig is not None and sig.bind(*args, **kwargs).arguments.get("inplace", False):
            from thunder.core.frontend import rebind  # see [Note: in-place fallback methods]

            rebind(args[0], out)
        return out

    sym = Symbol(unique, meta, module="torch", is_prim=True, tags=tags, print_name=path if impl is fn else None)
    sym.torch_impl = impl
    sym.is_fallback = True
    if path is None or impl is not fn:
        hint = "".join(c if c.isalnum() else "_" for c in unique)
        sym.printer = lambda bsym, printer: _print_constant_call(impl, hint, bsym, printer)
    _FALLBACK_SYMBOLS[key] = sym
    return sym


# [Note: in-place fallback methods]
# A Tensor method or torch function without a thunder definition that updates its first argument in
# place (``x.zero_()``, ``x.index_fill_(...)``, ``torch.rrelu_(x)``, ``torch.feature_dropout_(x, ...)``)
# is recorded functionally, as thunder's own in-place operations are (see [Note: in-place updates] in
# thunder/core/frontend.py): the torch executor runs it on a copy of the tensor, and the tensor is
# rebound to the result (written back if it is an input).
def _is_inplace(path: str | None) -> bool:
    if path is None or not path.startswith("torch."):
        return False
    name = path.rsplit(".", 1)[-1]
    return name.endswith("_") and not name.startswith("_")


def _inplace_param_signature(fn):
    """The signature of ``fn`` if it has an ``inplace`` parameter (``F.rrelu``, ``F.dropout1d``, ...)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return sig if "inplace" in sig.parameters else None


def _out_of_place(fn, sig):
    def functional(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.arguments["inplace"] = False
        return fn(*bound.args, **bound.kwargs)

    functional.__name__ = f"{fn.__name__}_out_of_place"
    return functional


def _on_a_copy(method):
    def functional(self, *args, **kwargs):
        return method(self.clone(), *args, **kwargs)

    functional.__name__ = f"{method.__name__}_on_a_copy"
    return functional


def _print_constant_call(fn, hint, bsym, printer):
    callee = printer.constant(fn, hint)
    call = f"{callee}({printer.call_args(bsym.args, bsym.kwargs)})"
    return f"{printer.output(bsym.output)} = {call}" if bsym.output is not None else call


def fallback_call(fn, args, kwargs):
    return fallback_symbol(fn)(*args, **kwargs)
