"""torch's process-wide settings changed by a program thunder traces.

``torch.set_default_dtype``, ``torch.set_flush_denormal`` and ``torch.set_float32_matmul_precision`` are plain
calls (no tensor goes through ``__torch_function__``): a program's call would change the setting while tracing,
and on later calls not at all.
The trace's values would then follow the setting of the tracing call's moment, its operations the one of the
moment they run (``torch.ones(3)`` inside ``set_default_dtype(torch.float64)`` ... ``set_default_dtype(float32)``
came out float32). While a thread traces they are refused, unless they set what is already set; elsewhere they are
torch's own. (The prologue checks the default dtype each call starts with: ``check_global_state``.)
"""
from __future__ import annotations

import functools
import threading

import torch

_installed = False
_lock = threading.Lock()


def refused_while_tracing(fn, message: str, unchanged=lambda *args, **kwargs: False):
    """``fn``, raising NotImplementedError(``message``) where called while this thread traces, unless ``unchanged``
    says the call changes nothing."""

    @functools.wraps(fn)
    def refused(*args, **kwargs):
        from thunder.driver.frontend import current_tracer

        if current_tracer() is not None and not unchanged(*args, **kwargs):
            raise NotImplementedError(message)
        return fn(*args, **kwargs)

    return refused


_ADVICE = "Set it before the jitted call."


def install():
    global _installed
    with _lock:
        if _installed:
            return
        torch.set_default_dtype = refused_while_tracing(
            torch.set_default_dtype,
            "torch.set_default_dtype inside a jitted function is not supported: thunder would create the program's "
            "tensors with the dtype of the moment it traced them, and their operations would run with the one set "
            "when they run. " + _ADVICE,
            unchanged=lambda d: d is torch.get_default_dtype())
        torch.set_flush_denormal = refused_while_tracing(
            torch.set_flush_denormal,
            "torch.set_flush_denormal inside a jitted function is not supported: it would act while thunder traces "
            "the program, not when its operations run. " + _ADVICE)
        torch.set_float32_matmul_precision = refused_while_tracing(
            torch.set_float32_matmul_precision,
            "torch.set_float32_matmul_precision inside a jitted function is not supported: it would act while thunder "
            "traces the program, not when its products run (TF32 on CUDA). " + _ADVICE,
            unchanged=lambda precision: precision == torch.get_float32_matmul_precision())
        _installed = True
