"""Gradient rules of torch-language operations, and the backward kernels they use.

Where torch has a dedicated backward kernel (softmax, layer norm, batch norm, GELU, convolution,
embedding, ...) the rule calls it, so gradients match eager autograd's and the tensors saved for
backward are the ones eager saves. Operations without a rule here are differentiated through
their decomposition (rules of ``thunder.transforms.grad_rules``). Operations thunder has no
definition for (the generic fallback), ``scaled_dot_product_attention`` and the ops whose eager
gradient is torch's own composite are differentiated by torch's autograd (``thunder.torch.autograd_rule``).
"""
from __future__ import annotations

import math
import struct

import torch
import torch.nn.functional as F

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.trace import get_tracectx
from thunder.torch.registry import torchsymbol
from thunder.transforms.grad_rules import cat_slices, register_cheap_vjp, register_vjp, reversed_cumsum

aten = torch.ops.aten


def _aten_symbol(op, name, meta, *, differentiable=False):
    """An opaque torch-language symbol for an aten backward kernel, run by torch.

    ``meta`` gives its outputs' metadata as (shape, dtype, device) triples (None for outputs not
    computed), without running torch's meta kernels (whose decompositions import torch._dynamo).
    A ``differentiable`` kernel (a forward kernel whose rule uses it) has outputs that require grad
    where its inputs do.
    """

    def fn(*args, **kwargs):
        trace = get_tracectx()
        described = meta(*args, **kwargs)
        requires_grad = differentiable and prims.requires_grad(*args)

        def make(d):
            return None if d is None else trace.tensor(tuple(d[0]), d[1], d[2], requires_grad)

        return tuple(make(d) for d in described) if isinstance(described, list) else make(described)

    fn.__name__ = name
    return torchsymbol(name=name, torch_impl=op)(fn)


# ``masked_fill``'s gradient for a fill value (a 0-dim tensor): the selected elements' sum (their number depends on
# the mask's values, the sum's shape does not)
masked_fill_value_backward = _aten_symbol(lambda g, mask: g.masked_select(mask).sum(), "masked_fill_value_backward",
                                          lambda g, mask: ((), g.dtype, g.device))


def _like(t, dtype=None):
    return (tuple(t.shape), dtype or t.dtype, t.device)


softmax_backward = _aten_symbol(aten._softmax_backward_data.default, "softmax_backward",
                                lambda g, out, dim, input_dtype: _like(g, input_dtype))
log_softmax_backward = _aten_symbol(aten._log_softmax_backward_data.default, "log_softmax_backward",
                                    lambda g, out, dim, input_dtype: _like(g, input_dtype))
native_layer_norm_backward = _aten_symbol(
    aten.native_layer_norm_backward.default, "native_layer_norm_backward",
    lambda g, a, shape, mean, rstd, w, b, mask: [_like(a) if mask[0] else None, _like(w) if mask[1] else None,
                                                  _like(b) if mask[2] else None])


def _batch_norm_backward_kernel(g, a, w, rm, rv, sm, si, train, eps, mask):
    if a.numel() == 0:  # torch's kernel fails on an empty batch; eager's empty-batch path gives zeros
        return [torch.empty_like(a) if mask[0] else None, torch.zeros_like(w) if mask[1] else None,
                torch.zeros(a.shape[1], dtype=(w if w is not None else sm).dtype, device=a.device) if mask[2] else None]
    return aten.native_batch_norm_backward.default(g, a, w, rm, rv, sm, si, train, eps, mask)


native_batch_norm_backward = _aten_symbol(
    _batch_norm_backward_kernel, "native_batch_norm_backward",
    lambda g, a, w, rm, rv, sm, si, train, eps, mask: [
        _like(a) if mask[0] else None, _like(w) if mask[1] else None,
        ((a.shape[1],), (w if w is not None else sm).dtype, a.device) if mask[2] else None])  # a bias without a weight
gelu_backward = _aten_symbol(aten.gelu_backward.default, "gelu_backward", lambda g, a, approximate="none": _like(a))
threshold_backward = _aten_symbol(aten.threshold_backward.default, "threshold_backward", lambda g, a, t: _like(g))
silu_backward = _aten_symbol(aten.silu_backward.default, "silu_backward", lambda g, a: _like(a))
convolution_backward = _aten_symbol(
    aten.convolution_backward.default, "convolution_backward",
    lambda g, a, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask: [
        _like(a) if mask[0] else None, _like(w) if mask[1] else None,
        (tuple(bias_sizes), g.dtype, g.device) if mask[2] else None])
embedding_dense_backward = _aten_symbol(
    aten.embedding_dense_backward.default, "embedding_dense_backward",
    lambda g, indices, num_weights, padding_idx, scale_grad_by_freq: ((num_weights, g.shape[-1]), g.dtype, g.device))
slice_backward = _aten_symbol(aten.slice_backward.default, "slice_backward",
                              lambda g, input_sizes, dim, start, end, step: (tuple(input_sizes), g.dtype, g.device))
# advanced indexing's gradient: eager's ``index_backward``, an accumulating ``index_put`` into zeros (``index_add``,
# ``index_select``'s, adds a float16 or bfloat16 gradient's rows of a repeated index in another order)
index_backward = _aten_symbol(lambda g, index, sizes: g.new_zeros(sizes).index_put_((index,), g, accumulate=True),
                              "index_backward", lambda g, index, sizes: (tuple(sizes), g.dtype, g.device))

from thunder.torch import nn as tnn, elementwise as ew  # noqa: E402


def _softmax_rule(sym, backward_kernel):
    """softmax and log_softmax: torch's backward kernel reads the output, as eager saves it."""

    def rule(a, dim=None, _stacklevel=3, dtype=None):
        out = sym(a, dim, _stacklevel, dtype)
        d = dim % a.ndim if a.ndim else 0

        # softmax(x, dtype=...) is eager's softmax of x converted to dtype (of float16 x itself, to float32, on CUDA)
        half_to_float = a.device.type == "cuda" and a.dtype is torch.float16 and out.dtype is torch.float32
        input_dtype = a.dtype if half_to_float else out.dtype

        def backward(g):
            ga = backward_kernel(g, out, d, input_dtype)
            return (ga if ga.dtype is a.dtype else prims.convert_element_type(ga, a.dtype),)

        return out, backward

    register_vjp(sym)(rule)


_softmax_rule(tnn.softmax, softmax_backward)
_softmax_rule(tnn.log_softmax, log_softmax_backward)


@register_vjp(tnn.native_layer_norm)
def native_layer_norm_rule(a, normalized_shape, weight, bias, eps):
    out, mean, rstd = tnn.native_layer_norm(a, normalized_shape, weight, bias, eps)

    def backward(g_out, g_mean, g_rstd):
        mask = [True, weight is not None, bias is not None]
        ga, gw, gb = native_layer_norm_backward(g_out, a, list(normalized_shape), mean, rstd, weight, bias, mask)
        return ga, None, gw, gb, None

    return (out, mean, rstd), backward


@register_vjp(tnn.native_batch_norm)
def native_batch_norm_rule(a, weight, bias, running_mean, running_var, training, momentum, eps):
    out, save_mean, save_invstd, new_rm, new_rv = tnn.native_batch_norm(a, weight, bias, running_mean, running_var,
                                                                       training, momentum, eps)

    def backward(g_out, *unused):
        mask = [True, weight is not None, bias is not None]
        # in training the kernel reads the saved statistics only: the running ones are not kept for it
        rm, rv = (None, None) if training else (running_mean, running_var)
        ga, gw, gb = native_batch_norm_backward(g_out, a, weight, rm, rv, save_mean, save_invstd, training, eps, mask)
        return ga, gw, gb, None, None, None, None, None

    return (out, save_mean, save_invstd, new_rm, new_rv), backward


from torch._prims_common import suggest_memory_format as _suggest_memory_format  # noqa: E402 - ATen's, in Python


def _eager_memory_format(t):
    """The layout ``at::group_norm`` hands its kernels the input (and the backward the gradient) in, contiguous: on
    the CPU the input's suggested memory format (channels-last stays channels-last), elsewhere the standard one. The
    kernels require it (a channel slice of a larger tensor is refused)."""
    return _suggest_memory_format(t) if t.is_cpu else torch.contiguous_format


def _group_norm_kernel(a, w, b, n, c, hxw, group, eps):
    return aten.native_group_norm.default(a.contiguous(memory_format=_eager_memory_format(a)), w, b, n, c, hxw, group,
                                          eps)


def _group_norm_backward_kernel(g, a, mean, rstd, w, n, c, hxw, group, mask):
    a = a.contiguous(memory_format=_eager_memory_format(a))
    g = g.contiguous(memory_format=_eager_memory_format(a))
    return aten.native_group_norm_backward.default(g, a, mean, rstd, w, n, c, hxw, group, mask)


# the statistics: in the input's dtype, or float32 for a mixed-type call (which runs these kernels only on the CPU)
native_group_norm = _aten_symbol(
    _group_norm_kernel, "native_group_norm",
    lambda a, w, b, n, c, hxw, group, eps: [_like(a), ((n, group), tnn.cpu_statistics_dtype(a, w, b), a.device),
                                            ((n, group), tnn.cpu_statistics_dtype(a, w, b), a.device)],
    differentiable=True)
native_group_norm_backward = _aten_symbol(
    _group_norm_backward_kernel, "native_group_norm_backward",
    lambda g, a, mean, rstd, w, n, c, hxw, group, mask: [_like(a) if mask[0] else None, _like(w) if mask[1] else None,
                                                          ((c,), (w if w is not None else a).dtype, a.device)
                                                          if mask[2] else None])


def _column_major(t) -> bool:
    """ATen's test in its matrix-product backward: the matrix is laid out by columns (a transposed contiguous one)."""
    s = t.stride()
    return s[0] == 1 and s[1] == t.shape[0]


def _layout_token(t):
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


# A tensor on the meta device (no memory) with ``t``'s shape and strides: for a backward kernel that reads only the
# layout of an operand (see thunder/torch/matmul_grads.py)
layout_of = _aten_symbol(_layout_token, "layout_of", lambda t: (tuple(t.shape), t.dtype, torch.device("meta")))


def _linear_backward_kernel(g, a, w, mask, with_bias=False):
    """The gradients of the input and the weight of ``F.linear(a, w, bias)`` (those ``mask`` asks for) as eager
    computes them: eager multiplies the input flattened to rows by ``w.t()`` (one ``mm`` or ``addmm``), whose
    backward follows the operands' layouts, so that BLAS reads the same layouts (it rounds by layout): a
    column-major operand gets its gradient column-major. ``w`` is None where the input needs no gradient (nothing
    else saves it then): taken as contiguous. (Also a matrix product ``a @ b`` of a 2-D ``b``: ``w = b.t()``, or a
    meta tensor laid out as ``b.t()`` where only ``b`` needs a gradient.) A frozen weight's (``mask[1]`` false):
    ``a`` is a meta tensor laid out as the input, ``with_bias`` whether the layer has a bias (eager's path differs)."""
    g2, a2 = _rows(g), _rows(a)
    ga = gw = None
    if mask[0]:
        # A batch of rows' gradient is the product of g's rows laid out as ``a``, and no view of another tensor:
        # a base would keep a fused region it dies in from reusing its memory.
        if a.dim() > 2 and not mask[1] and not (with_bias and a.is_contiguous()) and not _rows_fold(a):
            # A frozen weight times a batch whose rows are no view of it: eager's ``matmul`` runs one ``bmm`` of
            # the batch by the weight expanded over it (it folds, copying, only for a weight that needs a gradient;
            # with a bias it flattens a contiguous input, whose strides may not fold, into one ``addmm``). Asked
            # before the column-major case: a (1, n, m) input transposed reshapes to a column-major view, yet ATen's
            # test, which exempts no extent of one, does not fold it (generated program nn 36052)
            batch, (n, m), p = tuple(a.shape[:-2]), a.shape[-2:], w.shape[0]
            size = math.prod(batch)
            wt = w.t().expand(batch + (m, p)).reshape(size, m, p)
            ga = g.reshape(size, n, p).bmm(wt.transpose(1, 2)).view(a.shape)
        elif _column_major(a2):
            ga = w.t().mm(g2.t()).t()
            ga = ga.reshape(a.shape) if a.dim() != 2 else ga
        elif a.dim() == 2:
            ga = g2.mm(w)
        elif _rows_fold(g):
            ga = torch.matmul(g, w)  # that product (matmul folds g's leading dimensions) in one call
        else:
            ga = g2.new_empty(a.shape)
            torch.mm(g2, w, out=ga.view(g2.shape[0], w.shape[1]))
    if mask[1]:
        gw = g2.t().mm(a2) if w is None or _row_major(w) else a2.t().mm(g2).t()
    return ga, gw


def _rows_fold(t) -> bool:
    """Whether ``t``'s leading dimensions fold into rows without a copy (ATen's ``should_fold`` test)."""
    shape, strides = t.shape, t.stride()
    n = len(shape)
    if n == 3:  # a batch of sequences (every linear layer's backward: the loop below costs three times as much)
        return strides[0] == strides[1] * shape[1] or t.numel() == 0
    return t.numel() == 0 or all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(n - 2))


def _row_major(w) -> bool:
    """``_column_major(w.t())``, without the view."""
    s = w.stride()
    return s[1] == 1 and s[0] == w.shape[1]


def _rows(t):
    """``t`` flattened to a matrix of its last dimension's rows (runs on every linear layer's backward: kept lean)."""
    if t.dim() == 2:
        return t
    n = t.shape[-1]
    return t.reshape(-1, n) if n else t.reshape(math.prod(t.shape[:-1]), 0)  # (-1, 0) is ambiguous


linear_backward = _aten_symbol(
    _linear_backward_kernel, "linear_backward",
    lambda g, a, w, mask, with_bias=False: [  # (``a`` may be a memoryless token of its layout: ``layout_of``)
        (tuple(a.shape), a.dtype, g.device) if mask[0] else None,
        ((g.shape[-1], a.shape[-1]), a.dtype, g.device) if mask[1] else None])


def _linear_bias_backward_kernel(g, a, shape):
    """The gradient of ``F.linear(a, w, bias)``'s bias of ``shape`` (one element or a row) as eager computes it: a
    2-D input, or a contiguous one ATen flattens (3-D, or any with a 1-D bias), goes through ``addmm``, whose bias
    gradient sums the flattened output gradient to the bias's shape; any other through ``matmul`` and a separate
    ``add_``, whose gradient sums the output gradient over its leading dimensions as laid out (another order of
    additions). Only ``a``'s layout is read."""
    if a.ndim <= 2 or a.is_contiguous() and (a.ndim == 3 or len(shape) == 1):
        g = g.reshape(math.prod(g.shape[:-1]), g.shape[-1])
    return g.sum_to_size(shape)


linear_bias_backward = _aten_symbol(_linear_bias_backward_kernel, "linear_bias_backward",
                                    lambda g, a, shape: (tuple(shape), g.dtype, g.device))


@register_vjp(tnn.group_norm)
def group_norm_rule(a, num_groups, weight=None, bias=None, eps=1e-5):
    """torch's kernels, as eager's ``F.group_norm`` runs them (the statistics are saved for the backward)."""
    mixed = weight is not None and weight.dtype is not a.dtype or bias is not None and bias.dtype is not a.dtype
    if mixed and (a.device.type != "cpu" or tnn.cpu_statistics_dtype(a, weight, bias) is a.dtype):
        return NotImplemented  # mixed dtypes the CPU kernel refuses, or on another device: through the decomposition
    n, c, hxw = a.shape[0], a.shape[1], math.prod(a.shape[2:])
    out, mean, rstd = native_group_norm(a, weight, bias, n, c, hxw, num_groups, eps)

    def backward(g):
        mask = [a.requires_grad, weight is not None and weight.requires_grad, bias is not None and bias.requires_grad]
        ga, gw, gb = native_group_norm_backward(g, a, mean, rstd, weight, n, c, hxw, num_groups, mask)
        return ga, None, gw, gb, None

    return out, backward


@register_vjp(tnn.linear)
def linear_rule(input, weight, bias=None):
    from thunder.transforms.grad_rules import linear_backward

    return tnn.linear(input, weight, bias), linear_backward(input, weight, bias)


def _times(t, scalar):
    """eager's ``maybe_multiply``: ``t * conj(scalar)``, or ``t`` itself for 1."""
    return t if scalar == 1 else ew.mul(t, scalar.conjugate() if isinstance(scalar, complex) else scalar)


def _addmm_rule(sym, product):
    """addmm / baddbmm: the fused forward, and eager's gradients (products with the other operand, transposed; for
    addmm chosen by the operands' layouts, as ATen's ``mm_mat1_backward`` / ``mm_mat2_backward`` choose them)."""

    def rule(input, a, b, *, beta=1, alpha=1):
        from thunder.torch.grad_rules_elementwise import _grad_for, conj

        out = sym(input, a, b, beta=beta, alpha=alpha)
        if sym is tnn.addmm:
            from thunder.torch.matmul_grads import matmul_grads

            mask = [a.requires_grad, b.requires_grad]
            a_saved, b_saved = (a if mask[1] else layout_of(a)), (b if mask[0] else layout_of(b))

            def backward(g):
                ga, gb = matmul_grads(g, a_saved, b_saved, mask) if any(mask) else (None, None)
                return (_grad_for(_times(g, beta), input), *(None if x is None else _times(x, alpha) for x in (ga, gb)))

            return out, backward

        def backward(g):
            ga = _times(product(g, conj(shp.transpose(b, -1, -2))), alpha) if a.requires_grad else None
            gb = _times(product(conj(shp.transpose(a, -1, -2)), g), alpha) if b.requires_grad else None
            return _grad_for(_times(g, beta), input), ga, gb

        return out, backward

    register_vjp(sym)(rule)


@register_vjp(tnn.matmul)
def matmul_rule(a, b):
    from thunder.torch import matmul_grads

    return matmul_grads.rule(tnn.matmul, a, b)


@register_vjp(ew.gelu)
def gelu_rule(a, *, approximate="none"):
    out = ew.gelu(a, approximate=approximate)
    return out, lambda g: (gelu_backward(g, a, approximate=approximate),)


@register_vjp(ew.relu)
def relu_rule(a, inplace=False):
    out = ew.relu(a)
    return out, lambda g: (threshold_backward(g, out, 0),)


@register_vjp(ew.silu)
def silu_rule(a, inplace=False):
    out = ew.silu(a)
    return out, lambda g: (silu_backward(g, a),)


@register_vjp(tnn.dropout_mask)
def dropout_mask_rule(a, p, for_inplace=False, *, strides=None):
    kwargs = {"strides": strides} if strides is not None else {}
    return (tnn.dropout_mask(a, p, True, **kwargs) if for_inplace else tnn.dropout_mask(a, p, **kwargs)), lambda g: (None,)


from thunder.torch.autograd_rule import torch_autograd_rule  # noqa: E402


def _sdpa_meta(query, key, value, *args, **kwargs):
    return ((tuple(query.shape[:-1]) + (value.shape[-1],), query.dtype, query.device),)


register_vjp(tnn.scaled_dot_product_attention)(torch_autograd_rule(F.scaled_dot_product_attention, _sdpa_meta,
                                                                  layout_hints=True))


# ---------------------------------------------------------------------------------------------
# Activations and clamping: torch's own backward kernels, so kinks, saturation and non-finite
# inputs get exactly eager's gradients.
# ---------------------------------------------------------------------------------------------

hardtanh_backward = _aten_symbol(aten.hardtanh_backward.default, "hardtanh_backward", lambda g, a, lo, hi: _like(a))
elu_backward = _aten_symbol(aten.elu_backward.default, "elu_backward",
                            lambda g, alpha, scale, input_scale, is_result, a: _like(a))
softplus_backward = _aten_symbol(aten.softplus_backward.default, "softplus_backward", lambda g, a, beta, t: _like(a))
hardswish_backward = _aten_symbol(aten.hardswish_backward.default, "hardswish_backward", lambda g, a: _like(a))
hardsigmoid_backward = _aten_symbol(aten.hardsigmoid_backward.default, "hardsigmoid_backward", lambda g, a: _like(a))
leaky_relu_backward = _aten_symbol(aten.leaky_relu_backward.default, "leaky_relu_backward",
                                   lambda g, a, slope, is_result: _like(a))
mish_backward = _aten_symbol(aten.mish_backward.default, "mish_backward", lambda g, a: _like(a))


def _activation_rule(sym, backward_of):
    """A rule for ``sym(a, ...)`` whose gradient is ``backward_of(g, a, out, *rest)``: ``a`` for the out-of-place
    op, and for its in-place form (``inplace=True``) eager's formula reads the output where it differs."""

    def rule(a, *args, **kwargs):
        out = sym(a, *args, **kwargs)
        return out, lambda g: (backward_of(g, a, out, *args, **kwargs),) + (None,) * len(args)

    register_vjp(sym)(rule)


def _float32(x: float) -> float:
    """``x`` rounded to float32 (torch's formulas read some scalars with ``toFloat()``)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _elu(alpha, scale, input_scale):
    """ELU-family gradient: from the input, or from the result for the in-place op (as eager's ``elu_``)."""

    def grad(g, a, out, inplace):
        return elu_backward(g, alpha, scale, input_scale, True, out) if inplace else elu_backward(
            g, alpha, scale, input_scale, False, a)

    return grad


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
_activation_rule(ew.hardtanh, lambda g, a, out, min_val=-1.0, max_val=1.0, inplace=False: hardtanh_backward(
    g, out if inplace else a, min_val, max_val))
_activation_rule(ew.relu6, lambda g, a, out, inplace=False: hardtanh_backward(g, out if inplace else a, 0.0, 6.0))
_activation_rule(ew.elu, lambda g, a, out, alpha=1.0, inplace=False: _elu(alpha, 1.0, 1.0)(g, a, out, inplace))
_activation_rule(ew.selu, lambda g, a, out, inplace=False: _elu(_SELU_ALPHA, _SELU_SCALE, 1.0)(g, a, out, inplace))
_activation_rule(ew.celu, lambda g, a, out, alpha=1.0, inplace=False: _elu(alpha, 1.0, 1.0 / _float32(alpha))(
    g, a, out, inplace))
_activation_rule(ew.softplus, lambda g, a, out, beta=1.0, threshold=20.0: softplus_backward(g, a, beta, threshold))
_activation_rule(ew.hardswish, lambda g, a, out, inplace=False: hardswish_backward(g, a))
_activation_rule(ew.hardsigmoid, lambda g, a, out, inplace=False: hardsigmoid_backward(g, a))
_activation_rule(ew.leaky_relu, lambda g, a, out, negative_slope=0.01, inplace=False: leaky_relu_backward(
    g, out if inplace else a, negative_slope, inplace))
_activation_rule(ew.mish, lambda g, a, out, inplace=False: mish_backward(g, a))
register_vjp(ew.logsigmoid)(torch_autograd_rule(F.logsigmoid, lambda a: (_like(a),)))


def _clamp_grads(g, a, min, max):
    """Eager's clamp gradients. The input gets the gradient where it lies within the bounds; a tensor bound
    where the input passes it, and where the bounds cross (min > max, the result is max) the maximum does."""
    from thunder.torch.grad_rules_elementwise import _grad_for

    if min is not None and max is not None:
        keep = ew.logical_and(ew.ge(a, min), ew.le(a, max))
    else:
        keep = ew.ge(a, min) if min is not None else ew.le(a, max)
    ga = _grad_for(ew.where(keep, g, 0), a)
    gmin = gmax = None
    if isinstance(min, TensorProxy):
        below = ew.lt(a, min)
        gmin = _grad_for(ew.where(ew.logical_and(below, ew.lt(min, max)) if max is not None else below, g, 0), min)
    if isinstance(max, TensorProxy):
        above = ew.gt(a, max)
        gmax = _grad_for(ew.where(ew.logical_or(above, ew.lt(max, min)) if min is not None else above, g, 0), max)
    return ga, gmin, gmax


@register_vjp(ew.clamp)
def clamp_rule(a, min=None, max=None):
    return ew.clamp(a, min, max), lambda g: _clamp_grads(g, a, min, max)


@register_vjp(ew.clamp_min)
def clamp_min_rule(a, min):
    return ew.clamp_min(a, min), lambda g: _clamp_grads(g, a, min, None)[:2]


@register_vjp(ew.clamp_max)
def clamp_max_rule(a, max):
    def backward(g):
        ga, _, gmax = _clamp_grads(g, a, None, max)
        return ga, gmax

    return ew.clamp_max(a, max), backward


# ---------------------------------------------------------------------------------------------
# Reductions whose gradients select (max/min over a dim) or need care at zero (norms)
# ---------------------------------------------------------------------------------------------

from thunder.torch import reductions as red, shapes as shp  # noqa: E402


# amax/amin of a 0-dim tensor over dim 0: eager's gradient has shape (1,) (``restore_reduced_dims`` adds the dimension
# reduced), which the engine sums to the input's shape () (``sum_to``): -0.0 becomes 0.0 (generated program nn 99727).
# Elsewhere the rule of prims.amax/amin (the decomposition's) is eager's.
def _amax_amin_of_a_0dim_tensor(sym):
    @register_vjp(sym)
    def rule(a, dim=(), keepdim=False):
        if a.ndim != 0 or keepdim or dim is None or (isinstance(dim, (tuple, list)) and not dim):
            return NotImplemented
        out = sym(a, dim, keepdim)

        def backward(g):
            mask = prims.convert_element_type(prims.eq(a, out), a.dtype)  # 0 where a is NaN
            part = prims.mul(prims.div(g, mask), mask)  # eager's (grad / count) * mask, of one element
            return prims.sum(prims.reshape(part, (1,)), (0,)), None, None

        return out, backward


_amax_amin_of_a_0dim_tensor(red.amax)
_amax_amin_of_a_0dim_tensor(red.amin)


value_selecting_backward = _aten_symbol(
    aten.value_selecting_reduction_backward.default, "value_selecting_backward",
    lambda g, dim, indices, sizes, keepdim: (tuple(sizes), g.dtype, g.device))


def _max_min_rule(sym):
    """max/min over a dim: the gradient goes to the selected element only (as torch's), not split among ties, written
    into zeros (eager's kernel: a zero's sign is kept, where adding it to zeros would make -0.0 0.0)."""

    def rule(a, dim=None, keepdim=False):
        if isinstance(dim, TensorProxy):
            return NotImplemented  # maximum/minimum, through their decomposition
        if dim is None:
            return _evenly_distributed(sym, a)
        out = sym(a, dim, keepdim)
        values, indices = out

        def backward(g_values, g_indices=None):
            if a.ndim == 0:
                return (g_values,)
            return (value_selecting_backward(g_values, dim % a.ndim, indices, list(a.shape), keepdim),)

        return out, backward

    return rule


def _evenly_distributed(sym, a):
    """``a.max()``, ``a.min()``: the gradient split evenly among the elements equal to the result, or among the NaNs
    where the result is NaN, and exactly zero elsewhere (eager's; amax's rule would divide by a count of zero there)."""
    out = sym(a)

    def backward(g):
        from thunder.torch.fallback import inplace_fallback_symbol

        hit = ew.logical_or(ew.eq(a, out), ew.logical_and(ew.isnan(a), ew.isnan(out)))
        share = ew.div(g, red.sum(hit))
        if a.device.type == "cuda":  # eager's formula there: the mask times the share (laid out as ``a``)
            return (ew.mul(hit, share),)
        # on the CPU, the share written into contiguous zeros (whatever ``a``'s layout)
        zeros = prims.full(tuple(a.shape), 0.0, device=a.device, dtype=a.dtype)
        return (inplace_fallback_symbol(torch.Tensor.masked_fill_)(zeros, hit, share),)

    return out, backward


def _triangle_rule(sym):
    """tril / triu: eager's gradient is the same triangle of the gradient (contiguous, as its kernel's output), where
    the decomposition's ``where`` would lay it out as the gradient."""

    def rule(a, diagonal=0):
        return sym(a, diagonal), lambda g: (sym(g, diagonal), None)

    register_vjp(sym)(rule)


_triangle_rule(shp.tril)
_triangle_rule(shp.triu)
_addmm_rule(tnn.addmm, tnn.mm)
_addmm_rule(tnn.baddbmm, tnn.bmm)
register_vjp(red.max)(_max_min_rule(red.max))
register_vjp(red.min)(_max_min_rule(red.min))


def _norm_meta(a, ord_or_p=2, dim=None, keepdim=False, *rest, dtype=None, **kwargs):
    dims = tuple(range(a.ndim)) if dim is None else tuple(d % max(a.ndim, 1) for d in ((dim,) if isinstance(dim, int) else dim))
    shape = tuple(1 if i in dims else s for i, s in enumerate(a.shape)) if keepdim else tuple(
        s for i, s in enumerate(a.shape) if i not in dims)
    from thunder.core.dtypes import to_real

    return ((shape, dtype or to_real(a.dtype), a.device),)


def _norm_rule(fn):
    """torch's autograd, except for the 0-norm, whose decomposition gives its input no gradient (eager's ``None``;
    torch's autograd here would materialize zeros)."""
    by_torch = torch_autograd_rule(fn, _norm_meta)

    def rule(a, *args, **kwargs):
        order = args[0] if args else kwargs.get("ord", kwargs.get("p", 2))
        return NotImplemented if isinstance(order, (int, float)) and order == 0 else by_torch(a, *args, **kwargs)

    return rule


register_vjp(red.vector_norm)(_norm_rule(torch.linalg.vector_norm))
register_vjp(red.norm)(_norm_rule(torch.norm))


def _var_meta_fn(two_outputs):
    def meta(a, dim=None, unbiased=None, keepdim=False, *, correction=None):
        dim, unbiased = red.unbiased_overload(dim, unbiased)
        ((shape, dtype, device),) = _norm_meta(a, 2, dim, keepdim)
        out = ((shape, dtype, device),)
        return out + ((shape, a.dtype, device),) if two_outputs else out

    return meta


# Variance and standard deviation: torch's autograd, for eager's handling of degenerate cases
# (a single sample, corrections larger than the sample count, a zero standard deviation).
def _with_correction(torch_fn):
    """``torch_fn`` called with the torch language's normalized arguments (unbiased=None is not accepted by torch)."""

    def call(a, dim=None, unbiased=None, keepdim=False, *, correction=None):
        dim, unbiased = red.unbiased_overload(dim, unbiased)
        if correction is None and unbiased is not None:
            correction = 1 if unbiased else 0
        kwargs = {} if correction is None else {"correction": correction}
        return torch_fn(a, dim, keepdim=keepdim, **kwargs)

    call.__name__ = torch_fn.__name__
    return call


for _sym, _fn, _two in ((red.var, torch.var, False), (red.std, torch.std, False), (red.var_mean, torch.var_mean, True),
                        (red.std_mean, torch.std_mean, True)):
    register_vjp(_sym)(torch_autograd_rule(_with_correction(_fn), _var_meta_fn(_two)))


@register_vjp(tnn.embedding)
def embedding_rule(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                   sparse=False):
    out = tnn.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
    pad = -1 if padding_idx is None else padding_idx % weight.shape[0]

    def backward(g):
        return None, embedding_dense_backward(g, input, weight.shape[0], pad, scale_grad_by_freq)

    return out, backward


def _loss_meta(input, target, *args, reduction="mean", **kwargs):
    return ((tuple(input.shape) if reduction == "none" else (), input.dtype, input.device),)


def _bce(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    return F.binary_cross_entropy(input, target, weight, size_average, reduce, reduction)


# binary cross entropy: torch's clamping of probabilities at 0 and 1 is part of its gradient
def _bce_meta(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    return _loss_meta(input, target, reduction=tnn._legacy_reduction(size_average, reduce, reduction))


register_vjp(tnn.binary_cross_entropy)(torch_autograd_rule(_bce, _bce_meta))


# torch's fused loss kernels (their backward formulas are not the decompositions'), eager's mse_loss backward kernel,
# and cosine_similarity's normalize-then-multiply composite (whose clamp of the norms at eps passes the gradient
# through): torch's autograd gives exactly eager's gradients. Their outputs' metadata is what torch's meta kernels
# say: the dtype follows rules of each op's own (the target's for binary_cross_entropy_with_logits, the promoted
# one for mse_loss and smooth_l1_loss), which the kernels know best.
register_vjp(tnn.binary_cross_entropy_with_logits)(torch_autograd_rule(F.binary_cross_entropy_with_logits))
register_vjp(tnn.smooth_l1_loss)(torch_autograd_rule(F.smooth_l1_loss))
register_vjp(tnn.mse_loss)(torch_autograd_rule(F.mse_loss))
register_vjp(tnn.cosine_similarity)(torch_autograd_rule(F.cosine_similarity))


def _prod(a, dim=None, keepdim=False, *, dtype=None):
    return torch.prod(a, dtype=dtype) if dim is None else torch.prod(a, dim, keepdim, dtype=dtype)


def _prod_meta(a, dim=None, keepdim=False, *, dtype=None):
    ((shape, _, device),) = _norm_meta(a, 2, dim, keepdim)
    return ((shape, dtype or a.dtype, device),)


# prod: torch's formula handles zeros (one zero: the product of the others; several: zero)
register_vjp(red.prod)(torch_autograd_rule(_prod, _prod_meta))


@register_vjp(red.logsumexp)
def logsumexp_rule(a, dim, keepdim=False):
    out = red.logsumexp(a, dim, keepdim)

    def backward(g):
        result = out
        if not keepdim and a.ndim:
            dims = red._dims(a, dim)
            kept = tuple(1 if i in dims else s for i, s in enumerate(a.shape))
            g, result = shp.reshape(g, kept), shp.reshape(out, kept)
        from thunder.torch.grad_rules_elementwise import conj

        return ew.mul(g, conj(ew.exp(ew.sub(a, result)))), None, None

    return out, backward


from thunder.torch import grad_rules_elementwise  # noqa: E402,F401  (rules of the elementwise operations)
from thunder.torch import matmul_grads  # noqa: E402,F401  (the kernels of matrix products' gradients)


# split (q, k, v = c_attn(x).split(...)): the cotangents concatenated, zeros for the unused pieces, as eager's
# split_backward; through the decomposition each piece's gradient would be a zero-padded copy of the whole, summed.
from thunder.torch import shapes as _shapes  # noqa: E402
from thunder.torch.utils import canonicalize_dim  # noqa: E402


def _or_zeros(cotangents, outs) -> list:
    """The cotangents of a split's pieces, zeros for the pieces no loss used (eager's split and unbind backwards)."""
    return [g if g is not None else prims.full(tuple(o.shape), 0.0, device=o.device, dtype=o.dtype)
            for g, o in zip(cotangents, outs)]


@register_vjp(_shapes.split)
def split_rule(a, split_size_or_sections, dim=0):
    outs = _shapes.split(a, split_size_or_sections, dim)

    def backward(*cotangents):
        return (_shapes.cat(_or_zeros(cotangents, outs), dim % a.ndim), None, None)

    return outs, backward


# unbind: eager's unbind_backward stacks the cotangents (zeros for the unused pieces); through the decomposition each
# piece's gradient would be a zero-padded copy of the whole (select's), summed, which turns -0.0 into 0.0
@register_vjp(_shapes.unbind)
def unbind_rule(a, dim=0):
    outs = _shapes.unbind(a, dim)

    def backward(*cotangents):
        if not outs:
            return prims.full(tuple(a.shape), 0.0, device=a.device, dtype=a.dtype), None
        return _shapes.stack(_or_zeros(cotangents, outs), dim % a.ndim), None

    return outs, backward


# roll: eager's roll_backward rolls the gradient back; through the decomposition (a cat of two slices) each slice's
# gradient would be a zero-padded copy of the whole, summed, which turns -0.0 into 0.0 (generated program 33497)
@register_vjp(_shapes.roll)
def roll_rule(a, shifts, dims=None):
    out = _shapes.roll(a, shifts, dims)

    def backward(g):
        back = -shifts if isinstance(shifts, int) else tuple(-s for s in shifts)
        return (_shapes.roll(g, back, dims), None, None)

    return out, backward


@register_vjp(_shapes.select)
def select_rule(a, dim, index):
    """Selecting from a dimension of size 1 (``x[0]`` of a batch of one, ``unbind`` of such a dimension): eager's
    ``select_backward`` writes the gradient into zeros of the input's shape, laid out contiguously, where the
    decomposition (a squeeze, whose gradient is a view) keeps the gradient's layout, and a reduction over a
    gradient laid out otherwise adds in another order (OLMo-Hybrid's ``key[:, :, 0]`` of a single chunk). From a
    larger dimension the decomposition's gradient (``slice_backward``) is eager's already."""
    d = dim % a.ndim
    if type(a.shape[d]) is not int or a.shape[d] != 1:
        return NotImplemented

    def backward(g):
        return slice_backward(prims.reshape(g, tuple(a.shape)), list(a.shape), d, 0, 1, 1), None, None

    return _shapes.select(a, dim, index), backward


@register_vjp(_shapes.getitem)
def getitem_rule(a, key):
    """``a[index]`` of an integer tensor: eager's gradient (``index_backward``), where the decomposition's (a ``take``,
    ``index_select``'s, whose gradient is an ``index_add``) rounds otherwise in float16 and bfloat16 (the hidden
    states each expert of a mixture of experts selects, ``hidden_states[token_idx]``). Other keys: their decomposition
    or torch's own indexing."""
    if not _shapes.indexes_by_one_integer_tensor(a, key):
        return NotImplemented

    return _shapes.getitem(a, key), lambda g: (index_backward(g, key, list(a.shape)), None)


# nll_loss of (N, C) scores (cross_entropy of a language model's logits): torch's kernels, as eager runs them.
# Through the decomposition its gradient would be a scatter into a fresh zero tensor (an extra copy of it).
nll_loss_forward = _aten_symbol(
    aten.nll_loss_forward.default, "nll_loss_forward",
    lambda a, target, weight, reduction, ignore_index: [
        (tuple(target.shape) if reduction == 0 else (), a.dtype, a.device), ((), a.dtype, a.device)],
    differentiable=True)
nll_loss_backward = _aten_symbol(
    aten.nll_loss_backward.default, "nll_loss_backward",
    lambda g, a, target, weight, reduction, ignore_index, total_weight: _like(a))
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


@register_vjp(tnn.nll_loss)
def nll_loss_rule(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    if input.ndim != 2 or target.ndim != 1 or (isinstance(weight, TensorProxy) and weight.requires_grad):
        return NotImplemented
    r = _REDUCTIONS[tnn._legacy_reduction(size_average, reduce, reduction)]
    out, total_weight = nll_loss_forward(input, target, weight, r, ignore_index)

    def backward(g, g_total_weight=None):
        return (nll_loss_backward(g, input, target, weight, r, ignore_index, total_weight),)

    return out, backward


# ---------------------------------------------------------------------------------------------
# Means: eager's gradient, the cotangent expanded to the input's shape and then divided by the count. The result
# is a full tensor: reductions of it (the gradient of a broadcast scale, ``alpha * x`` after a mean over tokens)
# round as eager's do. Through the decomposition the division came first and the expansion after, a stride-0
# gradient, which reductions sum in another order.
# ---------------------------------------------------------------------------------------------

from thunder.torch import reductions as _reductions  # noqa: E402


@register_vjp(_reductions.mean)
def mean_rule(a, dim=None, keepdim=False, *, dtype=None):
    out = _reductions.mean(a, dim, keepdim, dtype=dtype)
    dims = _reductions._dims(a, dim)
    n = _reductions.extent_prod(a.shape[d] for d in dims)

    def backward(g):
        return (prims.div(_expanded(g, a, dims, keepdim), n if _reductions.is_runtime(n) else float(n)),)

    return out, backward


def _expanded(g, a, dims, keepdim):
    """The cotangent of a reduction of ``a`` over ``dims`` broadcast back to ``a``'s shape (strides 0, as eager's)."""
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    if keepdim:
        g = prims.reshape(g, tuple(a.shape[i] for i in kept))
    return prims.broadcast_in_dim(g, tuple(a.shape), kept)


@register_cheap_vjp(_reductions.sum)  # (a broadcast: a composite summing stays one kernel in the forward)
def sum_rule(a, dim=None, keepdim=False, *, dtype=None):
    """eager's ``sum_backward``: the cotangent expanded (a float16/bfloat16 sum, accumulated in float32, had its
    gradient converted through float32 and so materialized, where eager's is a view of stride 0)."""
    if dtype is not None and dtype is not a.dtype:
        return NotImplemented  # (eager converts the expanded cotangent: the decomposition's gradient)
    out = _reductions.sum(a, dim, keepdim, dtype=dtype)
    dims = _reductions._dims(a, dim)
    return out, lambda g: (_expanded(g, a, dims, keepdim),)


@register_vjp(_reductions.cumsum)
def cumsum_rule(a, dim, *, dtype=None):
    """``cumsum(a, dim, dtype=...)`` with another floating dtype: eager's ``CumsumBackward`` converts the cotangent to
    ``a``'s dtype first and sums it in reverse in that dtype (the decomposition's rules sum in the output's dtype,
    then convert: other roundings)."""
    out_dtype = _reductions._sum_dtype(a, dtype)
    if a.ndim == 0 or out_dtype is a.dtype or not out_dtype.is_floating_point:
        return NotImplemented
    out = _reductions.cumsum(a, dim, dtype=dtype)
    d = _reductions._dims(a, dim)[0]

    def backward(g):
        return (reversed_cumsum(prims.convert_element_type(g, a.dtype), d, a),)

    return out, backward


@register_vjp(_shapes.repeat)
def repeat_rule(a, *sizes):
    """eager's ``repeat_backward``: the leading dimensions ``repeat`` adds summed away one at a time, then one sum over
    the repeats of each dimension (the gradient reshaped to (repeats, size) pairs); through the decomposition (a
    broadcast) it would be one sum over all of them, which adds in another order."""
    repeats = _shapes._shape_arg(sizes)
    if any(type(s) is not int for s in (*repeats, *a.shape)) or 0 in repeats:
        return NotImplemented

    def backward(g):
        for _ in range(g.ndim - a.ndim):
            g = red.sum(g, 0)
        lead = len(repeats) - a.ndim
        grad_size, sum_dims = [], []
        for d, size in enumerate(a.shape):
            if repeats[lead + d] != 1:
                sum_dims.append(len(grad_size))
                grad_size.append(repeats[lead + d])
            grad_size.append(size)
        if sum_dims:
            g = red.sum(_shapes.reshape(g, tuple(grad_size)), tuple(sum_dims))
        return (g,)

    return _shapes.repeat(a, *sizes), backward


@register_cheap_vjp(_shapes.cat)
def cat_rule(tensors, dim=0):
    """eager's ``CatBackward``: one slice of the output gradient per input, in the inputs' order, each in its input's
    dtype. Through the decomposition, the type promotions' conversions would be differentiated one by one, the last
    first: a tensor given twice in another dtype (``cat([t_bf16, x, t_bf16])``) would get its parts summed in the
    reverse order. A legacy empty tensor that cat skips (``torch.tensor([])``) gets an empty gradient."""
    out = _shapes.cat(tensors, dim)
    kept = [t for t in tensors if not (t.ndim == 1 and _shapes.is_zero(t.shape[0]))]
    d = canonicalize_dim(kept[0].ndim, dim) if kept else None

    def backward(g):
        parts = iter(cat_slices(g, kept, d) if kept else ())
        grads = []
        for t in tensors:
            if not any(t is k for k in kept):
                grads.append(prims.full((0,), 0.0, device=t.device, dtype=t.dtype))
                continue
            part = next(parts)
            grads.append(part if part.dtype is t.dtype else prims.convert_element_type(part, t.dtype))
        return grads, None

    return out, backward


@register_vjp(_shapes.stack)
def stack_rule(tensors, dim=0):
    """eager's ``StackBackward``: the output gradient unbound, one part per input, given in the inputs' order (a tensor
    stacked several times gets its parts summed in that order, as eager's engine sums them)."""
    out = _shapes.stack(tensors, dim)

    def backward(g):
        d = dim % out.ndim
        parts = [_shapes.select(g, d, i) for i in range(len(tensors))]
        return [p if p.dtype is t.dtype else prims.convert_element_type(p, t.dtype) for p, t in zip(parts, tensors)], None

    return out, backward


# [Note: an expansion by new leading dimensions of extent 1]
# Eager's ``ExpandBackward`` is ``sum_to(grad, a.shape)``, which sums over every new leading dimension, one of
# extent 1 too, and a sum turns -0.0 into 0.0 (generated program nn 78642: ``x.expand(1, *x.shape)``). Through the
# decomposition (``broadcast_in_dim``), such a dimension is reshaped away, as ``unsqueeze``'s gradient is. Where an
# expansion adds only such dimensions and expands none of ``a``'s, this rule sums them; everywhere else it declines:
# the decomposition's rule sums already, and an expansion to ``a``'s own shape is ``a`` (its gradient is ``a``'s).
def _expand_rule(sym, target_shape):
    @register_vjp(sym)
    def rule(a, *args):
        from thunder.core.extents import is_one, same_shape

        shape = target_shape(a, *args)
        lead = len(shape) - a.ndim
        if lead <= 0 or not all(is_one(n) for n in shape[:lead]) or not same_shape(shape[lead:], tuple(a.shape)):
            return NotImplemented
        return sym(a, *args), lambda g: (prims.sum(g, tuple(range(lead))), *(None for _ in args))

    return rule


_expand_rule(_shapes.expand, _shapes.expanded_shape)
_expand_rule(_shapes.expand_as, lambda a, other: tuple(other.shape))
_expand_rule(_shapes.broadcast_to, lambda a, shape: _shapes.expanded_shape(a, tuple(shape)))
