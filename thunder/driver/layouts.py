"""Memory layouts (strides) of traced tensors, computed only when the program asks.

Traces are functional and the torch executor runs the program's own torch calls, so results do not depend
on strides, except where an operation reads memory by strides (``as_strided``: see ``Tracer._in_eager_layout``) or
draws random numbers into a tensor laid out like another (dropout's mask: ``empty_like_strides``); the *program* can,
though: ``x.stride()``, ``x.is_contiguous()``, and which operations alias
their input (``x.contiguous()`` returns ``x`` itself when ``x`` is contiguous, ``reshape`` gives a view when
the strides allow one). Inputs carry their real strides. Any other tensor's strides are found by running
the torch call that produced it on meta tensors laid out like its inputs (recursively, memoized), which is
exactly what eager would give. The inputs whose strides such an answer depended on are remembered, and
the prologue checks their strides on every call (see ``observed``).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import types

import torch

from thunder.core.extents import is_runtime, is_symbolic_shape, poly_of
from thunder.core.proxies import TensorProxy, NumberProxy, known_value, layout_hint, set_layout_hint
from thunder.core.pytree import tree_leaves, tree_map
from thunder.driver import kernel_layouts


class UnknownLayout(Exception):
    """The strides of a tensor cannot be computed (its producer has no meta kernel)."""


class _Infeasible(Exception):
    """Trial values of run-time extents that give some extent a negative value."""


def _untraced(method):
    """A query run with torch's Python-level interception off: its meta tensors are thunder's own, not the program's,
    even where the tracing mode is active (thunder's handling of a custom ``autograd.Function`` runs under it)."""

    @functools.wraps(method)
    def query(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return method(*args, **kwargs)

    return query


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for s in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


class EagerOutputLayouts:
    """The strides eager gives the tensors a program returns, computed only when a fusion executor asks about one of
    them (a meta replay of their producers, without marking inputs observed: a stale answer is only a layout); the
    tracer's layouts are let go once the compilation is done (``release``).

    In the traced program's own trace (not ``renamed``) it also answers for the intermediate values the tracer
    computed, by name: a value a region hands to unfused operations gives them eager's layout to follow (an output
    updated in place through an alias of such a value is laid out as the value)."""

    def __init__(self, layouts: "Layouts", outputs, holder: list | None = None, intermediates: bool = True):
        self._holder = holder if holder is not None else [layouts, set()]  # shared with the renamed copies
        self._outputs = {p.name: p for p in outputs if isinstance(p, TensorProxy) and not is_symbolic_shape(p.shape)}
        self._intermediates = intermediates
        # the names of the tensors the program sees returned (by this trace's names)
        self.returned = frozenset(p.name for p in outputs if isinstance(p, TensorProxy))
        self._values: dict = {}  # see ``renamed``

    def renamed(self, names: dict, values: dict | None = None) -> "EagerOutputLayouts":
        """The same layouts for a trace that calls the outputs otherwise (``names``: old name -> new name; a forward
        trace's outputs, which autodiff named anew), for those alone; ``values``: the traced program's values by
        the new trace's names, which ``value_strides`` answers for."""
        copy = EagerOutputLayouts(None, (), self._holder, intermediates=False)
        copy._outputs = {names[n]: p for n, p in self._outputs.items() if n in names}
        copy.returned = frozenset(names[n] for n in self.returned if n in names)
        copy._values = dict(values or {})
        return copy

    def value_strides(self, value: TensorProxy, kept: bool = False) -> tuple | None:
        """``strides``, for any value of the traced program too: in a renamed trace (a forward), those of the
        ``values`` it was given. Where a fusion executor asks for a value it would rather not lay out as eager does
        (a saved one), it asks ``strides``."""
        proxy = self._values.get(value.name)
        if self._intermediates or proxy is None or value.name in self._outputs:
            return self.strides(value, kept)
        as_traced = EagerOutputLayouts(None, (), self._holder)  # which answers by the traced program's names
        return as_traced.strides(proxy, kept) if tuple(proxy.shape) == tuple(value.shape) else None

    def strides(self, value: TensorProxy, kept: bool = False) -> tuple | None:
        """Eager's strides of ``value`` where it is a returned tensor (by its name in this trace) or, in the traced
        program's trace, a value the tracer computed; else None. ``kept``: a fused region will write ``value`` with
        these strides, which hold for the layouts of the inputs traced: those inputs join ``kept_for``."""
        proxy, layouts = self._outputs.get(value.name), self._holder[0]
        if proxy is None and self._intermediates and not is_symbolic_shape(value.shape):
            proxy = value
        if proxy is None or layouts is None or proxy.name in layouts.inputs or tuple(proxy.shape) != tuple(value.shape):
            return None
        try:
            strides = tuple(layouts.peek(proxy).stride())
        except UnknownLayout:
            strides = layouts.peek_for_any_extents(proxy)
        except Exception:  # noqa: BLE001 - the executor's own layout
            return None
        if strides is None or len(strides) != len(value.shape):
            return None
        # (a fresh tensor of fewer dimensions is laid out alike for any operands; a view of one is not: fused 31202)
        if kept and (len(strides) >= 2 or layouts.made_as_view(proxy)):
            self._holder[1] |= layouts.inputs_laid_out_after(proxy)
        return strides

    @property
    def kept_for(self) -> frozenset:
        """The inputs whose layouts the strides of values fused regions write as eager lays them out depend on: the
        prologue checks their strides (``check_strides``), and another layout traces the program again, where
        eager's layouts are other ones (a region compiled for another input layout would keep the traced ones)."""
        return frozenset(self._holder[1])

    def release(self) -> None:
        self._holder[0] = None


class Layouts:
    def __init__(self):
        self.inputs: dict[str, tuple] = {}  # input name -> (strides, storage offset)
        self.producer: dict[str, tuple] = {}  # name -> (torch callable, args, kwargs, flat output index)
        self.memo: dict[str, tuple] = {}  # name -> (strides, storage offset, input names it depends on)
        self.observed: set[str] = set()  # inputs whose layout an answer depended on
        # inputs whose strides (not where they start) a choice depended on: the prologue checks them (``check_strides``)
        self.strides_observed: set[str] = set()
        self.value_of: dict[str, TensorProxy] = {}  # a new value of a tensor (an in-place update) -> the tensor
        self.trial: dict | None = None  # run-time extent (root name) -> a value tried for it (see ``aliases``)
        # (fn, its meta arguments' metadata, output index, device type) -> (shape, strides, storage offset) of that
        # output: a model's repeated blocks replay the same operations on the same layouts (see ``_meta_key``)
        self.replays: dict = {}

    def add_input(self, proxy: TensorProxy, tensor: torch.Tensor):
        self.inputs[proxy.name] = (tuple(tensor.stride()), tensor.storage_offset())
        if not tensor.is_contiguous() and layout_hint(proxy) is None:
            set_layout_hint(proxy, tuple(tensor.stride()))  # a region reading it compiles for it first

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

    def computed_by(self, proxy: TensorProxy, fn, args, kwargs, index: int):
        """``proxy`` is laid out as output ``index`` of ``fn(*args, **kwargs)`` gives it (not as recorded before)."""
        self.producer[proxy.name] = (fn, args, kwargs, index)
        self.memo.pop(proxy.name, None)

    # -- queries ---------------------------------------------------------------------------
    @_untraced
    def meta(self, proxy: TensorProxy) -> torch.Tensor:
        """A meta tensor with ``proxy``'s shape, dtype and strides; marks the inputs it depended on as observed."""
        strides, offset, deps = self._layout(proxy)
        self.observed |= deps
        return self._empty(proxy, strides, offset)

    @_untraced
    def inputs_laid_out_after(self, proxy: TensorProxy) -> frozenset:
        """The inputs the strides of ``proxy`` follow, without marking them observed."""
        try:
            return self._layout(proxy)[2]
        except Exception:  # noqa: BLE001 - strides answered for any run-time extents: every input upstream
            return frozenset(p.name for p, _ in self._upstream([proxy]) if p.name in self.inputs)

    @_untraced
    def peek(self, proxy: TensorProxy) -> torch.Tensor:
        """``meta`` without marking the inputs it depends on as observed: for choices that stay right (if slower or
        rounded otherwise) whatever the layout of a later call."""
        strides, offset, _ = self._layout(proxy)
        return self._empty(proxy, strides, offset)

    @_untraced
    def peek_for_any_extents(self, proxy: TensorProxy) -> tuple | None:
        """``peek``'s strides of ``proxy``, a tensor of static shape computed from tensors whose shapes hold extents
        known only at run time (``x[mask][0]``), where they are the same for every value of those extents tried (see
        ``aliases``); None where they differ or cannot be computed."""
        names = sorted(self._upstream_roots([proxy]))
        answers = set()
        for trial in [dict(zip(names, itertools.count(11, 2)))] + [dict.fromkeys(names, v) for v in (0, 1, 2)]:
            try:
                with self._trying(trial):
                    answers.add(tuple(self.peek(proxy).stride()))
            except (_Infeasible, UnknownLayout):
                continue
            except Exception:  # noqa: BLE001 - no meta kernel for these values: no answer from them
                continue
        return answers.pop() if names and len(answers) == 1 else None

    @_untraced
    def empty_like_strides(self, proxy: TensorProxy) -> tuple | None:
        """The strides ``torch.empty_like`` gives a tensor like ``proxy`` in eager; None where unknown. Marks no input
        observed: a stale answer draws other random numbers than eager, still a valid draw (see [Note: random draws in
        eager's memory order] in thunder/core/proxies.py)."""
        if is_symbolic_shape(tuple(proxy.shape)):
            return None
        try:
            return kernel_layouts.empty_like_strides(self.peek(proxy))
        except Exception:  # noqa: BLE001 - UnknownLayout, or a value the tracer never saw made
            return None

    @_untraced
    def follows(self, operand: TensorProxy, fn, args, kwargs, index: int) -> bool:
        """Whether output ``index`` of ``fn(*args, **kwargs)`` is laid out as ``operand``, one of its arguments, also
        where ``operand`` comes laid out otherwise (its dimensions in reverse order): as an elementwise result
        follows its operands, where ``masked_fill`` or ``scatter`` out of place write a contiguous result. True where
        it cannot tell (no meta kernel for it, shapes known only at run time)."""
        shape = tuple(operand.shape)
        if len(shape) < 2 or is_symbolic_shape(shape):
            return True
        other = torch.empty(shape[::-1], dtype=operand.dtype, device="meta").permute(*reversed(range(len(shape))))
        try:
            margs, mkwargs = self._peeked(args, kwargs, operand, other)
            # (an update's new value has the shape of the tensor it updates: ``operand``'s)
            strides = None
            if fn in kernel_layouts.RULES:
                with kernel_layouts.KernelLayouts(operand.device.type):
                    strides = kernel_layouts.strides(fn, shape, operand, margs, mkwargs, operand)
            if strides is None:
                out = self._run_meta(fn, margs, mkwargs, index, operand.device.type)
                strides = out[1] if out is not None and out[0] == shape else None
        except Exception:  # noqa: BLE001 - any failure: no answer
            return True
        return strides is None or all(n == 1 or a == b for n, a, b in zip(shape, strides, other.stride()))

    @_untraced
    def made_as_view(self, proxy: TensorProxy) -> bool:
        """Whether eager makes ``proxy`` a view of another tensor (or returns that tensor), whose layout its strides
        then follow whatever its own dimensions: ``x.unbind(1)[0]`` has strides (2,) where a (5, 2) ``x`` is
        contiguous, (1,) where it is transposed. True where thunder cannot tell."""
        if proxy.name in self.value_of:
            return True
        producer = self.producer.get(proxy.name)
        if producer is None:
            return proxy.name in self.inputs
        fn, args, kwargs, index = producer
        if not any(isinstance(x, TensorProxy) for x in tree_leaves((args, kwargs))):
            return False  # a factory's new tensor
        try:
            margs, mkwargs = self._peeked(args, kwargs)
            with torch._C.DisableTorchFunction(), kernel_layouts.KernelLayouts(proxy.device.type):
                t = tree_leaves(fn(*margs, **mkwargs))[index]
        except Exception:  # noqa: BLE001 - no meta kernel, run-time extents: cannot tell
            return True
        return not isinstance(t, torch.Tensor) or t._is_view() or any(t is m for m in tree_leaves((margs, mkwargs)))

    def _peeked(self, args, kwargs, operand: TensorProxy | None = None, other: torch.Tensor | None = None) -> tuple:
        """``(args, kwargs)`` for a meta replay: ``peek``'s meta tensors for tensors (``other`` for ``operand``), values
        the trace knows, and numbers."""

        def to_meta(x):
            if operand is not None and x is operand:
                return other
            if known_value(x) is not None:
                return known_value(x)
            if isinstance(x, TensorProxy):
                return self.peek(x)
            return self._number(x) if isinstance(x, NumberProxy) else x

        return tree_map(to_meta, (args, kwargs))

    @_untraced
    def replayed(self, proxy: TensorProxy, fn, args, kwargs, index: int) -> torch.Tensor:
        """A meta tensor laid out as output ``index`` of ``fn(*args, **kwargs)`` (``proxy``'s shape) would be, without
        marking inputs observed: the layout an operation computing ``proxy`` gives it."""
        strides, offset, _ = self._replay(proxy, fn, args, kwargs, index)
        return self._empty(proxy, strides, offset)

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
        # the tensors it is computed from first, innermost first: a deep network's chain of producers, asked at its
        # end, would otherwise recurse once per operation
        stack, on_stack = [proxy], {name}
        while stack:
            source = next((d for d in self._sources(stack[-1]) if not self._known(d)), None)
            if source is None:
                top = stack.pop()
                on_stack.discard(top.name)
                if top is not proxy:
                    self.memo[top.name] = self._compute(top)
            elif source.name in on_stack:  # the stack holds one chain of sources: a cycle
                raise UnknownLayout(f"thunder cannot compute the strides of {source.name}: it is computed from itself")
            else:
                on_stack.add(source.name)
                stack.append(source)
        result = self.memo[name] = self._compute(proxy)
        return result

    def _known(self, proxy: TensorProxy) -> bool:
        return proxy.name in self.inputs or proxy.name in self.memo or proxy.ndim == 0

    def _sources(self, proxy: TensorProxy) -> list:
        """The tensors ``_compute`` asks the layouts of."""
        tensor = self.value_of.get(proxy.name)
        if tensor is not None:
            return [tensor]
        producer = self.producer.get(proxy.name)
        if producer is None or self._data_dependent(proxy, producer[1], producer[2]):
            return []
        return [x for x in tree_leaves(producer[1:3]) if isinstance(x, TensorProxy)]

    def _data_dependent(self, proxy, args, kwargs) -> bool:
        """Under trial values of run-time extents: whether ``proxy``'s sizes depend on the values of its inputs."""
        return self.trial is not None and not _roots(proxy.shape) <= _roots(tree_leaves((args, kwargs)))

    def _compute(self, proxy: TensorProxy) -> tuple:
        name = proxy.name
        tensor = self.value_of.get(name)
        producer = self.producer.get(name)
        if tensor is not None:
            result = self._layout(tensor)
        elif producer is None:
            result = (contiguous_strides(self._shape(proxy)), 0, frozenset())
        else:
            result = self._replay(proxy, *producer)
        return result

    def _replay(self, proxy, fn, args, kwargs, index) -> tuple:
        deps: set[str] = set()

        def to_meta(x):
            if known_value(x) is not None:
                return known_value(x)  # a size (view(n, tensor)): torch reads its value, which meta tensors lack
            if isinstance(x, TensorProxy):
                strides, offset, d = self._layout(x)
                deps.update(d)
                return self._empty(x, strides, offset)
            if isinstance(x, NumberProxy):
                return self._number(x)
            return x

        shape = self._shape(proxy)
        if self._data_dependent(proxy, args, kwargs):
            # an operation whose output sizes depend on values: no meta kernel (torch's raises, after importing dynamo)
            try:
                t = _with_sizes_assumed(fn, *tree_map(to_meta, (args, kwargs)), index)
            except UnknownLayout:
                t = None
            if t is None or t.ndim != len(shape):
                return _data_dependent_strides(fn, shape), 0, frozenset()
            return dense_strides_in_order(t.stride(), shape), 0, frozenset(deps)
        margs, mkwargs = tree_map(to_meta, (args, kwargs))
        if not any(isinstance(x, TensorProxy) for x in tree_leaves((args, kwargs))):
            mkwargs = {**mkwargs, "device": "meta"}  # a factory (torch.rand(4, 4)): run for real, it would draw
        if fn in kernel_layouts.RULES:  # a meta kernel that lays out otherwise than the kernel that runs
            source = next((x for x in tree_leaves(args) if isinstance(x, TensorProxy)), None)
            with kernel_layouts.KernelLayouts(proxy.device.type):
                strides = kernel_layouts.strides(fn, self._shape(proxy), proxy, margs, mkwargs, source)
            if strides is not None:
                return strides, 0, frozenset(deps)
        try:
            out = self._run_meta(fn, margs, mkwargs, index, proxy.device.type)
        except Exception as e:  # noqa: BLE001 - any failure means: layout unknown
            t = _with_sizes_assumed(fn, margs, mkwargs, index)
            if t is None or t.ndim != len(shape) or is_symbolic_shape(shape):
                raise UnknownLayout(f"thunder cannot compute the strides of {proxy.name}: running "
                                    f"{getattr(fn, '__name__', fn)} on meta tensors failed ({e})") from e
            return dense_strides_in_order(t.stride(), shape), 0, frozenset(deps)
        if out is None or out[0] != shape:
            return contiguous_strides(shape), 0, frozenset(deps)
        return out[1], out[2], frozenset(deps)

    def _run_meta(self, fn, margs, mkwargs, index: int, device_type: str):
        """(shape, strides, storage offset) of output ``index`` of ``fn`` run on the meta tensors ``margs``/``mkwargs``
        as the kernels of ``device_type`` lay it out (None where it is not a tensor); remembered for the same callable
        on the same layouts (``replays``, see ``_meta_key``). Raises where the run does."""
        key = _meta_key(fn, margs, mkwargs, index, device_type)
        if key is not None and key in self.replays:
            return self.replays[key]
        with torch._C.DisableTorchFunction(), kernel_layouts.KernelLayouts(device_type):
            leaves = tree_leaves(fn(*margs, **mkwargs))
        t = leaves[index] if index < len(leaves) else None
        out = (tuple(t.shape), tuple(t.stride()), t.storage_offset()) if isinstance(t, torch.Tensor) else None
        if key is not None:
            self.replays[key] = out
        return out

    @_untraced
    def aliases(self, fn, args, kwargs, out_index: int, base: TensorProxy) -> bool:
        """Whether output ``out_index`` of ``fn(*args, **kwargs)`` shares memory with ``base``, as in eager.

        Where shapes or arguments hold extents known only at run time, the question is asked for several values of
        them (0, 1, 2, and larger ones, different for each extent): the answer must be the same for all, else thunder
        refuses rather than guess (a copy taken for a view would lose later in-place updates, and the reverse leak
        them)."""
        answers = self._answers(fn, args, kwargs, out_index, base)
        if len(answers) > 1:
            names = sorted(_roots(tree_leaves((args, kwargs))))
            raise NotImplementedError(
                f"thunder cannot tell whether {getattr(fn, '__name__', fn)} returns a view of {base.name} or a new "
                f"tensor: in eager it depends on the values of {', '.join(names)}, known only at run time. Call "
                ".clone() or .contiguous() on its result to make it a new tensor")
        return answers.pop() if answers else False

    @_untraced
    def returns_input(self, fn, args, kwargs, base: TensorProxy) -> bool:
        """Whether ``fn(*args, **kwargs)`` returns ``base`` itself in eager (``x.contiguous()`` of a contiguous ``x``):
        a value with no autograd node of its own. Where the answer depends on run-time extents, no."""
        return self._answers(fn, args, kwargs, 0, base, same=True) == {True}

    def _answers(self, fn, args, kwargs, out_index: int, base: TensorProxy, same: bool = False) -> set:
        """``_aliases``' answers: for the values of the run-time extents tried (see ``aliases``), impossible ones left
        out; for the shapes themselves where there are none."""
        names = sorted(_roots(tree_leaves((args, kwargs))))
        if not names:
            try:
                return {bool(self._aliases(fn, args, kwargs, out_index, base, same))}
            except UnknownLayout:
                # the layout of an argument depends on run-time extents upstream (``x[mask][:2].sum(0, keepdim=True)``
                # of 1 row): asked for values of those, as where they are the arguments' own
                names = sorted(self._upstream_roots(tree_leaves((args, kwargs))))
                if not names:
                    return {False}
        answers = self._tried(names, fn, args, kwargs, out_index, base, same)
        if not answers:  # the layout of an argument depends on other extents upstream (``cat([x[m][m2], x])``)
            upstream = sorted(self._upstream_roots(tree_leaves((args, kwargs))))
            if upstream != names:
                answers = self._tried(upstream, fn, args, kwargs, out_index, base, same)
        return answers

    def _tried(self, names, fn, args, kwargs, out_index: int, base: TensorProxy, same: bool) -> set:
        trials = [dict(zip(names, itertools.count(11, 2)))] + [dict.fromkeys(names, v) for v in (0, 1, 2)]
        answers = set()
        for trial in trials:
            with self._trying(trial):
                answers.add(self._aliases(fn, args, kwargs, out_index, base, same))
        return answers - {None}

    def _aliases(self, fn, args, kwargs, out_index: int, base: TensorProxy, same: bool = False):
        """``aliases`` (``same``: ``returns_input``) for the current trial values; None where they are impossible (an
        extent below 0, an error) or say nothing (an output without elements)."""
        metas = {}

        def to_meta(x, values: bool):
            # (never ``base``, whose memory the question is about: a 0-dim tensor read with ``.item()`` earlier has a
            # value, and ``F.dropout(t, 0.0)`` of it returned that value, no meta tensor of ``base``: fused seed 21246)
            if values and known_value(x) is not None and not (isinstance(x, TensorProxy) and x.name == base.name):
                return known_value(x)
            if isinstance(x, TensorProxy):
                metas.setdefault(x.name, self.meta(x))
                return metas[x.name]
            if isinstance(x, NumberProxy):
                return self._number(x)
            return x

        # 0-dim tensors whose values the trace specialized on go as their values (a size torch reads), unless that
        # fails: then as meta tensors too (``x.type_as(v)`` of a real CPU ``v`` would move the meta ``x`` there)
        with_values = any(known_value(x) is not None for x in tree_leaves((args, kwargs)))
        for values in (True, False) if with_values else (False,):
            try:
                margs, mkwargs = tree_map(functools.partial(to_meta, values=values), (args, kwargs))
                mbase = metas.get(base.name)  # the first tensor argument (einsum's operand follows its equation)
                with torch._C.DisableTorchFunction():
                    out = fn(*margs, **mkwargs)
                break
            except _Infeasible:
                return None
            except UnknownLayout:
                if self.trial is None:
                    raise  # _answers asks for values of the run-time extents it depends on
                return None
            except Exception:  # noqa: BLE001 - no meta kernel: assume a fresh tensor
                if values:
                    continue
                return None if self.trial is not None else False
        leaves = tree_leaves(out)
        t = leaves[out_index] if out_index < len(leaves) else None
        if same:
            return isinstance(t, torch.Tensor) and t is mbase
        if self.trial is not None and isinstance(t, torch.Tensor) and t.numel() == 0:
            return None  # no element to share: the answer of the other values holds (x.diff() of 0 rows aliases x)
        return isinstance(t, torch.Tensor) and isinstance(mbase, torch.Tensor) and torch._C._is_alias_of(t, mbase)

    def _upstream(self, leaves):
        """Each tensor among ``leaves`` and everything it is computed from, once, with the arguments computing it."""
        seen = set()
        stack = [x for x in leaves if isinstance(x, TensorProxy)]
        while stack:
            proxy = stack.pop()
            if proxy.name in seen:
                continue
            seen.add(proxy.name)
            tensor, producer = self.value_of.get(proxy.name), self.producer.get(proxy.name)
            sources = [tensor] if tensor is not None else tree_leaves(producer[1:3]) if producer is not None else []
            yield proxy, sources
            stack.extend(x for x in sources if isinstance(x, TensorProxy))

    def _upstream_roots(self, leaves) -> set:
        """The run-time extents the layouts of the tensors among ``leaves`` may depend on: those of the shapes (and
        numbers) of everything they are computed from."""
        roots = set()
        for proxy, sources in self._upstream(leaves):
            roots |= _roots([proxy, *sources])
        return roots

    @contextlib.contextmanager
    def _trying(self, trial: dict):
        """Layouts computed with the run-time extents given ``trial``'s values (memoized apart)."""
        saved = self.trial, self.memo
        self.trial, self.memo = trial, {}
        try:
            yield
        finally:
            self.trial, self.memo = saved

    def _number(self, x: NumberProxy):
        if self.trial is None or not is_runtime(x):
            return x.value
        return poly_of(x).value(self.trial)

    def _shape(self, proxy: TensorProxy) -> tuple:
        if self.trial is None:  # extents the trace equates with constants (broadcast against them) are those
            return tuple(c if isinstance(n, NumberProxy) and (c := poly_of(n).constant()) is not None else n
                         for n in proxy.shape)
        shape = tuple(self._number(n) if isinstance(n, NumberProxy) else n for n in proxy.shape)
        if any(n < 0 for n in shape):
            raise _Infeasible
        return shape

    def _empty(self, proxy: TensorProxy, strides, offset) -> torch.Tensor:
        shape = self._shape(proxy)
        if is_symbolic_shape(shape):
            raise UnknownLayout(f"thunder cannot compute the strides of {proxy.name}: its shape holds extents known "
                                "only at run time")
        t = torch.empty_strided(shape, strides, dtype=proxy.dtype, device="meta")
        if offset:
            t = t.as_strided(shape, strides, offset)
        return t


def _meta_key(fn, margs, mkwargs, index: int, device_type: str):
    """What a meta replay's result depends on: the callable, the shapes, strides, offsets and dtypes of its meta
    tensors, its other arguments (by type and value), the output asked for and the device whose kernels are followed.
    None where an argument is not a plain value (an object whose state could differ between two calls)."""
    if not isinstance(fn, _REPLAYED_TYPES):
        return None
    parts = [fn, index, device_type]
    try:
        _key_parts((margs, mkwargs), parts)
    except _NotAKey:
        return None
    return tuple(parts)


class _NotAKey(Exception):
    pass


# the torch callables traces record (functions, Tensor methods, ATen overloads), which hold no state of their own
_REPLAYED_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                   types.WrapperDescriptorType, types.BuiltinMethodType, torch._ops.OpOverload,
                   torch._ops.OpOverloadPacket)
_PLAIN = (bool, int, float, complex, str, type(None), type(Ellipsis), torch.dtype, torch.device, torch.memory_format,
          torch.layout)


def _key_parts(x, parts: list) -> None:
    if isinstance(x, torch.Tensor):
        if x.device.type != "meta":
            raise _NotAKey
        parts.append((torch.Tensor, tuple(x.shape), tuple(x.stride()), x.storage_offset(), x.dtype))
    elif isinstance(x, (tuple, list)):
        parts.append((type(x), len(x)))
        for y in x:
            _key_parts(y, parts)
    elif isinstance(x, dict):
        parts.append((dict, tuple(x)))
        for y in x.values():
            _key_parts(y, parts)
    elif isinstance(x, slice):
        parts.append(slice)
        _key_parts((x.start, x.stop, x.step), parts)
    elif type(x) in _PLAIN:
        parts.append((type(x), x))
    else:
        raise _NotAKey


def _roots(leaves) -> set:
    """The names of the run-time extents that the shapes of tensors, and numbers, among ``leaves`` depend on."""
    roots = set()
    for x in leaves:
        for n in (x.shape if isinstance(x, TensorProxy) else (x,) if is_runtime(x) else ()):
            if isinstance(n, NumberProxy):
                roots.update(poly_of(n).base_roots())
    return roots


_TRANSPOSED_RESULTS = (torch.nonzero, torch.Tensor.nonzero, torch.argwhere, torch.Tensor.argwhere)


def _with_sizes_assumed(fn, margs, mkwargs, index: int):
    """Output ``index`` of ``fn`` on meta tensors where its sizes depend on values (``x[mask]``, ``nonzero``, whose
    meta kernels refuse): computed as if every element were nonzero, which gives other sizes but the same order of
    strides. None where that fails too."""
    import torch.fx.experimental._config as fx_config

    try:
        with fx_config.patch(meta_nonzero_assume_all_nonzero=True), torch._C.DisableTorchFunction():
            out = fn(*margs, **mkwargs)
    except Exception:  # noqa: BLE001 - no meta kernel even so
        return None
    leaves = tree_leaves(out)
    t = leaves[index] if index < len(leaves) else None
    return t if isinstance(t, torch.Tensor) else None


def dense_strides_in_order(strides: tuple, shape: tuple) -> tuple:
    """The strides of a dense tensor of ``shape`` whose dimensions are laid out in the order ``strides`` gives them
    (the smallest stride innermost; of equal strides, the later dimension)."""
    order = sorted(range(len(shape)), key=lambda d: (strides[d], -d))
    result, acc = [0] * len(shape), 1
    for d in order:
        result[d] = acc
        acc *= max(int(shape[d]), 1)
    return tuple(result)


def _data_dependent_strides(fn, shape: tuple) -> tuple:
    """The strides of a new tensor of ``shape`` that ``fn``, an operation whose output sizes depend on values,
    returns, where ``_with_sizes_assumed`` cannot tell: ``nonzero``'s (n, dims) result is the transpose of a
    contiguous (dims, n) one; the others (``unique``, ``repeat_interleave``) return contiguous tensors."""
    if fn in _TRANSPOSED_RESULTS and len(shape) == 2:
        return tuple(reversed(contiguous_strides(tuple(reversed(shape)))))
    return contiguous_strides(shape)
