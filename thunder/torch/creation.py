"""Tensor creation (factories), including random ones, of the torch language."""
from __future__ import annotations

import functools
import math
from numbers import Number

import torch

from thunder.core import prims
from thunder.core.devices import normalize
from thunder.core.extents import as_extent, is_runtime
from thunder.core.proxies import DataDependentError, NumberProxy, TensorProxy, tensor_value
from thunder.core.pytree import tree_leaves
from thunder.core.symbol import Tag
from thunder.torch.registry import number_torchsymbol, torchsymbol
from thunder.torch.utils import check, convert
from thunder.torch import fallback


def _plain_tensor(definition):
    """A factory's definition, refusing what thunder's proxies cannot stand for: a layout other than strided, and a
    tensor created inside the program that requires grad (a leaf of its own: thunder differentiates with respect to
    the program's inputs and the module's parameters)."""

    @functools.wraps(definition)
    def checked(*args, **kwargs):
        name = definition.__name__
        layout = kwargs.get("layout")
        check(layout in (None, torch.strided), lambda: f"{name}(..., layout={layout}): thunder's tensors are strided",
              NotImplementedError)
        check(not kwargs.get("requires_grad"), lambda: f"{name}(..., requires_grad=True) inside a jitted function is not "
              "supported: create the tensor outside it (a parameter, or an input) and pass it in", NotImplementedError)
        return definition(*args, **kwargs)

    return checked


def _device(device):
    return normalize(device if device is not None else torch.get_default_device())


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = size[0]
    return tuple(as_extent(s) for s in size)


def _float_dtype(dtype):
    return dtype if dtype is not None else torch.get_default_dtype()


def _fill_dtype(fill_value):
    """torch.full's dtype for a fill value (a NumberProxy by its Python type)."""
    ptype = fill_value.python_type if isinstance(fill_value, NumberProxy) else type(fill_value)
    if issubclass(ptype, bool):
        return torch.bool
    if issubclass(ptype, int):
        return torch.int64
    if issubclass(ptype, complex):
        return torch.complex64
    return torch.get_default_dtype()


@number_torchsymbol(torch.full)
@_plain_tensor
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    dtype = dtype if dtype is not None else _fill_dtype(fill_value)
    return prims.full(_size((size,)), convert(fill_value, dtype), device=_device(device), dtype=dtype)


@torchsymbol(torch.zeros)
@_plain_tensor
def zeros(*size, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    dtype = _float_dtype(dtype)
    return prims.full(_size(size), convert(0, dtype), device=_device(device), dtype=dtype)


@torchsymbol(torch.ones)
@_plain_tensor
def ones(*size, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    dtype = _float_dtype(dtype)
    return prims.full(_size(size), convert(1, dtype), device=_device(device), dtype=dtype)


@torchsymbol(torch.empty)
@_plain_tensor
def empty(*size, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, memory_format=None, out=None):
    dtype = _float_dtype(dtype)
    return prims.full(_size(size), convert(0, dtype), device=_device(device), dtype=dtype)


def _like(name, value_fn):
    def fn(a, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, memory_format=None):
        dtype = dtype or a.dtype
        return prims.full(tuple(a.shape), convert(value_fn(a), dtype), device=_device(device) if device else a.device, dtype=dtype)

    fn.__name__ = name
    return torchsymbol(getattr(torch, name), name=name)(_plain_tensor(fn))


zeros_like = _like("zeros_like", lambda a: 0)
ones_like = _like("ones_like", lambda a: 1)
empty_like = _like("empty_like", lambda a: 0)


@number_torchsymbol(torch.full_like)
@_plain_tensor
def full_like(a, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, memory_format=None):
    dtype = dtype or a.dtype
    return prims.full(tuple(a.shape), convert(fill_value, dtype), device=_device(device) if device else a.device, dtype=dtype)


def _new(name, value):
    def fn(a, *size, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
        dtype = dtype or a.dtype
        v = value if value is not None else size[-1]
        size = size[:-1] if value is None else size
        return prims.full(_size(size), convert(v, dtype), device=_device(device) if device else a.device, dtype=dtype)

    fn.__name__ = name
    return torchsymbol(methods=(name,), name=name, torch_impl=getattr(torch.Tensor, name))(_plain_tensor(fn))


new_zeros = _new("new_zeros", 0)
new_ones = _new("new_ones", 1)
new_empty = _new("new_empty", 0)


@number_torchsymbol(methods=("new_full",), torch_impl=torch.Tensor.new_full)
@_plain_tensor
def new_full(a, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    dtype = dtype or a.dtype
    return prims.full(_size((size,)), convert(fill_value, dtype), device=_device(device) if device else a.device, dtype=dtype)


def _constant_bounds(bounds):
    """Tensor bounds computed from no input (Funnel's relative positions, from aranges of the sequence length) as
    the numbers torch reads of them: the same on every call, so the length is known; None where one is not."""
    values = []
    for x in bounds:
        if isinstance(x, TensorProxy):
            try:
                x = tensor_value(x, "item", "torch.arange's bound", constant=True)
            except DataDependentError:
                return None
        values.append(x)
    return tuple(values)


@torchsymbol(torch.arange, tags=(Tag.KERNEL_ROUNDING,))
@_plain_tensor
def arange(start, end=None, step=1, *, out=None, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    if any(isinstance(x, TensorProxy) for x in (start, end, step)):  # the length depends on the bounds' values
        constant = _constant_bounds((start, end, step))
        if constant is None:  # a run-time extent
            kwargs = {k: v for k, v in (("dtype", dtype), ("device", device)) if v is not None}
            return fallback.fallback_call(torch.arange, (start, end, step), kwargs)
        start, end, step = constant
    if dtype is None:
        dtype = torch.int64 if all(isinstance(x, int) for x in (start, end, step)) else torch.get_default_dtype()
    if is_runtime(end) and start == 0 and step == 1:  # arange over a run-time extent
        return prims.iota(end, start=0, step=1, device=_device(device), dtype=dtype)
    length = math.ceil((end - start) / step)
    check(length >= 0, "arange: upper bound and larger bound inconsistent with step sign")
    return prims.iota(length, start=start, step=step, device=_device(device), dtype=dtype)


@torchsymbol(torch.linspace, tags=(Tag.KERNEL_ROUNDING,))
@_plain_tensor
def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    """torch's formula: ``start + step * i`` in the first half, ``end - step * (steps - 1 - i)`` in the second."""
    check(not any(isinstance(x, TensorProxy) for x in (start, end)), "linspace with tensor bounds is not supported",
          NotImplementedError)
    check(steps >= 0, "linspace: number of steps must be non-negative")
    dtype, device = _float_dtype(dtype), _device(device)
    integral = not (dtype.is_floating_point or dtype.is_complex)
    if integral:  # the bounds are converted to the dtype first
        start, end = int(start), int(end)
    if steps <= 1:
        return prims.full((steps,), convert(start, dtype), device=device, dtype=dtype)
    compute = torch.float64 if integral else (torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype)
    step = (end - start) / (steps - 1)
    i = prims.iota(steps, start=0, step=1, device=device, dtype=compute)
    low = prims.add(prims.mul(i, step), float(start))
    high = prims.sub(float(end), prims.mul(prims.sub(float(steps - 1), i), step))
    return convert(prims.where(prims.lt(i, float(steps // 2)), low, high), dtype)


@torchsymbol(torch.eye)
@_plain_tensor
def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    from thunder.torch.elementwise import eq
    from thunder.torch.shapes import reshape
    m = n if m is None else m
    dtype = _float_dtype(dtype)
    r = reshape(prims.iota(n, start=0, step=1, device=_device(device), dtype=torch.int64), (n, 1))
    c = reshape(prims.iota(m, start=0, step=1, device=_device(device), dtype=torch.int64), (1, m))
    return convert(eq(r, c), dtype)


def _tensor_impl(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    return torch.tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


@torchsymbol(torch.tensor, torch_impl=torch.tensor, tags=(Tag.HOST_DATA,))
@_plain_tensor
def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    if isinstance(data, TensorProxy):  # a copy, detached, as eager makes it (with its warning); diffusers' FIR kernels
        import warnings

        from thunder.torch.shapes import detach, to

        warnings.warn("To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
                      "sourceTensor.detach().clone().requires_grad_(True), rather than torch.tensor(sourceTensor).",
                      UserWarning, stacklevel=3)
        return to(detach(data), device=_device(device) if device is not None else None, dtype=dtype, copy=True)
    traced = any(isinstance(x, (TensorProxy, NumberProxy)) for x in tree_leaves(data))
    check(not isinstance(data, torch.Tensor) and not traced,
          "torch.tensor() of a list of traced values is not supported; use torch.stack or torch.as_tensor",
          NotImplementedError)
    with torch._C.DisableTorchFunction():
        ref = torch.tensor(data, dtype=dtype, device="meta")
    return fallback.fallback_call(torch.tensor, (data,), dict(dtype=ref.dtype, device=_device(device)))


@number_torchsymbol(torch.scalar_tensor)
@_plain_tensor
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False):
    dtype = _float_dtype(dtype)
    return prims.full((), convert(s, dtype), device=_device(device), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Random: each runs one torch RNG call on the torch executor, so the RNG advances as in eager.
# ---------------------------------------------------------------------------------------------


@torchsymbol(torch.rand, tags=(Tag.RANDOM,))
@_plain_tensor
def rand(*size, generator=None, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    dtype = _float_dtype(dtype)
    return _unit_range(prims.uniform(_size(size), 0.0, 1.0, device=_device(device), dtype=dtype))


def _unit_range(out):
    out._thunder_range = (0.0, 1.0)  # see [Note: comparisons decided by value ranges]
    return out


@torchsymbol(torch.randn, tags=(Tag.RANDOM,))
@_plain_tensor
def randn(*size, generator=None, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False, out=None):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    return prims.randn(_size(size), device=_device(device), dtype=_float_dtype(dtype))


@torchsymbol(torch.rand_like, tags=(Tag.RANDOM,))
@_plain_tensor
def rand_like(a, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False,
              memory_format=None):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    return _unit_range(prims.uniform(tuple(a.shape), 0.0, 1.0, device=_device(device) if device else a.device,
                                     dtype=dtype or a.dtype))


@torchsymbol(torch.randn_like, tags=(Tag.RANDOM,))
@_plain_tensor
def randn_like(a, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False,
               memory_format=None):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    return prims.randn(tuple(a.shape), device=_device(device) if device else a.device, dtype=dtype or a.dtype)


@torchsymbol(torch.randint, tags=(Tag.RANDOM,))
@_plain_tensor
def randint(*args, low=None, high=None, size=None, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
            requires_grad=False, out=None):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    # torch's overloads: randint(high, size) and randint(low, high, size), each argument also by keyword
    keywords = {k: v for k, v in (("low", low), ("high", high), ("size", size)) if v is not None}
    names = ("low", "high", "size") if len(args) + len(keywords) == 3 else ("high", "size")
    given = dict(zip(names, args))
    check(len(args) <= len(names) and not given.keys() & keywords.keys() and set(names) == given.keys() | keywords.keys(),
          lambda: f"randint() takes (high, size) or (low, high, size), got {len(args)} positional arguments and "
                  f"{sorted(keywords)} by keyword", TypeError)
    given.update(keywords)
    low, high, size = given.get("low", 0), given["high"], given["size"]
    # floor of a uniform draw in [low, high): the torch executor runs torch.randint itself
    u = prims.uniform(_size((size,)), float(low), float(high), device=_device(device), dtype=torch.float64)
    return convert(prims.floor(u), dtype or torch.int64)


@torchsymbol(torch.bernoulli, methods=("bernoulli",), tags=(Tag.RANDOM,))
def bernoulli(a, p=None, *, generator=None):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    if p is None and prims.requires_grad(a):
        # eager's draws are part of the autograd graph (requires_grad, a zero gradient for ``a``): torch's own,
        # differentiated by torch's autograd
        return fallback.fallback_call(torch.bernoulli, (a,), {})
    from thunder.torch.elementwise import lt
    u = prims.uniform(tuple(a.shape), 0.0, 1.0, device=a.device, dtype=a.dtype if a.dtype.is_floating_point else torch.float32)
    return convert(lt(u, a if p is None else p), a.dtype)


@torchsymbol(torch.multinomial, methods=("multinomial",), tags=(Tag.RANDOM,))
def multinomial(a, num_samples, replacement=False, *, generator=None):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    return fallback.fallback_call(torch.multinomial, (a, num_samples, replacement), {})


@torchsymbol(torch.randperm, tags=(Tag.RANDOM,))
@_plain_tensor
def randperm(n, *, generator=None, out=None, dtype=torch.int64, layout=None, device=None, pin_memory=False, requires_grad=False):
    check(generator is None, "thunder does not support explicit generators yet", NotImplementedError)
    return fallback.fallback_call(torch.randperm, (n,), dict(dtype=dtype, device=_device(device)))


# ---------------------------------------------------------------------------------------------
# The random state
# ---------------------------------------------------------------------------------------------

_TORCH_MANUAL_SEED = torch.random.manual_seed


@torchsymbol(name="manual_seed", tags=(Tag.RANDOM, Tag.SIDE_EFFECT), torch_impl=_TORCH_MANUAL_SEED)
def manual_seed(seed):
    """``torch.manual_seed(seed)`` inside a jitted program: recorded, so it reseeds on every call, in order with the
    program's random operations, as eager does (see thunder/driver/random_state.py)."""
    return None
