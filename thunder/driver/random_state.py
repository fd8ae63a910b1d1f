"""``torch.manual_seed`` and the random state, called by a program thunder traces.

``torch.manual_seed`` is a plain Python function (it does not go through ``__torch_function__``), so a
program's call to it would run only while tracing, and later calls would draw different random numbers
than eager. While a thread traces, ``torch.manual_seed`` (looked up as ``torch.manual_seed`` or
``torch.random.manual_seed``) records the ``manual_seed`` symbol instead: the trace reseeds on every call,
in order with its random operations. Elsewhere it is torch's own function.

Reading or setting the generator's state (``torch.get_rng_state``, ``torch.set_rng_state``, ``torch.seed``, and
``torch.random.fork_rng``, which reads it and sets it back) is refused while tracing: it would act on the call
that traces alone (eager's random numbers after a ``fork_rng`` block repeat the block's; the trace's went on).
A generator's own methods (``torch.default_generator.manual_seed``) are not seen: the generator is the
process's, which other threads may use while one traces, so a change of its state does not tell either.
"""
from __future__ import annotations

import functools
import threading

import torch

from thunder.driver.global_setters import refused_while_tracing

_installed = False
_lock = threading.Lock()


def install():
    global _installed
    with _lock:
        if _installed:
            return
        from thunder.torch.creation import _TORCH_MANUAL_SEED, manual_seed as manual_seed_symbol

        @functools.wraps(_TORCH_MANUAL_SEED)
        def manual_seed(seed):
            from thunder.driver.frontend import current_tracer

            tracer = current_tracer()
            if tracer is None:
                return _TORCH_MANUAL_SEED(seed)
            tracer.call(manual_seed_symbol, (seed,), {})
            return torch.default_generator

        torch.manual_seed = manual_seed
        torch.random.manual_seed = manual_seed
        for name in ("get_rng_state", "set_rng_state", "seed"):
            refused = refused_while_tracing(getattr(torch.random, name), _REFUSED.format(name=name))
            setattr(torch, name, refused)
            setattr(torch.random, name, refused)
        _installed = True


_REFUSED = ("torch.{name}() inside a jitted function is not supported: thunder records the program's random "
            "operations and runs them on every call, where the state read or set while tracing would be the "
            "tracing call's alone (torch.random.fork_rng reads the state and sets it back). Seed with "
            "torch.manual_seed (recorded in the trace), or move this out of the jitted function.")
