"""Reverse-mode autodiff: splitting a computation trace into a forward and a backward trace.

The forward trace (``augmented_forward_fn``) applies each differentiable operation's gradient rule
(see ``grad_rules``): it computes the outputs and returns, besides them, the values the backward
reads. The backward trace (``backward_fn``) calls the rules' backward closures in reverse order and
accumulates gradients. It is a pure pass from traces to traces (``forward_and_backward``): which forward
values are saved for the backward is decided later, once transforms have changed both traces
(``thunder.transforms.saved_for_backward``); joining the pair to torch.autograd is the runtime's job
(``thunder.driver.runtime``).
"""
from __future__ import annotations

import dataclasses
import functools
import time

import torch

from thunder.core import prims, statements
from thunder.core.codeutils import flat_proxies
from thunder.core.extents import unify
from thunder.core.proxies import TensorProxy, NumberProxy, Var
from thunder.core.symbol import BoundSymbol, Tag
from thunder.core.trace import TraceCtx, tracectx
from thunder.executors import pythonex as px
from thunder.transforms.dce import dce, has_effects
from thunder.transforms.grad_rules import ArgGrads, EdgeParts, get_vjp, is_cheap_rule
from thunder.transforms.rename import substitute, substitute_inputs


@dataclasses.dataclass
class _TapeEntry:
    args: tuple  # the rule's positional arguments (forward proxies)
    outs: list  # the rule's tensor outputs, flat
    backward: callable
    n_outputs: int
    kwargs: dict = dataclasses.field(default_factory=dict)  # the rule's keyword arguments
    continues_sums: bool = False  # backward(*cotangents, sums=...) goes on with the inputs' sums: see below
    keeps_parts: bool = False  # ... and appends to a returned input's parts (_Parts) as they arrive


def _rule_for(sym):
    rule = get_vjp(sym)
    if rule is None and getattr(sym, "is_fallback", False):
        from thunder.torch.autograd_rule import torch_autograd_rule
        from thunder.torch.fallback import unreached_inputs

        fn = sym.torch_impl
        rule = torch_autograd_rule(fn, unreached=lambda args, kwargs: unreached_inputs(fn, args, kwargs))
    return rule


def _needs_grad(bsym) -> bool:
    outs = [o for o in bsym.flat_outs if isinstance(o, TensorProxy)]
    return any(o.requires_grad for o in outs) and any(
        isinstance(a, TensorProxy) and a.requires_grad for a in bsym.flat_args)


# Primitives cheap enough to recompute in the backward (see [Note: differentiating a decomposition]).
_CHEAP_PRIMS = frozenset(
    {"broadcast_in_dim", "reshape", "transpose", "squeeze", "slice_prim", "cat", "pad", "flip", "take", "gather",
     "sum", "amax", "amin", "var", "var_mean", "cumsum", "convert_element_type", "where", "full", "iota",
     "shallow_copy", "prod", "device_put"}
    | set(__import__("thunder.core.prims", fromlist=["UNARY"]).UNARY)
    | set(__import__("thunder.core.prims", fromlist=["BINARY"]).BINARY))


def _cheap_decomposition(bsym) -> bool:
    if not bsym.subsymbols:
        return False
    for sub in bsym.subsymbols:
        if sub.subsymbols:
            # A part with a rule of its own (e.g. layer norm's kernel-based one) is better used in the forward,
            # unless the rule is cheap to replay in the backward (an elementwise formula, cat's slices).
            if (_rule_for(sub.sym) is not None and not is_cheap_rule(sub.sym)) or not _cheap_decomposition(sub):
                return False
        elif not (sub.sym.module == "prims" and sub.sym.name in _CHEAP_PRIMS):
            return False
    return True


# [Note: differentiating a decomposition]
# A torch-language op without a gradient rule whose decomposition is cheap (elementwise, shape and
# reduction primitives) runs in the forward as itself, e.g. ``torch.add`` with its broadcasting, so
# the forward executes eager's kernels. Its backward replays the decomposition's rules inside the
# backward trace; dead-code elimination then keeps only the recomputation the gradients really
# need (often none: the gradient of a broadcasting add is a sum over the broadcast dimensions).
# Expensive decompositions (containing matmuls, convolutions, random ops) are instead expanded in
# the forward, their pieces differentiated one by one.


class _ForwardBuilder:
    def __init__(self, fwd: TraceCtx):
        self.fwd = fwd
        self.env: dict[str, object] = {}
        self.tape: list[_TapeEntry] = []
        self.recomputable: set[str] = set()  # forward values of checkpointed regions
        self.same: dict[str, str] = {}  # a value that is its input itself in eager -> that input's name (_Sums)
        self.update_roots: set[str] = set()  # roots of in-place updates of their views (see _copy_into_sum)

    def _defined_already(self, bsym) -> bool:
        """Whether ``bsym`` only computes extents a re-traced operation has defined under fresh names (its size)."""
        renamed = [o for o in bsym.flat_outs if o.name in self.env]
        if not renamed or len(renamed) != len(bsym.flat_outs):
            return False
        defined = {o.name for b in self.fwd.bound_symbols for o in b.flat_outs}
        return all(self.env[o.name].name in defined for o in renamed)

    def process(self, bsym):
        args = substitute(bsym.args, self.env)
        kwargs = substitute(bsym.kwargs, self.env)
        recompute = Tag.RECOMPUTE_IN_BACKWARD in bsym.tags and not has_effects(bsym)
        same = Tag.RETURNS_INPUT in bsym.tags
        if same or not _needs_grad(bsym):
            from thunder.transforms.rename import substitute_bsym

            defined = self._defined_already(bsym)
            if not defined:
                new = substitute_bsym(bsym, self.env)
                self.fwd.record(new)
            if any(isinstance(o, NumberProxy) and o.name in self.env for o in bsym.flat_outs):
                # an extent a re-traced operation gave a fresh name: the original stays defined too, for the outputs
                # recorded as they were traced, whose shapes hold it (a flip of a masked_select's result)
                self.fwd.record(substitute_inputs(bsym, self.env))
            if defined:
                return
            if recompute:
                self.recomputable.update(o.name for o in new.flat_outs)
            if same:
                base = next(a for a in new.flat_args if isinstance(a, TensorProxy)).name
                self.same[new.output.name] = self.same.get(base, base)
            return
        rule = _rule_for(bsym.sym)
        if rule is not None:
            start = len(self.fwd.bound_symbols)
            with self.fwd.tagged(*bsym.tags):
                result = rule(*args, **kwargs)
            if result is NotImplemented:  # the rule declines these arguments: as if there were none
                assert len(self.fwd.bound_symbols) == start, f"the gradient rule of {bsym.sym.id} recorded before declining"
                rule = None
        if rule is None and bsym.sym.module == "ltorch" and _cheap_decomposition(bsym) and not has_effects(bsym):
            from thunder.transforms.rename import substitute_bsym

            new = substitute_bsym(bsym, self.env)
            self.fwd.record(new)
            if recompute:
                self.recomputable.update(o.name for o in new.flat_outs)
            inputs = tuple({a.name: a for a in new.flat_args if isinstance(a, TensorProxy)}.values())
            self.tape.append(_TapeEntry(inputs, list(new.flat_outs),
                                        _decomposition_backward(new, inputs, self.update_roots), len(new.flat_outs),
                                        continues_sums=True, keeps_parts=True))
            return
        if rule is None:
            if not bsym.subsymbols:
                raise NotImplementedError(f"thunder has no gradient rule for {bsym.sym.id}")
            for sub in bsym.subsymbols:
                self.process(sub.replace(tags=sub.tags | bsym.tags))
            return
        out, backward = result
        # a re-traced data-dependent op: its fresh extents are the original ones, read where those were (a later
        # operation's decomposition reading an extent of its output, which no longer may be defined)
        self.env.update(unify(bsym.output, out))
        if recompute:
            for b in self.fwd.bound_symbols[start:]:
                if not has_effects(b):
                    self.recomputable.update(o.name for o in b.flat_outs)
        for old, new in zip(flat_proxies(bsym.output), flat_proxies(out)):
            if old.name != new.name:
                self.env[old.name] = new
        outs = [o for o in flat_proxies(out)]
        self.tape.append(_TapeEntry(args, outs, backward, len(outs), kwargs,
                                    continues_sums=getattr(backward, "continues_sums", False)))
        if bsym.sym.name == "root_of_a_view_update":
            self.update_roots.add(outs[0].name)


# [Note: the order of a gradient's sum]
# Floating-point addition is not associative, so a value used several times gets eager's gradient bit for bit only
# if its parts are added in eager's order. Eager's autograd engine adds each part to the sum as it arrives, the
# parts of later uses first; the tape is run in reverse, so each gradient here is summed in that order too. An op
# differentiated through its decomposition (``F.rms_norm``) is a single use to the tape but several to eager's
# engine, which sees its pieces: its backward therefore goes on with the sums its inputs have so far
# (``continues_sums``), adding its pieces' parts to them one by one, rather than adding their total at the end
# (``x + h(rms_norm(x))``: ((residual + mul) + pow) as eager, not residual + (mul + pow)). Ops differentiated by
# torch's autograd do the same (``torch.cdist(y, y)``: its two parts go on with ``y``'s sum inside torch's graph), as
# can any rule whose backward has ``continues_sums`` set: it takes ``sums=`` and returns the new sums.


class _Sums(dict):
    """Gradient sums by the name of the forward value. A value eager has as its input itself (``Tag.RETURNS_INPUT``,
    ``y = x.contiguous()`` of a contiguous ``x``) has no sum of its own: its parts are added to its input's as they
    arrive, as in eager, where they reach ``x``'s node directly."""

    def __init__(self, same: dict, sums: dict = (), update_roots: frozenset = frozenset()):
        super().__init__(sums)
        self.same = same
        self.update_roots = update_roots

    def key(self, name):
        return self.same.get(name, name)

    def __getitem__(self, name):
        return super().__getitem__(self.key(name))

    def __setitem__(self, name, value):
        super().__setitem__(self.key(name), value)

    def __contains__(self, name):
        return super().__contains__(self.key(name))

    def get(self, name, default=None):
        return super().get(self.key(name), default)

    def pop(self, name, *default):
        return super().pop(self.key(name), *default)


def _decomposition_backward(bsym, inputs, update_roots: set = frozenset()):
    """Backward of ``bsym`` through its decomposition, traced into the current (backward) trace: the inputs'
    gradients, ``sums`` (their sums so far, by name) included."""

    def backward(*cotangents, sums: dict):
        from thunder.core.trace import get_tracectx

        trace = get_tracectx()
        scope = trace._scopes[-1]
        start = len(scope)
        builder = _ForwardBuilder(trace)
        for sub in bsym.subsymbols:
            builder.process(sub)
        grads = _Sums({}, sums, update_roots)
        for o, ct in zip(bsym.flat_outs, cotangents):
            if ct is not None and isinstance(o, TensorProxy):
                _accumulate(grads, builder.env.get(o.name, o), ct, trace)
        _run_tape(builder.tape, grads, trace)
        # Where the gradient reads the operation's output, read the forward's (saved, as eager does)
        # rather than recomputing it; the recomputation then dies.
        to_forward = {builder.env[o.name].name: o for o in bsym.flat_outs if o.name in builder.env}
        if to_forward:
            for i in range(start, len(scope)):
                b = scope[i]
                scope[i] = substitute_inputs(b, to_forward)
            for k, g in list(grads.items()):
                if isinstance(g, _Parts):  # a returned input's, appended to in place
                    g[:] = [substitute(p, to_forward) for p in g]
                else:
                    grads[k] = substitute(g, to_forward)
        return tuple(grads.get(a.name) for a in inputs)

    return backward


def _run_tape(tape, grads: dict, trace):
    for entry in reversed(tape):
        cts = [grads.get(o.name) if isinstance(o, TensorProxy) else None for o in entry.outs]
        if all(c is None for c in cts):
            continue
        kwargs, replace = {}, False
        if entry.continues_sums:  # see [Note: the order of a gradient's sum]
            names = {a.name for a in flat_proxies((entry.args, entry.kwargs)) if isinstance(a, TensorProxy)}
            # two inputs with one sum (``x`` and ``x.contiguous()``) cannot both go on with it: they add totals
            replace = len({grads.key(n) for n in names}) == len(names)
            # (not a view-updated root's: its parts are copied into one another, see _copy_into_sum)
            goes_on = [n for n in names if n in grads and (entry.keeps_parts or not isinstance(grads[n], _Parts))
                       and grads.key(n) not in grads.update_roots]
            kwargs["sums"] = {n: grads[n] for n in goes_on} if replace else {}
            if getattr(entry.backward, "splits_parts", False):  # a returned input's parts one by one, as they arrive
                kwargs["parts"] = frozenset(n for n in names if isinstance(grads.get(n), _Parts))
        in_grads = entry.backward(*cts, **kwargs)
        if isinstance(in_grads, ArgGrads):
            _accumulate(grads, entry.args, in_grads.args, trace, replace)
            _accumulate(grads, entry.kwargs, in_grads.kwargs, trace, replace)
        else:
            _accumulate(grads, entry.args, in_grads, trace, replace)


def _accumulate(grads: dict, arg, g, trace, replace: bool = False):
    """Adds ``g`` to the gradient sum of ``arg`` (matching structures); ``replace``: ``g`` is the new sum."""
    if g is None or isinstance(g, _Parts):  # a returned input's parts, appended to as they arrived
        return
    if isinstance(arg, (list, tuple)):
        for a, gg in zip(arg, g):
            _accumulate(grads, a, gg, trace, replace)
        return
    if isinstance(arg, dict):
        for k, a in arg.items():
            _accumulate(grads, a, g.get(k), trace, replace)
        return
    if not isinstance(arg, TensorProxy) or not arg.requires_grad:
        return
    if isinstance(g, EdgeParts):
        if isinstance(grads.get(arg.name), _Parts):
            for p in g:
                _accumulate(grads, arg, p, trace)
            return
        g = functools.reduce(prims.add, g)
    assert tuple(g.shape) == tuple(arg.shape), f"gradient of {arg.name} has shape {tuple(g.shape)}, expected {tuple(arg.shape)}"
    from thunder.torch.utils import convert

    g = convert(g, arg.dtype)
    prev = grads.get(arg.name)
    if isinstance(prev, _Parts):  # [Note: the gradient of a returned input]
        prev.append(g)
    elif prev is None:
        grads[arg.name] = g
    elif arg.name in grads.update_roots:  # (whose sum goes on in no backward: see _run_tape)
        grads[arg.name] = _copy_into_sum(prev, g)
    elif replace:
        grads[arg.name] = g
    else:
        from thunder.core import prims

        grads[arg.name] = prims.add(prev, g)


# [Note: the gradient of a view's root updated in place]
# ``x[..., 0] *= -3`` reads the view from the root of the update (``root_of_a_view_update``) and writes the new value
# back into it: the root's gradient has two parts, the write's (the gradient with the view's elements zeroed) and the
# read's (the view's gradient scattered into zeros). Eager's ``CopySlices`` instead copies the view's gradient into
# the root's: the same values but for signs of zeros, which a sum loses (+0 + -0 is +0; -0 * 3's gradient of a zero
# is -0, kept by eager). Each part is zero wherever the other holds the copy, so the copy is the sum in which a zero
# is negative when either part's is: -((-a) - b), which is a + b otherwise (negation is exact).
def _copy_into_sum(a, b):
    from thunder.core import prims

    return prims.neg(prims.sub(prims.neg(a), b))


def _build_backward(builder: _ForwardBuilder, fwd: TraceCtx, flat_outputs: list, params: list,
                    returned: frozenset = frozenset()) -> tuple:
    bwd = fwd.from_trace([])
    bwd.name = "backward_fn"
    bwd.params = ["saved_for_backward", "cotangents"]
    bwd.decorators = ["@torch.no_grad()", "@no_autocast"]
    grads = _Sums(builder.same, update_roots=builder.update_roots)
    for name in returned:  # see [Note: the gradient of a returned input]
        grads[name] = _Parts()
    cotangents = []
    with tracectx(bwd):
        for o in flat_outputs:
            if isinstance(o, TensorProxy):
                ct = bwd.tensor(tuple(o.shape), o.dtype, o.device)
                cotangents.append(ct)
                if o.requires_grad and o.name not in returned:
                    _accumulate(grads, o, ct, bwd)
            else:
                cotangents.append(Var(bwd.make_name("ct")))
        _run_tape(builder.tape, grads, bwd)
        input_grads, parts = [], []
        for i, p in enumerate(params):
            g = grads.get(p.name) if isinstance(p, TensorProxy) and p.requires_grad else None
            if isinstance(g, _Parts):
                g, rest = (g[0], g[1:]) if g else (None, [])
                parts += [(i, r) for r in rest]
            input_grads.append(g)
        px.python_return(tuple(input_grads) + tuple(r for _, r in parts))
    return bwd, cotangents, tuple(i for i, _ in parts)


# [Note: the gradient of a returned input]
# An output that is an input ``x`` itself is returned as ``x`` (``GradInfo.passed_inputs``), so its cotangent reaches
# ``x`` directly, not through the backward, and first: in eager, where it is ``x`` as well, torch's engine adds it to
# ``x``'s gradient before the parts of ``x``'s uses, which follow one by one. A single gradient from the backward
# would be added after all of them, summed (``ct + (p1 + p2)`` where eager has ``(ct + p1) + p2``). So the backward
# returns the parts of such an input (a call's argument) separately, in the order they arrive: the first as its
# gradient, the others as gradients of ``x`` passed to the autograd.Function again (``ForwardBackward.parts``), which
# the engine adds in that order. An op differentiated through its decomposition appends its pieces' parts to the list
# one by one (``keeps_parts``: ``F.softsign(x)`` and ``x`` returned, the two parts of ``x / (1 + |x|)``), as eager's
# engine sees them arrive; an op torch's autograd differentiates still adds its own parts first (``torch.xlogy(x, x)``).
class _Parts(list):
    """The gradient parts of a returned input, in arrival order (``_accumulate`` appends to it)."""


@dataclasses.dataclass
class ForwardBackward:
    """What autodiff makes of a computation trace.

    ``forward`` computes the program's outputs; its return statement holds them, and what the backward
    needs from it is added last (``thunder.transforms.saved_for_backward``), after every transform has
    had its say. ``backward`` reads forward values by name and the ``cotangents`` of ``flat_outputs``,
    and returns one gradient per forward input: its output ``i`` is the gradient of ``inputs[i]``
    (None where that input gets none).
    """

    forward: TraceCtx
    backward: TraceCtx
    inputs: list
    output: object
    flat_outputs: list
    cotangents: list
    dirty: list  # (input index, value written) of inputs updated with values that require grad
    recomputable: set  # forward values the backward recomputes instead of saving (checkpointed regions)
    # the result of each write-back of a value that requires grad (the updated input, as an output) -> that value
    written: dict = dataclasses.field(default_factory=dict)
    # the backward's outputs after one per input: more parts of the gradient of input ``parts[k]``, passed to the
    # autograd.Function again ([Note: the gradient of a returned input])
    parts: tuple = ()
    # the computation's values the forward computes under other names: forward name -> the computation's name
    renamed: dict = dataclasses.field(default_factory=dict)

    def grad_of(self, i: int):
        """The forward input whose gradient (or a part of it) the backward's output ``i`` is."""
        return self.inputs[i] if i < len(self.inputs) else self.inputs[self.parts[i - len(self.inputs)]]


def forward_and_backward(trace: TraceCtx, inputs: list, arguments: frozenset = frozenset()) -> ForwardBackward:
    """The forward and backward traces of ``trace`` (the computation after DCE and computation transforms).
    ``arguments``: the names of the inputs that are the call's arguments (not module state), whose gradient comes in
    parts where the program returns them ([Note: the gradient of a returned input]).

    See [Note: grad mode inside the program].
    """
    with torch.enable_grad():
        return _forward_and_backward(trace, list(inputs), arguments)


# [Note: grad mode inside the program]
# Tracing runs the program under the grad mode of the call, switching as the program does
# (``torch.no_grad()``, ``torch.enable_grad()``, ``torch.set_grad_enabled``), so each recorded
# output requires grad exactly when eager's would. Autodiff differentiates only operations whose
# outputs require grad (the rules are replayed with grad enabled, as those operations ran), and
# outputs that do not require grad are marked non-differentiable. A program called under no_grad
# that enables grad inside runs its autograd.Function with grad enabled (``GradInfo.enable_grad`` in
# thunder/driver/runtime.py; the prologue guarantees that every call of the entry has the mode of the first).
def _forward_and_backward(trace: TraceCtx, inputs: list, arguments: frozenset) -> ForwardBackward:
    t0 = time.perf_counter_ns()
    fwd = trace.from_trace([])
    fwd.name = "augmented_forward_fn"
    fwd.params = inputs
    fwd.decorators = ["@torch.no_grad()", "@no_autocast"]
    builder = _ForwardBuilder(fwd)
    ret = None
    with tracectx(fwd):
        for bsym in trace.bound_symbols:
            if bsym.sym is statements.python_return:
                ret = substitute(bsym.args[0], builder.env)
                continue
            builder.process(bsym)
    output = ret
    flat_outputs = flat_proxies(output) if isinstance(output, (TensorProxy, NumberProxy)) or output is not None else []

    # Backward (an input updated in place with a value that requires grad is an output too: [Note: dirty inputs])
    dirty, written = _differentiable_writes(fwd, inputs)
    # an output that is an updated input: its cotangent is the written value's (autograd gives it to this output or
    # to the input's dirty position, one of them)
    differentiated = [written.get(o.name, o) if isinstance(o, TensorProxy) else o for o in flat_outputs]
    updated = {inputs[i].name for i, _ in dirty}
    returned = frozenset(o.name for o in differentiated if isinstance(o, TensorProxy) and o.requires_grad
                         and o.name in arguments and o.name not in updated)
    bwd, cotangents, parts = _build_backward(builder, fwd, differentiated + [src for _, src in dirty], inputs, returned)
    bwd = dce(bwd, name="Backward construction")
    bwd.set_provenance("Backward pass", t0)
    with tracectx(fwd):
        px.python_return(forward_return(output, inputs, flat_outputs, (), ()))
    fwd.set_provenance("Augmented forward pass", t0)
    return ForwardBackward(fwd, bwd, inputs, output, flat_outputs, cotangents, dirty, builder.recomputable, written,
                           parts, {v.name: n for n, v in builder.env.items() if isinstance(v, TensorProxy) and v.name != n})


def inputs_reached(fwd: TraceCtx, inputs: list, outputs: list, parts: tuple = ()) -> tuple:
    """For each of ``outputs``, the positions in ``inputs`` its gradient reaches: the inputs that require grad and
    that it is computed from through values that require grad (eager's autograd graph), and the positions after them
    of the inputs' ``parts``. Eager leaves ``.grad`` None for an input that only outputs no loss used reach (see
    ``ThunderFunction.backward``)."""
    again = {}
    for k, i in enumerate(parts):
        again.setdefault(i, set()).add(len(inputs) + k)
    reached = {p.name: frozenset((i, *again.get(i, ()))) for i, p in enumerate(inputs)
               if isinstance(p, TensorProxy) and p.requires_grad}
    for b in fwd.bound_symbols:
        found = frozenset().union(*(reached.get(a.name, ()) for a in b.flat_args if isinstance(a, TensorProxy)))
        if found:
            for o in b.flat_outs:
                if isinstance(o, TensorProxy) and o.requires_grad:
                    reached[o.name] = reached.get(o.name, frozenset()) | found
    return tuple(reached.get(o.name, frozenset()) if isinstance(o, TensorProxy) else frozenset() for o in outputs)


def forward_return(output, inputs, flat_outputs, saved_tensors, saved_others):
    """What ``augmented_forward_fn`` returns: the outputs, and the values saved for the backward."""
    return ({"output": output, "flat_args": list(inputs), "flat_output": tuple(flat_outputs)},
            (tuple(saved_tensors), tuple(saved_others)))


# [Note: dirty inputs]
# In eager, ``y.mul_(x)`` on a tensor ``y`` that does not require grad makes ``y`` part of the autograd
# graph (it now requires grad, and its history leads to ``x``), so later uses of ``y`` outside the
# program backpropagate into ``x``. thunder writes the new value into ``y`` with ``prims.copy_`` at the
# end of the forward; when that value requires grad, ``y`` is also returned by the autograd.Function
# and marked dirty (``ctx.mark_dirty``), which rebases its history onto the Function as eager's in-place
# op does, and the value's cotangent flows into the backward like an output's.
def _differentiable_writes(fwd: TraceCtx, params: list) -> list:
    """(index of the parameter, value written) for each write-back of a value that requires grad; and the map from
    each such write-back's result to the value written."""
    index = {p.name: i for i, p in enumerate(params) if isinstance(p, TensorProxy)}
    producer = {}
    writes, written = [], {}  # written: the copy_'s result (the input itself, as an output) -> the value written
    for b in fwd.bound_symbols:
        for o in b.flat_outs:
            producer[o.name] = b
        if b.sym is prims.copy_:
            src, dst = b.args
            made_by = producer.get(src.name) if isinstance(src, TensorProxy) else None
            while made_by is not None and made_by.sym.name == "laid_out_as":  # the value, laid out as the input
                made_by = producer.get(made_by.args[0].name)
            if made_by is not None and made_by.sym.name == "detached_update":
                continue  # an update made where autograd does not record it (no_grad): the input's history stays
            if isinstance(src, TensorProxy) and src.requires_grad and dst.name in index:
                writes.append((index[dst.name], src))
                written[b.output.name] = src
    return writes, written


