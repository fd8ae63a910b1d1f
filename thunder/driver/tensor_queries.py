"""Answers to the questions a program asks about its tensors while thunder traces it.

Metadata (shape, dtype, device, ...) comes from the proxy of the tensor's *current* value (an in-place
``t_()`` changes the shape, an in-place update with a tensor that requires grad makes the tensor require
grad). Layout questions (``stride()``, ``is_contiguous()``) are answered from ``thunder.driver.layouts``.
Autograd questions (``is_leaf``, ``grad_fn``, ``grad``) are answered as eager would answer them. Questions
that need tensor data (``data_ptr()``, ``untyped_storage()``) are refused with a clear error.
"""
from __future__ import annotations

import torch

from thunder.core.proxies import TensorProxy

_TB = torch._C.TensorBase.__dict__


def _objects(*names) -> set:
    out = set()
    for name in names:
        for obj in (_TB.get(name), torch.Tensor.__dict__.get(name)):
            if obj is not None:
                out.add(obj)
    return out


# Answered by the current value's proxy itself.
METADATA = _objects("shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_cpu", "is_meta", "layout",
                    "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "names", "is_mps", "is_xpu", "itemsize",
                    "nbytes", "is_complex", "is_floating_point", "dim", "size", "numel", "nelement", "ndimension",
                    "element_size", "get_device", "is_signed", "has_names", "is_inference", "is_conj", "is_neg",
                    "__len__", "__hash__", "is_sparse_csr")
METADATA |= {torch.is_tensor, torch.is_floating_point, torch.is_complex, torch.numel, torch.result_type}
# Answered from the layout (strides) of the current value.
LAYOUT = _objects("stride", "is_contiguous", "is_non_overlapping_and_dense")
STORAGE_OFFSET = _objects("storage_offset")
IS_LEAF = _objects("is_leaf")
GRAD_FN = _objects("grad_fn")
GRAD = _objects("grad")
BASE = _objects("_base")
IS_VIEW = _objects("_is_view")
PRINTING = _objects("__repr__", "__format__", "__str__") | {torch.Tensor.__format__}
NEEDS_DATA = _objects("data_ptr", "untyped_storage", "storage", "_storage", "_cdata")
REQUIRES_GRAD = _objects("requires_grad")  # its setter: as requires_grad_


class TracedGradFn:
    """What ``grad_fn`` of a traced tensor that is part of the autograd graph answers: truthy, like eager's node."""

    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name

    def __repr__(self):
        return f"<thunder traced grad_fn of {self._name}>"

    def register_hook(self, fn):
        raise NotImplementedError(
            "hooks on the grad_fn of a tensor inside a jitted function (grad_fn.register_hook, register_prehook, and "
            "so Module.register_backward_hook on a module the program calls) are not supported: thunder's backward is "
            "one compiled program, and the hook would never be called. Register Module.register_full_backward_hook on "
            "a module that calls the jitted one, or Tensor.register_hook on the jitted call's inputs or outputs.")

    register_prehook = register_hook


def printed(proxy: TensorProxy) -> str:
    from thunder.core.proxies import type_string

    grad = ", requires_grad=True" if proxy.requires_grad else ""
    return f'TensorProxy(name={proxy.name}, "{type_string(proxy)}"{grad})'
