"""``torch.matmul`` on tensors that require grad, and its gradients, computed as eager computes them.

Eager's matmul is a composite whose path depends on the operands' dimensions, layouts and on whether they require
grad: a batch times a matrix is folded into one ``mm`` (always when the smaller operand requires grad, which costs a
copy where the batch does not fold as a view), a matrix times a batch is folded transposed (``(b^T a^T)^T``), a
3-D operand with a batch of one that requires grad is squeezed, anything else runs one ``bmm`` of operands
expanded to the common batch. Its gradient is the backward of that path: ``mm``'s chosen by the operands' layouts,
``bmm``'s, ``mv``'s outer product, sums over broadcast dims. BLAS rounds by the kernel and the layouts it is given,
so these are replayed here step by step on the real tensors, where thunder's trace cannot see layouts:

- ``matmul_requiring_grad(a, b, requires_grad)``: the forward, where eager's path depends on ``requires_grad``
  (thunder's forward runs without grad, where ``torch.matmul`` would take the other path);
- ``matmul_grads(g, a, b, requires_grad)``: the gradients of the operands that require grad. An operand whose
  values the gradients do not read is passed as its layout alone (``layout_of``: a meta tensor), so that only what
  eager saves is saved.

Two paths stay in the trace, as operations fusion executors see: batches times batches (``_batched_backward``), and
a product by a 2-D operand that requires grad, a linear layer's (``linear_backward``, which the oneDNN executor
claims).
"""
from __future__ import annotations

import math

import torch

from thunder.core import prims
from thunder.torch.grad_rules import _aten_symbol, _column_major, _like, _rows_fold


def _squeezed(a, b, requires_grad):
    """The operand (0 or 1) eager squeezes: of two 3-D operands with different batches, one with a batch of one that
    requires grad (then the product folds); None otherwise."""
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        if a.shape[0] == 1 and requires_grad[0]:
            return 0
        if b.shape[0] == 1 and requires_grad[1]:
            return 1
    return None


def _folds(a, b, requires_grad) -> bool:
    """ATen's ``should_fold``: the larger operand (a batch of matrices) is folded into one matrix, for an ``mm`` or an
    ``mv`` instead of a ``bmm``."""
    t1 = a if a.dim() >= b.dim() else b.mT
    small_dim, small_requires_grad = (b.dim(), requires_grad[1]) if a.dim() >= b.dim() else (a.dim(), requires_grad[0])
    if not (t1.dim() >= 3 and small_dim <= 2):
        return False
    if small_requires_grad:
        return True
    if a.dim() == 2:
        return False
    return _rows_fold(t1)


def _fold_operands(a, b):
    """(transposed, t1 folded to a matrix, t1's shape, t2) of a folded product: ``t1 @ t2``, or its transpose."""
    transposed = b.dim() > a.dim()
    t1 = b.mT if transposed else a
    t2 = (a.t() if a.dim() == 2 else a) if transposed else b
    return transposed, t1.reshape(math.prod(t1.shape[:-1]), t1.shape[-1]), tuple(t1.shape), t2


def depends_on_requires_grad(a, b, requires_grad) -> bool:
    """Whether eager's path for these operands (their dims and batch sizes) differs when they require grad."""
    if not any(requires_grad):
        return False
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] != b.shape[0] and (
            a.shape[0] == 1 and requires_grad[0] or b.shape[0] == 1 and requires_grad[1]):
        return True
    larger, small, small_requires_grad = (a, b, requires_grad[1]) if a.ndim >= b.ndim else (b, a, requires_grad[0])
    return larger.ndim >= 3 and small.ndim <= 2 and small_requires_grad


def _matmul(a, b, requires_grad):
    if b.dim() == 2 and a.dim() >= 3 and a.is_contiguous():
        return torch.matmul(a, b)  # a batch times a matrix folds into one mm with or without grad: the common case
    squeezed = _squeezed(a, b, requires_grad)
    if squeezed is not None:
        return _matmul(a.squeeze(0), b, requires_grad) if squeezed == 0 else _matmul(a, b.squeeze(0), requires_grad)
    if not _folds(a, b, requires_grad):
        return torch.matmul(a, b)  # the same path with or without grad
    transposed, t1f, t1_shape, t2 = _fold_operands(a, b)
    if t2.dim() == 1:
        return t1f.mv(t2).view(t1_shape[:-1])
    out = t1f.mm(t2).view(t1_shape[:-1] + (t2.shape[1],))
    return out.mT.contiguous() if transposed else out


def _mm_grads(g, m1, m2, mask):
    """``mm``'s gradients as ATen's ``mm_mat1_backward`` / ``mm_mat2_backward``: a column-major operand gets its
    gradient computed transposed."""
    g1 = g2 = None
    if mask[0]:
        g1 = m2.conj().mm(g.t()).t() if _column_major(m1) else g.mm(m2.t().conj())
    if mask[1]:
        g2 = g.t().mm(m1.conj()).t() if _column_major(m2) else m1.t().conj().mm(g)
    return g1, g2


def _batched_grads(g, a, b, mask):
    """The general path: both operands expanded to the common batch and folded to 3-D, one ``bmm``."""
    n, m1 = (a.shape[-2] if a.dim() > 1 else 1), a.shape[-1]
    vector = b.dim() == 1
    m2, p = (b.shape[-1], 1) if vector else (b.shape[-2], b.shape[-1])
    batch = prims.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    size = math.prod(batch)
    a3 = a.expand(batch + (n, m1)).reshape(size, n, m1)
    b3 = b.expand(batch + (m2,)).reshape(size, m2).unsqueeze(2) if vector else b.expand(batch + (m2, p)).reshape(
        size, m2, p)
    g3 = g.reshape(size, n).unsqueeze(-1) if vector else g.reshape(size, n, p)
    ga = gb = None
    if mask[0]:
        ga = g3.bmm(b3.transpose(1, 2).conj()).reshape(batch + (n, m1)).sum_to_size(a.shape)
    if mask[1]:
        gb = a3.transpose(1, 2).conj().bmm(g3)
        gb = (gb.squeeze(2).reshape(batch + (m2,)) if vector else gb.reshape(batch + (m2, p))).sum_to_size(b.shape)
    return ga, gb


def _matmul_grads(g, a, b, requires_grad):
    mask = tuple(requires_grad)
    squeezed = _squeezed(a, b, requires_grad)
    if squeezed == 0:
        ga, gb = _matmul_grads(g, a.squeeze(0), b, requires_grad)
        return (None if ga is None else ga.unsqueeze(0)), gb
    if squeezed == 1:
        ga, gb = _matmul_grads(g, a, b.squeeze(0), requires_grad)
        return ga, (None if gb is None else gb.unsqueeze(0))
    da, db = a.dim(), b.dim()
    if da == 1 and db == 1:
        return (g * b.conj() if mask[0] else None), (g * a.conj() if mask[1] else None)
    if da == 2 and db == 1:
        return (torch.outer(g, b.conj()) if mask[0] else None), (a.conj().t().mv(g) if mask[1] else None)
    if da == 1 and db == 2:
        ga, gb = _mm_grads(g.unsqueeze(0), a.unsqueeze(0), b, mask)
        return (None if ga is None else ga.squeeze(0)), gb
    if da == 2 and db == 2:
        return _mm_grads(g, a, b, mask)
    if not _folds(a, b, requires_grad):
        return _batched_grads(g, a, b, mask)
    transposed, t1f, t1_shape, t2 = _fold_operands(a, b)
    need1, need2 = (mask[1], mask[0]) if transposed else mask
    if t2.dim() == 1:  # a matrix-vector product: its output is not transposed back
        gf = g.reshape(t1f.shape[0])
        g1 = torch.outer(gf, t2.conj()) if need1 else None
        g2 = t1f.conj().t().mv(gf) if need2 else None
    else:
        g = g.mT if transposed else g
        g1, g2 = _mm_grads(g.reshape(t1f.shape[0], t2.shape[1]), t1f, t2, (need1, need2))
    if g1 is not None:
        g1 = g1.reshape(t1_shape)
        g1 = g1.mT if transposed else g1
    if g2 is not None and transposed and da == 2:
        g2 = g2.t()
    return (g2, g1) if transposed else (g1, g2)


matmul_requiring_grad = _aten_symbol(_matmul, "matmul_requiring_grad",
                                     lambda a, b, requires_grad: (prims.matmul_shape(a, b), a.dtype, a.device),
                                     differentiable=True)
matmul_grads = _aten_symbol(_matmul_grads, "matmul_grads",
                            lambda g, a, b, requires_grad: [(tuple(a.shape), g.dtype, g.device) if requires_grad[0] else None,
                                                            (tuple(b.shape), g.dtype, g.device) if requires_grad[1] else None])


def _differentiable(t) -> bool:
    return t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)


def rule(sym, a, b):
    """The gradient rule of ``sym`` (``torch.matmul`` or the matmul primitive): the forward and the gradients as eager
    computes them for these operands. A layer-like product (a 2-D ``b`` that requires grad) keeps
    ``linear_backward``, which computes the same and which executors can claim."""
    from thunder.torch.grad_rules import layout_of, linear_backward
    from thunder.torch.shapes import transpose

    requires_grad = (_differentiable(a), _differentiable(b))
    out = matmul_requiring_grad(a, b, requires_grad) if depends_on_requires_grad(a, b, requires_grad) else sym(a, b)
    if a.ndim >= 2 and b.ndim == 2 and requires_grad[1] and a.dtype.is_floating_point and b.dtype.is_floating_point:
        w = transpose(b if requires_grad[0] else layout_of(b), 0, 1)

        def backward(g):
            ga, gbt = linear_backward(g, a, w, list(requires_grad))
            return ga, prims.transpose(gbt, (1, 0))

        return out, backward
    if a.ndim >= 3 and b.ndim >= 3 and _squeezed(a, b, requires_grad) is None:
        from thunder.transforms.grad_rules import _holomorphic

        if a is b and sym is not prims.matmul:  # torch.matmul's operands are views, ``b``'s made last: its part
            # reaches the sum first (``torch.bmm``, the primitive, gives its parts in the operands' order)
            return out, _holomorphic(lambda g: _batched_backward(g, a, b)[::-1], a, b)
        return out, _holomorphic(lambda g: _batched_backward(g, a, b), a, b)
    a_saved = a if requires_grad[1] else layout_of(a)
    b_saved = b if requires_grad[0] else layout_of(b)
    return out, lambda g: matmul_grads(g, a_saved, b_saved, requires_grad)


def _batched_backward(g, a, b):
    """The general path in the trace, where fusion executors see its copies: both operands expanded to the common
    batch and folded to 3-D (copying those a view cannot fold, such as ``k.transpose(-2, -1)`` of a head-split ``k``),
    the gradients ``bmm``s of those folded operands (the same layouts as eager's: the same roundings). ``bmm``
    itself, as eager's ``BmmBackward``, not ``matmul``, whose own folding views an operand again, which gives its
    extents of one other strides (a transposed ``(2, 16, 1)`` probability: ``(16, 1, 1)`` as ``bmm`` reads it,
    ``(16, 16, 1)`` through ``matmul``), which some CPUs' kernels round by (PVT's and SegFormer's value gradients on
    an AVX512-FP16 Xeon)."""
    from thunder.core.extents import prod
    from thunder.torch import expand, reshape, transpose
    from thunder.torch.nn import bmm
    from thunder.transforms.grad_rules import _reduce_to

    batch = prims.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    (n, m), p = a.shape[-2:], b.shape[-1]
    size = prod(batch)  # not -1: ambiguous for empty matrices
    a3 = reshape(expand(a, batch + (n, m)), (size, n, m))
    b3 = reshape(expand(b, batch + (m, p)), (size, m, p))
    g3 = reshape(g, (size, n, p))
    ga = _reduce_to(reshape(bmm(g3, transpose(b3, 1, 2)), batch + (n, m)), a.shape)
    gb = _reduce_to(reshape(bmm(transpose(a3, 1, 2), g3), batch + (m, p)), b.shape)
    return ga, gb
