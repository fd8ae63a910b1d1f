"""Primitives: the small set of operations everything else decomposes into.

Primitives have no broadcasting and no type promotion: a binary primitive takes tensors of one
shape and dtype (or Python numbers). The torch language (``thunder.torch``) implements torch's
semantics on top of them. Each primitive here is its meta function (how its output looks: tensors
made with ``new_tensor``, requiring grad where ``requires_grad(*inputs)`` says); the torch executor
gives each an implementation, and autodiff gives each a gradient rule. Primitives declared elsewhere
(``thunder.extend.declare_primitive``) bring their implementation and gradient rule with them.
"""
from __future__ import annotations

import builtins
import math
import operator
from numbers import Number

import torch

from thunder.core import dtypes
from thunder.core.extents import (as_extent, assume_equal, clamp_at_zero, is_one, is_runtime, is_zero, prod_poly, same,
                                  same_shape)
from thunder.core.proxies import NUMBER_OPS, TensorProxy, NumberProxy
from thunder.core.symbol import Symbol, Tag
from thunder.core.trace import get_tracectx

_PRIMS: dict[str, Symbol] = {}  # every primitive by name: those below and those declared elsewhere


def make_prim(name: str, meta, *, tags=(), printer=None) -> Symbol:
    """The primitive ``prims.<name>``; ``meta`` returns its outputs (built with ``new_tensor``)."""
    if name in _PRIMS:
        raise ValueError(f"A primitive named {name!r} already exists (prims.{name}): choose another name")
    sym = Symbol(name, meta, module="prims", is_prim=True, tags=tags, printer=printer)
    _PRIMS[name] = sym
    return sym


def new_tensor(shape, dtype, device, requires_grad=False) -> TensorProxy:
    """A tensor of the trace being recorded: what a meta function returns for each output."""
    return get_tracectx().tensor(tuple(as_extent(s) for s in shape), dtype, device, requires_grad)


def new_future(shape, dtype, device, requires_grad=False):
    """The pending result of an asynchronous operation (a ``FutureTensorProxy``): what the meta function of
    an asynchronous collective returns; ``wait`` turns it into a tensor of this shape."""
    return get_tracectx().future(tuple(as_extent(s) for s in shape), dtype, device, requires_grad)


def requires_grad(*args) -> bool:
    """Whether an output computed from ``args`` is part of the autograd graph (as in torch)."""
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        return False
    return any(isinstance(a, TensorProxy) and a.requires_grad for a in args)


def broadcast_shapes(*shapes) -> tuple:
    """torch's broadcasting of shapes; a run-time extent is never 1 (see [Note: run-time extents] in extents.py)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if is_one(d) or same(out[i], d):
                continue
            if not is_one(out[i]):
                kept = _broadcast_extents(out[i], d, f"broadcast at dimension {i}")
                if kept is None:
                    raise RuntimeError(f"The size of tensor a ({out[i]!r}) must match the size of tensor b ({d!r}) at "
                                       f"non-singleton dimension {i}")
                out[i] = kept
                continue
            out[i] = d
    # a dimension of size 0 broadcasts with 1 to 0
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if is_zero(d):
                out[i] = 0
    return tuple(out)


def _broadcast_extents(a, b, where: str):
    """The extent two different extents broadcast to, at least one known only at run time, or None where they cannot:
    decided by their values where the tracing driver computes them (``assume_equal``), a run-time extent of value 1
    then standing for 1."""
    if assume_equal(a, b, where):
        return a
    for one, other in ((a, b), (b, a)):
        if is_runtime(one) and assume_equal(one, 1, where):
            return other
    return None


def _check_contraction(m, n, what, a, b):
    if assume_equal(m, n, f"{what} of {a.name} and {b.name}"):
        return
    raise RuntimeError(f"{what}: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied")


def _check(cond: bool, msg):
    if not cond:
        raise RuntimeError(msg() if callable(msg) else msg)


# ---------------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------------

def _elementwise_meta(name: str, nargs: int, *, output_dtype=None, number_fn=None):
    """Meta for elementwise primitives: tensors of one shape (numbers allowed), output of that shape."""

    def meta(*args):
        tensors = [a for a in args if isinstance(a, TensorProxy)]
        if not tensors:
            return _number_result(name, number_fn, args)
        t0 = tensors[0]
        for t in tensors[1:]:
            _check(same_shape(tuple(t.shape), tuple(t0.shape)),
                   lambda: f"prims.{name}: shapes {tuple(t0.shape)} and {tuple(t.shape)} differ")
            _check(t.device == t0.device, lambda: f"prims.{name}: devices {t0.device} and {t.device} differ")
        dtype = output_dtype(t0.dtype) if output_dtype else t0.dtype
        return new_tensor(t0.shape, dtype, t0.device, requires_grad(*args) and dtypes.is_inexact(dtype))

    meta.__name__ = name
    meta.__signature__ = _positional_signature(nargs)
    return meta


def _positional_signature(n: int):
    import inspect

    names = ["a", "b", "c"][:n]
    return inspect.Signature([inspect.Parameter(x, inspect.Parameter.POSITIONAL_ONLY) for x in names])


_BOOL = lambda dtype: torch.bool  # noqa: E731
_REAL = dtypes.to_real

# name -> (output dtype of the tensor primitive, the Python function it is on numbers)
UNARY = {
    "abs": (_REAL, abs), "neg": (None, operator.neg), "exp": (None, math.exp), "exp2": (None, lambda a: 2.0**a),
    "expm1": (None, math.expm1), "log": (None, math.log), "log1p": (None, math.log1p), "log2": (None, math.log2),
    "log10": (None, math.log10), "sin": (None, math.sin), "cos": (None, math.cos), "tan": (None, math.tan),
    "asin": (None, math.asin), "acos": (None, math.acos), "atan": (None, math.atan), "sinh": (None, math.sinh),
    "cosh": (None, math.cosh), "tanh": (None, math.tanh), "asinh": (None, math.asinh), "acosh": (None, math.acosh),
    "atanh": (None, math.atanh), "sqrt": (None, math.sqrt), "rsqrt": (None, lambda a: 1 / math.sqrt(a)),
    "reciprocal": (None, lambda a: 1 / a), "sign": (None, None), "floor": (None, math.floor), "ceil": (None, math.ceil),
    "round": (None, round), "trunc": (None, math.trunc), "erf": (None, math.erf), "erfc": (None, math.erfc),
    "erfinv": (None, None), "lgamma": (None, math.lgamma), "digamma": (None, None), "bitwise_not": (None, operator.invert),
    "isfinite": (_BOOL, math.isfinite), "isnan": (_BOOL, math.isnan), "isinf": (_BOOL, math.isinf),
    "signbit": (_BOOL, None), "real": (_REAL, None), "imag": (_REAL, None), "sigmoid": (None, None),
}
for _name, (_out, _fn) in UNARY.items():
    globals()[_name] = make_prim(_name, _elementwise_meta(_name, 1, output_dtype=_out, number_fn=_fn))

BINARY = {
    "add": (None, operator.add), "sub": (None, operator.sub), "mul": (None, operator.mul),
    "div": (None, operator.truediv), "floor_divide": (None, operator.floordiv),
    "remainder": (None, operator.mod), "fmod": (None, math.fmod), "pow": (None, operator.pow),
    "atan2": (None, math.atan2), "maximum": (None, max), "minimum": (None, min),
    "eq": (_BOOL, operator.eq), "ne": (_BOOL, operator.ne), "lt": (_BOOL, operator.lt),
    "le": (_BOOL, operator.le), "gt": (_BOOL, operator.gt), "ge": (_BOOL, operator.ge),
    "bitwise_and": (None, operator.and_), "bitwise_or": (None, operator.or_),
    "bitwise_xor": (None, operator.xor), "bitwise_left_shift": (None, operator.lshift),
    "bitwise_right_shift": (None, operator.rshift), "copysign": (None, math.copysign),
    "hypot": (None, math.hypot), "nextafter": (None, math.nextafter), "logical_and": (_BOOL, lambda a, b: bool(a and b)),
    "logical_or": (_BOOL, lambda a, b: bool(a or b)), "logical_xor": (_BOOL, lambda a, b: bool(a) != bool(b)),
}
for _name, (_out, _fn) in BINARY.items():
    globals()[_name] = make_prim(_name, _elementwise_meta(_name, 2, output_dtype=_out, number_fn=_fn))


# ---------------------------------------------------------------------------------------------
# Numbers: the elementwise primitives applied to Python numbers compute what Python computes
# (see [Note: Python number semantics] in proxies.py); the python executor runs them as Python.
# ---------------------------------------------------------------------------------------------

NUMBER_FNS = {name: fn for name, (_, fn) in (UNARY | BINARY).items() if fn is not None}
NUMBER_FNS["round_to"] = builtins.round
_CATEGORY = {bool: 0, int: 1, float: 2, complex: 3}
_TYPES = (bool, int, float, complex)
_INT_RESULT = frozenset({"bitwise_left_shift", "bitwise_right_shift", "bitwise_not", "floor", "ceil", "trunc", "round"})


def _ptype(x) -> type:
    if isinstance(x, NumberProxy):
        return x.python_type
    return next(t for t in _TYPES if isinstance(x, t))


def _nonneg(x) -> bool:
    if isinstance(x, NumberProxy):
        lower = x.poly.bounds()[0] if x.poly is not None else None
        return lower is not None and lower >= 0
    return x >= 0


def _number_type(name: str, args):
    """The Python type of ``name`` on numbers of these types; None where it depends on their values."""
    cat = builtins.max(_CATEGORY[_ptype(a)] for a in args)
    if name == "div":
        return _TYPES[builtins.max(cat, 2)]
    if name == "pow":
        return _pow_type(*args, cat)
    if name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        return bool if cat == 0 else int
    if name in _INT_RESULT:
        return int
    if name in ("maximum", "minimum"):  # max() and min() return one of their operands
        return _ptype(args[0]) if len({_ptype(a) for a in args}) == 1 else None
    if name == "round_to":
        return float if _ptype(args[0]) is float else int
    if name == "abs" and cat == 3:
        return float
    if name in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "isfinite", "isnan",
                "isinf"):
        return bool
    if name in ("fmod", "atan2", "copysign", "hypot", "nextafter") or name in UNARY and name not in ("abs", "neg"):
        return float
    return _TYPES[builtins.max(cat, 1)]


def _pow_type(a, b, cat):
    if cat == 3:
        return complex
    if cat <= 1:  # int ** int is an int, unless the exponent is negative
        if _nonneg(b):
            return int
        return None if isinstance(b, NumberProxy) else float
    # with a float: a float, unless a negative base meets a non-integral exponent (then complex)
    if _nonneg(a) or _ptype(b) in (bool, int) or not isinstance(b, NumberProxy) and float(b).is_integer():
        return float
    return None


def _number_result(name: str, fn, args) -> NumberProxy:
    check_fn = fn if fn is not None else NUMBER_FNS.get(name)
    if check_fn is None:
        raise NotImplementedError(f"prims.{name} has no meaning for Python numbers")
    ptype = _number_type(name, args)
    if ptype is None:  # the result's type depends on the values: specialize on them
        for a in args:
            if isinstance(a, NumberProxy):
                a._specialize(f"The Python operation {name} (whose result type depends on its operands' values)")
    runtime = [a for a in args if is_runtime(a)]
    value = None if runtime else check_fn(*(a.value if isinstance(a, NumberProxy) else a for a in args))
    ptype = ptype or type(value)
    inputs = frozenset().union(*(a.inputs for a in args if isinstance(a, NumberProxy)))
    out = _new_number(ptype, value, inputs, runtime[0].origin if runtime else None)
    if ptype is int:  # for comparisons of run-time extents, and signs (``2 ** abs(n)`` is an int)
        out.poly = _result_poly(name, args, out)
    return out


def _new_number(python_type, value, inputs, origin=None) -> NumberProxy:
    trace = get_tracectx()
    prefix = {int: "i", float: "f", bool: "b", complex: "c"}[python_type]
    return NumberProxy(trace.make_name(prefix), python_type, value, frozenset(inputs), origin=origin)


_POLY_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def _result_poly(name, args, out):
    from thunder.core.extents import Poly, poly_of

    if name in _POLY_OPS and all(_ptype(a) in (bool, int) for a in args):
        return _POLY_OPS[name](poly_of(args[0]), poly_of(args[1]))
    if name == "neg" and _ptype(args[0]) is int:
        return -poly_of(args[0])
    if name == "floor_divide":
        exact = poly_of(args[0]).exact_div(poly_of(args[1]))
        if exact is not None:
            return exact
        if type(args[1]) is int and args[1] > 0:
            return Poly.derived_root("floordiv", poly_of(args[0]), out, args[1])
    if name == "maximum" and any(type(a) is int and a == 0 for a in args):
        return Poly.derived_root("max0", poly_of(next(a for a in args if not (type(a) is int and a == 0))), out)
    nonneg = (name in ("floor_divide", "remainder", "minimum") and all(_nonneg(a) for a in args) or name == "abs"
              or name == "maximum" and any(_nonneg(a) for a in args))
    return Poly.root(out, nonneg=nonneg)


_NO_FOLD = object()


def _fold(name, args):
    """The result without recording, where it is an operand or a constant (``n * 1``, ``(4 * i0) // 4``)."""
    if not all(_ptype(a) is int for a in args):
        return _NO_FOLD
    a = args[0]
    b = args[1] if len(args) > 1 else None
    identity = {"add": 0, "sub": 0, "mul": 1, "floor_divide": 1, "pow": 1}.get(name)
    if identity is not None and type(b) is int and b == identity:
        return a
    if name in ("add", "mul") and type(a) is int and a == identity:
        return b
    if not any(is_runtime(x) for x in args):
        return _NO_FOLD
    from thunder.core.extents import poly_of, materialize

    if name in _POLY_OPS:
        poly = _POLY_OPS[name](poly_of(a), poly_of(b))
        if poly.constant() is not None:
            return poly.constant()
        for x in (a, b):
            if isinstance(x, NumberProxy) and poly_of(x).key() == poly.key():
                return x
    if name in ("floor_divide", "remainder"):
        exact = poly_of(a).exact_div(poly_of(b))
        if exact is not None:
            if name == "remainder":
                return 0
            if exact.constant() is not None or len(exact.terms) == 1 and list(exact.terms.values()) == [1]:
                return materialize(exact)
    return _NO_FOLD


def _number_op(name: str):
    def op(*args):
        folded = _fold(name, args)
        return folded if folded is not _NO_FOLD else _PRIMS[name](*args)

    return op


def _round(a, ndigits=None):
    if ndigits is None:
        return _number_op("round")(a)
    return _number_op("round_to")(a, ndigits)


def _pos(a):
    return a if a.python_type is not bool else _number_op("add")(a, 0)


def _divmod(a, b):
    return _number_op("floor_divide")(a, b), _number_op("remainder")(a, b)


NUMBER_OPS.update({dunder: _number_op(prim) for dunder, prim in (
    ("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"), ("floordiv", "floor_divide"),
    ("mod", "remainder"), ("pow", "pow"), ("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
    ("lshift", "bitwise_left_shift"), ("rshift", "bitwise_right_shift"), ("neg", "neg"), ("abs", "abs"),
    ("invert", "bitwise_not"), ("floor", "floor"), ("ceil", "ceil"), ("trunc", "trunc"))})
NUMBER_OPS.update(round=_round, pos=_pos, divmod=_divmod)


def round_to_meta(a, ndigits):
    return _number_result("round_to", builtins.round, (a, ndigits))


def size_meta(a, dim: int):
    """The run-time extent of ``a`` at ``dim`` (see [Note: run-time extents] in extents.py)."""
    return a.shape[dim]


# Primitives of numbers only: run by the python executor.
round_to = make_prim("round_to", round_to_meta)
size = make_prim("size", size_meta)


def _where_meta(pred, a, b):
    tensors = [x for x in (pred, a, b) if isinstance(x, TensorProxy)]
    ref = tensors[0]
    for t in tensors[1:]:
        _check(same_shape(tuple(t.shape), tuple(ref.shape)), "prims.where: shapes differ")
    vals = [x for x in (a, b) if isinstance(x, TensorProxy)]
    if vals:
        dtype = vals[0].dtype
    else:
        dtype = torch.get_default_dtype() if isinstance(a, float) or isinstance(b, float) else torch.int64
    return new_tensor(ref.shape, dtype, ref.device, requires_grad(a, b))


where = make_prim("where", _where_meta)


def convert_element_type_meta(a, dtype: torch.dtype):
    if isinstance(a, NumberProxy):
        ptype = dtypes.python_type_of(dtype)
        return _new_number(ptype, None if a.value is None else ptype(a.value), a.inputs, a.origin)
    return new_tensor(a.shape, dtype, a.device, requires_grad(a) and dtypes.is_inexact(dtype))


convert_element_type = make_prim("convert_element_type", convert_element_type_meta)


def device_put_meta(a, device: torch.device):
    return new_tensor(a.shape, a.dtype, device, requires_grad(a))


device_put = make_prim("device_put", device_put_meta)


def shallow_copy_meta(a):
    """The same value under a new name (an operation whose result is its input)."""
    return new_tensor(a.shape, a.dtype, a.device, requires_grad(a))


shallow_copy = make_prim("shallow_copy", shallow_copy_meta)


def in_layout_meta(a, strides: tuple, offset: int, may_copy: bool):
    """``a`` as an operation reading its memory needs it: with ``strides`` and storage ``offset`` (eager's layout
    of it); ``a`` itself when laid out so at run time, else (``may_copy``) a copy laid out so."""
    return new_tensor(a.shape, a.dtype, a.device, requires_grad(a))


in_layout = make_prim("in_layout", in_layout_meta)
in_layout.is_view = True  # it may return its input: an alias of it, as far as updates go

# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------


def broadcast_in_dim_meta(a, shape, broadcast_dimensions):
    _check(len(broadcast_dimensions) == a.ndim, "prims.broadcast_in_dim: one broadcast dimension per input dimension")
    for d, s in zip(broadcast_dimensions, a.shape):
        # x[:1].expand(3) of a run-time extent: 1 or 0 when it runs, decided by its value or refused
        where = f"expanding {a.name} to {tuple(shape)}"
        if is_one(s) or assume_equal(s, shape[d], where) or is_runtime(s) and assume_equal(s, 1, where):
            continue
        raise RuntimeError(f"prims.broadcast_in_dim: cannot broadcast {tuple(a.shape)} to {shape}")
    return new_tensor(shape, a.dtype, a.device, requires_grad(a))


broadcast_in_dim = make_prim("broadcast_in_dim", broadcast_in_dim_meta)


def reshape_meta(a, shape):
    _check(prod_poly(shape).key() == prod_poly(a.shape).key(),
           lambda: f"prims.reshape: cannot reshape {tuple(a.shape)} to {tuple(shape)}")
    return new_tensor(shape, a.dtype, a.device, requires_grad(a))


reshape = make_prim("reshape", reshape_meta)


def transpose_meta(a, permutation):
    _check(sorted(permutation) == list(range(a.ndim)), "prims.transpose: not a permutation")
    return new_tensor([a.shape[p] for p in permutation], a.dtype, a.device, requires_grad(a))


transpose = make_prim("transpose", transpose_meta)


def slice_meta(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    shape = [_slice_extent(s, e, st) for s, e, st in zip(start_indices, end_indices, strides)]
    return new_tensor(shape, a.dtype, a.device, requires_grad(a))


def _slice_extent(start, stop, step):
    if not (is_runtime(start) or is_runtime(stop)):
        return builtins.max(0, (stop - start + step - 1) // step)
    from thunder.core.extents import decide, materialize, poly_of

    if step == 1 and decide(operator.ge, stop, start):  # e.g. the part of a concatenation
        return materialize(poly_of(stop) - poly_of(start))
    return clamp_at_zero(materialize(poly_of(stop) - poly_of(start)) if step == 1 else (stop - start + step - 1) // step)


slice_prim = make_prim("slice_prim", slice_meta)


def squeeze_meta(a, dims):
    dims = set(dims)
    return new_tensor([s for i, s in enumerate(a.shape) if i not in dims], a.dtype, a.device, requires_grad(a))


squeeze = make_prim("squeeze", squeeze_meta)


def cat_meta(tensors, dim: int):
    ref = tensors[0]
    shape = list(ref.shape)
    shape[dim] = builtins.sum(t.shape[dim] for t in tensors)  # `sum` here is prims.sum
    return new_tensor(shape, ref.dtype, ref.device, requires_grad(*tensors))


cat = make_prim("cat", cat_meta)


def pad_meta(a, padding_value, padding_config):
    shape = []
    for s, (lo, hi, dilation) in zip(a.shape, padding_config):
        interior = clamp_at_zero(s - 1) * dilation if dilation else 0
        shape.append(s if lo == hi == dilation == 0 else lo + hi + s + interior)
    return new_tensor(shape, a.dtype, a.device, requires_grad(a))


pad = make_prim("pad", pad_meta)


def flip_meta(a, dims):
    return new_tensor(a.shape, a.dtype, a.device, requires_grad(a))


flip = make_prim("flip", flip_meta)


def take_meta(a, index, dim: int):
    shape = list(a.shape)
    if shape:  # (torch's index_select of a 0-dim tensor is 0-dim)
        shape[dim] = index.numel()
    return new_tensor(shape, a.dtype, a.device, requires_grad(a))


take = make_prim("take", take_meta)


def gather_meta(a, index, dim: int):
    return new_tensor(index.shape, a.dtype, a.device, requires_grad(a))


gather = make_prim("gather", gather_meta)


def scatter_add_meta(a, index, value, dim: int):
    return new_tensor(a.shape, a.dtype, a.device, requires_grad(a, value))


scatter_add = make_prim("scatter_add", scatter_add_meta)


def index_add_meta(a, index, value, dim: int, alpha=1):
    return new_tensor(a.shape, a.dtype, a.device, requires_grad(a, value))


index_add = make_prim("index_add", index_add_meta)

# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------


def _reduced_shape(a, dims):
    dims = set(dims)
    return [s for i, s in enumerate(a.shape) if i not in dims]


def _reduction_meta(name, output_dtype=None):
    def meta(a, dims):
        dtype = output_dtype(a.dtype) if output_dtype else a.dtype
        return new_tensor(_reduced_shape(a, dims), dtype, a.device, requires_grad(a) and dtypes.is_inexact(dtype))

    meta.__name__ = name
    return meta


for _name in ("sum", "prod", "amax", "amin"):
    globals()[_name] = make_prim(_name, _reduction_meta(_name))


def sum_to_meta(a, dims: tuple, runtime_dims: tuple):
    """``a`` summed over ``dims`` and over those of ``runtime_dims`` (dimensions of run-time extents) whose extent is
    not 1 when it runs, every one of them kept, of extent 1: the gradient of a broadcast as eager's ``sum_to`` sums
    it, which skips a dimension that was not broadcast (a sum over an extent of 1 makes a -0 +0)."""
    shape = tuple(1 if d in dims or d in runtime_dims else n for d, n in enumerate(a.shape))
    return new_tensor(shape, a.dtype, a.device, requires_grad(a))


sum_to = make_prim("sum_to", sum_to_meta)
sum_to.is_view = True  # it may return its input (nothing to sum): an alias of it, as far as updates go


def var_meta(a, dims, *, correction):
    return new_tensor(_reduced_shape(a, dims), dtypes.to_real(a.dtype), a.device, requires_grad(a))


var = make_prim("var", var_meta)


def var_mean_meta(a, dims, *, correction):
    shape = _reduced_shape(a, dims)
    return (new_tensor(shape, dtypes.to_real(a.dtype), a.device, requires_grad(a)),
            new_tensor(shape, a.dtype, a.device, requires_grad(a)))


var_mean = make_prim("var_mean", var_mean_meta)


def _arg_reduction_meta(a, dim):
    shape = _reduced_shape(a, [dim]) if dim is not None else []
    return new_tensor(shape, torch.int64, a.device)


argmax = make_prim("argmax", _arg_reduction_meta)
argmin = make_prim("argmin", _arg_reduction_meta)


def cumsum_meta(a, dim: int):
    return new_tensor(a.shape, a.dtype, a.device, requires_grad(a))


cumsum = make_prim("cumsum", cumsum_meta)

# ---------------------------------------------------------------------------------------------
# Tensor creation
# ---------------------------------------------------------------------------------------------


def full_meta(shape, fill_value, *, device, dtype):
    return new_tensor(shape, dtype, device)


full = make_prim("full", full_meta)


def iota_meta(length, *, start, step, device, dtype):
    return new_tensor((length,), dtype, device)


iota = make_prim("iota", iota_meta)


def uniform_meta(shape, minval, maxval, *, device, dtype):
    return new_tensor(shape, dtype, device)


uniform = make_prim("uniform", uniform_meta, tags=(Tag.RANDOM,))


def randn_meta(shape, *, device, dtype):
    return new_tensor(shape, dtype, device)


randn = make_prim("randn", randn_meta, tags=(Tag.RANDOM,))

# ---------------------------------------------------------------------------------------------
# Linear algebra and neural-network primitives
# ---------------------------------------------------------------------------------------------


def matmul_shape(a, b) -> tuple:
    """The shape of ``torch.matmul(a, b)`` (run-time extents included)."""
    if a.ndim == 1 and b.ndim == 1:
        return ()
    if b.ndim == 1:
        return tuple(a.shape[:-1])
    if a.ndim == 1:
        return tuple(b.shape[:-2]) + (b.shape[-1],)
    _check_contraction(a.shape[-1], b.shape[-2], "prims.matmul", a, b)
    return tuple(broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))) + (a.shape[-2], b.shape[-1])


def matmul_meta(a, b):
    return new_tensor(matmul_shape(a, b), a.dtype, a.device, requires_grad(a, b))


matmul = make_prim("matmul", matmul_meta)


def linear_meta(a, w, bias):
    _check_contraction(a.shape[-1], w.shape[-1], "prims.linear", a, w)
    shape = tuple(a.shape[:-1]) + ((w.shape[0],) if w.ndim == 2 else ())
    return new_tensor(shape, a.dtype, a.device, requires_grad(a, w, bias))


linear = make_prim("linear", linear_meta)


def convolution_meta(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The output's shape from torch's meta kernel; a batch extent known only when the program runs (the rows a
    mask selects) is the output's too, other such extents are refused."""
    batch, rest = a.shape[0], tuple(a.shape[1:])
    if any(isinstance(s, NumberProxy) for s in rest + tuple(weight.shape)):
        raise NotImplementedError(
            "thunder cannot trace a convolution whose channel or spatial extents, or whose weight's, are known only "
            f"when the program runs (input {tuple(a.shape)}, weight {tuple(weight.shape)}); only the batch extent may be")
    out = torch.ops.aten.convolution.default(
        torch.empty((1 if isinstance(batch, NumberProxy) else batch,) + rest, device="meta", dtype=a.dtype),
        torch.empty(weight.shape, device="meta", dtype=weight.dtype),
        None if bias is None else torch.empty(bias.shape, device="meta", dtype=bias.dtype),
        stride, padding, dilation, transposed, output_padding, groups)
    return new_tensor((batch,) + tuple(out.shape[1:]), a.dtype, a.device, requires_grad(a, weight, bias))


convolution = make_prim("convolution", convolution_meta)


def embedding_meta(indices, weight):
    return new_tensor(tuple(indices.shape) + (weight.shape[1],), weight.dtype, weight.device, requires_grad(weight))


embedding = make_prim("embedding", embedding_meta)

# ---------------------------------------------------------------------------------------------
# Effects
# ---------------------------------------------------------------------------------------------


def copy__meta(src, dst):
    """Copies ``src`` into ``dst`` (an input, parameter or buffer), as an in-place update in eager would.

    Returns ``dst`` after the copy, under a new name: what reads the updated input reads this value, which
    keeps it after the copy in every ordering of the trace (see [Note: in-place updates])."""
    return new_tensor(dst.shape, dst.dtype, dst.device)


copy_ = make_prim("copy_", copy__meta, tags=(Tag.SIDE_EFFECT,))

__all__ = list(_PRIMS)  # the primitives defined here
