"""Activation checkpointing: ``torch.utils.checkpoint.checkpoint`` regions are recomputed in the backward.

While tracing, the non-reentrant checkpoint's pre-forward logic is replaced by a region marker: the
operations the checkpointed function records are tagged ``RECOMPUTE_IN_BACKWARD``. Autodiff then
saves the region's inputs instead of its activations and recomputes the region in the backward.
Random operations in a region are not recomputed (their outputs are saved), so the backward sees
exactly the forward's random values, as eager's checkpoint guarantees by restoring the RNG state.
The reentrant variant (``use_reentrant=True``) runs through ``CheckpointFunction``, handled the same way.
"""
from __future__ import annotations

import threading

import torch
import torch.utils.checkpoint as torch_checkpoint

from thunder.core.symbol import Tag
from thunder.driver import custom_function
from thunder.driver.frontend import current_tracer


_ORIGINAL_GENERATOR = torch_checkpoint._checkpoint_without_reentrant_generator
_ORIGINAL_FUNCTION = torch_checkpoint.CheckpointFunction
_FUNCTION_BASE = torch.autograd.function._SingleLevelFunction  # the base class whose ``apply`` is the C++ one
_ORIGINAL_HOOKS_ENTER = torch.autograd.graph.saved_tensors_hooks.__enter__
_installed = False
_install_lock = threading.Lock()


def _tracing_trace():
    tracer = current_tracer()
    return None if tracer is None else tracer.trace


def _region_generator(fn, preserve_rng_state, context_fn, determinism_check, debug, *args, **kwargs):
    trace = _tracing_trace()
    if trace is None:
        yield from _ORIGINAL_GENERATOR(fn, preserve_rng_state, context_fn, determinism_check, debug, *args, **kwargs)
        return
    with trace.tagged(Tag.RECOMPUTE_IN_BACKWARD):
        yield


class _RegionCheckpointFunction:
    """Stands in for ``CheckpointFunction`` (the reentrant checkpoint): a region marker while tracing."""

    @staticmethod
    def apply(function, preserve, *args):
        trace = _tracing_trace()
        if trace is None:
            return _ORIGINAL_FUNCTION.apply(function, preserve, *args)
        with trace.tagged(Tag.RECOMPUTE_IN_BACKWARD):
            return function(*args)


def install():
    """Installs the checkpoint and ``autograd.Function`` hooks once per process.

    They act only in a thread that is tracing (``current_tracer()``); elsewhere they call torch's own
    functions, so eager code, in this thread or another, behaves exactly as without thunder.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        torch_checkpoint._checkpoint_without_reentrant_generator = _region_generator
        torch_checkpoint.CheckpointFunction = _RegionCheckpointFunction
        _FUNCTION_BASE.apply = classmethod(_custom_function_apply)
        torch.autograd.graph.saved_tensors_hooks.__enter__ = _saved_tensors_hooks_enter
        _installed = True


def _saved_tensors_hooks_enter(self):
    """``torch.autograd.graph.saved_tensors_hooks`` (``save_on_cpu`` and other subclasses) entered inside the program:
    refused. Eager packs what each operation saves; thunder's backward reads the values its forward trace returns, so
    the hooks would act on nothing, and a hook that changes what it saves (``t * 2``, a compression) would give
    eager's gradients otherwise: a wrong result. Around the jitted call they act on what thunder saves."""
    if _tracing_trace() is not None:
        raise NotImplementedError(
            f"{type(self).__name__} (torch.autograd.graph's saved tensor hooks) inside a jitted function is not "
            "supported: thunder saves the values of its backward itself, so the hooks would not see them. Enter it "
            "around the call of the jitted function instead, where it applies to the tensors thunder saves.")
    return _ORIGINAL_HOOKS_ENTER(self)


def _custom_function_apply(cls, *args, **kwargs):
    """User-defined ``torch.autograd.Function``: see [Note: custom autograd functions] in custom_function.py.

    ``Function.apply`` ends in ``super().apply(...)``, which finds this method on ``Function``'s Python base class
    before the C++ one it stands in front of. Hooking there rather than replacing ``Function.apply`` also catches
    the ``apply`` a library bound before thunder was imported or first traced (``sparsemax = Sparsemax.apply`` at
    module level): those still call the original ``Function.apply``, which still ends here."""
    tracer = current_tracer()
    if tracer is not None and custom_function.needs_custom_backward(tracer, args, kwargs):
        return custom_function.apply(tracer, cls, args, kwargs)
    return super(_FUNCTION_BASE, cls).apply(*args, **kwargs)
