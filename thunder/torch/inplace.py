"""In-place operations of the torch language: for every torch callable that updates a tensor in place,
how to compute the tensor's new value out of place.

Traces are functional (see [Note: in-place updates] in thunder/driver/frontend.py): the frontend computes the
new value with the plan below, then rebinds the updated tensor to it. Every public ``Tensor.*_`` method,
the in-place operators (``+=``, ...), torch's and ``torch.nn.functional``'s in-place functions
(``torch.relu_``, ``F.elu_``) and ``torch.nn.init`` have a plan; an in-place callable without one is refused
with an error that names it, never dropped.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Callable

import torch
import torch.nn.functional as F

from thunder.torch.fallback import _RANDOM_NAMES
from thunder.torch.registry import INPLACE_TO_SYMBOL, torchsymbol
from thunder.torch.utils import convert, expand_to, check


class PlanKind:
    TWIN = "twin"  # call the out-of-place twin (a torch callable), traced like any call
    VALUE = "value"  # a torch-language function (self, *args, **kwargs) -> the new value
    CLONE_APPLY = "clone_apply"  # run the torch callable itself on a copy (fallback.updated_copy), as one operation
    METADATA = "metadata"  # changes the tensor's shape or strides in place (t_, unsqueeze_, ...)
    RESIZE = "resize"  # resize_, resize_as_: fn(self, *args, **kwargs) -> the size asked for
    REFUSE = "refuse"


@dataclasses.dataclass(frozen=True)
class InplacePlan:
    kind: str
    fn: Callable | None = None  # the twin, the value function, or the callable to run on a clone
    no_grad: bool = False  # the update happens under torch.no_grad() (torch.nn.init)
    message: str = ""  # why it is refused
    check: Callable | None = None  # extra validation (self, new value) -> None
    inplace_kwarg: bool = False  # TWIN: the twin called with inplace=True updates the tensor itself (F.elu_)


# ---------------------------------------------------------------------------------------------
# Torch-language functions for in-place methods without an out-of-place twin
# ---------------------------------------------------------------------------------------------


# The values of copy_, fill_ and zero_ run laid out as the tensor they are written into (eager writes them into its
# memory): the rest of the program, and the values scattered back through views, see eager's strides.
def _copy_value_impl(a, src, non_blocking=False):
    return torch.empty_like(a).copy_(src)


def _fill_value_impl(a, value):
    return torch.empty_like(a).fill_(value)


def _overwriting(a, value):
    """``value`` (a number or a tensor of ``a``'s shape and dtype) as the new value of ``a`` that it overwrites whole:
    as in eager, the result still requires grad where ``a`` does, and ``a``'s gradient is zeros (a selection of
    ``value`` everywhere, never ``a * 0``, which is NaN where ``a`` is infinite)."""
    from thunder.core import prims

    if not a.requires_grad:
        return value
    # one True broadcast (all strides 0): the selection's gradient, where(everywhere, grad, 0), is laid out as the
    # gradient, as eager's (a contiguous mask would lay it out contiguous, and the sum of it for a broadcast value
    # would add in another order: generated program nn 32823)
    true = prims.full((), True, device=a.device, dtype=torch.bool)
    everywhere = prims.broadcast_in_dim(true, tuple(a.shape), ())
    return prims.where(everywhere, value, a)


@torchsymbol(name="copy_value", torch_impl=_copy_value_impl)
def copy_value(a, src, non_blocking=False):
    """The value ``a.copy_(src)`` gives ``a``: ``src`` converted to ``a``'s dtype and device, broadcast to its shape."""
    from thunder.torch.shapes import to

    if not isinstance(src, torch.Tensor):
        src = convert(src, a.dtype)
        from thunder.torch.creation import full

        return _overwriting(a, full(tuple(a.shape), src, dtype=a.dtype, device=a.device))
    # broadcast before the dtype conversion: eager's CopyBackwards converts the gradient to src's dtype, then the
    # broadcast dimensions are summed in it (a float64 scalar copied into float32 gets a float64 sum)
    return _overwriting(a, _new_value(src, to(expand_to(to(src, a.device), tuple(a.shape)), dtype=a.dtype)))


def _new_value(src, value):
    """``value``, computed from ``src``, as a new tensor: not ``src``'s proxy where it is ``src`` itself (another
    tensor, which later updates must not reach)."""
    from thunder.torch.shapes import clone

    return clone(src) if value is src else value


@torchsymbol(name="fill_value", torch_impl=_fill_value_impl)
def fill_value(a, value):
    """The value ``a.fill_(value)`` gives ``a`` (``value`` a number or a 0-dim tensor)."""
    from thunder.torch.creation import full

    if isinstance(value, torch.Tensor):
        check(value.ndim == 0, lambda: f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions.")
        from thunder.torch.shapes import to

        # converted, then broadcast: eager's gradient of the value is the sum of the gradient, in a's dtype
        return _overwriting(a, _new_value(value, expand_to(to(value, a.device, a.dtype), tuple(a.shape))))
    return _overwriting(a, full(tuple(a.shape), value, dtype=a.dtype, device=a.device))


@torchsymbol(name="zero_value", torch_impl=torch.zeros_like)
def zero_value(a):
    from thunder.torch.creation import full

    return _overwriting(a, full(tuple(a.shape), 0, dtype=a.dtype, device=a.device))


def _laid_out_as_impl(value, like):
    if value.stride() == like.stride() and value is not like:  # laid out so already (asked where unknown when traced)
        return value
    return torch.empty_strided(like.shape, like.stride(), dtype=value.dtype, device=value.device).copy_(value)


@torchsymbol(name="laid_out_as", torch_impl=_laid_out_as_impl)
def laid_out_as(value, like):
    """``value`` in memory laid out as ``like`` (its strides, gaps included): the new value of a tensor without a dense
    layout (``x[..., ::2]`` passed in) that an in-place update gives it, as eager writes it into that memory; kernels
    that read it then take eager's (strided) loops, which round their functions differently."""
    from thunder.torch.shapes import clone

    check(tuple(value.shape) == tuple(like.shape), "laid_out_as: the value and the tensor differ in shape")
    return clone(value)


def _detached_update_impl(old, new):
    return new.detach()  # another tensor on the same memory: marking ``new`` non-differentiable leaves it alone


@torchsymbol(name="detached_update", torch_impl=_detached_update_impl)
def detached_update(old, new):
    """``new``'s value with ``old``'s place in the autograd graph: an update made under ``torch.no_grad()`` (or
    through ``detach()``/``.data``) changes a tensor's value but not how gradients flow through it."""
    return value_requiring_grad(new, old.requires_grad)


def value_requiring_grad(value, requires_grad: bool):
    """A new proxy of ``value`` that requires grad as said, whatever ``value`` does (its gradient rule says where
    the gradient goes)."""
    from thunder.core import prims

    with torch.no_grad():
        out = prims.shallow_copy(value)
    out.requires_grad = requires_grad
    return out


def _register_detached_update_rule():
    from thunder.transforms.grad_rules import register_vjp

    @register_vjp(detached_update)
    def rule(old, new):
        return detached_update(old, new), lambda g: (g, None)


_register_detached_update_rule()


def _view_update_impl(new):
    return new


@torchsymbol(name="view_update", torch_impl=_view_update_impl)
def view_update(new):
    """The new value an in-place operation gives a view of another tensor, in the autograd graph
    (``y = x.permute(0, 2, 3, 1); y.relu_()``): ``new`` itself, whose gradient is made contiguous. Eager's autograd
    (``CopySlices``) hands the operation's backward the view's part of the gradient as a contiguous copy, and
    kernels round by memory layout."""
    from thunder.core import prims

    return prims.shallow_copy(new)


def _register_view_update_rule():
    from thunder.torch.shapes import contiguous
    from thunder.transforms.grad_rules import register_vjp

    @register_vjp(view_update)
    def rule(new):
        return view_update(new), lambda g: (contiguous(g),)


_register_view_update_rule()


def _root_of_a_view_update_impl(a, strides):
    return a.view_as(a)  # not ``a`` itself: a value of its own in the autograd graph, whose gradient the rule lays out


@torchsymbol(name="root_of_a_view_update", torch_impl=_root_of_a_view_update_impl)
def root_of_a_view_update(a, strides):
    """``a``, a tensor a view of which an in-place operation is about to update (its memory laid out with
    ``strides``): ``a`` itself, whose gradient from then on is laid out as its memory. Eager's autograd
    (``CopySlices``) copies the gradient into a tensor laid out as the base, writes the view's part into it and passes
    that on; the kernels reading it later (a sum for a broadcast operand) round by that layout."""
    from thunder.core import prims

    return prims.shallow_copy(a)


@torchsymbol(name="root_of_a_retaken_view", torch_impl=_root_of_a_view_update_impl)
def root_of_a_retaken_view(a, strides):
    """``a``, the root of a view taken before ``a`` was updated in place and used after (its memory laid out with
    ``strides``): ``a`` itself, from which the view is taken again; the view's part of ``a``'s gradient is laid out
    as ``a``'s memory. Eager's autograd makes the view's node again as ``AsStridedBackward``, whose gradient is a
    tensor laid out as the base, the view's part written into it; the kernels reading it later (a sum for a
    broadcast operand) round by that layout (generated program 1744)."""
    from thunder.core import prims

    return prims.shallow_copy(a)


def _register_root_rules():
    from thunder.core import prims
    from thunder.transforms.grad_rules import register_vjp

    for sym in (root_of_a_view_update, root_of_a_retaken_view):
        @register_vjp(sym)
        def rule(a, strides, sym=sym):
            return sym(a, strides), lambda g: (prims.in_layout(g, strides, 0, True), None)


_register_root_rules()


def _float_power_check(a, new):
    check(a.dtype is torch.float64 or a.dtype is torch.complex128,
          lambda: f"the base given to float_power_ has dtype {_dtype_name(a.dtype)} but the operation's result requires dtype "
                  f"{_dtype_name(new.dtype)}")


def _dtype_name(dtype):
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}.get(dtype, str(dtype))


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

_RANDOM = ("uniform_", "normal_", "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_", "random_")

_VALUE = {"copy_": copy_value, "fill_": fill_value, "zero_": zero_value}

_METADATA = {"t_": torch.Tensor.t, "transpose_": torch.Tensor.transpose, "swapaxes_": torch.Tensor.swapaxes,
             "swapdims_": torch.Tensor.swapdims, "squeeze_": torch.Tensor.squeeze, "unsqueeze_": torch.Tensor.unsqueeze,
             "as_strided_": torch.Tensor.as_strided}

_REFUSED = {
    "apply_": "Tensor.apply_ runs a Python function on every element's value, which thunder does not know while tracing",
    "map_": "Tensor.map_ runs a Python function on the tensors' values, which thunder does not know while tracing",
    "map2_": "Tensor.map2_ runs a Python function on the tensors' values, which thunder does not know while tracing",
    "set_": "Tensor.set_ replaces a tensor's storage, which thunder's traces cannot express",
    "share_memory_": "Tensor.share_memory_ moves a tensor's storage to shared memory, which is not a traceable operation",
    "resize_as_sparse_": "sparse tensors are not supported by thunder",
    "sparse_resize_": "sparse tensors are not supported by thunder",
    "sparse_resize_and_clear_": "sparse tensors are not supported by thunder",
    "rename_": "Tensor.rename_ names dimensions in place; named tensors are not supported by thunder",
}


def _resize_size(self, *size, memory_format=None):
    return _memory_format_checked(tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size,
                                  memory_format)


def _resize_as_size(self, other, memory_format=None):
    return _memory_format_checked(tuple(other.shape), memory_format)


def _memory_format_checked(size, memory_format):
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        raise NotImplementedError(f"thunder supports Tensor.resize_ with the contiguous memory format only, not "
                                  f"{memory_format}")
    return tuple(size)


# Legacy code (torch.nn.CrossMapLRN2d) allocates with ``x.new()`` and then resizes: see Tracer._resize.
_RESIZES = {"resize_": _resize_size, "resize_as_": _resize_as_size}

_NOT_UPDATES = frozenset({"requires_grad_", "retain_grad", "register_hook"})  # not value updates: handled elsewhere


def _method_objects(name):
    found = [torch._C.TensorBase.__dict__.get(name), torch.Tensor.__dict__.get(name)]
    return [m for m in found if m is not None]


def _clone_apply(fn):
    return InplacePlan(PlanKind.CLONE_APPLY, fn)


def _build() -> dict:
    plans: dict[object, InplacePlan] = {}

    def add(objs, plan):
        for o in objs:
            plans.setdefault(o, plan)

    for obj, sym in INPLACE_TO_SYMBOL.items():
        plans[obj] = InplacePlan(PlanKind.TWIN, sym)
    for name in dir(torch.Tensor):
        if name.startswith("_") or not name.endswith("_") or name in _NOT_UPDATES:
            continue
        objs = _method_objects(name)
        if name in _REFUSED:
            add(objs, InplacePlan(PlanKind.REFUSE, message=_REFUSED[name]))
        elif name in _VALUE:
            add(objs, InplacePlan(PlanKind.VALUE, _VALUE[name]))
        elif name in _METADATA:
            add(objs, InplacePlan(PlanKind.METADATA, _METADATA[name]))
        elif name in _RESIZES:
            add(objs, InplacePlan(PlanKind.RESIZE, _RESIZES[name]))
        elif name in _RANDOM or name == "fill_diagonal_":
            add(objs, _clone_apply(getattr(torch.Tensor, name)))
        elif name == "detach_":
            add(objs, InplacePlan(PlanKind.TWIN, torch.Tensor.detach))
        elif hasattr(torch.Tensor, name[:-1]):
            check_fn = _float_power_check if name == "float_power_" else None
            add(objs, InplacePlan(PlanKind.TWIN, getattr(torch.Tensor, name[:-1]), check=check_fn))
        else:
            add(objs, InplacePlan(PlanKind.REFUSE, message=f"thunder has no out-of-place form of Tensor.{name}"))
    # In-place operators: ``a += b`` is Tensor.__iadd__, computed as Tensor.__add__.
    for name in dir(torch.Tensor):
        if name.startswith("__i") and name.endswith("__") and name not in ("__init__", "__iter__", "__index__",
                                                                         "__init_subclass__", "__invert__"):
            twin = getattr(torch.Tensor, "__" + name[3:], None)
            if twin is not None:
                add(_method_objects(name), InplacePlan(PlanKind.TWIN, twin))
    # torch.relu_, torch.nn.functional.elu_, ...: the function without the underscore.
    for ns in (torch, F):
        for name in dir(ns):
            if name.startswith("_") or not name.endswith("_"):
                continue
            obj = getattr(ns, name)
            if not callable(obj) or isinstance(obj, type):
                continue
            twin = getattr(ns, name[:-1], None)
            functional = getattr(F, name[:-1], None)
            if name in ("fill_", "zero_"):
                plans.setdefault(obj, InplacePlan(PlanKind.VALUE, _VALUE[name]))
            elif callable(functional) and "inplace" in _parameters(functional) and name not in _RANDOM_NAMES:
                # F.elu_, torch.selu_: eager differentiates them from their result, as F.elu(x, inplace=True)
                plans.setdefault(obj, InplacePlan(PlanKind.TWIN, functional, inplace_kwarg=True))
            elif callable(twin):
                plans.setdefault(obj, InplacePlan(PlanKind.TWIN, twin))
            elif name[:-1] in _REFUSED or name in _REFUSED:
                plans.setdefault(obj, InplacePlan(PlanKind.REFUSE, message=_REFUSED.get(name, "")))
    # torch.nn.init: each updates its first argument under torch.no_grad().
    for name in dir(torch.nn.init):
        obj = getattr(torch.nn.init, name)
        if name.endswith("_") and not name.startswith("_") and inspect.isfunction(obj):
            plans[obj] = InplacePlan(PlanKind.CLONE_APPLY, obj, no_grad=True)
    return plans


def _parameters(fn) -> tuple:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


PLANS: dict[object, InplacePlan] = {}


def plan_for(key) -> InplacePlan | None:
    """The in-place plan of a torch callable (``None`` if it does not update a tensor in place)."""
    if not PLANS:
        PLANS.update(_build())
    return PLANS.get(key)


