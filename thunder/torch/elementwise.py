"""Elementwise operations of the torch language."""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from thunder.core import prims
from thunder.core.extents import same_shape
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.torch.registry import TORCH_TO_SYMBOL, _method, number_torchsymbol, torchsymbol
from thunder.torch.utils import (Kind, broadcast, check, common_dtype, convert, elementwise_binary, elementwise_unary,
                                 on_cpu, promote, rounded_to, widened)
from thunder.torch import fallback

# ---------------------------------------------------------------------------------------------
# Unary: name -> (type promotion kind, torch namespaces that have it)
# ---------------------------------------------------------------------------------------------
_UNARY = {
    "abs": Kind.COMPLEX_TO_FLOAT, "neg": Kind.DEFAULT, "exp": Kind.INT_TO_FLOAT, "exp2": Kind.INT_TO_FLOAT,
    "expm1": Kind.INT_TO_FLOAT, "log": Kind.INT_TO_FLOAT, "log1p": Kind.INT_TO_FLOAT, "log2": Kind.INT_TO_FLOAT,
    "log10": Kind.INT_TO_FLOAT, "sin": Kind.INT_TO_FLOAT, "cos": Kind.INT_TO_FLOAT, "tan": Kind.INT_TO_FLOAT,
    "asin": Kind.INT_TO_FLOAT, "acos": Kind.INT_TO_FLOAT, "atan": Kind.INT_TO_FLOAT, "sinh": Kind.INT_TO_FLOAT,
    "cosh": Kind.INT_TO_FLOAT, "tanh": Kind.INT_TO_FLOAT, "asinh": Kind.INT_TO_FLOAT, "acosh": Kind.INT_TO_FLOAT,
    "atanh": Kind.INT_TO_FLOAT, "sqrt": Kind.INT_TO_FLOAT, "rsqrt": Kind.INT_TO_FLOAT,
    "reciprocal": Kind.INT_TO_FLOAT, "sign": Kind.DEFAULT, "floor": Kind.DEFAULT, "ceil": Kind.DEFAULT,
    "trunc": Kind.DEFAULT, "erf": Kind.INT_TO_FLOAT, "erfc": Kind.INT_TO_FLOAT,
    "erfinv": Kind.INT_TO_FLOAT, "lgamma": Kind.INT_TO_FLOAT, "digamma": Kind.INT_TO_FLOAT,
    "bitwise_not": Kind.DEFAULT, "isfinite": Kind.ALWAYS_BOOL, "isnan": Kind.ALWAYS_BOOL,
    "isinf": Kind.ALWAYS_BOOL, "signbit": Kind.ALWAYS_BOOL, "sigmoid": Kind.INT_TO_FLOAT,
}


def _unary_symbol(name: str, kind):
    prim = getattr(prims, name)
    torch_fns = [f for f in (getattr(torch, name, None), getattr(torch.special, name, None))
                 if f is not None]
    if name == "sigmoid":
        torch_fns.append(F.sigmoid)
    if name == "tanh":
        torch_fns.append(F.tanh)

    def fn(a):
        return elementwise_unary(prim, a, kind)

    fn.__name__ = name
    inplace = (name + "_",) if getattr(torch.Tensor, name + "_", None) is not None else ()
    torch_fns += _UNARY_ALIASES.get(name, ())
    methods = (name,) + _UNARY_METHOD_ALIASES.get(name, ())
    return number_torchsymbol(*torch_fns, methods=methods, inplace_methods=inplace, name=name)(fn)


_UNARY_ALIASES = {"abs": (torch.absolute,), "neg": (torch.negative,), "asin": (torch.arcsin,), "acos": (torch.arccos,),
                  "atan": (torch.arctan,), "asinh": (torch.arcsinh,), "acosh": (torch.arccosh,), "atanh": (torch.arctanh,),
                  "expm1": (torch.special.expm1,)}
_UNARY_METHOD_ALIASES = {"abs": ("__abs__", "absolute"), "neg": ("__neg__", "negative"), "bitwise_not": ("__invert__",)}


for _name, _kind in _UNARY.items():
    globals()[_name] = _unary_symbol(_name, _kind)

abs_ = globals()["abs"]


@torchsymbol(torch.round, methods=("round",), inplace_methods=("round_",))
def round(a, *, decimals=0):
    """To the nearest integer, halves to even; with ``decimals``, as torch's kernel: ``nearbyint(a * 10**d) / 10**d``
    in the op's math dtype (``nearbyint(a / 10**-d) * 10**-d`` for negative ``d``)."""
    if decimals == 0:
        return elementwise_unary(prims.round, a, Kind.DEFAULT)
    check(a.dtype.is_floating_point, lambda: f'"round" with decimals is not implemented for {a.dtype}', NotImplementedError)
    x = convert(a, torch.float32) if a.dtype in (torch.float16, torch.bfloat16) else a
    scale = float(10 ** (decimals if decimals > 0 else -decimals))
    if decimals > 0:
        out = prims.div(prims.round(prims.mul(x, scale)), scale)
    else:
        out = prims.mul(prims.round(prims.div(x, scale)), scale)
    return convert(out, a.dtype)


@number_torchsymbol(torch.logical_not, methods=("logical_not",), inplace_methods=("logical_not_",))
def logical_not(a):
    return prims.eq(a, False) if a.dtype is torch.bool else prims.eq(a, 0)


@number_torchsymbol(torch.square, methods=("square",), inplace_methods=("square_",))
def square(a):
    a = convert(a, torch.int64) if a.dtype is torch.bool else a  # torch.square(bool) is int64, as pow(a, 2)
    return mul(a, a)


@number_torchsymbol(torch.frac, methods=("frac",))
def frac(a):
    return sub(a, trunc(a))


@number_torchsymbol(torch.positive, methods=("positive",))
def positive(a):
    return a


# ---------------------------------------------------------------------------------------------
# Binary
# ---------------------------------------------------------------------------------------------


@number_torchsymbol(torch.add, methods=("add", "__add__", "__radd__"), inplace_methods=("add_", "__iadd__"))
def add(a, b, *, alpha=None):
    if alpha is not None and _reduced(a, b):
        return _widened_with_alpha(add, a, b, alpha)
    if alpha is not None:
        b = _scaled(a, b, alpha)
    return elementwise_binary(prims.add, a, b)


def _reduced(*operands) -> bool:
    """Whether an op of these operands computes in a wider dtype than its result's (float16, bfloat16)."""
    computation, result = promote(*operands)
    return computation is not result


def _widened_with_alpha(op, a, b, alpha):
    """``op(a, alpha * b)`` of a float16/bfloat16 result in float32, rounded once, as torch's kernel, which reads
    ``alpha`` in the common dtype on the CPU."""
    alpha = rounded_to(alpha, common_dtype(a, b)) if on_cpu(a, b) else alpha
    (a, b), result = widened(a, b)
    return convert(op(a, b, alpha=alpha), result)


def _scaled(a, b, alpha):
    """``b * alpha`` as eager reads ``alpha``: a bool for bool tensors (then ``True * True`` is ``True``, not the
    int ``1`` Python's product gives, which would promote the result), never a float for integral ones."""
    dtype = promote(a, b)[1]
    if dtype is torch.bool:
        alpha = bool(alpha)
        if isinstance(b, bool):
            return b and alpha
    check(dtype.is_floating_point or dtype.is_complex or dtype is torch.bool or not isinstance(alpha, float),
          "For integral input tensors, argument alpha must not be a floating point number.", RuntimeError)
    if isinstance(b, TensorProxy) and _alpha_promotes(b.dtype, alpha):
        # eager casts b to the result's dtype before scaling: alpha takes no part in the promotion (an int32 tensor
        # plus a bool one times 2 is int32, where bool * 2 alone would be int64)
        b = convert(b, dtype)
    return mul(b, alpha)


def _alpha_promotes(dtype, alpha) -> bool:
    """Whether ``b * alpha`` is of a higher category than ``b`` (a bool tensor times an int, an integer one times a
    float, a real one times a complex)."""
    if dtype is torch.bool:
        return not isinstance(alpha, bool)
    if not (dtype.is_floating_point or dtype.is_complex):
        return isinstance(alpha, (float, complex))
    return isinstance(alpha, complex) and not dtype.is_complex


@number_torchsymbol(torch.sub, torch.subtract, methods=("sub", "subtract", "__sub__"), inplace_methods=("sub_", "__isub__"))
def sub(a, b, *, alpha=None):
    if alpha is not None and _reduced(a, b):
        return _widened_with_alpha(sub, a, b, alpha)
    if alpha is not None:
        b = _scaled(a, b, alpha)
    return elementwise_binary(prims.sub, a, b)


@number_torchsymbol(torch.rsub, methods=("__rsub__",))
def rsub(a, b, *, alpha=None):
    return sub(b, a, alpha=alpha)


@number_torchsymbol(torch.mul, torch.multiply, methods=("mul", "multiply", "__mul__", "__rmul__"),
             inplace_methods=("mul_", "__imul__"))
def mul(a, b):
    return elementwise_binary(prims.mul, a, b, full_precision_scalar=True)


@number_torchsymbol(torch.div, torch.divide, methods=("div", "divide", "__truediv__", "__div__"),
             inplace_methods=("div_", "__itruediv__"))
def div(a, b, *, rounding_mode=None):
    if rounding_mode is None:
        return elementwise_binary(prims.div, a, b, Kind.INT_TO_FLOAT, full_precision_scalar=True)
    if rounding_mode == "trunc":
        computation, result = promote(a, b)
        if computation.is_floating_point:
            return convert(trunc(elementwise_binary(prims.div, a, b)), result)
        return elementwise_binary(prims.div, a, b)  # integer division truncates
    check(rounding_mode == "floor", lambda: f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")
    return floor_divide(a, b)


@number_torchsymbol(torch.true_divide, methods=("true_divide",))
def true_divide(a, b):
    return div(a, b)


@number_torchsymbol(methods=("__rtruediv__", "__rdiv__"), torch_impl=torch.Tensor.__rtruediv__)
def rdiv(a, b):
    return mul(reciprocal(a), b)  # torch defines ``b / a`` for a Python scalar ``b`` this way


@number_torchsymbol(torch.floor_divide, methods=("floor_divide", "__floordiv__"), inplace_methods=("floor_divide_",))
def floor_divide(a, b):
    return elementwise_binary(prims.floor_divide, a, b)


@number_torchsymbol(methods=("__rfloordiv__",), torch_impl=torch.Tensor.__rfloordiv__)
def rfloordiv(a, b):
    return floor_divide(b, a)


def _in_result_dtype(a, b):
    """Operands rounded to the result dtype first, as torch's kernels without a full-precision scalar path
    see them (which matters for a discontinuous op: ``bf16_tensor % 0.7`` divides by bfloat16's 0.69921875)."""
    _, result = promote(a, b)
    return rounded_to(a, result), rounded_to(b, result)


@torchsymbol(torch.remainder, methods=("remainder", "__mod__"), inplace_methods=("remainder_",))
def remainder(a, b):
    return elementwise_binary(prims.remainder, *_in_result_dtype(a, b))


@torchsymbol(methods=("__rmod__",), torch_impl=torch.Tensor.__rmod__)
def rmod(a, b):
    return remainder(b, a)


@torchsymbol(torch.fmod, methods=("fmod",))
def fmod(a, b):
    return elementwise_binary(prims.fmod, *_in_result_dtype(a, b))


@number_torchsymbol(torch.pow, methods=("pow", "__pow__"), inplace_methods=("pow_",))
def pow(a, b):
    if isinstance(a, TensorProxy) and a.dtype is torch.bool and isinstance(b, bool):  # eager: a bool, x ** True is x
        return prims.reshape(a, tuple(a.shape)) if b else prims.full(tuple(a.shape), True, device=a.device,
                                                                     dtype=torch.bool)
    if isinstance(a, TensorProxy) and a.dtype is torch.bfloat16 and a.device.type == "cpu" and type(b) in (int, float) \
            and b in (3, -2):
        # torch's CPU kernel of a bfloat16 tensor: ``a * a * a`` and ``1 / (a * a)``, each step rounded to bfloat16
        return mul(mul(a, a), a) if b == 3 else reciprocal(mul(a, a))
    return elementwise_binary(prims.pow, a, b, Kind.BOOL_TO_LONG)


@number_torchsymbol(methods=("__rpow__",), torch_impl=torch.Tensor.__rpow__)
def rpow(a, b):
    return pow(b, a)


@number_torchsymbol(torch.float_power, methods=("float_power",))
def float_power(a, b):
    dtype = torch.complex128 if any(isinstance(x, TensorProxy) and x.dtype.is_complex for x in (a, b)) else torch.float64
    return pow(convert(a, dtype), convert(b, dtype))


@number_torchsymbol(torch.atan2, torch.arctan2, methods=("atan2",))
def atan2(a, b):
    return elementwise_binary(prims.atan2, a, b, Kind.INT_TO_FLOAT)


@number_torchsymbol(torch.maximum, methods=("maximum",))
def maximum(a, b):
    return elementwise_binary(prims.maximum, a, b)


@number_torchsymbol(torch.minimum, methods=("minimum",))
def minimum(a, b):
    return elementwise_binary(prims.minimum, a, b)


# [Note: comparisons decided by value ranges]
# ``torch.rand`` and ``rand_like`` draw from [0, 1) (the closed [0, 1] is assumed: rounding to a low
# precision may give 1). Their proxies record that range, and a comparison of a one-element tensor
# with such a range against a Python number whose answer the range decides (``torch.rand([]) < 0.0``)
# records that answer on its result, which ``TensorProxy.__bool__`` then returns. This is how
# BART-style models' layer drop (``if torch.rand([]) < self.layerdrop: continue``) traces in training
# with the default ``layerdrop=0``: no layer is ever dropped, and the draw still runs, so the RNG
# advances as in eager. A comparison the range does not decide stays data-dependent (an error).
_DECIDED_BY_RANGE = {
    "lt": lambda lo, hi, b: True if hi < b else (False if lo >= b else None),
    "le": lambda lo, hi, b: True if hi <= b else (False if lo > b else None),
    "gt": lambda lo, hi, b: True if lo > b else (False if hi <= b else None),
    "ge": lambda lo, hi, b: True if lo >= b else (False if hi < b else None),
}


def _decide_by_range(out, name, a, b):
    value_range = getattr(a, "_thunder_range", None) if isinstance(a, TensorProxy) else None
    if value_range is not None and name in _DECIDED_BY_RANGE and type(b) in (int, float) and out.numel() == 1:
        known = _DECIDED_BY_RANGE[name](*value_range, b)
        if known is not None:
            out._thunder_known = known
    return out


def _comparison(name, dunder, *aliases):
    prim = getattr(prims, name)

    def fn(a, b):
        return _decide_by_range(elementwise_binary(prim, a, b, Kind.ALWAYS_BOOL), name, a, b)

    fn.__name__ = name
    return number_torchsymbol(getattr(torch, name), *aliases, methods=(name, dunder), inplace_methods=(name + "_",), name=name)(fn)


eq = _comparison("eq", "__eq__")
ne = _comparison("ne", "__ne__", torch.not_equal)
lt = _comparison("lt", "__lt__", torch.less)
le = _comparison("le", "__le__", torch.less_equal)
gt = _comparison("gt", "__gt__", torch.greater)
ge = _comparison("ge", "__ge__", torch.greater_equal)


def _bitwise(name, dunder, rdunder, idunder):
    prim = getattr(prims, name)

    def fn(a, b):
        return elementwise_binary(prim, a, b)

    fn.__name__ = name
    return number_torchsymbol(getattr(torch, name), methods=(name, dunder, rdunder), inplace_methods=(name + "_", idunder),
                       name=name)(fn)


bitwise_and = _bitwise("bitwise_and", "__and__", "__rand__", "__iand__")
bitwise_or = _bitwise("bitwise_or", "__or__", "__ror__", "__ior__")
bitwise_xor = _bitwise("bitwise_xor", "__xor__", "__rxor__", "__ixor__")


@number_torchsymbol(torch.bitwise_left_shift, methods=("bitwise_left_shift", "__lshift__"))
def bitwise_left_shift(a, b):
    return elementwise_binary(prims.bitwise_left_shift, a, b)


@number_torchsymbol(torch.bitwise_right_shift, methods=("bitwise_right_shift", "__rshift__"))
def bitwise_right_shift(a, b):
    return elementwise_binary(prims.bitwise_right_shift, a, b)


def _logical(name):
    prim = getattr(prims, name)

    def fn(a, b):
        a, b = broadcast(a, b)
        a = convert(a, torch.bool) if isinstance(a, TensorProxy) else bool(a)
        b = convert(b, torch.bool) if isinstance(b, TensorProxy) else bool(b)
        return prim(a, b)

    fn.__name__ = name
    return number_torchsymbol(getattr(torch, name), methods=(name,), name=name)(fn)


logical_and = _logical("logical_and")
logical_or = _logical("logical_or")
logical_xor = _logical("logical_xor")


@number_torchsymbol(torch.copysign, methods=("copysign",))
def copysign(a, b):
    return elementwise_binary(prims.copysign, a, b, Kind.INT_TO_FLOAT)


@number_torchsymbol(torch.hypot, methods=("hypot",))
def hypot(a, b):
    return elementwise_binary(prims.hypot, a, b)


@number_torchsymbol(torch.nextafter, methods=("nextafter",))
def nextafter(a, b):
    # the next value of the result dtype (bfloat16's, not float32's: no computation in a wider dtype)
    return elementwise_binary(prims.nextafter, a, b, Kind.NO_OPMATH)


@number_torchsymbol(torch.where)
def where(condition, input=None, other=None):
    if input is None and other is None:  # the indices of the nonzero elements: run-time extents
        return fallback.fallback_call(torch.where, (condition,), {})
    computation, result = promote(input, other)
    condition, input, other = broadcast(condition, input, other)
    if not isinstance(condition, TensorProxy):
        return convert(input if condition else other, result)
    out = prims.where(condition, convert(input, result), convert(other, result))
    return out


def _where_method(a, condition, other):
    """``a.where(condition, other)`` is ``torch.where(condition, a, other)``: the method's self is the input."""
    return where(condition, a, other)


TORCH_TO_SYMBOL[_method("where")] = _where_method


@number_torchsymbol(torch.masked_fill, methods=("masked_fill",), inplace_methods=("masked_fill_",))
def masked_fill(a, mask, value):
    if isinstance(value, TensorProxy):
        check(value.ndim == 0, lambda: "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
              f"{value.ndim} dimension(s).")
    value = convert(value, a.dtype)
    if not same_shape(tuple(mask.shape), tuple(a.shape)):  # eager's result has the shape both broadcast to
        mask, a = broadcast(mask, a)
    if isinstance(value, TensorProxy):
        value = broadcast(value, a)[0]
    return prims.where(mask, value, a)


@torchsymbol(name="masked_index_put", torch_impl=None)
def masked_index_put(a, mask, value):
    """``a[mask] = value`` of a boolean mask of ``a``'s shape and one value, out of place: ``masked_fill``'s values,
    with the gradient eager's ``index_put`` gives (the selection zeroed in a copy laid out as the gradient, where
    ``masked_fill``'s is contiguous)."""
    return masked_fill(a, mask, value)


@number_torchsymbol(torch.clamp, torch.clip, methods=("clamp", "clip"), inplace_methods=("clamp_", "clip_"))
def clamp(a, min=None, max=None):
    check(min is not None or max is not None, "torch.clamp: At least one of 'min' or 'max' must not be None")
    check(min is None or max is None or isinstance(min, TensorProxy) == isinstance(max, TensorProxy),
          "clamp() received an invalid combination of arguments: min and max must both be tensors or both be numbers",
          TypeError)
    out = a
    if min is not None:
        out = where(lt(out, min), min, out) if not isinstance(min, TensorProxy) else maximum(out, min)
    if max is not None:
        out = where(gt(out, max), max, out) if not isinstance(max, TensorProxy) else minimum(out, max)
    return convert(out, promote(a, min, max)[1]) if isinstance(out, TensorProxy) else out


@number_torchsymbol(torch.clamp_min, methods=("clamp_min",), inplace_methods=("clamp_min_",))
def clamp_min(a, min):
    return clamp(a, min, None)


@number_torchsymbol(torch.clamp_max, methods=("clamp_max",), inplace_methods=("clamp_max_",))
def clamp_max(a, max):
    return clamp(a, None, max)


@number_torchsymbol(torch.lerp, methods=("lerp",), inplace_methods=("lerp_",))
def lerp(start, end, weight):
    # torch's formula, in the computation dtype: exact at both ends of the weight's range
    # (a number weight is read at its own precision, a tensor's rounded as the other operands; a complex one
    # picks the formula by its modulus)
    (start, end, weight), result = widened(start, end, weight,
                                           unrounded=() if isinstance(weight, TensorProxy) else (2,))
    diff = sub(end, start)
    if not isinstance(weight, TensorProxy):
        small = math.hypot(weight.real, weight.imag) < 0.5
        out = add(start, mul(weight, diff)) if small else sub(end, mul(diff, 1 - weight))
    else:
        small = add(start, mul(weight, diff))
        large = sub(end, mul(diff, rsub(weight, 1)))
        out = where(lt(abs_(weight), 0.5), small, large)
    return convert(out, result)


@number_torchsymbol(torch.addcmul, methods=("addcmul",), inplace_methods=("addcmul_",))
def addcmul(a, t1, t2, *, value=1):
    # torch's kernel: ``a + value * t1 * t2``, left to right, in the computation dtype, rounded once
    value = convert(value, promote(a, t1, t2)[1])  # the scalar takes the tensors' dtype, as in torch
    (a, t1, t2), result = widened(a, t1, t2)
    return convert(add(a, mul(mul(t1, value), t2)) if value != 1 else add(a, mul(t1, t2)), result)


@number_torchsymbol(torch.addcdiv, methods=("addcdiv",), inplace_methods=("addcdiv_",))
def addcdiv(a, t1, t2, *, value=1):
    # torch's kernel: ``a + value * t1 / t2``, left to right, in the computation dtype, rounded once
    (a, t1, t2), result = widened(a, t1, t2)
    return convert(add(a, div(mul(t1, value), t2)) if value != 1 else add(a, div(t1, t2)), result)


@number_torchsymbol(torch.nan_to_num, methods=("nan_to_num",), inplace_methods=("nan_to_num_",))
def nan_to_num(a, nan=0.0, posinf=None, neginf=None):
    if not a.dtype.is_floating_point:
        return a
    info = torch.finfo(a.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = where(isnan(a), nan, a)
    out = where(logical_and(isinf(out), gt(out, 0)), posinf, out)
    return where(logical_and(isinf(out), lt(out, 0)), neginf, out)


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


def _one_kernel(fn):
    """An activation torch computes in one kernel: of a float16 or bfloat16 input, in float32, rounded once (its
    decomposition's steps would each round to the input's dtype)."""
    @functools.wraps(fn)
    def computed(a, *args, **kwargs):
        if isinstance(a, TensorProxy) and a.dtype in (torch.float16, torch.bfloat16):
            return convert(fn(convert(a, torch.float32), *args, **kwargs), a.dtype)
        return fn(a, *args, **kwargs)

    return computed


@number_torchsymbol(torch.relu, F.relu, methods=("relu",), inplace_methods=("relu_",))
def relu(a, inplace=False):
    check(a.dtype is not torch.bool, "relu: boolean inputs are not supported")
    return prims.maximum(a, convert(0, a.dtype))  # NaN propagates, as in torch


@number_torchsymbol(F.relu6)
def relu6(a, inplace=False):
    return hardtanh(a, 0, 6)


@number_torchsymbol(F.leaky_relu)
def leaky_relu(a, negative_slope=0.01, inplace=False):
    return where(gt(a, 0), a, mul(a, negative_slope))


@number_torchsymbol(F.elu)
@_one_kernel
def elu(a, alpha=1.0, inplace=False):
    return where(gt(a, 0), a, mul(expm1(a), alpha))


@number_torchsymbol(F.selu)
@_one_kernel
def selu(a, inplace=False):
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return mul(where(gt(a, 0), a, mul(expm1(a), alpha)), scale)


@number_torchsymbol(F.celu)
@_one_kernel
def celu(a, alpha=1.0, inplace=False):
    return where(gt(a, 0), a, mul(expm1(div(a, alpha)), alpha))


@number_torchsymbol(F.hardtanh)
def hardtanh(a, min_val=-1.0, max_val=1.0, inplace=False):
    check(a.dtype is not torch.bool, "hardtanh: boolean inputs are not supported")
    return clamp(a, convert(min_val, a.dtype), convert(max_val, a.dtype))  # keeps the input's dtype, unlike clamp


@number_torchsymbol(F.gelu, methods=())
@_one_kernel
def gelu(a, *, approximate="none"):  # keyword-only, as in F.gelu
    if approximate == "none":
        return mul(mul(a, 0.5), add(erf(mul(a, 1 / math.sqrt(2))), 1))
    check(approximate == "tanh", lambda: f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    inner = mul(add(a, mul(pow(a, 3), 0.044715)), math.sqrt(2 / math.pi))
    return mul(mul(a, 0.5), add(tanh(inner), 1))


@number_torchsymbol(F.silu)
@_one_kernel
def silu(a, inplace=False):
    return mul(a, sigmoid(a))


@number_torchsymbol(F.mish)
@_one_kernel
def mish(a, inplace=False):
    return mul(a, tanh(softplus(a)))


@number_torchsymbol(F.softplus)
@_one_kernel
def softplus(a, beta=1.0, threshold=20.0):
    scaled = mul(a, beta) if beta != 1 else a
    return where(gt(scaled, threshold), a, div(log1p(exp(scaled)), beta) if beta != 1 else log1p(exp(scaled)))


@number_torchsymbol(F.logsigmoid)
@_one_kernel
def logsigmoid(a):
    return neg(softplus(neg(a)))


@number_torchsymbol(F.hardsigmoid)
@_one_kernel
def hardsigmoid(a, inplace=False):
    return div(clamp(add(a, 3), 0, 6), 6)


@number_torchsymbol(F.hardswish)
@_one_kernel
def hardswish(a, inplace=False):
    return mul(a, hardsigmoid(a))


@number_torchsymbol(F.softsign)
def softsign(a):
    return div(a, add(abs_(a), 1))


@number_torchsymbol(F.tanhshrink)
def tanhshrink(a):
    return sub(a, tanh(a))
