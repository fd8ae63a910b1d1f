"""CUDA graphs: the CUDA work of the executed traces captured once and then replayed.

``thunder.jit(model, transforms=[CUDAGraphTransform()])`` replaces each maximal run of capturable bound
symbols of the computation, forward and backward traces with one call, printed as ``CUDAGraphN`` with what it
runs as comments beneath. A step that is bound by the host (hundreds of kernel launches, each behind some
Python) then costs one graph launch per trace: the GPU's time, not Python's.

Capturable: a bound symbol whose tensors are all on CUDA, that has at least one, produces no Python numbers
(those would be computed once, at capture), passes no other Python objects (the autograd graph of an op
differentiated by torch's autograd, thunder/torch/autograd_rule.py), copies no Python data from host memory
(``torch.tensor(0.0, device="cuda")``, Tag.HOST_DATA) and has no side effect but writing into a tensor.
Collectives, reseeding, operations on the CPU and the statements of the trace run as before, between graphs.

[Note: CUDA graph replays]
A graph reads and writes fixed addresses. Its first call with given Python numbers runs as usual (compiling
whatever compiles lazily); the second captures and then replays. Every later call replays:

- Inputs: a parameter, an input the trace writes into, and an output of another graph (saved for the
  backward, say) are read where they lie: replay requires them at the captured address, and where one has
  moved the call runs as usual instead. Every other input is copied into a buffer of the graph's own.
- Outputs: those the caller receives (the program's outputs, the gradients) are copied out of the graph's
  memory, since the next replay overwrites it. Values kept for the backward are handed out as aliases of
  that memory; while any such alias from the last replay is still alive (two forwards before their
  backwards, a ``retain_graph``), the call runs as usual rather than overwrite it.
- Random numbers come from torch's CUDA generator, which advances on every replay; under a seed, dropout's
  masks are eager's.

So a graph never produces a different result from the program run as usual: where replaying could not be
right, the program runs as usual. Each graph holds its own memory pool (its working set stays reserved).
"""
from __future__ import annotations

import collections
import time
import warnings
import weakref

import torch

from thunder.core.codeutils import flat_proxies
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.statements import STATEMENTS, python_return
from thunder.core.symbol import BoundSymbol, Tag, has_tag
from thunder.core.trace import TraceCtx
from thunder.executors.ownership import LONE_STORAGE_USES, storage_uses, unshared_args, vouched
from thunder.executors.regions import region_interface
from thunder.extend import OperatorExecutor
from thunder.transforms.base import Transform
from thunder.transforms.delete_last_used import delete_last_used

__all__ = ["CUDAGraphTransform"]

ex = OperatorExecutor("cudagraph")

# Number of calls (with given Python numbers) that run as usual before a graph is captured.
_WARMUP_CALLS = 1
# Captures tried before a segment runs as usual for good. A failed capture is tried again on a later call: what
# failed may be one-time work that the call run as usual after it completes (a fused region's first call, which
# autotunes its kernels and synchronizes, where its inputs reused memory otherwise than in the calls before).
_CAPTURE_TRIES = 2


class CUDAGraphTransform(Transform):
    """Runs the CUDA work of each executed trace as CUDA graphs (see [Note: CUDA graph replays])."""

    def __init__(self, *, min_symbols: int = 2):
        if not isinstance(min_symbols, int) or min_symbols < 1:
            raise ValueError(f"min_symbols must be a positive int, got {min_symbols!r}")
        self.min_symbols = min_symbols

    # What the graphs hold and how they are captured: tests emulate CUDA's graphs on the CPU with these.
    device_type = "cuda"

    @staticmethod
    def capture(fn, inputs):
        return capture_cuda_graph(fn, inputs)

    def transform_executed(self, trace, compilation, kind: str):
        return graph_segments(trace, kind, min_symbols=self.min_symbols,
                              module_tensors=compilation.module_tensor_names(), device_type=self.device_type,
                              capture=self.capture)

    def __repr__(self):
        return f"CUDAGraphTransform(min_symbols={self.min_symbols})"


# -- which bound symbols a graph can hold ---------------------------------------------------------------


def _side_effects_are_copies(bsym) -> bool:
    if Tag.SIDE_EFFECT in bsym.sym.tags and bsym.sym.name != "copy_":
        return False
    return all(_side_effects_are_copies(s) for s in bsym.subsymbols)


def capturable(bsym, device_type: str = "cuda") -> bool:
    if bsym.sym in STATEMENTS or has_tag(bsym, Tag.COLLECTIVE) or not _side_effects_are_copies(bsym):
        return False
    if has_tag(bsym, Tag.HOST_DATA):  # a copy from pageable host memory, which capture refuses
        return False
    if any(isinstance(o, NumberProxy) for o in bsym.flat_outs):
        return False
    values = (*bsym.flat_args, *bsym.flat_outs)
    if not all(isinstance(v, (TensorProxy, NumberProxy)) for v in values):  # Python objects (an autograd graph)
        return False
    tensors = [v for v in values if isinstance(v, TensorProxy)]
    return bool(tensors) and all(t.device.type == device_type for t in tensors)


def _writes_into(bsym) -> set:
    """Names of the tensors ``bsym`` (or what it runs) writes into."""
    if bsym.sym.name == "copy_" and Tag.SIDE_EFFECT in bsym.sym.tags:
        return {bsym.flat_args[1].name} if len(bsym.flat_args) > 1 else set()
    out = set()
    for s in bsym.subsymbols:
        out |= _writes_into(s)
    return out


# -- the trace transform --------------------------------------------------------------------------------


def graph_segments(trace, kind: str, *, min_symbols: int = 2, module_tensors: frozenset = frozenset(),
                   device_type: str = "cuda", capture=None):
    """``trace`` with each maximal run of at least ``min_symbols`` capturable bound symbols replaced by one
    call of a ``_GraphedSegment``. ``kind``: "computation", "forward" or "backward"; ``module_tensors``: the
    names of the module's parameters and buffers (read in place by the graphs)."""
    start = time.perf_counter_ns()
    bsyms = trace.bound_symbols
    runs, current = [], []
    for i, b in enumerate(bsyms):
        if capturable(b, device_type):
            current.append(i)
            continue
        if current:
            runs.append(current)
        current = []
    if current:
        runs.append(current)
    runs = [r for r in runs if len(r) >= min_symbols]
    if not runs:
        return trace
    returned = _caller_visible(bsyms, kind)
    last_read = {a.name: i for i, b in enumerate(bsyms) for a in b.flat_args}
    start_of = {r[0]: r for r in runs}
    out, i, n = [], 0, 0
    while i < len(bsyms):
        run = start_of.get(i)
        if run is None:
            out.append(bsyms[i])
            i += 1
            continue
        members = [bsyms[k] for k in run]
        read_later = {o.name for b in members for o in b.flat_outs if last_read.get(o.name, -1) > run[-1]}
        out.append(_segment(members, read_later, returned, module_tensors, f"CUDAGraph{n}",
                            capture or capture_cuda_graph, backward=kind == "backward"))
        n += 1
        i = run[-1] + 1
    return trace.from_trace(out).set_provenance("CUDA graphs", start)


def _caller_visible(bsyms, kind: str) -> set:
    """Names of the values the caller receives: the program's outputs and the gradients; not the values the
    forward keeps for the backward."""
    ret = next((b for b in reversed(bsyms) if b.sym is python_return), None)
    if ret is None:
        return set()
    if kind == "forward":
        result = ret.args[0][0] if isinstance(ret.args[0], tuple) else ret.args[0]
        flat = result.get("flat_output", ()) if isinstance(result, dict) else result
        return {p.name for p in flat_proxies(flat)}
    return {a.name for a in ret.flat_args}


def _segment(members, used_later: set, returned: set, module_tensors: frozenset, name: str,
             capture, backward: bool) -> BoundSymbol:
    inputs, outputs = region_interface(members, used_later)
    written = set().union(*(_writes_into(b) for b in members))
    body = TraceCtx(f"{name.lower()}_body", params=list(inputs))
    body.bound_symbols = list(members) + [BoundSymbol(python_return, (tuple(outputs),), {}, None)]
    fn = delete_last_used(body).python_callable()
    runner = _GraphedSegment(
        fn, name,
        numbers=tuple(k for k, a in enumerate(inputs) if isinstance(a, NumberProxy)),
        in_place=frozenset(k for k, a in enumerate(inputs) if a.name in written or a.name in module_tensors),
        copied_out=tuple(o.name in returned for o in outputs), capture=capture, backward=backward)
    op = ex.register_operator(name, fn=runner)
    del ex.opmap[name]  # one per trace, never looked up by name: its graphs go with the trace
    return BoundSymbol(op, tuple(inputs), {}, list(outputs), tuple(members))


# -- capture and replay ---------------------------------------------------------------------------------

# How many tensors the live graphs hold on each storage (their outputs), by the storage's data pointer. An input
# found there is read in place (memory a graph writes); a storage no one else uses has exactly these uses, which
# is what a replay that overwrites it checks (a later graph's outputs may be views of an earlier one's memory, or
# lie in it where a region reused it: those uses are the graphs' own too).
_HELD: dict[int, int] = {}


def _hold(counts: dict):
    for ptr, n in counts.items():
        _HELD[ptr] = _HELD.get(ptr, 0) + n


def _release(counts: dict):
    for ptr, n in counts.items():
        left = _HELD.get(ptr, 0) - n
        if left > 0:
            _HELD[ptr] = left
        else:
            _HELD.pop(ptr, None)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _graphs_uses(t) -> int:
    """The uses of ``t``'s storage that live graphs hold themselves."""
    return _HELD.get(t.untyped_storage().data_ptr(), 0)


def capture_cuda_graph(fn, inputs: list):
    """``fn(*inputs)`` captured as a CUDA graph: (a callable replaying it, the graph's outputs). Nothing runs
    while capturing: the outputs hold their values after the first replay. The replaying callable is given
    the ``_Graph`` and the call's arguments (a real graph needs neither: it reads the captured addresses)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outputs = fn(*inputs)
    return lambda _graph, _args: graph.replay(), outputs


class _Graph:
    """One captured graph: its static inputs and outputs, and how to hand the outputs out."""

    def __init__(self, replay, static, in_place, borrowed, copied_in, outputs, copied_out, held):
        self._replay = replay
        self.static = static  # the graph's own input buffers (None where the input is read in place)
        self.in_place = in_place  # (position, data pointer) of the inputs read where they lie
        # (position, buffer, expanded dimensions, strides) of the inputs copied into the graph's buffers; an
        # expanded input (a gradient of ``sum()``) is copied without its expanded dimensions, and replays need
        # those expanded again (``strides``), not a full tensor there
        self.copied_in = copied_in
        self.outputs = outputs
        self.copied_out = copied_out
        # The storages the next replay overwrites and whose aliases are handed out: used by the graphs alone
        # (``_HELD``) while no alias is alive.
        tracked = {}  # not the storages of inputs read in place (``borrowed``), which are not the graph's
        for t, copy in zip(outputs, copied_out):
            if not copy and t.untyped_storage().data_ptr() not in borrowed:
                tracked.setdefault(t.untyped_storage().data_ptr(), t)
        self.tracked = list(tracked.items())
        _hold(held)  # the uses of storages this graph's outputs (and their bases) add, by data pointer
        weakref.finalize(self, _release, held)

    def why_not_replay(self, args) -> str | None:
        """None where a replay gives what running ``args`` as usual would, else why not (the input position)."""
        for i, ptr in self.in_place:
            if args[i].data_ptr() != ptr:
                return f"input {i}, read where it lies, moved"
        for i, _, expanded, strides in self.copied_in:
            if expanded and args[i].stride() != strides:
                return f"input {i} is expanded otherwise than when captured"
        for ptr, t in self.tracked:
            if storage_uses(t) != _HELD[ptr] + LONE_STORAGE_USES - 1:
                uses = storage_uses(t) - LONE_STORAGE_USES + 1
                return f"an output of the last replay is still in use ({uses} uses of its memory, the graphs' {_HELD[ptr]})"
        return None

    def replay(self, args):
        for i, buffer, expanded, strides in self.copied_in:
            buffer.copy_(_narrowed(args[i], expanded) if expanded else args[i])
        self._replay(self, args)
        return tuple(t.clone() if copy else t.detach() for t, copy in zip(self.outputs, self.copied_out))


def _read_in_place(t, position, in_place) -> bool:
    if position in in_place or isinstance(t, torch.nn.Parameter):
        return True
    if t.untyped_storage().data_ptr() in _HELD:
        return True
    return not _dense(_narrowed(t, _expanded(t)))  # elements overlapping otherwise than by expanding: no copy


def _expanded(t) -> tuple:
    return tuple(d for d in range(t.dim()) if t.stride(d) == 0 and t.size(d) > 1)


def _narrowed(t, dims):
    for d in dims:
        t = t.narrow(d, 0, 1)
    return t


def _dense(t) -> bool:
    """Whether ``t``'s elements fill its memory once each (in some order of its dimensions)."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _held_by(outputs, in_place, borrowed: dict) -> dict:
    """The uses of storages a graph's outputs keep from now on, by data pointer: all of a storage made while
    capturing; of a storage read in place (``borrowed``: its uses before capturing), the increase, and the inputs
    that the outputs are, or are views of (the caller's until now, the graph's from now on)."""
    before = {}
    for _, a in in_place:
        before[id(a)] = a
        if a._base is not None:
            before[id(a._base)] = a._base
    kept = {}
    for t in outputs:
        kept[id(t)] = t
        if t._base is not None:
            kept[id(t._base)] = t._base
    held = {}
    for t in kept.values():
        ptr = t.untyped_storage().data_ptr()
        if ptr not in held:
            held[ptr] = storage_uses(t) - borrowed.get(ptr, LONE_STORAGE_USES - 1)
        held[ptr] += id(t) in before
    return held


def _reusable(t) -> bool:
    """Whether a region could reuse ``t``'s memory, as far as views and other tensors on it go."""
    return t._base is None and storage_uses(t) - LONE_STORAGE_USES <= _graphs_uses(t)


def _vouched_for(tensors, owned):
    """Vouching for the tensors the trace alone references (``owned``): a value another graph wrote is used by
    that graph's record of its outputs too, which is no one else's use of its memory (a backward's region may
    reuse the memory of a value the forward's graph saved for it, as it would without graphs)."""
    mine = [t for t, o in zip(tensors, owned) if o and isinstance(t, torch.Tensor)]
    return vouched(mine, [_graphs_uses(t) for t in mine])


class _GraphedSegment:
    """The callable of one ``CUDAGraphN``: runs ``fn`` as usual, or replays a graph of it."""

    def __init__(self, fn, name: str, *, numbers: tuple, in_place: frozenset, copied_out: tuple,
                 capture=capture_cuda_graph, backward: bool = False):
        self.fn = fn
        self.backward = backward  # a part of a backward trace (reads values saved by the forward)
        self.capture = capture  # (fn, inputs) -> (replay, outputs)
        self.name = name
        self.numbers = numbers  # positions of Python-number inputs: a graph per distinct values
        self.in_place = in_place  # positions of the module's tensors and of inputs written into
        self.copied_out = copied_out
        self.graphs: dict = {}
        self.calls: dict = {}
        self.failed: str | None = None
        self.capture_failures = 0
        self.warned = False
        self.replays = 0  # calls that replayed a graph
        self.fallbacks = 0  # calls that had a graph but ran as usual (see why_not_replay)

    def __call__(self, *args):
        # (nothing here holds an argument: ``_as_usual`` and ``_capture`` count their references as the trace
        # handed them over; a replay does not count them)
        if self.backward and torch._C._autograd._get_current_graph_task_keep_graph():
            # autograd keeps the values saved for the backward (retain_graph), which a graph may write into
            # where it reuses memory that dies (see CompiledRegion._may_reuse): run as usual, reusing none
            return self._as_usual(args)
        key = tuple(args[i] for i in self.numbers)
        g = self.graphs.get(key)
        if g is not None:
            why = g.why_not_replay(args)
            if why is None:
                self.replays += 1
                return g.replay(args)
            self.fallbacks += 1
            self._warn_once(why)
            return self._as_usual(args)
        if self.failed is not None or _capturing():  # inside a capture of the caller's: run as usual
            return self._as_usual(args)
        seen = self.calls[key] = self.calls.get(key, 0) + 1
        if seen <= _WARMUP_CALLS:
            return self._as_usual(args)
        g = self._capture(args)
        if g is None:
            return self._as_usual(args)
        self.graphs[key] = g
        return g.replay(args)

    def _as_usual(self, args):
        """``fn(*args)``, its regions deciding on reusing memory as they would in the trace itself."""
        with _vouched_for(args, unshared_args(args)):
            return self.fn(*args)

    def _capture(self, args):
        # a buffer the graph copies an input into stands for that input: the regions may reuse its memory only
        # where they could reuse the input's (no view, no other tensor on its memory but graphs' records)
        owned = [mine and (not isinstance(a, torch.Tensor) or _reusable(a))
                 for a, mine in zip(args, unshared_args(args))]
        in_place, borrowed, copied_in, static = [], {}, [], [None] * len(args)
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                static[i] = a
            elif _read_in_place(a, i, self.in_place):
                in_place.append((i, a))
                borrowed[a.untyped_storage().data_ptr()] = storage_uses(a)
            else:
                expanded = _expanded(a)
                compact = _narrowed(a, expanded)
                buffer = torch.empty_strided(compact.size(), compact.stride(), dtype=a.dtype, device=a.device)
                buffer.copy_(compact)
                static[i] = buffer.expand(a.shape) if expanded else buffer
                copied_in.append((i, buffer, expanded, a.stride()))
        inputs = [a if static[i] is None else static[i] for i, a in enumerate(args)]
        try:
            # the graph's own buffers stand for the inputs they copy: what the trace alone references is reused
            # as it would be in the trace (so replays compute what running as usual computes)
            with _vouched_for(inputs, owned):
                replay, outputs = self.capture(self.fn, inputs)
        except Exception as e:  # noqa: BLE001 - what cannot be captured runs as usual, with a warning
            self.capture_failures += 1
            if self.capture_failures >= _CAPTURE_TRIES:
                self.failed = f"{type(e).__name__}: {e}"
                warnings.warn(f"thunder: {self.name} could not be captured as a CUDA graph and runs as usual "
                              f"({self.failed})", stacklevel=2)
            return None
        del inputs
        return _Graph(replay, static, tuple((i, a.data_ptr()) for i, a in in_place), set(borrowed),
                      tuple(copied_in), tuple(outputs), self.copied_out, _held_by(outputs, in_place, borrowed))

    def _warn_once(self, why: str):
        if not self.warned:
            self.warned = True
            warnings.warn(f"thunder: {self.name} runs without its CUDA graph: {why}", stacklevel=3)
