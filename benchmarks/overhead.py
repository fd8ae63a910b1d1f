"""Cache-hit overhead and first-call time of thunder.jit, side by side with eager and torch.compile.

    python benchmarks/overhead.py                 # all rows; torch.compile where a C++ compiler exists
    python benchmarks/overhead.py --rows add,mlp  # a subset; `gpt2_train` (grad enabled) is measured on request
    python benchmarks/overhead.py --no-compile    # skip torch.compile
    python benchmarks/overhead.py --profile       # also cProfile thunder's cache-hit path of a + b
    python benchmarks/overhead.py --threads 2     # torch's intra-op threads (default 1, see below)

Per-call time: ``torch.utils.benchmark.Timer.blocked_autorange`` gives the median over many calls;
this is taken in interleaved rounds (eager, thunder, torch.compile, eager, ...) and the best round is
kept. Other processes on a small shared machine only ever add time, so the best round is the most
faithful figure; the load average is printed with the table. Thunder's own work on a cache hit is
mostly its prologue, which is also timed alone: that figure does not drown in the kernels' noise.

First-call time: the wall-clock time of the first call of a fresh ``thunder.jit`` / ``torch.compile``
object, i.e. tracing (or compiling) plus one execution. One-time initialization of the process (the
first jit of anything) is measured once, up front, on a trivial function, and reported separately.
For thunder three fresh objects are timed: the first, and the best of the three, are shown.
torch.compile is measured once, cold: inductor's on-disk cache is pointed at a fresh directory, as on
a new machine.

Threads: by default torch runs single-threaded here (``torch.set_num_threads(1)``, before anything is
compiled, so torch.compile's kernels are built for it too). On a small machine shared with other jobs,
multi-threaded kernels stall whenever another process takes a core, and the timings become noise;
single-threaded ones stay stable. The overheads measured are per-call Python costs, which do not
depend on the thread count; ``--threads`` changes it.

This prints a table; it is not a timed test.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="thunder-bench-inductor-"))

import contextlib  # noqa: E402
import cProfile  # noqa: E402
import dataclasses  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from typing import Callable, NamedTuple  # noqa: E402

import torch  # noqa: E402
from torch.utils.benchmark import Timer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import thunder  # noqa: E402
from tests.models import GPT, GPTConfig, MLP  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Workload:
    key: str
    title: str
    make: Callable[[], tuple]  # () -> (callable, args)
    min_run_time: float  # seconds per Timer measurement
    rounds: int  # interleaved measurement rounds per variant
    target: str  # the target for thunder, in words
    meets_target: Callable[["Row"], bool]
    grad: bool = False  # run with grad enabled (training: thunder builds forward and backward), else under no_grad
    default: bool = True  # measured when --rows is not given


class Row(NamedTuple):
    workload: Workload
    eager: float  # seconds per call
    thunder: float
    compiled: float | None  # None: torch.compile not measured
    thunder_first: float  # seconds, the first fresh thunder.jit object for this workload
    thunder_first_best: float  # the best of three fresh objects
    compiled_first: float | None
    prologue: float  # seconds per call of thunder's prologue alone (its checks and input gathering)
    compile_note: str = ""

    @property
    def overhead(self) -> float:
        return self.thunder - self.eager

    @property
    def overhead_pct(self) -> float:
        return 100 * self.overhead / self.eager


def _add():
    a, b = torch.randn(2, 2), torch.randn(2, 2)

    def add(a, b):
        return a + b

    return add, (a, b)


def _mlp():
    torch.manual_seed(0)
    return MLP(width=1024, n_layers=8).eval(), (torch.randn(64, 1024),)


def _gpt2(train: bool = False):
    torch.manual_seed(0)
    model = GPT(GPTConfig.gpt2_small()).train(train)
    return model, (torch.randint(0, model.config.vocab_size, (1, 128)),)


WORKLOADS = {
    "add": Workload("add", "a + b (2x2)", _add, 0.2, 7, "overhead <= 10 us", lambda r: r.overhead <= 10e-6),
    "mlp": Workload("mlp", "8-layer MLP fwd (1024 wide, batch 64)", _mlp, 0.5, 9, "overhead <= 5 %",
                    lambda r: r.overhead_pct <= 5),
    "gpt2": Workload("gpt2", "GPT-2 small fwd (124M, seq 128, batch 1)", _gpt2, 1.0, 7, "first call <= 2 s",
                     lambda r: r.thunder_first <= 2.0),
    "gpt2_train": Workload("gpt2_train", "GPT-2 small fwd, grad enabled (fwd+bwd compiled)", lambda: _gpt2(True), 1.0, 5,
                           "first call <= 2 s", lambda r: r.thunder_first <= 2.0, grad=True, default=False),
}


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


def per_call(fn, args, min_run_time: float) -> float:
    """Median seconds per call of ``fn(*args)``."""
    # Timer sets its own thread count (1 unless told): keep torch's, which torch.compile's kernels were built for.
    timer = Timer(stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def first_call(make_jitted: Callable, args) -> tuple[Callable, float, object]:
    start = time.perf_counter()
    jitted = make_jitted()
    out = jitted(*args)
    return jitted, time.perf_counter() - start, out


def first_calls(make_jitted: Callable, args, repeats: int) -> tuple[Callable, float, float, object]:
    """(jitted, first call of the first object, best first call of ``repeats`` fresh objects, output)."""
    results = [first_call(make_jitted, args) for _ in range(repeats)]
    return results[-1][0], results[0][1], min(r[1] for r in results), results[0][2]


def one_time_init(use_compile: bool) -> tuple[float, float | None]:
    """Seconds for the first jit of a trivial function in this process: thunder's and torch.compile's."""

    def double(x):
        return x * 2

    x = torch.ones(1)
    _, thunder_s, _ = first_call(lambda: thunder.jit(double), (x,))
    compile_s = None
    if use_compile and compiler_problem() is None:
        _, compile_s, _ = first_call(lambda: torch.compile(double), (x,))
        torch._dynamo.reset()
    return thunder_s, compile_s


def compiler_problem() -> str | None:
    """Why torch.compile cannot run here (inductor on CPU needs a C++ compiler), or None."""
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "no C++ compiler (install g++)"
    return None


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    if isinstance(a, (tuple, list)):
        return all(_same(x, y) for x, y in zip(a, b))
    return a == b


def measure(w: Workload, *, use_compile: bool) -> Row:
    fn, args = w.make()
    with torch.enable_grad() if w.grad else torch.no_grad():
        torch.manual_seed(0)
        expected = fn(*args)
        torch.manual_seed(0)
        jitted, thunder_first, thunder_first_best, out = first_calls(lambda: thunder.jit(fn), args, repeats=3)
        assert _same(out, expected), f"{w.title}: thunder's output differs from eager's"
        variants = {"eager": fn, "thunder": jitted}
        compiled_first, note = None, ""
        problem = compiler_problem() if use_compile else "skipped (--no-compile)"
        if problem is None:
            torch._dynamo.reset()
            try:
                torch.manual_seed(0)
                compiled, compiled_first, out = first_call(lambda: torch.compile(fn), args)
                assert _same(out, expected), f"{w.title}: torch.compile's output differs from eager's"
                variants["compile"] = compiled
            except Exception as e:  # report, do not crash the table
                note = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        else:
            note = f"torch.compile n/a: {problem}"
        for f in variants.values():  # warm up
            f(*args)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(w.rounds):
            for k, f in variants.items():
                times[k].append(per_call(f, args, w.min_run_time))
        entry = thunder.compile_stats(jitted).last_entry
        prologue = min(per_call(entry.prologue, (args, {}), w.min_run_time) for _ in range(3))
    assert thunder.cache_misses(jitted) == 1, f"{w.title}: thunder recompiled during timing"
    best = {k: min(v) for k, v in times.items()}
    return Row(w, best["eager"], best["thunder"], best.get("compile"), thunder_first, thunder_first_best,
               compiled_first, prologue, note)


def profile_add_hit_path(n: int = 50_000, top: int = 15):
    """cProfile of thunder's cache-hit path for a + b: where the overhead goes."""
    fn, args = _add()
    jitted = thunder.jit(fn)
    jitted(*args)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        jitted(*args)
    prof.disable()
    print(f"\ncProfile of {n} cache-hit calls of thunder.jit(a + b), by own time:")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)
    print("The prologue run on every call:\n")
    print(thunder.last_prologue_traces(jitted)[-1])


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def fmt_time(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.2f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_overhead(row: Row, t: float | None) -> str:
    if t is None:
        return "n/a"
    d = t - row.eager
    return f"{'+' if d >= 0 else '-'}{fmt_time(abs(d))} ({100 * d / row.eager:+.1f} %)"


def table(rows: list[Row]) -> str:
    head = ["workload", "eager / call", "thunder / call", "thunder overhead", "thunder prologue alone",
            "torch.compile / call",
            "torch.compile overhead", "thunder first call", "torch.compile first call", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.workload.title, fmt_time(r.eager), fmt_time(r.thunder), fmt_overhead(r, r.thunder),
                 f"{fmt_time(r.prologue)} ({100 * r.prologue / r.eager:.2f} %)", fmt_time(r.compiled), fmt_overhead(r, r.compiled),
                 f"{fmt_time(r.thunder_first)} (best of 3: {fmt_time(r.thunder_first_best)})",
                 f"{fmt_time(r.compiled_first)}", r.workload.target, "yes" if r.workload.meets_target(r) else "**no**"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r.workload.title}: {r.compile_note}" for r in rows if r.compile_note]
    return "\n".join(lines + ([""] + notes if notes else []))


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(Exception):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    return (f"{cpu}, {os.cpu_count()} CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"Python {platform.python_version()}")


def _load(avg) -> str:
    return ", ".join(f"{x:.2f}" for x in avg)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=",".join(k for k, w in WORKLOADS.items() if w.default),
                   help=f"comma-separated subset of {list(WORKLOADS)}")
    p.add_argument("--no-compile", action="store_true", help="do not measure torch.compile")
    p.add_argument("--profile", action="store_true", help="cProfile thunder's cache-hit path of a + b")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (default 1)")
    opts = p.parse_args(argv)
    torch.set_num_threads(opts.threads)
    keys = [k.strip() for k in opts.rows.split(",") if k.strip()]
    unknown = [k for k in keys if k not in WORKLOADS]
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {list(WORKLOADS)}")
    print(f"Machine: {machine()}")
    print(f"Command: python {' '.join(sys.argv)}")
    load_before = os.getloadavg()
    thunder_init, compile_init = one_time_init(not opts.no_compile)
    rows = []
    for k in keys:
        print(f"measuring {WORKLOADS[k].title} ...", file=sys.stderr, flush=True)
        rows.append(measure(WORKLOADS[k], use_compile=not opts.no_compile))
    load_after = os.getloadavg()
    print(f"Load average (1, 5, 15 min) before: {_load(load_before)}, after: {_load(load_after)}")
    print(f"One-time initialization (first jit in the process, of x * 2): thunder {fmt_time(thunder_init)}, "
          f"torch.compile {fmt_time(compile_init)}\n")
    print(table(rows))
    if opts.profile:
        profile_add_hit_path()
    return rows


if __name__ == "__main__":
    main()
