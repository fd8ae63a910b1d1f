"""The torch executor: runs torch-language symbols and primitives with PyTorch's own kernels.

A torch-language symbol registered with a torch callable runs as that callable, so numerics match
eager PyTorch bitwise. Primitives run through the small helpers below (also used when a symbol is
replaced by its decomposition).
"""
from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F

from thunder.core import prims
from thunder.core.codeutils import flat_proxies
from thunder.core.symbol import Tag
from thunder.extend import OperatorExecutor, register_executor
from thunder.torch import SYMBOLS as LTORCH_SYMBOLS
from thunder.torch.fallback import printable_name

class TorchExecutor(OperatorExecutor):
    def can_execute(self, bsym) -> bool:
        if getattr(bsym.sym, "is_fallback", False):
            _claim_fallback(bsym.sym)
            return True
        return super().can_execute(bsym)

    def register_prim(self, prim, impl, *, checker=None):
        """Runs the primitive ``prim`` as the torch callable ``impl`` (where ``checker(*args, **kwargs)`` holds)."""
        name = getattr(impl, "__name__", "")  # a lambda prints under the primitive's name
        op = _op_for(impl, name=None if name.isidentifier() else prim.name, tags=prim.tags)
        self.register_implementation(prim, op, checker=checker)


ex = TorchExecutor("torch")
register_executor(ex, default=True)
_IMPORT = "from thunder.executors.torchex import {}"


def no_autocast(fn):
    """Runs ``fn`` with autocast disabled: traces record autocast's casts explicitly."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
            return fn(*args, **kwargs)

    return wrapper


def _op_for(fn, name: str | None = None, tags=()):
    """An executor symbol that prints as ``fn``'s torch path, or as a helper of this module."""
    path = printable_name(fn)
    if path is not None:
        return ex.register_operator(name or path, fn=fn, print_name=path, tags=tags)
    helper = name or fn.__name__
    if globals().get(helper) is fn:
        return ex.register_operator(helper, fn=fn, print_name=helper, imports=(_IMPORT.format(helper),), tags=tags)
    # Not importable by name: the compiled trace receives the callable as a named constant.
    return ex.register_operator(helper, fn=fn, tags=tags, printer=functools.partial(_print_constant_call, fn, helper))


def _print_constant_call(fn, hint, bsym, printer):
    call = f"{printer.constant(fn, hint)}({printer.call_args(bsym.args, bsym.kwargs)})"
    has_out = bsym.output is not None and bool(bsym.flat_outs)
    return f"{printer.output(bsym.output)} = {call}" if has_out else call


_NO_NONE = frozenset({"unbiased"})  # parameters torch declares Optional in thunder's signatures only


def _trim_defaults(sym):
    """Drops arguments equal to the symbol's defaults, so ``ltorch.add(a, b, alpha=None)`` runs as ``torch.add(a, b)``."""
    sig = sym.signature
    if sig is None:
        return None
    params = list(sig.parameters.values())

    def is_default(value, default):
        if default is inspect.Parameter.empty or isinstance(value, torch.Tensor):
            return False
        return value is default or (type(value) is type(default) and not isinstance(value, torch.Tensor) and value == default)

    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    inplace_at = next((i for i, p in enumerate(positional) if p.name == "inplace"), None)

    def transform(args, kwargs):
        args = list(args)
        # Traces are functional: ``F.relu(x, inplace=True)`` is recorded as relu plus a rebinding of ``x``
        # (see [Note: in-place updates] in thunder/driver/frontend.py), so the kernel runs out of place.
        if inplace_at is not None and len(args) > inplace_at:
            args[inplace_at] = False
        kwargs = {k: (False if k == "inplace" else v) for k, v in kwargs.items()}
        n = min(len(args), len(positional))
        while n > 0 and is_default(args[n - 1], positional[n - 1].default):
            n -= 1
        # torch.var(a, None, None, True) is rejected (``unbiased`` takes no None): such a None is left out
        # and the given arguments after it go by keyword.
        first_none = next((i for i in range(n) if args[i] is None and positional[i].name in _NO_NONE), n)
        moved = {}
        if len(args) <= len(positional):
            moved = {positional[i].name: args[i] for i in range(first_none, n)
                     if not is_default(args[i], positional[i].default)}
            n = min(n, first_none)
        args = args[:n] + args[len(positional):]
        kwargs = {k: v for k, v in kwargs.items()
                  if k not in sig.parameters or not is_default(v, sig.parameters[k].default)}
        return tuple(args), {**moved, **kwargs}

    return transform


# ---------------------------------------------------------------------------------------------
# Helpers for primitives without a 1:1 torch function
# ---------------------------------------------------------------------------------------------


def convert_element_type(a, dtype):
    if isinstance(a, torch.Tensor):
        return a.to(dtype)
    return {torch.bool: bool}.get(dtype, complex if dtype.is_complex else float if dtype.is_floating_point else int)(a)


def broadcast_in_dim(a, shape, broadcast_dimensions):
    view_shape = [1] * len(shape)
    for d, s in zip(broadcast_dimensions, a.shape):
        view_shape[d] = s
    return a.reshape(view_shape).expand(shape)


def slice_prim(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    return a[tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))]


def squeeze(a, dims):
    return torch.squeeze(a, tuple(dims)) if dims else a


def pad(a, padding_value, padding_config):
    if any(d != 0 for _, _, d in padding_config):
        raise NotImplementedError("interior padding is not supported by the torch executor")
    flat = []
    for lo, hi, _ in reversed(padding_config):
        flat += [lo, hi]
    return F.pad(a, flat, value=padding_value)


def _reduction(fn):
    def helper(a, dims):
        if not dims:
            return a.clone() if a.ndim or fn in (torch.sum, torch.prod) else a
        if fn is torch.prod:
            out = a
            for d in sorted(dims, reverse=True):
                out = torch.prod(out, d)
            return out
        return fn(a, dims)

    return helper


sum_prim = _reduction(torch.sum)


prod_prim = _reduction(torch.prod)
amax_prim = _reduction(torch.amax)
amin_prim = _reduction(torch.amin)
for _n, _f in (("sum_prim", sum_prim), ("prod_prim", prod_prim), ("amax_prim", amax_prim), ("amin_prim", amin_prim)):
    _f.__name__ = _n


def sum_to(a, dims, runtime_dims):
    """See ``prims.sum_to``."""
    dims = [*dims, *(d for d in runtime_dims if a.shape[d] != 1)]
    return torch.sum(a, sorted(dims), keepdim=True) if dims else a


def var_prim(a, dims, *, correction):
    return torch.var(a, dims, correction=correction)


def var_mean_prim(a, dims, *, correction):
    return torch.var_mean(a, dims, correction=correction)


def full(shape, fill_value, *, device, dtype):
    return torch.full(shape, fill_value, device=device, dtype=dtype)


def iota(length, *, start, step, device, dtype):
    return torch.arange(start, start + length * step, step, device=device, dtype=dtype)[:length]


def uniform(shape, minval, maxval, *, device, dtype):
    t = torch.rand(shape, device=device, dtype=dtype)
    if minval != 0.0 or maxval != 1.0:
        t = t * (maxval - minval) + minval
    return t


def randn(shape, *, device, dtype):
    return torch.randn(shape, device=device, dtype=dtype)


def div_prim(a, b):
    ints = all(not (x.dtype.is_floating_point or x.dtype.is_complex) if isinstance(x, torch.Tensor) else isinstance(x, int)
               for x in (a, b))
    return torch.div(a, b, rounding_mode="trunc") if ints else torch.div(a, b)


def maximum_prim(a, b):
    if not isinstance(b, torch.Tensor):
        return torch.clamp_min(a, b)
    if not isinstance(a, torch.Tensor):
        return torch.clamp_min(b, a)
    return torch.maximum(a, b)


def minimum_prim(a, b):
    if not isinstance(b, torch.Tensor):
        return torch.clamp_max(a, b)
    if not isinstance(a, torch.Tensor):
        return torch.clamp_max(b, a)
    return torch.minimum(a, b)


def take(a, index, dim):
    # torch's own binding: PyTorch Geometric replaces ``torch.index_select`` with a wrapper that refuses a 0-dim input
    return torch._C._VariableFunctions.index_select(a, dim, index)


def gather_prim(a, index, dim):
    return torch.gather(a, dim, index)


def scatter_add_prim(a, index, value, dim):
    return torch.scatter_add(a, dim, index, value)


def index_add_prim(a, index, value, dim, alpha=1):
    return torch.index_add(a, dim, index, value) if alpha == 1 else torch.index_add(a, dim, index, value, alpha=alpha)


def argmax_prim(a, dim):
    return torch.argmax(a, dim)


def argmin_prim(a, dim):
    return torch.argmin(a, dim)


def cumsum_prim(a, dim):
    return torch.cumsum(a, dim)


def embedding_prim(indices, weight):
    return F.embedding(indices, weight)


def shallow_copy(a):
    return a


def in_layout(a, strides, offset, may_copy):
    """See ``prims.in_layout``: what reads ``a``'s memory (``as_strided``) reads it as eager laid it out, whatever
    layout a fused region gave it."""
    if a.stride() == strides and a.storage_offset() == offset:
        return a
    if not may_copy:
        raise RuntimeError(
            f"thunder: as_strided reads memory outside its input (strides {a.stride()}, offset {a.storage_offset()}) "
            f"which a fusion executor laid out otherwise than eager (strides {strides}, offset {offset}); run without "
            "the fusion executor, or take as_strided of a tensor made contiguous")
    extent = offset + sum((n - 1) * st for n, st in zip(a.shape, strides)) + 1 if a.numel() else offset
    return torch.empty(extent, dtype=a.dtype, device=a.device).as_strided(a.shape, strides, offset).copy_(a)


def device_put(a, device):
    return a.to(device)


def copy_(src, dst):
    return dst.copy_(src)


def convolution_prim(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return torch.convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


# The primitives of thunder/core/prims.py and the torch callables that run them. A primitive declared
# elsewhere gets its implementation where it is declared (``thunder.extend.declare_primitive``).
_PRIM_IMPLS = {
    prims.convert_element_type: convert_element_type, prims.broadcast_in_dim: broadcast_in_dim,
    prims.reshape: torch.reshape, prims.transpose: torch.permute, prims.slice_prim: slice_prim, prims.squeeze: squeeze,
    prims.cat: torch.cat, prims.pad: pad, prims.flip: torch.flip, prims.take: take, prims.gather: gather_prim,
    prims.scatter_add: scatter_add_prim, prims.index_add: index_add_prim, prims.sum: sum_prim, prims.sum_to: sum_to,
    prims.prod: prod_prim,
    prims.amax: amax_prim, prims.amin: amin_prim, prims.var: var_prim, prims.var_mean: var_mean_prim,
    prims.argmax: argmax_prim, prims.argmin: argmin_prim, prims.cumsum: cumsum_prim, prims.full: full,
    prims.iota: iota, prims.uniform: uniform, prims.randn: randn, prims.matmul: torch.matmul, prims.linear: F.linear,
    prims.convolution: convolution_prim, prims.embedding: embedding_prim, prims.copy_: copy_,
    prims.device_put: device_put, prims.shallow_copy: shallow_copy, prims.in_layout: in_layout, prims.where: torch.where,
}
# The elementwise primitives (prims.UNARY and prims.BINARY) run as the torch function of the same name, but these.
_ELEMENTWISE_IMPLS = {getattr(prims, name): getattr(torch, name) for name in (*prims.UNARY, *prims.BINARY)} | {
    prims.div: div_prim, prims.maximum: maximum_prim, prims.minimum: minimum_prim,
}


def prim_torch_callable(prim):
    """The torch callable that runs the primitive ``prim`` (None for others): the frontend replays it on meta tensors
    to find the layout of its result."""
    return _PRIM_IMPLS.get(prim) or _ELEMENTWISE_IMPLS.get(prim)


def _has_tensor(*args, **kwargs) -> bool:
    """Elementwise primitives on Python numbers alone run as Python (the python executor), not as torch."""
    return any(isinstance(a, torch.Tensor) for a in flat_proxies((args, kwargs)))


for _prim, _impl in _PRIM_IMPLS.items():
    ex.register_prim(_prim, _impl)
for _prim, _impl in _ELEMENTWISE_IMPLS.items():
    ex.register_prim(_prim, _impl, checker=_has_tensor)

# ---------------------------------------------------------------------------------------------
# Torch-language symbols run as their torch callables
# ---------------------------------------------------------------------------------------------


def dropout_mask(a, p, for_inplace=False, *, strides=None):
    """The scaled keep-mask of dropout, drawn with the same RNG calls as eager's ``F.dropout``.

    On CPU eager draws ``bernoulli_(1 - p)`` into a tensor like the input and divides it by
    ``1 - p``; on CUDA it runs the fused ``native_dropout`` kernel, except for in-place dropout
    (``for_inplace``: ``F.dropout(inplace=True)``, ``torch.dropout_``), which draws as on CPU.
    ``strides``: the layout eager's tensor "like the input" has (known while tracing), which decides which
    element gets which number; the input's own where not given.
    A fusion executor that fuses random operations (``fuse_random``) draws the mask through dropout's
    decomposition instead: it then differs from eager's for the same seed, while the backward still uses
    exactly the forward's mask.
    """
    like = torch.empty_like(a) if strides is None else torch.empty_strided(a.shape, strides, dtype=a.dtype,
                                                                              device=a.device)
    if a.device.type == "cuda" and not for_inplace:
        if a.dtype in (torch.float16, torch.bfloat16):  # float32 (thunder/torch/nn.py, dropout_mask_dtype)
            return torch.native_dropout(like.fill_(1), p, True)[1].to(torch.float32).mul_(1 / (1 - p))
        return torch.native_dropout(like.fill_(1), p, True)[0]
    return like.bernoulli_(1 - p).div_(1 - p)


def native_batch_norm(a, weight, bias, running_mean, running_var, training, momentum, eps):
    aten = torch.ops.aten
    if a.numel() == 0:  # a batch of a count known only now: eager's path for an empty batch (torch's kernels refuse it)
        return _empty_batch_norm(a, weight, bias, running_mean, running_var, training)
    if training:
        if running_mean is None:
            out, mean, invstd = aten._native_batch_norm_legit.no_stats(a, weight, bias, True, momentum, eps)
            return out, mean, invstd, None, None
        return aten._native_batch_norm_legit_functional(a, weight, bias, running_mean, running_var, True, momentum, eps)
    out, mean, invstd = aten._native_batch_norm_legit_no_training(a, weight, bias, running_mean, running_var, momentum, eps)
    return out, mean, invstd, running_mean, running_var


def _empty_batch_norm(a, weight, bias, running_mean, running_var, training):
    """An empty output, the running statistics as they were, and saved statistics of the kernels' shapes and dtype
    (see thunder/torch/nn.py: on the CPU, none in evaluation)."""
    from thunder.torch.nn import cpu_statistics_dtype

    keep = lambda t: None if t is None else t.clone()  # noqa: E731
    if not training and not a.is_cpu:
        return torch.empty_like(a), keep(running_mean), keep(running_var), keep(running_mean), keep(running_var)
    dtype = cpu_statistics_dtype(a, weight, bias, running_mean, running_var)
    stats = torch.empty(a.shape[1] if training else 0, dtype=dtype, device=a.device)
    return torch.empty_like(a), stats, stats.clone(), keep(running_mean), keep(running_var)


def manual_seed(seed):
    torch.random.manual_seed(seed)


_LTORCH_HELPERS = {"dropout_mask": dropout_mask, "native_batch_norm": native_batch_norm, "manual_seed": manual_seed}


def _out_of_place_dropout(a, p=0.5, training=True, inplace=False):
    """In-place dropout runs as its decomposition (``dropout_mask(..., for_inplace=True)``, a product): eager
    draws its mask unlike ``F.dropout``'s on CUDA."""
    return not inplace


_LTORCH_CHECKERS = {"dropout": _out_of_place_dropout}

for _sym in LTORCH_SYMBOLS.values():
    _impl = _LTORCH_HELPERS.get(_sym.name) or getattr(_sym, "torch_impl", None)
    if _impl is None:
        continue
    _name = _sym.name if _sym.name in _LTORCH_HELPERS or printable_name(_impl) is None else None
    ex.register_implementation(_sym, _op_for(_impl, name=_name, tags=_sym.tags), args_transform=_trim_defaults(_sym),
                               checker=_LTORCH_CHECKERS.get(_sym.name))


def _claim_fallback(sym):
    """Fallback symbols (torch callables thunder has no definition for) run as the torch callable itself."""
    if sym.id not in ex.implmap:
        op = ex.register_operator(sym.id, fn=sym.torch_impl, print_name=sym.print_name, tags=sym.tags, printer=sym.printer)
        ex.register_implementation(sym, op)
