"""Gradient rules of the torch language's elementwise operations, written as eager autograd's formulas.

[Note: bitwise gradients of elementwise ops]
Each rule computes the gradient with the same torch-level operations, in the same order and in the
same dtype as eager autograd's formula for that operation (PyTorch's ``derivatives.yaml``), or with
torch's own backward kernel where eager calls one (``tanh_backward``, ``sigmoid_backward``, ...). The
torch executor runs each of those operations as the torch kernel, so the gradients are bitwise
eager's, in low precision too (a rule at the torch level computes in the op's dtype as eager does;
differentiating the primitives of a decomposition would compute in float32 and round once).
Holomorphic formulas conjugate the derivative for complex inputs (``grad * conj(f'(a))``), as
torch's convention for complex gradients requires. A broadcast input's gradient is summed to its
shape, then cast to its dtype, as eager's engine does.
"""
from __future__ import annotations

import cmath
import math

import torch

from thunder.core.proxies import TensorProxy
from thunder.torch import creation, elementwise as ew
from thunder.torch.fallback import fallback_symbol, inplace_fallback_symbol
from thunder.torch.grad_rules_helpers import reduce_like
from thunder.transforms.grad_rules import register_cheap_vjp as register_vjp

aten = torch.ops.aten


def _t(x) -> bool:
    return isinstance(x, TensorProxy)


def conj(x):
    """``x.conj()`` as eager's formulas read it: the conjugate of a complex tensor or number, anything else unchanged."""
    from thunder.transforms.grad_rules import _conj

    return _conj(x)


def _grad_for(g, a):
    """``g`` as the gradient of input ``a``: None for a non-tensor, summed to its shape and cast to its dtype."""
    if not _t(a) or g is None:
        return None
    if a.dtype.is_floating_point and g.dtype.is_complex:  # a real input of a complex computation
        g = fallback_symbol(torch.real)(g)
    return reduce_like(g, a)


# ---------------------------------------------------------------------------------------------
# Unary: name -> gradient(g, a, out)
# ---------------------------------------------------------------------------------------------

_LN2, _LN10 = 0.6931471805599453, 2.3025850929940456
_TWO_OVER_SQRT_PI, _HALF_SQRT_PI = 2.0 / math.sqrt(math.pi), 0.5 * math.sqrt(math.pi)


def _zeros(g, a, out):
    from thunder.torch.creation import zeros_like

    return zeros_like(g)


def _abs(g, a, out):
    return ew.mul(g, fallback_symbol(torch.sgn)(a) if a.dtype.is_complex else ew.sign(a))


_UNARY_GRADS = {
    "abs": _abs,
    "neg": lambda g, a, out: ew.neg(g),
    "exp": lambda g, a, out: ew.mul(g, conj(out)),
    "exp2": lambda g, a, out: ew.mul(ew.mul(g, conj(out)), _LN2),
    "expm1": lambda g, a, out: ew.mul(g, ew.add(conj(out), 1)),
    "log": lambda g, a, out: ew.div(g, conj(a)),
    "log1p": lambda g, a, out: ew.div(g, conj(ew.add(a, 1))),
    "log2": lambda g, a, out: ew.div(g, ew.mul(conj(a), _LN2)),
    "log10": lambda g, a, out: ew.div(g, ew.mul(conj(a), _LN10)),
    "sin": lambda g, a, out: ew.mul(g, conj(ew.cos(a))),
    "cos": lambda g, a, out: ew.mul(g, ew.neg(conj(ew.sin(a)))),
    "tan": lambda g, a, out: ew.mul(g, conj(ew.add(ew.pow(out, 2), 1))),
    "asin": lambda g, a, out: ew.mul(g, conj(ew.rsqrt(ew.add(ew.mul(ew.neg(a), a), 1)))),
    "acos": lambda g, a, out: ew.mul(g, ew.neg(conj(ew.rsqrt(ew.add(ew.mul(ew.neg(a), a), 1))))),
    "atan": lambda g, a, out: ew.div(g, conj(ew.add(ew.mul(a, a), 1))),
    "sinh": lambda g, a, out: ew.mul(g, conj(ew.cosh(a))),
    "cosh": lambda g, a, out: ew.mul(g, conj(ew.sinh(a))),
    "tanh": lambda g, a, out: tanh_backward(g, out),
    "sigmoid": lambda g, a, out: sigmoid_backward(g, out),
    "asinh": lambda g, a, out: ew.mul(g, conj(ew.rsqrt(ew.add(ew.pow(a, 2), 1)))),
    "acosh": lambda g, a, out: ew.mul(g, conj(ew.rsqrt(ew.sub(ew.pow(a, 2), 1)))),
    "atanh": lambda g, a, out: ew.div(g, conj(ew.rsub(ew.pow(a, 2), 1))),
    "sqrt": lambda g, a, out: ew.div(g, ew.mul(conj(out), 2)),
    "rsqrt": lambda g, a, out: ew.mul(ew.mul(g, -0.5), conj(ew.pow(out, 3))),
    "reciprocal": lambda g, a, out: ew.mul(ew.neg(g), conj(ew.mul(out, out))),
    "erf": lambda g, a, out: ew.mul(ew.mul(ew.exp(ew.neg(ew.pow(a, 2))), _TWO_OVER_SQRT_PI), g),
    "erfc": lambda g, a, out: ew.mul(ew.mul(ew.exp(ew.neg(ew.pow(a, 2))), -_TWO_OVER_SQRT_PI), g),
    "erfinv": lambda g, a, out: ew.mul(ew.mul(ew.exp(ew.pow(out, 2)), _HALF_SQRT_PI), g),
    "lgamma": lambda g, a, out: ew.mul(g, ew.digamma(a)),
    "digamma": lambda g, a, out: ew.mul(g, fallback_symbol(torch.polygamma)(1, a)),
    **{name: _zeros for name in ("sign", "floor", "ceil", "trunc")},
    # eager's FracBackward passes the gradient on as it is; through ``a - trunc(a)`` it would gain trunc's zero part,
    # and -0.0 + 0.0 is 0.0 (generated program nn 90640)
    "frac": lambda g, a, out: g,
}


def _unary_rule(sym, grad):
    def rule(a):
        out = sym(a)
        return out, lambda g: (_grad_for(grad(g, a, out), a),)

    register_vjp(sym)(rule)


def _aten_unary_backward(op, name):
    from thunder.torch.grad_rules import _aten_symbol, _like

    return _aten_symbol(op, name, lambda g, out: _like(g))


tanh_backward = _aten_unary_backward(aten.tanh_backward.default, "tanh_backward")
sigmoid_backward = _aten_unary_backward(aten.sigmoid_backward.default, "sigmoid_backward")

for _name, _grad in _UNARY_GRADS.items():
    _unary_rule(getattr(ew, _name if _name != "abs" else "abs_"), _grad)


@register_vjp(ew.round)
def round_rule(a, *, decimals=0):
    out = ew.round(a, decimals=decimals)
    return out, lambda g: (_grad_for(_zeros(g, a, out), a),)


# ---------------------------------------------------------------------------------------------
# Binary
# ---------------------------------------------------------------------------------------------


def _scaled(g, alpha):
    return g if alpha is None or alpha == 1 else ew.mul(g, alpha.conjugate() if isinstance(alpha, complex) else alpha)


@register_vjp(ew.add)
def add_rule(a, b, *, alpha=None):
    out = ew.add(a, b, alpha=alpha)
    return out, lambda g: (_grad_for(g, a), _grad_for(_scaled(g, alpha), b))


@register_vjp(ew.sub)
def sub_rule(a, b, *, alpha=None):
    out = ew.sub(a, b, alpha=alpha)
    return out, lambda g: (_grad_for(g, a), _grad_for(_scaled(ew.neg(g), alpha), b))


@register_vjp(ew.mul)
def mul_rule(a, b):
    out = ew.mul(a, b)
    return out, lambda g: (_grad_for(ew.mul(g, conj(b)), a) if _t(a) else None,
                           _grad_for(ew.mul(g, conj(a)), b) if _t(b) else None)


@register_vjp(ew.div)
def div_rule(a, b, *, rounding_mode=None):
    out = ew.div(a, b, rounding_mode=rounding_mode)

    def backward(g):
        if rounding_mode is not None:  # piecewise constant, as in torch
            return _grad_for(_zeros(g, a, out), a), _grad_for(_zeros(g, b, out), b) if _t(b) else None
        ga = _grad_for(ew.div(g, conj(b)), a) if _t(a) else None
        gb = _grad_for(ew.mul(ew.neg(g), conj(ew.div(ew.div(a, b), b))), b) if _t(b) else None
        return ga, gb

    return out, backward


def _pow_self_grad(g, a, b):
    if not _t(b):
        if b == 0:
            return _zeros(g, a, None)
        b = b if isinstance(b, complex) else float(b)  # torch reads the exponent as a double
        return ew.mul(g, conj(ew.mul(ew.pow(a, b - 1), b)))
    grad = ew.mul(g, conj(ew.mul(b, ew.pow(a, ew.sub(b, 1)))))
    return ew.where(ew.eq(b, 0.0), 0.0, grad)


def _exponent_nonnegative(b):
    if _t(b) and b.dtype.is_complex:
        imag, real = fallback_symbol(torch.imag)(b), fallback_symbol(torch.real)(b)
        return ew.logical_and(ew.eq(imag, 0), ew.ge(real, 0))
    return ew.ge(b, 0)


def _pow_exponent_grad(g, a, b, out):
    if not _t(a):  # a Python base
        base = complex(a) if b.dtype.is_complex and not isinstance(a, complex) else a
        log_base = cmath.log(base) if isinstance(base, complex) else (
            math.log(base) if base > 0 else -math.inf if base == 0 else math.nan)
        grad = conj(ew.mul(out, log_base))
        if a == 0:
            grad = ew.where(_exponent_nonnegative(b), 0.0, grad)
        return ew.mul(g, grad)
    zero_base = ew.logical_and(ew.eq(a, 0), _exponent_nonnegative(b))
    from thunder.torch.utils import convert, promote

    log_a = ew.log(convert(a, promote(a, b)[1]))
    return ew.mul(g, ew.where(zero_base, 0.0, conj(ew.mul(out, log_a))))


@register_vjp(ew.pow)
def pow_rule(a, b):
    out = ew.pow(a, b)

    def backward(g):
        ga = _grad_for(_pow_self_grad(g, a, b), a) if _t(a) else None
        gb = _grad_for(_pow_exponent_grad(g, a, b, out), b) if _t(b) else None
        return ga, gb

    return out, backward


@register_vjp(ew.square)
def square_rule(a):
    out = ew.square(a)
    return out, lambda g: (_grad_for(_pow_self_grad(g, a, 2), a),)  # eager's square is pow(a, 2)


@register_vjp(ew.copysign)
def copysign_rule(a, b):
    out = ew.copysign(a, b)

    def backward(g):
        from thunder.torch.creation import zeros

        # eager's copysign_tensor_self_backward, its fill in place (the ratio keeps its layout)
        ratio = inplace_fallback_symbol(torch.Tensor.masked_fill_)(ew.div(out, a), ew.eq(a, 0), 0)
        # eager: contiguous zeros for the sign, whatever its layout (a sum of gradients that starts from them is laid
        # out as they are: nn 32091)
        return _grad_for(ew.mul(g, ratio), a), (zeros(b.shape, dtype=b.dtype, device=b.device) if _t(b) else None)

    return out, backward


@register_vjp(ew.atan2)
def atan2_rule(a, b):
    out = ew.atan2(a, b)

    def backward(g):
        denominator = ew.add(ew.mul(a, a), ew.mul(b, b))
        recip = ew.where(ew.eq(denominator, 0), 0, ew.reciprocal(denominator))  # as eager: no gradient at (0, 0)
        return _grad_for(ew.mul(ew.mul(g, b), recip), a), _grad_for(ew.mul(ew.mul(g, ew.neg(a)), recip), b)

    return out, backward


@register_vjp(ew.hypot)
def hypot_rule(a, b):
    out = ew.hypot(a, b)
    return out, lambda g: (_grad_for(ew.div(ew.mul(g, a), out), a), _grad_for(ew.div(ew.mul(g, b), out), b))


def _max_min_rule(sym, zero_for_a):
    """``maximum``/``minimum`` as eager's formula: ``where(a == b, g / 2, g).masked_fill_(...)``, zeroed where the other
    input is the result (``zero_for_a(a, b)`` for ``a``, swapped for ``b``), in the output's dtype, then summed to
    each input's shape and cast to its dtype. Through the prims a mixed-dtype call (bfloat16 and a float32 scalar
    tensor) would compute the gradient in float32 and sum it there (eager sums the bfloat16 gradient, then casts).
    The fill is in place, as eager's, so the gradient keeps ``where``'s layout (an out-of-place ``masked_fill`` is
    contiguous), which decides the order of the sum to a broadcast input's shape."""
    masked_fill_ = inplace_fallback_symbol(torch.Tensor.masked_fill_)

    def rule(a, b):
        out = sym(a, b)

        def backward(g):
            shared = ew.where(ew.eq(a, b), ew.div(g, 2), g)
            return (_grad_for(masked_fill_(shared, zero_for_a(a, b), 0), a),
                    _grad_for(masked_fill_(shared, zero_for_a(b, a), 0), b))

        return out, backward

    register_vjp(sym)(rule)


_max_min_rule(ew.maximum, ew.lt)
_max_min_rule(ew.minimum, ew.gt)


def _mod_rule(sym, rounding_mode):
    """``fmod``/``remainder`` as eager's formula: ``g`` for the dividend, ``-g * a.div(b, rounding_mode=...)`` for the
    divisor, in the output's dtype, then summed to its shape and cast to its dtype."""

    def rule(a, b):
        out = sym(a, b)

        def backward(g):
            gb = _grad_for(ew.mul(ew.neg(g), ew.div(a, b, rounding_mode=rounding_mode)), b) if _t(b) else None
            return _grad_for(g, a), gb

        return out, backward

    register_vjp(sym)(rule)


_mod_rule(ew.fmod, "trunc")
_mod_rule(ew.remainder, "floor")


@register_vjp(ew.where)
def where_rule(condition, input=None, other=None):
    out = ew.where(condition, input, other)
    return out, lambda g: (None, _grad_for(ew.where(condition, g, 0), input),
                           _grad_for(ew.where(condition, 0, g), other))


@register_vjp(ew.masked_index_put)
def masked_index_put_rule(a, mask, value):
    """``a[mask] = value``'s gradient as eager's ``index_put``'s: the gradient with the selection zeroed, in a copy
    laid out as the gradient."""
    out = ew.masked_index_put(a, mask, value)

    def backward(g):
        from thunder.torch.shapes import clone

        return _grad_for(inplace_fallback_symbol(torch.Tensor.masked_fill_)(clone(g), mask, 0), a), None, None

    return out, backward


@register_vjp(ew.masked_fill)
def masked_fill_rule(a, mask, value):
    """Eager's gradient: ``grad.masked_fill(mask, 0)`` (contiguous, as eager's out-of-place ``masked_fill``), then
    summed to ``a``'s shape where ``a`` is broadcast. Through the decomposition (``where(mask, 0, g)``) it would be
    laid out as the mask: a sum over broadcast dimensions (generated program 503), or an accumulating ``index_put`` of
    a gather's backward (17359), then adds in the mask's order, another rounding. (The gradient of an in-place
    ``masked_fill_`` of a view reaches it contiguous, as eager's ``CopySlices`` hands it on: ``view_update``.) A fill
    value that requires grad gets the sum of the gradient's selected elements, as eager's ``masked_fill_backward``
    sums them (the decomposition summed all, zeros too: another rounding); one on another device goes through the
    decomposition."""
    grad_value = _t(value) and value.requires_grad
    if grad_value and value.device != a.device:
        return NotImplemented
    out = ew.masked_fill(a, mask, value)

    def backward(g):
        from thunder.torch.grad_rules import masked_fill_value_backward

        gv = _grad_for(masked_fill_value_backward(g, mask), value) if grad_value else None
        return _grad_for(ew.masked_fill(g, mask, 0), a), None, gv

    return out, backward


# nan_to_num: eager's ``grad * isfinite(self)``, a product, where the decomposition's ``where`` writes 0.0: a negative
# part of the gradient at a NaN or an infinity gives -0.0 in eager
@register_vjp(ew.nan_to_num)
def nan_to_num_rule(a, nan=0.0, posinf=None, neginf=None):
    if not a.dtype.is_floating_point:
        return NotImplemented
    out = ew.nan_to_num(a, nan, posinf, neginf)
    return out, lambda g: (_grad_for(ew.mul(g, ew.isfinite(a)), a), None, None, None)


@register_vjp(ew.lerp)
def lerp_rule(start, end, weight):
    out = ew.lerp(start, end, weight)

    def backward(g):
        if not _t(weight):
            return _grad_for(ew.mul(g, 1 - weight), start), _grad_for(ew.mul(g, weight), end), None
        gs = _grad_for(ew.mul(g, conj(ew.rsub(weight, 1))), start)
        ge = _grad_for(ew.mul(g, conj(weight)), end)
        return gs, ge, _grad_for(ew.mul(g, conj(ew.sub(end, start))), weight)

    return out, backward


@register_vjp(ew.addcmul)
def addcmul_rule(a, t1, t2, *, value=1):
    out = ew.addcmul(a, t1, t2, value=value)

    def backward(g):
        return (_grad_for(g, a), _grad_for(ew.mul(g, conj(ew.mul(t2, value))), t1),
                _grad_for(ew.mul(g, conj(ew.mul(t1, value))), t2))

    return out, backward


@register_vjp(ew.addcdiv)
def addcdiv_rule(a, t1, t2, *, value=1):
    out = ew.addcdiv(a, t1, t2, value=value)

    def backward(g):
        # ATen's ``value / t2`` of a Scalar fills a tensor with ``value`` and divides it (``operator/(Scalar,
        # Tensor)``): not Python's ``value / t2``, a reciprocal times ``value`` (one ulp apart; torch's OpInfo samples)
        g1 = ew.mul(g, conj(ew.div(creation.full_like(t2, value), t2)))
        g2 = ew.mul(ew.neg(g), conj(ew.div(ew.mul(t1, value), ew.mul(t2, t2))))
        return _grad_for(g, a), _grad_for(g1, t1), _grad_for(g2, t2)

    return out, backward
