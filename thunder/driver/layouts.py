"""Memory layouts (strides) of traced tensors, computed only when the program asks.

Traces are functional and the torch executor runs the program's own torch calls, so results never depend
on strides; the *program* can, though: ``x.stride()``, ``x.is_contiguous()``, and which operations alias
their input (``x.contiguous()`` returns ``x`` itself when ``x`` is contiguous, ``reshape`` gives a view when
the strides allow one). Inputs carry their real strides. Any other tensor's strides are found by running
the torch call that produced it on meta tensors laid out like its inputs (recursively, memoized), which is
exactly what eager would give. The inputs whose strides such an answer depended on are remembered, and
the prologue checks their strides on every call (see ``observed``).
"""
from __future__ import annotations

import torch

from thunder.core.extents import is_symbolic_shape
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.pytree import tree_leaves, tree_map


class UnknownLayout(Exception):
    """The strides of a tensor cannot be computed (its producer has no meta kernel)."""


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for s in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


class Layouts:
    def __init__(self):
        self.inputs: dict[str, tuple] = {}  # input name -> (strides, storage offset)
        self.producer: dict[str, tuple] = {}  # name -> (torch callable, args, kwargs, flat output index)
        self.memo: dict[str, tuple] = {}  # name -> (strides, storage offset, input names it depends on)
        self.observed: set[str] = set()  # inputs whose layout an answer depended on
        self.value_of: dict[str, TensorProxy] = {}  # a new value of a tensor (an in-place update) -> the tensor

    def add_input(self, proxy: TensorProxy, tensor: torch.Tensor):
        self.inputs[proxy.name] = (tuple(tensor.stride()), tensor.storage_offset())

    def add_output(self, fn, args, kwargs, out):
        if fn is None:
            return
        for i, o in enumerate(tree_leaves(out)):
            if isinstance(o, TensorProxy) and o.name not in self.inputs:
                self.producer.setdefault(o.name, (fn, args, kwargs, i))

    def add_value(self, value: TensorProxy, tensor: TensorProxy):
        """``value`` is ``tensor``'s value after an in-place update (of it, or of a tensor it shares memory with): laid
        out as ``tensor``, whatever computed it."""
        if value.name != tensor.name and tuple(value.shape) == tuple(tensor.shape):
            self.value_of[value.name] = tensor
            self.memo.pop(value.name, None)

    # -- queries ---------------------------------------------------------------------------
    def meta(self, proxy: TensorProxy) -> torch.Tensor:
        """A meta tensor with ``proxy``'s shape, dtype and strides; marks the inputs it depended on as observed."""
        strides, offset, deps = self._layout(proxy)
        self.observed |= deps
        return _empty_strided(proxy, strides, offset)

    def peek(self, proxy: TensorProxy) -> torch.Tensor:
        """``meta`` without marking the inputs it depends on as observed: for choices that stay right (if slower or
        rounded otherwise) whatever the layout of a later call."""
        strides, offset, _ = self._layout(proxy)
        return _empty_strided(proxy, strides, offset)

    def replayed(self, proxy: TensorProxy, fn, args, kwargs, index: int) -> torch.Tensor:
        """A meta tensor laid out as output ``index`` of ``fn(*args, **kwargs)`` (``proxy``'s shape) would be, without
        marking inputs observed: the layout an operation computing ``proxy`` gives it."""
        strides, offset, _ = self._replay(proxy, fn, args, kwargs, index)
        return _empty_strided(proxy, strides, offset)

    def _layout(self, proxy: TensorProxy) -> tuple:
        name = proxy.name
        known = self.inputs.get(name)
        if known is not None:
            return known[0], known[1], frozenset((name,))
        memo = self.memo.get(name)
        if memo is not None:
            return memo
        if proxy.ndim == 0:
            return (), 0, frozenset()  # the only layout (whatever made it)
        tensor = self.value_of.get(name)
        producer = self.producer.get(name)
        if tensor is not None:
            result = self._layout(tensor)
        elif producer is None:
            result = (contiguous_strides(proxy.shape), 0, frozenset())
        else:
            result = self._replay(proxy, *producer)
        self.memo[name] = result
        return result

    def _replay(self, proxy, fn, args, kwargs, index) -> tuple:
        deps: set[str] = set()

        def to_meta(x):
            if isinstance(x, TensorProxy):
                strides, offset, d = self._layout(x)
                deps.update(d)
                return _empty_strided(x, strides, offset)
            if isinstance(x, NumberProxy):
                return x.value
            return x

        margs, mkwargs = tree_map(to_meta, (args, kwargs))
        if not any(isinstance(x, TensorProxy) for x in tree_leaves((args, kwargs))):
            mkwargs = {**mkwargs, "device": "meta"}  # a factory (torch.rand(4, 4)): run for real, it would draw
        try:
            with torch._C.DisableTorchFunction():
                out = fn(*margs, **mkwargs)
        except Exception as e:  # noqa: BLE001 - any failure means: layout unknown
            raise UnknownLayout(f"thunder cannot compute the strides of {proxy.name}: running "
                                f"{getattr(fn, '__name__', fn)} on meta tensors failed ({e})") from e
        leaves = tree_leaves(out)
        t = leaves[index] if index < len(leaves) else None
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(proxy.shape):
            return contiguous_strides(proxy.shape), 0, frozenset(deps)
        return tuple(t.stride()), t.storage_offset(), frozenset(deps)

    def aliases(self, fn, args, kwargs, out_index: int, base: TensorProxy) -> bool:
        """Whether output ``out_index`` of ``fn(*args, **kwargs)`` shares memory with ``base``, as in eager."""
        metas = {}

        def to_meta(x):
            if isinstance(x, TensorProxy):
                metas.setdefault(x.name, self.meta(x))
                return metas[x.name]
            if isinstance(x, NumberProxy):
                return x.value
            return x

        try:
            margs, mkwargs = tree_map(to_meta, (args, kwargs))
            mbase = metas.get(base.name)  # the first tensor argument (einsum's operand follows its equation)
            with torch._C.DisableTorchFunction():
                out = fn(*margs, **mkwargs)
        except Exception:  # noqa: BLE001 - no meta kernel, or a layout unknown: assume a fresh tensor
            return False
        leaves = tree_leaves(out)
        t = leaves[out_index] if out_index < len(leaves) else None
        return isinstance(t, torch.Tensor) and isinstance(mbase, torch.Tensor) and torch._C._is_alias_of(t, mbase)


def _empty_strided(proxy: TensorProxy, strides, offset) -> torch.Tensor:
    shape = tuple(proxy.shape)
    if is_symbolic_shape(shape):
        raise UnknownLayout(f"thunder cannot compute the strides of {proxy.name}: its shape holds extents known only "
                            "at run time")
    t = torch.empty_strided(shape, strides, dtype=proxy.dtype, device="meta")
    if offset:
        t = t.as_strided(shape, strides, offset)
    return t
