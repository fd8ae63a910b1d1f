"""Operations whose output shapes depend on tensor values: their outputs get run-time extents.

``nonzero``, one-argument ``where``, ``masked_select``, ``unique``, boolean-mask indexing,
``repeat_interleave`` with tensor repeats, ... are each one bound symbol run by torch; each extent
their output shape takes from the data is a fresh int NumberProxy, defined right after the operation
from its output (see [Note: run-time extents] in thunder/core/extents.py). The rules below give
their output metadata directly (torch has no meta kernels for them); another operation of this kind
gets it from torch's fake tensors (see [Note: fallback metadata with run-time extents] in fallback.py).
"""
from __future__ import annotations

import operator

import torch

from thunder.core.extents import fresh, same_shape
from thunder.core.proxies import TensorProxy
from thunder.core.trace import get_tracectx

RULES: dict = {}  # torch callable -> rule(describe, *args, **kwargs) -> outputs, or None to decline


def rule(*fns):
    def deco(f):
        for fn in fns:
            RULES[fn] = f
        return f

    return deco


def _tensor(shape, dtype, like: TensorProxy, requires_grad: bool = False):
    grad = requires_grad and torch.is_grad_enabled() and like.requires_grad and (dtype.is_floating_point or dtype.is_complex)
    return get_tracectx().tensor(tuple(shape), dtype, like.device, grad)


def _extent(name: str, what: str):
    return fresh(get_tracectx(), f"{what} of {name}")


def _count(name: str, t: TensorProxy):
    """The number of nonzero (True) elements of ``t``: one extent per tensor, shared by every operation that
    selects by it (``x[m]``, ``y[m]``, ``m.nonzero()``, ``torch.where(m)`` all have ``m``'s count)."""
    counts = get_tracectx().nonzero_counts
    if t.name not in counts:
        what = f"True elements of boolean mask {t.name}" if t.dtype is torch.bool else f"nonzero elements of tensor {t.name}"
        counts[t.name] = fresh(get_tracectx(), f"the number of {what} ({name})")
        get_tracectx().counted[counts[t.name].name] = t
    return counts[t.name]


@rule(torch.nonzero, torch.Tensor.nonzero, torch._C.TensorBase.nonzero)
def nonzero(name, a, *, out=None, as_tuple=False):
    n = _count(name, a)
    if as_tuple:
        return tuple(_tensor((n,), torch.int64, a) for _ in range(max(a.ndim, 1)))
    return _tensor((n, a.ndim), torch.int64, a)


@rule(torch.argwhere, torch.Tensor.argwhere)
def argwhere(name, a):
    return nonzero(name, a)


@rule(torch.where)
def where(name, condition, input=None, other=None):
    if input is not None or other is not None:
        return None
    return nonzero(name, condition, as_tuple=True)


@rule(torch.masked_select, torch.Tensor.masked_select)
def masked_select(name, a, mask):
    n = _count(name, mask) if same_shape(tuple(mask.shape), tuple(a.shape)) else _extent(name, "the number of elements selected")
    return _tensor((n,), a.dtype, a, requires_grad=True)


@rule(torch.unique, torch.Tensor.unique)
def unique(name, a, sorted=True, return_inverse=False, return_counts=False, dim=None):
    return _unique(name, a, return_inverse, return_counts, dim)


@rule(torch.unique_consecutive, torch.Tensor.unique_consecutive)
def unique_consecutive(name, a, return_inverse=False, return_counts=False, dim=None):
    return _unique(name, a, return_inverse, return_counts, dim)


def _unique(name, a, return_inverse, return_counts, dim):
    n = _extent(name, "the number of unique elements")
    if dim is None:
        values = _tensor((n,), a.dtype, a, requires_grad=True)
        inverse_shape = tuple(a.shape)
    else:
        dim = dim % a.ndim
        values = _tensor(tuple(n if i == dim else s for i, s in enumerate(a.shape)), a.dtype, a, requires_grad=True)
        inverse_shape = (a.shape[dim],)
    out = [values]
    if return_inverse:
        out.append(_tensor(inverse_shape, torch.int64, a))
    if return_counts:
        out.append(_tensor((n,), torch.int64, a))
    return out[0] if len(out) == 1 else tuple(out)


@rule(torch.repeat_interleave, torch.Tensor.repeat_interleave)
def repeat_interleave(name, a, repeats=None, dim=None, *, output_size=None):
    if repeats is None:  # repeat_interleave(repeats): the indices repeated
        n = output_size if output_size is not None else _extent(name, "the sum of the repeats")
        return _tensor((n,), a.dtype, a)
    if not isinstance(repeats, TensorProxy) or output_size is not None:
        return None
    n = _extent(name, "the sum of the repeats")
    if dim is None:
        return _tensor((n,), a.dtype, a, requires_grad=True)
    dim = dim % a.ndim
    return _tensor(tuple(n if i == dim else s for i, s in enumerate(a.shape)), a.dtype, a, requires_grad=True)


@rule(torch.bincount, torch.Tensor.bincount)
def bincount(name, a, weights=None, minlength=0):
    n = _extent(name, "the number of bins (the largest value plus one, at least minlength)")
    if weights is None:
        dtype = torch.int64
    else:  # as torch's kernel: float32 weights count in float32, any other weights in float64
        dtype = torch.float32 if weights.dtype is torch.float32 else torch.float64
    return _tensor((n,), dtype, a)


@rule(torch.arange)
def arange(name, start, end, step=1, *, dtype=None, device=None):
    """Tensor bounds: torch reads their values (``.item()``), so the length is known only when it runs."""
    bounds = (start, end, step)
    like = next(x for x in bounds if isinstance(x, TensorProxy))
    if dtype is None:  # as torch: integers (of tensors too) give int64, else the default float dtype
        integral = all(not (x.dtype.is_floating_point or x.dtype.is_complex) if isinstance(x, TensorProxy)
                       else isinstance(x, int) for x in bounds)
        dtype = torch.int64 if integral else torch.get_default_dtype()
    n = _extent(name, "the number of values (from tensor bounds)")
    return get_tracectx().tensor((n,), dtype, like.device if device is None else torch.device(device), False)


@rule(torch.nn.functional.one_hot)
def one_hot(name, a, num_classes=-1):
    """With ``num_classes=-1`` the classes are counted from the data: one more than the largest value."""
    n = num_classes if num_classes >= 0 else _extent(name, "the number of classes (the largest value plus one)")
    return _tensor(tuple(a.shape) + (n,), torch.int64, a)


@rule(operator.getitem)
def getitem(name, a, key):
    """Boolean masks in an index select a run-time number of elements: each is traced as the integer
    indices of its True elements (one index tensor per mask dimension), whose length is a fresh extent."""
    items = key if isinstance(key, tuple) else (key,)
    masks = [x for x in items if isinstance(x, TensorProxy) and x.dtype is torch.bool]
    if not masks or any(m.ndim == 0 for m in masks):
        return None
    from thunder.torch.fallback import meta_outputs

    replaced = []
    for x in items:
        if isinstance(x, TensorProxy) and x.dtype is torch.bool:
            n = _count(name, x)
            replaced += [_tensor((n,), torch.int64, x)] * max(x.ndim, 1)
        else:
            replaced.append(x)
    return meta_outputs(operator.getitem, (a, tuple(replaced)), {})


def setitem_impl(a, key, value):
    """Functional ``a[key] = value``, as the torch executor runs it."""
    out = a.clone()
    out[key] = value
    return out


@rule(setitem_impl)
def setitem(name, a, key, value):
    """``a[mask] = value`` keeps ``a``'s metadata; torch checks the value against the selection when it runs."""
    items = key if isinstance(key, tuple) else (key,)
    if not any(isinstance(x, TensorProxy) and x.dtype is torch.bool for x in items):
        return None  # other keys: torch's meta kernel checks the value's shape while tracing
    grad = torch.is_grad_enabled() and (a.requires_grad or isinstance(value, TensorProxy) and value.requires_grad)
    return get_tracectx().tensor(tuple(a.shape), a.dtype, a.device, grad)


def outputs(fn, describe: str, args, kwargs):
    """The outputs of ``fn``'s call by its rule, or None where it has none."""
    r = RULES.get(fn)
    return None if r is None else r(describe, *args, **kwargs)
