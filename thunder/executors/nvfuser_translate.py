"""Translating a fused region's primitives into an nvFuser ``FusionDefinition``.

``RULES`` maps a primitive's name to its rule: ``check(*args, **kwargs)``, whether nvFuser computes this call
as thunder means it (dtypes, arguments), and ``translate(d, *args, **kwargs)``, the nvFuser values it defines
(``d`` is the ``Definition`` being built). The executor fuses a primitive only where its rule's check holds
and its tensors are ones nvFuser takes (``supported_tensors``). Nothing here imports nvfuser: a
``Definition`` is given the module.

The facts the rules rely on (nvFuser's Python frontend, ``fd.ops``):
- elementwise ops take Tensors and Scalars only (a Python number becomes ``fd.define_scalar(value, dtype)``);
  a Scalar does not promote a Tensor of its own kind (float Scalar with a Half Tensor gives Half), so a
  number may join a tensor only where it is of the tensor's kind or a lower one (bool < int < float);
- ``div`` is true division on floats (C division on integers, which is not fused); ``maximum``/``minimum``
  and the ``max``/``min`` reductions propagate NaN, as torch does;
- reductions are ``sum/prod/max/min(t, dims)``, ``var(t, dims, correction)`` and ``var_mean`` (returning
  ``(var, mean)``, thunder's order); nvFuser's ``sum`` takes no empty ``dims`` and ``var`` no 0-d tensor;
- ``pad(t, widths, value)`` takes ``(lo, hi)`` pairs innermost dimension first, without interior padding;
  ``slice`` is fused with unit steps only;
- ``uniform(minval, maxval, shape, rng_seed=, rng_offset=, dtype=)`` and ``normal(mean, std, ...)`` draw
  with Philox from the given seed, at the given offset in units of four 32-bit draws (see [Note: random
  numbers in nvFuser regions] in thunder/executors/nvfuserex.py).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

from thunder.core.proxies import NumberProxy, TensorProxy

# torch dtype -> name of nvFuser's DataType: the dtypes a fused region may hold.
NV_DTYPES = {torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
             torch.int64: "Int", torch.int32: "Int32", torch.bool: "Bool"}
_NUMBER_DTYPES = {bool: "Bool", int: "Int", float: "Double"}  # Python numbers defined as nvFuser Scalars
MAX_RANK = 8  # nvFuser's largest tensor rank

FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
INTS = frozenset({torch.int32, torch.int64})
BOOL = frozenset({torch.bool})
NUMERIC = FLOATS | INTS
ANY = NUMERIC | BOOL
WIDE_FLOATS = frozenset({torch.float32, torch.float64})  # reductions that accumulate run in these only


def _kind(x) -> int:
    """bool < int < float, for tensors' dtypes and Python numbers."""
    if isinstance(x, torch.dtype):
        return 0 if x is torch.bool else 2 if x.is_floating_point else 1
    return 0 if isinstance(x, bool) else 1 if isinstance(x, int) else 2


def supported_tensors(bsym, device_types) -> bool:
    """Whether every value ``bsym`` reads or defines is one nvFuser takes: tensors (no run-time extents, no
    pending results) of a supported dtype and rank on an allowed device, with elements; Python numbers."""
    if not bsym.flat_outs:
        return False
    for v in (*bsym.flat_args, *bsym.flat_outs):
        if isinstance(v, NumberProxy) or type(v) is not TensorProxy:
            return False
        if v.device.type not in device_types or v.dtype not in NV_DTYPES or v.ndim > MAX_RANK:
            return False
        if not all(type(s) is int for s in v.shape) or math.prod(v.shape) == 0:
            return False
    return True


class Rule(NamedTuple):
    translate: Callable  # (d: Definition, *args, **kwargs) -> nvFuser value(s)
    check: Callable  # (*args, **kwargs) -> bool


RULES: dict[str, Rule] = {}


def _rule(*names: str, check: Callable):
    def register(translate):
        for name in names:
            RULES[name] = Rule(translate, check)
        return translate

    return register


class Definition:
    """What a rule sees while one ``FusionDefinition`` is built: ``fd``, its ``ops``, and ``value(x)``, the
    nvFuser value of a proxy defined so far or of a Python number."""

    def __init__(self, nvfuser, fd):
        self.nvfuser = nvfuser
        self.fd = fd
        self.ops = fd.ops
        self.values: dict[str, object] = {}  # proxy name -> nvFuser value
        self.random_inputs = 0  # (seed, offset) input pairs defined, one per random primitive

    def dtype(self, dtype: torch.dtype):
        return getattr(self.nvfuser.DataType, NV_DTYPES[dtype])

    def scalar(self, number, dtype: torch.dtype | None = None):
        name = NV_DTYPES[dtype] if dtype is not None else _NUMBER_DTYPES[type(number)]
        return self.fd.define_scalar(number, dtype=getattr(self.nvfuser.DataType, name))

    def value(self, x):
        return self.values[x.name] if isinstance(x, TensorProxy) else self.scalar(x)

    def rng_state(self):
        """Two Int inputs of the fusion, the seed and offset a random primitive draws with."""
        self.random_inputs += 1
        Int = self.nvfuser.DataType.Int
        return self.fd.define_scalar(dtype=Int), self.fd.define_scalar(dtype=Int)


# ---------------------------------------------------------------------------------------------
# Elementwise: the nvFuser op of the same name, where the tensors' dtype is among those listed
# ---------------------------------------------------------------------------------------------

ELEMENTWISE = {
    **dict.fromkeys(("abs", "neg", "sign"), NUMERIC),
    **dict.fromkeys(("exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
                     "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "reciprocal",
                     "floor", "ceil", "trunc", "erf", "erfc", "erfinv", "lgamma", "sigmoid", "isfinite", "isnan",
                     "isinf", "signbit", "div", "pow", "atan2"), FLOATS),
    **dict.fromkeys(("add", "sub", "mul", "maximum", "minimum", "lt", "le", "gt", "ge"), NUMERIC),
    **dict.fromkeys(("eq", "ne"), ANY),
    **dict.fromkeys(("bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"), INTS),
    **dict.fromkeys(("logical_and", "logical_or"), BOOL),
    "nextafter": WIDE_FLOATS,
}


def _numbers_fit(numbers, dtype: torch.dtype) -> bool:
    return all(type(n) in _NUMBER_DTYPES and _kind(n) <= _kind(dtype) for n in numbers)


def _elementwise_check(dtypes_):
    def check(*args):
        tensors = [a for a in args if isinstance(a, TensorProxy)]
        numbers = [a for a in args if not isinstance(a, TensorProxy)]
        return bool(tensors) and tensors[0].dtype in dtypes_ and _numbers_fit(numbers, tensors[0].dtype)

    return check


def _elementwise(op: str):
    def translate(d, *args):
        return getattr(d.ops, op)(*map(d.value, args))

    return translate


for _name, _dtypes in ELEMENTWISE.items():
    _rule(_name, check=_elementwise_check(_dtypes))(_elementwise(_name))


def _where_check(pred, a, b):
    tensors = [x for x in (a, b) if isinstance(x, TensorProxy)]
    return (isinstance(pred, TensorProxy) and pred.dtype is torch.bool and bool(tensors)
            and _numbers_fit([x for x in (a, b) if not isinstance(x, TensorProxy)], tensors[0].dtype))


@_rule("where", check=_where_check)
def _where(d, pred, a, b):
    return d.ops.where(d.value(pred), d.value(a), d.value(b))


@_rule("convert_element_type", check=lambda a, dtype: isinstance(a, TensorProxy) and dtype in NV_DTYPES)
def _convert_element_type(d, a, dtype):
    return d.ops.cast(d.value(a), d.dtype(dtype))


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------

def _always(*args, **kwargs) -> bool:
    return True


@_rule("broadcast_in_dim", check=_always)
def _broadcast_in_dim(d, a, shape, broadcast_dimensions):
    return d.ops.broadcast_in_dim(d.value(a), list(shape), list(broadcast_dimensions))


@_rule("reshape", check=_always)
def _reshape(d, a, shape):
    return d.ops.reshape(d.value(a), list(shape))


@_rule("transpose", check=_always)
def _transpose(d, a, permutation):
    return d.ops.permute(d.value(a), list(permutation))


def _slice_check(a, start_indices, end_indices, strides=None):
    return strides is None or all(s == 1 for s in strides)


@_rule("slice_prim", check=_slice_check)
def _slice(d, a, start_indices, end_indices, strides=None):
    return d.ops.slice(d.value(a), list(start_indices), list(end_indices), [1] * len(start_indices))


@_rule("squeeze", check=lambda a, dims: len(dims) > 0)
def _squeeze(d, a, dims):
    return d.ops.squeeze(d.value(a), list(dims))


@_rule("cat", check=lambda tensors, dim: len(tensors) > 0)
def _cat(d, tensors, dim):
    return d.ops.cat([d.value(t) for t in tensors], dim)


def _pad_check(a, padding_value, padding_config):
    return (_numbers_fit([padding_value], a.dtype)
            and all(lo >= 0 and hi >= 0 and dilation == 0 for lo, hi, dilation in padding_config))


@_rule("pad", check=_pad_check)
def _pad(d, a, padding_value, padding_config):
    widths = [w for lo, hi, _ in reversed(padding_config) for w in (lo, hi)]
    return d.ops.pad(d.value(a), widths, d.scalar(padding_value, a.dtype))


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------

_REDUCTIONS = {"sum": ("sum", WIDE_FLOATS | {torch.int64}), "prod": ("prod", WIDE_FLOATS),
               "amax": ("max", NUMERIC), "amin": ("min", NUMERIC)}


def _reduction(op: str):
    def translate(d, a, dims):
        return getattr(d.ops, op)(d.value(a), list(dims))

    return translate


for _name, (_op, _dtypes) in _REDUCTIONS.items():
    _rule(_name, check=lambda a, dims, _dtypes=_dtypes: a.dtype in _dtypes and len(dims) > 0)(_reduction(_op))


def _var_check(a, dims, *, correction):
    return a.dtype in WIDE_FLOATS and a.ndim > 0 and len(dims) > 0 and type(correction) is int


@_rule("var", check=_var_check)
def _var(d, a, dims, *, correction):
    return d.ops.var(d.value(a), list(dims), correction)


@_rule("var_mean", check=_var_check)
def _var_mean(d, a, dims, *, correction):
    return d.ops.var_mean(d.value(a), list(dims), correction)


# ---------------------------------------------------------------------------------------------
# Creation and random numbers
# ---------------------------------------------------------------------------------------------

@_rule("full", check=lambda shape, fill_value, *, device, dtype: _numbers_fit([fill_value], dtype))
def _full(d, shape, fill_value, *, device, dtype):
    return d.ops.full(list(shape), d.scalar(fill_value, dtype), d.dtype(dtype))


def _iota_check(length, *, start, step, device, dtype):
    return dtype in INTS and all(type(n) is int for n in (length, start, step))


@_rule("iota", check=_iota_check)
def _iota(d, length, *, start, step, device, dtype):
    return d.ops.iota(d.scalar(length, torch.int64), d.scalar(start, dtype), d.scalar(step, dtype), d.dtype(dtype))


def _uniform_check(shape, minval, maxval, *, device, dtype):
    return dtype in WIDE_FLOATS and _numbers_fit([minval, maxval], dtype)


@_rule("uniform", check=_uniform_check)
def _uniform(d, shape, minval, maxval, *, device, dtype):
    seed, offset = d.rng_state()
    return d.ops.uniform(d.scalar(float(minval)), d.scalar(float(maxval)), list(shape), rng_seed=seed,
                         rng_offset=offset, dtype=d.dtype(dtype))


@_rule("randn", check=lambda shape, *, device, dtype: dtype in WIDE_FLOATS)
def _randn(d, shape, *, device, dtype):
    seed, offset = d.rng_state()
    return d.ops.normal(d.scalar(0.0), d.scalar(1.0), list(shape), rng_seed=seed, rng_offset=offset,
                        dtype=d.dtype(dtype))


RANDOM = frozenset({"uniform", "randn"})
# Views and creation alone are not worth a kernel: a region needs one of the other primitives.
NOT_COMPUTE = frozenset({"broadcast_in_dim", "reshape", "transpose", "slice_prim", "squeeze", "full", "iota"})
# Primitives whose result may be their input unchanged (a cast to the same dtype, a reshape to the same shape).
_MAYBE_IDENTITY = frozenset({"convert_element_type", "broadcast_in_dim", "reshape", "transpose", "slice_prim", "pad",
                             "cat"})


def may_be_identity(bsym) -> bool:
    """Whether nvFuser may return ``bsym``'s input itself as its result: a region output so defined is copied
    (``ops.set``), so that no output of a fusion is one of its inputs or another output."""
    if bsym.sym.name not in _MAYBE_IDENTITY:
        return False
    a, out = bsym.flat_args[0], bsym.flat_outs[0]
    return tuple(a.shape) == tuple(out.shape) and a.dtype == out.dtype
