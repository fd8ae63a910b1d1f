"""Proxies: the values a trace computes with.

A ``TensorProxy`` is a ``torch.Tensor`` wrapper subclass that carries metadata (shape, dtype,
device, requires_grad) but no storage, so library code that checks ``isinstance(x, torch.Tensor)``
or reads ``x.shape`` works unchanged while thunder records what is done with it. A
``NumberProxy`` stands for a Python number: an input (``cache="symbolic values"``), arithmetic on
inputs, or a tensor extent known only at run time. A tensor proxy whose shape holds such extents
is a ``SymbolicTensorProxy``: its ``shape`` is a tuple of ints and NumberProxies.

Proxies are compared by identity and named uniquely within a trace; never use ``==`` on a
``TensorProxy`` inside thunder (it is a torch operation, not a comparison).
"""
from __future__ import annotations

import numbers
import operator

import torch

from thunder.core import dtypes
from thunder.core.devices import device_str


class DataDependentError(RuntimeError):
    """Raised when traced code needs the *value* of a tensor (``if x.sum() > 0``, ``x.item()``)."""


def tensor_value(proxy: "TensorProxy", conversion: str, what: str, constant: bool = False):
    """The Python value ``what`` asks of ``proxy``, where the tracing driver can know it (see [Note: value guards] in
    thunder/driver/value_guards.py; ``constant``: only where it is computed from no input); else DataDependentError."""
    from thunder.core.trace import get_tracectx

    trace = get_tracectx()
    values = getattr(trace, "tensor_values", None)
    if values is None:
        _data_dependent(proxy, what)
    return values(proxy, conversion, what, constant)


def known_value(x):
    """A 0-dim tensor proxy's value, as a real CPU tensor, where the trace specialized on it (see [Note: value
    guards] in thunder/driver/value_guards.py); else None. Metadata computations pass it where torch reads the value
    even of meta tensors (``x.view(n, size_tensor)``)."""
    return getattr(x, "_thunder_value", None) if isinstance(x, TensorProxy) else None


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
        shape = tuple(shape)
        symbolic = any(isinstance(s, NumberProxy) for s in shape)
        if symbolic:
            cls = SymbolicTensorProxy
        t = torch.Tensor._make_wrapper_subclass(
            cls, tuple(_PLACEHOLDER if isinstance(s, NumberProxy) else s for s in shape) if symbolic else shape,
            dtype=dtype, device=device, requires_grad=requires_grad and dtypes.is_inexact(dtype))
        t.name = name
        if symbolic:
            t._thunder_shape = SymbolicSize(shape)
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
        return tensor_value(self, "bool", "Converting a tensor to a Python bool (Tensor.__bool__, e.g. `if tensor:`)")

    def item(self):
        return tensor_value(self, "item", "Tensor.item()")

    def tolist(self):
        return tensor_value(self, "tolist", "Tensor.tolist()")

    def numpy(self, *args, **kwargs):
        _data_dependent(self, "Tensor.numpy()")

    def __int__(self):
        return tensor_value(self, "int", "int(tensor)")

    def __float__(self):
        return tensor_value(self, "float", "float(tensor)")

    def __index__(self):
        return tensor_value(self, "index", "Using a tensor as an index (Tensor.__index__)")

    def __reduce_ex__(self, protocol):
        raise TypeError(f"TensorProxy {self.name} cannot be pickled")

    def __deepcopy__(self, memo):
        return self


# The size the C-level tensor of a SymbolicTensorProxy has in place of a run-time extent; thunder and
# the traced program read the extent itself through ``shape``, ``size()``, ``numel()`` and ``len()``.
_PLACEHOLDER = 8_191


# [Note: layout hints]
# A proxy knows its shape, dtype and device, not its strides: the layout of a value comes from the kernel that makes
# it at run time. Where thunder can tell that layout while tracing (attention's output and gradients, from torch's
# own meta kernels on fake tensors; a fused region's outputs, as its compiler lays them out), it notes it on the
# proxy: a fusion executor then compiles a region reading the value for that layout rather than for contiguous inputs
# (and again, at the first call, for the layout it gets).
# A hint only spares a compilation: a proxy without one, or a wrong one, costs one more at the first call. A hint may
# be given as a function computing it, called (once) only when a fusion executor asks for it: a prediction costs a
# fake-tensor run, and the first one in a process a second of imports.
def layout_hint(p: TensorProxy) -> tuple | None:
    """The strides ``p`` is expected to have at run time, where known while tracing (see [Note: layout hints])."""
    hint = getattr(p, "_thunder_layout", None)
    if callable(hint):
        strides = hint()
        valid = strides is not None and len(strides) == p.ndim and all(type(s) is int for s in strides)
        hint = p._thunder_layout = tuple(strides) if valid else None
    return hint


def set_layout_hint(p: TensorProxy, strides_or_fn) -> None:
    """Notes the strides ``p`` will have at run time: a tuple, or a function returning one (or None)."""
    p._thunder_layout = strides_or_fn


# [Note: random draws in eager's memory order]
# A random draw "like" a tensor (dropout's mask) fills a new tensor laid out like it, in memory order: which element
# gets which number depends on that layout. Run-time layouts are not eager's wherever a fusion executor lays a value
# out otherwise (HF Longformer's attention probabilities: a region wrote them head-major, eager contiguous, and every
# dropout mask differed from eager's). While tracing, the frontend knows the layout eager gives each tensor
# (thunder/driver/layouts.py) and answers ``eager_new_strides``; dropout's mask is drawn into a tensor of those
# strides, whatever layout its input has at run time. Without an answer (no tracer; a value only a decomposition made)
# it is drawn like its input at run time. Draws run whole by their torch kernels (``rand_like``, ``bernoulli``,
# dropout without autograd) follow their input's run-time layout: eager's, unless a fused region made that input.
_eager_strides_provider = None


def eager_new_strides(p: TensorProxy) -> tuple | None:
    """The strides eager gives a new tensor like ``p`` (``torch.empty_like``), where the tracer knows them; None
    otherwise (see [Note: random draws in eager's memory order])."""
    return _eager_strides_provider(p) if _eager_strides_provider is not None else None


def set_eager_strides_provider(fn) -> None:
    """Installs the function answering ``eager_new_strides`` (the frontend's, at its import)."""
    global _eager_strides_provider
    _eager_strides_provider = fn


class SymbolicSize(tuple):
    """The shape of a tensor with run-time extents: a tuple of ints and NumberProxies, used like ``torch.Size``."""

    def __getitem__(self, i):
        out = tuple.__getitem__(self, i)
        return SymbolicSize(out) if isinstance(i, slice) else out

    def numel(self):
        from thunder.core.extents import prod

        return prod(self)

    def __repr__(self):
        return "torch.Size([" + ", ".join(s.name if isinstance(s, NumberProxy) else str(s) for s in self) + "])"

    __str__ = __repr__


class SymbolicTensorProxy(TensorProxy):
    """A tensor proxy whose shape holds run-time extents (see [Note: run-time extents] in extents.py)."""

    __slots__ = ()

    @property
    def shape(self) -> SymbolicSize:
        return self._thunder_shape

    def size(self, dim=None):
        if dim is None:
            return self._thunder_shape
        return self._thunder_shape[operator.index(dim)]

    def numel(self):
        return self._thunder_shape.numel()

    nelement = numel

    @property
    def nbytes(self):
        return self.numel() * self.element_size()

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        first = self._thunder_shape[0]
        if isinstance(first, NumberProxy):
            raise first.data_dependent(f"len() of tensor {self.name}")
        return first

    def stride(self, dim=None):
        raise NotImplementedError(
            f"Tensor.stride() of {self.name}, whose shape {self._thunder_shape} has extents known only at run time, "
            "is not supported by thunder; avoid reading strides in the jitted function")


class FutureTensorProxy(TensorProxy):
    """The pending result of an asynchronous collective (``all_reduce(..., do_async=True)``): at run time a
    work handle, which ``wait`` turns into the tensor it describes. Prints as ``FUTURE cpu f32[4]``."""

    __slots__ = ()


def type_string(x) -> str:
    """``cpu f32[2, 2]`` for a tensor proxy (``cpu f32[i0, 2]`` with a run-time extent), ``int`` for numbers."""
    if isinstance(x, TensorProxy):
        shape = ", ".join(s.name if isinstance(s, NumberProxy) else str(s) for s in x.shape)
        future = "FUTURE " if isinstance(x, FutureTensorProxy) else ""
        return f"{future}{device_str(x.device)} {dtypes.short_name(x.dtype)}[{shape}]"
    if isinstance(x, NumberProxy):
        return f"{x.python_type.__name__}"
    return type(x).__name__


class NumberProxy:
    """A Python number the trace computes with: an input (``cache="symbolic values"``), arithmetic on
    inputs, or a tensor extent known only at run time (see [Note: run-time extents] in extents.py).

    [Note: Python number semantics]
    Arithmetic on a NumberProxy is recorded (``prims``) and runs as Python's own operators, so results
    have Python's values and types (true division, int ** negative int, float64 rounding, ...). What
    needs a concrete value (``bool()``, ``int()``, ``float()``, ``str()``, ``hash()``, indexing,
    comparisons for control flow) specializes the trace: the prologue then checks the input's value,
    as with ``cache="constant values"``. A run-time extent cannot be specialized: such uses raise
    ``DataDependentError`` naming the operation that produced it.
    """

    __slots__ = ("name", "python_type", "value", "inputs", "origin", "poly")

    def __new__(cls, name: str, python_type: type, value, inputs: frozenset, *, origin: str | None = None):
        return object.__new__(_PROXY_CLASSES[python_type] if cls is NumberProxy else cls)

    def __init__(self, name: str, python_type: type, value, inputs: frozenset, *, origin: str | None = None):
        self.name = name
        self.python_type = python_type
        self.value = value  # the value seen while tracing (None for run-time extents)
        self.inputs = inputs  # names of the NumberProxy inputs this value was computed from
        self.origin = origin  # for values known only at run time: which operation they come from
        self.poly = None  # canonical polynomial of run-time extents (thunder.core.extents.Poly)

    def data_dependent(self, what: str) -> DataDependentError:
        return DataDependentError(
            f"{what} needs the value of {self.name}, {self.origin}, which is known only when the program runs: "
            "thunder traces the program once for all such values. Keep it in tensor shapes and torch operations, "
            "or move the Python code that needs it (control flow, range(), int(), indexing, printing) out of the "
            "jitted function.")

    def _specialize(self, what: str = "Converting a number to a Python value"):
        """The value seen while tracing; the prologue will check that the inputs it depends on keep their values."""
        if self.origin is not None:
            raise self.data_dependent(what)
        from thunder.core.trace import get_tracectx

        trace = get_tracectx()
        if trace is not None:
            trace.specialized_numbers.update(self.inputs)
        return self.value

    def __repr__(self):
        if self.origin is not None:
            return f"{self.name}"
        return repr(self._specialize("repr()"))

    def __str__(self):
        return str(self._specialize("str()"))

    def __format__(self, spec):
        return format(self._specialize("Formatting (f-string, str.format)"), spec)

    def __bool__(self):
        return bool(self._specialize("bool() (e.g. `if n:`)"))

    def __int__(self):
        return int(self._specialize("int()"))

    def __float__(self):
        return float(self._specialize("float()"))

    def __complex__(self):
        return complex(self._specialize("complex()"))

    def __index__(self):
        return operator.index(self._specialize("Using a number as an index or size (__index__)"))

    def __hash__(self):
        return hash(self._specialize("hash() (a dict key or set member)"))

    @property
    def __class__(self):
        # ``isinstance(n, int)`` holds for an int proxy, as for the number it stands for; ``type(n)`` is the proxy's class
        return self.python_type

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError(f"NumberProxy {self.name} cannot be pickled")


def _number_attribute(name: str):
    return property(lambda self: getattr(self._specialize(f"The attribute .{name}"), name))


for _attr in ("real", "imag", "conjugate", "is_integer", "bit_length", "bit_count", "as_integer_ratio", "numerator",
              "denominator", "hex"):
    setattr(NumberProxy, _attr, _number_attribute(_attr))


# [Note: number proxies reach the tracing mode]
# torch's argument parser takes a torch.SymInt or torch.SymFloat wherever it takes an int or a float
# (sizes, scalars, dims) without converting it, so ``torch.zeros(n, 4)``, ``x * n`` and
# ``torch.full((2,), n)`` reach thunder's TorchFunctionMode with the proxy itself. Int and float
# proxies therefore subclass those classes (none of their symbolic machinery is used); other proxies
# (complex, bool) are made visible to the parser by ``__torch_function__``.
class IntProxy(NumberProxy, torch.SymInt):
    __slots__ = ()


class FloatProxy(NumberProxy, torch.SymFloat):
    __slots__ = ()


class OtherNumberProxy(NumberProxy):
    __slots__ = ()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"thunder internal error: {func} was called with a NumberProxy outside tracing")


def _no_node(self):
    raise TypeError(
        f"The traced number {self.name} reached torch code that works on torch.SymInt/SymFloat shapes without going "
        "through a torch operation thunder traces (e.g. torch.broadcast_shapes on plain tuples); thunder cannot follow "
        f"it. Pass a concrete value there (int({self.name}) specializes the trace), or call it outside the jitted function.")


for _cls in (IntProxy, FloatProxy):  # torch.SymInt's and SymFloat's own methods need a symbolic node
    for _attr in ("as_integer_ratio", "bit_length", "conjugate", "is_integer"):
        setattr(_cls, _attr, _number_attribute(_attr))
    _cls.node = property(_no_node)

_PROXY_CLASSES = {int: IntProxy, float: FloatProxy, complex: OtherNumberProxy, bool: OtherNumberProxy}
_NUMBER_TYPES = (int, float, complex)

# Python operations on number proxies, filled in by thunder.core.prims (which records them):
# name -> fn(a, b) for binary operations, fn(a) for unary ones, fn(a, ndigits) for round.
NUMBER_OPS: dict = {}


def _is_number(x) -> bool:
    return isinstance(x, (NumberProxy, *_NUMBER_TYPES)) and not isinstance(x, torch.Tensor)


def _binary_method(op: str, reflected: bool = False):
    def method(self, other):
        if not _is_number(other):
            return NotImplemented  # a tensor operand: Tensor's reflected method records the torch operation
        return NUMBER_OPS[op](other, self) if reflected else NUMBER_OPS[op](self, other)

    method.__name__ = f"__{'r' if reflected else ''}{op}__"
    return method


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift",
            "divmod"):
    setattr(NumberProxy, f"__{_op}__", _binary_method(_op))
    setattr(NumberProxy, f"__r{_op}__", _binary_method(_op, reflected=True))

for _op in ("neg", "pos", "abs", "invert", "floor", "ceil", "trunc"):
    setattr(NumberProxy, f"__{_op}__", (lambda op: lambda self: NUMBER_OPS[op](self))(_op))


def _round(self, ndigits=None):
    return NUMBER_OPS["round"](self, ndigits)


NumberProxy.__round__ = _round


def _comparison(op):
    def method(self, other):
        if not _is_number(other):
            return NotImplemented
        if self.origin is not None or (isinstance(other, NumberProxy) and other.origin is not None):
            from thunder.core.extents import compare

            return compare(op, self, other)
        a = self._specialize("A comparison")
        b = other._specialize("A comparison") if isinstance(other, NumberProxy) else other
        return op(a, b)

    return method


for _name, _op in (("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt), ("le", operator.le),
                   ("gt", operator.gt), ("ge", operator.ge)):
    setattr(NumberProxy, f"__{_name}__", _comparison(_op))

numbers.Number.register(NumberProxy)


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
