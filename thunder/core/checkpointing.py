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

import torch.utils.checkpoint as torch_checkpoint

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
    try:
        yield
    finally:
        torch_checkpoint._checkpoint_without_reentrant_generator = original_generator
        torch_checkpoint.CheckpointFunction = original_function
