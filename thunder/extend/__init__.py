"""The executor extension API.

An *operator executor* claims individual symbols: ``register_implementation(symbol, op)`` says that
``op`` (an executor symbol, which prints and runs as, e.g., ``torch.add``) implements ``symbol``,
optionally only when ``checker(*args, **kwargs)`` holds, or through ``execution_transform``, a
function traced in place of the symbol that may call several executor symbols.
A *fusion executor* claims regions: its ``fusion_pass(trace)`` returns a trace in which groups of
bound symbols are replaced by one bound symbol of a fused callable.

Executors are tried in the order given to ``thunder.jit(executors=...)``; a bound symbol no executor
claims is replaced by its decomposition, recursively.

A *primitive* is declared in one place, with everything thunder needs to know about it::

    def repeat2_meta(a):  # its outputs, from its inputs' metadata
        return prims.new_tensor((2 * a.shape[0], *a.shape[1:]), a.dtype, a.device, prims.requires_grad(a))

    def repeat2_grad(a):  # its output and a backward closure, as the rules in thunder/transforms/grad_rules.py
        return repeat2(a), lambda g: (sum_halves(g),)  # sum_halves: another primitive, declared likewise

    repeat2 = declare_primitive("repeat2", repeat2_meta, torch_impl=lambda a: torch.cat([a, a]), grad=repeat2_grad)

Called on proxies while thunder traces, ``repeat2(x)`` records ``prims.repeat2``; the torch executor
runs it as ``torch_impl``, and autodiff differentiates it with ``grad``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from thunder.core import dtypes
from thunder.core.prims import make_prim
from thunder.core.proxies import NumberProxy, TensorProxy, layout_hint
from thunder.core.pytree import tree_map
from thunder.core.statements import STATEMENTS, python_return
from thunder.core.symbol import BoundSymbol, Symbol, Tag, has_tag, is_view
from thunder.torch import fallback
from thunder.torch.shapes import MAYBE_VIEWS
from thunder.transforms.grad_rules import register_vjp
from thunder.transforms.rename import substitute_inputs

_EXECUTORS: dict[str, "Executor"] = {}
_DEFAULT_EXECUTORS: list["Executor"] = []
_ALWAYS_EXECUTORS: list["Executor"] = []


class Executor:
    def __init__(self, name: str):
        self.name = name
        self.opmap: dict[str, Symbol] = {}

    def register_operator(self, name: str, *, fn: Callable, meta: Callable | None = None, print_name: str | None = None,
                          imports: tuple = (), tags=(), printer=None) -> Symbol:
        """An executor symbol that runs ``fn``; ``meta`` gives its outputs when it is traced directly."""
        sym = Symbol(name, meta if meta is not None else fn, module=self.name, is_prim=True, tags=tags,
                     print_name=print_name or name, imports=imports, executor=self, printer=printer)
        sym.impl = fn
        self.opmap[name] = sym
        return sym


    def __repr__(self):
        return f"thunder.extend.{type(self).__name__}('{self.name}')"

    def before_tracing(self, device_types: frozenset) -> None:
        """Called when a call starts a compilation, before tracing, with the device types (``"cpu"``, ``"cuda"``) of
        the tensors it was given (arguments, and a module's parameters and buffers). An executor may start slow
        preparations here, which then go on while thunder traces (inductor starts its compile workers)."""

    def can_execute(self, bsym: BoundSymbol) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class ImplInfo:
    op: Symbol | None = None  # run as this executor symbol with the same arguments
    checker: Callable | None = None  # (*args, **kwargs) -> bool
    execution_transform: Callable | None = None  # traced in place of the symbol
    args_transform: Callable | None = None  # (args, kwargs) -> (args, kwargs) for ``op``


class OperatorExecutor(Executor):
    def __init__(self, name: str):
        super().__init__(name)
        self.implmap: dict[str, ImplInfo] = {}

    def register_implementation(self, sym: Symbol, op: Symbol | None = None, *, checker=None, execution_transform=None,
                                args_transform=None):
        self.implmap[sym.id] = ImplInfo(op, checker, execution_transform, args_transform)

    def can_execute(self, bsym: BoundSymbol) -> bool:
        if bsym.sym.executor is self:
            return True
        info = self.implmap.get(bsym.sym.id)
        if info is None:
            return False
        return info.checker is None or bool(info.checker(*bsym.args, **bsym.kwargs))

    def execution(self, bsym: BoundSymbol, trace) -> list[BoundSymbol]:
        """The executor's bound symbols that compute ``bsym``."""
        if bsym.sym.executor is self:
            return [bsym]
        info = self.implmap[bsym.sym.id]
        if info.execution_transform is not None:
            from thunder.transforms.substitute import trace_substitution

            return trace_substitution(bsym, info.execution_transform, trace)
        args, kwargs = bsym.args, bsym.kwargs
        if info.args_transform is not None:
            args, kwargs = info.args_transform(args, kwargs)
        return [BoundSymbol(info.op, args, kwargs, bsym.output, (bsym,), bsym.tags)]


class FusionExecutor(Executor):
    """Claims regions of a trace and runs each as one fused callable.

    Subclasses say which bound symbols they can fuse (``can_fuse``: a primitive, or an opaque symbol
    without a decomposition; a composite symbol is fused when all its primitives are) and how to compile a
    region (``compile_region``: a trace of those symbols, its parameters the region's inputs and its return
    the region's outputs, to a callable). ``fusion_pass`` forms regions by data flow (see [Note: forming
    regions] in thunder/executors/regions.py); a region prints as ``[t1, t2] = myFusion0(t0)`` with the
    primitives it runs as comments beneath. ``worth_fusing(prims)`` drops regions too small to pay.
    """

    fusion_name = "Fusion"
    min_prims = 2  # a region of fewer primitives is left to the operator executors
    rematerialize = False  # recompute cheap forward values in the backward (thunder/transforms/rematerialization.py)
    # With ``rematerialize``: recompute also values the backward reads outside the fused regions (a weight gradient's
    # matmul reads a norm's output), each then written out again by a kernel of its own: fewer saved bytes for more
    # kernels. Off, such values are saved (as torch.compile's partitioner does by default).
    recompute_unfused_reads = False
    # Fuse random torch operations (dropout's mask, torch.rand) through their decompositions, which draw
    # other numbers than their torch kernels (eager's); otherwise they run whole and only their consumers fuse.
    fuse_random = False

    def can_fuse(self, bsym: BoundSymbol) -> bool:
        raise NotImplementedError

    def compile_region(self, region) -> Callable:
        """A callable running ``region`` (a trace: its parameters the region's inputs, its return the outputs).
        Three hints come as keywords, only to executors that ask for them: ``dense_outputs`` (where
        ``wants_dense_input`` names some consumers), the names of outputs only such consumers, other regions
        and a backward that does not care read, which may be written contiguous whatever layout the unfused
        program would give them; ``donatable`` (where ``reuses_inputs``), name -> received, the inputs that
        die in the region and that the trace made (received: a saved value autograd releases before the
        backward runs), whose memory the region may reuse when, at the call, nothing else can see it;
        ``input_layouts`` (where ``wants_input_layouts`` and some input has a layout hint), per input the strides it is
        expected to have at run time, or None (see [Note: layout hints] in thunder/core/proxies.py);
        ``output_layouts`` (where ``keeps_eager_output_layouts``), per output the strides eager gives it where the
        program sees it returned, or None: the program can read strides, so such outputs keep eager's."""
        raise NotImplementedError

    reuses_inputs = False  # whether ``compile_region`` is given ``donatable``
    # whether ``compile_region`` is given ``lazy_inputs``: the positions of the inputs that may be tensors whose memory
    # does not hold their values, which the region's callable is to resolve (``resolve_lazy_inputs``) before its
    # kernels read them; otherwise the callable is wrapped in a function that does (one more reference to each input
    # while it runs: an executor that counts references, to reuse memory, resolves them itself)
    resolves_lazy_inputs = False
    # whether ``compile_region`` is given ``input_layouts``: per input, the strides it is expected to have at run time
    # where tracing could tell (``layout_hint``, see [Note: layout hints] in thunder/core/proxies.py), else None
    wants_input_layouts = False
    # whether ``compile_region`` is given ``output_layouts``: per output the program sees returned, the strides eager
    # gives it (else None), which the region is to write it in
    keeps_eager_output_layouts = False

    def wants_dense_input(self, bsym: BoundSymbol) -> bool:
        """Whether ``bsym``, run outside the regions, would rather read a region's output contiguous (a matmul,
        which copies an operand its kernel cannot read in place). Such outputs then go to ``compile_region``
        as ``dense_outputs``."""
        return False

    def worth_fusing(self, prims_: list) -> bool:
        return len(prims_) >= self.min_prims

    def is_barrier(self, bsym: BoundSymbol) -> bool:
        """Bound symbols that keep their place: nothing is fused across them or moved over them."""
        return bsym.sym in STATEMENTS or has_tag(bsym, Tag.SIDE_EFFECT, Tag.COLLECTIVE)

    def recomputable(self, bsym, claimed_first=()) -> bool:
        """Whether the backward may recompute ``bsym`` (when ``rematerialize``): what this executor fuses, but
        reductions and opaque kernels (torch's backward kernels, nll_loss), which cost more to recompute than
        elementwise work."""
        claimed_first = tuple(ex for ex in claimed_first if isinstance(ex, OperatorExecutor))
        return self._fusible(bsym, claimed_first) and all(
            p.sym.module == "prims" and p.sym.name not in _REDUCTIONS for p in _leaf_prims(bsym, self))

    def fuses(self, bsym, claimed_first=()) -> bool:
        """Whether this executor would fuse ``bsym`` (``claimed_first``: the executors listed before it)."""
        return self._fusible(bsym, tuple(ex for ex in claimed_first if isinstance(ex, OperatorExecutor)))

    def _fusible(self, bsym, claimed_first=()) -> bool:
        if bsym.sym in STATEMENTS or self.is_barrier(bsym):
            return False
        if any(ex.can_execute(bsym) for ex in claimed_first):  # an executor of higher priority takes it whole
            return False
        if bsym.sym.executor is not None or not bsym.subsymbols:
            return self.can_fuse(bsym)
        if Tag.RANDOM in bsym.sym.tags and not self.fuse_random:  # its torch kernel (torch.randint, bernoulli_)
            return False  # draws other numbers than its decomposition: run whole, it draws as eager does
        if Tag.KERNEL_ROUNDING in bsym.sym.tags and any(  # its kernel rounds otherwise than its decomposition
                isinstance(o, TensorProxy) and not dtypes.is_integer(o.dtype) for o in bsym.flat_outs):
            return False  # (arange of floats; of integers nothing rounds)
        return all(self._fusible(s) for s in bsym.subsymbols)

    def worth_fusing_for_layout(self, prims_: list) -> bool:
        """Whether a group ``worth_fusing`` turns down (views alone) is worth a region after all when one of its
        outputs goes dense to ``wants_dense_input`` consumers: the region writes it contiguous once, where each
        matmul reading the view would copy it."""
        return False

    def fusion_pass(self, trace, claimed_first=()):
        """``trace`` with regions fused. ``claimed_first``: the operator executors listed before this one."""
        import time

        from thunder.executors.regions import partition, region_interface

        start = time.perf_counter_ns()
        bsyms = trace.bound_symbols
        claimed_first = tuple(ex for ex in claimed_first if isinstance(ex, OperatorExecutor))
        order = partition(bsyms, lambda b: self._fusible(b, claimed_first), self.is_barrier)
        groups = [bsyms[item] if isinstance(item, int) else
                  ([bsyms[i] for i in item], [p for i in item for p in _leaf_prims(bsyms[i], self)]) for item in order]
        worth = {g for g, item in enumerate(groups) if isinstance(item, tuple) and self.worth_fusing(item[1])}
        for_layout = {g for g, item in enumerate(groups)
                      if isinstance(item, tuple) and g not in worth and self.worth_fusing_for_layout(item[1])}
        if for_layout:  # kept only where an output goes dense (to regions and dense consumers alone)
            out, regions = _lay_out(groups, worth | for_layout)
            used_later, readers = _readers(trace, out, regions, self)
            worth |= {g for at, _, prims_, g in regions if g in for_layout
                      and _dense(at, used_later, readers) & {o.name for o in region_interface(prims_, used_later[at])[1]}}
        out, regions = _lay_out(groups, worth)
        used_later, readers = _readers(trace, out, regions, self)
        # values this trace made in memory of their own: a view shares its base's (the run-time check of
        # ``reuses_inputs`` would refuse it on every call, so a compilation reusing it would be wasted)
        made_here = {o.name for b in bsyms if b.sym not in STATEMENTS and not is_view(b) for o in b.flat_outs}
        lazy = _may_be_lazy(bsyms)
        eager = trace.eager_layouts
        returned = eager.returned if eager is not None else frozenset()
        seen = _memory_seen(bsyms, returned)
        def eager_strides(p, kept=False):  # where the region writes it as eager lays it out
            return eager.value_strides(p, kept) if self.keeps_eager_output_layouts and eager is not None else None

        laid_out_as_eager = lambda p: eager_strides(p) is not None  # noqa: E731
        last_other = _last_read_outside_regions(readers)
        for n, (at, members, prims_, _) in enumerate(regions):
            members, after = _returned_views_taken_out(members, used_later[at], seen, returned, laid_out_as_eager)
            if not members:  # views alone
                out[at] = after
                continue
            prims_ = [p for m in members for p in _leaf_prims(m, self)]
            later = (used_later[at] | {a.name for m in after for a in m.flat_args if isinstance(a, TensorProxy)}) - {
                o.name for m in after for o in m.flat_outs}
            # inputs that die here and that this trace made (or received released): their memory may be reused,
            # name -> whether they were received (reusable only once autograd has let them go)
            donatable = {a.name: a.name not in made_here for p in prims_ for a in p.flat_args
                         if a.name not in later and (a.name in made_here or a.name in trace.released_inputs)}
            # the values views are taken of after the region: written as eager lays them out (their views then are)
            made = {o.name for m in members for o in m.flat_outs}
            bases = {a.name: a for m in after for a in m.flat_args if isinstance(a, TensorProxy) and a.name in made}
            pinned = {name: st for name, a in bases.items() if (st := eager_strides(a, kept=True)) is not None}
            out[at] = [self._fuse(prims_, later, f"{self.fusion_name}{n}", _dense(at, used_later, readers),
                                  donatable if self.reuses_inputs else {}, trace.eager_layouts, members, lazy, pinned,
                                  lambda name, at=at: last_other.get(name, -1) > at),
                       *after]
        new = trace.from_trace([b for item in out for b in (item if isinstance(item, list) else (item,))])
        return new.set_provenance(f"Fusion ({self.name})", start)

    def _fuse(self, prims_, used_later, name, dense=frozenset(), donatable=None, eager_layouts=None,
              members=(), lazy=frozenset(), pinned=None, handed_on=lambda name: False):
        from thunder.core.trace import TraceCtx
        from thunder.executors.regions import region_interface

        inputs, outputs = region_interface(prims_, used_later)
        region = TraceCtx(f"{self.name}_region", params=list(inputs))
        region.bound_symbols = list(prims_) + [BoundSymbol(python_return, (tuple(outputs),), {}, None)]
        hints = {}
        if dense_outputs := frozenset(o.name for o in outputs if o.name in dense):
            hints["dense_outputs"] = dense_outputs
        if donatable := {a.name: donatable[a.name] for a in inputs if a.name in (donatable or {})}:
            hints["donatable"] = donatable
        if self.wants_input_layouts and any(layout_hint(a) is not None for a in inputs if isinstance(a, TensorProxy)):
            hints["input_layouts"] = tuple(layout_hint(a) if isinstance(a, TensorProxy) else None for a in inputs)
        if self.keeps_eager_output_layouts and eager_layouts is not None:
            eager = tuple((eager_layouts.strides(o, kept=True) or (pinned or {}).get(o.name)
                           or (eager_layouts.value_strides(o, kept=True) if handed_on(o.name) else None))
                          if isinstance(o, TensorProxy) else None for o in outputs)
            if any(st is not None for st in eager):
                hints["output_layouts"] = eager
        maybe_lazy = tuple(i for i, a in enumerate(inputs) if isinstance(a, TensorProxy) and a.name in lazy)
        if maybe_lazy and self.resolves_lazy_inputs:
            hints["lazy_inputs"] = maybe_lazy
        fn = self.compile_region(region, **hints)
        if maybe_lazy and not self.resolves_lazy_inputs:
            fn = _resolving_lazy_inputs(fn, maybe_lazy)
        if shared := _fresh_outputs_on_shared_memory(members, prims_, inputs, outputs):
            fn = _copying_shared_memory(fn, shared, hints.get("output_layouts") or ())
        op = self.register_operator(name, fn=fn)
        return BoundSymbol(op, tuple(inputs), {}, list(outputs), tuple(prims_))


def _lay_out(groups, fused: set) -> tuple[list, list]:
    """The trace's bound symbols with a placeholder (None) for each group in ``fused``, and those regions as
    (position, members, primitives, group)."""
    out, regions = [], []
    for g, item in enumerate(groups):
        if not isinstance(item, tuple):
            out.append(item)
        elif g in fused:
            regions.append((len(out), *item, g))
            out.append(None)
        else:
            out += item[0]
    return out, regions


def _readers(trace, out, regions, ex) -> tuple[dict, dict]:
    """For each region's position, the names read at or after it; for each name, (position, kind) of each
    reader, kind "region", "dense" (``ex.wants_dense_input``), "returned" (by the trace: to the caller, or saved for
    the backward) or "other"."""
    consumed_after = set()
    # a region reads what its primitives read, and what its members do: those taken out to run after it
    # (``_returned_views_taken_out``) read their arguments whole (``view_as(y, x)`` reads ``x``, its reshape prim not)
    region_at = {at: [*members, *prims_] for at, members, prims_, _ in regions}
    used_later, readers = {}, {}
    for k in range(len(out) - 1, -1, -1):
        if k in region_at:
            used_later[k] = frozenset(consumed_after)
        for b in region_at.get(k, None) or (out[k],):
            consumed_after.update(a.name for a in b.flat_args)
            kind = ("region" if k in region_at else "dense" if ex.wants_dense_input(b)
                    else "returned" if b.sym is python_return else "other")
            layout_free = trace.layout_free_outputs if b.sym is python_return else frozenset()
            for a in b.flat_args:  # a value returned whose layout nothing depends on: as if a region read it
                readers.setdefault(a.name, []).append((k, "region" if a.name in layout_free else kind))
    return used_later, readers


def _dense(at, used_later, readers) -> frozenset:
    """The names used after the region at ``at`` (its outputs among them) that consumers want dense, read by those
    (and perhaps by other regions) and by nothing else."""
    return frozenset(name for name in used_later[at] if (kinds := {d for k, d in readers.get(name, ()) if k > at})
                     and "dense" in kinds and kinds <= {"dense", "region"})


def _last_read_outside_regions(readers) -> dict:
    """For each name an operation run outside regions reads (not only returns), the position of the last such
    reader: its result follows the layout of what it reads (``x[mask]``, a convolution), so a region before it writes
    that value as eager lays it out."""
    return {name: max(k for k, d in by if d == "other") for name, by in readers.items() if any(d == "other" for _, d in by)}


_REDUCTIONS = frozenset({"sum", "prod", "amax", "amin", "var", "var_mean", "argmax", "argmin", "cumsum"})


def _fresh_outputs_on_shared_memory(members, prims_, inputs, outputs) -> tuple:
    """The positions of the outputs the program makes in memory of their own (an operation that is no view: ``clone``,
    ``x.to(copy=True)``, ``empty_like(x).copy_(x)``) that the region may nevertheless return on the memory of one of
    its inputs or of another output: it runs ``clone`` as a reshape to its input's own shape, and kernels return such
    a reshape (as a ``shallow_copy`` or a cast to the same dtype) as their input itself. The program could then
    update one and see the other change (``y = x.clone(); x.mul_(2); return y``, or ``c = t.clone(); return t, c``);
    so may a view of such a copy (``x.nan_to_num().view(-1)`` of an integer ``x``: a copy in eager)."""
    fresh = {o.name for m in members if not _a_view_in_eager(m) for o in m.flat_outs if isinstance(o, TensorProxy)}
    # a view of a copy is no view of what was copied, unless the copy may be the tensor itself in eager (contiguous)
    copies = fresh - {o.name for m in members if m.sym.name in MAYBE_VIEWS for o in m.flat_outs}
    root: dict = {}  # name -> the name of the value whose memory it may be, through views and identities
    eager_root: dict = {}  # the same in eager, where the copies have memory of their own
    inside: dict = {}  # name -> the concatenation whose memory it may be part of
    inputs = {a.name for a in inputs if isinstance(a, TensorProxy)}
    for p in prims_:
        first = next((a for a in p.flat_args if isinstance(a, TensorProxy)), None)
        if first is not None and (is_view(p) or _may_return_its_input(p, first)):
            for o in p.flat_outs:
                root[o.name] = root.get(first.name, first.name)
                eager_root[o.name] = o.name if o.name in copies else eager_root.get(first.name, first.name)
        elif p.sym.name == "cat":
            # inductor computes the parts it makes into the concatenation's memory: a view of such a part is a view
            # of the concatenation (``torch.stack([t4])`` of a ``t4`` concatenated too: fused generated program 34521)
            for a in p.args[0]:
                r = root.get(a.name, a.name)
                if r not in inputs:
                    inside[r] = p.flat_outs[0].name

    def where(name):
        r = root.get(name, name)
        while r in inside:
            r = root.get(inside[r], inside[r])
        return r

    roots = [where(o.name) if isinstance(o, TensorProxy) else None for o in outputs]
    return tuple(i for i, (o, r) in enumerate(zip(outputs, roots)) if isinstance(o, TensorProxy)
                 and (o.name in fresh or r != eager_root.get(o.name, o.name)) and r != o.name
                 and (r in inputs or roots.count(r) > 1))


def _memory_seen(bsyms, returned) -> frozenset:
    """The names of the tensors whose memory the program sees: those it returns (``returned``), and those they are
    views of (``x.t().diagonal()`` returned: ``x.t()``'s memory is seen)."""
    seen = set(returned)
    for b in reversed(bsyms):
        if any(o.name in seen for o in b.flat_outs if isinstance(o, TensorProxy)) and _may_view(b):
            base = _viewed(b)
            if base is not None:
                seen.add(base.name)
    return frozenset(seen)


def _returned_views_taken_out(members, used_later, seen, returned, laid_out_as_eager) -> tuple[list, list]:
    """A region's members, less the views (and maybe-views: ``flatten``, ``contiguous``) whose memory the program
    sees (``seen``: their names, see ``_memory_seen``) of an input of the region, of a value it returns
    (``returned``), or of a value two of them are views of and that the region writes as eager lays it out
    (``laid_out_as_eager(proxy)``), through views only (``x.reshape(n, -1).t()[0]``); and those views with the views
    they are taken through, to run after the region on its input or output (the value they share then one): the
    views then have eager's layouts. A region's kernels write each output in memory of their own where eager returns
    a view of another (inductor writes a slice it returns with gaps anew: ``y, y[..., ::2]``, and a flatten was
    copied apart from its base), so that a later update of one would not show in the other; run after the region by
    the torch executor, they are eager's views. A view that other members read stays a member too (its output then
    not the region's)."""
    made = {o.name: o for m in members for o in m.flat_outs if isinstance(o, TensorProxy)}
    through: dict = {}  # name of a view -> ((base name, member), ...): the views it is taken through, from its root
    for m in members:
        outs = [o for o in m.flat_outs if isinstance(o, TensorProxy)]
        base = _viewed(m)
        if base is not None and outs and _may_view(m):
            for o in outs:
                through[o.name] = (*through.get(base.name, ()), (base.name, m))
    taken, unanchored, rebased = set(), [], {}
    chains = {n: through[n] for n in sorted(seen & used_later) if n in through}
    for name, steps in chains.items():
        # from the nearest value the region reads or returns: the view is then a view of that tensor
        anchor = next((i for i in range(len(steps) - 1, -1, -1)
                       if steps[i][0] not in made or steps[i][0] in returned), None)
        if anchor is not None:
            taken.update(id(m) for _, m in steps[anchor:])
            continue
        # or from a value returned that is the same views of the same value (the views an in-place update
        # regenerates from their root: ``t[:, 1:]`` and ``t[:, 1:][0]`` returned)
        prefix = max((n for n in chains if n != name and n in returned and len(chains[n]) < len(steps)
                      and _same_views(chains[n], n, steps)), key=lambda n: len(chains[n]), default=None)
        if prefix is None:
            unanchored.append(steps)
            continue
        rest = steps[len(chains[prefix]):]
        base, first = rest[0]
        rebased[id(first)] = substitute_inputs(first, {base: made[prefix]})
        taken.update(id(m) for _, m in rest)
    # two views of one value (one memory), or a view that broadcasts (zero strides, which no kernel writes), from
    # a value laid out as eager's (dense: one layout)
    roots = [steps[0][0] for steps in unanchored]
    taken.update(id(m) for steps in unanchored if (roots.count(steps[0][0]) > 1 or any(_broadcasts(m) for _, m in steps))
                 and (made[steps[0][0]].ndim <= 1 or laid_out_as_eager(made[steps[0][0]])) for _, m in steps)
    kept, read = {id(m) for m in members if id(m) not in taken}, set()
    for m in reversed(members):  # a member reads values made before it: what kept members read is kept
        if any(o.name in read for o in m.flat_outs if isinstance(o, TensorProxy)):
            kept.add(id(m))
        if id(m) in kept:
            read.update(a.name for a in m.flat_args if isinstance(a, TensorProxy))
    after = [rebased.get(id(m), m) for m in members if id(m) in taken]
    return [m for m in members if id(m) in kept], _in_dependency_order(after)


def _broadcasts(bsym) -> bool:
    """Whether a view broadcasts its input (``expand``: an extent that is not 1 where the input has 1 or no dim)."""
    from thunder.core import prims
    from thunder.core.extents import is_one

    if bsym.sym is not prims.broadcast_in_dim:
        return any(_broadcasts(s) for s in bsym.subsymbols)  # ``expand``'s decomposition
    a, shape, dims = bsym.args[0], bsym.args[1], bsym.args[2]
    kept = dict(zip(dims, a.shape))
    return any(not is_one(n) and (i not in kept or is_one(kept[i])) for i, n in enumerate(shape))


def _same_views(a: tuple, a_view: str, b: tuple) -> bool:
    """Whether the chain of views ``a`` (``(base name, member)`` steps from a root) giving the view named ``a_view``
    takes the same views as the start of the longer chain ``b``."""

    def key(x):
        return x.name if isinstance(x, (TensorProxy, NumberProxy)) else x

    def step(steps, i, view):
        base, m = steps[i]
        outs = [o.name for o in m.flat_outs if isinstance(o, TensorProxy)]
        followed = steps[i + 1][0] if i + 1 < len(steps) else view
        args = tree_map(key, tuple("<base>" if isinstance(x, TensorProxy) and x.name == base else x for x in m.args))
        return m.sym, args, tree_map(key, m.kwargs), outs.index(followed) if followed in outs else None

    return a[0][0] == b[0][0] and all(step(a, i, a_view) == step(b, i, None) for i in range(len(a)))


def _in_dependency_order(bsyms: list) -> list:
    """``bsyms``, each after those of them that make its inputs (stable otherwise)."""
    made = {o.name: id(b) for b in bsyms for o in b.flat_outs if isinstance(o, TensorProxy)}
    done, out, pending = set(), [], list(bsyms)
    while pending:
        ready = next(b for b in pending if all(made.get(a.name) in (None, id(b), *done)
                                               for a in b.flat_args if isinstance(a, TensorProxy)))
        pending.remove(ready)
        done.add(id(ready))
        out.append(ready)
    return out


def _may_view(bsym) -> bool:
    """Whether eager's operation returns a view of its input or the input itself, or may, by its layout
    (``MAYBE_VIEWS``: ``flatten``, ``contiguous``)."""
    return _a_view_in_eager(bsym) or bsym.sym.name in MAYBE_VIEWS


def _viewed(bsym) -> TensorProxy | None:
    """The tensor whose memory a view operation's output shares: its first tensor argument, but the new value that
    ``detached_update(old, new)`` detaches."""
    if bsym.sym.name == "detached_update":
        return bsym.args[1] if isinstance(bsym.args[1], TensorProxy) else None
    return next((a for a in bsym.flat_args if isinstance(a, TensorProxy)), None)


def _a_view_in_eager(bsym) -> bool:
    """Whether eager's operation returns (or may return) a view of its input, or the input itself: a view symbol,
    indexing by basic indices (``sym.is_view`` decides from the arguments), ``detach``, the new value of an update
    autograd does not record (``detached_update``: a ``detach`` of it), the root a view is taken again from
    (``root_of_a_retaken_view``: the tensor itself), an operation tagged ``RETURNS_INPUT``."""
    if (is_view(bsym) or bsym.sym.name in ("detach", "data", "detached_update", "root_of_a_retaken_view")
            or Tag.RETURNS_INPUT in bsym.tags):
        return True
    if bsym.sym.name == "torch_autograd_forward":  # an operation torch's autograd differentiates (``diagonal``)
        fn, args, kwargs = bsym.args[:3]
        return fallback.may_return_a_view(fn, args, kwargs)
    if getattr(bsym.sym, "is_fallback", False):  # an operation thunder runs with torch as it is (``Tensor.unfold``)
        return fallback.may_return_a_view(bsym.sym.torch_impl, bsym.args, bsym.kwargs)
    decide = getattr(bsym.sym, "is_view", False)
    if callable(decide):
        try:
            return bool(decide(*bsym.args, **bsym.kwargs))
        except Exception:  # noqa: BLE001 - undecidable here: as a view (the region's output is left as it is)
            return True
    return False


def _may_return_its_input(p, first: TensorProxy) -> bool:
    """Whether a region's kernels may return the primitive ``p``'s output as its input ``first`` itself: an identity
    (``shallow_copy``, a cast to the same dtype), an operation inductor removes where it changes nothing (``cat`` of
    one tensor, a padding by nothing, rounding integers, a power of one), or a reduction or scan over dimensions of
    size one alone (``amin`` of a 0-dim tensor)."""
    name = p.sym.name
    if name == "shallow_copy" or (name == "convert_element_type" and p.args[1] == first.dtype):
        return True
    out = p.flat_outs[0] if p.flat_outs else None
    if not isinstance(out, TensorProxy) or out.dtype != first.dtype:
        return False
    one = lambda n: type(n) is not int or n == 1  # noqa: E731 - a run-time extent may be one
    if name in ("sum", "prod", "amax", "amin"):
        return all(one(first.shape[d]) for d in p.args[1])
    if name == "cumsum":
        return first.ndim == 0 or one(first.shape[p.args[1]])
    if tuple(out.shape) != tuple(first.shape):
        return False
    if name == "cat":
        return len(p.args[0]) == 1
    if name == "pad":
        return all(c == 0 for config in p.args[2] for c in config)
    if name in ("floor", "ceil", "round", "trunc"):
        return not dtypes.is_inexact(first.dtype)
    # (a number's power of a tensor, ``10000 ** t``, is no identity: its exponent is the tensor, never compared)
    return name == "pow" and p.args[0] is first and type(p.args[1]) in (int, float) and p.args[1] == 1


def _copying_shared_memory(fn, positions: tuple, layouts: tuple = ()):
    """``fn`` (a region's), its outputs at ``positions`` copied where they share memory with an input or with another
    output (see ``_fresh_outputs_on_shared_memory``), with eager's strides where ``layouts`` (per output) gives them
    (``torch.roll`` by a whole extent: the trace's reshape of the input, eager's copy contiguous whatever the input's
    layout: fused relayout nn 15515), else as the output is laid out."""

    def call(*args):
        outs = fn(*args)
        # (a ZeroTensor has no memory to share: the region reads it resolved, see resolve_lazy_inputs)
        taken = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor) and not a._is_zerotensor()}
        taken.update(o.untyped_storage().data_ptr() for i, o in enumerate(outs)
                     if i not in positions and isinstance(o, torch.Tensor))
        copied = list(outs)
        for i in positions:
            memory = copied[i].untyped_storage()
            if memory.data_ptr() in taken and memory.nbytes():
                o, strides = copied[i], layouts[i] if i < len(layouts) else None
                copied[i] = (o.clone() if strides is None or 0 in strides else
                             torch.empty_strided(o.shape, strides, dtype=o.dtype, device=o.device).copy_(o))
            taken.add(copied[i].untyped_storage().data_ptr())
        return type(outs)(copied)

    return call


# [Note: tensors whose memory is not their values]
# A fused region's kernels read their inputs' memory. Three kinds of tensor hold other values than their memory, which
# torch's dispatcher resolves for eager kernels: a lazily conjugated view (``x.conj()``, ``x.mH``: the conjugation
# bit), a lazily negated one (``x.conj().imag``: the negation bit), and a ZeroTensor, which has no memory at all (the
# gradient torch's autograd gives for ``sgn``, and so the cotangent of an output only ``sgn`` reads). Raw, a kernel
# would read the unconjugated values, or dereference a null pointer. Thunder's operations write values into memory
# of their own, so only the trace's inputs (arguments, saved values, cotangents), views of them, and the outputs of
# torch operations run whole (the fallback, torch's autograd) may be such tensors: the regions reading those resolve
# them first, on the calls where they are (a copy, as ``resolve_conj``/``resolve_neg`` make one; zeros). Regions
# never write their inputs (a ``copy_`` runs outside them), so reading a copy changes nothing else.
def _may_be_lazy(bsyms) -> frozenset:
    """The names of the values of ``bsyms`` that may be lazily conjugated or negated or ZeroTensors at run time:
    those no operation of the trace made (inputs, unpacked saved values and cotangents), outputs of operations torch
    runs whole (module ``torch``: the fallback; torch's autograd), and views of such values."""
    made: set = set()  # values in memory holding their values
    for b in bsyms:
        if b.sym in STATEMENTS or b.sym.module == "torch" or b.sym.name.startswith("torch_autograd"):
            continue
        first = next((a for a in b.flat_args if isinstance(a, TensorProxy)), None)
        if is_view(b) and first is not None and first.name not in made:
            continue
        made.update(o.name for o in b.flat_outs if isinstance(o, TensorProxy))
    names = {a.name for b in bsyms for a in (*b.flat_args, *b.flat_outs) if isinstance(a, TensorProxy)}
    return frozenset(names - made)


def _resolve(t):
    if t._is_zerotensor():
        return torch.zeros_like(t)
    return t.resolve_conj().resolve_neg()


def resolve_lazy_inputs(args: tuple, positions: tuple) -> tuple:
    """``args`` (a region's inputs) with those at ``positions`` resolved where their memory does not hold their values
    (see [Note: tensors whose memory is not their values]); ``args`` itself where none is such a tensor."""
    for i in positions:
        a = args[i]
        if a.is_neg() or a.is_conj() or a._is_zerotensor():
            return tuple(_resolve(x) if j in positions else x for j, x in enumerate(args))
    return args


def _resolving_lazy_inputs(fn, positions: tuple):
    """``fn`` (a region's), its inputs at ``positions`` resolved first (see ``resolve_lazy_inputs``)."""

    def call(*args):
        return fn(*resolve_lazy_inputs(args, positions))

    return call


def _leaf_prims(bsym, ex) -> list:
    """The symbols a region runs for ``bsym``: its primitives, or itself where the executor fuses it whole."""
    if not bsym.subsymbols or bsym.sym.executor is not None:
        return [bsym]
    out = []
    for s in bsym.subsymbols:
        out += _leaf_prims(s, ex)
    return out


def register_executor(ex: Executor, *, default: bool = False, always: bool = False, priority: int | None = None
                      ) -> Executor:
    """Makes ``ex`` known by its name; ``default``: among the executors ``thunder.jit`` uses when given none, last
    or, with ``priority``, at that position (0: tried first); ``always``: appended to every executor list."""
    _EXECUTORS[ex.name] = ex
    if default:
        _DEFAULT_EXECUTORS.insert(len(_DEFAULT_EXECUTORS) if priority is None else priority, ex)
    if always:
        _ALWAYS_EXECUTORS.append(ex)
    return ex


def get_executor(name: str) -> Executor:
    _load_builtin_executors()
    ex = _EXECUTORS.get(name)
    if ex is None:
        raise ValueError(f"Unknown executor {name!r}; known executors: {sorted(_EXECUTORS)}")
    return ex


def get_all_executors() -> tuple:
    _load_builtin_executors()
    return tuple(_EXECUTORS.values())


def get_default_executors() -> tuple:
    _load_builtin_executors()
    return tuple(_DEFAULT_EXECUTORS)


def get_always_executors() -> tuple:
    _load_builtin_executors()
    return tuple(_ALWAYS_EXECUTORS)


def resolve_executors(executors) -> tuple:
    """Executor objects for ``jit(executors=...)``: objects or names; the always-on executors are appended."""
    _load_builtin_executors()
    if executors is None:
        chosen = list(_DEFAULT_EXECUTORS)
    else:
        chosen = [get_executor(e) if isinstance(e, str) else e for e in executors]
        for e in chosen:
            if not isinstance(e, Executor):
                raise TypeError(f"executors must be thunder.extend.Executor objects or their names, got {e!r}")
    for e in _ALWAYS_EXECUTORS:
        if e not in chosen:
            chosen.append(e)
    return tuple(chosen)


def declare_primitive(name: str, meta: Callable, *, torch_impl: Callable | None = None, grad: Callable | None = None,
                      tags=(), printer=None) -> Symbol:
    """The primitive ``prims.<name>``: ``meta(*args, **kwargs)`` returns its outputs (``prims.new_tensor``),
    ``torch_impl`` (same signature, on torch tensors) is what the torch executor runs, ``grad`` its
    gradient rule (see thunder/transforms/grad_rules.py). Without ``torch_impl`` another executor must
    claim it (``register_implementation``); without ``grad`` it cannot be differentiated. ``tags``
    (``thunder.core.symbol.Tag``) are properties passes respect; ``printer`` prints its calls."""
    prim = make_prim(name, meta, tags=tags, printer=printer)
    if torch_impl is not None:
        get_executor("torch").register_prim(prim, torch_impl)
    if grad is not None:
        register_vjp(prim)(grad)
    return prim


def _load_builtin_executors():
    import thunder.executors.torchex  # noqa: F401
    import thunder.executors.pythonex  # noqa: F401
    import thunder.executors.inductorex  # noqa: F401
    import thunder.executors.onednnex  # noqa: F401  (registered only where torch has oneDNN)
    import thunder.executors.nvfuserex  # noqa: F401  (registered only where nvFuser can run)
