"""The oneDNN executor: float32 matrix products on the CPU through oneDNN's GEMM.

    jm = thunder.jit(model, executors=["onednn", "inductor", "torch"])

PyTorch's ``torch.mm`` and ``F.linear`` on float32 CPU tensors call the BLAS library it was built with
(MKL in the x86 wheels). MKL does not run its widest kernels on every x86 CPU: on AMD's AVX-512 parts
it keeps to code that reaches about half the machine's peak. oneDNN, which PyTorch also ships (and uses
for its bfloat16 products), dispatches on the instruction set alone. On the 2-core AMD EPYC (Zen 5) VM of
BENCHMARKS.md a product of 1024x256 by 256x4096 takes 11.5 ms with MKL and 5.1 ms with oneDNN; on CPUs
where MKL runs its best kernels the two are close. This executor claims the products worth it:

- ``F.linear``, ``torch.matmul`` and ``torch.mm`` (and the primitives ``linear``, ``matmul``) of float32
  CPU tensors whose right operand (the weight) is 2-D and left operand at least 2-D, of at least
  ``MIN_MULTIPLY_ADDS`` multiply-adds: a oneDNN call costs about 12 us against torch's 2, so small products
  keep torch's kernels. Batched products (``bmm``, attention) stay with torch. The gradients of a linear layer
  with a trainable weight are one symbol (``linear_backward``): its two products are claimed together.
- Each product is computed in float32 with float32 accumulation, in another order than MKL's: results
  differ from eager's in the last bits (within about 1e-6 of the largest entry), not bitwise. This is why
  the executor is not among the defaults, which keep eager's numerics exactly; list it, before ``torch``,
  where speed matters.
- Every product is returned contiguous, as torch returns it.

Layouts. oneDNN's entry point in PyTorch, ``torch.ops.mkldnn._linear_pointwise(X, W, bias)``, computes
``X @ W.T + bias`` reading ``X`` contiguous (it copies another layout) and ``W`` in either dense layout.
``A @ B`` is therefore ``X = A, W = B.T``, unless ``A`` is a transposed matrix (a weight gradient:
``g.T @ x``) larger than ``B`` and the result together: then ``(B.T @ A.T).T`` reads ``A`` in place, copies
``B.T`` and transposes the result back.
"""
from __future__ import annotations

import torch

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.extend import OperatorExecutor, register_executor
from thunder.torch import nn as tnn
from thunder.torch.grad_rules import linear_backward
from thunder.torch.matmul_grads import matmul_requiring_grad

MIN_MULTIPLY_ADDS = 1 << 21  # below this torch's kernel call is cheaper (measured on the VM above)
_IMPORT = "from thunder.executors.onednnex import {}"


def onednn_available() -> bool:
    """Whether this torch has oneDNN and its linear operator."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):
        return False
    return True


def _dense(w: torch.Tensor) -> torch.Tensor:
    """``w`` (2-D) in a layout oneDNN reads in place: row- or column-major, else a contiguous copy."""
    return w if w.is_contiguous() or w.t().is_contiguous() else w.contiguous()


def onednn_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, w, bias)`` by oneDNN."""
    if x.ndim == 2:
        return torch.ops.mkldnn._linear_pointwise(x, _dense(w), bias, "none", [None], "")
    # oneDNN's operator returns a view of a matrix for more dimensions; a view keeps the inductor executor from
    # reusing the product's memory once it dies (see CompiledRegion._may_reuse), so the view is made here as
    # torch's linear makes it, unknown to autograd
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), _dense(w), bias, "none", [None], "")
    return torch.ops.aten._unsafe_view(out, (*x.shape[:-1], w.shape[0]))


def onednn_matmul(a: torch.Tensor, b: torch.Tensor, requires_grad=None) -> torch.Tensor:
    """``torch.matmul(a, b)`` by oneDNN, for a 2-D ``b`` and an ``a`` of at least 2 dimensions (a product folded
    as eager folds it where ``b`` requires grad: ``requires_grad`` is that of thunder.torch.matmul_grads)."""
    if a.ndim == 2 and not a.is_contiguous():
        # (B.T @ A.T).T reads A in place; it copies B.T unless that is contiguous, and the result back
        copied = (0 if b.t().is_contiguous() else b.numel()) + a.shape[0] * b.shape[1]
        if copied < a.numel():
            return onednn_linear(b.t(), a).t().contiguous()
    return onednn_linear(a, b.t())


def onednn_linear_backward(g: torch.Tensor, a: torch.Tensor, w: torch.Tensor | None, mask, with_bias=False) -> tuple:
    """The gradients of the input and the weight of ``F.linear(a, w, bias)`` that ``mask`` asks for
    (thunder.torch.grad_rules.linear_backward), products by oneDNN."""
    g2, a2 = g.reshape(-1, g.shape[-1]), a.reshape(-1, a.shape[-1])
    ga = onednn_matmul(g2, w).reshape(a.shape) if mask[0] else None
    return ga, onednn_matmul(g2.t(), a2) if mask[1] else None


def _float32_cpu_static(*tensors) -> bool:
    """float32 CPU tensors (``None`` skipped) of static shapes without an empty dimension."""
    tensors = [t for t in tensors if t is not None]
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and all(type(s) is int and s > 0 for s in t.shape)
               for t in tensors)


def _multiply_adds(a, n_out: int) -> int:
    """The multiply-adds of a product of ``a`` by a matrix of ``n_out`` columns: ``a``'s entries times those."""
    for s in a.shape:
        n_out *= s
    return n_out


class OneDNNExecutor(OperatorExecutor):
    """Claims float32 CPU products of at least ``min_multiply_adds`` multiply-adds (see the module's docstring)."""

    def __init__(self, name: str = "onednn", *, min_multiply_adds: int = MIN_MULTIPLY_ADDS):
        super().__init__(name)
        self.min_multiply_adds = min_multiply_adds
        linear = self.register_operator("onednn_linear", fn=onednn_linear, imports=(_IMPORT.format("onednn_linear"),))
        matmul = self.register_operator("onednn_matmul", fn=onednn_matmul, imports=(_IMPORT.format("onednn_matmul"),))
        for sym in (tnn.linear, prims.linear):
            self.register_implementation(sym, linear, checker=self._claims_linear)
        for sym in (tnn.matmul, tnn.mm, prims.matmul, matmul_requiring_grad):  # the last: a folded product
            self.register_implementation(sym, matmul, checker=self._claims_matmul)
        backward = self.register_operator("onednn_linear_backward", fn=onednn_linear_backward,
                                          imports=(_IMPORT.format("onednn_linear_backward"),))
        self.register_implementation(linear_backward, backward, checker=self._claims_linear_backward)

    def _claims_linear(self, input, weight, bias=None) -> bool:
        if not (isinstance(input, TensorProxy) and input.ndim >= 2 and isinstance(weight, TensorProxy)
                and weight.ndim == 2):
            return False
        if bias is not None and not (isinstance(bias, TensorProxy) and tuple(bias.shape) == (weight.shape[0],)):
            return False
        return (_float32_cpu_static(input, weight, bias)
                and _multiply_adds(input, weight.shape[0]) >= self.min_multiply_adds)

    def _claims_linear_backward(self, g, a, w, mask, with_bias=False) -> bool:
        if not (isinstance(g, TensorProxy) and isinstance(a, TensorProxy) and (mask[0] or mask[1])):
            return False
        if a.device.type == "meta":  # the layout of the input of a frozen weight: shaped as g but its last dim
            static = _float32_cpu_static(g, w) and a.dtype == torch.float32 and type(a.shape[-1]) is int
        else:
            static = _float32_cpu_static(g, a, w)
        return static and _multiply_adds(g, a.shape[-1]) >= self.min_multiply_adds

    def _claims_matmul(self, a, b, requires_grad=None) -> bool:
        if not (isinstance(a, TensorProxy) and a.ndim >= 2 and isinstance(b, TensorProxy) and b.ndim == 2):
            return False
        return _float32_cpu_static(a, b) and _multiply_adds(a, b.shape[1]) >= self.min_multiply_adds


ex = OneDNNExecutor()
if onednn_available():
    register_executor(ex)
