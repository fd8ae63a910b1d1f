"""thunder: a source-to-source JIT compiler for PyTorch.

``thunder.jit(fn_or_module)`` runs the program once with proxies, records it as a trace (printable,
runnable Python), transforms it and executes it through executors. The query functions below
inspect what a jitted callable did.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch as pytorch  # `torch` names the thunder.torch submodule in this package

from thunder.driver.cache import DEFAULT_CACHE_LIMIT
from thunder.driver.compile_data import CompileData, CompileStats
from thunder.driver.interpreter import InterpreterError
from thunder.driver.module import ThunderModule
from thunder.driver.prologue import CACHE_OPTIONS
from thunder.core.trace import TraceCtx
from thunder import extend
from thunder.extend import resolve_executors
from thunder.executors.cudagraphex import CUDAGraphTransform

__all__ = [
    "jit", "compile_data", "compile_stats", "last_traces", "last_backward_traces", "last_prologue_traces",
    "cache_option", "cache_hits", "cache_misses", "list_transforms", "last_interpreted_instructions",
    "last_interpreter_log", "last_compile_options", "ThunderModule", "CACHE_OPTIONS", "InterpreterError",
    "add_transform", "CUDAGraphTransform",
]

_KNOWN_COMPILE_OPTIONS = frozenset()


def _make_jitted(cd: CompileData) -> Callable:
    from thunder.driver import frontend
    from thunder.driver.cache import Cache, Call, key_function, same_input_key
    from thunder.driver.pipeline import compile_entry
    from thunder.driver.runtime import run_entry, first_inputs, run_inline
    from thunder.executors.pythonex import CacheMiss

    _check_jittable(cd.fn)
    cs = CompileStats()
    cache = cs.cache = Cache(cd.cache_limit, _describe(cd.fn), stacklevel=5 if cd.module is not None else 4)
    buckets = cache.buckets
    option = cd.cache_option
    key_of = same_input_key if option is CACHE_OPTIONS.SAME_INPUT else key_function(
        option is CACHE_OPTIONS.SYMBOLIC_VALUES)
    no_caching = option is CACHE_OPTIONS.NO_CACHING
    tracing = frontend._compiling_flag  # its depth is nonzero while any thread traces

    def fn_(*args, **kwargs):
        if tracing.depth and frontend.current_tracer() is not None:
            return run_inline(cd, args, kwargs)  # called inside another jitted program: traced into it
        cs.calls += 1
        key = key_of(args, kwargs)
        bucket = buckets.get(key)
        if bucket is not None:
            for entry in bucket:
                try:
                    inps = entry.prologue(args, kwargs)
                except CacheMiss:
                    continue
                cs.cache_hits += 1
                cs.last_entry = entry
                entry.last_used = cs.calls
                return run_entry(entry, inps)
        return miss(args, kwargs, key)

    def miss(args, kwargs, key):
        cs.cache_misses += 1
        entry = compile_entry(cd, args, kwargs)
        entry.last_used = cs.calls
        if not no_caching:
            cache.add(key, entry, Call(cd.fn, args, kwargs))
        cs.last_entry = entry
        return run_entry(entry, first_inputs(entry, args, kwargs))

    fn_._lc_cd = cd
    fn_._lc_cs = cs
    return fn_


def _describe(fn) -> str:
    if isinstance(fn, pytorch.nn.Module):
        return f"the {type(fn).__qualname__} module"
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _check_jittable(fn):
    """Refuses, when jitting, what thunder cannot compile: classes, non-callables, generators and coroutines."""
    import inspect

    if isinstance(fn, type):
        raise TypeError(f"thunder.jit was given the class {fn.__qualname__}; jit an instance of it "
                        f"(thunder.jit({fn.__qualname__}(...))) or a function")
    if not callable(fn):
        raise TypeError(f"thunder.jit needs a function or a torch.nn.Module, but got a {type(fn).__qualname__} object, "
                        "which is not callable")
    if isinstance(fn, pytorch.nn.Module):
        from thunder.driver.torchscript import check_module

        check_module("", fn)
    target = type(fn).forward if isinstance(fn, pytorch.nn.Module) else fn
    if not inspect.isfunction(target) and not inspect.ismethod(target) and hasattr(type(target), "__call__"):
        target = getattr(type(target), "__call__")
    kind = ("a generator function" if inspect.isgeneratorfunction(target) else
            "an async generator function" if inspect.isasyncgenfunction(target) else
            "an async function" if inspect.iscoroutinefunction(target) else None)
    if kind is not None:
        raise TypeError(f"thunder.jit cannot compile {getattr(target, '__qualname__', target)!r}: it is {kind}, whose "
                        "body runs later, step by step, outside the call thunder traces. Jit a function that returns "
                        "the tensors instead (e.g. the body of one step).")


def jit(fn: Callable, /, *, langctx=None, executors=None, sharp_edges=None, cache=None,
        disable_torch_autograd: bool = False, transforms=None, cache_limit: int | None = None,
        **compile_options) -> Callable:
    """Just-in-time compile a callable (function or model).

    Args:
        fn: a function or ``torch.nn.Module``. A module gives a ``ThunderModule``.
        langctx: the language context; only torch (the default) is supported.
        executors: executors (objects or names such as ``"torch"``) tried in order.
        sharp_edges: ``None``/``"allow"`` (default), ``"warn"`` or ``"error"``: what to do when the program
            reads tensors that are not its arguments (globals, closures, module attributes), or Python
            state thunder cannot check on later calls (see the README's sharp edges).
        cache: ``"no caching"``, ``"same input"``, ``"constant values"`` (default) or ``"symbolic values"``.
        disable_torch_autograd: trace for inference only, never connecting outputs to torch.autograd.
        transforms: ``thunder.transforms.base.Transform`` objects, applied in order at the points
            that class documents; the data-parallel transforms are among them.
        cache_limit: the most compiled entries kept (default ``thunder.driver.cache.DEFAULT_CACHE_LIMIT``, 32).
            Past it thunder warns once, naming what keeps changing, and evicts the least recently used.
    """
    _check_jittable(fn)
    if langctx not in (None, "torch"):
        raise ValueError(f"Unsupported langctx {langctx!r}; thunder.jit supports the torch language")
    if sharp_edges not in (None, "allow", "warn", "error"):
        raise ValueError(f"sharp_edges must be None, 'allow', 'warn' or 'error', got {sharp_edges!r}")
    if isinstance(fn, ThunderModule):
        raise TypeError("thunder.jit was given a ThunderModule; jit the original module instead")
    module = fn if isinstance(fn, pytorch.nn.Module) else None
    from thunder.transforms.base import Transform, requested_transforms

    transforms = (*requested_transforms(module), *(transforms or ()))
    cd = CompileData(
        fn=fn, module=module, executors=resolve_executors(executors), cache_option=CACHE_OPTIONS.resolve(cache),
        sharp_edges=sharp_edges, disable_torch_autograd=disable_torch_autograd, transforms=transforms,
        compile_options=dict(compile_options), langctx=langctx,
        cache_limit=DEFAULT_CACHE_LIMIT if cache_limit is None else cache_limit)

    for t in cd.transforms:
        if not isinstance(t, Transform):
            raise TypeError(f"transforms must be thunder.transforms.base.Transform objects, got {t!r}")
    jitted = _make_jitted(cd)
    result = jitted
    if module is not None:
        result = cd.thunder_module = ThunderModule(module, jitted)
        result._lc_cd = cd
        result._lc_cs = jitted._lc_cs
    else:
        functools.update_wrapper(jitted, fn)
    for t in cd.transforms:
        t.transform_module(cd)
    return result


def add_transform(jitted, transform) -> None:
    """Applies ``transform`` to an already jitted function or ``ThunderModule``, after its other transforms.

    The programs compiled so far are dropped: the next call compiles again, with the transform.
    """
    from thunder.transforms.base import Transform

    cd = compile_data(jitted)
    if not isinstance(transform, Transform):
        raise TypeError(f"transforms must be thunder.transforms.base.Transform objects, got {transform!r}")
    cd.transforms = (*cd.transforms, transform)
    compile_stats(jitted).cache.clear()
    transform.transform_module(cd)


# ---------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------


def compile_data(fn) -> CompileData:
    """Obtains the compilation data from a JITed function."""
    cd = getattr(fn, "_lc_cd", None)
    if cd is None:
        raise TypeError(f"{fn!r} is not a thunder-jitted function or module; create one with thunder.jit")
    return cd


def compile_stats(fn) -> CompileStats:
    """Obtains the compilation statistics from a JITed function."""
    cs = getattr(fn, "_lc_cs", None)
    if cs is None:
        raise TypeError(f"{fn!r} is not a thunder-jitted function or module; create one with thunder.jit")
    return cs


def _last_entry(fn, what: str):
    cs = compile_stats(fn)
    if cs.last_entry is None:
        raise TypeError(f"{what} is available only after the jitted function has been called")
    return cs.last_entry


def last_traces(fn) -> list[TraceCtx]:
    """Obtains the list of computation traces that have been produced for the last run of the function."""
    return _last_entry(fn, "last_traces").computation_traces


def last_backward_traces(fn) -> list[TraceCtx]:
    """Obtains the list of backward traces that have been produced for the last run of the function and the selected prologue."""
    return _last_entry(fn, "last_backward_traces").backward_traces


def last_prologue_traces(fn) -> list[TraceCtx]:
    """Obtains the list of prologue traces that have been produced for the last run of the function and the selected prologue."""
    return _last_entry(fn, "last_prologue_traces").prologue_traces


def cache_option(fn) -> CACHE_OPTIONS:
    """Returns the cache options set when JITting the function."""
    return compile_data(fn).cache_option


def cache_hits(fn) -> int:
    """Returns the number of cache hits we found when running the function."""
    return compile_stats(fn).cache_hits


def cache_misses(fn) -> int:
    """Returns the number of cache misses we found when running the function."""
    return compile_stats(fn).cache_misses


def list_transforms(fn) -> list:
    """Returns the list of (explicit) transforms applied to the JITed function."""
    return list(compile_data(fn).transforms)


def last_interpreted_instructions(fn) -> list:
    """Returns the list of instructions the interpreter encountered while tracing through the user program (on the last cache miss)."""
    return _last_entry(fn, "last_interpreted_instructions").interpreted_instructions


def last_interpreter_log(fn) -> list:
    """Returns the list of instructions and other information the interpreter encountered while tracing through the user program (on the last cache miss)."""
    return _last_entry(fn, "last_interpreter_log").interpreter_log


def last_compile_options(fn, /) -> None:
    """Prints how compiled options were used (or not)"""
    cd = compile_data(fn)
    used = sorted(k for k in cd.compile_options if k in cd.used_options)
    unused = sorted(k for k in cd.compile_options if k not in cd.used_options)
    print("Used compile options:")
    for k in used:
        print(f"  {k}: {cd.compile_options[k]!r}")
    if not used:
        print("  (none)")
    print("Unused compile options:")
    for k in unused:
        print(f"  {k}: {cd.compile_options[k]!r}")
    if not unused:
        print("  (none)")


def __getattr__(name: str):
    # ``thunder.distributed.ddp`` without a separate import; loaded on first use (it declares the collectives)
    if name == "distributed":
        import importlib

        return importlib.import_module("thunder.distributed")
    raise AttributeError(f"module 'thunder' has no attribute {name!r}")
