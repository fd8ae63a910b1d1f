"""A transform for tests: every tensor an executed trace computes is checked, when it runs, against the metadata its
proxy has (dtype, shape, device). Thunder decides later operations from that metadata (autocast's casts, type
promotion, which kernel a gradient takes); a proxy that says bfloat16 where torch computed float32 can give results
that pass a comparison by luck and fail in the next program. ``thunder.jit(fn, transforms=[CheckMetadata()])``.
"""
from __future__ import annotations

import torch

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.extend import OperatorExecutor
from thunder.transforms.base import Transform


class MetadataMismatch(AssertionError):
    pass


def _check_metadata(t, what: str, shape: tuple, dtype: torch.dtype, device_type: str):
    if not isinstance(t, torch.Tensor):
        raise MetadataMismatch(f"{what}: a {type(t).__name__} where the trace has a tensor")
    actual_shape = tuple(t.shape)
    if (t.dtype is not dtype or t.device.type != device_type or len(actual_shape) != len(shape)
            or any(s is not None and s != a for s, a in zip(shape, actual_shape))):
        raise MetadataMismatch(f"{what}: {t.dtype} {list(actual_shape)} on {t.device.type} where the trace has "
                               f"{dtype} {list(shape)} on {device_type}")


_ex = OperatorExecutor("metadata_check")
_check = _ex.register_operator("check_metadata", fn=_check_metadata, meta=lambda *args: None)


class CheckMetadata(Transform):
    def transform_executed(self, trace, compilation, kind: str):
        bsyms = []
        for bsym in trace.bound_symbols:
            bsyms.append(bsym)
            if bsym.sym.name in ("python_return", "python_del", "unpack_sequence", "clear_mutable_collection"):
                continue
            for o in bsym.flat_outs:
                if isinstance(o, TensorProxy):
                    shape = tuple(s if type(s) is int else None for s in o.shape)  # run-time extents: not checked
                    what = f"{o.name}, computed by {bsym.sym.name} in the {kind} trace"
                    bsyms.append(BoundSymbol(_check, (o, what, shape, o.dtype, o.device.type), {}, None, (), ()))
        new = trace.from_trace(bsyms)
        return new
