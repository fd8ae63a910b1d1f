"""Gradient rules: one registry, one mechanism.

A rule for symbol ``S`` is a function with ``S``'s signature that computes ``S``'s output and returns
it together with a *backward closure* (as in micrograd): ``backward(*cotangents)`` returns one
gradient per positional argument (None where there is none). The rule is traced into the forward
trace; the closure, called later, is traced into the backward trace, and whatever forward values
it reads become the tensors saved for backward. A backward may instead return ``ArgGrads``, the
gradients of the positional and the keyword arguments, each mirroring the structure of the call's
arguments (for tensors passed by keyword or nested in containers). A symbol without a rule is
differentiated through its decomposition. This module holds the registry and the rules of the primitives.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from thunder.core import prims
from thunder.core.extents import is_one, is_runtime, prod, same, same_shape
from thunder.core.proxies import TensorProxy

VJP_RULES: dict[str, callable] = {}


class ArgGrads(NamedTuple):
    """Gradients of a call's positional arguments (a tuple) and keyword arguments (a dict), in their structure."""

    args: tuple
    kwargs: dict


class EdgeParts(tuple):
    """A gradient given as its parts, in the order eager's engine adds them: where it goes to a returned input (see
    [Note: the gradient of a returned input] in thunder/transforms/autodiff.py), each part is added on its own."""


def register_vjp(*symbols):
    def deco(rule):
        for sym in symbols:
            VJP_RULES[sym.id] = rule
        return rule

    return deco


def get_vjp(sym):
    """``sym``'s rule: registered for its id, or its own (``sym.vjp``: a symbol made for one call, such as a custom
    torch.autograd.Function's)."""
    return VJP_RULES.get(sym.id) or getattr(sym, "vjp", None)


_CHEAP_RULES: set[str] = set()


def register_cheap_vjp(*symbols):
    """``register_vjp`` for a rule as cheap to replay in the backward as the primitives it decomposes into: an
    elementwise formula, or data movement (``cat``) (see [Note: differentiating a decomposition] in autodiff)."""
    _CHEAP_RULES.update(sym.id for sym in symbols)
    return register_vjp(*symbols)


def is_cheap_rule(sym) -> bool:
    return sym.id in _CHEAP_RULES


def _t(x):
    return isinstance(x, TensorProxy)


def _zeros_like(a):
    return prims.full(tuple(a.shape), 0.0 if a.dtype.is_floating_point else 0, device=a.device, dtype=a.dtype)


def _reduce_to(g, shape):
    """Sums ``g`` down to ``shape`` (the inverse of broadcasting) — for rules of broadcasting ops."""
    shape = tuple(shape)
    if same_shape(tuple(g.shape), shape):
        return g
    lead = g.ndim - len(shape)
    expanded = [lead + i for i, s in enumerate(shape) if is_one(s) and not is_one(g.shape[lead + i])]
    out = _sum_broadcast(g, range(lead), expanded)
    return prims.reshape(out, shape) if not same_shape(tuple(out.shape), shape) else out


def _sum_broadcast(g, new_dims, dims):
    """``g`` summed over the dimensions a broadcast added (``new_dims``) and those it expanded from 1 (``dims``), as
    eager's ``sum_to`` sums a broadcast's gradient: the ones it added always, an expanded one of a run-time extent
    only where that is not 1 when it runs (``prims.sum_to``, which keeps their extents, of 1)."""
    runtime = tuple(d for d in dims if is_runtime(g.shape[d]))
    dims = tuple(sorted({*new_dims, *(d for d in dims if d not in runtime)}))
    if runtime:
        return prims.sum_to(g, dims, runtime)
    return prims.sum(g, dims) if dims else g


# ---------------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------------


def _complex(*xs) -> bool:
    return any(_t(x) and x.dtype.is_complex for x in xs)


def _conj(x):
    """The complex conjugate of a complex tensor (``torch.conj_physical``); anything else unchanged."""
    if isinstance(x, complex):
        return x.conjugate()
    if not _complex(x):
        return x
    from thunder.torch.fallback import fallback_symbol

    return fallback_symbol(torch.conj_physical)(x)


# [Note: complex gradients of primitives]
# torch's gradient of a holomorphic f at a complex input is ``g * conj(f'(a))``. The formulas below are
# written as ``g * f'(a)``, linear in ``g``; for complex inputs a rule returns ``conj(formula(conj(g)))``,
# which is exactly that. Non-holomorphic primitives (``abs``) have their own complex formula.
def _holomorphic(backward, *inputs):
    if not _complex(*inputs):
        return backward

    def conjugated(g):
        grads = backward(_conj(g))
        return tuple(_conj(x) for x in grads) if isinstance(grads, tuple) else _conj(grads)

    return conjugated


def _unary(sym, grad_fn):
    @register_vjp(sym)
    def rule(a):
        out = sym(a)
        return out, _holomorphic(lambda g: (grad_fn(g, a, out),), a)

    return rule


_unary(prims.neg, lambda g, a, out: prims.neg(g))
@register_vjp(prims.abs)
def abs_rule(a):
    out = prims.abs(a)
    if not _complex(a):
        return out, lambda g: (prims.mul(g, prims.sign(a)),)
    # the complex sign a / |a| (0 at 0), times the real gradient
    sgn = prims.where(prims.eq(out, 0.0), 0.0, prims.div(a, prims.convert_element_type(out, a.dtype)))
    return out, lambda g: (prims.mul(prims.convert_element_type(g, a.dtype), sgn),)


_unary(prims.exp, lambda g, a, out: prims.mul(g, out))
_unary(prims.exp2, lambda g, a, out: prims.mul(g, prims.mul(out, math.log(2.0))))
_unary(prims.expm1, lambda g, a, out: prims.mul(g, prims.add(out, 1.0)))
_unary(prims.log, lambda g, a, out: prims.div(g, a))
_unary(prims.log1p, lambda g, a, out: prims.div(g, prims.add(a, 1.0)))
_unary(prims.log2, lambda g, a, out: prims.div(g, prims.mul(a, math.log(2.0))))
_unary(prims.log10, lambda g, a, out: prims.div(g, prims.mul(a, math.log(10.0))))
_unary(prims.sin, lambda g, a, out: prims.mul(g, prims.cos(a)))
_unary(prims.cos, lambda g, a, out: prims.neg(prims.mul(g, prims.sin(a))))
_unary(prims.tan, lambda g, a, out: prims.mul(g, prims.add(prims.mul(out, out), 1.0)))
_unary(prims.asin, lambda g, a, out: prims.mul(g, prims.rsqrt(prims.sub(1.0, prims.mul(a, a)))))
_unary(prims.acos, lambda g, a, out: prims.neg(prims.mul(g, prims.rsqrt(prims.sub(1.0, prims.mul(a, a))))))
_unary(prims.atan, lambda g, a, out: prims.div(g, prims.add(prims.mul(a, a), 1.0)))
_unary(prims.sinh, lambda g, a, out: prims.mul(g, prims.cosh(a)))
_unary(prims.cosh, lambda g, a, out: prims.mul(g, prims.sinh(a)))
_unary(prims.tanh, lambda g, a, out: prims.mul(g, prims.sub(1.0, prims.mul(out, out))))
_unary(prims.asinh, lambda g, a, out: prims.mul(g, prims.rsqrt(prims.add(prims.mul(a, a), 1.0))))
_unary(prims.acosh, lambda g, a, out: prims.mul(g, prims.rsqrt(prims.sub(prims.mul(a, a), 1.0))))
_unary(prims.atanh, lambda g, a, out: prims.div(g, prims.sub(1.0, prims.mul(a, a))))
_unary(prims.sqrt, lambda g, a, out: prims.div(g, prims.mul(out, 2.0)))
_unary(prims.rsqrt, lambda g, a, out: prims.mul(g, prims.mul(prims.mul(out, prims.mul(out, out)), -0.5)))
_unary(prims.reciprocal, lambda g, a, out: prims.neg(prims.mul(g, prims.mul(out, out))))
_unary(prims.sigmoid, lambda g, a, out: prims.mul(g, prims.mul(out, prims.sub(1.0, out))))
_unary(prims.erf, lambda g, a, out: prims.mul(g, prims.mul(prims.exp(prims.neg(prims.mul(a, a))), 2 / math.sqrt(math.pi))))
_unary(prims.erfc, lambda g, a, out: prims.mul(g, prims.mul(prims.exp(prims.neg(prims.mul(a, a))), -2 / math.sqrt(math.pi))))
_unary(prims.erfinv, lambda g, a, out: prims.mul(g, prims.mul(prims.exp(prims.mul(out, out)), math.sqrt(math.pi) / 2)))
_unary(prims.lgamma, lambda g, a, out: prims.mul(g, prims.digamma(a)))


def _polygamma1(a):
    from thunder.torch.fallback import fallback_symbol

    return fallback_symbol(torch.polygamma)(1, a)


_unary(prims.digamma, lambda g, a, out: prims.mul(g, _polygamma1(a)))
for _zero_grad in (prims.floor, prims.ceil, prims.round, prims.trunc, prims.sign):
    _unary(_zero_grad, lambda g, a, out: _zeros_like(a))
_unary(prims.shallow_copy, lambda g, a, out: g)


def _binary(sym, grad_fn):
    @register_vjp(sym)
    def rule(a, b):
        out = sym(a, b)
        return out, _holomorphic(lambda g: grad_fn(g, a, b, out), a, b)

    return rule


_binary(prims.add, lambda g, a, b, out: (g, g))
_binary(prims.sub, lambda g, a, b, out: (g, prims.neg(g)))
_binary(prims.mul, lambda g, a, b, out: (prims.mul(g, b), prims.mul(g, a)))
_binary(prims.div, lambda g, a, b, out: (prims.div(g, b), prims.neg(prims.div(prims.mul(g, a), prims.mul(b, b)))
                                         if _t(b) else None))


def _pow_grads(g, a, b, out):
    ga = prims.mul(g, prims.mul(b, prims.pow(a, prims.sub(b, 1.0) if _t(b) else b - 1))) if _t(a) else None
    if _t(a) and not _t(b) and b == 0:
        ga = prims.mul(g, 0.0)
    gb = None
    if _t(b):
        log_a = prims.log(a) if _t(a) else (math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan))
        gb = prims.mul(g, prims.mul(out, log_a))
        # as torch: where the base is 0 and the exponent >= 0, the exponent's gradient is 0
        zero_base = prims.eq(a, 0.0) if _t(a) else a == 0
        if _t(a):
            gb = prims.where(prims.logical_and(zero_base, prims.ge(b, 0.0)), 0.0, gb)
        elif zero_base:
            gb = prims.where(prims.ge(b, 0.0), 0.0, gb)
    return ga, gb


_binary(prims.pow, _pow_grads)
_binary(prims.atan2, lambda g, a, b, out: (
    prims.div(prims.mul(g, b), prims.add(prims.mul(a, a), prims.mul(b, b))),
    prims.div(prims.neg(prims.mul(g, a)), prims.add(prims.mul(a, a), prims.mul(b, b)))))
_binary(prims.fmod, lambda g, a, b, out: (g, prims.neg(prims.mul(g, prims.trunc(prims.div(a, b)))) if _t(b) else None))
# torch's floor division, not floor(a / b): 2 // -inf is -1 (a / b is -0.0), as eager's gradient has it
_binary(prims.remainder, lambda g, a, b, out: (g, prims.neg(prims.mul(g, prims.floor_divide(a, b))) if _t(b) else None))
_binary(prims.hypot, lambda g, a, b, out: (prims.mul(g, prims.div(a, out)), prims.mul(g, prims.div(b, out))))
_binary(prims.copysign, lambda g, a, b, out: (prims.mul(g, prims.where(prims.eq(a, 0.0), 0.0, prims.div(out, a))), None))
# as torch: the direction gets zeros (contiguous, whatever its layout), not no gradient
_binary(prims.nextafter, lambda g, a, b, out: (prims.where(prims.ne(a, b), g, 0.0), _zeros_like(b) if _t(b) else None))
_binary(prims.floor_divide, lambda g, a, b, out: (prims.mul(g, 0.0), prims.mul(g, 0.0) if _t(b) else None))


def _max_min_grads(loses):
    def grads(g, a, b, out):
        # as torch: ties split the gradient evenly; the input that loses gets none (NaN loses nothing)
        half = prims.where(prims.eq(a, b), prims.mul(g, 0.5), g)
        ga = prims.where(loses(a, b), 0.0, half)
        gb = prims.where(loses(b, a), 0.0, half) if _t(b) else None
        return ga, gb

    return grads


_binary(prims.maximum, _max_min_grads(prims.lt))
_binary(prims.minimum, _max_min_grads(prims.gt))


@register_vjp(prims.where)
def where_rule(pred, a, b):
    out = prims.where(pred, a, b)
    return out, lambda g: (None, prims.where(pred, g, 0.0) if _t(a) else None,
                           prims.where(pred, 0.0, g) if _t(b) else None)


@register_vjp(prims.convert_element_type)
def convert_rule(a, dtype):
    out = prims.convert_element_type(a, dtype)

    def backward(g):
        if g.dtype.is_complex and not a.dtype.is_complex:  # real -> complex: the real part flows back
            g = prims.real(g)
        return (prims.convert_element_type(g, a.dtype) if g.dtype is not a.dtype else g, None)

    return out, backward


@register_vjp(prims.device_put)
def device_put_rule(a, device):
    out = prims.device_put(a, device)
    return out, lambda g: (prims.device_put(g, a.device), None)


@register_vjp(prims.in_layout)
def in_layout_rule(a, strides, offset, may_copy):
    return prims.in_layout(a, strides, offset, may_copy), lambda g: (g, None, None, None)


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------


@register_vjp(prims.broadcast_in_dim)
def broadcast_in_dim_rule(a, shape, broadcast_dimensions):
    out = prims.broadcast_in_dim(a, shape, broadcast_dimensions)

    def backward(g):
        bdims = set(broadcast_dimensions)
        # a new dimension of size 1 (unsqueeze) is not summed but reshaped away: a view, as eager's squeeze, whose
        # layout the gradient keeps (a sum would write it contiguous, and later reductions sum by layout)
        added = [d for d in range(len(shape)) if d not in bdims and not is_one(shape[d])]
        expanded = [d for i, d in enumerate(broadcast_dimensions) if is_one(a.shape[i]) and not is_one(shape[d])]
        r = _sum_broadcast(g, added, expanded)
        return (prims.reshape(r, tuple(a.shape)) if not same_shape(tuple(r.shape), tuple(a.shape)) else r, None, None)

    return out, backward


@register_vjp(prims.reshape)
def reshape_rule(a, shape):
    return prims.reshape(a, shape), lambda g: (prims.reshape(g, tuple(a.shape)), None)


@register_vjp(prims.transpose)
def transpose_rule(a, permutation):
    inverse = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inverse[p] = i
    return prims.transpose(a, permutation), lambda g: (prims.transpose(g, tuple(inverse)), None)


@register_vjp(prims.squeeze)
def squeeze_rule(a, dims):
    return prims.squeeze(a, dims), lambda g: (prims.reshape(g, tuple(a.shape)), None)


@register_vjp(prims.slice_prim)
def slice_rule(a, start_indices, end_indices, strides=None):
    out = prims.slice_prim(a, start_indices, end_indices, strides)

    def backward(g):
        from thunder.torch.grad_rules import slice_backward

        steps = strides or [1] * a.ndim
        sizes = list(out.shape)
        # Undo the per-dimension slices from the last dimension to the first. A slice of everything (``narrow``'s
        # of a whole dimension, which eager slices all the same) gets slice_backward's copy too: laid out contiguous.
        whole = [same(start_indices[d], 0) and same(end_indices[d], a.shape[d]) and steps[d] == 1 for d in range(a.ndim)]
        for d in reversed(range(a.ndim)):
            if whole[d] and not (d == 0 and all(whole)):
                continue
            sizes[d] = a.shape[d]
            g = slice_backward(g, list(sizes), d, start_indices[d], end_indices[d], steps[d])
        return (g, None, None, None)

    return out, backward


def cat_slices(g, tensors, dim: int) -> list:
    """The slices of ``g``, a concatenation's gradient along ``dim``, one per tensor concatenated, in their order."""
    slices, start = [], 0
    for t in tensors:
        stop = start + t.shape[dim]
        starts, ends = [0] * g.ndim, list(g.shape)
        starts[dim], ends[dim] = start, stop
        slices.append(prims.slice_prim(g, starts, ends, [1] * g.ndim))
        start = stop
    return slices


@register_vjp(prims.cat)
def cat_rule(tensors, dim):
    out = prims.cat(tensors, dim)

    def backward(g):
        return (cat_slices(g, tensors, dim), None)

    return out, backward


@register_vjp(prims.pad)
def pad_rule(a, padding_value, padding_config):
    out = prims.pad(a, padding_value, padding_config)

    def backward(g):
        assert all(d == 0 for _, _, d in padding_config), "interior padding has no gradient rule"
        # padding by the negated amounts crops what was added and restores (as zeros) what was cropped
        return (prims.pad(g, 0.0, [(-lo, -hi, 0) for lo, hi, _ in padding_config]), None, None)

    return out, backward


@register_vjp(prims.flip)
def flip_rule(a, dims):
    return prims.flip(a, dims), lambda g: (prims.flip(g, dims), None)


@register_vjp(prims.take)
def take_rule(a, index, dim):
    out = prims.take(a, index, dim)

    def backward(g):  # negative indices count from the end, as in x[torch.tensor([-1, 0])]; index_add takes none
        positions = prims.where(prims.lt(index, 0), prims.add(index, a.shape[dim]), index)
        return prims.index_add(_zeros_like(a), positions, g, dim), None, None

    return out, backward


@register_vjp(prims.gather)
def gather_rule(a, index, dim):
    out = prims.gather(a, index, dim)
    return out, lambda g: (prims.scatter_add(_zeros_like(a), index, g, dim), None, None)


@register_vjp(prims.scatter_add)
def scatter_add_rule(a, index, value, dim):
    out = prims.scatter_add(a, index, value, dim)
    return out, lambda g: (g, None, prims.gather(g, index, dim), None)


@register_vjp(prims.index_add)
def index_add_rule(a, index, value, dim, alpha=1):
    out = prims.index_add(a, index, value, dim, alpha)

    def backward(g):
        g_value = prims.take(g, index, dim)
        return g, None, g_value if alpha == 1 else prims.mul(g_value, alpha), None, None

    return out, backward


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------


def _unreduce(g, a, dims):
    kept = tuple(i for i in range(a.ndim) if i not in set(dims))
    return prims.broadcast_in_dim(g, tuple(a.shape), kept)


@register_vjp(prims.sum)
def sum_rule(a, dims):
    return prims.sum(a, dims), lambda g: (_unreduce(g, a, dims), None)


@register_vjp(prims.prod)
def prod_rule(a, dims):
    out = prims.prod(a, dims)

    def backward(g):
        # g * out / a, except at zeros: where a slice has one zero, its gradient is the product of the others
        g, full_out = _unreduce(g, a, dims), _unreduce(out, a, dims)
        zero = prims.eq(a, 0)
        others = _unreduce(prims.prod(prims.where(zero, 1.0, a), dims), a, dims)
        one_zero = prims.eq(_unreduce(prims.sum(prims.convert_element_type(zero, torch.int64), dims), a, dims), 1)
        at_zero = prims.where(one_zero, prims.mul(g, others), 0.0)
        return (prims.where(zero, at_zero, prims.mul(g, prims.div(full_out, a))), None)

    return out, _holomorphic(backward, a)


def _amax_amin(sym):
    @register_vjp(sym)
    def rule(a, dims):
        out = sym(a, dims)

        def backward(g):
            mask = prims.convert_element_type(prims.eq(a, _unreduce(out, a, dims)), a.dtype)
            count = _unreduce(prims.sum(mask, dims), a, dims)
            return (prims.div(prims.mul(_unreduce(g, a, dims), mask), count), None)

        return out, backward


_amax_amin(prims.amax)
_amax_amin(prims.amin)


def _var_grad(g, a, dims, correction, mean):
    n = math.prod(a.shape[d] for d in dims)
    centered = prims.sub(a, _unreduce(mean, a, dims))
    scale = 2.0 / (n - correction) if n != correction else math.inf  # as torch: inf (then nan) without samples
    return prims.mul(prims.mul(_unreduce(g, a, dims), centered), scale)


@register_vjp(prims.var)
def var_rule(a, dims, *, correction):
    out = prims.var(a, dims, correction=correction)

    def backward(g):
        n = math.prod(a.shape[d] for d in dims)
        mean = prims.div(prims.sum(a, dims), float(n))
        return (_var_grad(g, a, dims, correction, mean), None)

    return out, backward


@register_vjp(prims.var_mean)
def var_mean_rule(a, dims, *, correction):
    var, mean = prims.var_mean(a, dims, correction=correction)

    def backward(g_var, g_mean):
        n = math.prod(a.shape[d] for d in dims)
        grad = None
        if g_var is not None:
            grad = _var_grad(g_var, a, dims, correction, mean)
        if g_mean is not None:
            gm = prims.div(_unreduce(g_mean, a, dims), float(n))
            grad = gm if grad is None else prims.add(grad, gm)
        return (grad, None)

    return (var, mean), backward


@register_vjp(prims.cumsum)
def cumsum_rule(a, dim):
    out = prims.cumsum(a, dim)
    return out, lambda g: (reversed_cumsum(g, dim, a), None)


def reversed_cumsum(g, dim: int, a):
    """The gradient of ``cumsum(a, dim)`` for the cotangent ``g``: its sums in reverse, as eager's
    ``cumsum_backward``, which hands ``g`` on as it is where ``dim`` holds one element (a sum starting from 0.0
    would turn a -0.0 into 0.0)."""
    if is_one(a.shape[dim]) or (all(type(s) is int for s in a.shape) and math.prod(a.shape) <= 1):
        return g
    return prims.flip(prims.cumsum(prims.flip(g, (dim,)), dim), (dim,))


# ---------------------------------------------------------------------------------------------
# Linear algebra and neural-network primitives
# ---------------------------------------------------------------------------------------------


@register_vjp(prims.matmul)
def matmul_rule(a, b):
    from thunder.torch import matmul_grads  # eager's paths and gradients of matrix products

    return matmul_grads.rule(prims.matmul, a, b)


@register_vjp(prims.linear)
def linear_rule(a, w, bias):
    return prims.linear(a, w, bias), linear_backward(a, w, bias)


def linear_backward(a, w, bias):
    def backward(g):
        from thunder.torch import matmul, reshape, transpose, unsqueeze, mul

        if w.ndim == 1:  # out = a @ w (the last dimension is contracted away)
            ga = mul(unsqueeze(g, -1), w)
            gw = matmul(reshape(g, (-1,)), reshape(a, (prod(a.shape[:-1]), a.shape[-1])))
            gb = _reduce_to(g, tuple(bias.shape)) if bias is not None else None
            return ga, gw, gb
        ga = matmul(g, w)
        g2 = reshape(g, (prod(g.shape[:-1]), w.shape[0]))  # not -1: ambiguous for empty tensors
        a2 = reshape(a, (prod(a.shape[:-1]), a.shape[-1]))
        gw = matmul(transpose(g2, 0, 1), a2)
        gb = _reduce_to(prims.sum(g2, (0,)), tuple(bias.shape)) if bias is not None else None
        return ga, gw, gb

    if w.ndim == 2 and w.requires_grad and w.dtype.is_floating_point and (bias is None or bias.ndim <= 1):
        def backward_by_layout(g):  # eager's kernels on eager's layouts (the input is saved for gw anyway)
            from thunder.torch.grad_rules import linear_backward as products, linear_bias_backward

            ga, gw = products(g, a, w if a.requires_grad else None, [a.requires_grad, True])
            gb = linear_bias_backward(g, a, list(bias.shape)) if bias is not None and bias.requires_grad else None
            return ga, gw, gb

        return backward_by_layout
    if w.ndim == 2 and a.ndim >= 2 and a.dtype.is_floating_point and (bias is None or bias.ndim <= 1):
        # A frozen weight: eager's kernels on the input's layout (a column-major input, a batch whose rows are no
        # view of it, a bias after a separate product), where the input is not saved (the gradients need only the
        # weight): a memoryless tensor laid out as it is.
        from thunder.torch.grad_rules import layout_of

        a_layout = layout_of(a)

        def backward_by_input_layout(g):
            from thunder.torch.grad_rules import linear_backward as products, linear_bias_backward

            ga = products(g, a_layout, w, [True, False], bias is not None)[0] if a.requires_grad else None
            gb = linear_bias_backward(g, a_layout, list(bias.shape)) if bias is not None and bias.requires_grad else None
            return ga, None, gb

        return backward_by_input_layout
    return _holomorphic(backward, a, w, bias)


@register_vjp(prims.convolution)
def convolution_rule(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    out = prims.convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups)

    def backward(g):
        from thunder.torch.grad_rules import convolution_backward

        bias_sizes = None if bias is None else list(bias.shape)
        ga, gw, gb = convolution_backward(g, a, weight, bias_sizes, list(stride), list(padding), list(dilation),
                                          transposed, list(output_padding), groups, [True, True, bias is not None])
        return ga, gw, gb

    return out, backward


@register_vjp(prims.embedding)
def embedding_rule(indices, weight):
    out = prims.embedding(indices, weight)

    def backward(g):
        from thunder.torch.grad_rules import embedding_dense_backward

        return None, embedding_dense_backward(g, indices, weight.shape[0], -1, False)

    return out, backward
