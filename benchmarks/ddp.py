"""Data-parallel training step: thunder DDP (``thunder.distributed.ddp``) vs torch DDP, side by side in one run.

    torchrun --nproc-per-node 2 benchmarks/ddp.py [--steps 3] [--rounds 6] [--batch 8] [--buckets 0,1,25]
                                                  [--micro-batches 4] [--optimizer adamw] [--threads 1]
    torchrun --nproc-per-node 1 benchmarks/ddp.py               # single rank (the collectives still run)
    torchrun --nproc-per-node 2 benchmarks/ddp.py --breakdown   # where the time goes (CPU), instead of the table

Backend: gloo on CPU; NCCL on CUDA when available, one device per local rank.

Model: the GPT of tests/models.py with 4 layers, width 256, 4 heads, sequence 128, vocabulary 4096,
dropout 0.1, ``--batch`` sequences per rank per step (different data on each rank). Each config gets two
fresh copies of one model: ``thunder.jit(thunder.distributed.ddp(model, bucket_size_in_mb=B))`` and
``torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=B)``. A step is forward, backward and an
optimizer step (AdamW or SGD), then ``zero_grad(set_to_none=True)``. Configs: one per bucket size in
``--buckets``, and one with gradient accumulation: ``--micro-batches`` micro-batches of
``batch / micro-batches`` sequences, all but the last inside ``no_sync()``, 25 MB buckets.

Timing: after two warm-up steps (thunder traces and compiles; torch DDP rebuilds its buckets after its
first step), interleaved rounds (thunder then torch DDP, then the other way round, ...), each round the
median of ``--steps`` steps; a rank's step time is the slowest rank's median (the ranks wait for each other
in every all-reduce), and the best round is kept. torch runs single-threaded by default: two ranks share
the two cores of the reference machine (see benchmarks/overhead.py on noise). On CPU the table also gives the
CPU time of a step (``time.process_time``: the rank's process, its communication threads included; the
slowest rank's median, best round), which other jobs on a shared machine disturb far less than wall time.

Collectives and bytes per step are counted independently of either implementation: one extra step of each
variant runs under ``torch.profiler``, and the process group's own events are counted (``gloo:all_reduce``,
``nccl:all_reduce``, ...: the backend records one per collective, with the shape and dtype of the tensor it
reduces). ``check_counter`` verifies the count on a two-layer model, where the answer is known, before
anything is timed.

Every step of both variants is seeded alike (dropout masks) and reads the same batch, so after the timed
steps the parameters of thunder's copy and torch DDP's copy should agree; the table prints the largest
absolute difference (across ranks). This prints a table on rank 0; it is not a timed test.

``--breakdown`` (meant for CPU) prints instead, per bucket size, the CPU time of forward, backward and
optimizer step of eager and thunder without DDP, thunder DDP and torch DDP (interleaved steps, medians), and
the time cProfile sees in thunder DDP's pieces (prologue, forward and backward traces, pack_bucket,
all_reduce, wait, unpack_bucket).
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import copy
import dataclasses
import gc
import os
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import thunder  # noqa: E402
import thunder.distributed  # noqa: E402
from tests.models import GPT, GPTConfig  # noqa: E402

GPT_CONFIG = GPTConfig(vocab_size=4096, block_size=128, n_layer=4, n_head=4, n_embd=256, dropout=0.1)
N_BATCHES = 4  # distinct batches per rank, used in turn
WARMUP_STEPS = 2

# the dtype names the profiler records -> bytes per element
_ELEMENT_SIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4, "long int": 8}


@dataclasses.dataclass(frozen=True)
class Config:
    label: str
    bucket_mb: float
    micro_batches: int = 1  # > 1: all but the last inside no_sync()


@dataclasses.dataclass
class Variant:
    """One copy of the model being trained: what to call, the module whose parameters it trains, its optimizer."""
    name: str
    runner: torch.nn.Module  # the ThunderModule or the DistributedDataParallel wrapper
    module: torch.nn.Module  # the plain module whose parameters it trains
    optimizer: torch.optim.Optimizer
    steps_done: int = 0


# -- set-up -------------------------------------------------------------------------------------------


def init_distributed() -> torch.device:
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9)


def make_variants(base: torch.nn.Module, config: Config, optimizer: str, device: torch.device) -> list[Variant]:
    t_module = copy.deepcopy(base)
    t_runner = thunder.jit(thunder.distributed.ddp(t_module, bucket_size_in_mb=config.bucket_mb))
    d_module = copy.deepcopy(base)
    device_ids = [device.index] if device.type == "cuda" else None
    d_runner = DistributedDataParallel(d_module, device_ids=device_ids, bucket_cap_mb=config.bucket_mb)
    return [Variant("thunder DDP", t_runner, t_module, make_optimizer(optimizer, t_module.parameters())),
            Variant("torch DDP", d_runner, d_module, make_optimizer(optimizer, d_module.parameters()))]


def make_batches(batch: int, device: torch.device) -> list[tuple]:
    g = torch.Generator().manual_seed(1234 + dist.get_rank())  # different data on each rank
    shape = (batch, GPT_CONFIG.block_size)
    return [(torch.randint(0, GPT_CONFIG.vocab_size, shape, generator=g).to(device),
             torch.randint(0, GPT_CONFIG.vocab_size, shape, generator=g).to(device)) for _ in range(N_BATCHES)]


# -- one step -------------------------------------------------------------------------------------------


def train_step(v: Variant, batches: list, config: Config) -> None:
    """Forward, backward (accumulated over micro-batches, all but the last under no_sync), optimizer step.
    Both variants draw the same dropout masks and read the same data at their n-th step."""
    torch.manual_seed(1000 * dist.get_rank() + v.steps_done)
    idx, targets = batches[v.steps_done % len(batches)]
    n = config.micro_batches
    for i, (x, y) in enumerate(zip(idx.chunk(n), targets.chunk(n))):
        ctx = v.runner.no_sync() if i < n - 1 else contextlib.nullcontext()
        with ctx:
            loss = v.runner(x, y)[1]
            (loss / n).backward()
    v.optimizer.step()
    v.optimizer.zero_grad(set_to_none=True)
    v.steps_done += 1


def timed_round(v: Variant, batches: list, config: Config, steps: int, device: torch.device) -> tuple[float, float]:
    """The median wall-clock time and the median CPU time (this rank's process, all its threads) of ``steps``
    steps on this rank, in seconds."""
    dist.barrier()
    wall, cpu = [], []
    for _ in range(steps):
        synchronize(device)
        t0, c0 = time.perf_counter(), time.process_time()
        train_step(v, batches, config)
        synchronize(device)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def slowest_rank(*seconds: float, device: torch.device):
    """The largest value over the ranks of each of ``seconds`` (one value: a float, several: a tuple)."""
    t = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() if len(seconds) == 1 else tuple(t.tolist())


# -- counting collectives -------------------------------------------------------------------------------


def collective_events(fn) -> list:
    """The process group backend's events (one per collective it runs) recorded while ``fn()`` runs."""
    prefix = dist.get_backend() + ":"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    return [e for e in prof.events() if e.name.startswith(prefix)]


_FLOATING = frozenset({"float", "double", "c10::Half", "c10::BFloat16"})


def count_collectives(fn) -> tuple[int, int]:
    """(number of collectives, bytes they reduce on this rank) while ``fn()`` runs: those of floating-point tensors
    (gradients), not thunder's check that every rank reduces the same gradients (two int64 numbers, once a step)."""
    events = [e for e in collective_events(fn) if set(e.input_dtypes) & _FLOATING]
    nbytes = 0
    for e in events:
        for shape, dtype in zip(e.input_shapes, e.input_dtypes):
            if shape:
                if dtype not in _ELEMENT_SIZE:
                    raise RuntimeError(f"benchmarks/ddp.py: no element size for the profiler's dtype {dtype!r} "
                                       f"of {e.name}; add it to _ELEMENT_SIZE")
                nbytes += _ELEMENT_SIZE[dtype] * int(torch.Size(shape).numel())
    return len(events), nbytes


def check_counter(device: torch.device) -> None:
    """The counter sees each all-reduce of both implementations: on a two-layer model with one bucket per
    gradient there are as many all-reduces as parameters, with one bucket a single one; the bytes are the
    parameters' bytes in both cases."""
    base = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(device)
    x = torch.randn(5, 4, device=device)
    n_params = len(list(base.parameters()))
    nbytes = sum(p.numel() * p.element_size() for p in base.parameters())
    for bucket_mb, expected in ((0, n_params), (25, 1)):
        for v in make_variants(base, Config("check", bucket_mb), "sgd", device):
            for _ in range(WARMUP_STEPS):
                v.runner(x).sum().backward()
            counted = count_collectives(lambda: v.runner(x).sum().backward())
            if counted != (expected, nbytes):
                raise RuntimeError(f"benchmarks/ddp.py: counted {counted} (all-reduces, bytes) for {v.name} "
                                   f"with {bucket_mb} MB buckets on a two-layer model, expected "
                                   f"{(expected, nbytes)}")
        del v
        gc.collect()


# -- the benchmark --------------------------------------------------------------------------------------


def param_diff(a: torch.nn.Module, b: torch.nn.Module, device: torch.device) -> float:
    """The largest absolute difference between the parameters of ``a`` and ``b``, over all ranks."""
    diff = max((pa.detach() - pb.detach()).abs().max().item()
               for pa, pb in zip(a.parameters(), b.parameters(), strict=True))
    return slowest_rank(diff, device=device)


def run_config(base, config: Config, args, device: torch.device) -> dict:
    batches = make_batches(args.batch, device)
    variants = make_variants(base, config, args.optimizer, device)
    first = {}
    for v in variants:
        synchronize(device)
        t0 = time.perf_counter()
        train_step(v, batches, config)
        synchronize(device)
        first[v.name] = slowest_rank(time.perf_counter() - t0, device=device)
        for _ in range(WARMUP_STEPS - 1):
            train_step(v, batches, config)
    counts = {v.name: count_collectives(lambda: train_step(v, batches, config)) for v in variants}
    best = {v.name: (float("inf"), float("inf")) for v in variants}  # (wall, CPU) seconds
    for r in range(args.rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            wall, cpu = slowest_rank(*timed_round(v, batches, config, args.steps, device), device=device)
            best[v.name] = (min(best[v.name][0], wall), min(best[v.name][1], cpu))
    assert variants[0].steps_done == variants[1].steps_done
    diff = param_diff(variants[0].module, variants[1].module, device)
    del variants, v
    gc.collect()
    dist.barrier()
    return dict(config=config, best=best, first=first, counts=counts, diff=diff)


# -- --breakdown: where the step time goes -----------------------------------------------------------

# thunder's functions whose time the breakdown reports (code names, as cProfile sees them)
_THUNDER_PARTS = {"prologue": "prologue", "forward trace": "augmented_forward_fn", "backward trace": "backward_fn",
                  "pack_bucket": "pack_bucket_impl", "all_reduce (issue)": "_all_reduce_impl", "wait": "_wait_impl",
                  "unpack_bucket": "unpack_bucket_impl"}


def phased_step(v: Variant, batches: list) -> tuple[float, float, float]:
    """One step without accumulation, as ``train_step``; the CPU seconds of forward, backward, optimizer."""
    torch.manual_seed(1000 * dist.get_rank() + v.steps_done)
    idx, targets = batches[v.steps_done % len(batches)]
    c0 = time.process_time()
    loss = v.runner(idx, targets)[1]
    c1 = time.process_time()
    loss.backward()
    c2 = time.process_time()
    v.optimizer.step()
    v.optimizer.zero_grad(set_to_none=True)
    v.steps_done += 1
    return c1 - c0, c2 - c1, time.process_time() - c2


def thunder_parts(v: Variant, batches: list, config: Config, steps: int) -> dict:
    """Milliseconds per step (under cProfile, which inflates Python-heavy parts) and calls per step of
    thunder's pieces in ``_THUNDER_PARTS``."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        train_step(v, batches, config)
    prof.disable()
    stats = pstats.Stats(prof).stats
    parts = {}
    for label, code_name in _THUNDER_PARTS.items():
        found = [(nc, ct) for (_, _, name), (_, nc, _, ct, _) in stats.items() if name == code_name]
        parts[label] = (sum(ct for _, ct in found) * 1e3 / steps, sum(nc for nc, _ in found) / steps) if found else None
    return parts


def breakdown(base, config: Config, args, device: torch.device) -> None:
    """Prints, for one bucket size, the CPU time of forward, backward and optimizer step of eager and thunder
    without DDP, thunder DDP and torch DDP (medians, slowest rank), then thunder DDP's pieces."""
    batches = make_batches(args.batch, device)
    plain = [copy.deepcopy(base), copy.deepcopy(base)]
    variants = [Variant("eager, no DDP", plain[0], plain[0], make_optimizer(args.optimizer, plain[0].parameters())),
                Variant("thunder, no DDP", thunder.jit(plain[1]), plain[1],
                        make_optimizer(args.optimizer, plain[1].parameters())),
                *make_variants(base, config, args.optimizer, device)]
    for v in variants:
        for _ in range(WARMUP_STEPS):
            train_step(v, batches, config)
    phases = {v.name: [] for v in variants}
    for r in range(args.rounds * args.steps):
        for v in variants if r % 2 == 0 else variants[::-1]:
            dist.barrier()
            phases[v.name].append(phased_step(v, batches))
    medians = {name: slowest_rank(*(statistics.median(p) for p in zip(*times)), device=device)
               for name, times in phases.items()}
    parts = thunder_parts(variants[2], batches, config, args.steps)
    if dist.get_rank() == 0:
        print(f"\n{config.label}: CPU ms per step (median of {args.rounds * args.steps}, slowest rank)")
        print("| variant | forward | backward | optimizer | step |")
        print("|---|---|---|---|---|")
        for name, (f, b, o) in medians.items():
            print(f"| {name} | {f * 1e3:.1f} | {b * 1e3:.1f} | {o * 1e3:.1f} | {(f + b + o) * 1e3:.1f} |")
        print("thunder DDP's pieces, ms and calls per step under cProfile, rank 0: " + ", ".join(
            f"{label} {p[0]:.2f} ms / {p[1]:g}" if p else f"{label} n/a" for label, p in parts.items()))
    del variants, v
    gc.collect()
    dist.barrier()


def print_table(rows: list[dict], cpu_times: bool) -> None:
    cols = ["config", "thunder ms", "DDP ms", "ratio", "thunder CPU ms", "DDP CPU ms", "CPU ratio", "thunder colls",
            "thunder MiB", "DDP colls", "DDP MiB", "max abs param diff", "thunder first step s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        (t, tc), (d, dc) = row["best"]["thunder DDP"], row["best"]["torch DDP"]
        (tn, tb), (dn, db) = row["counts"]["thunder DDP"], row["counts"]["torch DDP"]
        cpu = [f"{tc * 1e3:.1f}", f"{dc * 1e3:.1f}", f"{tc / dc:.3f}"] if cpu_times else ["n/a"] * 3
        cells = [row["config"].label, f"{t * 1e3:.1f}", f"{d * 1e3:.1f}", f"{t / d:.3f}", *cpu, str(tn),
                 f"{tb / 2**20:.2f}", str(dn), f"{db / 2**20:.2f}", f"{row['diff']:.1e}",
                 f"{row['first']['thunder DDP']:.2f}"]
        print("| " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--buckets", default="0,1,25", help="bucket sizes in MB, one config each")
    p.add_argument("--micro-batches", type=int, default=4,
                   help="the no_sync config's micro-batches per step (0 or 1: no such config)")
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--breakdown", action="store_true",
                   help="instead of the table: CPU time per phase (eager, thunder, thunder DDP, torch DDP)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = init_distributed()
    rank0 = dist.get_rank() == 0
    configs = [Config(f"bucket {float(b):g} MB", float(b)) for b in args.buckets.split(",") if b]
    if args.micro_batches > 1:
        label = f"{args.micro_batches} micro-batches ({args.micro_batches - 1} in no_sync), bucket 25 MB"
        configs.append(Config(label, 25.0, args.micro_batches))
    check_counter(device)
    torch.manual_seed(0)
    base = GPT(GPT_CONFIG).to(device)
    if rank0:
        n_params = sum(p.numel() for p in base.parameters())
        print(f"backend {dist.get_backend()}, world size {dist.get_world_size()}, device {device}, torch "
              f"{torch.__version__}, {torch.get_num_threads()} thread(s) per rank, nproc {os.cpu_count()}, "
              f"load average {tuple(round(x, 2) for x in os.getloadavg())}")
        print(f"GPT 4x256, seq 128, vocab 4096, dropout 0.1, {n_params / 1e6:.2f}M parameters; batch {args.batch} per "
              f"rank per step, {args.optimizer}; {args.rounds} rounds x {args.steps} steps, best round; "
              f"collective counter checked on a two-layer model")
    if args.breakdown:
        for config in configs:
            if config.micro_batches == 1:
                breakdown(base, config, args, device)
    else:
        rows = []
        for config in configs:
            rows.append(run_config(base, config, args, device))
            if rank0:
                print(f"  done: {config.label}", flush=True)
        if rank0:
            print_table(rows, cpu_times=device.type == "cpu")
    dist.barrier()  # every rank is done with the group (torch DDP released in run_config) before it goes
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
