"""Training steps of eager PyTorch, thunder and torch.compile, side by side in one run (issue 10).

    python benchmarks/fusion.py [--models llama,gpt] [--steps 10] [--rounds 3] [--threads 2]
                                [--thunder-executors "inductor,torch;torch"] [--no-compile] [--fresh-first-call]
                                [--pairs 100]
    python benchmarks/fusion.py --device cuda --dtype bfloat16 [--attention sdpa|manual]     # GPU mode
    python benchmarks/fusion.py --device cpu --dtype bfloat16 --gpu-model-scale tiny         # its smoke test
    python benchmarks/fusion.py --gpu-model-scale host --threads 1     # per-step overhead, the GPU model's structure

Models (benchmarks/bench_models.py), each a module ``model(idx, targets) -> loss``:
``llama``, a Llama-style model with hand-written attention (``--attention manual``, the default on the
CPU; ``sdpa`` for ``F.scaled_dot_product_attention``) and hand-written RMSNorm, 2 layers of width 256,
sequence 128, batch 8 on the CPU; ``gpt``, tests/models.py's GPT (4x256, SDPA, dropout 0.1) as
benchmarks/training.py runs it. GPU mode (``--device cuda``, or ``--gpu-model-scale`` on any device)
runs them at GPT-2 scale: the Llama 12x768 (~134M parameters, vocab 32000, sequence 1024, batch 8;
attention ``sdpa`` by default there), the GPT as GPT-2 small; ``--gpu-model-scale tiny`` shrinks them
so that the same code path runs in seconds on the CPU; ``--gpu-model-scale host`` keeps their 12 layers at width 64,
sequence 32, batch 1: on the CPU such a step is bound by the Python that calls the kernels, as the full model's
step is on a GPU, so it measures each variant's per-step overhead.

Variants: ``eager``; ``thunder`` (``thunder.jit(model)``, default executors); on CUDA,
``thunder+cudagraphs`` (the same with ``transforms=[thunder.CUDAGraphTransform()]``); one ``thunder[a,b]`` per
executor list of ``--thunder-executors`` (lists separated by ``;``, names by ``,``; each is
``thunder.jit(model, executors=[a, b])``; ``"onednn,inductor,torch"`` adds oneDNN's float32 products, see
thunder/executors/onednnex.py); ``torch.compile`` (``torch.compile(model)``, default mode).
A variant that fails (an executor thunder does not know, a compiler missing) is reported with its
error and the others go on.

Method. A step is forward, backward, AdamW step and ``zero_grad``; every variant starts from the same
weights and batch, and step ``i`` of each variant runs after ``torch.manual_seed(i)``, so the losses
after the timed steps can be compared by eye (eager and thunder draw the same dropout masks).
Step times are taken in interleaved rounds (eager, thunder, ..., torch.compile, eager, ...), each round
the median of ``--steps`` steps, the best round kept: other processes only ever add time. On CUDA the
device is synchronized before each clock reading. ``--pairs N`` adds paired figures for ratios close to 1,
where the best round is at the mercy of one quiet or busy moment: N cycles of one step of every variant
(the order rotated from cycle to cycle), each variant's step divided by the reference's step of the same
cycle, and the median of those N ratios printed with a 95 % bootstrap confidence interval; steps taken
a few hundred milliseconds apart share the machine's state, so its slow drifts divide out. The ratios
divide a variant's step time by eager's and by torch.compile's (below 1: faster). First call: the first step
of a fresh copy (tracing or compiling plus one step). Saved: the distinct storages that autograd saves for
backward in one step, seen through ``torch.autograd.graph.saved_tensors_hooks`` (n/a for torch.compile, whose
saved tensors live inside its compiled function). Peak (CUDA only): the peak memory a step allocates above
what was allocated before it (``torch.cuda.max_memory_allocated``, reset before the step), plus the
variant's own parameters, buffers and optimizer state; the variants' models stay resident side by
side, so this is what the variant would peak at alone.

Cold compilation. Inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``) is pointed at a fresh
temporary directory before torch is imported, so torch.compile's first call compiles from scratch.
A thunder executor built on inductor shares that directory, so the thunder variants are prepared
before torch.compile for each model. ``--fresh-first-call`` goes further: each variant's first call is
measured in a fresh subprocess with its own cache directory
(``python benchmarks/fusion.py --first-call-only --model M --variant V``, which prints the seconds),
so no variant profits from another's compilation or from one-time initialization of this process.
``--inductor-cache DIR`` keeps the cache in ``DIR`` instead: a second run with the same ``DIR`` measures first
calls as a program's second run makes them, compiled code read from the cache (thunder's regions and
torch.compile's graphs alike).

Threads: torch runs with 2 intra-op threads by default (``--threads``), set before anything compiles.
The script prints a markdown table for BENCHMARKS.md and a line describing the machine; it is not a test.
"""
from __future__ import annotations

import argparse
import atexit
import collections
import copy
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, NamedTuple

# ``--inductor-cache DIR``, read before torch is imported (inductor reads its cache's place then)
_KEPT_CACHE = argparse.ArgumentParser(add_help=False)
_KEPT_CACHE.add_argument("--inductor-cache")
_kept_cache = _KEPT_CACHE.parse_known_args()[0].inductor_cache
if _kept_cache:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(_kept_cache)
else:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-fusion-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
import thunder  # noqa: E402
import thunder.executors.inductorex  # noqa: E402
from thunder.executors.inductor_compile import COMPILATIONS  # noqa: E402
from benchmarks.bench_models import WORKLOADS, Workload  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
GRAPHS = "+cudagraphs"  # a thunder variant with thunder.CUDAGraphTransform()


class Prepared(NamedTuple):
    runner: Callable  # the model as the variant runs it
    step: Callable  # one training step; returns nothing
    losses: list  # the loss of every step so far (tensors)
    first_s: float
    saved_bytes: int | None
    peak_bytes: int | None


class Row(NamedTuple):
    variant: str
    step_s: float | None = None
    pair_times: list | None = None  # --pairs: the step time of every cycle
    first_s: float | None = None
    saved_bytes: int | None = None
    peak_bytes: int | None = None
    loss: float | None = None
    error: str | None = None


def runner_for(model, variant: str):
    if variant == "eager":
        return model
    if variant == "torch.compile":
        return torch.compile(model)
    transforms = []
    if variant.endswith(GRAPHS):
        variant = variant[:-len(GRAPHS)]
        transforms.append(thunder.CUDAGraphTransform())
    if variant == "thunder":
        return thunder.jit(model, transforms=transforms)
    return thunder.jit(model, executors=variant[len("thunder["):-1].split(","), transforms=transforms)


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(runner, opt, batch, losses: list):
    def step():
        torch.manual_seed(len(losses))
        loss = runner(*batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    return step


def saved_bytes(runner, model, batch) -> int:
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = runner(*batch)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(storages.values())


def resident_bytes(model, opt) -> int:
    tensors = [*model.parameters(), *model.buffers()]
    tensors += [t for state in opt.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
    return sum(t.nbytes for t in {id(t): t for t in tensors}.values())


def peak_bytes(step, model, opt, device) -> int:
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    sync(device)
    return torch.cuda.max_memory_allocated(device) - before + resident_bytes(model, opt)


def make_batch(workload: Workload, device):
    g = torch.Generator().manual_seed(1)
    shape = (workload.batch, workload.seq)
    idx = torch.randint(0, workload.vocab_size, shape, generator=g)
    targets = torch.randint(0, workload.vocab_size, shape, generator=g)
    return idx.to(device), targets.to(device)


def prepare(base, batch, variant: str, device) -> Prepared:
    """A fresh copy of ``base`` under ``variant``: its first step timed, then its memory measured."""
    model = copy.deepcopy(base)
    compiled_before = collections.Counter(COMPILATIONS)
    hits_before = inductor_cache_hits()
    runner = runner_for(model, variant)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses = []
    step = make_step(runner, opt, batch, losses)
    sync(device)
    t0 = time.perf_counter()
    step()
    sync(device)
    first = time.perf_counter() - t0
    if variant.startswith("thunder"):
        compiled = ", ".join(f"{n} {kind}" for kind, n in (COMPILATIONS - compiled_before).items())
        print(f"{variant}: first call {first:.2f} s, of which {first_call_passes(runner)}; region compilations: "
              f"{compiled or 'none'}, {inductor_cache_hits() - hits_before} read from inductor's cache",
              file=sys.stderr, flush=True)
        # executors that compile in the background ("inductor_background") run fused from here on
        thunder.executors.inductorex.wait_for_compilation()
    peak = peak_bytes(step, model, opt, device) if device.type == "cuda" else None
    if peak is None:
        step()
    saved = None if variant == "torch.compile" else saved_bytes(runner, model, batch)
    return Prepared(runner, step, losses, first, saved, peak)


def inductor_cache_hits() -> int:
    """Compilations inductor has read from its graph cache so far in this process."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"]


def first_call_passes(runner) -> str:
    """The passes of a thunder variant's first call that took longest (its traces' provenance: the tracing, the
    executors' transform of the forward and of the backward, where fused regions compile), in seconds; the rest
    of the first call is the first run (kernels still compiling are waited for there)."""
    import re

    times = []
    for kind, traces in (("forward", thunder.last_traces(runner)), ("backward", thunder.last_backward_traces(runner))):
        for t in traces:
            m = re.match(r"# Constructed by (.*) \(took (\d+) milliseconds\)", getattr(t, "provenance", None) or "")
            if m and int(m.group(2)) >= 50:
                times.append(f"{m.group(1)} ({kind}) {int(m.group(2)) / 1e3:.2f} s")
    return ", ".join(times) or "no pass over 0.05 s"


def timed(step, steps: int, device) -> float:
    times = []
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def paired(prepared: dict, pairs: int, device) -> dict:
    """Step times of ``pairs`` cycles of one step of each variant, the order rotated every cycle."""
    names = list(prepared)
    times = {v: [] for v in names}
    for i in range(pairs):
        for v in names[i % len(names):] + names[:i % len(names)]:
            sync(device)
            t0 = time.perf_counter()
            prepared[v].step()
            sync(device)
            times[v].append(time.perf_counter() - t0)
    return times


def median_ratio(times: list, reference: list, resamples: int = 2000) -> tuple[float, float, float]:
    """The median of the cycle-by-cycle ratios ``times[i] / reference[i]`` and its 95 % bootstrap interval."""
    ratios = [t / r for t, r in zip(times, reference)]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return statistics.median(ratios), medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def build(key: str, args):
    """The workload, its base model (on the device, in the dtype) and its batch."""
    workload = WORKLOADS[key](args.scale, args.attention)
    torch.manual_seed(0)
    base = workload.make_model().to(device=args.device, dtype=DTYPES[args.dtype])
    return workload, base, make_batch(workload, args.device)


def fresh_first_call(key: str, variant: str, args) -> tuple[float | None, str | None]:
    """The first call of ``variant`` measured in a new process with its own (fresh) inductor cache."""
    cmd = [sys.executable, os.path.abspath(__file__), "--first-call-only", "--model", key, "--variant", variant,
           "--device", str(args.device), "--dtype", args.dtype, "--attention", args.attention,
           "--threads", str(args.threads), "--scale", args.scale]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("first_call_s "):
        return None, f"fresh first call failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}"
    return float(lines[-1].split()[1]), None


def bench_model(key: str, variants: list[str], args) -> tuple[Workload, list[Row]]:
    workload, base, batch = build(key, args)
    prepared, errors = {}, {}
    for v in variants:  # thunder before torch.compile: see "Cold compilation" in the module docstring
        try:
            prepared[v] = prepare(base, batch, v, args.device)
        except Exception as e:  # noqa: BLE001 - a benchmark reports a failing variant and measures the others
            errors[v] = f"{type(e).__name__}: {e}"
            print(f"{workload.label}: {v} failed: {errors[v]}", file=sys.stderr, flush=True)
    best = {v: float("inf") for v in prepared}
    for _ in range(args.rounds):
        for v, p in prepared.items():
            best[v] = min(best[v], timed(p.step, args.steps, args.device))
    pair_times = paired(prepared, args.pairs, args.device) if args.pairs else {}
    if args.profile:
        profile_steps(workload, prepared, args)
    for v, p in prepared.items():
        if v.endswith(GRAPHS):
            print(f"{workload.label}, {v}: {graph_replays(p.runner)}", flush=True)
    rows = []
    for v in variants:
        if v in errors:
            rows.append(Row(v, error=errors[v]))
            continue
        p = prepared[v]
        first = p.first_s
        if args.fresh_first_call:
            first, err = fresh_first_call(key, v, args)
            if err:
                print(f"{workload.label}: {v}: {err}", flush=True)
        rows.append(Row(v, best[v], pair_times.get(v), first, p.saved_bytes, p.peak_bytes, p.losses[-1].item()))
    return workload, rows


def profile_steps(workload, prepared: dict, args):
    """--profile FILE: per variant, the host's time to issue a step (no synchronization before the step ends)
    and the step's wall time, measured for all variants before any profiler runs (a profiler leaves
    callbacks behind that slow later launches); then one step of each under torch.profiler, its kernel table
    appended to FILE, its kernel time and count printed."""
    from torch.profiler import ProfilerActivity, profile

    timings = {}
    for v, p in prepared.items():
        host, wall = [], []
        for _ in range(5):
            sync(args.device)
            t0 = time.perf_counter()
            p.step()
            host.append(time.perf_counter() - t0)
            sync(args.device)
            wall.append(time.perf_counter() - t0)
        timings[v] = statistics.median(host), statistics.median(wall)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.type == "cuda" else [])
    lines = [f"profile of one step, {workload.label} (host and step: medians of 5 steps before any profiling)",
             "| variant | host ms (issue) | step ms | kernel ms | kernels |", "|---|---|---|---|---|"]
    with open(args.profile, "a") as f:
        for v, p in prepared.items():
            with profile(activities=activities) as prof:
                p.step()
                sync(args.device)
            averages = prof.key_averages()
            kernels = [e for e in prof.events()  # device work (kernels, copies), not annotations of ranges
                       if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation]
            kernel_us = sum(e.self_device_time_total for e in kernels)
            f.write(f"\n## {workload.label}: {v}\n\n")
            sort = "self_device_time_total" if kernels else "self_cpu_time_total"
            f.write(averages.table(sort_by=sort, row_limit=80, max_name_column_width=90))
            host, wall = timings[v]
            lines.append(f"| {v} | {1e3 * host:.2f} | {1e3 * wall:.2f} | {kernel_us / 1e3:.2f} | {len(kernels)} |")
    print("\n".join(lines), flush=True)


def graph_replays(jm) -> str:
    """How the CUDA graphs of ``jm``'s last forward and backward traces ran: replays, and calls run as usual."""
    from thunder.executors.cudagraphex import _GraphedSegment

    traces = [thunder.last_traces(jm)[-1]] + thunder.last_backward_traces(jm)[-1:]
    segments = [b.sym.impl for t in traces for b in t.bound_symbols if isinstance(getattr(b.sym, "impl", None), _GraphedSegment)]
    failed = sorted({f"{s.name}: {s.failed}" for s in segments if s.failed})
    return (f"{len(segments)} graphs, {sum(s.replays for s in segments)} replays, "
            f"{sum(s.fallbacks for s in segments)} calls run as usual"
            + (f"; not captured: {failed}" if failed else ""))


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b is not None else "n/a"


def fmt(x, spec: str, scale: float = 1.0) -> str:
    return "n/a" if x is None else format(x * scale, spec)


def table(results, cuda: bool) -> str:
    head = ["model", "variant", "step ms", "tokens/s", "vs eager", "vs torch.compile", "first call s",
            "saved MiB", "saved vs eager"] + (["peak MiB", "peak vs eager"] if cuda else []) + ["final loss"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for workload, rows in results:
        ref = {r.variant: r for r in rows if r.error is None}
        eager, compiled = ref.get("eager", Row("")), ref.get("torch.compile", Row(""))
        for r in rows:
            if r.error is not None:
                cells = [workload.label, r.variant, "failed"] + ["n/a"] * (len(head) - 3)
                lines.append("| " + " | ".join(cells) + " |")
                continue
            tokens = workload.batch * workload.seq / r.step_s
            cells = [workload.label, r.variant, fmt(r.step_s, ".2f", 1e3), f"{tokens:,.0f}",
                     ratio(r.step_s, eager.step_s), ratio(r.step_s, compiled.step_s), fmt(r.first_s, ".2f"),
                     fmt(r.saved_bytes, ".1f", 2**-20), ratio(r.saved_bytes, eager.saved_bytes)]
            if cuda:
                cells += [fmt(r.peak_bytes, ".1f", 2**-20), ratio(r.peak_bytes, eager.peak_bytes)]
            cells.append(fmt(r.loss, ".5f"))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(results) -> str:
    """--pairs: each variant's median step ratio to eager and to torch.compile, cycle by cycle, with 95 % intervals."""
    lines = ["| model | variant | cycles | vs eager (95 % interval) | vs torch.compile (95 % interval) |",
             "|---|---|---|---|---|"]
    for workload, rows in results:
        ref = {r.variant: r.pair_times for r in rows if r.pair_times}
        for r in rows:
            if not r.pair_times:
                continue
            cells = []
            for name in ("eager", "torch.compile"):
                if name not in ref or name == r.variant:
                    cells.append("n/a")
                    continue
                m, lo, hi = median_ratio(r.pair_times, ref[name])
                cells.append(f"{m:.3f} ({lo:.3f} to {hi:.3f})")
            lines.append(f"| {workload.label} | {r.variant} | {len(r.pair_times)} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def machine_line(args) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"torch {torch.__version__}, Python {platform.python_version()}, {torch.get_num_threads()} thread(s), "
            f"{device_name(args.device)}, {args.dtype}, load average {load}")


def variants_of(args) -> list[str]:
    lists = [s.strip() for s in (args.thunder_executors or "").split(";") if s.strip()]
    explicit = ["thunder[" + ",".join(n.strip() for n in s.split(",")) + "]" for s in lists]
    graphs = ["thunder" + GRAPHS] if args.device.type == "cuda" else []
    return ["eager", "thunder", *graphs, *explicit] + ([] if args.no_compile else ["torch.compile"])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--models", default=None, help="comma-separated: llama,gpt (default: both; GPU mode: llama)")
    p.add_argument("--steps", type=int, default=10, help="steps per round, of which the median is taken")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds, of which the best is kept")
    p.add_argument("--pairs", type=int, default=0, help="cycles of one step per variant for paired ratios (0: none)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--thunder-executors", default="", help='executor lists, e.g. "inductor,torch;torch"')
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--fresh-first-call", action="store_true", help="first calls in fresh subprocesses")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--attention", choices=["manual", "sdpa"], default=None,
                   help="the Llama's attention (default: manual on the CPU, sdpa on CUDA and in GPU mode)")
    p.add_argument("--gpu-model-scale", choices=["full", "tiny", "host"], default=None,
                   help="GPU mode's models at full size (the default on CUDA), tiny, or host (12 narrow layers)")
    p.add_argument("--profile", metavar="FILE", help="profile one step of each variant; kernel tables to FILE")
    p.add_argument("--first-call-only", action="store_true", help="print one variant's first-call seconds")
    p.add_argument("--inductor-cache", metavar="DIR", help="inductor's cache in DIR, kept (a fresh temporary one "
                   "otherwise): run twice for first calls with a warm cache")
    p.add_argument("--model", help="with --first-call-only: the model")
    p.add_argument("--variant", help="with --first-call-only: the variant")
    p.add_argument("--scale", choices=["cpu", "gpu", "tiny", "host"], help=argparse.SUPPRESS)  # set for subprocesses
    args = p.parse_args(argv)
    args.device = torch.device(args.device)
    cuda = args.device.type == "cuda"
    if args.scale is None:
        scales = {"full": "gpu", "tiny": "tiny", "host": "host", None: "gpu" if cuda else "cpu"}
        args.scale = scales[args.gpu_model_scale]
    args.attention = args.attention or ("sdpa" if cuda or args.scale in ("gpu", "host") else "manual")
    args.models = args.models or ("llama,gpt" if args.scale == "cpu" else "llama")
    for key in args.models.split(",") + ([args.model] if args.model else []):
        if key not in WORKLOADS:
            p.error(f"unknown model {key!r}; choose from {sorted(WORKLOADS)}")
    if args.first_call_only and not (args.model and args.variant):
        p.error("--first-call-only needs --model and --variant")
    thunder_variant = args.variant.removesuffix(GRAPHS) if args.variant else None
    if args.variant and not (args.variant in ("eager", "torch.compile") or thunder_variant == "thunder"
                             or (thunder_variant.startswith("thunder[") and thunder_variant.endswith("]"))):
        p.error(f"unknown variant {args.variant!r}; choose eager, thunder, thunder[EXECUTOR,...] or torch.compile")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.first_call_only:
        _, base, batch = build(args.model, args)
        print(f"first_call_s {prepare(base, batch, args.variant, args.device).first_s:.4f}")
        return
    variants = variants_of(args)
    results = [bench_model(key, variants, args) for key in args.models.split(",")]
    print()
    print(machine_line(args))
    print()
    print(table(results, args.device.type == "cuda"))
    if args.pairs:
        print()
        print(paired_table(results))
    for workload, rows in results:
        for r in rows:
            if r.error is not None:
                print(f"\n{workload.label}, {r.variant}: {r.error}")


if __name__ == "__main__":
    main()
