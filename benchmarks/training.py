"""Training-step benchmark: thunder (torch executor) vs eager vs torch.compile, measured side by side.

For each model: a training step (forward, backward, AdamW step) timed after warm-up (median of
repeats), the first-call time (tracing/compiling plus the first step), and the number and bytes
(distinct storages) of tensors saved for backward, compared with eager's autograd graph.

    python benchmarks/training.py [--steps 10] [--rounds 3] [--models mlp,gpt] [--no-compile] [--threads 1]

Step times are taken in interleaved rounds (eager, thunder, torch.compile, eager, ...), each round the
median of ``--steps`` steps, and the best round is kept: on a small shared machine other processes only
ever add time. torch runs single-threaded by default for the same reason (see benchmarks/overhead.py).
This prints a table; it is not a timed test.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="thunder-bench-inductor-"))

import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import thunder  # noqa: E402
from tests.models import GPT, GPTConfig, TorchvisionMLP  # noqa: E402


def seed_mlp():
    model = TorchvisionMLP(784, [784, 784, 784, 28, 10], dropout=0.1)
    x = torch.rand(64, 784)
    y = torch.randint(0, 10, (64,))
    return model, lambda m: F.cross_entropy(m(x), y)


def gpt():
    cfg = GPTConfig(vocab_size=4096, block_size=128, n_layer=4, n_head=4, n_embd=256, dropout=0.1)
    model = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (8, 128))
    targets = torch.randint(0, cfg.vocab_size, (8, 128))
    return model, lambda m: m(idx, targets)[1]


MODELS = {"mlp": ("seed MLP, batch 64", seed_mlp), "gpt": ("GPT 4x256, seq 128, batch 8", gpt)}


def saved_tensors(loss_fn, model):
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return len(storages), sum(storages.values())


def make_step(model, loss_fn):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        loss = loss_fn(model)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def prepare(base_model, loss_fn, variant):
    """(step function, first-call seconds, saved tensors) for a fresh copy of the model."""
    model = copy.deepcopy(base_model)
    if variant == "thunder":
        runner = thunder.jit(model)
    elif variant == "torch.compile":
        runner = torch.compile(model)
    else:
        runner = model
    step = make_step(model, lambda m: loss_fn(runner))
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    step()
    saved = saved_tensors(lambda m: loss_fn(runner), model) if variant != "torch.compile" else (None, None)
    return step, first, saved


def timed(step, steps):
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="mlp,gpt")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    variants = ["eager", "thunder"] + ([] if args.no_compile else ["torch.compile"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU, load average {os.getloadavg()}")
    header = f"{'model':<30} {'variant':<14} {'step ms':>9} {'vs eager':>9} {'first call s':>13} {'saved #':>8} {'saved MiB':>10} {'saved vs eager':>15}"
    print(header)
    print("-" * len(header))
    for key in args.models.split(","):
        label, make = MODELS[key]
        base, loss_fn = make()
        prepared = {v: prepare(base, loss_fn, v) for v in variants}
        best = {v: float("inf") for v in variants}
        for _ in range(args.rounds):
            for v in variants:
                best[v] = min(best[v], timed(prepared[v][0], args.steps))
        results = {v: (best[v], prepared[v][1], prepared[v][2]) for v in variants}
        eager_t, _, (eager_n, eager_b) = results["eager"]
        for v, (t, first, (n, b)) in results.items():
            saved_ratio = f"{b / eager_b:.3f}" if b is not None else "n/a"
            n_s = str(n) if n is not None else "n/a"
            b_s = f"{b / 2**20:.2f}" if b is not None else "n/a"
            print(f"{label:<30} {v:<14} {t * 1e3:>9.2f} {t / eager_t:>9.3f} {first:>13.2f} {n_s:>8} {b_s:>10} {saved_ratio:>15}")


if __name__ == "__main__":
    main()
