"""User-defined ``torch.autograd.Function``s: the forward traced into the program, the backward into its gradient.

[Note: custom autograd functions]
While a program is traced with gradients needed, ``MyFn.apply(x, w)`` runs as eager runs it: ``MyFn.forward``
under ``torch.no_grad()`` with a context object (``TracedContext``), its operations recorded in the trace like
the program's own. Its backward is traced at once, with placeholder cotangents, into a scope of its own that
the trace does not keep. The trace then records one bound symbol named after the class, which takes the
function's tensor inputs, the forward's tensor outputs and the forward values the backward reads, and returns
the outputs the program sees: aliases of the forward's outputs that require grad (eager's outputs of the
function's node). Autodiff differentiates that symbol with the traced backward (its ``vjp``), mapping the
values it reads by their position among the symbol's arguments, so that passes which rename values before
autodiff keep it right. The rest follows eager: the gradients the backward returns are checked and reduced
to the inputs' shapes and dtypes as autograd's engine does, outputs marked non-differentiable do not require
grad, and cotangents are materialized as zeros unless ``ctx.set_materialize_grads(False)``.

Without gradients (no input requires grad, or grad mode off) the function is traced through, as eager then
only runs its forward. ``ctx.mark_dirty`` (a forward updating its inputs in place) is refused, as are a
backward updating a tensor from outside it in place and (as eager does) an in-place update of an output
that is an input returned as is or a view.
"""
from __future__ import annotations

import inspect
import sys

import torch
from torch.autograd.function import FunctionCtx

from thunder.core import prims
from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol, Tag
from thunder.core.trace import get_tracectx
from thunder.driver.functionalization import ViewStep
from thunder.transforms.rename import substitute, substitute_bsym


class TracedContext(FunctionCtx):
    """The ``ctx`` a custom function's forward and backward see while thunder traces them."""

    def __init__(self, needs_input_grad: tuple):
        self.needs_input_grad = needs_input_grad
        self.to_save = ()
        self.materialize_grads = True
        self.non_differentiable: list = []

    def save_for_backward(self, *tensors):
        self.to_save = tensors

    @property
    def saved_tensors(self):
        return self.to_save

    def save_for_forward(self, *tensors):
        pass  # for forward-mode AD, which thunder does not do

    def mark_non_differentiable(self, *args):
        self.non_differentiable.extend(args)

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = bool(value)

    def mark_dirty(self, *args):
        raise NotImplementedError(
            "thunder does not support custom torch.autograd.Functions that update their inputs in place "
            "(ctx.mark_dirty); return a new tensor instead")


class FunctionSymbol(Symbol):
    """One call of a custom function: ``outs = MyFn(inputs, outputs, saved)``, differentiated by its backward."""

    def __init__(self, cls, record: "_Record"):
        super().__init__(cls.__name__, self._outputs, module="autograd_function")
        self.record = record

    def _outputs(self, inputs, outputs, saved):
        outs = tuple(prims.shallow_copy(o) for o in outputs)
        for o, differentiable in zip(outs, self.record.differentiable):
            if differentiable:
                with torch._C.DisableTorchFunction():
                    o.requires_grad_(True)
        return outs

    def vjp(self, inputs, outputs, saved):
        def backward(*cotangents):
            return self.record.backward(inputs, outputs, saved, cotangents)

        return self(inputs, outputs, saved), backward


class _Record:
    """What tracing one call of a custom function found; ``backward`` replays its backward in the current trace."""

    def __init__(self, name, inputs, outputs, differentiable, saved, cotangents, bsyms, grads, materialize):
        self.name = name
        self.inputs, self.outputs, self.saved = inputs, outputs, saved  # the proxies as traced
        self.differentiable = differentiable
        self.cotangents = cotangents  # placeholder per output (None: the backward was given None)
        self.bsyms = bsyms  # the backward's operations
        self.grads = grads  # one per input: the backward's gradient (None: none)
        self.materialize = materialize

    def backward(self, inputs, outputs, saved, cotangents):
        env = {}
        for old, new in zip((*self.inputs, *self.outputs, *self.saved), (*inputs, *outputs, *saved)):
            if old.name != new.name:
                env[old.name] = new
        for placeholder, ct, out in zip(self.cotangents, cotangents, outputs):
            if placeholder is None:
                continue
            if ct is None:
                if not self.materialize:
                    raise NotImplementedError(
                        f"thunder cannot differentiate the custom torch.autograd.Function {self.name} with "
                        "ctx.set_materialize_grads(False) where one of its outputs gets no gradient: its backward was "
                        "traced with a tensor there, not None")
                ct = prims.full(tuple(out.shape), 0 if not out.dtype.is_floating_point and not out.dtype.is_complex
                                else 0.0, device=out.device, dtype=out.dtype)
            env[placeholder.name] = ct
        trace = get_tracectx()
        for b in self.bsyms:
            b = substitute_bsym(b, env)
            if trace.has_extents:
                from thunder.core.extents import record

                record(trace, b)
            else:
                trace.record(b)
        return substitute(self.grads, env), None, None


def needs_custom_backward(tracer, args, kwargs) -> bool:
    return torch.is_grad_enabled() and any(
        p.requires_grad for p in flat_proxies(tracer.resolve((args, kwargs))) if isinstance(p, TensorProxy))


def apply(tracer, cls, args: tuple, kwargs: dict):
    """``cls.apply(*args, **kwargs)`` in a traced program that needs gradients (see [Note: custom autograd
    functions])."""
    if cls is torch.nn.modules._functions.BackwardHookFunction:
        _refuse_module_backward_hooks()
    setup_context = _setup_context_defined(cls)
    if setup_context:
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
    values = [tracer.resolve(a) if isinstance(a, torch.Tensor) else None for a in args]
    needs_input_grad = tuple(v is not None and v.requires_grad for v in values)
    ctx = TracedContext(needs_input_grad)
    with torch.no_grad():
        if setup_context:
            out = cls.forward(*args, **kwargs)
            cls.setup_context(ctx, args, out)
        else:
            out = cls.forward(ctx, *args, **kwargs)
    if not any(needs_input_grad):
        return out  # only tensors inside containers require grad: eager's outputs do not
    outs = out if type(out) is tuple else (out,)
    raw = [tracer.resolve(o) if isinstance(o, torch.Tensor) else None for o in outs]
    non_diff = {tracer.resolve(t).name for t in ctx.non_differentiable if isinstance(t, torch.Tensor)}
    differentiable = [r is not None and (r.dtype.is_floating_point or r.dtype.is_complex) and r.name not in non_diff
                      for r in raw]
    cotangents = [None if r is None or (not d and not ctx.materialize_grads) else
                  tracer.trace.tensor(tuple(r.shape), r.dtype, r.device) for r, d in zip(raw, differentiable)]
    bsyms, grads = _trace_backward(tracer, cls, ctx, args, values, cotangents)
    inputs = tuple(v for v in values if v is not None)
    tensor_outputs = tuple(r for r in raw if r is not None)
    saved = _read_from_forward(bsyms, grads, {p.name for p in (*inputs, *tensor_outputs)},
                               {c.name for c in cotangents if c is not None})
    record = _Record(cls.__name__, inputs, tensor_outputs, [d for r, d in zip(raw, differentiable) if r is not None],
                     saved, [c for r, c in zip(raw, cotangents) if r is not None], bsyms,
                     tuple(g for v, g in zip(values, grads) if v is not None), ctx.materialize_grads)
    symbol = FunctionSymbol(cls, record)
    results = iter(symbol(inputs, tensor_outputs, saved))
    program_outs = []
    for i, (o, r) in enumerate(zip(outs, raw)):
        if r is None:
            program_outs.append(o)
            continue
        new = next(results)
        tracer.layouts.add_value(new, r)
        if tracer.aliases.view_of(r) is not None or any(r is v for v in inputs):
            tracer.aliases.add_view(r, new, ViewStep(symbol, (), {}, i, (), kind="custom_function"))
        program_outs.append(new)
    return tuple(program_outs) if type(out) is tuple else program_outs[0]


def _refuse_module_backward_hooks():
    """torch runs a module's full backward hooks (and pre-hooks) from hooks on the nodes of ``BackwardHookFunction``,
    which wraps the module's inputs and outputs: inside thunder's backward, one compiled program, they would never be
    called."""
    frame, module = sys._getframe(1), None
    while frame is not None and module is None:
        owner = frame.f_locals.get("self")
        module = owner.module if isinstance(owner, torch.utils.hooks.BackwardHook) else None
        frame = frame.f_back
    name = type(module).__name__ if module is not None else "a module"
    raise NotImplementedError(
        f"backward hooks of {name}, a module the jitted function calls (Module.register_full_backward_hook, "
        "register_full_backward_pre_hook, or torch's global module backward hooks), are not supported: thunder's "
        "backward is one compiled program, and the hooks would never be called. Register them on a module that calls "
        "the jitted one (torch.nn.Sequential(jitted) runs them around thunder's backward), or use Tensor.register_hook "
        "on the jitted call's inputs or outputs.")


def _setup_context_defined(cls) -> bool:
    from torch.autograd.function import _SingleLevelFunction

    return cls.setup_context is not _SingleLevelFunction.setup_context


def _trace_backward(tracer, cls, ctx, args, values, cotangents):
    """The backward's operations, recorded in a scope the trace does not keep, and its gradients, one per argument
    (checked, reduced and cast as autograd's engine does)."""
    aliases = tracer.aliases
    state = {k: dict(v) for k, v in vars(aliases).items() if isinstance(v, dict)}
    trace = tracer.trace
    outside = set(trace.names) - {c.name for c in cotangents if c is not None}  # tensors from before the backward
    trace.push_scope()
    try:
        with torch.no_grad():
            returned = cls.backward(ctx, *cotangents)
            grads = _checked_grads(cls, returned, args, values)
            grads = tuple(tracer.resolve(g) if isinstance(g, torch.Tensor) else None for g in grads)
    finally:
        bsyms = trace.pop_scope()
    updated = [k for k, v in aliases.current.items() if k in outside and state["current"].get(k) is not v]
    if updated:
        raise NotImplementedError(
            f"the backward of the custom torch.autograd.Function {cls.__name__} updates {updated[0]}, a tensor from "
            "outside it, in place; thunder does not support that: compute a new tensor instead")
    for k, v in state.items():  # the backward's values stay in the backward: nothing after the call sees them
        setattr(aliases, k, v)
    return [b.replace(tags=b.tags - {Tag.RECOMPUTE_IN_BACKWARD}) for b in bsyms], grads


def _checked_grads(cls, returned, args, values) -> tuple:
    grads = returned if type(returned) is tuple else (returned,)
    n = len(args)
    if len(grads) < n or any(g is not None for g in grads[n:]):
        raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of gradients "
                           f"(expected {n}, got {len(grads)})")
    out = []
    for i, (value, g) in enumerate(zip(values, grads)):
        if value is None:
            if g is not None:
                raise RuntimeError(f"function {cls.__name__}Backward returned a gradient different than None at "
                                   f"position {i + 1}, but the corresponding forward input was not a Variable")
            out.append(None)
            continue
        if g is None or not value.requires_grad:
            out.append(None)
            continue
        shape, gshape = tuple(value.shape), tuple(g.shape)
        if shape != gshape:
            if not _expandable(shape, gshape):
                raise RuntimeError(f"Function {cls.__name__}Backward returned an invalid gradient at index {i} - got "
                                   f"{list(gshape)} but expected shape compatible with {list(shape)}")
            g = g.sum_to_size(shape)
        if g.dtype != value.dtype:
            g = g.to(value.dtype)
        out.append(g)
    return tuple(out)


def _expandable(shape: tuple, target: tuple) -> bool:
    if len(shape) > len(target):
        return False
    return all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(target)))


def _read_from_forward(bsyms, grads, known: set, cotangents: set) -> tuple:
    """The values the backward reads (or returns) that are neither its own nor already arguments of the symbol."""
    produced, found = set(cotangents) | known, {}
    for b in bsyms:
        for p in flat_proxies((b.args, b.kwargs)):
            if p.name not in produced:
                found.setdefault(p.name, p)
        produced.update(p.name for p in b.flat_outs)
    for p in flat_proxies(grads):
        if p.name not in produced:
            found.setdefault(p.name, p)
    return tuple(found.values())
