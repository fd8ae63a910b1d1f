"""Primitives: the small set of operations everything else decomposes into.

Primitives have no broadcasting and no type promotion: a binary primitive takes tensors of one
shape and dtype (or Python numbers). The torch language (``thunder.torch``) implements torch's
semantics on top of them. Each primitive here is its meta function (how its output looks); the
torch executor gives each an implementation, and autodiff gives each a gradient rule.
"""
from __future__ import annotations

import builtins

import math
from numbers import Number

import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.symbol import Symbol, Tag
from thunder.core.trace import get_tracectx

_PRIMS: dict[str, Symbol] = {}


def make_prim(name: str, meta, *, tags=(), printer=None) -> Symbol:
    sym = Symbol(name, meta, module="prims", is_prim=True, tags=tags, printer=printer)
    _PRIMS[name] = sym
    globals()[name] = sym
    return sym


def all_prims() -> dict[str, Symbol]:
    return dict(_PRIMS)


def _new_tensor(shape, dtype, device, requires_grad=False) -> TensorProxy:
    return get_tracectx().tensor(tuple(int(s) for s in shape), dtype, device, requires_grad)


def _new_number(python_type, value, inputs) -> NumberProxy:
    trace = get_tracectx()
    prefix = {int: "i", float: "f", bool: "b", complex: "c"}[python_type]
    return NumberProxy(trace.make_name(prefix), python_type, value, frozenset(inputs))


def _requires_grad(*args) -> bool:
    """Whether an output computed from ``args`` is part of the autograd graph (as in torch)."""
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        return False
    return any(isinstance(a, TensorProxy) and a.requires_grad for a in args)


def broadcast_shapes(*shapes) -> tuple:
    """torch's broadcasting of shapes (without importing torch's symbolic-shape machinery)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if d == 1:
                continue
            if out[i] != 1 and out[i] != d:
                raise RuntimeError(f"The size of tensor a ({out[i]}) must match the size of tensor b ({d}) at non-singleton dimension {i}")
            out[i] = d
    # a dimension of size 0 broadcasts with 1 to 0
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if d == 0:
                out[i] = 0
    return tuple(out)


def _check(cond: bool, msg):
    if not cond:
        raise RuntimeError(msg() if callable(msg) else msg)


# ---------------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------------

def _number_value(fn, args):
    values = [a.value if isinstance(a, NumberProxy) else a for a in args]
    try:
        return fn(*values)
    except Exception:
        return None


def _elementwise_meta(name: str, nargs: int, *, output_dtype=None, number_fn=None):
    """Meta for elementwise primitives: tensors of one shape (numbers allowed), output of that shape."""

    def meta(*args):
        tensors = [a for a in args if isinstance(a, TensorProxy)]
        if not tensors:
            # Arithmetic on NumberProxy inputs (symbolic values).
            value = _number_value(number_fn, args) if number_fn else None
            inputs = set()
            for a in args:
                if isinstance(a, NumberProxy):
                    inputs |= a.inputs
            ptype = type(value) if value is not None else float
            return _new_number(ptype if ptype in (int, float, bool, complex) else float, value, inputs)
        t0 = tensors[0]
        for t in tensors[1:]:
            _check(tuple(t.shape) == tuple(t0.shape), lambda: f"prims.{name}: shapes {tuple(t0.shape)} and {tuple(t.shape)} differ")
            _check(t.device == t0.device, lambda: f"prims.{name}: devices {t0.device} and {t.device} differ")
        dtype = output_dtype(t0.dtype) if output_dtype else t0.dtype
        return _new_tensor(t0.shape, dtype, t0.device, _requires_grad(*args) and dtypes.is_inexact(dtype))

    meta.__name__ = name
    meta.__signature__ = _positional_signature(nargs)
    return meta


def _positional_signature(n: int):
    import inspect

    names = ["a", "b", "c"][:n]
    return inspect.Signature([inspect.Parameter(x, inspect.Parameter.POSITIONAL_ONLY) for x in names])


_BOOL = lambda dtype: torch.bool  # noqa: E731
_REAL = dtypes.to_real

UNARY = {
    "abs": (_REAL, abs), "neg": (None, lambda a: -a), "exp": (None, math.exp), "exp2": (None, lambda a: 2.0**a),
    "expm1": (None, math.expm1), "log": (None, math.log), "log1p": (None, math.log1p), "log2": (None, math.log2),
    "log10": (None, math.log10), "sin": (None, math.sin), "cos": (None, math.cos), "tan": (None, math.tan),
    "asin": (None, math.asin), "acos": (None, math.acos), "atan": (None, math.atan), "sinh": (None, math.sinh),
    "cosh": (None, math.cosh), "tanh": (None, math.tanh), "asinh": (None, math.asinh), "acosh": (None, math.acosh),
    "atanh": (None, math.atanh), "sqrt": (None, math.sqrt), "rsqrt": (None, lambda a: 1 / math.sqrt(a)),
    "reciprocal": (None, lambda a: 1 / a), "sign": (None, None), "floor": (None, math.floor), "ceil": (None, math.ceil),
    "round": (None, round), "trunc": (None, math.trunc), "erf": (None, math.erf), "erfc": (None, math.erfc),
    "erfinv": (None, None), "lgamma": (None, math.lgamma), "digamma": (None, None), "bitwise_not": (None, lambda a: ~a),
    "isfinite": (_BOOL, math.isfinite), "isnan": (_BOOL, math.isnan), "isinf": (_BOOL, math.isinf),
    "signbit": (_BOOL, None), "real": (_REAL, None), "imag": (_REAL, None), "sigmoid": (None, None),
}
for _name, (_out, _fn) in UNARY.items():
    make_prim(_name, _elementwise_meta(_name, 1, output_dtype=_out, number_fn=_fn))

BINARY = {
    "add": (None, lambda a, b: a + b), "sub": (None, lambda a, b: a - b), "mul": (None, lambda a, b: a * b),
    "div": (None, lambda a, b: a / b), "floor_divide": (None, lambda a, b: a // b),
    "remainder": (None, lambda a, b: a % b), "fmod": (None, math.fmod), "pow": (None, lambda a, b: a**b),
    "atan2": (None, math.atan2), "maximum": (None, max), "minimum": (None, min),
    "eq": (_BOOL, lambda a, b: a == b), "ne": (_BOOL, lambda a, b: a != b), "lt": (_BOOL, lambda a, b: a < b),
    "le": (_BOOL, lambda a, b: a <= b), "gt": (_BOOL, lambda a, b: a > b), "ge": (_BOOL, lambda a, b: a >= b),
    "bitwise_and": (None, lambda a, b: a & b), "bitwise_or": (None, lambda a, b: a | b),
    "bitwise_xor": (None, lambda a, b: a ^ b), "bitwise_left_shift": (None, lambda a, b: a << b),
    "bitwise_right_shift": (None, lambda a, b: a >> b), "copysign": (None, math.copysign),
    "hypot": (None, math.hypot), "nextafter": (None, None), "logical_and": (_BOOL, lambda a, b: bool(a and b)),
    "logical_or": (_BOOL, lambda a, b: bool(a or b)), "logical_xor": (_BOOL, lambda a, b: bool(a) != bool(b)),
}
for _name, (_out, _fn) in BINARY.items():
    make_prim(_name, _elementwise_meta(_name, 2, output_dtype=_out, number_fn=_fn))


def _where_meta(pred, a, b):
    tensors = [x for x in (pred, a, b) if isinstance(x, TensorProxy)]
    ref = tensors[0]
    for t in tensors[1:]:
        _check(tuple(t.shape) == tuple(ref.shape), "prims.where: shapes differ")
    vals = [x for x in (a, b) if isinstance(x, TensorProxy)]
    if vals:
        dtype = vals[0].dtype
    else:
        dtype = torch.get_default_dtype() if isinstance(a, float) or isinstance(b, float) else torch.int64
    return _new_tensor(ref.shape, dtype, ref.device, _requires_grad(a, b))


make_prim("where", _where_meta)


def convert_element_type_meta(a, dtype: torch.dtype):
    if isinstance(a, NumberProxy):
        return _new_number(dtypes.python_type_of(dtype), a.value, a.inputs)
    return _new_tensor(a.shape, dtype, a.device, _requires_grad(a) and dtypes.is_inexact(dtype))


make_prim("convert_element_type", convert_element_type_meta)


def device_put_meta(a, device: torch.device):
    return _new_tensor(a.shape, a.dtype, device, _requires_grad(a))


make_prim("device_put", device_put_meta)


def shallow_copy_meta(a):
    """The same value under a new name (an operation whose result is its input)."""
    return _new_tensor(a.shape, a.dtype, a.device, _requires_grad(a))


make_prim("shallow_copy", shallow_copy_meta)

# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------


def broadcast_in_dim_meta(a, shape, broadcast_dimensions):
    _check(len(broadcast_dimensions) == a.ndim, "prims.broadcast_in_dim: one broadcast dimension per input dimension")
    for d, s in zip(broadcast_dimensions, a.shape):
        _check(s == 1 or s == shape[d], lambda: f"prims.broadcast_in_dim: cannot broadcast {tuple(a.shape)} to {shape}")
    return _new_tensor(shape, a.dtype, a.device, _requires_grad(a))


make_prim("broadcast_in_dim", broadcast_in_dim_meta)


def reshape_meta(a, shape):
    _check(math.prod(shape) == a.numel(), lambda: f"prims.reshape: cannot reshape {tuple(a.shape)} to {tuple(shape)}")
    return _new_tensor(shape, a.dtype, a.device, _requires_grad(a))


make_prim("reshape", reshape_meta)


def transpose_meta(a, permutation):
    _check(sorted(permutation) == list(range(a.ndim)), "prims.transpose: not a permutation")
    return _new_tensor([a.shape[p] for p in permutation], a.dtype, a.device, _requires_grad(a))


make_prim("transpose", transpose_meta)


def slice_meta(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    shape = [max(0, (e - s + st - 1) // st) for s, e, st in zip(start_indices, end_indices, strides)]
    return _new_tensor(shape, a.dtype, a.device, _requires_grad(a))


make_prim("slice_prim", slice_meta)


def squeeze_meta(a, dims):
    dims = set(dims)
    return _new_tensor([s for i, s in enumerate(a.shape) if i not in dims], a.dtype, a.device, _requires_grad(a))


make_prim("squeeze", squeeze_meta)


def cat_meta(tensors, dim: int):
    ref = tensors[0]
    shape = list(ref.shape)
    shape[dim] = builtins.sum(t.shape[dim] for t in tensors)  # `sum` here is prims.sum
    return _new_tensor(shape, ref.dtype, ref.device, _requires_grad(*tensors))


make_prim("cat", cat_meta)


def pad_meta(a, padding_value, padding_config):
    shape = []
    for s, (lo, hi, dilation) in zip(a.shape, padding_config):
        shape.append(lo + hi + s + max(0, s - 1) * dilation)
    return _new_tensor(shape, a.dtype, a.device, _requires_grad(a))


make_prim("pad", pad_meta)


def flip_meta(a, dims):
    return _new_tensor(a.shape, a.dtype, a.device, _requires_grad(a))


make_prim("flip", flip_meta)


def take_meta(a, index, dim: int):
    shape = list(a.shape)
    shape[dim] = index.numel()
    return _new_tensor(shape, a.dtype, a.device, _requires_grad(a))


make_prim("take", take_meta)


def gather_meta(a, index, dim: int):
    return _new_tensor(index.shape, a.dtype, a.device, _requires_grad(a))


make_prim("gather", gather_meta)


def scatter_add_meta(a, index, value, dim: int):
    return _new_tensor(a.shape, a.dtype, a.device, _requires_grad(a, value))


make_prim("scatter_add", scatter_add_meta)


def index_add_meta(a, index, value, dim: int):
    return _new_tensor(a.shape, a.dtype, a.device, _requires_grad(a, value))


make_prim("index_add", index_add_meta)

# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------


def _reduced_shape(a, dims):
    dims = set(dims)
    return [s for i, s in enumerate(a.shape) if i not in dims]


def _reduction_meta(name, output_dtype=None):
    def meta(a, dims):
        dtype = output_dtype(a.dtype) if output_dtype else a.dtype
        return _new_tensor(_reduced_shape(a, dims), dtype, a.device, _requires_grad(a) and dtypes.is_inexact(dtype))

    meta.__name__ = name
    return meta


for _name in ("sum", "prod", "amax", "amin"):
    make_prim(_name, _reduction_meta(_name))


def var_meta(a, dims, *, correction):
    return _new_tensor(_reduced_shape(a, dims), dtypes.to_real(a.dtype), a.device, _requires_grad(a))


make_prim("var", var_meta)


def var_mean_meta(a, dims, *, correction):
    shape = _reduced_shape(a, dims)
    return (_new_tensor(shape, dtypes.to_real(a.dtype), a.device, _requires_grad(a)),
            _new_tensor(shape, a.dtype, a.device, _requires_grad(a)))


make_prim("var_mean", var_mean_meta)


def _arg_reduction_meta(a, dim):
    shape = _reduced_shape(a, [dim]) if dim is not None else []
    return _new_tensor(shape, torch.int64, a.device)


make_prim("argmax", _arg_reduction_meta)
make_prim("argmin", _arg_reduction_meta)


def cumsum_meta(a, dim: int):
    return _new_tensor(a.shape, a.dtype, a.device, _requires_grad(a))


make_prim("cumsum", cumsum_meta)

# ---------------------------------------------------------------------------------------------
# Tensor creation
# ---------------------------------------------------------------------------------------------


def full_meta(shape, fill_value, *, device, dtype):
    return _new_tensor(shape, dtype, device)


make_prim("full", full_meta)


def iota_meta(length, *, start, step, device, dtype):
    return _new_tensor((length,), dtype, device)


make_prim("iota", iota_meta)


def uniform_meta(shape, minval, maxval, *, device, dtype):
    return _new_tensor(shape, dtype, device)


make_prim("uniform", uniform_meta, tags=(Tag.RANDOM,))


def randn_meta(shape, *, device, dtype):
    return _new_tensor(shape, dtype, device)


make_prim("randn", randn_meta, tags=(Tag.RANDOM,))

# ---------------------------------------------------------------------------------------------
# Linear algebra and neural-network primitives
# ---------------------------------------------------------------------------------------------


def matmul_meta(a, b):
    if a.ndim == 1 and b.ndim == 1:
        return _new_tensor((), a.dtype, a.device, _requires_grad(a, b))
    if b.ndim == 1:
        return _new_tensor(a.shape[:-1], a.dtype, a.device, _requires_grad(a, b))
    if a.ndim == 1:
        return _new_tensor(tuple(b.shape[:-2]) + (b.shape[-1],), a.dtype, a.device, _requires_grad(a, b))
    _check(a.shape[-1] == b.shape[-2], lambda: f"prims.matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied")
    batch = broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return _new_tensor(tuple(batch) + (a.shape[-2], b.shape[-1]), a.dtype, a.device, _requires_grad(a, b))


make_prim("matmul", matmul_meta)


def linear_meta(a, w, bias):
    _check(a.shape[-1] == w.shape[-1], lambda: f"prims.linear: shapes {tuple(a.shape)} and {tuple(w.shape)} cannot be multiplied")
    shape = tuple(a.shape[:-1]) + ((w.shape[0],) if w.ndim == 2 else ())
    return _new_tensor(shape, a.dtype, a.device, _requires_grad(a, w, bias))


make_prim("linear", linear_meta)


def convolution_meta(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    out = torch.ops.aten.convolution.default(
        torch.empty(a.shape, device="meta", dtype=a.dtype), torch.empty(weight.shape, device="meta", dtype=weight.dtype),
        None if bias is None else torch.empty(bias.shape, device="meta", dtype=bias.dtype),
        stride, padding, dilation, transposed, output_padding, groups)
    return _new_tensor(out.shape, a.dtype, a.device, _requires_grad(a, weight, bias))


make_prim("convolution", convolution_meta)


def embedding_meta(indices, weight):
    return _new_tensor(tuple(indices.shape) + (weight.shape[1],), weight.dtype, weight.device, _requires_grad(weight))


make_prim("embedding", embedding_meta)

# ---------------------------------------------------------------------------------------------
# Effects
# ---------------------------------------------------------------------------------------------


def copy__meta(src, dst):
    """Copies ``src`` into ``dst`` (an input, parameter or buffer), as an in-place update in eager would."""
    return None


make_prim("copy_", copy__meta, tags=(Tag.SIDE_EFFECT,))

__all__ = list(_PRIMS)
