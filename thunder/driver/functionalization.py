"""Functionalization: in-place updates and aliasing while tracing.

[Note: in-place updates]
Traces are functional: every value is defined once. The program's tensors, however, are mutable and may
share memory. While tracing, thunder keeps the program's view of memory in this module:

- A *root* is a tensor that owns its memory: an input (argument, parameter, buffer, captured tensor) or the
  result of an operation that is not a view. A *view* is a tensor made by a view operation (``x[0]``,
  ``x.view(...)``, ``x.t()``, ``x.detach()``, a ``reshape`` that aliases, ...) from a root, possibly
  through other views: it is described by its root and the chain of view steps from the root.
- ``x.add_(y)`` computes the new value out of place (see thunder/torch/inplace.py) and *rebinds* ``x``:
  the Python object ``x`` now stands for the new value. If ``x`` is a view, the new value is written into
  its root through the inverse of each view step (``setitem`` for slices and indexing, ``reshape`` back,
  the inverse permutation, ``diagonal_scatter``...), so the root gets a new value.
- A view whose root got a new value after the view was taken is regenerated from the root's current value
  by replaying its view steps, the first time the program uses it again: it sees the update, as in eager.
- At the end of the trace, each input root that got a new value is written back into the caller's tensor
  (``prims.copy_``, which returns the written tensor). Outputs that are such inputs are the input tensors
  themselves, and outputs that are views of them are regenerated from the written-back input, so they
  alias the caller's tensor as in eager. Passes must keep reads of an input after its ``copy_`` after it:
  they read the ``copy_``'s result, which makes the order a data dependency.
- An update of a view that autograd records reads the view taken again from its root at the update, unless
  the view was just taken: eager's ``CopySlices`` takes it there, so the view's part of the root's gradient
  comes first among the parts of uses since (``t[:, :2] += t.mean()``: the update's part, then the mean's),
  where the view taken earlier would give it last.
- The updated view itself is taken again from its root's new value at the update, as eager's autograd makes its
  node again there. ``x[key] = v`` updates a view of ``x`` in eager where the key selects part of it (an integer,
  ``None``, a slice of part of a dimension): a view ``x`` is then taken again where the program next uses it, as
  eager makes its node again at that use, so its part of the root's gradient comes among those of the uses in
  between in eager's order (``t = y[:]; t[:, :1] = 0; z = y * 2; t.sum()``: the sum's part, then the product's).
- An update made where autograd does not record it (under ``torch.no_grad()``, or through ``detach()`` or
  ``.data``) changes the value but not how gradients flow: the new value is ``detached_update(old, new)``,
  which is ``new`` with ``old``'s gradient.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.torch.data_dependent import setitem_impl


@dataclasses.dataclass(frozen=True)
class ViewStep:
    """One view operation: output ``index`` of ``sym(base, *args, **kwargs)`` (``index`` None: the only output)."""

    sym: Any
    args: tuple
    kwargs: dict
    index: int | None
    chain: tuple  # the primitives (bound symbols) that compute this output from the base, in order
    # "view", "detach", "opaque" (an aliasing op thunder cannot write through) or "custom_function" (an output of a
    # custom autograd.Function that is a view, or an input returned as is: eager refuses to update it, or to use it
    # once its base is updated)
    kind: str = "view"
    aliases: Any = None  # for ops that alias only when strides allow (reshape): a function deciding it, when needed
    base_position: int = 0  # where the base goes among the arguments (einsum's operand follows its equation)

    def apply(self, base):
        if self.kind == "custom_function":
            raise RuntimeError(_custom_function_view_error(self, "its base or another view of its base has been "
                                                                 "modified inplace"))
        if self.kind == "detach":
            from thunder.torch.shapes import detach

            return detach(base)
        p = self.base_position
        out = self.sym(*self.args[:p], base, *self.args[p:], **self.kwargs)
        return out if self.index is None else out[self.index]

    def scatter(self, base, value):
        """``base``'s new value when this view of it gets the new value ``value``."""
        if self.kind == "custom_function":
            raise RuntimeError(_custom_function_view_error(self, "is being modified inplace"))
        if self.kind == "detach":
            from thunder.torch.inplace import detached_update

            return detached_update(base, value)
        if self.sym.name == "getitem" and not self.kwargs and self.index is None:
            from thunder.torch.shapes import setitem

            return setitem(base, self.args[0], value)  # x[key].add_(1) writes back as x[key] = new value
        if self.kind == "opaque":
            raise NotImplementedError(
                f"thunder cannot update a tensor made by {self.sym.name} in place: the update would have to be "
                "written into the tensor it is a view of. Update a clone() of it, or update the original tensor.")
        values = [base]
        for b in self.chain[:-1]:
            values.append(_replay(b, values[-1]))
        for b, c in zip(reversed(self.chain), reversed(values)):
            value = _inverse(b, c, value)
        return value


_DETACHED_HISTORY = ("thunder does not support this: {}. In eager the detach()ed tensor then has a gradient history "
                     "of its own over memory another tensor changes, which thunder does not model. Update a clone() "
                     "of it instead")


def _custom_function_view_error(step, what) -> str:
    return (f"Output {step.index} of {step.sym.name} is a view and {what}. This view was created inside a custom "
            "Function (or because an input was returned as-is) and the autograd logic to handle view+inplace would "
            "override the custom backward associated with the custom Function, leading to incorrect gradients. This "
            "behavior is forbidden. You can fix this by cloning the output of the custom Function.")


def _replay(bsym, base):
    return bsym.sym(base, *bsym.args[1:], **bsym.kwargs)


EXPANDED_UPDATE = ("thunder cannot update {what} in place: more than one element of that tensor refers to a single memory "
                   "location (stride 0 in a dimension of more than one element, as `expand` gives), and eager's update "
                   "of one element reaches every element sharing its memory, which thunder does not model. Update a "
                   "clone() of it (or of the tensor before `expand`) instead")


def _inverse(bsym, base, value):
    """Writes ``value`` (the new value of ``bsym``'s output) into ``base`` (its input)."""
    from thunder.torch import shapes

    name = bsym.sym.name
    if name in ("reshape", "squeeze", "shallow_copy", "in_layout"):
        return shapes.reshape(value, tuple(base.shape)) if tuple(value.shape) != tuple(base.shape) else value
    if name == "broadcast_in_dim":
        if value.numel() != base.numel():  # a view of an expanded tensor updated (the tensor itself: see Tracer.inplace)
            raise NotImplementedError(EXPANDED_UPDATE.format(what="a view of an expanded tensor"))
        return shapes.reshape(value, tuple(base.shape))
    if name == "transpose":
        perm = bsym.args[1]
        inverse = [0] * len(perm)
        for i, p in enumerate(perm):
            inverse[p] = i
        return prims.transpose(value, tuple(inverse))
    if name == "slice_prim":
        starts, ends = bsym.args[1], bsym.args[2]
        steps = bsym.args[3] if len(bsym.args) > 3 and bsym.args[3] is not None else [1] * len(starts)
        # an end the view's decomposition computed from run-time extents (``x.narrow(0, 1, n)``: ``1 + n``) is defined
        # only inside it: the end is computed again here, from the new value's extent
        ends = [e if type(e) is int else s + (n - 1) * st + 1 for s, e, st, n in zip(starts, ends, steps, value.shape)]
        key = tuple(slice(s, e, st) for s, e, st in zip(starts, ends, steps))
        return shapes.setitem(base, key, value)
    scatter = _FALLBACK_SCATTERS.get(getattr(bsym.sym, "torch_impl", None))
    if scatter is not None:
        from thunder.torch.fallback import fallback_call

        return fallback_call(scatter, (base, value) + tuple(bsym.args[1:]), dict(bsym.kwargs))
    raise NotImplementedError(
        f"thunder cannot write an in-place update back through {bsym.sym.id}; update a clone() of the view, or the "
        "tensor it was taken from")


def as_strided_scatter(base, src, size, stride, storage_offset=None):
    """``torch.as_strided_scatter``'s values, with a correct gradient for ``base``: torch's (2.13) passes the gradient
    through the elements written and stops it everywhere else, the reverse of what it should."""
    with torch.no_grad():
        written = torch.as_strided_scatter(torch.zeros_like(base, dtype=torch.bool),
                                           torch.ones(size, dtype=torch.bool, device=base.device), size, stride,
                                           storage_offset)
    placed = torch.as_strided_scatter(torch.zeros_like(base), src, size, stride, storage_offset)
    return torch.where(written, placed, base)


_FALLBACK_SCATTERS = {operator.getitem: setitem_impl,  # basic indexing of run-time extents (``t[0]`` of ``f32[i0]``)
                      torch.diagonal: torch.diagonal_scatter, torch.Tensor.diagonal: torch.diagonal_scatter,
                      torch.select: torch.select_scatter, torch.Tensor.select: torch.select_scatter,
                      torch.Tensor.as_strided: as_strided_scatter, torch.as_strided: as_strided_scatter}


def view_chain(bsym, base: TensorProxy, out: TensorProxy) -> tuple | None:
    """The primitives that compute ``out`` from ``base`` in ``bsym``'s decomposition, in order (None: not a chain)."""
    if not bsym.subsymbols:
        return (bsym,) if any(a is base for a in bsym.flat_args) else None
    leaves = []
    _leaf_bsyms(bsym, leaves)
    producer = {}
    for b in leaves:
        for o in b.flat_outs:
            producer[o.name] = b
    chain = []
    current = out
    while current is not base:
        b = producer.get(current.name)
        if b is None or not b.args or not isinstance(b.args[0], TensorProxy):
            return None
        chain.append(b)
        current = b.args[0]
    return tuple(reversed(chain))


def _leaf_bsyms(bsym, out):
    for s in bsym.subsymbols:
        if s.subsymbols:
            _leaf_bsyms(s, out)
        else:
            out.append(s)


@dataclasses.dataclass(frozen=True)
class ViewOf:
    root: str  # the key of the root tensor
    steps: tuple  # ViewStep, from the root
    keys: tuple  # the key of the tensor each step gives (the last: this view's)

    @property
    def of_memory_only(self) -> bool:
        """Whether a step detaches (``detach()``, ``.data``): autograd then sees no view of the root, only shared memory."""
        return any(step.kind == "detach" for step in self.steps)

    @property
    def read_back(self) -> bool:
        """Whether every step is a view op thunder replays: the view's value after an update is read back from its
        root's (eager's strides); otherwise it keeps the value the update computed."""
        return all(step.kind == "view" for step in self.steps)


class Aliases:
    """Which traced tensors share memory, and the current value of each (see [Note: in-place updates])."""

    def __init__(self):
        self.views: dict[str, ViewOf] = {}  # key of a view -> how it is made from its root
        self.current: dict[str, TensorProxy] = {}  # key of a root -> its value now (absent: its original value)
        self.originals: dict[str, TensorProxy] = {}  # key -> the proxy the program first saw for it
        self.version: dict[str, str] = {}  # key of a view -> the name of the root value its value is computed from
        self.view_values: dict[str, TensorProxy] = {}  # key of a view -> its value computed from `version`
        self.key_of: dict[str, str] = {}  # name of a value proxy -> key of the tensor it is the value of
        # key of a view taken in no_grad mode of a tensor requiring grad (or of such a view) -> (its root, the name of
        # the root's value then): eager forbids using it in autograd once the root changed (see Tracer._check_no_grad_views)
        self.no_grad_views: dict[str, tuple[str, str]] = {}
        # called with (key, value proxy) when a tensor gets a new value through an update: its memory, and so its
        # layout, is the tensor's own (the frontend's layouts follow it)
        self.on_new_value = lambda key, value: None
        # called with (key of a root, a view's new value, a function computing the root's from it) when a view is updated:
        # the frontend lays the value out as the root's memory is (see Tracer._write_root)
        self.write_root = lambda key, value, compute: compute()
        # called with (key of a root, its value) when a view taken before the root's update is taken again from it:
        # the value to take it from (see Tracer._root_of_a_retaken_view)
        self.retaken_root = lambda key, value: value

    def key(self, proxy: TensorProxy) -> str:
        return self.key_of.get(proxy.name, proxy.name)

    def root_value(self, root: str) -> TensorProxy:
        value = self.current.get(root)
        return value if value is not None else self.originals[root]

    def is_updated(self, root: str) -> bool:
        return root in self.current

    def _view(self, key: str) -> ViewOf | None:
        """The view ``key`` is, deciding now whether steps that alias only for some strides (reshape) do alias."""
        view = self.views.get(key)
        if view is None or all(step.aliases is None for step in view.steps):
            return view
        steps, last_copy = [], None
        for i, step in enumerate(view.steps):
            if step.aliases is not None:
                if not step.aliases():
                    last_copy = i
                step = dataclasses.replace(step, aliases=None)
            steps.append(step)
        self.views[key] = ViewOf(view.root, tuple(steps), view.keys)
        if last_copy is not None:  # a copy after all: the tensor it gives is a root, and this a view of it (or it)
            self._make_root(view.keys[last_copy])
        return self.views.get(key)

    def _make_root(self, key: str):
        """The tensor ``key``, found to be a copy, is a root of its own; the views made from it, views of it."""
        self.views.pop(key, None)
        value = self.root_value(key)
        for k, v in list(self.views.items()):
            if key in v.keys:
                i = v.keys.index(key)
                self.views[k] = ViewOf(key, v.steps[i + 1:], v.keys[i + 1:])
                self.version[k] = value.name

    def resolve(self, proxy: TensorProxy) -> TensorProxy:
        """The value the program's tensor ``proxy`` has now."""
        key = self.key(proxy)
        view = self.views.get(key)
        if view is not None and self.version[key] != self.root_value(view.root).name:
            view = self._view(key)
        if view is None:
            return self.current.get(key, proxy)
        root_value = self.root_value(view.root)
        if self.version[key] == root_value.name:
            return self.view_values.get(key, self.originals[key])
        value, steps = root_value, view.steps
        detached = max((i for i, step in enumerate(steps) if step.kind == "detach"), default=len(steps) - 1)
        if detached < len(steps) - 1:  # a view of a detach()ed tensor is autograd's view of it, not of the root: it
            value = self.resolve(self.originals[view.keys[detached]])  # sees that tensor's gradient history
            steps = steps[detached + 1:]
        else:
            value = self.retaken_root(view.root, value)
        for step in steps:
            value = step.apply(value)
        if self.view_values.get(key, self.originals[key]).requires_grad and not value.requires_grad:
            raise NotImplementedError(_DETACHED_HISTORY.format(
                f"{key}, a detach()ed tensor (or a view of one) updated in place with a value that requires grad, "
                f"is read after {view.root}, the tensor it shares memory with, changed"))
        self._set_view_value(key, root_value, value)
        return value

    def _set_view_value(self, key, root_value, value):
        self.version[key] = root_value.name
        self.view_values[key] = value
        self.key_of[value.name] = key
        self.on_new_value(key, value)

    def add_view(self, base: TensorProxy, out: TensorProxy, step: ViewStep):
        """Records that ``out`` is a view of ``base`` (a current value) made by ``step``."""
        base_key = self.key(base)
        parent = self.views.get(base_key)
        root = parent.root if parent is not None else base_key
        self.originals.setdefault(root, base)
        steps = (parent.steps if parent is not None else ()) + (step,)
        keys = (parent.keys if parent is not None else ()) + (out.name,)
        self.views[out.name] = ViewOf(root, steps, keys)
        self.originals[out.name] = out
        self.version[out.name] = self.root_value(root).name
        if step.kind == "view" and (base_key in self.no_grad_views
                                    or not torch.is_grad_enabled() and base.requires_grad):
            self.no_grad_views[out.name] = self.no_grad_views.get(base_key, (root, self.root_value(root).name))

    def taken_in_no_grad_mode(self, proxy: TensorProxy) -> bool:
        """Whether ``proxy`` is a view taken in no_grad mode (a maybe-view found to be a copy is not)."""
        key = self.key(proxy)
        return key in self.no_grad_views and self._view(key) is not None

    def changed_since_taken_in_no_grad_mode(self, proxy: TensorProxy) -> bool:
        """Whether ``proxy`` is a view taken in no_grad mode whose root got a new value since (in any mode)."""
        root, value = self.no_grad_views.get(self.key(proxy), (None, None))
        return root is not None and root in self.originals and self.root_value(root).name != value

    def update(self, proxy: TensorProxy, value: TensorProxy, *, retake: bool = True):
        """The program's tensor ``proxy`` gets the new value ``value`` (same shape and dtype). ``retake``: a view
        ``proxy`` (of replayable steps) is taken again from its root's new value now, as eager's autograd does for a
        view it updates; otherwise where the program next uses it, as for a view of it that eager updates
        (``x[0] = v``)."""
        key = self.key(proxy)
        view = self._view(key)
        if view is None:
            self.originals.setdefault(key, proxy)
            self.current[key] = value
            self.key_of[value.name] = key
            self.on_new_value(key, value)
            return
        if value.requires_grad and view.read_back:
            from thunder.torch.inplace import view_update

            value = view_update(value)
        new = self.write_root(view.root, value, lambda: self._scattered(view, value))
        self.current[view.root] = new
        self.key_of[new.name] = view.root
        self.on_new_value(view.root, new)
        if view.read_back and not retake:
            return
        if view.read_back or (not value.requires_grad and all(step.kind in ("view", "detach") for step in view.steps)):
            # the view of the new root: eager's strides and memory (a view the program returns is a view of the root
            # it returns, ``t.detach()[0]`` too), not the op's output. A detached view updated with a value that
            # requires grad has a gradient history of its own (``d = x.detach(); d.add_(w)``): it keeps the value.
            value = self.regenerate_from(view, new)
        self._set_view_value(key, new, value)

    def _scattered(self, view: ViewOf, value: TensorProxy) -> TensorProxy:
        """The new value of ``view``'s root when the view gets the value ``value``."""
        bases = [self.root_value(view.root)]
        for step in view.steps[:-1]:
            bases.append(step.apply(bases[-1]))
        new = value
        for i, (step, base) in enumerate(zip(reversed(view.steps), reversed(bases))):
            if step.kind == "detach" and i and new.requires_grad:
                raise NotImplementedError(_DETACHED_HISTORY.format(
                    f"a view of {view.keys[-i - 1]}, a detach()ed tensor, is updated in place with a value that "
                    "requires grad"))
            new = step.scatter(base, new)
        if view.of_memory_only:  # autograd records none of it: the root keeps its place
            from thunder.torch.inplace import detached_update

            new = detached_update(bases[0], new)
        return new

    def view_of(self, proxy: TensorProxy) -> ViewOf | None:
        return self._view(self.key(proxy))

    def has_views(self, root: str) -> bool:
        return any(self._view(k) is not None for k, v in list(self.views.items()) if v.root == root)

    def retake(self, proxy: TensorProxy) -> TensorProxy:
        """The view ``proxy`` (every step replayable) taken again from its root's current value, as its value now."""
        key = self.key(proxy)
        view = self._view(key)
        root_value = self.root_value(view.root)
        value = self.regenerate_from(view, root_value)
        self._set_view_value(key, root_value, value)
        return value

    def regenerate_from(self, view: ViewOf, root_value: TensorProxy) -> TensorProxy:
        value = root_value
        for step in view.steps:
            value = step.apply(value)
        return value
