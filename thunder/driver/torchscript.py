"""TorchScript in a traced program.

A function made by ``torch.jit.script`` or ``torch.jit.trace`` runs in TorchScript's interpreter, below torch's
Python-level interception, where thunder cannot record what happens to traced tensors. While tracing, such a
function called with traced tensors runs the Python function it was made from instead (torch keeps it as
``_torchdynamo_inline``; torch.compile inlines it the same way), so its operations are traced like the rest of
the program. The two agree wherever TorchScript follows Python: TorchScript's conversions of arguments (an int
where a ``float`` is annotated) do not happen, a traced function's Python branches are taken anew instead of
as at its example, and gradients are autograd's rather than those of TorchScript's differentiable graphs
(equal within float tolerance). A function without Python source (``torch.jit.load``, a ``CompilationUnit``)
and a TorchScript module (``torch.jit.script`` or ``torch.jit.trace`` of an ``nn.Module``, which keeps no
Python code of its own) are refused with a clear error.
"""
from __future__ import annotations

import threading

import torch

from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import TensorProxy

_ORIGINAL_CALL = torch._C.ScriptFunction.__call__
_installed = False
_lock = threading.Lock()


def _call(self, *args, **kwargs):
    from thunder.driver.frontend import current_tracer

    if current_tracer() is None or not any(isinstance(a, TensorProxy) for a in flat_proxies((args, kwargs))):
        return _ORIGINAL_CALL(self, *args, **kwargs)
    python_fn = getattr(self, "_torchdynamo_inline", None)
    if python_fn is None:
        raise NotImplementedError(
            f"thunder cannot trace the TorchScript function {self.name!r} (from torch.jit.load or a CompilationUnit): "
            "it runs in TorchScript's interpreter, which thunder cannot record, and has no Python source. "
            "Call the Python function it was made from instead.")
    return python_fn(*args, **kwargs)


def install():
    """Installs the hook on scripted functions once per process; outside a tracing thread it calls TorchScript."""
    global _installed
    with _lock:
        if not _installed:
            torch._C.ScriptFunction.__call__ = _call
            _installed = True


def check_module(qualname: str, module: torch.nn.Module):
    if isinstance(module, torch.jit.ScriptModule):
        where = f"module.{qualname}" if qualname else "the module"
        raise NotImplementedError(
            f"thunder cannot trace {where}, a TorchScript module ({type(module).__name__} of "
            f"{getattr(module, 'original_name', '?')!r}): its code runs in TorchScript's interpreter, which thunder cannot record. "
            "Use the nn.Module it was made from instead of the result of torch.jit.script or torch.jit.trace.")
