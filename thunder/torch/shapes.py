"""Shape, view, indexing and dtype operations of the torch language."""
from __future__ import annotations

import math
import operator
from numbers import Number

import torch
import torch.nn.functional as F

from thunder.core import prims
from thunder.core.symbol import Symbol
from thunder.core.extents import (as_extent, clamp_at_zero, decide, infer_shape, is_one, is_runtime, is_symbolic_shape,
                                  is_zero, prod, same, same_shape)
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.torch.registry import torchsymbol
from thunder.torch.utils import canonicalize_dim, canonicalize_dims, check, convert, expand_to
from thunder.torch import fallback
from thunder.torch.data_dependent import setitem_impl as _setitem_impl


def _shape_arg(shape) -> tuple:
    """``view(2, 3)``, ``view((2, 3))`` and ``view(torch.Size([2, 3]))`` all mean (2, 3)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = shape[0]
    return tuple(as_extent(s) for s in shape)


def _infer_shape(input_shape, shape) -> tuple:
    """``shape`` with its -1 resolved for an input of ``input_shape`` (run-time extents included)."""
    if is_symbolic_shape(input_shape) or is_symbolic_shape(shape):
        return infer_shape(input_shape, shape)
    numel = math.prod(input_shape)
    shape = list(shape)
    if -1 in shape:
        i = shape.index(-1)
        rest = math.prod(s for j, s in enumerate(shape) if j != i)
        check(rest != 0 and numel % rest == 0, lambda: f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape[i] = numel // rest
    check(math.prod(shape) == numel, lambda: f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


@torchsymbol(torch.reshape, methods=("reshape",), torch_impl=torch.Tensor.reshape)  # takes (a, shape) and (a, *shape)
def reshape(a, *shape):
    shape = _infer_shape(tuple(a.shape), _shape_arg(shape))
    return a if same_shape(tuple(a.shape), shape) else prims.reshape(a, shape)


@torchsymbol(methods=("view",), view=True, torch_impl=torch.Tensor.view)
def view(a, *shape):
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        check(shape[0] == a.dtype, "view(dtype) that changes the dtype is not supported", NotImplementedError)
        return a
    return reshape(a, *shape)


@torchsymbol(methods=("view_as",), view=True, torch_impl=torch.Tensor.view_as)
def view_as(a, other):
    return reshape(a, tuple(other.shape))


@torchsymbol(methods=("reshape_as",), torch_impl=torch.Tensor.reshape_as)
def reshape_as(a, other):
    return reshape(a, tuple(other.shape))


def _same_shape_view(name, torch_impl):
    def fn(a, *args, **kwargs):
        return prims.reshape(a, tuple(a.shape))

    fn.__name__ = name
    sym = Symbol(name, fn, module="ltorch")
    sym.torch_impl = torch_impl
    sym.is_view = True
    return sym


# ``x.reshape(x.shape)``, and view, view_as, reshape_as to the shape ``x`` has: eager returns a new view even then (with
# the strides of size-one dims recomputed, which decides some kernels' layouts: diffusers' FIR resampling feeds one to
# a convolution), and autograd sees an operation (its output's gradient is summed before it reaches ``x``). The
# definitions above have nothing to do there; the frontend records these symbols instead, printed as the op called.
SAME_SHAPE_VIEWS = {sym: _same_shape_view(sym.name, impl) for sym, impl in (
    (reshape, torch.reshape), (view, torch.Tensor.view), (view_as, torch.Tensor.view_as),
    (reshape_as, torch.Tensor.reshape_as))}


def same_value_copy(sym):
    """The symbol to record for an operation whose definition returned its input where eager returns a new tensor
    with the same values (``torch.cumsum(x, 0)`` of a 0-dim ``x``, ``nan_to_num`` of integers): printed as the op
    called, a fresh value (a copy) in the trace."""
    copy_sym = SAME_VALUE_COPIES.get(sym)
    if copy_sym is None:
        copy_sym = SAME_VALUE_COPIES[sym] = _same_shape_view(sym.name, sym.torch_impl)
        copy_sym.is_view = False
    return copy_sym


SAME_VALUE_COPIES: dict = {}


def same_shape_view(sym):
    """The symbol to record for a view op whose definition returned its input (``x.t()`` of a vector, ``x[:]``,
    ``x.permute(0, 1)``): eager returns a new tensor viewing the same memory, whose shape a later ``unsqueeze_`` or
    ``t_`` changes alone; the input itself would make them one tensor."""
    view_sym = SAME_SHAPE_VIEWS.get(sym)
    if view_sym is None:
        view_sym = SAME_SHAPE_VIEWS[sym] = _same_shape_view(sym.name, sym.torch_impl)
    return view_sym


@torchsymbol(torch.flatten, methods=("flatten",))  # a view, or a copy where the strides allow none (as reshape)
def flatten(a, start_dim=0, end_dim=-1):
    if a.ndim == 0:
        return reshape(a, (1,))
    s, e = canonicalize_dim(a.ndim, start_dim), canonicalize_dim(a.ndim, end_dim)
    if s >= e:
        return a
    shape = tuple(a.shape[:s]) + (prod(a.shape[s:e + 1]),) + tuple(a.shape[e + 1:])
    return reshape(a, shape)


@torchsymbol(torch.unflatten, methods=("unflatten",), view=True)
def unflatten(a, dim, sizes):
    dim = canonicalize_dim(a.ndim, dim)
    sizes = _infer_shape((a.shape[dim],), _shape_arg((sizes,)))
    return reshape(a, tuple(a.shape[:dim]) + sizes + tuple(a.shape[dim + 1:]))


@torchsymbol(torch.squeeze, methods=("squeeze",), view=True)
def squeeze(a, dim=None):
    dims = canonicalize_dims(a.ndim, dim) if dim is not None else tuple(range(a.ndim))
    if a.ndim == 0:
        return a
    for d in dims:
        if is_runtime(a.shape[d]):  # eager squeezes it exactly when it is 1 at run time
            raise a.shape[d].data_dependent(f"squeeze of dim {d} of tensor {a.name}")
    dims = tuple(d for d in dims if a.shape[d] == 1)
    return prims.squeeze(a, dims) if dims else a


@torchsymbol(torch.unsqueeze, methods=("unsqueeze",), view=True)
def unsqueeze(a, dim):
    dim = canonicalize_dim(a.ndim + 1, dim)
    shape = list(a.shape)
    shape.insert(dim, 1)
    dims = tuple(i if i < dim else i + 1 for i in range(a.ndim))
    return prims.broadcast_in_dim(a, tuple(shape), dims)


@torchsymbol(torch.permute, methods=("permute",), view=True, torch_impl=torch.Tensor.permute)  # (a, dims) and (a, *dims)
def permute(a, *dims):
    dims = canonicalize_dims(a.ndim, _shape_arg(dims) if dims else ())
    return a if dims == tuple(range(a.ndim)) else prims.transpose(a, dims)


@torchsymbol(torch.transpose, torch.swapaxes, torch.swapdims, methods=("transpose", "swapaxes", "swapdims"), view=True)
def transpose(a, dim0, dim1):
    if a.ndim == 0:
        return a
    d0, d1 = canonicalize_dim(a.ndim, dim0), canonicalize_dim(a.ndim, dim1)
    perm = list(range(a.ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return permute(a, tuple(perm))


@torchsymbol(torch.t, methods=("t",), view=True)
def t(a):
    check(a.ndim <= 2, lambda: f"t() expects a tensor with <= 2 dimensions, but self is {a.ndim}D")
    return transpose(a, 0, 1) if a.ndim == 2 else a


@torchsymbol(torch.Tensor.T, name="T", view=True, torch_impl=torch.Tensor.T.__get__)
def T(a):
    return permute(a, tuple(reversed(range(a.ndim))))


@torchsymbol(torch.Tensor.mT, name="mT", view=True, torch_impl=torch.Tensor.mT.__get__)
def mT(a):
    return transpose(a, -2, -1)


@torchsymbol(torch.movedim, torch.moveaxis, methods=("movedim", "moveaxis"), view=True)
def movedim(a, source, destination):
    src = canonicalize_dims(a.ndim, source)
    dst = canonicalize_dims(a.ndim, destination)
    order = [d for d in range(a.ndim) if d not in src]
    perm = [None] * a.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    it = iter(order)
    perm = [p if p is not None else next(it) for p in perm]
    return permute(a, tuple(perm))


@torchsymbol(methods=("expand",), view=True, torch_impl=torch.Tensor.expand)
def expand(a, *shape):
    return expand_to(a, expanded_shape(a, *shape))


def expanded_shape(a, *shape) -> tuple:
    """The shape ``a.expand(*shape)`` has: each -1 among ``a``'s own dimensions is ``a``'s extent there."""
    shape = list(_shape_arg(shape))
    offset = len(shape) - a.ndim
    for i in range(a.ndim):
        if shape[offset + i] == -1:
            shape[offset + i] = a.shape[i]
    return tuple(shape)


@torchsymbol(methods=("expand_as",), view=True, torch_impl=torch.Tensor.expand_as)
def expand_as(a, other):
    return expand_to(a, tuple(other.shape))


@torchsymbol(torch.broadcast_to, methods=("broadcast_to",), view=True)
def broadcast_to(a, shape):
    return expand(a, tuple(shape))


@torchsymbol(torch.broadcast_tensors, view=True)
def broadcast_tensors(*tensors):
    shape = tuple(prims.broadcast_shapes(*(tuple(t.shape) for t in tensors)))
    return tuple(expand_to(t, shape) for t in tensors)


@torchsymbol(methods=("repeat",), torch_impl=torch.Tensor.repeat)
def repeat(a, *sizes):
    sizes = _shape_arg(sizes)
    check(len(sizes) >= a.ndim, "repeat: number of repeat dims can not be smaller than number of tensor dims")
    a = reshape(a, (1,) * (len(sizes) - a.ndim) + tuple(a.shape))
    # Interleave a broadcast dim before each dim, then merge.
    expanded_shape = []
    for r, s in zip(sizes, a.shape):
        expanded_shape += [r, s]
    dims = tuple(2 * i + 1 for i in range(a.ndim))
    out = prims.broadcast_in_dim(a, tuple(expanded_shape), dims)
    return reshape(out, tuple(r * s for r, s in zip(sizes, a.shape)))


@torchsymbol(torch.tile, methods=("tile",), torch_impl=torch.Tensor.tile)  # (a, dims) and (a, *dims)
def tile(a, *dims):
    dims = _shape_arg(dims)
    dims = (1,) * (a.ndim - len(dims)) + dims
    return repeat(a, dims)


@torchsymbol(torch.cat, torch.concat, torch.concatenate)
def cat(tensors, dim=0):
    from thunder.torch.utils import promote

    _, dtype = promote(*tensors)  # the legacy empty tensors skipped below count (``cat([torch.tensor([]), x_bf16])``
    tensors = [t for t in tensors if not (t.ndim == 1 and is_zero(t.shape[0]))] or list(tensors[:1])  # is float32)
    dim = canonicalize_dim(tensors[0].ndim, dim)
    tensors = [convert(t, dtype) for t in tensors]
    return prims.cat(tensors, dim)  # a new tensor even of one (eager's cat never returns its input)


@torchsymbol(torch.stack)
def stack(tensors, dim=0):
    dim = canonicalize_dim(tensors[0].ndim + 1, dim)
    return cat([unsqueeze(t, dim) for t in tensors], dim)


def _atleast(a, ndim):
    """``torch.atleast_1d``/``atleast_2d``: a 0-dim tensor becomes (1,) or (1, 1), a vector (1, n)."""
    if a.ndim >= ndim:
        return a
    return reshape(a, (1,) * (ndim - a.ndim) + tuple(a.shape))


@torchsymbol(torch.hstack)
def hstack(tensors):
    tensors = [_atleast(t, 1) for t in tensors]
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@torchsymbol(torch.vstack)
def vstack(tensors):
    return cat([_atleast(t, 2) for t in tensors], 0)


@torchsymbol(torch.narrow, methods=("narrow",), view=True)
def narrow(a, dim, start, length):
    dim = canonicalize_dim(a.ndim, dim)
    # a 0-dim tensor start or length is read as a number, as eager reads it (Longformer's global attention)
    start, length = (operator.index(x) if isinstance(x, TensorProxy) else x for x in (start, length))
    start = start + a.shape[dim] if start < 0 else start
    if start == 0 and same(length, a.shape[dim]):  # eager slices all the same: its gradient is slice_backward's
        return prims.slice_prim(a, [0] * a.ndim, list(a.shape), [1] * a.ndim)  # (contiguous, whatever g's layout)
    return _slice_dim(a, dim, start, start + length, 1)


def _slice_dim(a, dim, start, stop, step):
    if start == 0 and same(stop, a.shape[dim]) and step == 1:
        return a
    starts = [0] * a.ndim
    stops = list(a.shape)
    steps = [1] * a.ndim
    starts[dim], stops[dim], steps[dim] = start, stop, step
    return prims.slice_prim(a, starts, stops, steps)


@torchsymbol(torch.select, methods=("select",), view=True)
def select(a, dim, index):
    dim = canonicalize_dim(a.ndim, dim)
    size = a.shape[dim]
    check(-size <= index < size, lambda: f"select(): index {index} out of range for tensor of size {tuple(a.shape)} at dimension {dim}",
          IndexError)
    index = index % size
    return prims.squeeze(_slice_dim(a, dim, index, index + 1, 1), (dim,))


@torchsymbol(torch.split, methods=("split",), view=True)
def split(a, split_size_or_sections, dim=0):
    dim = canonicalize_dim(a.ndim, dim)
    size = a.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sections = [min(step, size - s) for s in range(0, max(size, 1), max(step, 1))] if size else [0]
    else:
        sections = list(split_size_or_sections)
        check(sum(sections) == size, lambda: f"split_with_sizes expects split_sizes to sum exactly to {size}")
    return _pieces(a, sections, dim)


def _pieces(a, sections, dim):
    """The slices of ``a`` along ``dim`` of the extents ``sections``, one after the other."""
    out, start = [], 0
    for s in sections:
        piece = _slice_dim(a, dim, start, start + s, 1)
        out.append(piece if piece is not a else prims.reshape(a, tuple(a.shape)))  # one piece: a new view, as eager's
        start += s
    return tuple(out)


@torchsymbol(torch.tensor_split, methods=("tensor_split",), view=True)
def tensor_split(a, indices_or_sections, dim=0):
    dim = canonicalize_dim(a.ndim, dim)
    size = a.shape[dim]
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        sections = [size // n + 1] * (size % n) + [size // n] * (n - size % n)
    else:
        bounds = [0] + list(indices_or_sections) + [size]
        sections = [max(0, min(e, size) - min(s, size)) for s, e in zip(bounds[:-1], bounds[1:])]
    # eager's tensor_split takes each piece as a slice, whose gradients are summed (split's rule concatenates them)
    return _pieces(a, sections, dim)


@torchsymbol(torch.chunk, methods=("chunk",), view=True)
def chunk(a, chunks, dim=0):
    dim = canonicalize_dim(a.ndim, dim)
    size = a.shape[dim]
    if isinstance(size, int) and size == 0:
        return split(a, [0] * chunks, dim)  # torch gives ``chunks`` empty pieces
    step = -(-size // chunks)
    return split(a, step, dim)


@torchsymbol(torch.unbind, methods=("unbind",), view=True)
def unbind(a, dim=0):
    dim = canonicalize_dim(a.ndim, dim)
    if is_runtime(a.shape[dim]):
        raise a.shape[dim].data_dependent(
            f"Iterating over tensor {a.name} (or torch.unbind of its dim {dim}), a Python loop over its {a.shape[dim].name} slices,")
    return tuple(select(a, dim, i) for i in range(a.shape[dim]))


@torchsymbol(torch.flip, methods=("flip",), torch_impl=torch.Tensor.flip)  # (a, dims) and (a, *dims)
def flip(a, *dims):
    dims = canonicalize_dims(a.ndim, _shape_arg(dims))
    return prims.flip(a, dims) if dims else clone(a)  # eager returns a new tensor, even flipping nothing


@torchsymbol(torch.roll, methods=("roll",))
def roll(a, shifts, dims=None):
    if dims is None:
        return reshape(roll(flatten(a), shifts, 0), tuple(a.shape))
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    out = a
    for s, d in zip(shifts, dims):
        d = canonicalize_dim(a.ndim, d)
        n = a.shape[d]
        if n == 0:
            continue
        s = s % n
        if s:
            out = cat([_slice_dim(out, d, n - s, n, 1), _slice_dim(out, d, 0, n - s, 1)], d)
    return out if out is not a else clone(a)  # eager returns a new tensor, even rolling by nothing


def _tri(a, diagonal, upper):
    from thunder.torch.creation import arange
    from thunder.torch.elementwise import ge, le, sub, where
    rows, cols = a.shape[-2], a.shape[-1]
    r = reshape(arange(rows, device=a.device), (rows, 1))
    c = reshape(arange(cols, device=a.device), (1, cols))
    mask = ge(sub(c, r), diagonal) if upper else le(sub(c, r), diagonal)
    return where(mask, a, convert(0, a.dtype))


@torchsymbol(torch.tril, methods=("tril",), inplace_methods=("tril_",))
def tril(a, diagonal=0):
    return _tri(a, diagonal, upper=False)


@torchsymbol(torch.triu, methods=("triu",), inplace_methods=("triu_",))
def triu(a, diagonal=0):
    return _tri(a, diagonal, upper=True)


@torchsymbol(torch.index_select, methods=("index_select",))
def index_select(a, dim, index):
    dim = canonicalize_dim(a.ndim, dim)
    if index.ndim == 0:
        index = reshape(index, (1,))
    if a.ndim == 0:  # a 0-dim input is indexed as a 1-element vector and stays 0-dim
        return reshape(prims.take(reshape(a, (1,)), index, 0), ())
    return prims.take(a, index, dim)


@torchsymbol(torch.gather, methods=("gather",))
def gather(a, dim, index, *, sparse_grad=False):
    return prims.gather(a, index, canonicalize_dim(a.ndim, dim))


@torchsymbol(torch.take_along_dim, methods=("take_along_dim",))
def take_along_dim(a, indices, dim=None):
    if dim is None:
        return gather(flatten(a), 0, flatten(indices))
    dim = canonicalize_dim(a.ndim, dim)
    shape = list(prims.broadcast_shapes(tuple(a.shape[:dim]) + (1,) + tuple(a.shape[dim + 1:]),
                                        tuple(indices.shape[:dim]) + (1,) + tuple(indices.shape[dim + 1:])))
    a_shape = list(shape)
    a_shape[dim] = a.shape[dim]
    i_shape = list(shape)
    i_shape[dim] = indices.shape[dim]
    # eager wraps negative indices along ``dim`` (``indices % size``; with no ``dim`` it does not), which gather
    # would refuse or, fused, read out of bounds
    wrapped = prims.remainder(indices, a.shape[dim]) if a.shape[dim] else indices
    return gather(expand_to(a, a_shape), dim, expand_to(wrapped, i_shape))


@torchsymbol(torch.scatter_add, methods=("scatter_add",), inplace_methods=("scatter_add_",))
def scatter_add(a, dim, index, src):
    return prims.scatter_add(a, index, src, canonicalize_dim(a.ndim, dim))


@torchsymbol(torch.index_add, methods=("index_add",), inplace_methods=("index_add_",))
def index_add(a, dim, index, source, *, alpha=1):
    # alpha goes to the kernel: it scales each source slice as it adds it, rounding otherwise than a scaled source
    return prims.index_add(a, index, source, canonicalize_dim(a.ndim, dim), alpha)


@torchsymbol(torch.nn.functional.pad)
def pad(a, pad, mode="constant", value=None):
    if mode != "constant":
        return fallback.fallback_call(F.pad, (a, pad, mode, value), {})
    value = 0 if value is None else value
    check(len(pad) % 2 == 0 and len(pad) // 2 <= a.ndim, "pad: padding length must be divisible by 2 and fit the input")
    config = [(0, 0, 0)] * a.ndim
    for i in range(len(pad) // 2):
        config[a.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return prims.pad(a, convert(value, a.dtype), config)


# ---------------------------------------------------------------------------------------------
# Indexing: basic indexing decomposes into slices and reshapes; advanced indexing runs torch's.
# ---------------------------------------------------------------------------------------------


def _integer_tensor_as_int(key) -> bool:
    """Whether ``key`` holds a 0-dim integer tensor (not uint8 or bool: those are masks), which torch's indexing
    reads as the integer it holds: ``x[torch.tensor(1)]`` is ``x[1]``, a view of ``x``, not a copy."""
    items = key if isinstance(key, tuple) else (key,)
    ints = [isinstance(x, TensorProxy) and x.ndim == 0 and x.dtype in _INDEX_INTS for x in items]
    return any(ints) and _is_basic_index(tuple(x for x, i in zip(items, ints) if not i))


_INDEX_INTS = (torch.int8, torch.int16, torch.int32, torch.int64)


def _is_basic_index(key) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    return all(x is None or x is Ellipsis or isinstance(x, (int, slice)) and not isinstance(x, bool) for x in items)


def _basic_getitem(a, key):
    items = list(key) if isinstance(key, tuple) else [key]
    n_real = sum(1 for x in items if x is not None and x is not Ellipsis)
    check(n_real <= a.ndim, lambda: f"too many indices for tensor of dimension {a.ndim}", IndexError)
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items[i:i + 1] = [slice(None)] * (a.ndim - n_real)
    else:
        items += [slice(None)] * (a.ndim - n_real)
    starts, stops, steps = [], [], []
    squeeze_dims, out_shape_with_none = [], []
    dim = 0
    for x in items:
        if x is None:
            out_shape_with_none.append(("new", None))
            continue
        size = a.shape[dim]
        if is_runtime(size):
            bounds = _runtime_bounds(a, dim, x)
            if bounds is None:
                return None
            s, e, st = bounds
            starts.append(s), stops.append(e), steps.append(st)
            if isinstance(x, int):
                squeeze_dims.append(dim)
            else:
                out_shape_with_none.append(("dim", dim))
        elif isinstance(x, int):
            check(-size <= x < size, lambda: f"index {x} is out of bounds for dimension {dim} with size {size}", IndexError)
            x = x % size
            starts.append(x), stops.append(x + 1), steps.append(1)
            squeeze_dims.append(dim)
        else:
            s, e, st = (0, size, 1) if x == slice(None) else x.indices(size)
            check(st > 0, "step must be greater than zero", ValueError)
            e = max(e, s)
            starts.append(s), stops.append(e), steps.append(st)
            out_shape_with_none.append(("dim", dim))
        dim += 1
    out = a
    if any(is_runtime(s) or s != 0 for s in starts) or not all(same(e, n) for e, n in zip(stops, a.shape)) \
            or steps != [1] * a.ndim:
        out = prims.slice_prim(a, starts, stops, steps)
        if squeeze_dims:
            out = prims.squeeze(out, tuple(squeeze_dims))
    else:  # integers index dimensions of size 1 only: selects, whose gradient is laid out as eager's (see select)
        for d in reversed(squeeze_dims):
            out = select(out, d, 0)
    if any(kind == "new" for kind, _ in out_shape_with_none):
        shape, dims, i = [], [], 0
        for j, (kind, _) in enumerate(out_shape_with_none):
            if kind == "new":
                shape.append(1)
            else:
                shape.append(out.shape[i])
                dims.append(j)
                i += 1
        out = prims.broadcast_in_dim(out, tuple(shape), tuple(dims))
    return out


def _check_one_ellipsis(key):
    items = key if isinstance(key, tuple) else (key,)
    check(sum(1 for x in items if x is Ellipsis) <= 1, "thunder supports at most one Ellipsis (...) in an index (torch "
          "accepts several, with a meaning of its own): write the index with one", NotImplementedError)


def _runtime_bounds(a, dim: int, x):
    """(start, stop, step) of an int or a slice indexing a dim whose extent is known only at run time. A slice's bounds
    are clamped as torch clamps them, with run-time extents where that depends on the value (``x[:-1]`` of ``i0`` rows
    stops at ``max(0, i0 - 1)``, ``x[:3]`` at ``i0 - max(0, i0 - 3)``, ``x[1:]`` has ``max(0, i0 - 1)`` elements, as
    ``x[:-1]``; ``x[::2]`` has ``(i0 + 1) // 2``). An int index must hold for every run-time value (``x[-1]`` of an
    ``i0 + 1`` extent is at ``i0``); None otherwise (``x[3]`` of ``i0``: an IndexError below 4), which torch's own
    indexing then handles."""
    size = a.shape[dim]

    def position(k):  # k (negative: from the end) as a position in [0, size] for every run-time value, else None
        k = size + k if decide(operator.lt, k, 0) is True else k
        return k if decide(operator.ge, k, 0) is True and decide(operator.le, k, size) is True else None

    def clamped(k):  # k as torch clamps a slice bound to [0, size]; None where k's sign depends on the value
        if decide(operator.lt, k, 0) is True:
            return clamp_at_zero(size + k)
        if decide(operator.ge, k, 0) is not True:
            return None
        return k if decide(operator.le, k, size) is True else size - clamp_at_zero(size - k)

    if isinstance(x, int):
        start = position(x)
        return None if start is None or decide(operator.lt, start, size) is not True else (start, start + 1, 1)
    step = 1 if x.step is None else x.step
    if type(step) is not int or step < 1:
        return None
    start = 0 if x.start is None else clamped(x.start)
    stop = size if x.stop is None else clamped(x.stop)
    if start is None or stop is None:
        return None
    if decide(operator.ge, stop, start) is not True:  # an empty slice where the stop comes first, as torch's
        stop = start + clamp_at_zero(stop - start)
    return start, stop, step


@torchsymbol(methods=("__getitem__",), view=True, torch_impl=operator.getitem)
def getitem(a, key):
    """Basic indexing decomposes into slices and reshapes; a 1-D integer tensor index is a ``take``; other keys
    (boolean masks, several tensor indices) run torch's own indexing, with run-time extents where needed."""
    _check_one_ellipsis(key)
    out = _basic_getitem(a, key) if _is_basic_index(key) else None
    if out is not None:
        return out
    if _integer_tensor_as_int(key):  # a view in eager: torch's own indexing
        return fallback.fallback_call(operator.getitem, (a, key), {})
    if indexes_by_one_integer_tensor(a, key):
        index = prims.where(prims.lt(key, 0), prims.add(key, a.shape[0]), key)  # -1: the last row
        return prims.take(a, index, 0)
    return fallback.fallback_call(operator.getitem, (a, key), {})


def indexes_by_one_integer_tensor(a, key) -> bool:
    """Whether ``a[key]`` selects along the first dimension by a 1-D integer tensor (a ``take``; a 0-dim one is read
    as the integer it holds: ``_integer_tensor_as_int``)."""
    return isinstance(key, TensorProxy) and key.dtype in (torch.int64, torch.int32) and key.ndim == 1 and a.ndim >= 1


# tensor indices copy, as in torch, but for 0-dim integer ones (``_integer_tensor_as_int``)
getitem.is_view = lambda a, key: _is_basic_index(key) or _integer_tensor_as_int(key)

# The names of the operations whose result is their input itself, or a view of it, only when its strides allow (or their
# arguments: ``to`` and the dtype methods return the input when they change nothing). ``laid_out_as`` (thunder's, the
# new value of a tensor updated in place, in its memory) is its value itself where the layouts agree: the memory of
# the tensor and of the update's other aliases (a ``detach`` of it, generated program 17231 fused).
MAYBE_VIEWS = frozenset({"reshape", "reshape_as", "flatten", "contiguous", "to", "float", "double", "half", "bfloat16",
                         "int", "long", "bool", "einsum", "laid_out_as"})  # einsum of one operand permuting it: a view


@torchsymbol(name="setitem", torch_impl=_setitem_impl)
def setitem(a, key, value):
    """Functional ``a[key] = value``: a new tensor; the frontend rebinds ``a`` to it.

    A boolean mask, and basic indexing by integers and unit-step slices, decompose into a
    ``where`` over the input; other keys (advanced indexing, strided slices) run torch's own.
    """
    _check_one_ellipsis(key)
    if isinstance(key, TensorProxy) and key.dtype is torch.bool:
        # a value that needs a gradient runs torch's own: its gradient sums the selected elements alone (eager's
        # ``index_put`` backward), not the whole tensor with zeros beside them, whose order of adding differs
        one_value = isinstance(value, Number) or (isinstance(value, TensorProxy) and not value.requires_grad
                                                  and all(is_one(s) for s in value.shape))
        if not one_value or not same_shape(tuple(key.shape), tuple(a.shape[:key.ndim])):
            return fallback.fallback_call(_setitem_impl, (a, key, value), {})
        from thunder.torch.elementwise import masked_index_put

        value = reshape(value, ()) if isinstance(value, TensorProxy) else value
        return masked_index_put(a, prims.broadcast_in_dim(key, tuple(a.shape), tuple(range(key.ndim))), value)
    bounds = _unit_step_bounds(a, key) if _is_basic_index(key) and not is_symbolic_shape(a.shape) else None
    if bounds is None:
        return fallback.fallback_call(_setitem_impl, (a, key, value), {})
    starts, stops = bounds
    region = tuple(e - s for s, e in zip(starts, stops))
    value = convert(value, a.dtype)
    if isinstance(value, TensorProxy):
        # broadcast to the indexed view's shape (integer-indexed dims dropped), then give those dims back; as torch
        # copies, the value's leading ones are dropped first (``y[2:4] = v`` with ``v`` of shape (1, 2, 5))
        view_shape = _basic_getitem_shape(a, key)
        lead = next((i for i, n in enumerate(value.shape) if not is_one(n)), value.ndim)
        if lead and value.ndim > len(view_shape):
            value = reshape(value, tuple(value.shape[lead:]))
        value = reshape(expand_to(value, view_shape), region)
    else:
        value = prims.full(region, value, device=a.device, dtype=a.dtype)
    config = [(s, size - e, 0) for s, e, size in zip(starts, stops, a.shape)]
    mask = prims.pad(prims.full(region, True, device=a.device, dtype=torch.bool), False, config)
    return prims.where(mask, prims.pad(value, convert(0, a.dtype), config), a)


def _unit_step_bounds(a, key):
    """(starts, stops) of a basic index without ``None`` and with unit steps; ``None`` otherwise."""
    items = list(key) if isinstance(key, tuple) else [key]
    if any(x is None for x in items) or sum(1 for x in items if x is not Ellipsis) > a.ndim:
        return None
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items[i:i + 1] = [slice(None)] * (a.ndim - len(items) + 1)
    items += [slice(None)] * (a.ndim - len(items))
    starts, stops = [], []
    for x, size in zip(items, a.shape):
        if isinstance(x, int):
            if not -size <= x < size:
                return None  # torch raises the IndexError
            starts.append(x % size), stops.append(x % size + 1)
            continue
        s, e, st = x.indices(size)
        if st != 1:
            return None
        starts.append(s), stops.append(max(s, e))
    return starts, stops


def _basic_getitem_shape(a, key) -> tuple:
    with torch._C.DisableTorchFunction():
        return tuple(torch.empty(tuple(a.shape), device="meta")[key].shape)


# ---------------------------------------------------------------------------------------------
# Dtype, device and copies
# ---------------------------------------------------------------------------------------------


def _parse_to_args(a, args, kwargs):
    """``Tensor.to``'s arguments: ``(dtype, non_blocking, copy)``, ``(device, dtype, non_blocking, copy)`` or
    ``(other, non_blocking, copy)``, any of them by keyword, and ``memory_format`` by keyword."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    flags = []
    for x in args:
        if isinstance(x, bool):
            flags.append(x)
        elif isinstance(x, torch.dtype):
            dtype = x
        elif isinstance(x, (str, torch.device)):
            device = torch.device(x)
        elif isinstance(x, torch.Tensor):
            dtype, device = x.dtype, x.device
    copy = kwargs.get("copy", flags[1] if len(flags) > 1 else False)
    return (torch.device(device) if device is not None else None), dtype, copy, kwargs.get("memory_format")


@torchsymbol(methods=("to",), torch_impl=torch.Tensor.to)
def to(a, *args, **kwargs):
    device, dtype, copy, memory_format = _parse_to_args(a, args, kwargs)
    out = a
    if device is not None and _normalize_device(device) != a.device:
        out = prims.device_put(out, _normalize_device(device))
    if dtype is not None:
        out = convert(out, dtype)
    return _new_tensor_if_asked(a, out, copy, memory_format)


def _new_tensor_if_asked(a, out, copy: bool, memory_format):
    """``out``, or where it is ``a`` itself, a new value when the program asked for a copy (``copy=True``) or a
    memory format: the torch executor runs the program's call, and whether the result shares ``a``'s memory
    (eager returns ``a`` when it is laid out so already) is decided as for ``contiguous`` (the frontend's
    ``MAYBE_VIEWS``)."""
    if out is a and (copy or memory_format not in (None, torch.preserve_format)):
        return prims.shallow_copy(a)
    return out


def _normalize_device(device):
    from thunder.core.devices import normalize
    return normalize(device)


def _dtype_method(name, dtype):
    def fn(a, *, memory_format=None):
        return _new_tensor_if_asked(a, convert(a, dtype), False, memory_format)

    fn.__name__ = name
    return torchsymbol(methods=(name,), name=name, torch_impl=getattr(torch.Tensor, name))(fn)


float_ = _dtype_method("float", torch.float32)
double = _dtype_method("double", torch.float64)
half = _dtype_method("half", torch.float16)
bfloat16 = _dtype_method("bfloat16", torch.bfloat16)
int_ = _dtype_method("int", torch.int32)
long = _dtype_method("long", torch.int64)
bool_ = _dtype_method("bool", torch.bool)


@torchsymbol(methods=("type_as",), torch_impl=torch.Tensor.type_as)
def type_as(a, other):
    return convert(a, other.dtype)


@torchsymbol(methods=("type",), torch_impl=torch.Tensor.type)
def type_(a, dtype=None, non_blocking=False):
    check(dtype is not None, "Tensor.type() without a dtype returns a string and is not supported while tracing",
          NotImplementedError)
    if isinstance(dtype, str):  # a.type("torch.IntTensor")
        legacy = getattr(torch, dtype.removeprefix("torch."), None)
        check(isinstance(getattr(legacy, "dtype", None), torch.dtype) and not dtype.startswith("torch.cuda"),
              lambda: f"Tensor.type({dtype!r}) is not supported while tracing", NotImplementedError)
        dtype = legacy.dtype
    return convert(a, dtype)


@torchsymbol(methods=("cpu",), torch_impl=torch.Tensor.cpu)
def cpu(a, memory_format=None):
    return to(a, torch.device("cpu"))


@torchsymbol(methods=("cuda",), torch_impl=torch.Tensor.cuda)
def cuda(a, device=None, non_blocking=False, memory_format=None):
    return to(a, torch.device("cuda" if device is None else device))


@torchsymbol(methods=("contiguous",), torch_impl=torch.Tensor.contiguous)
def contiguous(a, *, memory_format=torch.contiguous_format):
    # A fresh value, not the identity: the torch executor runs Tensor.contiguous, and a later
    # Tensor.view relies on its memory layout.
    return prims.shallow_copy(a)


@torchsymbol(torch.clone, methods=("clone",))
def clone(a, *, memory_format=torch.preserve_format):
    return prims.reshape(a, tuple(a.shape))  # a fresh value with the same contents


@torchsymbol(torch.detach, methods=("detach",))
def detach(a):
    return _detach(a)


def _detach(a):
    # A copy that is not part of the autograd graph: recorded as a fresh value without requires_grad.
    with torch.no_grad():
        return prims.reshape(a, tuple(a.shape))


@torchsymbol(torch.Tensor.data, name="data", torch_impl=torch.detach)
def data(a):
    return _detach(a)


@torchsymbol(methods=("requires_grad_",), torch_impl=torch.Tensor.requires_grad_)
def requires_grad_(a, requires_grad=True):
    check_requires_grad_unchanged(a, requires_grad)
    return a


def check_requires_grad_unchanged(a, requires_grad: bool) -> None:
    """``a.requires_grad_(requires_grad)`` or ``a.requires_grad = requires_grad``: accepted where the flag stays."""
    check(not requires_grad or a.requires_grad,
          "Tensor.requires_grad_() inside a jitted function is not supported (nn.Parameter calls it: a module whose "
          "forward builds layers, or parameters, must build them before the jitted call; a program that takes a "
          "gradient inside, with torch.autograd.grad, calls it on that gradient's inputs, and thunder does not "
          "take gradients inside the program either: compute them outside the jitted function)",
          NotImplementedError)
    check(requires_grad or not a.requires_grad,
          "Tensor.requires_grad_(False) of a tensor that requires grad inside a jitted function is not supported "
          "(eager changes the flag of the caller's leaf tensor, which a trace cannot): use detach()",
          NotImplementedError)


@torchsymbol(torch.diagonal, methods=("diagonal",), view=True)
def diagonal(a, offset=0, dim1=0, dim2=1):
    return fallback.fallback_call(torch.diagonal, (a, offset, dim1, dim2), {})


@torchsymbol(torch.einsum)
def einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return fallback.fallback_call(torch.einsum, (equation, *operands), {})


@torchsymbol(torch.outer, torch.ger, methods=("outer", "ger"))
def outer(a, b):
    """``a`` as a column times ``b``, broadcast, as eager computes it (``b``'s gradient is summed over the rows)."""
    from thunder.torch.elementwise import mul

    check(a.ndim == 1, lambda: f"outer: Expected 1-D argument self, but got {a.ndim}-D")
    check(b.ndim == 1, lambda: f"outer: Expected 1-D argument vec2, but got {b.ndim}-D")
    return mul(reshape(a, (a.shape[0], 1)), b)


@torchsymbol(torch.repeat_interleave, methods=("repeat_interleave",))
def repeat_interleave(a, repeats=None, dim=None, *, output_size=None):
    if isinstance(repeats, TensorProxy) or repeats is None:  # the output's extent depends on the repeats' values
        args = (a,) if repeats is None else (a, repeats, dim)
        return fallback.fallback_call(torch.repeat_interleave, args, {} if output_size is None else {"output_size": output_size})
    if dim is None:
        a, dim = flatten(a), 0
    dim = canonicalize_dim(a.ndim, dim)
    shape = list(a.shape)
    expanded = shape[:dim + 1] + [repeats] + shape[dim + 1:]
    out = prims.broadcast_in_dim(a, tuple(expanded), tuple(i if i <= dim else i + 1 for i in range(a.ndim)))
    shape[dim] *= repeats
    return reshape(out, tuple(shape))
