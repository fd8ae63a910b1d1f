"""The functional jit: ``thunder.functional.jit`` compiles "functional" Python functions.

Its inputs are tensors, numbers, strings, dtypes, devices, None, slices, Ellipsis, torch.Size and
tuples, lists and dicts of those. Tensors that are not inputs (globals, closures) are errors, and so
is mutating an input collection.
"""
from __future__ import annotations

import functools
from typing import Callable

from thunder.driver.compile_data import CompileData
from thunder.driver.prologue import CACHE_OPTIONS
from thunder.extend import resolve_executors

__all__ = ["jit"]


def jit(fn: Callable, /, *, langctx=None, executors=None, sharp_edges=None, cache=None,
        disable_torch_autograd: bool = False, **compile_options) -> Callable:
    """Just-in-time compile a function."""
    import torch
    from thunder import _make_jitted

    if isinstance(fn, torch.nn.Module):
        raise TypeError("thunder.functional.jit compiles functions; use thunder.jit for modules")
    cd = CompileData(fn=fn, module=None, executors=resolve_executors(executors), cache_option=CACHE_OPTIONS.resolve(cache),
                     functional=True, sharp_edges=sharp_edges, disable_torch_autograd=disable_torch_autograd,
                     compile_options=dict(compile_options), langctx=langctx)
    jitted = _make_jitted(cd)
    functools.update_wrapper(jitted, fn)
    return jitted
