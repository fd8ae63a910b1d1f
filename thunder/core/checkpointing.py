"""Activation checkpointing: ``torch.utils.checkpoint.checkpoint`` regions are recomputed in the backward.

While tracing, the non-reentrant checkpoint's pre-forward logic is replaced by a region marker: the
operations the checkpointed function records are tagged ``RECOMPUTE_IN_BACKWARD``. Autodiff then
saves the region's inputs instead of its activations and recomputes the region in the backward.
Random operations in a region are not recomputed (their outputs are saved), so the backward sees
exactly the forward's random values, as eager's checkpoint guarantees by restoring the RNG state.
The reentrant variant (``use_reentrant=True``) runs through ``CheckpointFunction``, handled the same way.
"""
from __future__ import annotations

import contextlib

import torch
import torch.utils.checkpoint as torch_checkpoint

from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Tag


@contextlib.contextmanager
def patched(tracer):
    trace = tracer.trace

    def region_generator(fn, preserve_rng_state, context_fn, determinism_check, debug, *args, **kwargs):
        with trace.tagged(Tag.RECOMPUTE_IN_BACKWARD):
            yield

    original_generator = torch_checkpoint._checkpoint_without_reentrant_generator
    original_function = torch_checkpoint.CheckpointFunction

    class RegionCheckpointFunction:
        @staticmethod
        def apply(function, preserve, *args):
            with trace.tagged(Tag.RECOMPUTE_IN_BACKWARD):
                return function(*args)

    torch_checkpoint._checkpoint_without_reentrant_generator = region_generator
    torch_checkpoint.CheckpointFunction = RegionCheckpointFunction
    original_apply = torch.autograd.Function.__dict__["apply"]
    torch.autograd.Function.apply = classmethod(_custom_function_apply(original_apply.__func__))
    try:
        yield
    finally:
        torch_checkpoint._checkpoint_without_reentrant_generator = original_generator
        torch_checkpoint.CheckpointFunction = original_function
        torch.autograd.Function.apply = original_apply


def _custom_function_apply(original):
    """User-defined ``torch.autograd.Function``: traced through when no gradient is needed, refused otherwise."""

    def apply(cls, *args, **kwargs):
        if torch.is_grad_enabled() and any(isinstance(a, TensorProxy) and a.requires_grad
                                           for a in flat_proxies((args, kwargs))):
            raise NotImplementedError(
                f"thunder does not support the custom torch.autograd.Function {cls.__qualname__} where gradients "
                "are needed: thunder would differentiate its forward and ignore its backward. Call it outside the "
                "jitted function, or express it with torch operations.")
        return original(cls, *args, **kwargs)

    return apply
