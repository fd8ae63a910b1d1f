"""The cache of a jitted callable: keyed lookup, only CacheMiss falls through, the bound and its warning,
NaN and signed-zero arguments, argument objects not kept alive, deeply nested inputs."""
from __future__ import annotations

import gc
import math
import warnings
import weakref

import pytest
import torch

import thunder
from thunder.driver.cache import DEFAULT_CACHE_LIMIT, RecompilationWarning
from thunder.driver.prologue import MAX_INPUT_DEPTH
from thunder.executors.pythonex import CacheMiss


def add(a, b):
    return a + b


def _count_prologue_calls(jf) -> list:
    """Wraps every cached entry's prologue with a counter; returns the counter (a one-item list)."""
    calls = [0]
    for entry in thunder.compile_stats(jf).cache.entries():
        prologue = entry.prologue

        def counting(args, kwargs, prologue=prologue):
            calls[0] += 1
            return prologue(args, kwargs)

        entry.prologue = counting
    return calls


@pytest.mark.parametrize("n_entries", [1, 1000])
def test_a_hit_runs_one_prologue_however_many_entries(n_entries):
    jf = thunder.jit(add, cache_limit=n_entries)
    for n in range(1, n_entries + 1):
        jf(torch.randn(n), torch.randn(n))
    assert thunder.cache_misses(jf) == n_entries
    calls = _count_prologue_calls(jf)
    a, b = torch.randn(1), torch.randn(1)  # the first shape compiled: the oldest entry
    assert torch.equal(jf(a, b), a + b)
    assert calls[0] == 1 and thunder.cache_hits(jf) == 1 and thunder.cache_misses(jf) == n_entries


def test_entries_that_share_a_key_are_told_apart_by_their_prologues():
    jf = thunder.jit(add)
    for dtype in (torch.float32, torch.float64, torch.float16):
        a = torch.ones(3, dtype=dtype)
        assert torch.equal(jf(a, a), a + a)
    calls = _count_prologue_calls(jf)
    a = torch.ones(3, dtype=torch.float64)
    assert torch.equal(jf(a, a), a + a)
    assert thunder.cache_misses(jf) == 3 and thunder.cache_hits(jf) == 1
    assert 1 <= calls[0] <= 3  # only the entries with this call's key (shapes) were tried


@pytest.mark.parametrize("error", [ValueError, KeyError])
def test_only_a_cache_miss_falls_through(error):
    jf = thunder.jit(add)
    a = torch.randn(2)
    jf(a, a)
    (entry,) = thunder.compile_stats(jf).cache.entries()

    def failing(args, kwargs):
        raise error("a prologue that fails for another reason")

    entry.prologue = failing
    with pytest.raises(error, match="another reason"):
        jf(a, a)
    assert thunder.cache_misses(jf) == 1  # not recompiled: the error is the caller's to see

    def missing(args, kwargs):
        raise CacheMiss

    entry.prologue = missing
    assert torch.equal(jf(a, a), a + a)
    assert thunder.cache_misses(jf) == 2


def test_the_cache_is_bounded_and_warns_once_naming_what_changes():
    def scale(x, factor):
        return x * factor

    jf = thunder.jit(scale, cache_limit=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 8):
            x = torch.randn(n)
            assert torch.equal(jf(x, 2.0), x * 2.0)
    storms = [w for w in caught if issubclass(w.category, RecompilationWarning)]
    assert len(storms) == 1
    message = str(storms[0].message)
    assert "scale" in message and "cache_limit=4" in message and "argument 'x'" in message and "shapes" in message
    assert len(thunder.compile_stats(jf).cache.entries()) == 4
    x = torch.randn(7)  # the most recent entry was kept, the oldest evicted
    jf(x, 2.0)
    assert thunder.cache_hits(jf) == 1
    jf(torch.randn(1), 2.0)
    assert thunder.cache_misses(jf) == 8


def test_the_warning_names_the_prologue_check_when_the_arguments_do_not_change():
    jf = thunder.jit(uses_counter, cache_limit=2)
    x = torch.randn(3)
    with pytest.warns(RecompilationWarning, match="COUNTER"):
        for i in range(4):
            globals()["COUNTER"] = i
            assert torch.equal(jf(x), x * i)


COUNTER = 0


def uses_counter(x):
    return x * COUNTER


def test_default_cache_limit_and_bad_limits():
    assert thunder.compile_data(thunder.jit(add)).cache_limit == DEFAULT_CACHE_LIMIT
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="cache_limit"):
            thunder.jit(add, cache_limit=bad)


@pytest.mark.parametrize("value", [math.nan, -math.nan, 0.0, -0.0, math.inf, complex(math.nan, 1.0), complex(0.0, -0.0)])
def test_nan_and_signed_zero_numbers(value):
    jf = thunder.jit(lambda x, s: x * s)
    x = torch.tensor([1.0, -2.0, 0.0])
    for _ in range(2):
        out, ref = jf(x, value), x * value
        assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.nan_to_num(), ref.nan_to_num())
        assert torch.equal(torch.signbit(out.real), torch.signbit(ref.real))
    assert thunder.cache_misses(jf) == 1 and thunder.cache_hits(jf) == 1


def test_zero_and_negative_zero_are_different_specializations():
    jf = thunder.jit(lambda x, s: x * s)
    x = torch.ones(2)
    for s in (0.0, -0.0, 0.0, -0.0):
        assert torch.equal(torch.signbit(jf(x, s)), torch.signbit(x * s))
    assert thunder.cache_misses(jf) == 2 and thunder.cache_hits(jf) == 2


def test_nan_inside_containers_and_with_symbolic_values():
    def f(x, p):
        return x * p[0] + p[1]

    for cache in ("constant values", "symbolic values"):
        jf = thunder.jit(f, cache=cache)
        x = torch.ones(2)
        for _ in range(2):
            assert jf(x, (math.nan, 1.0)).isnan().all()
        assert thunder.cache_misses(jf) == 1


class Options:
    def __init__(self, scale):
        self.scale = scale


@pytest.mark.parametrize("make", [lambda: Options(2.0), lambda: torch.randn(3), lambda: torch.nn.Linear(3, 3)],
                         ids=["object", "tensor", "module"])
def test_arguments_are_not_kept_alive_by_the_cache(make):
    def f(x, o):
        if isinstance(o, torch.nn.Module):
            return o(x)
        return x * (o.scale if isinstance(o, Options) else o)

    jf = thunder.jit(f)
    x = torch.randn(3)
    arg = make()
    jf(x, arg)
    jf(x, arg)
    ref = weakref.ref(arg)
    del arg
    gc.collect()
    assert ref() is None


def test_entries_of_dead_argument_objects_are_dropped():
    jf = thunder.jit(lambda x, layer: layer(x), cache_limit=2)  # a module argument is checked by (weak) identity
    x = torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompilationWarning)  # dead entries make room: no storm
        for i in range(5):
            layer = torch.nn.Linear(3, 3)
            assert torch.equal(jf(x, layer), layer(x))
            del layer
            gc.collect()
    assert len(thunder.compile_stats(jf).cache.entries()) <= 2


def _nest(value, depth):
    for _ in range(depth):
        value = [value]
    return value


def test_deeply_nested_inputs_work_up_to_the_limit_then_fail_clearly():
    def f(x):
        while isinstance(x, list):
            x = x[0]
        return x * 2

    jf = thunder.jit(f)
    t = torch.randn(2)
    assert torch.equal(jf(_nest(t, MAX_INPUT_DEPTH)), t * 2)
    assert torch.equal(jf(_nest(t, MAX_INPUT_DEPTH)), t * 2)
    assert thunder.cache_hits(jf) == 1
    with pytest.raises(ValueError, match="nested more than"):
        jf(_nest(t, 2000))


def test_keyword_arguments_and_their_order_are_part_of_the_key():
    def f(x, *, a=1, b=2):
        return x * a + b

    jf = thunder.jit(f)
    x = torch.randn(2)
    for kwargs in ({"a": 2}, {"a": 2, "b": 3}, {"b": 3, "a": 2}, {"a": 2}):
        assert torch.equal(jf(x, **kwargs), f(x, **kwargs))
    assert thunder.cache_misses(jf) == 3 and thunder.cache_hits(jf) == 1
