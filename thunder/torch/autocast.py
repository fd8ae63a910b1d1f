"""torch.autocast semantics for traced programs.

The trace records torch-level calls before torch's own autocast would see them, and executes with
autocast disabled (``@no_autocast``), so the casts autocast would insert are recorded explicitly
here, following the op lists of torch's autocast (aten/src/ATen/autocast_mode.cpp), per device type.
Only floating-point tensors of the autocast device type are cast, and float64 tensors never are.
"""
from __future__ import annotations

import enum

import torch

from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten, tree_leaves, tree_unflatten


class Policy(enum.Enum):
    LOWER_PRECISION = enum.auto()  # run in the autocast dtype
    FP32 = enum.auto()  # run in float32
    PROMOTE = enum.auto()  # run in the widest floating dtype among the inputs


_CPU_LOWER = {"conv1d", "conv2d", "conv3d", "bmm", "mm", "baddbmm", "addmm", "linear", "matmul", "rmatmul",
              "scaled_dot_product_attention", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu"}
_CPU_FP32 = {"binary_cross_entropy", "prod", "mse_loss", "nll_loss", "smooth_l1_loss", "cross_entropy", "l1_loss",
             "binary_cross_entropy_with_logits", "huber_loss", "kl_div", "cosine_embedding_loss", "poisson_nll_loss",
             "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
             "multilabel_margin_loss", "hinge_embedding_loss", "cdist", "avg_pool3d", "max_pool3d",
             "adaptive_avg_pool3d", "pad"}
_CUDA_LOWER = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
               "addmm", "matmul", "rmatmul", "mm", "mv", "linear", "baddbmm", "bmm", "einsum",
               "scaled_dot_product_attention"}
_CUDA_FP32 = {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
              "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "cosine_similarity",
              "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss",
              "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
              "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits",
              "cdist", "logsumexp", "prod", "softmax", "log_softmax", "cumsum", "sum", "norm", "vector_norm",
              "cross_entropy", "rms_norm"}
# the CPU promotes for stack, cat (which promote anyway) and index_copy only: atan2(float32, float64) is not cast there
_CPU_PROMOTE = {"stack", "cat", "index_copy"}
_CUDA_PROMOTE = {"addcdiv", "addcmul", "atan2", "cross", "dot", "index_put", "scatter_add", "tensordot"}

def _unweighted(arguments: dict) -> bool:  # F.mse_loss/l1_loss with a weight compute in Python: no aten loss to cast
    return arguments.get("weight") is None


def _padded_by_a_listed_kernel(arguments: dict) -> bool:  # reflection_pad1d/2d and replication_pad1d/2d/3d
    mode, dims = arguments.get("mode", "constant"), len(arguments.get("pad", ())) // 2
    return mode == "replicate" or (mode == "reflect" and dims <= 2)


# Where eager's autocast sees the listed aten operation only for some arguments: the policy applies when this says so
_APPLIES = {"mse_loss": _unweighted, "l1_loss": _unweighted, "pad": _padded_by_a_listed_kernel}

POLICIES = {
    "cpu": {**{n: Policy.LOWER_PRECISION for n in _CPU_LOWER}, **{n: Policy.FP32 for n in _CPU_FP32},
            **{n: Policy.PROMOTE for n in _CPU_PROMOTE}},
    "cuda": {**{n: Policy.LOWER_PRECISION for n in _CUDA_LOWER}, **{n: Policy.FP32 for n in _CUDA_FP32},
             **{n: Policy.PROMOTE for n in _CUDA_PROMOTE}},
}


def state() -> tuple:
    """The autocast state a trace depends on: (cpu enabled, cpu dtype, cuda enabled, cuda dtype)."""
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))


class CastCache:
    """Eager autocast's cache of casts (``cached_cast`` in autocast_mode.cpp): a float32 leaf tensor that requires grad
    and is not a view (a parameter) is cast to the lower precision once while autocast stays on, and every op reads
    that one copy. Its gradient's parts are then added in the lower precision and cast back once, not cast back one
    by one and added in float32 (``F.linear(x, w) + F.linear(y, w)``). ``is_leaf(proxy)``: whether the traced tensor
    is such a leaf (the tracer knows the real tensors)."""

    def __init__(self, is_leaf):
        self.is_leaf = is_leaf
        self.casts: dict = {}

    def cast(self, x: TensorProxy, dtype):
        from thunder.core.trace import get_tracectx
        from thunder.torch.utils import convert

        if not (x.dtype is torch.float32 and x.requires_grad and torch.is_grad_enabled()
                and torch.is_autocast_cache_enabled() and self.is_leaf(x)):
            return convert(x, dtype)
        key = (id(get_tracectx()._scopes[-1]), x.name, dtype)  # a copy made in an inner scope is not defined outside
        if key not in self.casts:
            self.casts[key] = convert(x, dtype)
        return self.casts[key]


def _cast(x, device_type, pred, dtype, cache):
    if isinstance(x, TensorProxy):
        if x.device.type == device_type and x.dtype.is_floating_point and x.dtype is not torch.float64 and pred(x):
            from thunder.torch.utils import convert

            return cache.cast(x, dtype) if cache is not None else convert(x, dtype)
    return x


# Symbols thunder defines as a call of the torch function itself, a composite whose inner operations autocast (on
# the CPU, where autocast does not list it, einsum's bmm does): under autocast they run as fallback calls do.
_AUTOCASTS_INSIDE = frozenset({"einsum"})


def under_autocast(sym, args, kwargs):
    """``sym``, or where it is a torch callable thunder runs as is (a fallback symbol, or one of
    ``_AUTOCASTS_INSIDE`` that autocast does not list) called while autocast is on for its tensors' device, the
    symbol that runs it under that autocast state (see [Note: fallback calls under autocast] in
    thunder/torch/fallback.py)."""
    name = getattr(sym, "name", None)
    if not (getattr(sym, "is_fallback", False) or name in _AUTOCASTS_INSIDE):
        return sym
    if not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")):
        return sym
    # autocast casts floating-point tensors only: a call on none (unique_consecutive of token ids) runs as it is
    tensor = next((t for t in tree_leaves((args, kwargs)) if isinstance(t, TensorProxy) and t.dtype.is_floating_point),
                  None)
    if tensor is None or not torch.is_autocast_enabled(tensor.device.type):
        return sym
    device_type = tensor.device.type
    if name in POLICIES.get(device_type, {}):
        return sym  # its casts are recorded (maybe_autocast)
    from thunder.torch.fallback import autocast_symbol

    return autocast_symbol(sym.torch_impl, device_type, torch.get_autocast_dtype(device_type))


def _arguments(sym, args, kwargs) -> dict:
    signature = getattr(sym, "signature", None)
    return signature.bind_partial(*args, **kwargs).arguments if signature is not None else dict(kwargs)


def maybe_autocast(sym, args, kwargs, cache: CastCache | None = None):
    """``(args, kwargs)`` with the casts autocast would apply to ``sym``'s inputs; ``cache``: the casts of leaves so
    far, used and cleared as eager's cache is (torch empties it when autocast is left)."""
    if not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")):
        if cache is not None:
            cache.casts.clear()
        return args, kwargs
    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, TensorProxy)]
    device_type = tensors[0].device.type if tensors else None
    if device_type is None or not torch.is_autocast_enabled(device_type):
        return args, kwargs
    name = getattr(sym, "name", None) or getattr(sym, "__name__", None)
    policy = POLICIES.get(device_type, {}).get(name)
    if policy is None or (name in _APPLIES and not _APPLIES[name](_arguments(sym, args, kwargs))):
        return args, kwargs
    lower = policy is Policy.LOWER_PRECISION
    if lower:
        dtype = torch.get_autocast_dtype(device_type)
        pred = lambda t: True  # noqa: E731
    elif policy is Policy.FP32:
        dtype = torch.float32
        pred = lambda t: t.dtype in (torch.float16, torch.bfloat16)  # noqa: E731
    else:
        floats = [t for t in tensors if t.dtype.is_floating_point]
        if not floats:
            return args, kwargs
        dtype = max((t.dtype for t in floats), key=lambda d: torch.finfo(d).bits)
        pred = lambda t: True  # noqa: E731
    cache = cache if lower else None  # eager caches the casts to the lower precision only
    # The casts' order is the order autograd adds their gradients in: the last argument first, as torch's autocast
    # wrappers cast them (``cached_cast(args)...`` evaluated right to left by the compilers torch is built with), the
    # tensors of a list argument (``torch.stack``'s, ``torch.cat``'s) first to last, as ``cached_cast`` of a list
    # loops over them. Keyword arguments take their places in the signature.
    leaves, spec = tree_flatten((args, kwargs))
    spans, start = [], 0  # per argument: its place in the signature, and the range of its leaves
    places = _signature_places(sym, kwargs)
    for k, group in enumerate((*args, *kwargs.values())):
        n = len(tree_leaves(group))
        spans.append((k if k < len(args) else places[k - len(args)], start, start + n))
        start += n
    assert start == len(leaves), "the arguments' leaves are not the call's"
    cast = list(leaves)
    for _, start, end in sorted(spans, reverse=True):
        for i in range(start, end):
            cast[i] = _cast(leaves[i], device_type, pred, dtype, cache)
    return tree_unflatten(cast, spec)


def _signature_places(sym, kwargs: dict) -> list:
    """The places of keyword arguments among the parameters of ``sym``'s signature (after the others where unknown)."""
    signature = getattr(sym, "signature", None)
    names = list(signature.parameters) if signature is not None else []
    return [names.index(k) if k in names else len(names) + i for i, k in enumerate(kwargs)]
