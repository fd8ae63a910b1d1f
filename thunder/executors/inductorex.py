"""The inductor executor: fused regions compiled by PyTorch's Inductor (C++/OpenMP kernels on CPU, Triton on CUDA).

It claims regions of elementwise operations, reductions, normalizations, softmax, casts and views (the
table ``FUSIBLE`` below, and torch's pointwise backward kernels in ``FUSIBLE_KERNELS``), and leaves
matmuls, linear layers, attention and convolutions to their single-op kernels. A region's primitives are
run by the torch executor under ``make_fx`` (an FX graph of aten operations on fake tensors, decomposed
with inductor's table) and that graph is compiled by inductor's ``compile_fx_inner``: no dynamo and no
guards (thunder's prologue has checked the inputs already), no AOT autograd (thunder differentiated the
program already, and its regions are functional), so a call costs little more than the kernels' launches.

[Note: compiling regions]
- Identical regions (the same primitives on inputs of the same shapes, dtypes and devices: repeated
  transformer blocks) are compiled once per executor and shared.
- A region compiled before, in this process or an earlier one, is read from inductor's graph cache
  (``TORCHINDUCTOR_CACHE_DIR``): its generated code and kernels, without generating them again. The cache's key
  also holds what the code depends on that inductor does not see: the inputs whose memory it may reuse and the
  version of thunder's workarounds (``inductor_workarounds``).
- Kernels compile in inductor's worker pool while thunder goes on forming and compiling the next regions:
  the wait inductor's generated module does at import is deferred to the first call of any region, which
  waits for all pending kernels at once.
- Regions are compiled for contiguous inputs, or for the layout tracing expects (attention's outputs and gradients,
  laid out as its kernels write them; other regions' outputs, as their compilations lay them out: [Note: layout
  hints] in thunder/core/proxies.py). An input with other strides
  fails the check of the strides
  before each call (thunder's: inductor's own check of sizes and strides is off, the shapes being static);
  the region is then compiled again for those strides (once per layout), and calls that compilation
  directly from then on (an attention output is laid out as its kernel writes it on every call); a region
  whose inputs change layout again looks the layout up on each call.
- A region may write its outputs into the memory of inputs that die with it (inductor's donated buffers:
  a loss's gradient goes where the logits were), sparing an allocation that on the CPU costs page faults.
  The fusion pass names the candidates (``reuses_inputs``): values the trace made, or saved forward
  intermediates the backward received. Each call checks that nothing else can see the memory (no other
  tensor on its storage, no other reference to the tensor, and, for saved values, no ``retain_graph``);
  where it can, the region runs a compilation that reuses nothing.
- Outputs keep the layout the unfused program gives them (a later ``view`` may rely on it), except
  those only matmuls read (and other regions): one a matmul cannot read in place (``q`` or ``k``
  permuted for attention) is written contiguous, which saves the matmul its copy
  (``wants_dense_input``). Views alone are no region, unless such an output comes of them: a backward's
  ``permute`` of an attention gradient that two matmuls read is written contiguous once, where each matmul
  would copy it (``worth_fusing_for_layout``). Such a region is not compiled (a copy gains nothing from
  inductor, and a compilation costs a second): the torch executor runs its views and copies what it must.
- A region inductor cannot compile runs with the torch executor instead, with a warning.
- Long compilations report progress on stderr (``progress_after_s``).

[Note: background compilation]
An executor made with ``background=True`` ("inductor_background") does not wait for inductor: its regions
run with the torch executor (the same primitives, one kernel each) while a daemon thread compiles them one
at a time, and switch to the compiled kernels once all queued regions are ready
(``wait_for_compilation()`` waits for that). A region compiled again later (inputs laid out otherwise, or
inputs whose memory it may not reuse on this call) is queued the same way: the caller's thread never compiles.
The first call then costs about what the torch executor's does, and the steady state is the same as
compiling up front. The price: the first steps run unfused,
so their numbers are the unfused program's (equal within float tolerance, not bitwise), and on a small
machine the compilation competes with training for the cores. Inductor's tracing state is global: thunder
compiles one region at a time (a lock), and a ``torch.compile`` the program runs in another thread at the
same moment is not protected from it. Inductor restores the random-number state a compilation began with
when it ends, which would rewind the training thread's draws made meanwhile: in the background thread it
leaves the state alone (``_leave_rng_state_alone_in_background``).

[Note: what the backward recomputes]
The inductor executor asks for rematerialization (thunder/transforms/rematerialization.py): the backward recomputes
cheap forward values that feed its fused work rather than saving them. Values its matmuls read (a norm's output,
which a weight gradient multiplies) are saved, not written out again by a recomputing kernel: on a GPU those
kernels cost more time than the memory they free is worth. ``InductorExecutor(recompute_unfused_reads=True)``
recomputes them too, for the fewest saved bytes.

[Note: random numbers in fused regions]
A random torch operation (dropout's mask, ``torch.rand``, ``randint``) is not fused by default: it runs
whole with its torch kernel, drawing exactly eager's numbers under a seed, and only its consumers are fused.
With ``fuse_random=True`` it is fused through its decomposition (``prims.uniform`` and a comparison for
dropout's mask), compiled with inductor's ``fallback_random`` so the draw itself is ``torch.rand``, in the
trace's order of random operations (thunder/executors/regions.py): deterministic for a seed, but other
numbers than eager's ``bernoulli_`` (CPU) or fused dropout kernel (CUDA) draw. Either way the mask is an
output of the forward saved for the backward, never drawn again (rematerialization never recomputes a
random value).
"""
from __future__ import annotations

import sys
import time
import warnings

import torch

from thunder.core import dtypes, prims
from thunder.core.proxies import NumberProxy, TensorProxy, set_layout_hint
from thunder.extend import FusionExecutor, register_executor

# The primitives a region may hold.
FUSIBLE = frozenset(prims.UNARY) | frozenset(prims.BINARY) | {
    "where", "convert_element_type", "broadcast_in_dim", "reshape", "transpose", "slice_prim", "squeeze", "cat",
    "pad", "flip", "sum", "prod", "amax", "amin", "var", "var_mean", "full", "iota", "uniform", "randn", "shallow_copy",
}
# Operations whose torch kernels copy an operand they cannot read in place (see ``wants_dense_input``).
_MATMULS = frozenset({"matmul", "linear", "bmm", "mm", "addmm", "baddbmm"})
_VIEWS = frozenset({"broadcast_in_dim", "reshape", "transpose", "slice_prim", "squeeze"})
# Views and creation alone are not worth a kernel: a region needs one of the others.
_NOT_COMPUTE = _VIEWS | {"shallow_copy", "full", "iota"}
# torch's backward kernels (thunder/torch/grad_rules.py) that inductor decomposes into pointwise work and reductions.
FUSIBLE_KERNELS = frozenset({
    "softmax_backward", "log_softmax_backward", "silu_backward", "gelu_backward", "threshold_backward",
    "tanh_backward", "sigmoid_backward", "native_layer_norm_backward", "slice_backward", "nll_loss_forward",
    "nll_loss_backward", "linear_bias_backward",
})


def _fusible_tensors(bsym, device_types) -> bool:
    values = [*bsym.flat_args, *bsym.flat_outs]
    if not any(isinstance(v, TensorProxy) for v in bsym.flat_outs):
        return False
    for v in values:
        if isinstance(v, NumberProxy) or not isinstance(v, TensorProxy):
            return False
        if v.device.type not in device_types or dtypes.is_complex(v.dtype):
            return False
        if not all(type(s) is int for s in v.shape):
            return False
    return True


def _integer_power_of_a_number(bsym) -> bool:
    """``5 ** t`` of an integer tensor: inductor falls back to ATen's ``pow.Scalar``, and reads its result laid out as
    the meta kernel says (as ``t``), where the CPU kernel writes it contiguous; its check of the fallback's strides is
    off in thunder's regions (``size_asserts``), so a transposed ``t`` gave the values transposed (fused generated
    program 21320). Torch's kernel runs it."""
    base, exponent = bsym.args[0], bsym.args[1]
    return (not isinstance(base, TensorProxy) and isinstance(exponent, TensorProxy)
            and not (exponent.dtype.is_floating_point or exponent.dtype.is_complex))


def _reduces_one_element_or_none(bsym) -> bool:
    """Whether a ``var``/``var_mean`` reduces single elements (a 0-dim tensor's, or dimensions of size one) or none."""
    a, dims = bsym.args[0], bsym.args[1]
    return isinstance(a, TensorProxy) and (all(a.shape[d] == 1 for d in dims) or any(a.shape[d] == 0 for d in dims))


class InductorExecutor(FusionExecutor):
    fusion_name = "InductorFusion"
    rematerialize = True
    reuses_inputs = True
    resolves_lazy_inputs = True  # (its run-time check of references to reuse memory counts exactly one call's)
    wants_input_layouts = True
    keeps_eager_output_layouts = True

    def __init__(self, name: str = "inductor", *, progress_after_s: float = 5.0, device_types=("cpu", "cuda"),
                 fuse_random: bool = False, background: bool = False, recompute_unfused_reads: bool = False):
        super().__init__(name)
        self.fuse_random = fuse_random
        self.recompute_unfused_reads = recompute_unfused_reads
        self.background = background
        self.progress_after_s = progress_after_s
        self.device_types = frozenset(device_types)
        self._compiled: dict = {}  # region signature -> _Compiled

    def before_tracing(self, device_types: frozenset) -> None:
        """Where this executor will compile CUDA regions, inductor's pool of compile workers starts now, as
        torch.compile starts it: until the pool is ready, inductor builds each Triton kernel in this process, one
        at a time, and the workers take seconds to start. Started before tracing, they are ready when the first
        region compiles, and the kernels of all regions build side by side (see [Note: compiling regions])."""
        if "cuda" in device_types and "cuda" in self.device_types:
            try:
                from torch._inductor.async_compile import maybe_warm_pool
            except ImportError:  # a private function of inductor's that moved: the pool starts when first used
                return
            maybe_warm_pool()

    def can_fuse(self, bsym) -> bool:
        sym = bsym.sym
        if sym.module == "prims" and sym.name in ("var", "var_mean") and _reduces_one_element_or_none(bsym):
            # inductor gives 0 for the variance of one NaN (eager: NaN), and for the mean of no elements (fused
            # generated program nn 14742: ``var_mean`` of an empty split); torch's kernel runs it
            return False
        if sym.module == "prims" and sym.name == "pow" and _integer_power_of_a_number(bsym):
            return False
        if sym.module == "prims" and sym.name == "nextafter" and \
                bsym.flat_outs[0].dtype in (torch.float16, torch.bfloat16):
            return False  # inductor computes it in float32: the next float32, which rounds back (torch's runs it)
        if (sym.module == "prims" and sym.name in FUSIBLE) or (sym.module == "ltorch" and sym.name in FUSIBLE_KERNELS):
            return _fusible_tensors(bsym, self.device_types)
        return False

    def wants_dense_input(self, bsym) -> bool:
        return bsym.sym.name in _MATMULS

    def worth_fusing(self, prims_: list) -> bool:
        return len(prims_) >= self.min_prims and any(p.sym.name not in _NOT_COMPUTE for p in prims_)

    def worth_fusing_for_layout(self, prims_: list) -> bool:
        return len(prims_) >= self.min_prims and all(p.sym.name in _VIEWS for p in prims_)

    def fusion_pass(self, trace, claimed_first=()):
        self._progress = _Progress(self.progress_after_s)
        return super().fusion_pass(trace, claimed_first)

    def compile_region(self, region, dense_outputs=frozenset(), donatable=None, input_layouts=None, output_layouts=None,
                       lazy_inputs=()):
        from thunder.executors.inductor_compile import CompiledRegion, dense_views, expected_layouts, region_signature

        dense = tuple(i for i, o in enumerate(region.bound_symbols[-1].args[0]) if o.name in dense_outputs)
        eager = tuple((i, st) for i, st in enumerate(output_layouts or ()) if st is not None)
        if not self.worth_fusing(region.bound_symbols[:-1]):  # views kept for their layout: nothing to compile
            return dense_views(region, dense)  # (the torch executor's views: lazy inputs stay lazy, as in eager)
        donatable = donatable or {}
        donate = tuple((i, donatable[p.name]) for i, p in enumerate(region.params) if p.name in donatable)
        input_layouts = expected_layouts(region, input_layouts)
        key = (region_signature(region), dense, donate, input_layouts, eager)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = CompiledRegion(region, self, background=self.background, dense=dense,
                                                            donate=donate, input_layouts=input_layouts, eager=eager)
            self._progress.compiled(len(region.bound_symbols) - 1)
        else:
            self._progress.reused()
        for o, strides in zip(region.bound_symbols[-1].args[0], compiled.output_layouts):
            if isinstance(o, TensorProxy) and strides is not None:  # for the regions that read them
                set_layout_hint(o, strides)
        return compiled.callable(lazy_inputs)

    def inductor_compile(self, gm, example_inputs, donated=()):
        """Compiles ``gm``, an FX graph of aten operations decomposed as inductor wants them, to inductor's
        compiled graph, called with a list of tensors (a hook: tests replace it to see the fallback).
        ``donated``: positions of inputs whose memory the graph may reuse (inductor's donated buffers, which it
        knows from a backward's tracing context)."""
        import types

        from torch._guards import TracingContext, detect_fake_mode, tracing
        from torch._inductor.compile_fx import compile_fx_inner

        context = TracingContext(detect_fake_mode(example_inputs))  # its shape environment: inductor's cache
        if not donated:
            with tracing(context):
                return compile_fx_inner(gm, example_inputs)
        context.fw_metadata = types.SimpleNamespace(bw_donated_idxs=list(donated), static_input_indices=[])
        with tracing(context):
            return compile_fx_inner(gm, example_inputs, is_backward=True)


class _Progress:
    """Progress lines on stderr, once a compilation has run longer than ``after_s`` seconds."""

    def __init__(self, after_s: float):
        self.after_s = after_s
        self.start = time.perf_counter()
        self.new = self.shared = 0

    def _report(self, what: str):
        elapsed = time.perf_counter() - self.start
        if elapsed >= self.after_s:
            print(f"thunder: inductor: {what} ({self.new} regions compiled, {self.shared} shared, {elapsed:.1f} s)",
                  file=sys.stderr, flush=True)

    def compiled(self, n_prims: int):
        self.new += 1
        self._report(f"compiled a region of {n_prims} primitives")

    def reused(self):
        self.shared += 1


def wait_for_compilation():
    """Returns once every region queued for background compilation runs its compiled kernels."""
    from thunder.executors.inductor_compile import BACKGROUND

    BACKGROUND.wait()


def warn_fallback(name: str, error: BaseException):
    warnings.warn(f"thunder: the inductor executor could not compile a fused region ({type(error).__name__}: {error}); "
                  f"it runs with the torch executor instead", stacklevel=3)


# "inductor" fuses on CPU and CUDA when asked for (``thunder.jit(fn, executors=["inductor", "torch"])``).
# "inductor_cuda", CUDA regions only, is a default executor on machines with a GPU: there fusion makes
# training steps faster, while on CPU the step gains little against compile times of seconds (BENCHMARKS.md).
ex = InductorExecutor()
register_executor(ex)
# "inductor_background" compiles in a background thread: see [Note: background compilation].
background_ex = InductorExecutor("inductor_background", background=True)
register_executor(background_ex)
cuda_ex = InductorExecutor("inductor_cuda", device_types=("cuda",))
register_executor(cuda_ex, default=torch.cuda.is_available(), priority=0)
