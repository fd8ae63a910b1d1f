"""Reductions of the torch language."""
from __future__ import annotations

import builtins
import math

import torch

from thunder.core import prims
from thunder.core.extents import is_runtime, is_zero, prod as extent_prod
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Tag
from thunder.torch.registry import torchsymbol
from thunder.torch.utils import Kind, canonicalize_dims, check, convert, promote
from thunder.torch import shapes


def _dims(a, dim):
    """The dims a reduction reduces: all for ``None`` or ``()``; none for a 0-dim tensor (dim 0 or -1 is allowed)."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(a.ndim))
    dims = canonicalize_dims(a.ndim, dim)
    return dims if a.ndim else ()


def _keepdim(out, a, dims, keepdim):
    if not keepdim or a.ndim == 0:
        return out
    shape = [1 if i in dims else s for i, s in enumerate(a.shape)]
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    return prims.broadcast_in_dim(out, tuple(shape), kept)


def _sum_dtype(a, dtype):
    if dtype is not None:
        return dtype
    if a.dtype is torch.bool or (not a.dtype.is_floating_point and not a.dtype.is_complex):
        return torch.int64
    return a.dtype


def _accumulating(prim, a, dims, dtype):
    """Reduces in float32 for low-precision inputs, as torch's kernels accumulate."""
    out_dtype = dtype
    compute = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    return convert(prim(convert(a, compute), dims), out_dtype)


@torchsymbol(torch.sum, methods=("sum",))
def sum(a, dim=None, keepdim=False, *, dtype=None):
    dims = _dims(a, dim)
    out = _accumulating(prims.sum, a, dims, _sum_dtype(a, dtype))
    return _keepdim(out, a, dims, keepdim)


@torchsymbol(torch.prod, methods=("prod",))
def prod(a, dim=None, keepdim=False, *, dtype=None):
    dims = _dims(a, dim)
    out = _accumulating(prims.prod, a, dims, _sum_dtype(a, dtype))
    return _keepdim(out, a, dims, keepdim)


@torchsymbol(torch.mean, methods=("mean",))
def mean(a, dim=None, keepdim=False, *, dtype=None):
    dtype = dtype or a.dtype
    check(dtype.is_floating_point or dtype.is_complex, lambda: f"mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: {a.dtype}")
    dims = _dims(a, dim)
    n = extent_prod(a.shape[d] for d in dims)
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    out = prims.div(prims.sum(convert(a, compute), dims), n if is_runtime(n) else float(n))
    return _keepdim(convert(out, dtype), a, dims, keepdim)


@torchsymbol(torch.amax, methods=("amax",))
def amax(a, dim=(), keepdim=False):
    dims = _dims(a, dim)
    return _keepdim(prims.amax(a, dims), a, dims, keepdim)


@torchsymbol(torch.amin, methods=("amin",))
def amin(a, dim=(), keepdim=False):
    dims = _dims(a, dim)
    return _keepdim(prims.amin(a, dims), a, dims, keepdim)


def _max_min(a, dim_or_other, keepdim, reduce, arg, binary):
    if dim_or_other is None:
        return reduce(a)
    if isinstance(dim_or_other, TensorProxy):
        return binary(a, dim_or_other)
    values = reduce(a, dim_or_other, keepdim)
    indices = arg(convert(a, torch.uint8) if a.dtype is torch.bool else a, dim_or_other, keepdim)  # argmax rejects bool
    return torch.return_types.max((values, indices)) if reduce is amax else torch.return_types.min((values, indices))


@torchsymbol(torch.max, methods=("max",))
def max(a, dim=None, keepdim=False):
    from thunder.torch.elementwise import maximum
    return _max_min(a, dim, keepdim, amax, argmax, maximum)


@torchsymbol(torch.min, methods=("min",))
def min(a, dim=None, keepdim=False):
    from thunder.torch.elementwise import minimum
    return _max_min(a, dim, keepdim, amin, argmin, minimum)


def _arg_reduction(prim, a, dim, keepdim):
    check(a.dtype is not torch.bool, lambda: f"{prim.name}(): does not support bool input")
    if dim is None:
        out = prim(shapes.flatten(a), 0)
        return shapes.reshape(out, (1,) * a.ndim) if keepdim else out  # keepdim keeps every dim as size 1
    dims = _dims(a, dim)
    if not dims:  # a 0-dim tensor
        return prim(shapes.flatten(a), 0)
    return _keepdim(prim(a, dims[0]), a, dims, keepdim)


@torchsymbol(torch.argmax, methods=("argmax",))
def argmax(a, dim=None, keepdim=False):
    return _arg_reduction(prims.argmax, a, dim, keepdim)


@torchsymbol(torch.argmin, methods=("argmin",))
def argmin(a, dim=None, keepdim=False):
    return _arg_reduction(prims.argmin, a, dim, keepdim)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def _in_double(a) -> bool:
    """Whether torch's CPU kernels of ``var``, ``std``, ``var_mean`` and ``std_mean`` compute ``a``'s moments (and their
    square root) in float64: float32 on the CPU (``at::acc_type``). Their decompositions, which fusion executors run, do
    the same: a float32 variance underflows where the values' squares do (below about 1e-19: fused, ``torch.std`` of
    values near 1e-25 was 0, eager's about 1e-25), and float64 moments are eager's bit for bit."""
    return a.dtype is torch.float32 and a.device.type == "cpu"


def _to_one_element(a, dims) -> bool:
    """Whether torch's CPU kernel of ``var`` or ``std`` of a float32 or float64 ``a`` over ``dims`` takes its two-pass
    path (``std_var_all_cpu``): where one element results. It computes the mean in ``a``'s dtype
    (``a.mean()``: a sum, then a division), then sums the squared deviations from it in float64, so the variance
    of a float32 constant is the square of its mean's rounding error: ``torch.var`` of thirty copies of ``-0.1``
    is 5.55e-17, not 0 (fused, 1 // var was inf where eager's was 1.8e16: generated program 32936)."""
    if a.device.type != "cpu" or a.dtype not in (torch.float32, torch.float64):
        return False
    if not builtins.all(type(s) is int for s in a.shape) or math.prod(a.shape) == 0:
        return False
    return builtins.all(a.shape[i] == 1 for i in range(a.ndim) if i not in dims)


def _two_pass(a, dims, correction, take_sqrt: bool):
    """``var`` (``take_sqrt``: ``std``) of ``a`` over ``dims`` as ``std_var_all_cpu`` computes it (see
    ``_to_one_element``), in ``a``'s dtype."""
    n = math.prod(a.shape)
    wide = prims.convert_element_type(a, torch.float64)
    dx = prims.sub(wide, prims.broadcast_in_dim(prims.convert_element_type(_kernels_mean(a), torch.float64),
                                                tuple(a.shape), ()))
    out = prims.div(prims.sum(prims.mul(dx, dx), dims), builtins.max(0.0, n - correction))
    return convert(prims.sqrt(out) if take_sqrt else out, a.dtype)


@torchsymbol(name="mean_of_torchs_kernel", torch_impl=torch.mean, tags=(Tag.KERNEL_ROUNDING,))
def _kernels_mean(a):
    """The mean of all of ``a``'s elements, which fusion executors leave to torch's kernel (a region holding it is
    not formed): the order of its sum's additions decides the mean's last bit, and that decides the variance of
    equal values (see ``_to_one_element``; inductor's sum of thirty copies of -0.1 is -3.0, torch's -2.9999998)."""
    return mean(a)


def unbiased_overload(dim, unbiased):
    """``(dim, unbiased)``: torch's ``var(input, unbiased: bool)`` overload takes a bool second argument as
    ``unbiased``, not as a dim (``torch.var(x, True)``, ``x.std(False)``: over all elements; read as dim 1 they
    gave a fused result of another shape)."""
    if isinstance(dim, bool) and unbiased is None:
        return None, dim
    return dim, unbiased


@torchsymbol(torch.var, methods=("var",))
def var(a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = unbiased_overload(dim, unbiased)
    dims = _dims(a, dim)
    if _to_one_element(a, dims):
        return _keepdim(_two_pass(a, dims, _correction(unbiased, correction), False), a, dims, keepdim)
    if _in_double(a):
        return prims.convert_element_type(var(prims.convert_element_type(a, torch.float64), dim, unbiased, keepdim,
                                              correction=correction), a.dtype)
    return _keepdim(prims.var(a, dims, correction=_correction(unbiased, correction)), a, dims, keepdim)


@torchsymbol(torch.std, methods=("std",))
def std(a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = unbiased_overload(dim, unbiased)
    dims = _dims(a, dim)
    if _to_one_element(a, dims):
        return _keepdim(_two_pass(a, dims, _correction(unbiased, correction), True), a, dims, keepdim)
    if _in_double(a):
        wide = prims.convert_element_type(a, torch.float64)
        return prims.convert_element_type(prims.sqrt(var(wide, dim, unbiased, keepdim, correction=correction)), a.dtype)
    return prims.sqrt(var(a, dim, unbiased, keepdim, correction=correction))


@torchsymbol(torch.var_mean)
def var_mean(a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = unbiased_overload(dim, unbiased)
    if _in_double(a):
        v, m = moments(prims.convert_element_type(a, torch.float64), dim, unbiased, keepdim, correction=correction)
        return prims.convert_element_type(v, a.dtype), prims.convert_element_type(m, a.dtype)
    return moments(a, dim, unbiased, keepdim, correction=correction)


def moments(a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``var_mean`` computed in ``a``'s dtype (normalizations, whose kernels compute so)."""
    dims = _dims(a, dim)
    v, m = prims.var_mean(a, dims, correction=_correction(unbiased, correction))
    return _keepdim(v, a, dims, keepdim), _keepdim(m, a, dims, keepdim)


@torchsymbol(torch.std_mean)
def std_mean(a, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, unbiased = unbiased_overload(dim, unbiased)
    if _in_double(a):
        v, m = moments(prims.convert_element_type(a, torch.float64), dim, unbiased, keepdim, correction=correction)
        return prims.convert_element_type(prims.sqrt(v), a.dtype), prims.convert_element_type(m, a.dtype)
    v, m = moments(a, dim, unbiased, keepdim, correction=correction)
    return prims.sqrt(v), m


@torchsymbol(torch.all, methods=("all",))
def all(a, dim=None, keepdim=False):
    from thunder.torch.elementwise import logical_not
    return logical_not(any(logical_not(a), dim, keepdim))


# [Note: checks that all elements hold]
# ``torch._is_all_true(valid)`` is how torch.distributions validates a distribution's parameters and values (its
# default ``validate_args=True``): ``if not torch._is_all_true(valid): raise ValueError(...)``. Where ``valid`` is
# computed from parameters or activations, thunder cannot know its value while tracing (see [Note: value guards] in
# thunder/driver/value_guards.py); Python's ``bool`` (or ``.item()``) of such a result is then taken to be True and
# the trace checks it on every call (``assert_all_true``), raising where it is False: the trace holds only the
# branch for True, and never runs where eager would have taken the other one.
@torchsymbol(torch._is_all_true, methods=("_is_all_true",))
def is_all_true(a):
    check(a.dtype is torch.bool, lambda: f"torch._is_all_true expects a bool tensor, got {a.dtype}", RuntimeError)
    out = all(a)
    out._thunder_checked_true = True  # see TensorProxy.__bool__
    return out


def _assert_all_true(t, what: str):
    if not bool(t):
        raise ValueError(
            f"{what} was False when the jitted program ran: thunder traced the program with it True (it could not "
            "know the value while tracing), and eager takes another branch here: for torch.distributions' argument "
            "validation, a ValueError for a parameter or value outside its constraint")


@torchsymbol(name="assert_all_true", tags=(Tag.SIDE_EFFECT,), torch_impl=_assert_all_true)
def assert_all_true(t, what: str):
    """Raises where ``t`` (a 0-dim bool tensor) is False when the program runs (see [Note: checks that all elements
    hold])."""
    return None


def _reduces_nothing(a, dims) -> bool:
    """Whether a reduction over ``dims`` reduces empty extents (where max-like reductions have no value)."""
    return builtins.any(is_zero(a.shape[d]) for d in dims)  # a run-time extent is taken to be nonzero


@torchsymbol(torch.any, methods=("any",))
def any(a, dim=None, keepdim=False):
    dims = _dims(a, dim)
    if _reduces_nothing(a, dims):
        shape = tuple(s for i, s in enumerate(a.shape) if i not in dims)
        return _keepdim(prims.full(shape, False, device=a.device, dtype=torch.bool), a, dims, keepdim)
    b = convert(a, torch.bool) if a.dtype is not torch.bool else a
    out = prims.amax(convert(b, torch.int32), dims)
    return _keepdim(convert(out, torch.bool), a, dims, keepdim)


@torchsymbol(torch.count_nonzero, methods=("count_nonzero",))
def count_nonzero(a, dim=None):
    from thunder.torch.elementwise import ne
    return sum(ne(a, 0), dim)


@torchsymbol(torch.logsumexp, methods=("logsumexp",))
def logsumexp(a, dim, keepdim=False):
    from thunder.torch.elementwise import add, exp, log, sub, where, isinf, abs as abs_
    dims = _dims(a, dim)
    if _reduces_nothing(a, dims):  # log(0)
        return log(sum(exp(a), dims, keepdim))
    m = amax(a, dims, True)
    m = where(isinf(m), 0.0, m)
    out = add(log(sum(exp(sub(a, m)), dims, True)), m)
    return out if keepdim else prims.squeeze(out, dims) if dims else out


@torchsymbol(torch.cumsum, methods=("cumsum",), inplace_methods=("cumsum_",))
def cumsum(a, dim, *, dtype=None):
    d = _dims(a, dim)[0] if a.ndim else 0
    out_dtype = _sum_dtype(a, dtype)
    return prims.cumsum(convert(a, out_dtype), d) if a.ndim else convert(a, out_dtype)


def _without_gradient_impl(value, of):
    return value


@torchsymbol(name="without_gradient", torch_impl=_without_gradient_impl)
def without_gradient(value, of):
    """``value``, requiring grad where ``of`` does, whose backward gives ``of`` no gradient (eager's 0-norm: a count
    in the autograd graph, whose input gets ``None``)."""
    from thunder.torch.inplace import value_requiring_grad

    return value_requiring_grad(value, of.requires_grad)


def _register_without_gradient_rule():
    from thunder.transforms.grad_rules import register_vjp

    @register_vjp(without_gradient)
    def rule(value, of):
        return without_gradient(value, of), lambda g: (None, None)


_register_without_gradient_rule()


def _vector_norm(a, ord, dim, keepdim, dtype):
    """The vector ``ord``-norm over ``dim``, computed in float32 for low-precision inputs as torch's kernels do."""
    from thunder.torch.elementwise import abs as abs_, mul, ne, pow, sqrt

    check(a.dtype.is_floating_point or a.dtype.is_complex,
          lambda: f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {a.dtype}")
    result = dtype or (a.dtype if not a.dtype.is_complex else {torch.complex64: torch.float32}.get(a.dtype, torch.float64))
    compute = torch.float32 if result in (torch.float16, torch.bfloat16) else result
    x = abs_(convert(a, dtype)) if dtype is not None else abs_(a)
    x = convert(x, compute)
    if ord == float("inf"):
        out = amax(x, dim if dim is not None else (), keepdim)
    elif ord == -float("inf"):
        out = amin(x, dim if dim is not None else (), keepdim)
    elif ord == 0:
        out = sum(convert(ne(x, 0), compute), dim, keepdim)
        if x.requires_grad:  # eager's 0-norm is in the autograd graph, and its backward gives no gradient
            out = without_gradient(out, x)
    elif ord == 1:
        out = sum(x, dim, keepdim)
    elif ord == 2:
        out = sqrt(sum(mul(x, x), dim, keepdim))
    else:
        out = pow(sum(pow(x, ord), dim, keepdim), 1.0 / ord)
    return convert(out, result)


@torchsymbol(torch.norm, methods=("norm",))
def norm(a, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    check(p != "nuc", "norm(p='nuc') needs a singular value decomposition, which thunder does not define", NotImplementedError)
    ord = 2 if p in ("fro", None) else p
    return _vector_norm(a, ord, dim, keepdim, dtype)


@torchsymbol(torch.linalg.vector_norm)
def vector_norm(a, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    return _vector_norm(a, ord, dim, keepdim, dtype)
