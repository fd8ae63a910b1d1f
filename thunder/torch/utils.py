"""Torch semantics shared by the torch language: dims, broadcasting, type promotion."""
from __future__ import annotations

from numbers import Number

import torch
import enum

from thunder.core import prims
from thunder.core.extents import same_shape
from thunder.core.proxies import TensorProxy, NumberProxy

__all__ = ["Kind", "canonicalize_dim", "canonicalize_dims", "expand_to", "broadcast", "promote", "common_dtype",
           "convert", "on_cpu", "rounded_to", "widened", "elementwise_unary", "elementwise_binary", "check",
           "is_tensor", "to_dtype_arg"]


def check(cond: bool, msg, exc=RuntimeError):
    if not cond:
        raise exc(msg() if callable(msg) else msg)


def is_tensor(x) -> bool:
    return isinstance(x, TensorProxy)


def canonicalize_dim(ndim: int, dim: int) -> int:
    rank = max(ndim, 1)
    check(-rank <= dim < rank, lambda: f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})",
          IndexError)
    return dim % rank if ndim > 0 else 0


def canonicalize_dims(ndim: int, dims) -> tuple:
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(canonicalize_dim(ndim, int(d)) for d in dims)


def expand_to(a, shape) -> TensorProxy:
    """Broadcasts ``a`` to ``shape`` (torch's rules), recording nothing if it already has that shape."""
    shape = tuple(shape)
    if same_shape(tuple(a.shape), shape):
        return a
    offset = len(shape) - a.ndim
    check(offset >= 0, lambda: f"cannot broadcast {tuple(a.shape)} to {shape}")
    return prims.broadcast_in_dim(a, shape, tuple(range(offset, len(shape))))


def broadcast(*args):
    shapes = [tuple(a.shape) for a in args if isinstance(a, TensorProxy)]
    if len(shapes) <= 1:
        return args
    shape = tuple(prims.broadcast_shapes(*shapes))
    return tuple(expand_to(a, shape) if isinstance(a, TensorProxy) else a for a in args)


class Kind(enum.Enum):
    """How an elementwise operation maps its promoted input dtype to its result dtype (as in torch)."""

    DEFAULT = enum.auto()
    NO_OPMATH = enum.auto()
    INT_TO_FLOAT = enum.auto()
    ALWAYS_BOOL = enum.auto()
    COMPLEX_TO_FLOAT = enum.auto()
    BOOL_TO_LONG = enum.auto()


_CATEGORY = {bool: 0, int: 1, float: 2, complex: 3}
_COMPLEX_OF = {torch.float16: torch.complex32, torch.bfloat16: torch.complex64, torch.float32: torch.complex64,
               torch.float64: torch.complex128}
_REAL_OF = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
_OPMATH = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}


def _category_of_dtype(dtype) -> int:
    if dtype is torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 1


def _number_category(x) -> int:
    if isinstance(x, NumberProxy):
        return _CATEGORY[x.python_type]
    if isinstance(x, bool):
        return 0
    if isinstance(x, int):
        return 1
    if isinstance(x, float):
        return 2
    return 3


def _highest_tensor_dtype(tensors, accept, as_complex=False):
    dim_dtype = zero_dtype = None
    for t in tensors:
        dtype = t.dtype
        if not accept(dtype):
            continue
        if as_complex and dtype.is_floating_point:
            dtype = _COMPLEX_OF[dtype]
        if t.ndim == 0:
            zero_dtype = dtype if zero_dtype is None else torch.promote_types(zero_dtype, dtype)
        else:
            dim_dtype = dtype if dim_dtype is None else torch.promote_types(dim_dtype, dtype)
    return dim_dtype if dim_dtype is not None else zero_dtype


def promote(*args, kind=Kind.DEFAULT):
    """(computation dtype, result dtype) of an elementwise op, by torch's type promotion rules."""
    dtype = common_dtype(*args, kind=kind)
    if kind is Kind.NO_OPMATH:
        return dtype, dtype
    computation = _OPMATH.get(dtype, dtype)
    if kind is Kind.ALWAYS_BOOL:
        return computation, torch.bool
    if kind is Kind.COMPLEX_TO_FLOAT and dtype.is_complex:
        return computation, _REAL_OF[dtype]
    return computation, dtype


def common_dtype(*args, kind=Kind.DEFAULT):
    """The dtype torch's TensorIterator casts an elementwise op's operands to (before its kernel widens a float16 or
    bfloat16 one to float32 to compute)."""
    args = [a for a in args if a is not None]
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    highest = 0
    for a in args:
        c = _category_of_dtype(a.dtype) if isinstance(a, torch.Tensor) else _number_category(a)
        highest = max(highest, c)
    if highest == 3:
        dtype = _highest_tensor_dtype(tensors, lambda d: d.is_floating_point or d.is_complex, as_complex=True)
        dtype = dtype or _COMPLEX_OF[torch.get_default_dtype()]
    elif highest == 2:
        dtype = _highest_tensor_dtype(tensors, lambda d: d.is_floating_point) or torch.get_default_dtype()
    elif highest == 1:
        dtype = _highest_tensor_dtype(tensors, lambda d: _category_of_dtype(d) == 1) or torch.int64
    else:
        dtype = torch.bool
    if kind is Kind.INT_TO_FLOAT and _category_of_dtype(dtype) < 2:
        dtype = torch.get_default_dtype()
    elif kind is Kind.BOOL_TO_LONG and dtype is torch.bool:
        dtype = torch.int64
    return dtype


def convert(a, dtype):
    if isinstance(a, TensorProxy):
        return a if a.dtype is dtype else prims.convert_element_type(a, dtype)
    if isinstance(a, NumberProxy):
        return a
    if isinstance(a, Number) and dtype is not None:
        if dtype.is_complex:
            return complex(a)
        if dtype.is_floating_point:
            return float(a) if not isinstance(a, complex) else a
        if dtype is torch.bool:
            return bool(a)
        return int(a) if isinstance(a, float) else a  # torch casts a float scalar to an integer dtype by truncation
    return a


def elementwise_unary(prim, a, kind=Kind.DEFAULT):
    if not isinstance(a, TensorProxy):
        return prim(a)
    computation, result = promote(a, kind=kind)
    return convert(prim(convert(a, computation)), result)


def elementwise_binary(prim, a, b, kind=Kind.DEFAULT, *, full_precision_scalar=False):
    """``prim`` of ``a`` and ``b`` computed as torch computes it. ``full_precision_scalar``: the CPU kernel reads a
    second operand of one element at its own precision (``mul`` and ``div``; see [Note: operands rounded to the
    common dtype])."""
    unrounded = (1,) if full_precision_scalar and _one_element(b) else ()
    # Convert before broadcasting: the gradient of a broadcast input is then summed in the
    # computation dtype and cast once, as eager autograd does (and the cast touches fewer elements).
    (a, b), result = widened(a, b, kind=kind, unrounded=unrounded)
    a, b = broadcast(a, b)
    out = prim(a, b)
    return convert(out, result)


# [Note: operands rounded to the common dtype]
# An elementwise op of a float16 or bfloat16 result computes in float32, but torch's CPU kernels see their operands
# first cast to the common dtype (TensorIterator casts its inputs): a float32 0-dim tensor, an integer tensor or a
# Python number meeting a bfloat16 tensor is rounded to bfloat16 before the kernel widens it. ``bf16 + 0.3`` adds
# 0.30078125, and ``floor_divide(t, t.bfloat16())`` of a 0-dim float32 ``t`` is 1 in eager, where ``t``'s float32 value
# over its rounding gave 0 (fused generated program nn 17936); comparisons likewise. ``mul`` and ``div`` read a
# second operand of one element at its own precision (their CPU kernels' ``original_scalar_value``): ``bf16 * 0.3``
# multiplies by 0.3. On CUDA the kernels read a CPU scalar at its own precision, which thunder keeps.
def on_cpu(*args) -> bool:
    devices = {x.device.type for x in args if isinstance(x, TensorProxy)}
    return devices == {"cpu"}


def widened(*operands, kind=Kind.DEFAULT, unrounded=()):
    """(the operands as one kernel reads them: rounded to the common dtype on the CPU, but those at the positions
    ``unrounded``, then in the computation dtype; the result dtype). An op composed of several computes on them with
    no rounding between its steps, as torch's single kernel does, and converts its result once."""
    computation, result = promote(*operands, kind=kind)
    common = common_dtype(*operands, kind=kind)
    if computation is not common and on_cpu(*operands):
        operands = tuple(x if i in unrounded else rounded_to(x, common) for i, x in enumerate(operands))
    return tuple(convert(x, computation) if x is not None else None for x in operands), result


def _one_element(x) -> bool:
    """A number, or a tensor of one element (no extent known only at run time)."""
    return not isinstance(x, TensorProxy) or all(type(n) is int and n == 1 for n in x.shape)


def rounded_to(x, dtype):
    """``x`` (a tensor or a number) as a kernel computing in ``dtype`` reads it."""
    if isinstance(x, TensorProxy):
        return convert(x, dtype)
    if type(x) in (int, float) and dtype in (torch.float16, torch.bfloat16):
        with torch._C.DisableTorchFunction():  # a constant, not a traced operation
            return torch.tensor(x, dtype=dtype).item()
    return x


def to_dtype_arg(dtype):
    return dtype if dtype is None or isinstance(dtype, torch.dtype) else torch.empty((), dtype=dtype).dtype
