"""Proxies: the values a trace computes with.

A ``TensorProxy`` is a ``torch.Tensor`` wrapper subclass that carries metadata (shape, dtype,
device, requires_grad) but no storage, so library code that checks ``isinstance(x, torch.Tensor)``
or reads ``x.shape`` works unchanged while thunder records what is done with it. A
``NumberProxy`` stands for a Python number that is a runtime input (``cache="symbolic values"``).

Proxies are compared by identity and named uniquely within a trace; never use ``==`` on a
``TensorProxy`` inside thunder (it is a torch operation, not a comparison).
"""
from __future__ import annotations

import torch

from thunder.core import dtypes
from thunder.core.devices import device_str


class DataDependentError(RuntimeError):
    """Raised when traced code needs the *value* of a tensor (``if x.sum() > 0``, ``x.item()``)."""


def _data_dependent(proxy: "TensorProxy", what: str):
    raise DataDependentError(
        f"{what} needs the value of tensor {proxy.name}, but thunder traces tensors without their values. "
        "Python control flow on shapes and numbers is specialized; control flow on tensor values is not "
        "supported. Express it with tensor operations (e.g. torch.where) or move it out of the jitted function."
    )


class TensorProxy(torch.Tensor):
    """A tensor known by its metadata only. ``name`` is its variable name in the trace."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self._thunder_name

    @name.setter
    def name(self, value: str):
        self._thunder_name = value

    @staticmethod
    def __new__(cls, name: str, shape, dtype: torch.dtype, device: torch.device, requires_grad: bool = False):
        t = torch.Tensor._make_wrapper_subclass(
            cls, tuple(shape), dtype=dtype, device=device, requires_grad=requires_grad and dtypes.is_inexact(dtype)
        )
        t.name = name
        return t

    # All torch functions are intercepted by the tracing mode; none may reach the proxy itself.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(
            f"thunder cannot trace {func}: it reached a traced tensor without going through torch's Python-level "
            "interception (__torch_function__), so thunder cannot record it. Express it with other torch operations, "
            "or call it outside the jitted function.")

    def __repr__(self, *, tensor_contents=None):
        return f'TensorProxy(name={self.name}, "{type_string(self)}")'

    __str__ = __repr__

    def __format__(self, spec):
        return repr(self)

    def __bool__(self):
        known = getattr(self, "_thunder_known", None)  # see [Note: comparisons decided by value ranges]
        if known is not None:
            return known
        _data_dependent(self, "Converting a tensor to a Python bool (Tensor.__bool__, e.g. `if tensor:`)")

    def item(self):
        _data_dependent(self, "Tensor.item()")

    def tolist(self):
        _data_dependent(self, "Tensor.tolist()")

    def numpy(self, *args, **kwargs):
        _data_dependent(self, "Tensor.numpy()")

    def __int__(self):
        _data_dependent(self, "int(tensor)")

    def __float__(self):
        _data_dependent(self, "float(tensor)")

    def __index__(self):
        _data_dependent(self, "Using a tensor as an index (Tensor.__index__)")

    def __reduce_ex__(self, protocol):
        raise TypeError(f"TensorProxy {self.name} cannot be pickled")

    def __deepcopy__(self, memo):
        return self


def type_string(x) -> str:
    """``cpu f32[2, 2]`` for a tensor proxy, ``int 3`` style for numbers."""
    if isinstance(x, TensorProxy):
        shape = ", ".join(str(s) for s in x.shape)
        return f"{device_str(x.device)} {dtypes.short_name(x.dtype)}[{shape}]"
    if isinstance(x, NumberProxy):
        return f"{x.python_type.__name__}"
    return type(x).__name__


class NumberProxy:
    """A Python number that is an input of the trace rather than a constant.

    Arithmetic on it is recorded. Converting it to a concrete Python value (``bool()``, ``int()``,
    indexing, comparisons used for control flow) specializes the trace on its current value: the
    prologue then checks that value, exactly as with ``cache="constant values"``.
    """

    __slots__ = ("name", "python_type", "value", "inputs")

    def __init__(self, name: str, python_type: type, value, inputs: frozenset):
        self.name = name
        self.python_type = python_type
        self.value = value  # the value seen while tracing
        self.inputs = inputs  # names of the NumberProxy inputs this value was computed from

    def __repr__(self):
        return f"NumberProxy(name={self.name}, {self.python_type.__name__})"

    def _specialize(self):
        from thunder.core.trace import get_tracectx

        trace = get_tracectx()
        if trace is not None:
            trace.specialized_numbers.update(self.inputs)
        return self.value

    def __bool__(self):
        return bool(self._specialize())

    def __int__(self):
        return int(self._specialize())

    def __float__(self):
        return float(self._specialize())

    def __index__(self):
        return self._specialize().__index__()

    def __hash__(self):
        return id(self)

    # Comparisons produce Python bools for control flow: they specialize.
    def __eq__(self, other):
        return self._specialize() == _concrete(other)

    def __ne__(self, other):
        return self._specialize() != _concrete(other)

    def __lt__(self, other):
        return self._specialize() < _concrete(other)

    def __le__(self, other):
        return self._specialize() <= _concrete(other)

    def __gt__(self, other):
        return self._specialize() > _concrete(other)

    def __ge__(self, other):
        return self._specialize() >= _concrete(other)


def _concrete(x):
    return x._specialize() if isinstance(x, NumberProxy) else x


_TENSOR_OPS = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "floor_divide": "floor_divide",
               "remainder": "remainder", "pow": "pow"}


def _number_binary(name: str, reflected: bool = False):
    def method(self, other):
        from thunder.core import prims

        if isinstance(other, TensorProxy):
            # tensor (op) number: the torch-language op, recorded through the active tracer
            from thunder.core.frontend import current_tracer
            import thunder.torch as ltorch

            sym = getattr(ltorch, _TENSOR_OPS[name])
            args = (other, self) if reflected else (self, other)
            return current_tracer().call(sym, args, {})
        if not isinstance(other, (int, float, bool, NumberProxy)) or isinstance(other, torch.Tensor):
            return NotImplemented
        fn = getattr(prims, name)
        return fn(other, self) if reflected else fn(self, other)

    return method


for _op, _prim in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"), ("floordiv", "floor_divide"),
                   ("mod", "remainder"), ("pow", "pow")):
    setattr(NumberProxy, f"__{_op}__", _number_binary(_prim))
    setattr(NumberProxy, f"__r{_op}__", _number_binary(_prim, reflected=True))


def _number_neg(self):
    from thunder.core import prims

    return prims.neg(self)


NumberProxy.__neg__ = _number_neg
NumberProxy.__pos__ = lambda self: self
NumberProxy.__abs__ = lambda self: __import__("thunder.core.prims", fromlist=["abs"]).abs(self)

class Var:
    """A named value of any Python type, used by prologues (``args``, a module, a list)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name


Proxy = (TensorProxy, NumberProxy)


def is_proxy(x) -> bool:
    return isinstance(x, (TensorProxy, NumberProxy))
