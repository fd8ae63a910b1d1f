"""``torch.manual_seed`` called by a program thunder traces.

``torch.manual_seed`` is a plain Python function (it does not go through ``__torch_function__``), so a
program's call to it would run only while tracing, and later calls would draw different random numbers
than eager. While a thread traces, ``torch.manual_seed`` (looked up as ``torch.manual_seed`` or
``torch.random.manual_seed``) records the ``manual_seed`` symbol instead: the trace reseeds on every call,
in order with its random operations. Elsewhere it is torch's own function.
"""
from __future__ import annotations

import functools
import threading

import torch

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
        _installed = True
