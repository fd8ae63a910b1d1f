"""OpInfos: one record per torch-language (``ltorch``) symbol, with sample inputs to compare against eager torch.

A record names the symbol it covers; the torch spellings it is tested through (``torch.add``,
``Tensor.add``, ``Tensor.__add__``, ``Tensor.add_``, ...) are looked up in the frontend's tables, so a
spelling registered for a symbol is always tested. ``tests/test_ops.py`` runs every record.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch.testing import make_tensor

f32, f64, bf16, i64, b8 = torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool
FLOATS = (f32, f64, bf16)
INTS = (i64,)
NUMERIC = FLOATS + INTS
ALL = NUMERIC + (b8,)


@dataclasses.dataclass(frozen=True)
class SampleInput:
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)

    def __repr__(self):
        def show(x):
            if isinstance(x, torch.Tensor):
                return f"T{list(x.shape)}:{str(x.dtype).removeprefix('torch.')}"
            if isinstance(x, (list, tuple)):
                inner = ", ".join(show(y) for y in x)
                return f"[{inner}]" if isinstance(x, list) else f"({inner})"
            return repr(x)

        kw = "".join(f", {k}={show(v)}" for k, v in self.kwargs.items())
        return f"SampleInput({', '.join(show(a) for a in self.args)}{kw})"


def S(*args, **kwargs) -> SampleInput:
    return SampleInput(args, kwargs)


class Compare(enum.Enum):
    """How a result is compared with eager's (see ``OpInfo.compare``)."""

    VALUES = enum.auto()  # values (bitwise for the torch executor)
    METADATA = enum.auto()  # shape and dtype only: uninitialized memory (``torch.empty``)


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """The test record of one ltorch symbol.

    ``op`` is the spelling the decomposition test traces (default: the symbol's torch callable);
    ``spellings`` adds callables to the ones registered for the symbol (``operator.add`` style
    lambdas, or the only way to reach an internal symbol), and ``registered_spellings=False`` leaves
    out the registered ones (``Tensor.__setitem__`` returns nothing: ``setitem`` is spelled by a
    function that assigns into a copy). ``random`` ops are compared under one
    seed (the torch executor makes eager's RNG calls) and their decompositions by metadata only,
    as a decomposition may draw differently. ``decomp_tol`` maps dtype to (rtol, atol) for the
    decomposition test, where the prims legitimately round differently from the fused kernel.
    """

    name: str
    sample_inputs: Callable[[torch.dtype], Iterable[SampleInput]]
    dtypes: tuple = FLOATS
    op: Callable | None = None
    spellings: tuple = ()
    registered_spellings: bool = True
    random: bool = False
    compare: Compare = Compare.VALUES
    decomp_tol: dict = dataclasses.field(default_factory=dict)
    requires_cuda: bool = False


# ---------------------------------------------------------------------------------------------
# Sample construction
# ---------------------------------------------------------------------------------------------

SHAPES = ((), (5,), (4, 5), (2, 3, 4))
BROADCAST_PAIRS = (((4, 5), (4, 5)), ((4, 5), (5,)), ((4, 1, 6), (5, 1)), ((), (3, 4)), ((2, 3), ()), ((0, 5), (1, 5)))


def make(shape, dtype, *, low=None, high=None, exclude_zero=False, noncontiguous=False):
    if dtype is b8:
        low = high = None
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high, exclude_zero=exclude_zero,
                       noncontiguous=noncontiguous)


def special_values(dtype):
    """Zeros of both signs, infinities and NaN: where decompositions differ from kernels."""
    return torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, float("inf"), -float("inf"), float("nan")], dtype=dtype)


def unique_values(shape, dtype):
    """Values without ties, so that arg-reductions have one answer."""
    n = math.prod(shape)
    values = torch.randperm(n).to(dtype) if dtype is not b8 else torch.arange(n) % 2 == 0
    return values.reshape(shape)


def scalar_of(dtype):
    return {b8: True, i64: 3}.get(dtype, 2.5)


# -- elementwise ------------------------------------------------------------------------------


def unary_samples(low=None, high=None, special=True):
    def gen(dtype):
        for i, shape in enumerate(SHAPES):
            yield S(make(shape, dtype, low=low, high=high, noncontiguous=i == 2))
        if special and dtype.is_floating_point:
            yield S(special_values(dtype))
        yield S(make((0, 3), dtype, low=low, high=high))

    return gen


def binary_samples(rhs_low=None, rhs_high=None, lhs_low=None, lhs_high=None, exclude_zero=False, scalars=True,
                   mixed=True, special=True, int_rhs_nonneg=False):
    """Pairs with broadcasting, a Python scalar, and mixed dtypes (type promotion)."""

    def gen(dtype):
        rlow = 0 if int_rhs_nonneg and not dtype.is_floating_point else rhs_low
        lhs = lambda s, dt=dtype: make(s, dt, low=lhs_low, high=lhs_high)  # noqa: E731
        rhs = lambda s, dt=dtype: make(s, dt, low=rlow, high=rhs_high, exclude_zero=exclude_zero)  # noqa: E731
        for sa, sb in BROADCAST_PAIRS:
            yield S(lhs(sa), rhs(sb))
        if scalars:
            yield S(lhs((4, 5)), scalar_of(dtype))
            if dtype is not b8:
                yield S(lhs((4, 5)), 2)
            if dtype.is_floating_point:
                yield S(lhs((4, 5)), 0.7)  # not representable in bfloat16
        if mixed:
            # promotion: a dimensioned tensor with another dtype, and a 0-dim tensor of a higher category
            other = f64 if dtype is not f64 else f32
            yield S(lhs((4, 5)), rhs((4, 5), other))
            yield S(lhs((4, 5)), rhs((), f32))
            if dtype.is_floating_point:
                yield S(lhs((3,)), rhs((3,), i64))
        if special and dtype.is_floating_point:
            v = special_values(dtype)
            yield S(v.reshape(-1, 1), v.reshape(1, -1))

    return gen


ACTIVATION_SAMPLES = unary_samples(-3, 3)


def activation(name, dtypes=FLOATS, extra=(), inplace=True, **kw):
    def gen(dtype):
        yield from ACTIVATION_SAMPLES(dtype)
        for kwargs in extra:
            yield S(make((4, 5), dtype, low=-30, high=30), **kwargs)
        if inplace:  # F.relu(a, inplace=True): updates (a copy of) the input and returns it
            yield S(make((4, 5), dtype, low=-3, high=3), inplace=True)

    return OpInfo(name, gen, dtypes, **kw)


def where_samples(dtype):
    for sc, sa, sb in (((4, 5), (4, 5), (4, 5)), ((4, 5), (5,), ()), ((4, 1), (1, 5), (4, 5))):
        yield S(make(sc, b8), make(sa, dtype), make(sb, dtype))
    yield S(make((4, 5), b8), make((4, 5), dtype), scalar_of(dtype))
    yield S(make((4, 5), b8), 0.5, make((4, 5), dtype))
    yield S(make((4, 5), b8), make((4, 5), dtype), make((4, 5), f64))


def masked_fill_samples(dtype):
    yield S(make((4, 5), dtype), make((4, 5), b8), scalar_of(dtype))
    yield S(make((4, 5), dtype), make((5,), b8), 0)
    yield S(make((2, 4, 5), dtype), make((4, 1), b8), make((), dtype))
    if dtype.is_floating_point:
        yield S(make((4, 5), dtype), make((4, 5), b8), float("-inf"))
    elif dtype is i64:
        yield S(make((4, 5), dtype), make((4, 5), b8), 2.7)  # the value is cast to the tensor's dtype


def clamp_samples(dtype):
    a = lambda: make((4, 5), dtype, low=-9, high=9)  # noqa: E731
    yield S(a(), -2, 3)
    yield S(a(), min=-1)
    yield S(a(), max=1)
    yield S(a(), make((5,), dtype, low=-9, high=0), make((4, 1), dtype, low=0, high=9))
    yield S(a(), min=make((4, 5), dtype))
    if dtype.is_floating_point:
        yield S(special_values(dtype), -1.0, 1.0)
        yield S(a(), 0.5, 0.25)  # min > max: max wins
    else:
        yield S(a(), -2.5, 3.5)  # float bounds promote an integer tensor


def clamp_one_samples():
    def gen(dtype):
        yield S(make((4, 5), dtype, low=-9, high=9), 1)
        yield S(make((4, 5), dtype), make((5,), dtype))
        if dtype.is_floating_point:
            yield S(special_values(dtype), 0.0)

    return gen


def lerp_samples(dtype):
    yield S(make((4, 5), dtype), make((4, 5), dtype), 0.3)
    yield S(make((4, 5), dtype), make((5,), dtype), make((4, 1), dtype))
    yield S(make((4, 5), dtype), make((4, 5), dtype), 0.7)
    if dtype.is_complex:  # a complex weight: its modulus picks the formula (math.fabs of it raised TypeError)
        yield S(make((4, 5), dtype), make((4, 5), dtype), 0.3 + 0.2j)
        yield S(make((4, 5), dtype), make((4, 5), dtype), 0.7 - 0.1j)


def addc_samples(div):
    def gen(dtype):
        t2 = lambda s: make(s, dtype, exclude_zero=div, low=0.5 if div else None)  # noqa: E731
        yield S(make((4, 5), dtype), make((4, 5), dtype), t2((4, 5)))
        yield S(make((4, 5), dtype), make((5,), dtype), t2((4, 1)), value=0.5)
        yield S(make((5,), dtype), make((4, 5), dtype), t2((4, 5)), value=2)

    return gen


def nan_to_num_samples(dtype):
    yield S(make((4, 5), dtype))
    if not dtype.is_floating_point:
        yield S(make((4, 5), dtype), nan=1.0)
        return
    yield S(special_values(dtype))
    yield S(special_values(dtype), nan=1.5, posinf=100.0, neginf=-100.0)


def gelu_samples(dtype):
    # no infinities: torch's vectorized float32 kernel gives NaN for gelu(inf), its float64 kernel inf
    yield from unary_samples(-3, 3, special=False)(dtype)
    yield S(special_values(dtype)[[0, 1, 2, 3, 4, 5, 8]])
    yield S(make((4, 5), dtype, low=-4, high=4), approximate="tanh")


def softplus_samples(dtype):
    yield from ACTIVATION_SAMPLES(dtype)
    yield S(make((4, 5), dtype, low=-30, high=30), beta=2.0, threshold=5.0)
    yield S(make((4, 5), dtype, low=-30, high=30), 0.5, 10.0)


# The unary elementwise ops: name -> (dtypes, low, high)
UNARY = {
    "abs": (NUMERIC, None, None), "neg": (NUMERIC, None, None), "exp": (ALL, -5, 5), "exp2": (ALL, -5, 5),
    "expm1": (ALL, -5, 5), "log": (ALL, 0.1, 10), "log1p": (ALL, -0.9, 10), "log2": (ALL, 0.1, 10),
    "log10": (ALL, 0.1, 10), "sin": (ALL, None, None), "cos": (ALL, None, None), "tan": (ALL, -1.5, 1.5),
    "asin": (ALL, -1, 1), "acos": (ALL, -1, 1), "atan": (ALL, None, None), "sinh": (ALL, -5, 5),
    "cosh": (ALL, -5, 5), "tanh": (ALL, None, None), "asinh": (ALL, None, None), "acosh": (ALL, 1, 10),
    "atanh": (ALL, -0.99, 0.99), "sqrt": (ALL, 0, 10), "rsqrt": (ALL, 0.1, 10), "reciprocal": (ALL, 0.1, 10),
    "sign": (ALL, None, None), "floor": (NUMERIC, None, None), "ceil": (NUMERIC, None, None),
    "trunc": (NUMERIC, None, None), "erf": (ALL, None, None),
    "erfc": (ALL, None, None), "erfinv": (ALL, -0.99, 0.99), "lgamma": (ALL, 0.1, 10),
    "digamma": (ALL, 0.1, 10), "bitwise_not": ((i64, b8), None, None), "isfinite": (ALL, None, None),
    "isnan": (ALL, None, None), "isinf": (ALL, None, None), "signbit": (ALL, None, None),
    "sigmoid": (ALL, None, None), "logical_not": (ALL, None, None), "square": (ALL, None, None),
    "frac": (FLOATS, None, None), "positive": (NUMERIC, None, None),
}

# Binary elementwise ops: name -> (dtypes, sample generator)
BINARY = {
    "add": (ALL, binary_samples()), "sub": (NUMERIC, binary_samples()), "mul": (ALL, binary_samples()),
    "div": (ALL, binary_samples(exclude_zero=True)), "true_divide": (ALL, binary_samples(exclude_zero=True)),
    "floor_divide": (NUMERIC, binary_samples(exclude_zero=True)),
    "remainder": (NUMERIC, binary_samples(exclude_zero=True)), "fmod": (NUMERIC, binary_samples(exclude_zero=True)),
    "pow": (NUMERIC, binary_samples(lhs_low=0.5, lhs_high=3, rhs_low=-2, rhs_high=3, int_rhs_nonneg=True)),
    "float_power": (NUMERIC, binary_samples(lhs_low=0.5, lhs_high=3, rhs_low=-2, rhs_high=3)),
    "atan2": (ALL, binary_samples()), "maximum": (ALL, binary_samples(scalars=False)),
    "minimum": (ALL, binary_samples(scalars=False)),
    "eq": (ALL, binary_samples()), "ne": (ALL, binary_samples()), "lt": (ALL, binary_samples()),
    "le": (ALL, binary_samples()), "gt": (ALL, binary_samples()), "ge": (ALL, binary_samples()),
    "bitwise_and": ((i64, b8), binary_samples(mixed=False)), "bitwise_or": ((i64, b8), binary_samples(mixed=False)),
    "bitwise_xor": ((i64, b8), binary_samples(mixed=False)),
    "bitwise_left_shift": (INTS, binary_samples(rhs_low=0, rhs_high=5, mixed=False)),
    "bitwise_right_shift": (INTS, binary_samples(rhs_low=0, rhs_high=5, mixed=False)),
    "logical_and": (ALL, binary_samples()), "logical_or": (ALL, binary_samples()),
    "logical_xor": (ALL, binary_samples()), "copysign": (ALL, binary_samples()),
    "hypot": (FLOATS, binary_samples(scalars=False)), "nextafter": ((f32, f64), binary_samples(scalars=False)),
}


def alpha_samples(dtype):
    yield from binary_samples()(dtype)
    if dtype is not b8:
        yield S(make((4, 5), dtype), make((5,), dtype), alpha=2)
        if dtype.is_floating_point:
            yield S(make((4, 5), dtype), make((5,), dtype), alpha=0.5)


def rounding_div_samples(dtype):
    yield from binary_samples(exclude_zero=True)(dtype)
    for mode in ("trunc", "floor"):
        yield S(make((4, 5), dtype, low=-9, high=9), make((5,), dtype, low=-3, high=3, exclude_zero=True),
                rounding_mode=mode)
        yield S(make((4, 5), dtype, low=-9, high=9), 2, rounding_mode=mode)
        yield S(make((4, 5), dtype, low=-9, high=9), make((4, 5), f64, low=1, high=3), rounding_mode=mode)


def reversed_samples(exclude_zero=False, nonneg=False):
    """``Tensor.__rsub__(a, b)`` is ``b - a``: a tensor and a Python scalar or tensor."""

    def gen(dtype):
        low = 0.5 if nonneg else None
        yield S(make((4, 5), dtype, low=low, high=3 if nonneg else None, exclude_zero=exclude_zero), 2)
        if dtype is not b8:
            yield S(make((4, 5), dtype, low=low, high=3 if nonneg else None, exclude_zero=exclude_zero), 1.5)
        yield S(make((5,), dtype, low=low, high=3 if nonneg else None, exclude_zero=exclude_zero),
                make((4, 5), dtype, low=0 if nonneg else None, high=3 if nonneg else None))

    return gen


def round_samples(dtype):
    yield from unary_samples()(dtype)
    if dtype.is_floating_point:
        for decimals in (1, 3, -1, -2):
            yield S(make((4, 5), dtype, low=-500, high=500), decimals=decimals)


def elementwise_opinfos():
    out = [OpInfo(name, unary_samples(low, high), dtypes) for name, (dtypes, low, high) in UNARY.items()]
    out.append(OpInfo("round", round_samples, NUMERIC))
    for name, (dtypes, gen) in BINARY.items():
        if name in ("add", "sub"):
            gen = alpha_samples
        elif name == "div":
            gen = rounding_div_samples
        out.append(OpInfo(name, gen, dtypes))
    out += [
        OpInfo("rsub", reversed_samples(), NUMERIC),
        OpInfo("rdiv", reversed_samples(exclude_zero=True), ALL, op=torch.Tensor.__rtruediv__),
        OpInfo("rfloordiv", reversed_samples(exclude_zero=True), NUMERIC, op=torch.Tensor.__rfloordiv__),
        OpInfo("rmod", reversed_samples(exclude_zero=True), NUMERIC, op=torch.Tensor.__rmod__),
        OpInfo("rpow", reversed_samples(nonneg=True), NUMERIC, op=torch.Tensor.__rpow__),
        OpInfo("where", where_samples, ALL, spellings=(lambda c, a, b: a.where(c, b),)),
        OpInfo("masked_fill", masked_fill_samples, ALL),
        OpInfo("clamp", clamp_samples, NUMERIC),
        OpInfo("clamp_min", clamp_one_samples(), NUMERIC),
        OpInfo("clamp_max", clamp_one_samples(), NUMERIC),
        # complex: a complex weight (torch's OpInfo samples); ATen's complex kernel multiplies otherwise than the prims
        OpInfo("lerp", lerp_samples, FLOATS + (torch.complex64,), decomp_tol={torch.complex64: (1.3e-6, 1e-5)}),
        OpInfo("addcmul", addc_samples(False), NUMERIC),
        OpInfo("addcdiv", addc_samples(True), FLOATS),
        OpInfo("nan_to_num", nan_to_num_samples, NUMERIC),
        activation("relu", NUMERIC),
        activation("relu6", NUMERIC),
        activation("leaky_relu", extra=({"negative_slope": 0.2},)),
        activation("elu", extra=({"alpha": 0.5},)),
        activation("selu"),
        activation("celu", extra=({"alpha": 2.0},)),
        activation("hardtanh", NUMERIC, extra=({"min_val": -0.5, "max_val": 2.0},)),
        OpInfo("gelu", gelu_samples, FLOATS, decomp_tol={bf16: (1.6e-2, 1e-2)}),
        activation("silu"),
        activation("mish"),
        OpInfo("softplus", softplus_samples, FLOATS),
        activation("logsigmoid", inplace=False),
        activation("hardsigmoid"),
        activation("hardswish"),
        activation("softsign", inplace=False),
        activation("tanhshrink", inplace=False),
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------

REDUCTION_DIMS = {0: (None, 0, -1), 1: (None, 0, -1), 2: (None, 1, -1, (0, 1)), 3: (None, 1, (0, 2), (-1, 0))}


def reduction_samples(*, tuple_dims=True, dim_required=False, dtype_kwarg=None, values=make, kwargs=({},),
                      keepdim=True):
    """Full and partial reductions, negative and tuple dims, keepdim, and a ``dtype=`` when given."""

    def gen(dtype):
        for shape in SHAPES:
            for dim in REDUCTION_DIMS[len(shape)]:
                if (isinstance(dim, tuple) and not tuple_dims) or (dim is None and dim_required):
                    continue
                for kw in kwargs:
                    a = values(shape, dtype)
                    yield S(a, **kw) if dim is None else S(a, dim, **kw)
                    if keepdim and (dim is not None or not dim_required):
                        yield S(values(shape, dtype), dim, True, **kw)
        yield S(values((0, 3), dtype), 0)  # an empty reduction: the op's identity, or an error
        if dtype_kwarg is not None:
            yield S(values((4, 5), dtype), 1, dtype=dtype_kwarg)
            if not dim_required:
                yield S(values((4, 5), dtype), dtype=dtype_kwarg)

    return gen


def max_min_samples(dtype):
    for shape in SHAPES:
        yield S(unique_values(shape, dtype))
        for dim in REDUCTION_DIMS[len(shape)][1:]:
            if not isinstance(dim, tuple):
                yield S(unique_values(shape, dtype), dim)
                yield S(unique_values(shape, dtype), dim, keepdim=True)
    yield from binary_samples(scalars=False)(dtype)


def arg_reduction_samples(dtype):
    for shape in SHAPES:
        yield S(unique_values(shape, dtype))
        yield S(unique_values(shape, dtype), keepdim=True)
        for dim in REDUCTION_DIMS[len(shape)][1:]:
            if not isinstance(dim, tuple):
                yield S(unique_values(shape, dtype), dim)
                yield S(unique_values(shape, dtype), dim, True)


VAR_KWARGS = ({}, {"unbiased": False}, {"correction": 0}, {"correction": 2})


def var_samples(dtype):
    for shape in SHAPES:
        for dim in REDUCTION_DIMS[len(shape)]:
            for kw in VAR_KWARGS:
                yield S(make(shape, dtype), dim, **kw)
            yield S(make(shape, dtype), dim, keepdim=True)
    yield S(make((4, 5), dtype))
    yield S(make((4, 5), dtype), 1, False, True)  # positional unbiased, keepdim
    # the overload var(input, unbiased: bool): over all elements (read as dim 1, fused it gave a row; OpInfo samples)
    yield S(make((4, 5), dtype), True)
    yield S(make((4, 5), dtype), False)


def logsumexp_samples(dtype):
    for shape in SHAPES:
        for dim in REDUCTION_DIMS[len(shape)][1:]:
            yield S(make(shape, dtype), dim)
            yield S(make(shape, dtype), dim, True)
    if dtype.is_floating_point:
        yield S(special_values(dtype)[:8].reshape(2, 4), 1)  # rows with infinities
        yield S(torch.full((3, 2), -float("inf"), dtype=dtype), 1)
    yield S(make((0, 3), dtype), 0)


def cumsum_samples(dtype):
    # (no 0-dim bool: eager's bool.cumsum_(0) succeeds on a 0-dim tensor only, thunder always rejects it)
    for shape in SHAPES if dtype is not b8 else SHAPES[1:]:
        for dim in (0, -1):
            yield S(make(shape, dtype), dim)
    yield S(make((4, 5), dtype), 1, dtype=f64)


NORM_ORDS = (2, 1, 3.5, float("inf"), -float("inf"), 0)


def norm_samples(dtype):
    for p in ("fro",) + NORM_ORDS:
        yield S(make((4, 5), dtype), p)
        yield S(make((2, 3, 4), dtype), p, 1, True)
        if p in ("fro", 2):
            yield S(make((2, 3, 4), dtype), p, (0, 2))
    yield S(make((5,), dtype))
    yield S(make((), dtype), 2)


def vector_norm_samples(dtype):
    for ord in NORM_ORDS + (-1, 0.5):
        yield S(make((4, 5), dtype), ord)
        yield S(make((2, 3, 4), dtype), ord, (0, 2), True)
        yield S(make((2, 3, 4), dtype), ord, -1)
    yield S(make((), dtype))
    yield S(make((4, 5), dtype), dtype=f64)


def reduction_opinfos():
    return [
        OpInfo("sum", reduction_samples(dtype_kwarg=f64), ALL),
        OpInfo("prod", reduction_samples(tuple_dims=False, dtype_kwarg=f64), ALL),
        OpInfo("mean", reduction_samples(dtype_kwarg=f64), FLOATS),
        OpInfo("amax", reduction_samples(), ALL),
        OpInfo("amin", reduction_samples(), ALL),
        OpInfo("max", max_min_samples, ALL),
        OpInfo("min", max_min_samples, ALL),
        OpInfo("argmax", arg_reduction_samples, NUMERIC),
        OpInfo("argmin", arg_reduction_samples, NUMERIC),
        OpInfo("var", var_samples, FLOATS),
        OpInfo("std", var_samples, FLOATS),
        OpInfo("var_mean", var_samples, FLOATS),
        OpInfo("std_mean", var_samples, FLOATS),
        OpInfo("all", reduction_samples(), ALL),
        OpInfo("any", reduction_samples(), ALL),
        OpInfo("is_all_true", lambda dtype: (S(make(shape, dtype)) for shape in (*SHAPES, (0, 3))), (b8,)),
        OpInfo("count_nonzero", reduction_samples(keepdim=False), ALL),
        OpInfo("logsumexp", logsumexp_samples, NUMERIC),
        OpInfo("cumsum", cumsum_samples, ALL),
        OpInfo("norm", norm_samples, FLOATS),
        OpInfo("vector_norm", vector_norm_samples, FLOATS),
    ]


# ---------------------------------------------------------------------------------------------
# Shapes, views and indexing
# ---------------------------------------------------------------------------------------------


def samples(*cases):
    """A generator from cases ``(arg, ..., {kwargs})`` in which ``T(shape)`` stands for a tensor of the dtype."""

    def gen(dtype):
        for case in cases:
            kwargs = case[-1] if case and isinstance(case[-1], dict) else {}
            args = case[:-1] if kwargs else case
            yield S(*(_materialize(x, dtype) for x in args), **kwargs)

    return gen


@dataclasses.dataclass(frozen=True)
class T:
    """A tensor argument of a ``samples`` case: its shape, and a dtype other than the test's."""

    shape: tuple
    dtype: torch.dtype | None = None

    def __init__(self, *shape, dtype=None):
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)


def _materialize(x, dtype):
    if isinstance(x, T):
        return make(x.shape, x.dtype or dtype)
    if isinstance(x, list):
        return [_materialize(y, dtype) for y in x]
    return x


def shape_opinfo(name, *cases, dtypes=ALL, **kw):
    return OpInfo(name, samples(*cases), dtypes, **kw)


def view_spellings(method):
    """``a.view(2, 3)``: the varargs spelling of a method that also takes a shape tuple."""
    return (lambda a, shape: getattr(a, method)(*shape),)


def getitem_samples(dtype):
    a = lambda: make((4, 5, 6), dtype)  # noqa: E731
    keys = [0, -1, slice(1, 3), slice(None, None, 2), (1, 2), (slice(None), 3), (Ellipsis, 1), (None, 0),
            (slice(1, None), None, slice(None, 4, 3)), (Ellipsis, None), (1, Ellipsis, slice(-3, None)),
            slice(10, 20), slice(-100, 2), (slice(3, 1),), ()]
    for key in keys:
        yield S(a(), key)
    yield S(a(), torch.tensor([2, 0, 3]))  # integer tensor: gathers rows
    # rows repeated: their gradients add up in eager's order (an accumulating index_put; index_select's gradient, an
    # index_add, rounds otherwise in float16 and bfloat16: a mixture of experts' hidden_states[token_idx])
    yield S(a(), torch.tensor([1, 3, 1, 1, 0, 1, -1, 1, 3, 1, 1]))
    yield S(a(), torch.tensor(1))
    yield S(a(), (slice(None), torch.tensor([[0, 1], [2, 4]])))  # advanced indexing: the generic fallback
    yield S(a(), (torch.tensor([0, 1]), slice(None), torch.tensor([1, 2])))
    yield S(make((), dtype), ())
    yield S(make((), dtype), None)


def setitem(a, key, value):
    """``a[key] = value`` on a copy (``Tensor.__setitem__`` returns nothing)."""
    a = a.clone()
    a[key] = value
    return a


def setitem_samples(dtype):
    a = lambda: make((4, 5), dtype)  # noqa: E731
    yield S(a(), 0, make((5,), dtype))
    yield S(a(), (slice(1, 3), 2), scalar_of(dtype))
    yield S(a(), (Ellipsis, slice(None, None, 2)), make((1,), dtype))
    yield S(a(), torch.tensor([0, 2]), make((2, 5), f64 if dtype is not f64 else f32))  # value of another dtype
    yield S(a(), make((4, 5), b8), 0)  # boolean mask assignment: no data-dependent shape


def to_samples(dtype):
    yield S(make((4, 5), dtype), f64)
    yield S(make((4, 5), dtype), dtype)  # no change: returns the input itself
    yield S(make((4, 5), dtype), "cpu")
    yield S(make((4, 5), dtype), "cpu", i64)
    yield S(make((4, 5), dtype), torch.device("cpu"), dtype=b8)
    yield S(make((4, 5), dtype), make((2,), f32))
    yield S(make((4, 5), dtype), dtype=bf16, copy=True)


def type_samples(dtype):
    yield S(make((4, 5), dtype), f64)
    yield S(make((4, 5), dtype), "torch.IntTensor")
    yield S(make((4, 5), dtype), dtype=b8)


def dtype_method(name):
    return OpInfo(name, samples((T(4, 5),), (T(),)), ALL)


def pad_samples(dtype):
    yield S(make((4, 5), dtype), (1, 2))
    yield S(make((2, 4, 5), dtype), (1, 1, 0, 2), value=scalar_of(dtype))
    yield S(make((4, 5), dtype), (-1, 2, 1, -2))
    yield S(make((4, 5), dtype), (0, 0))
    if dtype.is_floating_point:
        yield S(make((1, 4, 5), dtype), (2, 1), mode="reflect")
        yield S(make((1, 4, 5), dtype), (1, 1, 2, 0), "replicate")


def scatter_add_samples(dtype):
    yield S(make((4, 5), dtype), 1, torch.randint(0, 5, (4, 3)), make((4, 3), dtype))
    yield S(make((4, 5), dtype), 0, torch.randint(0, 4, (2, 5)), make((3, 6), dtype))  # src larger than index
    yield S(make((4, 5), dtype), -1, torch.randint(0, 5, (4, 5)), make((4, 5), dtype))


def index_add_samples(dtype):
    yield S(make((4, 5), dtype), 1, torch.tensor([0, 4, 0]), make((4, 3), dtype))
    yield S(make((4, 5), dtype), 0, torch.tensor([3, 1]), make((2, 5), dtype), alpha=scalar_of(dtype))
    # repeated indices and alpha: the kernel scales each slice as it adds it (rounding as a scaled source does not)
    yield S(make((2, 5), dtype), 0, torch.tensor([0, 1, 0, 1, 0, 1]), make((6, 5), dtype), alpha=3)
    yield S(make((5,), dtype), 0, torch.tensor(2), make((), dtype))
    yield S(make((), dtype), 0, torch.tensor([0]), make((), dtype), alpha=-1)  # 0-dim (its gradient: OpInfo samples)


def cat_samples(dtype):
    yield S([make((2, 3), dtype), make((4, 3), dtype)])
    yield S([make((2, 3), dtype), make((2, 1), dtype), make((2, 4), dtype)], 1)
    yield S([make((2, 3), dtype), make((2, 3), f64)], -1)  # type promotion
    yield S([make((2, 3), dtype)], dim=0)
    yield S([make((2, 3), dtype), make((0,), dtype)])  # legacy: a 1-D empty tensor is skipped
    empty = make((0,), dtype)
    yield S([empty, empty, make((0,), dtype)])  # only such tensors (one of them twice): an empty result
    yield S((make((3,), dtype), make((2,), dtype)))


def stack_samples(dtype):
    yield S([make((2, 3), dtype), make((2, 3), dtype)])
    yield S([make((2, 3), dtype), make((2, 3), dtype), make((2, 3), dtype)], -1)
    yield S((make((), dtype), make((), dtype)), 0)
    yield S([make((2, 3), dtype), make((2, 3), i64)], 1)


def split_samples(dtype):
    yield S(make((4, 5), dtype), 2)
    yield S(make((4, 5), dtype), 2, 1)
    yield S(make((4, 5), dtype), [1, 4], -1)
    yield S(make((4, 5), dtype), 5, 1)
    yield S(make((4, 5), dtype), 7, 1)


def tensor_split_samples(dtype):
    yield S(make((4, 5), dtype), 3, 1)
    yield S(make((4, 5), dtype), 2)
    yield S(make((4, 5), dtype), [1, 3], 1)
    yield S(make((4, 5), dtype), (2, 7), -1)
    yield S(make((7,), dtype), 3)
    yield S(make((4, 5), dtype), indices=(1, 3), dim=1)  # torch's keyword names of its overloads
    yield S(make((4, 5), dtype), sections=2, dim=1)


def gather_samples(dtype):
    yield S(make((4, 5), dtype), 1, torch.randint(0, 5, (4, 3)))
    yield S(make((4, 5), dtype), 0, torch.randint(0, 4, (2, 5)))
    yield S(make((4, 5), dtype), -1, torch.randint(0, 5, (2, 2)))


def take_along_dim_samples(dtype):
    yield S(make((4, 5), dtype), torch.randint(0, 5, (4, 3)), 1)
    yield S(make((4, 5), dtype), torch.randint(0, 4, (1, 5)), 0)  # broadcasts the other dims
    yield S(make((4, 5), dtype), torch.randint(0, 20, (6,)))  # no dim: the flattened input
    yield S(make((2, 4, 5), dtype), torch.randint(0, 5, (4, 2)), -1)
    yield S(make((4, 5), dtype), torch.randint(-5, 5, (4, 3)), 1)  # negative indices, which eager wraps (OpInfo)


def index_select_samples(dtype):
    yield S(make((4, 5), dtype), 1, torch.tensor([0, 4, 4, 2]))
    yield S(make((6, 5), dtype), 0, torch.tensor([1, 3, 1, 1, 0, 1, 5, 1, 3, 1, 1]))  # an index_add, as eager's gradient
    yield S(make((4, 5), dtype), 0, torch.tensor(2))
    yield S(make((5,), dtype), 0, torch.tensor([1, 3]))
    yield S(make((), dtype), 0, torch.tensor([0]))


def shape_opinfos():
    return [
        shape_opinfo("reshape", (T(4, 5), (5, 4)), (T(4, 5), (-1,)), (T(2, 3, 4), (4, -1, 2)), (T(), (1, 1)),
                     (T(1), ()), (T(4, 5), (4, 5)), spellings=view_spellings("reshape")),
        shape_opinfo("view", (T(4, 5), (5, 4)), (T(4, 5), (-1,)), (T(2, 3, 4), (6, 4)), (T(), (1,)),
                     spellings=view_spellings("view") + (lambda a, shape: a.view(a.dtype),)),
        shape_opinfo("view_as", (T(4, 5), T(2, 10)), (T(4, 5), T(4, 5))),
        shape_opinfo("reshape_as", (T(4, 5), T(2, 10)), (T(4, 5), T(20))),
        shape_opinfo("flatten", (T(2, 3, 4),), (T(2, 3, 4), 1), (T(2, 3, 4), 0, 1), (T(2, 3, 4), -2, -1), (T(),),
                     (T(5), 0, 0)),
        shape_opinfo("unflatten", (T(4, 6), 1, (2, 3)), (T(4, 6), -1, (3, -1)), (T(4, 6), 0, (4,))),
        shape_opinfo("squeeze", (T(4, 1, 5, 1),), (T(4, 1, 5, 1), 1), (T(4, 1, 5, 1), 0), (T(4, 1, 5, 1), (1, -1)),
                     (T(1),), (T(), 0), (T(1, 1), -2)),
        shape_opinfo("unsqueeze", (T(4, 5), 0), (T(4, 5), -1), (T(4, 5), 1), (T(), 0), (T(), -1)),
        shape_opinfo("permute", (T(2, 3, 4), (2, 0, 1)), (T(2, 3, 4), (0, 1, 2)), (T(2, 3, 4), (-1, 0, -2)),
                     (T(), ()), spellings=view_spellings("permute")),
        shape_opinfo("transpose", (T(2, 3, 4), 0, 1), (T(2, 3, 4), -1, 0), (T(4, 5), 1, 1), (T(), 0, -1)),
        shape_opinfo("t", (T(4, 5),), (T(5),), (T(),)),
        shape_opinfo("T", (T(4, 5),), (T(5),), (T(),)),
        shape_opinfo("mT", (T(4, 5),), (T(2, 3, 4),)),
        shape_opinfo("movedim", (T(2, 3, 4), 0, 2), (T(2, 3, 4), (0, 1), (2, 0)), (T(2, 3, 4), -1, 0),
                     (T(2, 3, 4), [2], [0])),
        shape_opinfo("expand", (T(1, 5), (4, 5)), (T(4, 1), (2, 4, 3)), (T(4, 1), (-1, 5)), (T(), (2, 3)),
                     (T(4, 5), (4, 5)), spellings=view_spellings("expand")),
        shape_opinfo("expand_as", (T(1, 5), T(4, 5)), (T(5), T(2, 3, 5))),
        shape_opinfo("broadcast_to", (T(1, 5), (4, 5)), (T(4, 1), (2, 4, 3)), (T(), (2,))),
        shape_opinfo("broadcast_tensors", (T(1, 5), T(4, 1)), (T(3), T(2, 1), T()), (T(2, 3),)),
        shape_opinfo("repeat", (T(2, 3), (2, 1)), (T(2, 3), (1, 2, 2)), (T(), (3,)), (T(3), (2, 2)),
                     spellings=view_spellings("repeat")),
        shape_opinfo("tile", (T(2, 3), (2,)), (T(2, 3), (2, 1, 2)), (T(2, 3), (1, 2)), (T(3), (2, 2))),
        OpInfo("cat", cat_samples, ALL),
        OpInfo("stack", stack_samples, ALL),
        shape_opinfo("hstack", ([T(2, 3), T(2, 1)],), ([T(3), T(2)],), ([T(), T()],)),
        shape_opinfo("vstack", ([T(2, 3), T(1, 3)],), ([T(3), T(3)],), ([T(3), T(2, 3)],)),
        shape_opinfo("narrow", (T(4, 5), 1, 1, 2), (T(4, 5), 0, -2, 2), (T(4, 5), -1, 0, 5), (T(4, 5), 0, 4, 0)),
        shape_opinfo("select", (T(4, 5), 0, 1), (T(4, 5), 1, -1), (T(2, 3, 4), -1, 3)),
        OpInfo("split", split_samples, ALL),
        OpInfo("tensor_split", tensor_split_samples, ALL),
        shape_opinfo("chunk", (T(4, 5), 2), (T(4, 5), 3, 1), (T(4, 5), 4, 1), (T(4, 5), 6, -1)),
        shape_opinfo("unbind", (T(4, 5),), (T(4, 5), 1), (T(2, 3, 4), -1)),
        shape_opinfo("flip", (T(4, 5), (0,)), (T(2, 3, 4), (0, 2)), (T(2, 3, 4), [-1]), (T(4, 5), ()),
                     spellings=view_spellings("flip")),
        shape_opinfo("roll", (T(4, 5), 2), (T(4, 5), (1, -2), (0, 1)), (T(4, 5), 3, -1), (T(4, 5), -7, 1),
                     (T(2, 3, 4), 5)),
        shape_opinfo("tril", (T(4, 5),), (T(4, 5), 1), (T(4, 5), -2), (T(2, 3, 4), 0)),
        shape_opinfo("triu", (T(4, 5),), (T(4, 5), 1), (T(4, 5), -2), (T(2, 3, 4), 0)),
        OpInfo("index_select", index_select_samples, ALL),
        OpInfo("gather", gather_samples, ALL),
        OpInfo("take_along_dim", take_along_dim_samples, ALL),
        OpInfo("scatter_add", scatter_add_samples, NUMERIC),
        OpInfo("index_add", index_add_samples, NUMERIC),
        OpInfo("pad", pad_samples, NUMERIC),
        OpInfo("getitem", getitem_samples, ALL),
        OpInfo("setitem", setitem_samples, ALL, op=setitem, spellings=(setitem,), registered_spellings=False),
        OpInfo("to", to_samples, ALL),
        *(dtype_method(name) for name in ("float", "double", "half", "bfloat16", "int", "long", "bool")),
        shape_opinfo("type_as", (T(4, 5), T(2, dtype=f64)), (T(4, 5), T(2, dtype=i64))),
        OpInfo("type_", type_samples, ALL),
        shape_opinfo("cpu", (T(4, 5),)),
        shape_opinfo("cuda", (T(4, 5),), requires_cuda=True),
        shape_opinfo("contiguous", (T(4, 5),)),
        shape_opinfo("clone", (T(4, 5),), (T(),)),
        shape_opinfo("detach", (T(4, 5),)),
        shape_opinfo("data", (T(4, 5),)),
        shape_opinfo("requires_grad_", (T(4, 5), False), dtypes=FLOATS),
        shape_opinfo("diagonal", (T(4, 5),), (T(4, 5), 1), (T(2, 3, 4), -1, -1, 0), (T(2, 3, 4), 0, 0, 2)),
        shape_opinfo("einsum", ("ij,jk->ik", T(2, 3), T(3, 4)), ("bij->bji", T(2, 3, 4)), ("i,i->", T(3), T(3)),
                     ("ij,j", [T(2, 3), T(3)]), dtypes=FLOATS),
        shape_opinfo("outer", (T(4), T(5)), (T(3), T(2, dtype=f64))),
        shape_opinfo("repeat_interleave", (T(2, 3), 2), (T(2, 3), 2, 1), (T(2, 3), 3, -2), (T(), 2)),
    ]


# ---------------------------------------------------------------------------------------------
# Creation, including random ops (compared under one seed: the torch executor makes eager's RNG calls)
# ---------------------------------------------------------------------------------------------


def factory_samples(dtype):
    yield S(2, 3, dtype=dtype)
    yield S((2, 3), dtype=dtype)
    yield S([4], dtype=dtype)
    yield S(torch.Size([2, 0, 3]), dtype=dtype)
    yield S(dtype=dtype)  # 0-dim
    yield S(3)  # the default dtype


def full_samples(dtype):
    yield S((2, 3), scalar_of(dtype), dtype=dtype)
    yield S((2, 3), -2.7, dtype=dtype)
    yield S([4], 1.5, dtype=dtype)
    yield S((), scalar_of(dtype))  # dtype inferred from the fill value
    yield S((2, 1), True)
    yield S((3,), 7)


def like_samples(dtype):
    yield S(make((4, 5), dtype))
    yield S(make((), dtype), dtype=f64)
    yield S(make((2, 3), f32), dtype=dtype)


def full_like_samples(dtype):
    yield S(make((4, 5), dtype), scalar_of(dtype))
    yield S(make((2, 3), f32), 2, dtype=dtype)


def new_samples(dtype):
    yield S(make((4, 5), dtype), (2, 3))
    yield S(make((4, 5), f32), [3], dtype=dtype)
    yield S(make((4, 5), dtype), ())


def new_full_samples(dtype):
    yield S(make((4, 5), dtype), (2, 3), scalar_of(dtype))
    yield S(make((4, 5), f32), [3], 2, dtype=dtype)


def arange_samples(dtype):
    yield S(5)
    yield S(1, 7, 2)
    yield S(10, 0, -3)
    yield S(0.0, 1.0, 0.25)
    yield S(-1, 1.05, 0.3)
    yield S(6, dtype=dtype)
    yield S(2, 9, 3, dtype=dtype)


def linspace_samples(dtype):
    yield S(0, 1, 5)
    yield S(-2.0, 3.0, 7, dtype=dtype)
    yield S(0, 10, 1, dtype=dtype)
    yield S(3, -3, 4, dtype=dtype)
    yield S(0, 100, 6, dtype=dtype)


def eye_samples(dtype):
    yield S(3)
    yield S(3, 4, dtype=dtype)
    yield S(4, 2, dtype=dtype)
    yield S(0)


def tensor_samples(dtype):
    yield S([1.0, 2.5])
    yield S([[1, 2], [3, 4]], dtype=dtype)
    yield S(3.5, dtype=dtype)
    yield S(True)
    yield S([])


def scalar_tensor_samples(dtype):
    yield S(2.5)
    yield S(3, dtype=dtype)
    yield S(True, dtype=dtype)
    yield S(1.5, dtype=dtype, requires_grad=False)  # (a TypeError before: found by torch's OpInfo samples)


def random_factory_samples(dtype):
    yield S(2, 3, dtype=dtype)
    yield S((4,), dtype=dtype)
    yield S([2, 3])


def randint_samples(dtype):
    yield S(10, (2, 3))
    yield S(-5, 5, (4,), dtype=dtype)
    yield S(3, [2, 2], dtype=dtype)


def bernoulli_samples(dtype):
    yield S(make((4, 5), dtype, low=0, high=1))
    yield S(make((4, 5), dtype), 0.3)
    yield S(torch.tensor([0.0, 1.0, 0.5], dtype=dtype))


def multinomial_samples(dtype):
    yield S(make((4, 5), dtype, low=0.1, high=1), 3)
    yield S(make((5,), dtype, low=0.1, high=1), 7, True)


def randperm_samples(dtype):
    yield S(5)
    yield S(7, dtype=dtype)
    yield S(0)


def creation_opinfos():
    random = dict(random=True)
    return [
        OpInfo("full", full_samples, ALL),
        OpInfo("zeros", factory_samples, ALL),
        OpInfo("ones", factory_samples, ALL),
        OpInfo("empty", factory_samples, ALL, compare=Compare.METADATA),
        OpInfo("zeros_like", like_samples, ALL),
        OpInfo("ones_like", like_samples, ALL),
        OpInfo("empty_like", like_samples, ALL, compare=Compare.METADATA),
        OpInfo("full_like", full_like_samples, ALL),
        OpInfo("new_zeros", new_samples, ALL, spellings=(lambda a, size, **k: a.new_zeros(*size, **k),)),
        OpInfo("new_ones", new_samples, ALL, spellings=(lambda a, size, **k: a.new_ones(*size, **k),)),
        OpInfo("new_empty", new_samples, ALL, compare=Compare.METADATA),
        OpInfo("new_full", new_full_samples, ALL),
        OpInfo("arange", arange_samples, NUMERIC),
        OpInfo("linspace", linspace_samples, NUMERIC),
        OpInfo("eye", eye_samples, ALL),
        OpInfo("tensor", tensor_samples, ALL),
        OpInfo("scalar_tensor", scalar_tensor_samples, ALL),
        OpInfo("rand", random_factory_samples, FLOATS, **random),
        OpInfo("randn", random_factory_samples, FLOATS, **random),
        OpInfo("rand_like", like_samples, FLOATS, **random),
        OpInfo("randn_like", like_samples, FLOATS, **random),
        OpInfo("randint", randint_samples, NUMERIC, **random),
        OpInfo("bernoulli", bernoulli_samples, FLOATS, **random),
        OpInfo("multinomial", multinomial_samples, (f32, f64), **random),
        OpInfo("randperm", randperm_samples, NUMERIC, **random),
    ]


# ---------------------------------------------------------------------------------------------
# Neural-network ops: linear algebra, convolution, normalization, attention, losses
# ---------------------------------------------------------------------------------------------

MATMUL_SHAPES = (((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 5)), ((2, 3, 4), (4,)), ((2, 3, 4), (2, 4, 1)))


def matmul_samples(dtype):
    for sa, sb in MATMUL_SHAPES:
        yield S(make(sa, dtype), make(sb, dtype))


def pair_samples(*pairs):
    def gen(dtype):
        for sa, sb in pairs:
            yield S(make(sa, dtype), make(sb, dtype))

    return gen


def linear_samples(dtype):
    yield S(make((3, 4), dtype), make((5, 4), dtype))
    yield S(make((2, 3, 4), dtype), make((5, 4), dtype), make((5,), dtype))
    yield S(make((4,), dtype), make((5, 4), dtype), make((5,), dtype))
    yield S(make((3, 4), dtype), make((4,), dtype))
    yield S(make((3, 4), dtype), make((5, 4), dtype), bias=make((), dtype))


def addmm_samples(dtype):
    yield S(make((3, 5), dtype), make((3, 4), dtype), make((4, 5), dtype))
    yield S(make((5,), dtype), make((3, 4), dtype), make((4, 5), dtype), beta=0.5, alpha=2)
    yield S(torch.full((3, 5), float("nan"), dtype=dtype), make((3, 4), dtype), make((4, 5), dtype), beta=0)


def baddbmm_samples(dtype):
    yield S(make((2, 3, 5), dtype), make((2, 3, 4), dtype), make((2, 4, 5), dtype))
    yield S(make((3, 1), dtype), make((2, 3, 4), dtype), make((2, 4, 5), dtype), beta=2, alpha=0.5)
    yield S(torch.full((2, 3, 5), float("nan"), dtype=dtype), make((2, 3, 4), dtype), make((2, 4, 5), dtype), beta=0)


def conv_samples(n):
    def gen(dtype):
        x = lambda c=4: make((2, c) + (7,) * n, dtype)  # noqa: E731
        w = lambda o=6, c=4, k=3: make((o, c) + (k,) * n, dtype)  # noqa: E731
        yield S(x(), w())
        yield S(x(), w(), make((6,), dtype), stride=2, padding=1)
        yield S(x(), w(k=2), None, 1, 2, 2)  # positional padding and dilation
        yield S(x(), w(c=2), groups=2)
        yield S(x(), w(), padding="same", dilation=2)
        yield S(x(), w(k=2), padding="same")  # an even kernel: one zero more on the right, as torch pads
        yield S(make((4,) + (6,) * n, dtype), w(o=2, k=4), padding="same", dilation=(1,) + (3,) * (n - 1))
        yield S(x(), w(), padding="valid")
        yield S(make((4,) + (6,) * n, dtype), w(o=2), stride=(2,) * n)  # unbatched

    return gen


def softmax_samples(dtype):
    yield S(make((4, 5), dtype), 1)
    yield S(make((2, 3, 4), dtype), 0)
    yield S(make((2, 3, 4), dtype), -1, dtype=f64)
    yield S(make((), dtype), 0)
    v = make((3, 4), dtype)
    v[0, 1] = v[1, :] = -float("inf")  # a masked element and a fully masked row
    yield S(v, -1)


def native_layer_norm_samples(dtype):
    yield S(make((2, 3, 4), dtype), [4], make((4,), dtype), make((4,), dtype), 1e-5)
    yield S(make((2, 3, 4), dtype), [3, 4], None, None, 1e-3)


def layer_norm_samples(dtype):
    yield S(make((2, 3, 4), dtype), (4,))
    yield S(make((2, 3, 4), dtype), [3, 4], make((3, 4), dtype), make((3, 4), dtype))
    yield S(make((4, 5), dtype), (5,), None, make((5,), dtype), eps=1e-2)


def rms_norm_samples(dtype):
    yield S(make((2, 3, 4), dtype), (4,))
    yield S(make((2, 3, 4), dtype), [3, 4], make((3, 4), dtype), eps=1e-3)


def batch_norm(a, running_mean, running_var, *args, **kwargs):
    """``F.batch_norm`` and the running statistics it updates in place."""
    out = F.batch_norm(a, running_mean, running_var, *args, **kwargs)
    return out, running_mean, running_var


def batch_norm_samples(dtype):
    stats = lambda: (make((4,), dtype), make((4,), dtype, low=0.5, high=2))  # noqa: E731
    yield S(make((3, 4, 5), dtype), *stats())
    yield S(make((3, 4, 5), dtype), *stats(), make((4,), dtype), make((4,), dtype), True, 0.2, 1e-3)
    yield S(make((3, 4), dtype), *stats(), training=True)
    yield S(make((2, 4, 3, 3), dtype), None, None, training=True)
    yield S(make((2, 4, 3, 3), dtype), *stats(), make((4,), dtype), None, False, 0.1, 1e-5)
    yield S(make((2, 4, 3), dtype), None, None, None, make((4,), dtype), training=True)  # a bias without a weight
    yield S(make((2, 4, 3), dtype), *stats(), None, make((4,), dtype), training=False)
    yield S(make((2, 4, 3, 3), dtype), *stats(), training=True)  # laid out as its input (channels-last)


def group_norm_samples(dtype):
    yield S(make((2, 6, 5), dtype), 3)
    yield S(make((2, 6, 4, 4), dtype), 2, make((6,), dtype), make((6,), dtype), eps=1e-3)
    yield S(make((3, 4), dtype), 4)


def normalize_samples(dtype):
    yield S(make((3, 4), dtype))
    yield S(make((3, 4), dtype), p=1.0, dim=0)
    yield S(make((2, 3, 4), dtype), 3, -1, 1e-3)
    yield S(torch.zeros((2, 3), dtype=dtype))


def embedding_samples(dtype):
    yield S(torch.randint(0, 10, (3, 4)), make((10, 5), dtype))
    yield S(torch.tensor([0, 2, 0, 9]), make((10, 5), dtype), padding_idx=0)
    yield S(torch.tensor(3), make((10, 5), dtype))


def dropout_samples(dtype):
    yield S(make((4, 5), dtype))
    yield S(make((4, 5), dtype), 0.3)
    yield S(make((4, 5), dtype), 0.3, False)
    yield S(make((4, 5), dtype), 0.0)
    yield S(make((4, 5), dtype), 1.0)
    yield S(make((4, 5), dtype), 0.5, True, True)  # in place


def sdpa_samples(dtype):
    q, kv = (2, 3, 4, 8), (2, 3, 5, 8)
    yield S(make(q, dtype), make(kv, dtype), make(kv, dtype))
    yield S(make(q, dtype), make(kv, dtype), make(kv, dtype), make((4, 5), b8))
    yield S(make(q, dtype), make(kv, dtype), make(kv, dtype), attn_mask=make((2, 1, 4, 5), dtype))
    yield S(make(q, dtype), make(q, dtype), make(q, dtype), is_causal=True, scale=0.3)
    yield S(make(q, dtype), make((2, 1, 5, 8), dtype), make((2, 1, 5, 8), dtype), enable_gqa=True)
    yield S(make((4, 8), dtype), make((5, 8), dtype), make((5, 6), dtype))
    # chunks of a permuted projection (timm's CPUBone): torch's CPU flash kernel lays its result out as the query
    yield S(*make((2, 3, 4, 24), dtype).permute(0, 2, 1, 3).chunk(3, -1))


def nll_loss_samples(dtype):
    logp = lambda *s: torch.log_softmax(make(s, dtype), 1 if len(s) > 1 else 0)  # noqa: E731
    yield S(logp(4, 5), torch.randint(0, 5, (4,)))
    yield S(logp(4, 5), torch.tensor([1, 1, 0, 4]), make((5,), dtype, low=0.1, high=1), ignore_index=1)
    yield S(logp(4, 5), torch.randint(0, 5, (4,)), reduction="sum")
    yield S(logp(4, 5), torch.tensor([1, 3, 0, 4]), reduction="none", ignore_index=3)
    yield S(logp(2, 5, 3), torch.randint(0, 5, (2, 3)))
    yield S(logp(5), torch.tensor(2))


def cross_entropy_samples(dtype):
    yield S(make((4, 5), dtype), torch.randint(0, 5, (4,)))
    yield S(make((4, 5), dtype), torch.tensor([1, 1, 0, 4]), make((5,), dtype, low=0.1, high=1), ignore_index=1)
    yield S(make((4, 5), dtype), torch.randint(0, 5, (4,)), label_smoothing=0.1)
    yield S(make((4, 5), dtype), torch.randint(0, 5, (4,)), reduction="none", label_smoothing=0.2)
    yield S(make((4, 5), dtype), torch.softmax(make((4, 5), dtype), 1))  # class probabilities
    yield S(make((4, 5), dtype), torch.softmax(make((4, 5), dtype), 1), label_smoothing=0.1, reduction="sum")
    yield S(make((2, 5, 3), dtype), torch.randint(0, 5, (2, 3)))
    yield S(make((5,), dtype), torch.tensor(4))


def regression_loss_samples(weighted=False, **extra):
    def gen(dtype):
        for reduction in ("mean", "sum", "none"):
            yield S(make((4, 5), dtype), make((4, 5), dtype), reduction=reduction)
            if weighted:
                yield S(make((4, 5), dtype), make((4, 5), dtype), reduction=reduction, weight=make((4, 5), dtype, low=0, high=2))
        yield S(make((), dtype), make((), dtype))
        for kwargs in extra.get("kwargs", ()):
            yield S(make((4, 5), dtype), make((4, 5), dtype), **kwargs)

    return gen


def bce_samples(logits):
    def gen(dtype):
        x = lambda: make((4, 5), dtype, low=-3 if logits else 0.01, high=3 if logits else 0.99)  # noqa: E731
        t = lambda: make((4, 5), dtype, low=0, high=1)  # noqa: E731
        yield S(x(), t())
        yield S(x(), t(), make((5,), dtype, low=0, high=2), reduction="sum")
        yield S(x(), t(), reduction="none")
        if logits:
            yield S(x(), t(), pos_weight=make((5,), dtype, low=0.5, high=2))
        else:
            yield S(torch.tensor([0.0, 1.0, 0.5], dtype=dtype), torch.tensor([1.0, 0.0, 0.5], dtype=dtype))  # log clamp

    return gen


def cosine_similarity_samples(dtype):
    yield S(make((4, 5), dtype), make((4, 5), dtype))
    yield S(make((4, 5), dtype), make((4, 5), dtype), 0)
    yield S(make((1, 5), dtype), make((4, 5), dtype), dim=-1, eps=1e-3)
    yield S(torch.zeros((2, 3), dtype=dtype), make((2, 3), dtype))


# torch's CPU kernels for these accumulate in another order than their prims (blocked matmul in attention,
# Welford statistics in normalization): the decompositions are compared a little more loosely
_LOOSE = {f32: (1e-5, 1e-5), bf16: (3e-2, 3e-2)}


def nn_opinfos():
    return [
        OpInfo("linear", linear_samples),
        OpInfo("matmul", matmul_samples, FLOATS + INTS),
        OpInfo("rmatmul", matmul_samples, FLOATS, op=torch.Tensor.__rmatmul__),
        OpInfo("mm", pair_samples(((3, 4), (4, 5)), ((1, 4), (4, 1)))),
        OpInfo("bmm", pair_samples(((2, 3, 4), (2, 4, 5)),)),
        OpInfo("mv", pair_samples(((3, 4), (4,)),)),
        OpInfo("dot", pair_samples(((4,), (4,)),), FLOATS + INTS),
        OpInfo("addmm", addmm_samples),
        OpInfo("baddbmm", baddbmm_samples),
        OpInfo("conv1d", conv_samples(1), decomp_tol=_LOOSE),
        OpInfo("conv2d", conv_samples(2), decomp_tol=_LOOSE),
        OpInfo("conv3d", conv_samples(3), decomp_tol=_LOOSE),
        OpInfo("softmax", softmax_samples),
        OpInfo("log_softmax", softmax_samples),
        OpInfo("native_layer_norm", native_layer_norm_samples, decomp_tol=_LOOSE),
        OpInfo("layer_norm", layer_norm_samples, decomp_tol=_LOOSE),
        OpInfo("rms_norm", rms_norm_samples, decomp_tol=_LOOSE),
        OpInfo("native_batch_norm", batch_norm_samples, op=batch_norm, spellings=(batch_norm,),
               decomp_tol=_LOOSE),
        OpInfo("group_norm", group_norm_samples, decomp_tol=_LOOSE),
        OpInfo("normalize", normalize_samples),
        OpInfo("embedding", embedding_samples),
        OpInfo("dropout", dropout_samples, random=True),
        OpInfo("scaled_dot_product_attention", sdpa_samples, decomp_tol=_LOOSE),
        OpInfo("nll_loss", nll_loss_samples),
        OpInfo("cross_entropy", cross_entropy_samples, decomp_tol=_LOOSE),
        OpInfo("mse_loss", regression_loss_samples(weighted=True)),
        OpInfo("l1_loss", regression_loss_samples(weighted=True)),
        OpInfo("smooth_l1_loss", regression_loss_samples(kwargs=({"beta": 0.5}, {"beta": 0.0}))),
        OpInfo("binary_cross_entropy_with_logits", bce_samples(True), decomp_tol=_LOOSE),
        OpInfo("binary_cross_entropy", bce_samples(False)),
        OpInfo("cosine_similarity", cosine_similarity_samples),
    ]


OPINFOS = elementwise_opinfos() + reduction_opinfos() + shape_opinfos() + creation_opinfos() + nn_opinfos()

# Symbols without an OpInfo, and why. Besides these, the backward kernels that ``thunder.torch.grad_rules``
# defines as symbols (``softmax_backward``, ...) are reached by no torch spelling: the autodiff tests cover them.
SKIPPED = {
    "dropout_mask": "internal to dropout (no torch spelling); its decomposition runs in dropout's OpInfo",
    "torch_autograd_forward": "runs torch autograd for ops without a gradient rule; covered by the autodiff tests",
    "torch_autograd_backward": "runs torch autograd for ops without a gradient rule; covered by the autodiff tests",
    "copy_value": "the new value of Tensor.copy_ (no torch spelling); differential tests in tests/test_inplace.py",
    "fill_value": "the new value of Tensor.fill_ (no torch spelling); differential tests in tests/test_inplace.py",
    "zero_value": "the new value of Tensor.zero_ (no torch spelling); differential tests in tests/test_inplace.py",
    "detached_update": "updates made under no_grad or through detach(); differential tests in tests/test_inplace.py",
    "without_gradient": "the 0-norm's place in the autograd graph; differential tests in tests/test_generated_programs.py",
    "laid_out_as": "the new value of a gapped input updated in place, laid out as it; differential tests in tests/test_inplace.py",
    "contiguous_as_suggested": "rms_norm's result laid out as eager's composite lays it out (the rms_norm OpInfo); "
                               "layouts of transposed and channels-last inputs in tests/test_inplace.py",
    "assert_all_true": "the check of a torch._is_all_true thunder took True while tracing (no torch spelling): "
                       "tests/test_distributions.py runs it, passing and failing",
    "mean_of_torchs_kernel": "the mean inside a float32/float64 CPU var or std to one element (no torch spelling): "
                             "tests/test_fusion_inductor.py compares those var and std with eager's bit for bit",
    "view_update": "the new value of a view updated in place, in the autograd graph; differential tests in tests/test_inplace.py",
    "root_of_a_view_update": "a tensor whose view is updated in place, its gradient laid out as its memory (identity "
                             "forward); differential tests in tests/test_inplace.py",
    "root_of_a_retaken_view": "a tensor a view of which is taken again after an update, the view's part of its "
                              "gradient laid out as its memory (identity forward); tests in tests/test_grad_bitwise.py",
    "masked_index_put": "a[mask] = value of a boolean mask of a's shape (no torch spelling): the setitem OpInfo's mask "
                        "sample, its gradient's layout in tests/test_grad.py",
    "manual_seed": "changes the random state (no tensor result); tests/test_side_effects.py compares it with eager",
}
