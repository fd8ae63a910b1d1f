"""Running a cache entry; a training entry's forward and backward traces run as one ``torch.autograd.Function``."""
from __future__ import annotations

import dataclasses

import torch

from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.driver.outputs import flatten_output
from thunder.executors import pythonex as px


def run_entry(entry, inps):
    for i in entry.marked_inputs:  # x.requires_grad_() inside the program: the caller's x requires grad, as in eager
        inps[i].requires_grad_()
    if entry.uses_autograd:
        out = run_with_autograd(entry, inps)
    else:
        out = entry.computation(*inps)
    rebuild = entry.output_rebuild
    if rebuild is not None:
        out = rebuild(out)
    if entry.state_writes:  # see [Note: state writes]
        out, values = out
        start = 0
        for write in entry.state_writes:
            end = start + len(write.leaves)
            write.apply(values[start:end])
            start = end
    return out


def first_inputs(entry, args, kwargs):
    """The inputs of the call ``entry`` was just compiled for.

    Its prologue rejects that call only when the program changed, while it was traced, Python state it
    had read (a counter it increments, a global it assigns): the trace is right for this call, whose
    inputs are then gathered without the checks; the next call sees the changed state and recompiles.
    """
    try:
        return entry.prologue(args, kwargs)
    except px.CacheMiss:
        return unchecked_prologue(entry)(args, kwargs)


def unchecked_prologue(entry):
    trace = entry.prologue_traces[-1]
    return trace.from_trace([b for b in trace.bound_symbols if b.sym not in px.CHECKS]).python_callable()


def run_inline(cd, args, kwargs):
    """A jitted callable called while another program is traced runs as plain Python, so that the outer
    trace records its operations (forward and backward then follow the outer program)."""
    from thunder.driver import python_state

    recorder = python_state.current()
    if recorder is not None and cd.module is not None:
        recorder.watch(cd.module, f"the jitted {type(cd.module).__name__}")
    return cd.fn(*args, **kwargs)


@dataclasses.dataclass(frozen=True)
class GradInfo:
    """How the autograd.Function treats a training entry's outputs and inputs."""

    nondiff_outputs: tuple
    n_outputs: int
    structured: bool
    enable_grad: bool = False  # called under no_grad, differentiable inside ([Note: grad mode inside the program])
    dirty_inputs: tuple = ()  # inputs updated in place with values that require grad ([Note: dirty inputs])
    # (output, input) positions of outputs that are inputs, unchanged: the call returns the input tensor itself, as
    # eager does, not the view of it that an autograd.Function returns
    passed_inputs: tuple = ()
    # inputs passed to the Function again, one per further part of their gradient ([Note: the gradient of a returned
    # input] in thunder/transforms/autodiff.py)
    parts: tuple = ()
    # per output (the dirty inputs last): the input positions its gradient reaches, and its (shape, dtype, device)
    inputs_reached: tuple = ()
    output_meta: tuple = ()
    runtime_extents: bool = False  # whether an output's shape holds one (its output_meta shape is None)
    # inputs that require grad but that no output's gradient reaches (``c.detach()`` of a captured ``c``): passed
    # detached, so that the Function's node has no edge into their history, which eager's graph never reaches either
    unreached_inputs: tuple = ()


def output_rebuild(result):
    """How a training entry's flat outputs become the program's output."""
    _, rebuild = flatten_output(result.output)
    if isinstance(result.output, (TensorProxy, NumberProxy)):
        return lambda values: values[0]
    return rebuild


def _apart_from_differentiable(flat, nondiff: tuple):
    """``flat`` with each non-differentiable output that is the very tensor of a differentiable one (``x.detach()``
    returned beside ``x``, one buffer to a fused region) replaced by a detached alias: marked non-differentiable, the
    tensor itself would stop the other's gradient."""
    skip = set(nondiff)
    differentiable = {id(t) for i, t in enumerate(flat) if i not in skip and isinstance(t, torch.Tensor)}
    if not any(id(flat[i]) in differentiable for i in nondiff):
        return flat
    flat = list(flat)
    for i in nondiff:
        if id(flat[i]) in differentiable:
            flat[i] = flat[i].detach()
    return tuple(flat)


class ThunderFunction(torch.autograd.Function):
    """Connects a forward/backward trace pair to torch.autograd."""

    @staticmethod
    def forward(ctx, entry, *inputs):
        ctx.set_materialize_grads(False)  # an output no loss used gets None: see backward
        info = entry.grad_info
        if info.parts:
            inputs = inputs[:len(inputs) - len(info.parts)]
        result, (saved_tensors, saved_others) = entry.computation(*inputs)
        ctx.save_for_backward(*saved_tensors)
        ctx.saved_others = saved_others
        ctx.entry = entry
        flat = result["flat_output"]
        ctx.shapes = None
        if info.runtime_extents:  # outputs with run-time extents: the shapes of this call
            ctx.shapes = [t.shape if isinstance(t, torch.Tensor) else None
                          for t in tuple(flat) + tuple(inputs[i] for i in info.dirty_inputs)]
        if info.nondiff_outputs:
            flat = _apart_from_differentiable(flat, info.nondiff_outputs)
            ctx.mark_non_differentiable(*(flat[i] for i in info.nondiff_outputs if isinstance(flat[i], torch.Tensor)))
        if info.dirty_inputs:  # see [Note: dirty inputs]
            dirty = tuple(inputs[i] for i in info.dirty_inputs)
            ctx.mark_dirty(*dirty)
            return tuple(flat) + dirty
        return flat

    @staticmethod
    def backward(ctx, *cotangents):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "thunder does not support double backward: the backward of a jitted function is not itself "
                "differentiable (torch.autograd.grad(..., create_graph=True) or backward(create_graph=True)). "
                "Compute higher-order gradients outside thunder.jit.")
        # With retain_graph=True the saved values stay for a later backward; otherwise they are released
        # now, and a second backward raises as eager's does.
        saved = list(ctx.saved_tensors)
        ctx.maybe_clear_saved_tensors()
        if ctx.saved_others is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved tensors after they "
                "have already been freed). Specify retain_graph=True if you need to backward through the graph a "
                "second time.")
        others = list(ctx.saved_others)
        if not torch._C._autograd._get_current_graph_task_keep_graph():
            ctx.saved_others = None
        info = ctx.entry.grad_info
        unused = [i for i, c in enumerate(cotangents) if c is None and info.inputs_reached[i]]
        if not unused:
            return (None, *ctx.entry.backward([saved, others], list(cotangents)))
        # Outputs no loss used: eager never reaches the inputs only they depend on, whose .grad stays None (an
        # optimizer then skips them, where a zero gradient would still decay and move them). Their cotangents are
        # zeros; the other inputs get their gradients. The zeros are one element expanded: a gradient they are
        # added to keeps its own layout (elementwise kernels ignore broadcast operands when they lay out their
        # result), as in eager, which adds nothing there; a later reduction then sums in eager's order. They are
        # -0.0, the zero that adds nothing: g + -0.0 is g, where g + 0.0 turns a -0.0 into 0.0 (the cotangent of an
        # input updated in place, which the caller does not use again, added to that of the outputs it reaches).
        cotangents = list(cotangents)
        for i in unused:
            shape, dtype, device = info.output_meta[i]
            shape = shape if shape is not None else ctx.shapes[i]
            cotangents[i] = torch.full((), -0.0 if dtype.is_floating_point or dtype.is_complex else 0, dtype=dtype,
                                       device=device).expand(shape)
        reached = frozenset().union(*(r for i, r in enumerate(info.inputs_reached) if cotangents[i] is not None
                                      and i not in unused))
        grads = ctx.entry.backward([saved, others], cotangents)
        return (None, *(g if i in reached else None for i, g in enumerate(grads)))


def run_with_autograd(entry, inps):
    info = entry.grad_info
    args = (*inps, *(inps[j] for j in info.parts)) if info.parts else inps
    if info.unreached_inputs:
        args = list(args)
        for i in info.unreached_inputs:
            args[i] = args[i].detach()
    if info.enable_grad:
        with torch.enable_grad():
            out = ThunderFunction.apply(entry, *args)
    else:
        out = ThunderFunction.apply(entry, *args)
    out = out[:info.n_outputs] if info.dirty_inputs else out
    if info.passed_inputs:
        out = list(out)
        for i, j in info.passed_inputs:
            out[i] = inps[j]
    return out
