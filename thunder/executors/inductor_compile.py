"""Compiling one fused region with inductor, sharing identical regions, deferring kernel waits
(see [Note: compiling regions] in thunder/executors/inductorex.py)."""
from __future__ import annotations

import collections
import contextlib
import functools
import math
import queue
import sys
import threading
import time

import torch

from thunder.core.proxies import Proxy, TensorProxy
from thunder.executors.inductor_workarounds import inductor_workarounds
from thunder.executors.ownership import LONE_STORAGE_USES, vouched_uses

_PENDING: list = []  # (the scope of a generated module whose kernels are compiling, the CompiledRegion)
# compilations so far, by kind: "first" (a region's first, for the layout expected), "layout" (again, for inputs laid
# out otherwise), "no reuse" (for calls where an input whose memory the region would reuse is shared); a diagnostic
COMPILATIONS: collections.Counter = collections.Counter()
_LOCK = threading.RLock()  # one inductor compilation at a time: tracing and the deferred waits use global state


def region_signature(region) -> tuple:
    """What makes two regions compile alike: their symbols and constants, with proxies numbered by first
    appearance, and their inputs' shapes, dtypes and devices."""
    names: dict[str, int] = {}

    def canon(x):
        if isinstance(x, Proxy):
            return ("%", names.setdefault(x.name, len(names)))
        if isinstance(x, (tuple, list)):
            return (type(x).__name__, *map(canon, x))
        if isinstance(x, dict):
            return ("dict", *((k, canon(v)) for k, v in x.items()))
        if isinstance(x, (torch.dtype, torch.device)):
            return repr(x)
        return (type(x).__name__, repr(x))

    inputs = tuple((tuple(p.shape), p.dtype, p.device, canon(p)) for p in region.params)
    body = tuple((b.sym.module, b.sym.name, canon(b.args), canon(b.kwargs), canon(b.output))
                 for b in region.bound_symbols)
    return inputs, body


@contextlib.contextmanager
def _deferred_kernel_waits(owner):
    """Inductor's generated module waits for its kernels when imported: record the wait instead."""
    from torch._inductor.async_compile import AsyncCompile

    original = AsyncCompile.wait

    def wait(self, scope):
        _PENDING.append((scope, owner))

    AsyncCompile.wait = wait
    try:
        yield
    finally:
        AsyncCompile.wait = original


def wait_for_kernels(scope: dict):
    """Puts the kernels of a generated module (its globals, ``scope``) in place once they are built: inductor builds
    them in worker processes where it has compile threads. Raises what the compiler said where one failed (a hook:
    tests replace it)."""
    from torch._inductor.async_compile import AsyncCompile, get_compile_threads

    if get_compile_threads() > 1:
        AsyncCompile()._wait_futures(scope)


def resolve_pending():
    """Waits for every kernel still compiling; a region whose kernels failed runs with the torch executor."""
    start = time.perf_counter()
    count = len(_PENDING)
    while _PENDING:
        scope, owner = _PENDING.pop(0)
        try:
            wait_for_kernels(scope)
        except Exception as e:  # a kernel failed to build: inductor raises what the compiler said
            owner.fall_back(e)
    elapsed = time.perf_counter() - start
    if count and elapsed > 5.0:
        import sys

        print(f"thunder: inductor: waited {elapsed:.1f} s for the kernels of {count} regions", file=sys.stderr)


class _BackgroundCompiler:
    """A daemon thread running the compilations of executors with ``background=True``, one at a time; once the
    queue is empty it waits for their kernels and installs them (until then the torch executor runs)."""

    def __init__(self):
        self.queue: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None

    def submit(self, compile_job):
        """``compile_job()`` compiles and returns the function that puts its result to use."""
        if self.thread is None or not self.thread.is_alive():
            _leave_rng_state_alone_in_background()
            self.thread = threading.Thread(target=self._run, name="thunder-inductor", daemon=True)
            self.thread.start()
        self.queue.put(compile_job)

    def _run(self):
        installs = []
        while True:
            compile_job = self.queue.get()
            try:
                with _LOCK:
                    installs.append(compile_job())
                if self.queue.empty():
                    with _LOCK:
                        resolve_pending()
                    for install in installs:
                        install()
                    installs = []
            finally:
                self.queue.task_done()

    def wait(self):
        self.queue.join()


BACKGROUND = _BackgroundCompiler()

# where inductor saves and restores the random-number state around a compilation (or a benchmark of its kernels)
_RNG_PRESERVERS = ("torch._dynamo.utils", "torch._inductor.codegen.triton", "torch._inductor.select_algorithm")


def _leave_rng_state_alone_in_background():
    """Inductor saves the process's random-number state when it starts compiling and restores it when done.
    In the background thread that would rewind the training thread's stream to where it was when the
    compilation began (a dropout mask drawn twice, a shuffle repeated): there, thunder's version leaves the
    state alone. Compiling a region draws no random numbers (thunder does not ask for autotuning's benchmarks),
    which tests/test_fusion_inductor.py checks. Installed once, before the thread first starts; other threads
    keep inductor's behaviour."""
    import importlib

    for name in _RNG_PRESERVERS:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a module of inductor's that moved, or a backend missing here
            continue
        original = getattr(module, "preserve_rng_state", None)
        if original is None or getattr(original, "_thunder_thread_aware", False):
            continue

        def preserve_rng_state(original=original):
            if threading.current_thread() is BACKGROUND.thread:
                return contextlib.nullcontext()
            return original()

        preserve_rng_state._thunder_thread_aware = True
        module.preserve_rng_state = preserve_rng_state


@contextlib.contextmanager
def _known_cpu_isa(region):
    """Inductor's settings (``_cpu_isa_settings``) for a region with CPU inputs; where they trust the CPU, its
    probes of the instruction extensions ATen's CPU detection has answered too (AVX512-BF16, VNNI, AMX: a test
    program compiled and loaded each, about a second apiece in a fresh cache and a fifth of one in a warm cache,
    per process) are answered without compiling, when the compiler is a GCC that knows the extension. Other
    probes run as inductor makes them."""
    settings = _cpu_isa_settings() if any(p.device.type == "cpu" for p in region.params) else {}
    with contextlib.ExitStack() as stack:
        if settings:
            import torch._inductor.config as inductor_config

            stack.enter_context(inductor_config.patch(**settings))
            if _gcc_at_least(10):
                stack.enter_context(_answered_probes())
        yield


@functools.cache
def _probe_answers() -> dict:
    """What inductor's probe programs (a source each) would find, from ATen's CPU detection and the compiler's
    version: a probe only compiles its program with the extension's flags and loads it, running nothing, so it
    fails only where the compiler does not know the flags (AVX512-BF16 and VNNI: GCC 10; AMX: GCC 11; AMX-FP16:
    GCC 13). Inductor asks the AVX512-BF16, VNNI and AMX-FP16 probes only where ATen reports the extension, and
    follows the AMX probe with ATen's request for the operating system's permission (``torch.cpu._init_amx``),
    which still runs."""
    try:
        from torch._inductor.cpu_vec_isa import VecAMX, VecAVX512, VecAVX512VNNI

        return {VecAVX512._avx512_bf16_code: torch.cpu._is_avx512_bf16_supported() and _gcc_at_least(10),
                VecAVX512VNNI._avx512_vnni_code: torch.cpu._is_vnni_supported() and _gcc_at_least(10),
                VecAMX._amx_code: _gcc_at_least(11),
                VecAMX._amx_fp16_code: torch.cpu._is_amx_fp16_supported() and _gcc_at_least(13)}
    except (ImportError, AttributeError):  # private APIs of inductor's or ATen's that moved: let inductor probe
        return {}


@contextlib.contextmanager
def _answered_probes():
    from torch._inductor.cpu_vec_isa import VecISA

    known = _probe_answers()
    original = VecISA.check_build

    def check_build(self, code):
        return known[code] if code in known else original(self, code)

    VecISA.check_build = check_build
    try:
        yield
    finally:
        VecISA.check_build = original


@functools.cache
def _gcc_at_least(major: int) -> bool:
    """Whether inductor's C++ compiler is a GCC of version ``major`` or newer."""
    try:
        from torch._inductor.cpp_builder import _is_gcc_version_less_than, get_cpp_compiler, is_gcc

        return is_gcc() and not _is_gcc_version_less_than(get_cpp_compiler(), major)
    except Exception:  # a private API of inductor's that moved: let inductor probe
        return False


@functools.cache
def _cpu_isa_settings() -> dict:
    """Inductor settings that skip its CPU vector-instruction probe when ATen's own run-time detection answers it.

    Before its first CPU kernel inductor builds and loads a test program per candidate instruction set (about
    9 s on a small machine, once per process). ATen has checked the CPU and the operating system already
    (``torch.backends.cpu.get_cpu_capability()``): where it reports AVX512, or AVX2 on a CPU without AVX512,
    inductor is told the candidates the CPU lists are usable. Its choice is then the one the probe would make:
    the extensions' probes (``_probe_answers``) and AMX's permission from the operating system are still asked."""
    from torch._inductor.cpu_vec_isa import x86_isa_checker
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return {}
    flags = set(x86_isa_checker())
    capability = torch.backends.cpu.get_cpu_capability()
    trusted = capability == "AVX512" or (capability == "AVX2" and "avx512" not in flags)
    return {"cpp.vec_isa_ok": True} if trusted else {}


def expected_layouts(region, hints=None) -> tuple:
    """The strides a region's inputs are expected to have: each one's hint (``input_layouts``), else contiguous."""
    return tuple(hint if hint is not None else _contiguous_strides(p.shape)
                 for p, hint in zip(region.params, hints or (None,) * len(region.params)))


def _output_strides(gm) -> tuple:
    """The strides of a traced graph's outputs (None for an output that is not a tensor)."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    vals = [getattr(n, "meta", {}).get("val") for n in torch.fx.node.map_arg(output.args[0], lambda n: n)]
    return tuple(v.stride() if isinstance(v, torch.Tensor) else None for v in vals)


def _contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _collapses(shape, strides) -> bool:
    """Whether dimensions ``shape`` with ``strides`` view as one (reshape needs no copy)."""
    dims = [(n, st) for n, st in zip(shape, strides) if n != 1]
    return all(st == dims[i + 1][1] * dims[i + 1][0] for i, (n, st) in enumerate(dims[:-1]))


def _matmul_reads_in_place(t) -> bool:
    """Whether torch's matmul (and linear) read ``t`` without copying it: its leading dimensions fold into
    one (a batch, or the rows) and what remains is a row- or column-major matrix."""
    if t.dim() <= 1 or t.is_contiguous():
        return True
    shape, strides = tuple(t.shape), t.stride()
    m, n = shape[-2:]
    sm, sn = strides[-2:]
    matrix = (sn == 1 or n == 1) or (sm == 1 or m == 1)
    if matrix and _collapses(shape[:-2], strides[:-2]):
        return True
    return strides[-1] == 1 and _collapses(shape[:-1], strides[:-1])  # rows of a linear layer's input


def _nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """nll_loss's gradient with the picked class chosen by a select over the classes, which inductor fuses
    into the loss's backward (torch's decomposition scatters into zeros: a full-size buffer written, then
    read again)."""
    channel_dim = 0 if self.dim() < 2 else 1
    if reduction == 1:  # mean
        grad_output = grad_output / total_weight
    if self.dim() == 1 and target.dim() > 0:  # no batch: the kernel reads target[0]
        target = target[0]
    target = target.unsqueeze(channel_dim)
    classes_shape = [1] * self.dim()
    classes_shape[channel_dim] = self.shape[channel_dim]
    classes = torch.arange(self.shape[channel_dim], device=self.device).reshape(classes_shape)
    grad_input = torch.where(classes == target, -1.0, 0.0).to(self.dtype)  # ignored rows: zeroed below
    if grad_input.dim() > grad_output.dim() > 0:
        grad_output = grad_output.unsqueeze(channel_dim)
    if weight is not None:
        grad_output = grad_output * weight.reshape(classes_shape)
    grad_output = torch.where(target != ignore_index, grad_output, 0)
    return grad_input * grad_output


@functools.cache
def _decompositions() -> dict:
    """Inductor's decompositions, with nll_loss's gradient as a select (``_nll_loss_backward``)."""
    from torch._inductor.decomposition import select_decomp_table

    table = dict(select_decomp_table())
    table[torch.ops.aten.nll_loss_backward.default] = _nll_loss_backward
    for overload in (torch.ops.aten.remainder.Tensor, torch.ops.aten.remainder.Scalar,
                     torch.ops.aten.remainder.Scalar_Tensor):
        table[overload] = _remainder
    for overload in (torch.ops.aten.floor_divide.default, torch.ops.aten.floor_divide.Scalar,
                     torch.ops.aten.div.Tensor_mode, torch.ops.aten.div.Scalar_mode):
        table[overload] = functools.partial(_floor_divide, inductors=table.get(overload))
    for overload in (torch.ops.aten.sum.default, torch.ops.aten.sum.dim_IntList):
        table[overload] = functools.partial(_sum_from_zero, overload)
    table[torch.ops.aten.eq.Scalar] = functools.partial(_bool_compared, True)
    table[torch.ops.aten.ne.Scalar] = functools.partial(_bool_compared, False)
    return table


def _bool_compared(eq: bool, a, b):
    """``a == b`` (``eq``) or ``a != b`` of a bool tensor and a bool, which is how thunder's traces negate (``all`` is
    ``not any(not a)``), as ``logical_not`` or a copy of ``a``: inductor's analysis of value ranges fails on ``==``
    of two distinct bool constants (sympy's "A Boolean argument can only be used in Eq and Ne", raised where a region
    computes a bool from constants: ``torch.zeros_like(x).eq(0).all()``, a constant scale validated by
    torch.distributions)."""
    if not (isinstance(a, torch.Tensor) and a.dtype is torch.bool and type(b) is bool):
        return NotImplemented
    return a.clone() if b == eq else torch.logical_not(a)


_IN_SUM = threading.local()


def _sum_from_zero(overload, x, *args, **kwargs):
    """A floating-point sum as ATen's, which starts from +0.0: a sum of negative zeros is +0.0, where inductor's code
    for a short row adds its elements to each other (-0.0; fused generated program 26571, where ``1 // sum`` then
    gave -inf for eager's inf). Adding +0.0 changes no other value."""
    if getattr(_IN_SUM, "on", False) or not (x.dtype.is_floating_point or x.dtype.is_complex):
        return NotImplemented  # (the sum itself, recorded as is)
    _IN_SUM.on = True
    try:
        out = overload(x, *args, **kwargs)
    finally:
        _IN_SUM.on = False
    return out + 0.0 if out.dtype.is_floating_point or out.dtype.is_complex else out


def _remainder(a, b):
    """``torch.remainder`` as ATen computes it, from ``fmod``: inductor's ``a - floor(a / b) * b`` gives NaN where
    ``b`` is infinite (eager: ``a``, or ``b`` where the signs differ) and +0.0 for eager's -0.0."""
    if not isinstance(a, torch.Tensor):  # remainder(number, tensor)
        a = torch.full((), a, dtype=torch.result_type(a, b), device=b.device)
    mod = torch.fmod(a, b)
    return torch.where(_signs_differ(mod, b), mod + b, mod)


def _signs_differ(mod, b):
    """Where ``mod`` is nonzero and of the sign opposite to ``b``'s (where ``mod`` is NaN, the callers' results are NaN
    either way). Written so that inductor's analysis of values computed from an index (``arange(n).float() % 3``,
    ``7.0 // arange(n).float()``) does not fail, as it does on ``(mod != 0) & ((b < 0) != (mod < 0))``: sympy's "A
    Boolean argument can only be used in Eq and Ne", or "not bool like"."""
    if isinstance(b, torch.Tensor):
        return torch.where(b < 0, mod > 0, mod < 0)
    return mod > 0 if b < 0 else mod < 0


def _floor_divide(a, b, *, inductors=None, **kwargs):
    """Floating-point ``a // b`` (``floor_divide``, ``div(rounding_mode="floor")``) as ATen computes it: from ``fmod``,
    the quotient of ``a - fmod(a, b)``, corrected by one where the signs differ and rounded to the nearest integer where
    it lies within rounding of one. Inductor's ``floor(a / b)`` is one more where ``a / b`` rounds up to an integer
    (``5.0 // 0.2`` is 24.0 in eager, 0.2 being a little over a fifth in floating point). Integers, and the other
    rounding modes, are inductor's own (``inductors``: its decomposition, which its lowerings expect to have run)."""
    dtype = torch.result_type(a, b)
    if kwargs.get("rounding_mode", "floor") != "floor" or not dtype.is_floating_point:
        return NotImplemented if inductors is None else inductors(a, b, **kwargs)
    device = (a if isinstance(a, torch.Tensor) else b).device
    a = torch.as_tensor(a, dtype=dtype, device=device) if not isinstance(a, torch.Tensor) else a.to(dtype)
    # a number divisor stays a number (see _signs_differ), rounded to the dtype as ATen's operand would be
    b = b.to(dtype) if isinstance(b, torch.Tensor) else torch.tensor(b, dtype=dtype).item()
    mod = torch.fmod(a, b)
    div = (a - mod) / b
    div = torch.where(_signs_differ(mod, b), div - 1, div)
    floor = torch.floor(div)
    floor = torch.where(div - floor > 0.5, floor + 1, floor)
    quotient = a / b
    floor = torch.where(div != 0, floor, torch.copysign(torch.zeros_like(div), quotient))
    return torch.where(b != 0, floor, quotient) if isinstance(b, torch.Tensor) else floor if b != 0 else quotient


# [Note: erf near zero, fused]
# float32 ``torch.erf`` on the CPU is MKL's, within an ulp. Inductor's C++ code calls ATen's vector erf (Abramowitz and
# Stegun's 7.1.26, which eager's GELU kernel also calls: an absolute error of 1.5e-7), of the form
# ``1 - t P(t) exp(-x^2)``, which loses every digit near zero: fused, ``erf(1e-8)`` was 0 and ``erf(1e-6)`` 5 % too
# large. In the graph thunder hands inductor, a float32 CPU erf takes its series within 0.5 of zero, ``x P(x^2)``
# (seven terms: the first left out is below 1e-9 of the sum), and ATen's erf elsewhere. An erf of a bfloat16 or
# float16 value (computed in float32, converted from and to that dtype) is left as it is: eager's kernels for those
# dtypes compute ATen's vector erf in float, bit for bit; so is the torch executor's, where a region falls back.
_ERF_SERIES = tuple(2 / math.sqrt(math.pi) * c for c in (1 / 9360, -1 / 1320, 1 / 216, -1 / 42, 1 / 10, -1 / 3, 1))
_CASTS = ("_to_copy", "convert_element_type", "to")


def _reduced_precision_cast(node, source: bool) -> bool:
    """Whether ``node`` converts from (``source``) or to a float16 or bfloat16 value."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or \
            getattr(node.target, "__name__", "").split(".")[0] not in _CASTS:
        return False
    val = (node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None) if source \
        else node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype in (torch.float16, torch.bfloat16)


def _widened_erf(node) -> bool:
    """Whether ``node`` is a float32 CPU erf (see the note on erf near zero) of no reduced-precision value."""
    if node.op != "call_function" or node.target is not torch.ops.aten.erf.default:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32 or val.device.type != "cpu":
        return False
    return not (_reduced_precision_cast(node.args[0], source=True)
                or (node.users and all(_reduced_precision_cast(u, source=False) for u in node.users)))


def _erf_to_widen(gm) -> bool:
    return any(_widened_erf(n) for n in gm.graph.nodes)


class _AccurateErf(torch.fx.Interpreter):
    """Runs a graph with its float32 CPU erfs accurate near zero (see the note on erf near zero), for make_fx."""

    def run_node(self, n):
        if not _widened_erf(n):
            return super().run_node(n)
        x = self.env[n.args[0]]
        x2 = x * x
        series = x2 * _ERF_SERIES[0] + _ERF_SERIES[1]
        for c in _ERF_SERIES[2:]:
            series = series * x2 + c
        return torch.where(x.abs() < 0.5, x * series, torch.erf(x))


def _check_layouts(args, strides):
    for a, s in zip(args, strides):  # runs before every call of a region: no index kept
        if a.stride() != s:
            raise AssertionError(f"input strides {[t.stride() for t in args]}, compiled for {list(strides)}")


def _checking_layouts(fn, strides):
    """``fn``, a compilation for the input strides ``strides``, after checking them (an AssertionError sends the
    call to a compilation for its layouts). Sizes are the trace's, static: inductor's own checks of both are
    off (``size_asserts``), as they cost three times as much."""

    def checked(args):
        _check_layouts(args, strides)
        return fn(args)

    return checked


def _refs_in_call(*args) -> int:
    return sys.getrefcount(args[0])


def _unshared_refs() -> int:
    """References to a tensor only a trace's variable holds, as ``CompiledRegion._may_reuse`` counts them
    (through the same kind of call: the variable, the arguments' tuple, ``getrefcount``'s own)."""
    t = torch.empty(0)
    return _refs_in_call(t)


_UNSHARED_REFS = _unshared_refs()


def _lone_base_refs() -> int:
    """References to the base of a view that only the view holds, as ``CompiledRegion._may_reuse`` counts them."""
    v = torch.empty(4).view(2, 2)
    return sys.getrefcount(v._base)


_LONE_BASE_REFS = _lone_base_refs()


def _with_dense_outputs(fn, dense: tuple):
    """``fn``, its outputs at ``dense`` made contiguous where a matmul could not read them in place."""

    def with_dense(*args):
        outs = list(fn(*args))
        for i in dense:
            if not _matmul_reads_in_place(outs[i]):
                outs[i] = outs[i].contiguous()
        return tuple(outs)

    return with_dense


def _with_eager_layouts(fn, eager: tuple):
    """``fn``, its outputs at the positions ``eager`` names written with the strides given there where laid out
    otherwise; traced, the copy joins the region's kernels. Where only the strides of extents of one differ, which
    address nothing, the output is restrided in place (no copy): kernels that choose a layout from their input's
    (a convolution's channels-last, ``suggest_memory_format``) read those too."""

    def laid_out(*args):
        outs = list(fn(*args))
        for i, strides in eager:
            o = outs[i]
            if o.stride() != tuple(strides) and _expands_own_value(o, strides, args):
                outs[i] = _expanded_in_layout(o, strides)
                continue
            # a layout with gaps (a slice's): inductor keeps only the order of its strides, so the copy always; so
            # too for a part of a buffer the region computes and does not return (inductor lays that buffer out as
            # it likes: a column of a transposed value would come with the gaps of a row-major one)
            if (_has_gaps(o.shape, strides) or _part_of_own_buffer(o, args, outs)
                    or _strides_differ(o, strides)):
                outs[i] = torch.empty_strided(o.shape, strides, dtype=o.dtype, device=o.device).copy_(o)
            elif o.stride() != tuple(strides):
                outs[i] = o.as_strided(o.shape, strides)
        return tuple(outs)

    return laid_out


def _strides_differ(t, strides) -> bool:
    """Whether ``t`` is laid out otherwise than ``strides`` along an extent over one (which address elements)."""
    return any(n > 1 and a != b for n, a, b in zip(t.shape, t.stride(), strides))


def _misplaced_outputs(outs, seen: tuple, inputs: tuple) -> tuple:
    """The (position, strides) of ``seen``, the traced graph's layouts of outputs, whose output in ``outs`` (a
    compiled graph's first) inductor wrote with other strides. Its layout of an output is fixed by the input
    layouts, so the first call tells. (Inductor compiles ``torch.cat([t])`` to ``t`` itself; of a column of a
    value it lays out row-major for inputs laid out otherwise, that is a strided view where eager's
    concatenation is contiguous: fused generated program 4853, and ``torch.compile``'s own result.)"""
    misplaced = tuple((i, st) for i, st in seen if _strides_differ(outs[i], st))
    memory = {a.untyped_storage().data_ptr() for a in inputs if isinstance(a, torch.Tensor)}
    for i, st in misplaced:  # a copy would no longer share the input's memory, as eager's view does
        if outs[i].untyped_storage().data_ptr() in memory:
            raise NotImplementedError(f"inductor laid out an output viewing an input with strides {outs[i].stride()},"
                                      f" eager's are {tuple(st)}: run this program without the inductor executor")
    return misplaced


def _relaid(outs, misplaced: tuple):
    relaid = list(outs)
    for i, strides in misplaced:
        o = relaid[i]
        relaid[i] = torch.empty_strided(o.shape, strides, dtype=o.dtype, device=o.device).copy_(o)
    return type(outs)(relaid)


def _relaying(fn, misplaced: tuple):
    """``fn``, a compiled graph's function of a list of inputs, its outputs at ``misplaced`` copied into eager's
    layout."""

    def relaid(args):
        return _relaid(fn(args), misplaced)

    return relaid


def _expands_own_value(t, strides, args) -> bool:
    """Whether ``t`` broadcasts (a stride 0 where eager's is too, over more than one element) a value the region
    computes. Inductor writes such a view to a buffer of its own, all elements, and would read an ``as_strided`` of
    it as if over the value's memory (fused generated program 21588: ``x.relu().expand(2, 8).as_strided((2, 8),
    (0, 1))`` compiles to a read of the first 8 of the 16 elements it wrote, laid out ``(1, 2)``)."""
    return (t._base is not None and any(n > 1 and st == 0 for n, st in zip(t.shape, strides))
            and all(t._base is not a and t._base is not a._base for a in args if isinstance(a, torch.Tensor)))


def _expanded_in_layout(t, strides):
    """``t``, a broadcast, as the broadcast of a copy of its source (one element along each broadcast dim) written
    with the ``strides``: the eager layout, without an ``as_strided`` of a view."""
    source = t
    for d, (n, st) in enumerate(zip(t.shape, strides)):
        if n > 1 and st == 0:
            source = source.narrow(d, 0, 1)
    copy = torch.empty_strided(source.shape, strides, dtype=t.dtype, device=t.device).copy_(source)
    return copy.expand(t.shape)


def _part_of_own_buffer(t, args, outs) -> bool:
    """Whether ``t`` views a part of a tensor that is none of ``args`` (nor what they view) and none of ``outs``."""
    base = t._base
    return (base is not None and t.numel() < base.numel()
            and all(base is not a and base is not a._base for a in args if isinstance(a, torch.Tensor))
            and all(base is not o for o in outs))


def _has_gaps(shape, strides) -> bool:
    """Whether ``strides`` lay ``shape`` out with gaps between its elements and none shared: a slice's layout, or
    one whose dims interleave (``x.clone()[..., ::2]`` of an ``x`` transposed in its last two dims: strides
    ``(75, 25, 1, 10)`` for extents ``(4, 3, 5, 3)``, which inductor would write as ``(45, 15, 1, 5)``)."""
    gaps, reach = False, 0  # the largest offset the dims so far reach
    for n, st in sorted(((n, st) for n, st in zip(shape, strides) if n != 1), key=lambda d: d[1]):
        if st <= reach:  # may share elements (an expanded dimension's stride 0)
            return False
        gaps, reach = gaps or st > reach + 1, reach + st * (n - 1)
    return gaps


def dense_views(region, dense: tuple):
    """A region of views alone (``worth_fusing_for_layout``), run by the torch executor, its outputs at ``dense``
    copied contiguous where a matmul could not read them in place. Nothing to compile."""
    from thunder.executors.passes import transform_for_execution
    from thunder.executors.torchex import ex as torch_ex

    return _with_dense_outputs(transform_for_execution(region, (torch_ex,)).python_callable(), dense)


class CompiledRegion:
    """A region's inductor-compiled function, per input layout, with the torch executor's as the fallback."""

    def __init__(self, region, executor, background: bool = False, dense: tuple = (), donate: tuple = (),
                 input_layouts: tuple | None = None, eager: tuple = ()):
        from thunder.executors.passes import transform_for_execution
        from thunder.executors.torchex import ex as torch_ex

        self.region = region
        self.executor = executor
        self.torch_fn = transform_for_execution(region, (torch_ex,)).python_callable()
        self.eager = eager  # (position, strides) of outputs the program sees: written as eager lays them out
        if eager:
            self.torch_fn = _with_eager_layouts(self.torch_fn, eager)
        self.dense = dense  # positions of outputs only matmuls read: written contiguous unless read in place
        # (position, received) of the inputs whose memory the compiled function reuses: see _may_reuse
        self.donate = donate
        self.by_layout: dict = {}
        self.plain_by_layout: dict = {}  # compilations that reuse no input, for calls where one is shared
        self.failed = None
        self.expected = expected_layouts(region, input_layouts)  # the layout compiled for first
        self.background = background
        self.layout_changes = 0  # calls whose inputs were laid out otherwise than the region's function expected
        # the strides of the outputs, for the inputs laid out as expected (inductor keeps the traced graph's): where a
        # later region reads them, it compiles for them first ([Note: layout hints] in thunder/core/proxies.py)
        self.output_layouts: tuple = ()
        if background:  # the torch executor runs the region until the compiled one is ready
            self.fn = self._torch_boxed
            self._compile_in_background(self.expected, reuse=True, run_it=True)
        else:
            self.fn = self._first_call
            with _LOCK:
                self.by_layout[self.expected] = self._compile(self.expected)

    def _compile_in_background(self, strides, reuse: bool, run_it: bool = False):
        """Queues the compilation for the layout ``strides``; the torch executor stands in for it until then.
        ``run_it``: the compiled function becomes the region's (its first compilation)."""
        table = self.by_layout if reuse else self.plain_by_layout
        table[strides] = self._torch_boxed

        def compile_job():
            fn = self._compile(strides, reuse)

            def install():
                if self.failed is None:
                    (self.by_layout if reuse else self.plain_by_layout)[strides] = fn
                    if run_it:
                        self.fn = fn

            return install

        BACKGROUND.submit(compile_job)

    def _compile(self, strides, reuse: bool = True):
        """A function of the list of inputs: the compiled graph's (the torch executor's if compiling failed);
        ``reuse``: whether it may reuse the memory of the inputs of ``self.donate``."""
        import torch._inductor.config as inductor_config
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        if self.failed is not None:
            return self._torch_boxed
        COMPILATIONS["no reuse" if not reuse else "first" if strides == self.expected else "layout"] += 1
        try:
            # a shape environment (static shapes all the same): without one inductor's graph cache is not consulted
            with FakeTensorMode(shape_env=ShapeEnv()) as mode:
                fakes = [torch.empty_strided(tuple(p.shape), st, dtype=p.dtype, device=p.device)
                         for p, st in zip(self.region.params, strides)]
            # fallback_random: see [Note: random numbers in fused regions]; size_asserts: see _checking_layouts;
            # emulate_precision_casts: a cast to a lower precision rounds as in eager, also where the kernel goes on
            # computing in float32 (inductor would otherwise drop the rounding of x.half().float(): another value)
            donated = tuple(i for i, _ in self.donate) if reuse else ()
            with inductor_config.patch(fallback_random=True, size_asserts=False, emulate_precision_casts=True), \
                    _known_cpu_isa(self.region), \
                    inductor_workarounds(depends_on=("donated inputs", donated)):
                with mode:
                    gm = make_fx(self._traced_fn(), decomposition_table=_decompositions())(*fakes)
                    if _erf_to_widen(gm):
                        gm = make_fx(_AccurateErf(gm).run)(*fakes)
                traced = _output_strides(gm)
                if strides == self.expected and reuse:
                    self.output_layouts = traced
                seen = tuple((i, traced[i]) for i, _ in self.eager)  # (eager's, or contiguous for a matmul: dense)
                with _deferred_kernel_waits(self):
                    compiled = (self.executor.inductor_compile(gm, fakes, donated=donated) if donated
                                else self.executor.inductor_compile(gm, fakes))
                    return self._through_call_once(compiled, strides, self.by_layout if reuse else self.plain_by_layout,
                                                   seen, donated)
        except Exception as e:  # inductor's errors have no common base class
            self.fall_back(e)
            return self._torch_boxed

    def _traced_fn(self):
        return _with_dense_outputs(self.torch_fn, self.dense) if self.dense else self.torch_fn

    def _through_call_once(self, compiled, strides, table, seen: tuple, donated: tuple):
        """Inductor's compiled graph: through its ``__call__`` once (which finishes autotuning and caching), then
        straight to the generated function (after a check of the input strides), which replaces this one
        wherever it is held (``table``: the compilations by layout it belongs to). ``seen``: (position, strides) of
        the outputs the program sees, as the traced graph lays them out, which the call checks inductor kept;
        ``donated``: the positions of the inputs whose memory it may reuse."""

        def first(args):
            _check_layouts(args, strides)
            kept = tuple(a for i, a in enumerate(args) if i not in donated)  # (the compiled function empties the
            # list; a donated input's memory may hold an output)
            out = compiled(args)
            # (a graph that only returns its inputs compiles to a boxed call of the graph, without current_callable)
            direct = getattr(compiled, "current_callable", compiled)
            misplaced = _misplaced_outputs(out, seen, kept)
            if misplaced:
                out, direct = _relaid(out, misplaced), _relaying(direct, misplaced)
            direct = _checking_layouts(direct, strides)
            if table.get(strides) is first:
                table[strides] = direct
            if self.fn is first:
                self.fn = direct
            return out

        return first

    def _torch_boxed(self, args):
        return self.torch_fn(*args)

    def _with_zero_tensors(self, args):
        """The outputs for inputs among which a ZeroTensor (``sgn``'s gradient, say), computed by the torch executor:
        torch's operations on a ZeroTensor give zeros whatever the other operand, as in eager (times an infinity
        too), where a kernel reading it as zeros would give NaN (fused generated program 18397). Outputs that are
        ZeroTensors are made zeros in memory, for the kernels that read them."""
        outs = self.torch_fn(*args)
        return type(outs)(torch.zeros_like(o) if isinstance(o, torch.Tensor) and o._is_zerotensor() else o
                          for o in outs)

    def fall_back(self, error):
        from thunder.executors.inductorex import warn_fallback

        if not threading.main_thread().is_alive():  # the interpreter is exiting under a background compilation
            return
        if self.failed is None:
            self.failed = error
            warn_fallback(self.region.name, error)
        self.by_layout = {k: self._torch_boxed for k in self.by_layout}
        self.plain_by_layout = {k: self._torch_boxed for k in self.plain_by_layout}
        if self.fn != self._first_call:  # bound methods: equal, never the same object
            self.fn = self._torch_boxed

    def _first_call(self, args):
        with _LOCK:
            resolve_pending()
        self.fn = next(iter(self.by_layout.values())) if self.failed is None else self._torch_boxed
        return self.fn(args)

    def _by_layout(self, args, reuse: bool = True):
        """Runs the compilation for the layouts of ``args`` (a list), compiled at its first call; ``reuse=False``:
        the one that reuses no input's memory."""
        table = self.by_layout if reuse else self.plain_by_layout
        key = tuple(a.stride() for a in args)
        fn = table.get(key)
        if fn is None and self.background:
            self._compile_in_background(key, reuse)
            fn = self._torch_boxed
        elif fn is None:
            with _LOCK:
                table[key] = self._compile(key, reuse)
                resolve_pending()
            # the torch executor's where a kernel failed to build (``fall_back`` replaced the tables)
            fn = (self.by_layout if reuse else self.plain_by_layout)[key]
        return fn(args)

    def _may_reuse(self, args) -> bool:
        """Whether nothing but the trace can see the memory of the inputs ``self.donate`` names: no other tensor
        on their storage, no other reference to them than the trace's variable and this call's (or the caller
        vouches for them: thunder/executors/ownership.py), and for inputs received from the forward, autograd
        has released its own (no ``retain_graph``; a CUDA graph replays a backward only where that holds too)."""
        keep_graph = None
        for i, received in self.donate:
            # a view only of a tensor nothing else holds (F.linear of a 3-D input views its 2-D product): as if alone
            lone_base = args[i]._base is not None and sys.getrefcount(args[i]._base) <= _LONE_BASE_REFS
            if args[i]._base is not None and not lone_base:
                return False
            shared = sys.getrefcount(args[i]) > _UNSHARED_REFS
            # other tensors on its memory (``ownership.storage_uses`` inline: a hot path); a lone base is one
            uses = torch._C._storage_Use_Count(args[i].untyped_storage()._cdata) - LONE_STORAGE_USES - lone_base
            if shared or uses > 0:  # unless a caller vouches for these (looked up only here: it costs)
                own_uses = vouched_uses(args[i])
                if own_uses is None or uses > own_uses:
                    return False
            if received:
                if keep_graph is None:
                    keep_graph = torch._C._autograd._get_current_graph_task_keep_graph()
                if keep_graph:
                    return False
                # a capture of someone else's CUDA graph replays later, when autograd may keep the saved values
                # (thunder's graphs vouch for their inputs and replay no backward under retain_graph)
                if args[i].is_cuda and torch.cuda.is_current_stream_capturing() and vouched_uses(args[i]) is None:
                    return False
        return True

    def call(self, args):
        """The outputs for the inputs ``args`` (a tuple; inductor's function empties the list it is given)."""
        if self.donate and self.fn != self._torch_boxed and not self._may_reuse(args):
            return self._by_layout(list(args), reuse=False)
        fn = self.fn
        try:
            return fn(list(args))
        except AssertionError:
            if fn == self._by_layout or self.failed is not None:
                raise
            layout = tuple(a.stride() for a in args)
            if self.by_layout.get(layout) is fn:  # compiled for these strides: not the layout check
                raise
            # Inputs laid out otherwise than compiled for: compiled for their layout. The first time, that layout's
            # function becomes the region's (its check catches the next change); after that, every call
            # looks its layout up.
            self.fn = self._by_layout
            out = self._by_layout(list(args))
            self.layout_changes += 1
            compiled = self.by_layout.get(layout)
            if self.layout_changes == 1 and compiled is not None and compiled != self._torch_boxed:  # (background:
                self.fn = compiled  # still compiling, or failed)
            return out

    def callable(self, lazy_inputs: tuple = ()):
        """The region's function; ``lazy_inputs``: the positions of the inputs it resolves first where their memory
        does not hold their values (thunder/extend: ``resolve_lazy_inputs``)."""
        call = self.call
        if lazy_inputs:
            from thunder.extend import resolve_lazy_inputs

            def run_resolved(*args):
                if any(args[i]._is_zerotensor() for i in lazy_inputs):
                    return self._with_zero_tensors(args)
                return call(resolve_lazy_inputs(args, lazy_inputs))

            return run_resolved

        def run(*args):
            return call(args)

        return run
