"""The python executor: what the statements of traces run, and arithmetic on numbers as Python runs it.

The statements (return, del, unpacking, prologue checks) are symbols of the IR, defined in
thunder/core/statements.py; the checks print as calls of the functions of the same names defined here.
They raise ``CacheMiss`` when a cache entry does not apply to a call, so a hit costs only the checks
themselves.
"""
from __future__ import annotations

from math import copysign as _copysign
import weakref as _weakref

import torch
from torch.nn.modules import module as _module_module

_has_internal_overlap = torch._debug_has_internal_overlap  # 1: elements that share memory

from thunder.core.codeutils import flat_proxies
from thunder.extend import OperatorExecutor, register_executor

# Transitional: thunder/driver/pipeline.py, thunder/driver/runtime.py and thunder/transforms/autodiff.py (being
# redesigned) still read these statements here; once they import thunder.core.statements, remove this line.
from thunder.core.statements import CHECKS, clear_mutable_collection, python_return, unpack_sequence  # noqa: F401

ex = OperatorExecutor("python")
register_executor(ex, always=True)


class CacheMiss(Exception):
    """A prologue check failed: this cache entry does not apply to the call."""


# -- prologue checks ---------------------------------------------------------------------------


def check_tensor(t, shape: tuple, device: torch.device, dtype: torch.dtype, requires_grad: bool):
    if (not isinstance(t, torch.Tensor) or t.shape != shape or t.dtype is not dtype or t.requires_grad is not requires_grad
            or t.device != device):
        raise CacheMiss


def check_layout(t, strides: tuple, storage_offset: int):
    if t.stride() != strides or t.storage_offset() != storage_offset:
        raise CacheMiss


def check_strides(t, strides: tuple):
    """The strides alone: of an input the layouts of fused outputs follow (where it starts in memory does not matter)."""
    if t.stride() != strides:
        raise CacheMiss


def check_distinct(tensors: tuple):
    """Tensor arguments that were different objects while tracing are different objects now."""
    if len({id(t) for t in tensors}) != len(tensors):
        raise CacheMiss


def check_unshared(updated: tuple, tensors: tuple):
    """Tensor arguments the trace updates in place share no memory with the other tensor arguments, nor their
    elements with each other (an expanded tensor's, which tracing refuses to update)."""
    for u in updated:
        if _has_internal_overlap(u) == 1:
            raise CacheMiss
        ptr = u.untyped_storage().data_ptr()
        for t in tensors:
            if t is not u and t.untyped_storage().data_ptr() == ptr and ptr:
                raise CacheMiss


def check_len(seq, n: int):
    if len(seq) != n:
        raise CacheMiss


def check_keys(d, keys: tuple):
    if tuple(d) != keys:
        raise CacheMiss


def check_literal(x, value):
    """``x`` is ``value`` (a number, string, dtype, device, slice, None, ...) of the same type."""
    if type(x) is not type(value) or x != value:
        raise CacheMiss


def check_number(x, value):
    """``x`` is the float or complex ``value`` as a program sees it: NaN matches NaN, 0.0 does not match -0.0."""
    if type(x) is not type(value) or not same_value(x, value):
        raise CacheMiss


def check_type(x, typ: type):
    if type(x) is not typ:
        raise CacheMiss


def check_is(x, obj):
    if x is not obj:
        raise CacheMiss


def check_same_object(x, ref):
    """``x`` is the object ``ref`` (a weak reference) refers to: the cache does not keep it alive."""
    if x is not ref():
        raise CacheMiss


def check_id(x, ident: int, typ: type):
    """``x`` is the object with this id (one that takes no weak reference) and type."""
    if id(x) != ident or type(x) is not typ:
        raise CacheMiss


_any_autocast = torch._C._is_any_autocast_enabled
_deterministic = torch._C._get_deterministic_algorithms
GLOBAL_MODULE_HOOKS = ("_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_pre_hooks",
                       "_global_forward_hooks", "_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called")


def check_global_state(grad_enabled: bool, default_dtype, autocast_state: tuple, deterministic: bool = False,
                       inference: bool = False):
    if (torch.is_grad_enabled() is not grad_enabled or torch.get_default_dtype() is not default_dtype
            or _deterministic() is not deterministic):
        raise CacheMiss
    if not grad_enabled and _inference_mode() is not inference:  # no_grad and inference_mode trace differently
        raise CacheMiss
    if autocast_state[0] or autocast_state[2]:
        if _autocast_state() != autocast_state:
            raise CacheMiss
    elif _any_autocast():
        raise CacheMiss


_inference_mode = torch.is_inference_mode_enabled


def _autocast_state():
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_enabled("cuda"),
            torch.get_autocast_dtype("cuda"))


def check_training(modules: tuple, flags: tuple):
    for m, f in zip(modules, flags):
        if m.training is not f:
            raise CacheMiss


# -- checks of Python state (see [Note: Python state] in thunder/driver/python_state.py) ------------------


class _Missing:
    """Stands for an attribute, key, global or cell that holds nothing."""

    __slots__ = ()

    def __repr__(self):
        return "MISSING"

    def __reduce__(self):
        return "MISSING"


MISSING = _Missing()


class Contents:
    """A list, dict or set as the program read it while traced: a later value matches by its contents."""

    __slots__ = ("type", "items", "same")

    def __init__(self, typ: type, items: tuple):
        self.type = typ
        self.items = items  # (key, value) pairs for mappings, elements otherwise
        self.same = None  # when set, the very container too (one the cache entry writes into)

    def matches(self, x) -> bool:
        if type(x) is not self.type or len(x) != len(self.items) or (self.same is not None and x is not self.same):
            return False
        if isinstance(x, (set, frozenset)):
            return x == self.items  # (a frozenset)
        pairs = zip(x.items(), self.items) if isinstance(x, dict) else zip(x, self.items)
        if isinstance(x, dict):
            return all((k is k0 or same_value(k, k0)) and (v is v0 or same_value(v, v0)) for (k, v), (k0, v0) in pairs)
        return all(a is b or same_value(a, b) for a, b in pairs)

    def __repr__(self):
        return f"Contents({self.type.__name__}, {self.items!r})"


class MethodOf:
    """A method bound afresh on each read (a classmethod read through its class): matches by function and owner."""

    __slots__ = ("func", "owner")

    def __init__(self, method):
        self.func, self.owner = method.__func__, method.__self__

    def matches(self, x) -> bool:
        return getattr(x, "__func__", None) is self.func and getattr(x, "__self__", None) is self.owner

    def __repr__(self):
        return f"MethodOf({self.func.__qualname__})"


class InstanceOf:
    """An object the program replaced after reading it (see ``StateRecorder.replaced_objects``): any object of its
    class matches; what the program read from it is checked on the object found there."""

    __slots__ = ("cls",)

    def __init__(self, cls: type):
        self.cls = cls

    def matches(self, x) -> bool:
        return type(x) is self.cls

    def __repr__(self):
        return f"InstanceOf({self.cls.__qualname__})"


_EQUAL_TYPES = frozenset({int, bool, str, bytes, type(None), torch.dtype, torch.device, type(Ellipsis), range})


_SNAPSHOT_TYPES = {Contents, MethodOf, InstanceOf}


def register_snapshot_type(cls: type):
    """Expected values of this class are matched by their ``matches(x)`` method."""
    _SNAPSHOT_TYPES.add(cls)


def same_value(x, v) -> bool:
    """Whether ``x`` (read now) is the value the trace saw as ``v`` (callers test ``x is v`` first).

    Value-like values match by type and value (NaN matches NaN of the same sign, 0.0 does not match -0.0,
    so a trace never mixes them up); ``Contents`` and ``MethodOf`` by what they describe; weak references by the
    living object they refer to; anything else only by identity.
    """
    t = type(v)
    if t in _SNAPSHOT_TYPES:
        return v.matches(x)
    if type(x) is not t:
        return False
    if t is float:
        if x != x:  # NaN: any NaN of the same sign (the sign shows in results, e.g. torch.signbit)
            return v != v and _copysign(1.0, x) == _copysign(1.0, v)
        return x == v and (x != 0.0 or _copysign(1.0, x) == _copysign(1.0, v))
    if t is complex:
        return same_value(x.real, v.real) and same_value(x.imag, v.imag)
    if t in _EQUAL_TYPES:
        return x == v
    if t is tuple or t is torch.Size or (issubclass(t, tuple) and hasattr(t, "_fields")):
        return len(x) == len(v) and all(a is b or same_value(a, b) for a, b in zip(x, v))
    if t is frozenset:
        return x == v
    if t is slice:
        return same_value((x.start, x.stop, x.step), (v.start, v.stop, v.step))
    if t is _weakref.ReferenceType:  # nn.LSTM's _flat_weight_refs, remade when it sees other weights
        referent = v()
        return referent is not None and x() is referent
    return False


def check_values(compute, tensors: tuple, value):
    """A value of a tensor the trace specialized on, computed from the call's tensor arguments as ``compute`` does
    (see [Note: value guards] in thunder/driver/value_guards.py), is ``value``."""
    if not _same_nested(compute(*tensors), value):
        raise CacheMiss


def _same_nested(x, v) -> bool:
    if type(v) is list:  # Tensor.tolist()
        return type(x) is list and len(x) == len(v) and all(_same_nested(a, b) for a, b in zip(x, v))
    return same_value(x, v)


_FAST_EQUAL = frozenset({int, float, str, bytes})


# [Note: fast checks] A prologue check compares what a name holds now (x) with what the trace read (v): mostly
# the very same object (``x is v``); else, for ints, floats and strings, an equal value of the same type, nonzero
# (the sign of a float zero matters); else ``same_value``, which knows NaN, signed zeros, tuples and snapshots.
def check_items(d, names: tuple, values: tuple):
    """Each name in the mapping ``d`` (an object's ``__dict__``, a module's ``_modules``, a globals dict) holds
    what the trace read there (``MISSING``: nothing)."""
    get = d.get
    for name, v in zip(names, values):
        x = get(name, MISSING)
        if x is not v and not (type(x) is type(v) in _FAST_EQUAL and x == v and x) and not same_value(x, v):
            raise CacheMiss


def check_attrs(obj, names: tuple, values: tuple):
    """As ``check_items``, for attributes read through ``getattr`` (slots, properties of objects without a ``__dict__``)."""
    for name, v in zip(names, values):
        x = getattr(obj, name, MISSING)
        if x is not v and not (type(x) is type(v) in _FAST_EQUAL and x == v and x) and not same_value(x, v):
            raise CacheMiss


def check_class_attrs(cls: type, names: tuple, values: tuple):
    """Attributes the program read through a class (methods such as ``forward``, class constants) are unchanged."""
    for name, v in zip(names, values):
        x = getattr(cls, name, MISSING)
        if x is not v and not (type(x) is type(v) in _FAST_EQUAL and x == v and x) and not same_value(x, v):
            raise CacheMiss


def check_cells(cells: tuple, values: tuple):
    """Closure cells of the functions that ran hold what they held while traced."""
    for cell, v in zip(cells, values):
        try:
            x = cell.cell_contents
        except ValueError:  # an empty cell
            x = MISSING
        if x is not v and not (type(x) is type(v) in _FAST_EQUAL and x == v and x) and not same_value(x, v):
            raise CacheMiss


def check_types(objects: tuple, classes: tuple):
    for obj, cls in zip(objects, classes):
        if type(obj) is not cls:
            raise CacheMiss


def check_module_calls(modules: tuple, classes: tuple):
    """Each module is of its class and called as when traced: through the class's ``forward``, without hooks or
    a compiled call."""
    for m, cls in zip(modules, classes):
        d = m.__dict__
        if (type(m) is not cls or d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"]
                or d["_backward_pre_hooks"] or d.get("_compiled_call_impl") is not None or "forward" in d
                or "_call_impl" in d):
            raise CacheMiss


_GLOBAL_HOOK_DICTS = tuple(getattr(_module_module, n) for n in GLOBAL_MODULE_HOOKS)
_G0, _G1, _G2, _G3 = _GLOBAL_HOOK_DICTS[:4]


def check_global_module_hooks(snapshots: tuple):
    """torch's global module hooks (``register_module_forward_hook`` & co.) are those the trace ran: usually none."""
    if not snapshots:
        if _G0 or _G1 or _G2 or _G3:
            raise CacheMiss
        return
    for d, snap in zip(_GLOBAL_HOOK_DICTS, snapshots):
        if not snap.matches(d):
            raise CacheMiss


def global_module_hooks() -> tuple:
    """The state ``check_global_module_hooks`` checks: () when there are no global module hooks."""
    if not any(_GLOBAL_HOOK_DICTS):
        return ()
    return tuple(Contents(type(d), tuple(d.items())) for d in _GLOBAL_HOOK_DICTS)


# -- numbers: arithmetic on NumberProxies runs as Python (see [Note: Python number semantics]) -----

from thunder.core import prims  # noqa: E402
from thunder.core.proxies import TensorProxy  # noqa: E402

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//", "remainder": "%", "pow": "**",
          "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "bitwise_left_shift": "<<",
          "bitwise_right_shift": ">>"}
_PREFIX = {"neg": "-", "bitwise_not": "~"}


def _operand(p, x) -> str:
    s = p.value(x)
    return f"({s})" if s.startswith("-") else s


def _number_printer(name, fn):
    def printer(bsym, p):
        out = p.output(bsym.output)
        args = [_operand(p, a) for a in bsym.args]
        if name in _INFIX:
            return f"{out} = {args[0]} {_INFIX[name]} {args[1]}"
        if name in _PREFIX:
            return f"{out} = {_PREFIX[name]}{args[0]}"
        if getattr(fn, "__module__", None) == "math":
            p.imports["import math"] = None
            callee = f"math.{fn.__name__}"
        elif fn in (abs, round, max, min):
            callee = fn.__name__
        else:
            callee = p.constant(fn, f"number_{name}")
        return f"{out} = {callee}({', '.join(args)})"

    return printer


def _numbers_only(*args, **kwargs) -> bool:
    return not any(isinstance(a, TensorProxy) for a in flat_proxies((args, kwargs)))


for _name, _fn in prims.NUMBER_FNS.items():
    ex.register_implementation(getattr(prims, _name),
                               ex.register_operator(f"number_{_name}", fn=_fn, printer=_number_printer(_name, _fn)),
                               checker=_numbers_only)


def _extent(t, dim):
    return t.shape[dim]


ex.register_implementation(prims.size, ex.register_operator(
    "size", fn=_extent, printer=lambda b, p: f"{b.output.name} = {p.value(b.args[0])}.shape[{b.args[1]}]"))
