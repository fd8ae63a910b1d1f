"""From a call to a cache entry: trace the program, transform the trace, compile prologue and computation."""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import time

import torch

from thunder.driver import (checkpointing, frontend, global_setters, python_state, random_state, side_effects,
                            torchscript)
from thunder.driver.layouts import EagerOutputLayouts
from thunder.driver.compile_data import CacheEntry, CompileData
from thunder.driver.interpreter import InstructionRecorder
from thunder.driver.outputs import flatten_output, is_printable_structure
from thunder.driver.runtime import GradInfo, output_rebuild
from thunder.driver.prologue import PrologueBuilder
from thunder.driver.value_guards import ValueGuards
from thunder.core import prims
from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.executors import pythonex as px
from thunder.executors.passes import transform_for_execution
from thunder.executors.regions import partition
from thunder.transforms.autodiff import forward_and_backward, inputs_reached
from thunder.transforms.dce import dce
from thunder.transforms.delete_last_used import delete_last_used
from thunder.transforms.rematerialization import choose_recomputed
from thunder.transforms.rename import substitute_inputs
from thunder.transforms.saved_for_backward import save_for_backward
from thunder.extend import FusionExecutor
from thunder.torch import autocast as ltorch_autocast
from thunder.torch import shapes as ltorch_shapes


class TraceResult:
    """A recorded program: its computation trace, prologue builder and output structure."""

    def __init__(self, computation, prologue, output, rebuild, recorder, tracer, state_writes=()):
        self.computation = computation
        self.prologue = prologue
        self.output = output  # with state writes, (the program's output, the values written)
        self.state_writes = state_writes  # python_state.StateWrite, in the order of the values written
        self.rebuild = rebuild
        self.recorder = recorder
        self.tracer = tracer


def _arg_names(fn, args, kwargs) -> list:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    names = []
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            names += [f"{p.name}_{i}" for i in range(len(args) - len(names))]
            break
    return names


@contextlib.contextmanager
def module_tensors_as_proxies(module, comp: TraceCtx, prologue: PrologueBuilder, compilation: "Compilation"):
    """Swaps the module's parameters and buffers for proxies while tracing (the prologue fetches the real ones);
    transforms may give the program something else in their place (``transform_module_tensors``). Yields the
    modules, the swaps and what the program sees of each distinct tensor, with its source."""
    if module is None:
        yield [], [], []
        return
    seen: dict[int, TensorProxy] = {}
    created = []  # (proxy, source), one per distinct tensor
    holders = []  # (dict, name, tensor, collection)
    modules = list(module.named_modules(remove_duplicate=True))
    for qualname, m in modules:
        for collection in ("_parameters", "_buffers"):
            d = m.__dict__[collection]
            for name, t in list(d.items()):
                if t is None:
                    continue
                if id(t) not in seen:
                    frontend.check_tensor_type(t)
                    fq = f"{qualname}.{name}" if qualname else name
                    proxy = comp.tensor(tuple(t.shape), t.dtype, t.device, t.requires_grad,
                                        name="t_" + fq.replace(".", "_"))
                    if collection == "_parameters":
                        proxy._is_param = True  # isinstance(p, nn.Parameter) answers as in eager
                    source = frontend.ModuleTensorSource(m, qualname, collection, name)
                    prologue.unpack_source(proxy, source, t)
                    seen[id(t)] = proxy
                    created.append((proxy, source))
                holders.append((d, name, t, collection))
    program_sees = {}
    with tracectx(comp):
        for transform in compilation.compile_data.transforms:
            tensors = [(program_sees.get(p.name, p), src) for p, src in created]
            for (p, _), new in zip(created, transform.transform_module_tensors(tensors, compilation)):
                program_sees[p.name] = new
    swaps = []
    before = {id(m.__dict__[c]): dict(m.__dict__[c]) for _, m in modules for c in ("_parameters", "_buffers")}
    try:
        for d, name, t, collection in holders:
            proxy = seen[id(t)]
            proxy = program_sees.get(proxy.name, proxy)
            swaps.append((d, name, t, proxy, collection))
            d[name] = proxy
        yield modules, swaps, [(program_sees.get(p.name, p), src) for p, src in created]
    finally:
        for d, name, t, _, _ in reversed(swaps):
            d[name] = t
        for _, m in modules:  # entries the program added (``register_buffer``) hold no traced tensor afterwards
            for collection in ("_parameters", "_buffers"):
                d, old = m.__dict__[collection], before[id(m.__dict__[collection])]
                for name in [n for n, v in d.items() if isinstance(v, Proxy) and old.get(n) is not v]:
                    if name in old:
                        d[name] = old[name]
                    else:
                        del d[name]


def detach_before_marking(comp: TraceCtx, marked: dict) -> None:
    """The inputs the program set ``requires_grad`` on (``Tracer.set_requires_grad``) require grad from the start of the
    trace; the operations before the setting read a detached copy instead, so that, as in eager, the input's gradient
    comes from the later uses alone."""
    if not marked:
        return
    proxies = {p.name: p for b in comp.bound_symbols[:max(marked.values())] for p in b.flat_args
               if isinstance(p, TensorProxy) and p.name in marked}
    if not proxies:
        return
    body = comp.bound_symbols[:]
    comp.bound_symbols.clear()
    copies = {name: ltorch_shapes.detach(p) for name, p in proxies.items()}  # recorded first
    for i, bsym in enumerate(body):
        mapping = {name: c for name, c in copies.items() if i < marked[name]}
        comp.bound_symbols.append(substitute_inputs(bsym, mapping))


def _compiled_code_as_python():
    """A torch.compile'd function the program calls runs as its Python, which thunder traces (dynamo would trace the
    proxies itself). Only where dynamo is loaded (torch.compile loads it): importing it costs seconds a process."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def trace_program(cd: CompileData, args, kwargs, compilation: "Compilation") -> TraceResult:
    checkpointing.install()
    random_state.install()
    global_setters.install()
    torchscript.install()
    comp = TraceCtx("computation")
    prologue = compilation._prologue = PrologueBuilder(comp, cd.cache_option, cd.functional)
    prologue.start_ns = time.perf_counter_ns()
    with tracectx(comp):
        pargs, pkwargs = prologue.unpack_call(args, kwargs, _arg_names(cd.fn, args, kwargs))
    known = {}
    if cd.module is not None:
        frontend.scan_module_sources(cd.module, known)
    else:
        frontend.scan_function_sources(cd.fn, known)
    tracer = frontend.Tracer(cd.fn, functional=cd.functional, trace=comp, known_sources=known,
                             sharp_edges=cd.sharp_edges)
    arguments = frozenset(p.name for p, src in prologue.inputs
                          if isinstance(p, TensorProxy) and isinstance(src, frontend.ArgSource))
    guards = ValueGuards(tracer, arguments, prologue)
    comp.tensor_values, comp.extent_comparisons = guards.value, guards.compare
    recorder = InstructionRecorder()
    autocast_state = ltorch_autocast.state()
    state = python_state.StateRecorder(tracer, cd.sharp_edges)
    grad_enabled = torch.is_grad_enabled()
    with module_tensors_as_proxies(cd.module, comp, prologue, compilation) as (modules, swaps, module_tensors), \
            contextlib.closing(state):
        for p, _ in prologue.inputs:
            if isinstance(p, TensorProxy):
                tracer.register_input(p, prologue.values.get(p.name))
        with tracectx(comp):
            for transform in cd.transforms:
                for proxy, new in transform.update_module_tensors(module_tensors, compilation):
                    tracer.inplace(proxy, new, no_grad=True)
        python_state.watch_program(state, cd.fn, modules, prologue.objects)
        with side_effects.watched(cd.fn, cd.sharp_edges), frontend.active(tracer), tracectx(comp), \
                frontend.TracingMode(tracer), recorder, state.active(), _compiled_code_as_python():
            out = cd.fn(*pargs, **pkwargs)
        comp.tensor_values = comp.extent_comparisons = None
        with tracectx(comp):
            detach_before_marking(comp, tracer.marked_inputs)
        with tracectx(comp):
            replaced = _adopt_replaced_module_tensors(swaps, tracer, modules)
    writes = state.take_state_writes(
        frozenset(p.name for p, src in prologue.inputs if isinstance(src, frontend.ModuleTensorSource))) + replaced
    if torch.is_grad_enabled() != grad_enabled:
        torch.set_grad_enabled(grad_enabled)
        raise NotImplementedError(
            "The jitted program changes the grad mode and does not restore it (torch.set_grad_enabled without a "
            "matching call, or torch.no_grad().__enter__()), which a compiled program cannot replay on later calls. "
            "Use `with torch.no_grad():` / `with torch.enable_grad():` blocks, or restore the mode before returning.")
    prologue.check_containers()
    with tracectx(comp):
        out = tracer.finish((out, tuple(p for w in writes for p in w.leaves)) if writes else out)
    for captured in tracer.inputs:
        if isinstance(captured.source, frontend.GradSource):
            prologue.unpack_grad(captured.proxy, captured.source.tensor, tracer.real_inputs.get(getattr(captured.proxy, "name", None)))
            continue
        t = _real_tensor_of(captured.source, tracer)
        prologue.unpack_source(captured.proxy, captured.source, t)
    prologue.check_layouts(tracer.layouts)
    prologue.check_values(guards.guards)
    prologue.check_updated_inputs([k for k in tracer.aliases.current if k in tracer.input_names])
    if prologue.check:
        state.emit(prologue)
    state.report()
    prologue.check_state(autocast_state, modules)
    if autocast_state[0] or autocast_state[2]:
        comp.decorators.append("@no_autocast")
    comp.params = [p for p, _ in prologue.inputs]
    leaves, rebuild = flatten_output(out)
    marked = [p.name for p in leaves if isinstance(p, TensorProxy) and p.name in tracer.marked_values]
    if marked:
        raise NotImplementedError(
            f"The jitted program returns {marked[0]}, a tensor it computed and then set requires_grad on: in eager a "
            "leaf of autograd, whose .grad the backward fills, where thunder returns a computed value (its .grad "
            "stays None). Set requires_grad on it outside the jitted function.")
    if is_printable_structure(out):
        rebuild = None
        ret = out
    else:
        ret = tuple(leaves)
    with tracectx(comp):
        px.python_return(ret)
    comp.eager_layouts = EagerOutputLayouts(tracer.layouts, leaves)
    return TraceResult(comp, prologue, out, rebuild, recorder, tracer, tuple(writes))


def _adopt_replaced_module_tensors(swaps, tracer, modules) -> list:
    """A buffer the program replaced (``self.buf = new``) gets the new value: written into it, as an in-place update
    would (values as in eager; the buffer stays the same tensor object), when shape and dtype agree; otherwise the
    new tensor becomes the buffer after every call (a state write), and a later call, seeing the buffer's new
    shape, compiles again, as timm's ConViT replaces its position indices at its first call. Anything else (a
    parameter replaced, a buffer set to None) is refused."""
    writes = []
    swapped = {(id(d), name) for d, name, *_ in swaps}
    for qualname, m in modules:  # a buffer the program registers (``register_buffer``), or set where it was None
        for collection in ("_parameters", "_buffers"):
            d = m.__dict__[collection]
            for name, new in list(d.items()):
                if not isinstance(new, Proxy) or (id(d), name) in swapped:
                    continue
                owner = f"module.{qualname}" if qualname else "module"
                if collection == "_parameters" or not isinstance(new, TensorProxy):
                    raise NotImplementedError(
                        f"The program registers the parameter {name!r} of {owner} while thunder traces it; thunder "
                        "cannot add parameters to a module. Register it in __init__ (or call the module once before "
                        "thunder.jit).")
                label = f"{owner}.{name}"
                writes.append(python_state.StateWrite(m, name, new, label))
                d[name] = None  # a buffer after the call, which the write gives its tensor
    for d, name, _, proxy, collection in swaps:
        new = d.get(name)
        if new is proxy:
            continue
        d[name] = proxy
        if collection == "_buffers" and isinstance(new, TensorProxy):
            if tuple(new.shape) == tuple(proxy.shape) and new.dtype is proxy.dtype:
                tracer.inplace(proxy, new, no_grad=True)
            else:
                qualname, owner = next((q, m) for q, m in modules if m._buffers is d)
                label = f"module.{qualname}.{name}".replace("..", ".")
                writes.append(python_state.StateWrite(owner, name, new, label))
            continue
        kind = "parameter" if collection == "_parameters" else "buffer"
        raise NotImplementedError(
            f"The program replaces the {kind} {name!r} with {'None' if new is None else 'another tensor'} while "
            "thunder traces it; thunder can only give a buffer a new tensor. Update it in place "
            "(`self.buf.copy_(value)`) or keep the new tensor outside the module.")
    return writes


def _real_tensor_of(source, tracer):
    if isinstance(source, frontend.GlobalSource):
        return source.globals_dict[source.name]
    if isinstance(source, frontend.CellSource):
        return source.cell.cell_contents
    if isinstance(source, frontend.AttrSource):
        return getattr(source.obj, source.name)
    if isinstance(source, frontend.ModuleTensorSource):  # a module reached from globals, closures or arguments
        return source.module.__dict__[source.collection][source.name]
    return source.value


def used_params(trace: TraceCtx, candidates: list, keep=frozenset()) -> list:
    used = set(keep)
    for bsym in trace.bound_symbols:
        used.update(p.name for p in bsym.flat_args)
    return [p for p in candidates if p.name in used]


class Compilation:
    """One compilation, from a call to a cache entry: what transforms see besides the traces.

    ``compile_data``: the jitted callable and its options (``thunder_module`` among them). ``sources``:
    where the prologue fetches each input proxy (by name), e.g. a ``ModuleTensorSource`` naming the
    parameter or buffer and its submodule. ``grad_inputs`` (training only): the backward trace's output
    ``i`` is the gradient of the forward input ``grad_inputs[i]``. ``read_state(obj, name)`` reads Python
    state a transform specializes on (``no_sync``, say): the entry's prologue checks it on every call, so a
    change gives another entry.
    """

    def __init__(self, cd: CompileData):
        self.compile_data = cd
        self.sources: dict = {}
        self.grad_inputs: list | None = None
        self._prologue: PrologueBuilder | None = None  # set when tracing starts

    @property
    def thunder_module(self):
        return self.compile_data.thunder_module

    def parameter_name(self, proxy) -> str | None:
        """The qualified name (``"layer.0.weight"``) of the module parameter or buffer ``proxy`` stands for."""
        src = self.sources.get(getattr(proxy, "name", None))
        if isinstance(src, frontend.ModuleTensorSource):
            return f"{src.qualname}.{src.name}" if src.qualname else src.name
        return None

    def module_tensor_names(self) -> frozenset:
        """The names of the input proxies that stand for module parameters or buffers."""
        return frozenset(n for n, src in self.sources.items() if isinstance(src, frontend.ModuleTensorSource))

    def read_state(self, obj, name: str):
        """``getattr(obj, name)``, checked by the prologue on every call (a change is a cache miss)."""
        value = getattr(obj, name)
        self._prologue.check_attribute(obj, name, value)
        return value


def _device_types(cd: CompileData, args, kwargs, max_depth: int = 4) -> frozenset:
    """The device types of the call's tensors: its arguments' (in lists, tuples and dicts up to ``max_depth`` deep;
    a hint for ``Executor.before_tracing``, not a walk of everything), and the module's first parameter's or
    buffer's."""
    tensors, level = [], [args, kwargs]
    for _ in range(max_depth):
        tensors += [x for x in level if isinstance(x, torch.Tensor)]
        level = [y for x in level if isinstance(x, (list, tuple, dict))
                 for y in (x.values() if isinstance(x, dict) else x)]
    if cd.module is not None:
        tensors += [t for t in (next(cd.module.parameters(), None), next(cd.module.buffers(), None)) if t is not None]
    return frozenset(t.device.type for t in tensors)


def compile_entry(cd: CompileData, args, kwargs) -> CacheEntry:
    """The phases, in order, for inference and training alike: trace, dead-code elimination, computation
    transforms, then (training) autodiff, forward/backward transforms and the choice of saved values, then
    executors, post-executor transforms, freeing after last use, and the cache entry with its prologue."""
    start = time.perf_counter_ns()
    devices = _device_types(cd, args, kwargs)
    for ex in cd.executors:
        ex.before_tracing(devices)
    compilation = Compilation(cd)
    result = trace_program(cd, args, kwargs, compilation)
    try:
        return _compile_traced(cd, result, compilation, start)
    finally:
        result.computation.eager_layouts.release()


def _compile_traced(cd: CompileData, result: TraceResult, compilation: Compilation, start: int) -> CacheEntry:
    compilation.sources = {p.name: src for p, src in result.prologue.inputs if hasattr(p, "name")}
    comp = result.computation
    comp.set_provenance("Trace", start)
    candidates = [p for p, _ in result.prologue.inputs]
    needs_grad = not cd.disable_torch_autograd and (
        torch.is_grad_enabled() and any(isinstance(p, TensorProxy) and p.requires_grad for p in candidates)
        or _records_grad(comp))  # torch.enable_grad() inside a program called under no_grad
    traces = [comp]
    trace = dce(comp)
    traces.append(trace)
    for transform in cd.transforms:
        trace = _append_if_new(traces, trace, transform.transform_computation(trace, compilation))
    if not needs_grad:
        params = used_params(trace, candidates, keep=result.tracer.marked_inputs.keys())  # (their flags are set)
        trace.params = params
        traces += _executable(trace, cd, compilation, "computation")
        return make_entry(result, params, traces, output_rebuild=result.rebuild)

    outer_grad = torch.is_grad_enabled()
    arguments = frozenset(p.name for p, src in result.prologue.inputs
                          if isinstance(p, TensorProxy) and isinstance(src, frontend.ArgSource))
    fb = forward_and_backward(trace, candidates, arguments)
    outputs = [fb.written.get(o.name, o) if isinstance(o, TensorProxy) else o for o in fb.flat_outputs] + [
        src for _, src in fb.dirty]  # an updated input as an output: its gradient is the written value's
    reached = inputs_reached(fb.forward, fb.inputs, outputs, fb.parts)
    output_meta = tuple((tuple(o.shape) if all(type(d) is int for d in o.shape) else None, o.dtype, o.device)
                        if isinstance(o, TensorProxy) else None for o in outputs)  # (None: a run-time extent)
    compilation.grad_inputs = [fb.grad_of(i) for i in range(len(fb.inputs) + len(fb.parts))]
    fwd, bwd = fb.forward, fb.backward
    for transform in cd.transforms:
        fwd, bwd = transform.transform_forward_backward(fwd, bwd, compilation)
    fwd, bwd = save_for_backward(fb, fwd, bwd, recompute=_recompute_policy(cd.executors))
    # The tracer's layouts by the forward's names of the program's outputs; none for the backward, whose names
    # are not the tracer's (a gradient named as one of the program's values is not laid out as that value)
    returned = flat_proxies(trace.bound_symbols[-1].args)  # as fb.flat_outputs: the proxies (no constants)
    fwd.eager_layouts = bwd.eager_layouts = None
    if len(returned) == len(fb.flat_outputs) and comp.eager_layouts is not None:
        values = {o.name: o for b in trace.bound_symbols for o in b.flat_outs if isinstance(o, TensorProxy)}
        values.update({new: values[old] for new, old in fb.renamed.items() if old in values})
        fwd.eager_layouts = comp.eager_layouts.renamed(
            {a.name: b.name for a, b in zip(returned, fb.flat_outputs) if isinstance(a, TensorProxy)
             and isinstance(b, TensorProxy)}, values)
    traces.append(fwd)
    bwd_traces = [bwd]
    traces += _executable(fwd, cd, compilation, "forward")
    bwd_traces += _executable(bwd, cd, compilation, "backward")
    nondiff = tuple(i for i, o in enumerate(fb.flat_outputs)
                    if not (isinstance(o, TensorProxy) and (o.requires_grad or o.name in fb.written)))
    position = {p.name: j for j, p in enumerate(candidates) if isinstance(p, TensorProxy)}
    dirty = {candidates[i].name for i, _ in fb.dirty}
    # an output that is an input, or an input's write-back that autograd does not record (an update under no_grad):
    # the caller's tensor itself, as eager returns it
    copied = {b.output.name: b.args[1].name for b in fb.forward.bound_symbols
              if b.sym is prims.copy_ and isinstance(b.args[1], TensorProxy)}
    sources = [copied.get(o.name, o.name) if isinstance(o, TensorProxy) else None for o in fb.flat_outputs]
    passed = tuple((i, position[n]) for i, n in enumerate(sources) if n in position and n not in dirty)
    reached_any = frozenset().union(*reached)
    unreached = tuple(i for i, p in enumerate(candidates) if isinstance(p, TensorProxy) and p.requires_grad
                      and i not in reached_any and p.name not in dirty)
    grad_info = GradInfo(nondiff, len(fb.flat_outputs), is_printable_structure(result.output),
                         enable_grad=not outer_grad, dirty_inputs=tuple(i for i, _ in fb.dirty), passed_inputs=passed,
                         parts=fb.parts, unreached_inputs=unreached,
                         inputs_reached=reached, output_meta=output_meta,
                         runtime_extents=any(m is not None and m[0] is None for m in output_meta))
    return make_entry(result, candidates, traces, output_rebuild=output_rebuild(result), backward_traces=bwd_traces,
                      grad_info=grad_info)


def _recompute_policy(executors):
    """Rematerialization for the first fusion executor that asks for it: the backward recomputes the forward
    values that executor would fuse, where that saves memory (thunder/transforms/rematerialization.py)."""
    for i, ex in enumerate(executors):
        if isinstance(ex, FusionExecutor) and ex.rematerialize:
            cheap = functools.partial(ex.recomputable, claimed_first=executors[:i])
            fused = functools.partial(ex.fuses, claimed_first=executors[:i])

            def regions(bsyms):
                return [item for item in partition(bsyms, fused, ex.is_barrier) if isinstance(item, list)]

            return lambda fwd, bwd: choose_recomputed(fwd, bwd, cheap, fused, regions,
                                                      recompute_unfused_reads=ex.recompute_unfused_reads)
    return None


def _append_if_new(traces: list, old: TraceCtx, new: TraceCtx) -> TraceCtx:
    if new is not old:
        traces.append(new)
    return new


def _records_grad(trace: TraceCtx) -> bool:
    """Whether an operation of ``trace`` ran with grad enabled on inputs requiring grad (its output requires grad)."""
    return any(isinstance(o, TensorProxy) and o.requires_grad for b in trace.bound_symbols for o in b.flat_outs)


def _executable(trace: TraceCtx, cd: CompileData, compilation: Compilation, kind: str) -> list:
    """The executors' trace of ``trace``, what post-executor transforms make of it, and the same with ``del``
    statements (the last is what runs). ``kind``: "computation", "forward" or "backward"."""
    traces = [transform_for_execution(trace, cd.executors)]
    for transform in cd.transforms:
        _append_if_new(traces, traces[-1], transform.transform_executed(traces[-1], compilation, kind))
    traces.append(delete_last_used(traces[-1]))
    return traces


def make_entry(result: TraceResult, params: list, traces: list, *, output_rebuild, backward_traces=(),
               grad_info=None) -> CacheEntry:
    """A cache entry running ``traces[-1]`` (and ``backward_traces[-1]``, when training) behind a fresh prologue."""
    finish_start = time.perf_counter_ns()
    # Numbers specialized anywhere while building this entry (tracing, autodiff, executors): the traces
    # derived from the computation share one set (see [Note: Python number semantics] in proxies.py).
    result.prologue.check_specialized(result.computation.specialized_numbers)
    # inputs whose strides the trace's choices depend on: the layouts fused regions keep, those of in-place updates
    kept = result.computation.eager_layouts.kept_for if result.computation.eager_layouts is not None else frozenset()
    result.prologue.check_strides(result.tracer.layouts, kept | result.tracer.layouts.strides_observed)
    prologue_trace = result.prologue.finish(params)
    prologue_trace.set_provenance("Prologue", finish_start)
    return CacheEntry(
        prologue=prologue_trace.python_callable(),
        computation=traces[-1].python_callable(),
        prologue_traces=[prologue_trace],
        computation_traces=traces,
        backward_traces=list(backward_traces),
        backward=backward_traces[-1].python_callable() if backward_traces else None,
        output_rebuild=output_rebuild,
        uses_autograd=bool(backward_traces),
        interpreted_instructions=result.recorder.instructions,
        interpreter_log=result.recorder.log,
        grad_info=grad_info,
        refs=tuple(result.prologue.weak_refs),
        state_writes=result.state_writes,
        marked_inputs=tuple(i for i, p in enumerate(params) if p.name in result.tracer.marked_inputs),
    )
