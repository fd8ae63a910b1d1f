"""Neural-network operations of the torch language: linear algebra, convolution, normalization,
softmax, attention, embedding, dropout and losses."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunder.core import prims
from thunder.core.extents import is_runtime, is_zero, prod as extent_prod, same_shape
from thunder.core.proxies import TensorProxy, eager_new_strides
from thunder.core.symbol import Tag
from thunder.torch.registry import INPLACE_TO_SYMBOL, torchsymbol
from thunder.torch.utils import broadcast, canonicalize_dim, check, convert, expand_to, promote
from thunder.torch import elementwise as ew, reductions as red, shapes, fallback
from thunder.torch.creation import full

# ---------------------------------------------------------------------------------------------
# Linear algebra
# ---------------------------------------------------------------------------------------------


@torchsymbol(F.linear)
def linear(input, weight, bias=None):
    return prims.linear(input, weight, bias)


@torchsymbol(torch.matmul, methods=("matmul", "__matmul__"))
def matmul(a, b):
    return prims.matmul(a, b)


@torchsymbol(methods=("__rmatmul__",), torch_impl=torch.Tensor.__rmatmul__)
def rmatmul(a, b):
    return prims.matmul(b, a)


@torchsymbol(torch.mm, methods=("mm",))
def mm(a, b):
    check(a.ndim == 2 and b.ndim == 2, "mm: both arguments must be 2D")
    return prims.matmul(a, b)


@torchsymbol(torch.bmm, methods=("bmm",))
def bmm(a, b):
    check(a.ndim == 3 and b.ndim == 3, "bmm: both arguments must be 3D")
    return prims.matmul(a, b)


@torchsymbol(torch.mv, methods=("mv",))
def mv(a, b):
    return prims.matmul(a, b)


@torchsymbol(torch.dot, methods=("dot",))
def dot(a, b):
    return prims.matmul(a, b)


def _addmm(input, a, b, beta, alpha):
    """``beta * input + alpha * (a @ b)``, rounded once for low-precision dtypes as torch's kernels do;
    ``input`` is ignored (NaN included) when ``beta`` is 0."""
    dtype = a.dtype
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    out = prims.matmul(convert(a, compute), convert(b, compute))
    out = ew.mul(out, alpha) if alpha != 1 else out
    if beta != 0:
        inp = convert(input, compute)
        out = ew.add(ew.mul(inp, beta) if beta != 1 else inp, out)
    return convert(out, dtype)


@torchsymbol(torch.addmm, methods=("addmm",))
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    check(mat1.ndim == 2 and mat2.ndim == 2, "addmm: mat1 and mat2 must be matrices")
    return _addmm(input, mat1, mat2, beta, alpha)


@torchsymbol(torch.baddbmm, methods=("baddbmm",))
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    check(batch1.ndim == 3 and batch2.ndim == 3, "baddbmm: batch1 and batch2 must be 3-D tensors")
    return _addmm(input, batch1, batch2, beta, alpha)


# ---------------------------------------------------------------------------------------------
# Convolution
# ---------------------------------------------------------------------------------------------


def _tuple(x, n):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n


def _conv(n):
    def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        stride, dilation = _tuple(stride, n), _tuple(dilation, n)
        if isinstance(padding, str):
            if padding == "valid":
                padding = (0,) * n
            else:
                check(padding == "same", lambda: f"Invalid padding string {padding!r}")
                total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
                padding = tuple(t // 2 for t in total)
                if any(t % 2 for t in total):  # as torch: the odd one more zero on the right, padded into a copy
                    extra = [(0, 0, 0)] * (input.ndim - n) + [(0, t % 2, 0) for t in total]
                    input = prims.pad(input, convert(0, input.dtype), extra)
        if input.ndim == n + 1:  # unbatched: the convolution primitive takes a batch dimension
            out = prims.convolution(shapes.unsqueeze(input, 0), weight, bias, stride, _tuple(padding, n), dilation,
                                    False, (0,) * n, groups)
            return shapes.squeeze(out, 0)
        return prims.convolution(input, weight, bias, stride, _tuple(padding, n), dilation, False, (0,) * n, groups)

    conv.__name__ = f"conv{n}d"
    return torchsymbol(getattr(F, f"conv{n}d"), getattr(torch, f"conv{n}d"), name=f"conv{n}d")(conv)


conv1d, conv2d, conv3d = _conv(1), _conv(2), _conv(3)

# ---------------------------------------------------------------------------------------------
# Softmax
# ---------------------------------------------------------------------------------------------


def _softmax_dtype(a, dtype):
    out = dtype or a.dtype
    compute = torch.float32 if out in (torch.float16, torch.bfloat16) else out
    return compute, out


def _empty_along(a, dim) -> bool:
    """Whether ``a`` has no elements along ``dim`` (a known extent of 0): eager's softmax of it is an empty tensor, where
    the maximum the decomposition subtracts has no element to take (``amax`` raises)."""
    return a.ndim > 0 and type(a.shape[dim]) is int and a.shape[dim] == 0


@torchsymbol(F.softmax, torch.softmax, methods=("softmax",))
def softmax(a, dim=None, _stacklevel=3, dtype=None):
    check(dim is not None, "softmax: implicit dim is deprecated and not supported; pass dim explicitly", NotImplementedError)
    compute, out = _softmax_dtype(a, dtype)
    x = convert(a, compute)
    if _empty_along(x, dim):
        return convert(ew.mul(x, 1), out)
    e = ew.exp(ew.sub(x, red.amax(x, dim, True)))
    return convert(ew.div(e, red.sum(e, dim, True)), out)


@torchsymbol(F.log_softmax, torch.log_softmax, methods=("log_softmax",))
def log_softmax(a, dim=None, _stacklevel=3, dtype=None):
    check(dim is not None, "log_softmax: implicit dim is deprecated and not supported; pass dim explicitly", NotImplementedError)
    compute, out = _softmax_dtype(a, dtype)
    x = convert(a, compute)
    if _empty_along(x, dim):
        return convert(ew.mul(x, 1), out)
    shifted = ew.sub(x, red.amax(x, dim, True))
    return convert(ew.sub(shifted, ew.log(red.sum(ew.exp(shifted), dim, True))), out)


# ---------------------------------------------------------------------------------------------
# Normalization
# ---------------------------------------------------------------------------------------------


def _norm_dims(a, normalized_shape):
    n = len(tuple(normalized_shape))
    return tuple(range(a.ndim - n, a.ndim))


@torchsymbol(torch.ops.aten.native_layer_norm.default, name="native_layer_norm")
def native_layer_norm(a, normalized_shape, weight, bias, eps):
    """(output, mean, rstd), as torch's kernel returns them; the statistics keep reduced dims as size 1."""
    dims = _norm_dims(a, normalized_shape)
    compute = torch.float32 if a.dtype in (torch.float16, torch.bfloat16) else a.dtype
    x = convert(a, compute)
    var, mean = prims.var_mean(x, dims, correction=0)
    stat_shape = tuple(1 if i in dims else s for i, s in enumerate(a.shape))
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    mean = prims.broadcast_in_dim(mean, stat_shape, kept)
    rstd = prims.rsqrt(prims.add(prims.broadcast_in_dim(var, stat_shape, kept), eps))
    out = ew.mul(ew.sub(x, mean), rstd)
    if weight is not None:
        out = ew.mul(out, weight)
    if bias is not None:
        out = ew.add(out, bias)
    # torch's CUDA kernel (and meta) returns the statistics in float32, its CPU kernel as cpu_statistics_dtype says
    stat_dtype = cpu_statistics_dtype(a, weight, bias) if a.device.type == "cpu" else compute
    with torch.no_grad():  # eager's statistics are outside the autograd graph (requires_grad False)
        mean, rstd = (prims.reshape(convert(t, stat_dtype), stat_shape) for t in (mean, rstd))
    return convert(out, a.dtype), mean, rstd


@torchsymbol(F.layer_norm, torch.layer_norm)
def layer_norm(a, normalized_shape, weight=None, bias=None, eps=1e-5):
    return native_layer_norm(a, tuple(normalized_shape), weight, bias, eps)[0]


@torchsymbol(F.rms_norm, torch.rms_norm)
def rms_norm(a, normalized_shape, weight=None, eps=None):
    dims = _norm_dims(a, normalized_shape)
    compute = torch.float32 if a.dtype in (torch.float16, torch.bfloat16) else a.dtype
    eps = torch.finfo(compute).eps if eps is None else eps
    x = convert(a, compute)
    out = ew.mul(x, ew.rsqrt(ew.add(red.mean(ew.pow(x, 2), dims, True), eps)))  # eager's composite, op for op
    if weight is not None:
        out = ew.mul(out, weight)  # before the cast back, as eager
    return contiguous_as_suggested(convert(out, a.dtype), a)  # as eager's composite ends


def _contiguous_as_suggested_impl(value, like):
    from torch._prims_common import suggest_memory_format

    return value.contiguous(memory_format=suggest_memory_format(like))


@torchsymbol(name="contiguous_as_suggested", torch_impl=_contiguous_as_suggested_impl)
def contiguous_as_suggested(value, like):
    """``value`` made contiguous in the memory format torch suggests for ``like`` (channels-last for a channels-last
    image, the standard one for a transposed matrix), decided when the program runs: the layout eager's composite
    ``rms_norm`` gives its result. Its values are ``value``'s."""
    return prims.shallow_copy(value)


def _batch_norm_stats_shape(a):
    return (1, a.shape[1]) + (1,) * (a.ndim - 2)


@torchsymbol(name="native_batch_norm", torch_impl=None)
def native_batch_norm(a, weight, bias, running_mean, running_var, training: bool, momentum: float, eps: float):
    """(output, saved mean, saved inverse std, new running mean, new running var): batch norm without mutation."""
    reduce_dims = (0,) + tuple(range(2, a.ndim))
    compute = torch.float32 if a.dtype in (torch.float16, torch.bfloat16) else a.dtype
    x = convert(a, compute)
    bshape = _batch_norm_stats_shape(a)
    if training:
        var, mean = prims.var_mean(x, reduce_dims, correction=0)
        invstd = prims.rsqrt(prims.add(var, eps))
        new_rm = new_rv = None
        if running_mean is not None:
            with torch.no_grad():  # as eager's kernel, which updates the running statistics outside autograd
                n = a.numel() / a.shape[1]
                # in the statistics' precision, rounded once to the running statistics' dtype
                new_rm = ew.add(ew.mul(convert(running_mean, compute), 1 - momentum), ew.mul(mean, momentum))
                # a count known only when the program runs is not 1 (see batch_norm); 0 runs eager's empty path
                unbiased = ew.mul(var, n / (n - 1) if is_runtime(n) else n / max(n - 1, 1))
                new_rv = ew.add(ew.mul(convert(running_var, compute), 1 - momentum), ew.mul(unbiased, momentum))
                new_rm, new_rv = convert(new_rm, running_mean.dtype), convert(new_rv, running_var.dtype)
        use_mean, use_invstd = mean, invstd
    else:
        use_mean = convert(running_mean, compute)
        use_invstd = prims.rsqrt(prims.add(convert(running_var, compute), eps))
        mean, invstd = use_mean, use_invstd
        new_rm, new_rv = running_mean, running_var
    out = ew.mul(ew.sub(x, shapes.reshape(use_mean, bshape)), shapes.reshape(use_invstd, bshape))
    if weight is not None:
        out = ew.mul(out, shapes.reshape(weight, bshape))
    if bias is not None:
        out = ew.add(out, shapes.reshape(bias, bshape))
    if a.device.type == "cpu":
        mean, invstd = _cpu_saved_statistics(a, mean, invstd, training, (weight, bias, running_mean, running_var))
    return convert(out, a.dtype), mean, invstd, new_rm, new_rv


def cpu_statistics_dtype(a, *params):
    """The dtype of the statistics torch's CPU normalization kernels return: the input's, unless a parameter (or
    running statistic) is float32 where the input is of reduced precision (a "mixed type" normalization: float32)."""
    mixed = a.dtype in (torch.float16, torch.bfloat16) and any(p is not None and p.dtype is torch.float32 for p in params)
    return torch.float32 if mixed else a.dtype


def _cpu_saved_statistics(a, mean, invstd, training, params):
    """The statistics torch's CPU batch norm kernel saves: none in evaluation (an empty tensor; the CUDA kernel saves
    the running ones), in the dtype of ``cpu_statistics_dtype`` in training."""
    dtype = cpu_statistics_dtype(a, *params)
    if not training:
        empty = full((0,), 0, dtype=dtype, device=a.device)
        return empty, empty
    return convert(mean, dtype), convert(invstd, dtype)


def batch_norm(a, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5,
               _verify=True):
    """``F.batch_norm``: updates the running statistics of the caller's tensors, as eager does."""
    from thunder.torch.registry import Updates

    check(training or running_mean is not None, "batch_norm: running_mean and running_var must be defined in evaluation mode")
    if training and _verify and extent_prod((a.shape[0],) + tuple(a.shape[2:])) == 1:  # F.batch_norm's own check
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {torch.Size(a.shape)}")
    if is_zero(extent_prod(a.shape)):  # eager's path for an empty batch: no statistics, the running ones unchanged
        out = shapes.clone(a)
        if weight is not None:
            out = ew.mul(out, shapes.getitem(weight, 0))
        return ew.add(out, shapes.getitem(bias, 0)) if bias is not None else out
    out, _, _, new_rm, new_rv = native_batch_norm(a, weight, bias, running_mean, running_var, training, momentum, eps)
    if training and running_mean is not None:
        return Updates(out, ((running_mean, new_rm), (running_var, new_rv)))
    return out


from thunder.torch.registry import TORCH_TO_SYMBOL as _T2S  # noqa: E402

_T2S[F.batch_norm] = batch_norm
_T2S[torch.batch_norm] = lambda a, w, b, rm, rv, training, momentum, eps, cudnn_enabled=True: batch_norm(
    a, rm, rv, w, b, training, momentum, eps, _verify=False)


@torchsymbol(F.group_norm, torch.group_norm)
def group_norm(a, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = a.shape[0], a.shape[1]
    x = shapes.reshape(a, (n, num_groups, -1))
    compute = torch.float32 if a.dtype in (torch.float16, torch.bfloat16) else a.dtype
    x = convert(x, compute)
    var, mean = red.moments(x, 2, correction=0, keepdim=True)
    out = ew.mul(ew.sub(x, mean), ew.rsqrt(ew.add(var, eps)))
    out = shapes.reshape(out, tuple(a.shape))
    # the parameters applied in the computation dtype, rounded once to the input's, as torch's kernels (a
    # float16/bfloat16 result rounded before them was up to 4 ulps off: torch's OpInfo samples, fused)
    bshape = _batch_norm_stats_shape(a)
    if weight is not None:
        out = ew.mul(out, shapes.reshape(weight, bshape))
    if bias is not None:
        out = ew.add(out, shapes.reshape(bias, bshape))
    return convert(out, a.dtype)


@torchsymbol(F.normalize)
def normalize(a, p=2.0, dim=1, eps=1e-12, out=None):
    n = red.norm(a, p, dim, True)
    return ew.div(a, expand_to(ew.clamp_min(n, eps), tuple(a.shape)))


# ---------------------------------------------------------------------------------------------
# Embedding and dropout
# ---------------------------------------------------------------------------------------------


@torchsymbol(F.embedding)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    check(max_norm is None, "embedding with max_norm renormalizes the weight in place, which is not supported", NotImplementedError)
    check(not sparse, "sparse embedding gradients are not supported", NotImplementedError)
    return prims.embedding(input, weight)


def dropout_mask_dtype(a, for_inplace: bool = False):
    """The dtype of dropout's mask: the input's, as eager draws it on the CPU and for in-place dropout, except for a
    half-precision input's fused dropout on CUDA, where eager's kernel scales in float32 and rounds once
    (``input * (1/(1-p))``): float32 there, so that the product with the mask rounds once too."""
    low = a.dtype in (torch.float16, torch.bfloat16)
    return torch.float32 if low and a.device.type == "cuda" and not for_inplace else a.dtype


@torchsymbol(name="dropout_mask", tags=(Tag.RANDOM,), torch_impl=None)
def dropout_mask(a, p: float, for_inplace: bool = False, *, strides=None):
    """The scaled keep-mask of dropout: 1/(1-p) where an element is kept, 0 where it is dropped, in
    ``dropout_mask_dtype``.

    ``for_inplace``: the mask of in-place dropout, which eager draws differently on CUDA (see the torch
    executor's ``dropout_mask``). ``strides``: the layout eager draws the mask in (its input's, as
    ``torch.empty_like`` lays it out), where the tracer knew it; else the input's at run time (see [Note: random
    draws in eager's memory order] in thunder/core/proxies.py); the decomposition draws its numbers in that order too."""
    order = tuple(range(a.ndim)) if strides is None else tuple(sorted(range(a.ndim), key=lambda d: (-strides[d], d)))
    u = prims.uniform(tuple(a.shape[d] for d in order), 0.0, 1.0, device=a.device, dtype=a.dtype)
    if order != tuple(range(a.ndim)):
        u = prims.transpose(u, tuple(order.index(d) for d in range(a.ndim)))
    keep = prims.lt(u, 1 - p)
    return prims.mul(prims.convert_element_type(keep, dropout_mask_dtype(a, for_inplace)), 1 / (1 - p))


@torchsymbol(F.dropout, torch.dropout)
def dropout(a, p=0.5, training=True, inplace=False):
    check(0 <= p <= 1, lambda: f"dropout probability has to be between 0 and 1, but got {p}", ValueError)
    if not training or p == 0 or any(is_zero(s) for s in a.shape):
        return a
    if p == 1:
        return ew.mul(a, 0.0)
    strides = {"strides": st} if (st := eager_new_strides(a)) is not None else {}
    out = ew.mul(a, dropout_mask(a, p, inplace, **strides) if inplace else dropout_mask(a, p, **strides))
    return out if out.dtype == a.dtype else convert(out, a.dtype)


INPLACE_TO_SYMBOL[torch.dropout_] = dropout  # an in-place twin: called with inplace=True by the tracer


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


@torchsymbol(F.scaled_dot_product_attention)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                                 enable_gqa=False):
    from thunder.torch.creation import ones
    L, S, E = query.shape[-2], key.shape[-2], query.shape[-1]
    scale = 1 / math.sqrt(E) if scale is None else scale
    result_dtype = query.dtype
    if result_dtype in (torch.float16, torch.bfloat16):  # as torch's fused kernels: scores and softmax in float32
        query, key, value = (convert(x, torch.float32) for x in (query, key, value))
        if attn_mask is not None and attn_mask.dtype is not torch.bool:
            attn_mask = convert(attn_mask, torch.float32)
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key = shapes.repeat_interleave(key, rep, -3)
        value = shapes.repeat_interleave(value, rep, -3)
    scores = ew.mul(matmul(query, shapes.transpose(key, -2, -1)), scale)
    if is_causal:
        mask = shapes.tril(ones(L, S, dtype=torch.bool, device=query.device))
        scores = ew.masked_fill(scores, ew.logical_not(mask), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype is torch.bool:
            scores = ew.masked_fill(scores, ew.logical_not(attn_mask), float("-inf"))
        else:
            scores = ew.add(scores, attn_mask)
    attn = softmax(scores, -1)
    if dropout_p > 0:
        attn = dropout(attn, dropout_p, True)
    return convert(matmul(attn, value), result_dtype)


# ---------------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------------


def _reduce(loss, reduction):
    if reduction == "mean":
        return red.mean(loss)
    if reduction == "sum":
        return red.sum(loss)
    check(reduction == "none", lambda: f"{reduction} is not a valid value for reduction", ValueError)
    return loss


def _legacy_reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else ("mean" if size_average else "sum")


@torchsymbol(F.nll_loss)
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    class_dim = 1 if input.ndim >= 2 else 0
    valid = ew.ne(target, ignore_index)
    safe_target = ew.where(valid, target, 0)
    picked = shapes.squeeze(red_gather(input, class_dim, safe_target), class_dim)
    w = ew.where(valid, 1.0, 0.0) if weight is None else ew.where(valid, prims.take(weight, shapes.flatten(safe_target), 0) if safe_target.ndim <= 1 else shapes.reshape(prims.take(weight, shapes.flatten(safe_target), 0), tuple(safe_target.shape)), 0.0)
    w = convert(w, input.dtype)
    loss = ew.neg(ew.mul(picked, w))
    if reduction == "mean":
        return ew.div(red.sum(loss), red.sum(w))
    return _reduce(loss, reduction)


def red_gather(input, dim, target):
    return shapes.gather(input, dim, shapes.unsqueeze(target, dim))


def _class_weight(weight, input, class_dim):
    """``weight`` viewed to broadcast along the class dimension of ``input``."""
    shape = [1] * input.ndim
    shape[class_dim] = weight.shape[0]
    return shapes.reshape(weight, tuple(shape))


@torchsymbol(F.cross_entropy)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """torch's composite, operation for operation (so that values and gradients round as eager's)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    class_dim = 1 if input.ndim >= 2 else 0
    n = input.shape[class_dim]
    logp = log_softmax(input, class_dim)
    if target.dtype.is_floating_point:  # class probabilities
        if label_smoothing > 0:
            target = ew.add(ew.mul(target, 1 - label_smoothing), label_smoothing / n)
        prod = ew.mul(logp, target)
        if weight is not None:
            prod = ew.mul(prod, _class_weight(weight, input, class_dim))
        if reduction == "mean":
            return ew.div(ew.neg(red.sum(prod)), input.numel() // n)
        return ew.neg(red.sum(prod)) if reduction == "sum" else ew.neg(red.sum(prod, class_dim))
    nll = nll_loss(logp, target, weight, None, ignore_index, None, reduction)
    if label_smoothing == 0:
        return nll
    ignored = ew.eq(target, ignore_index)
    smooth = ew.neg(red.sum(ew.mul(logp, _class_weight(weight, input, class_dim)) if weight is not None else logp,
                            class_dim))
    smooth = ew.masked_fill(smooth, ignored, 0.0)
    if reduction == "mean":
        if weight is not None:  # normalized by the weights of the targets not ignored, as nll_loss
            picked = shapes.reshape(prims.take(weight, shapes.flatten(ew.masked_fill(target, ignored, 0)), 0),
                                    tuple(target.shape))
            smooth = ew.div(red.sum(smooth), red.sum(ew.masked_fill(picked, ignored, 0.0)))
        else:
            smooth = ew.div(red.sum(smooth), red.sum(ew.logical_not(ignored)))
    elif reduction == "sum":
        smooth = red.sum(smooth)
    return ew.add(ew.mul(nll, 1 - label_smoothing), ew.mul(smooth, label_smoothing / n))


@torchsymbol(F.mse_loss)
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if weight is not None:
        return _weighted(ew.pow(ew.sub(input, target), 2), weight, input, reduction)
    d = ew.sub(input, target)
    return _reduce(ew.mul(d, d), reduction)


@torchsymbol(F.l1_loss)
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if weight is not None:
        return _weighted(ew.abs(ew.sub(input, target)), weight, input, reduction)
    return _reduce(ew.abs(ew.sub(input, target)), reduction)


def _weighted(errors, weight, input, reduction):
    """The weighted regression losses as torch writes them: the errors times the weights, their mean being their
    sum over the weights' sum."""
    check(tuple(weight.shape) == tuple(input.shape), "Weights and input must have the same size.", ValueError)
    check(reduction in ("none", "mean", "sum"),
          lambda: f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.", ValueError)
    loss = ew.mul(errors, weight)
    if reduction == "none":
        return loss
    return red.sum(loss) if reduction == "sum" else ew.div(red.sum(loss), red.sum(weight))


@torchsymbol(F.smooth_l1_loss)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    d = ew.abs(ew.sub(input, target))
    loss = ew.where(ew.lt(d, beta), ew.div(ew.mul(ew.mul(d, d), 0.5), beta), ew.sub(d, 0.5 * beta)) if beta > 0 else d
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@torchsymbol(F.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """As torch computes it: ``(1 - target).mul_(input).sub_(log_sigmoid(input) [* log_weight])`` (then ``mul_(weight)``),
    each in-place step rounding to its tensor's dtype, so the loss has the target's dtype."""

    def in_place(op, a, b):  # ``a.op_(b)``: computed in the promoted dtype, written in a's
        check(same_shape(tuple(a.shape), prims.broadcast_shapes(tuple(a.shape), tuple(b.shape))),
              lambda: f"output with shape {list(a.shape)} doesn't match the broadcast shape "
                      f"{list(prims.broadcast_shapes(tuple(a.shape), tuple(b.shape)))}")
        return convert(op(a, b), a.dtype)

    log_sig = ew.logsigmoid(input)
    if pos_weight is not None:
        log_sig = in_place(ew.mul, log_sig, ew.add(ew.mul(ew.sub(pos_weight, 1), target), 1))
    loss = in_place(ew.sub, in_place(ew.mul, ew.rsub(target, 1), input), log_sig)
    if weight is not None:
        loss = in_place(ew.mul, loss, weight)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@torchsymbol(F.binary_cross_entropy)
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    log_p = ew.clamp_min(ew.log(input), -100.0)
    log_1mp = ew.clamp_min(ew.log(ew.rsub(input, 1)), -100.0)
    loss = ew.neg(ew.add(ew.mul(target, log_p), ew.mul(ew.rsub(target, 1), log_1mp)))
    if weight is not None:
        loss = ew.mul(loss, weight)
    return _reduce(loss, _legacy_reduction(size_average, reduce, reduction))


@torchsymbol(F.cosine_similarity, torch.cosine_similarity)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    # torch's composite: each operand divided by its norm (clamped at eps) first, then the sum of their products
    n1 = ew.clamp_min(red.norm(x1, 2, dim, keepdim=True), eps)
    n2 = ew.clamp_min(red.norm(x2, 2, dim, keepdim=True), eps)
    return red.sum(ew.mul(ew.div(x1, n1), ew.div(x2, n2)), dim)
