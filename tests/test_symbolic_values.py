"""``cache="symbolic values"``: Python number semantics of NumberProxy inputs, differentially against eager.

Each program in the table runs jitted with ``cache="symbolic values"`` on several input values and
must give exactly eager's result (value and Python type) or raise eager's exception. A program whose
trace does not depend on the value is compiled once for all values; one that needs the value
(control flow, ``str``, dict keys, sizes) is specialized and recompiles for a new value.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.core.trace_checker import check_trace

REUSE, RECOMPILE = "reuse", "recompile"

# name -> (program(x, n), whether a new value reuses the cache entry)
PROGRAMS = {
    "truediv": (lambda x, n: n / 2, REUSE),
    "truediv_tensor": (lambda x, n: x * (n / 3), REUSE),
    "floordiv": (lambda x, n: n // 3, REUSE),
    "mod": (lambda x, n: n % 3, REUSE),
    "mod_negative_divisor": (lambda x, n: n % -3, REUSE),
    "divmod": (lambda x, n: divmod(n, 4), REUSE),
    "pow_int": (lambda x, n: n ** 2, REUSE),
    "pow_negative": (lambda x, n: n ** -1, REUSE),
    "rpow": (lambda x, n: 2 ** abs(n), REUSE),
    "pow_fractional": (lambda x, n: n ** 0.5, RECOMPILE),  # complex for a negative base
    "float64_arithmetic": (lambda x, n: n * 0.1 + 0.2, REUSE),
    "float64_into_tensor": (lambda x, n: x + (n * 0.1 + 0.2), REUSE),
    "neg_abs_pos": (lambda x, n: (-n, abs(n), +n), REUSE),
    "bitwise": (lambda x, n: (n & 6, n | 1, n ^ 5, n << 2, n >> 1, ~n), REUSE),
    "round": (lambda x, n: round(n / 3), REUSE),
    "round_ndigits": (lambda x, n: round(n / 3, 2), REUSE),
    "math_floor_ceil_trunc": (lambda x, n: (math.floor(n / 3), math.ceil(n / 3), math.trunc(n / 3)), REUSE),
    "math_sqrt": (lambda x, n: math.sqrt(abs(n)), RECOMPILE),
    "comparisons": (lambda x, n: (n == 3, n < 4, n >= 0), RECOMPILE),
    "control_flow": (lambda x, n: x * 2 if n > 2 else x - 1, RECOMPILE),
    "bool": (lambda x, n: bool(n), RECOMPILE),
    "int_float": (lambda x, n: (int(n), float(n)), RECOMPILE),
    "str": (lambda x, n: str(n), RECOMPILE),
    "repr": (lambda x, n: repr(n / 2), RECOMPILE),
    "fstring": (lambda x, n: f"{n:>5}|{n / 4:.3f}", RECOMPILE),
    "percent_format": (lambda x, n: "%d items" % n, RECOMPILE),
    "dict_key": (lambda x, n: {3: "three", 4: "four"}.get(n, "other"), RECOMPILE),
    "range": (lambda x, n: sum(range(abs(n))), RECOMPILE),
    "return_mul": (lambda x, n: n * 2, REUSE),
    "return_input": (lambda x, n: n, REUSE),
    "tensor_mul": (lambda x, n: x * n, REUSE),
    "tensor_rsub": (lambda x, n: n - x, REUSE),
    "tensor_rdiv": (lambda x, n: n / x, REUSE),
    "tensor_pow": (lambda x, n: x ** n, REUSE),
    "int_tensor_truediv": (lambda x, n: torch.arange(6) / n, REUSE),
    "full": (lambda x, n: torch.full((2,), n), REUSE),
    "full_float": (lambda x, n: torch.full((2,), n / 2), REUSE),
    "masked_fill": (lambda x, n: x.masked_fill(x > 0, n), REUSE),
    "clamp": (lambda x, n: x.clamp(max=n / 10), REUSE),
    "where_scalar": (lambda x, n: torch.where(x > 0, x, n), REUSE),
    "view": (lambda x, n: x.view(abs(n) if n else 1, -1) if 12 % (abs(n) or 1) == 0 else x, RECOMPILE),
    "arange": (lambda x, n: torch.arange(abs(n)), RECOMPILE),
    "index": (lambda x, n: x[n % 12], RECOMPILE),
    "slice": (lambda x, n: x[: abs(n)], RECOMPILE),
    "zeros": (lambda x, n: torch.zeros(abs(n), 2), RECOMPILE),
    "tensor_of_number": (lambda x, n: torch.tensor([n, 2 * n]), RECOMPILE),
    "dropout": (lambda x, n: F.dropout(x, abs(n) / 10 % 1), RECOMPILE),
    "as_tensor": (lambda x, n: torch.as_tensor(n) + x, RECOMPILE),
    "max_builtin": (lambda x, n: x * max(n, 2), RECOMPILE),
    "sum_of_numbers": (lambda x, n: x * sum([n, n, 1]), REUSE),
    "isinstance_number": (lambda x, n: x * 2 if isinstance(n, (int, float)) else x, REUSE),
}

INT_VALUES = (3, 4, -2, 0, 7)
FLOAT_VALUES = (2.5, -1.25, 0.0, 3.0)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _run(fn, x, n):
    torch.manual_seed(0)
    try:
        return fn(x, n), None
    except Exception as e:  # the jitted program must raise what eager raises
        return None, type(e)


@pytest.mark.parametrize("values", [INT_VALUES, FLOAT_VALUES], ids=["int", "float"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_matches_eager(name, values):
    fn, _ = PROGRAMS[name]
    jfn = thunder.jit(fn, cache="symbolic values")
    x = torch.linspace(-1.0, 1.0, 12)
    for n in values:
        expected, error = _run(fn, x, n)
        got, jerror = _run(jfn, x, n)
        assert jerror is error, f"{name}({n!r}): eager raised {error}, thunder {jerror}"
        assert error is not None or _same(got, expected), f"{name}({n!r}): thunder gave {got!r}, eager {expected!r}"
    if thunder.compile_stats(jfn).last_entry is not None:
        for trace in thunder.last_traces(jfn):
            check_trace(trace)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_cache_reuse_or_recompile(name):
    """A new value reuses the entry where the trace does not depend on it; otherwise the trace is specialized."""
    fn, expectation = PROGRAMS[name]
    jfn = thunder.jit(fn, cache="symbolic values")
    x = torch.linspace(-1.0, 1.0, 12)
    for n in (3, 4, 3):
        torch.manual_seed(0)
        jfn(x, n)
    misses = thunder.cache_misses(jfn)
    assert misses == (1 if expectation == REUSE else 2), f"{name}: {misses} compilations for values 3, 4, 3"


def test_specialization_during_autodiff_is_checked():
    """``x ** n``'s gradient rule needs to know whether n == 0: that specialization reaches the prologue."""
    jfn = thunder.jit(lambda x, n: x ** n, cache="symbolic values")
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    for n in (2, 0, 3, 0):
        (g,) = torch.autograd.grad(jfn(x, n).sum(), x)
        (expected,) = torch.autograd.grad((x ** n).sum(), x)
        assert torch.equal(g, expected), (n, g, expected)


def test_number_arithmetic_prints_as_python():
    jfn = thunder.jit(lambda x, n: x * (n / 2) + n // 3, cache="symbolic values")
    jfn(torch.ones(2), 5)
    src = str(thunder.last_traces(jfn)[-1])
    assert "f0 = n / 2" in src and "i0 = n // 3" in src, src


def test_torch_shape_utilities_on_numbers_raise_clearly():
    jfn = thunder.jit(lambda x, n: torch.broadcast_shapes((n, 1), (1, 4)), cache="symbolic values")
    with pytest.raises(TypeError, match="int\\(n\\) specializes the trace"):
        jfn(torch.ones(2), 3)


def test_division_by_zero_raises_as_eager():
    jfn = thunder.jit(lambda x, n: x * (1 / n), cache="symbolic values")
    assert torch.equal(jfn(torch.ones(2), 2), torch.full((2,), 0.5))
    with pytest.raises(ZeroDivisionError):
        jfn(torch.ones(2), 0)  # the cached program runs Python's division
