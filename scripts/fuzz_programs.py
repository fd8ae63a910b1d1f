"""Differential fuzzing of thunder against eager PyTorch with generated programs.

    python scripts/fuzz_programs.py --start 0 -n 1000 --out /tmp/fuzz/out
    python scripts/fuzz_programs.py --start 0 -n 200 --nn --fused --out /tmp/fuzz/fused

Runs seeds start..start+n-1 of tests/program_generator.py, prints a summary (results by kind, op usage) and writes
each failure's standalone repro and its error or difference to the output folder (``<kind>_<seed>.py``). Should
the process itself crash (a segfault in a compiled kernel), ``CRASH.txt`` there names the seed and holds the stack.
"""
from __future__ import annotations

import argparse
import collections
import faulthandler
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import program_generator as pg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--out", default="/tmp/fuzz/out")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--perturb", action="store_true", help="spoil thunder's first output (checks the comparison)")
    ap.add_argument("--nn", action="store_true", help="neural-network ops (convolutions, pooling, norms, losses) too")
    ap.add_argument("--autocast", action="store_true", help="the forwards under CPU bfloat16 autocast")
    ap.add_argument("--relayout", action="store_true", help="a third call with the inputs laid out otherwise "
                    "(transposed, sliced, contiguous), to the same jitted function")
    ap.add_argument("--fused", action="store_true", help="thunder with executors inductor and torch: values within "
                    "float tolerance of eager's, or no farther from float64's than eager's (referee64)")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long (the summary counts the seeds run)")
    ap.add_argument("--device", default="cpu", help="where the inputs are and the programs' factories create "
                    "tensors (cuda: deterministic algorithms, and the torch executor alone unless --fused)")
    args = ap.parse_args()
    import functools

    import thunder

    if args.autocast:
        pg.AUTOCAST = torch.bfloat16
    if args.device != "cpu":
        pg.DEVICE = args.device
        torch.set_default_device(args.device)
        torch.use_deterministic_algorithms(True, warn_only=True)  # eager's and thunder's kernels, not atomics' order
        if not args.fused:  # without the default executors' fusion there (inductor_cuda)
            thunder.jit = functools.partial(thunder.jit, executors=["torch"])
    if args.fused:
        thunder.jit = functools.partial(thunder.jit, executors=["inductor", "torch"])
        pg._same_values = pg.close_values
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    # a crash of the process itself (a segfault in a compiled kernel) leaves the seed it ran and the Python stack
    crash_log = open(os.path.join(args.out, "CRASH.txt"), "w")
    faulthandler.enable(crash_log)
    kinds = collections.Counter()
    tags = collections.Counter()
    grad_programs = 0
    t0 = time.time()
    ran = 0
    for seed in range(args.start, args.start + args.n):
        if args.seconds is not None and time.time() - t0 > args.seconds:
            break
        ran += 1
        prog = pg.generate(seed, nn=args.nn)
        if prog is None:
            kinds["DISCARD"] += 1
            continue
        tags.update(prog.tags)
        tags.update({'input_' + spec.layout for spec in prog.inputs})
        tags.update({'input_' + str(spec.dtype).split('.')[-1] for spec in prog.inputs})
        grad_programs += prog.grad
        crash_log.seek(0)
        crash_log.truncate()
        crash_log.write(f"seed {seed} (nn={args.nn}) was running\n")
        crash_log.flush()
        try:
            res = pg.run_program(prog, perturb=args.perturb, referee64=args.fused, relayout=args.relayout)
        except Exception as e:  # noqa: BLE001 - the runner itself must not stop the campaign
            res = pg.Result(seed, "CRASH", f"runner: {type(e).__name__}: {e}", prog)
        kinds[res.kind] += 1
        if res.kind in ("WRONG", "CRASH", "REFUSED"):
            first = res.detail.splitlines()[0] if res.detail else ""
            if not args.quiet:
                print(f"seed {seed}: {res.kind}: {first[:200]}", flush=True)
            with open(os.path.join(args.out, f"{res.kind}_{seed}.py"), "w") as f:
                f.write(prog.repro(executors=["inductor", "torch"] if args.fused else ["torch"] if args.device != "cpu" else None))
                f.write('\n"""\n' + res.kind + "\n" + res.detail.replace('"""', "'''") + '\n"""\n')
    dt = time.time() - t0
    faulthandler.disable()
    crash_log.close()
    os.remove(crash_log.name)
    print(f"\n{ran} seeds ({args.start}..{args.start + ran - 1}) in {dt:.1f}s: " + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())))
    print(f"programs with gradients: {grad_programs}")
    print("op usage (programs using each rule):")
    for tag, c in sorted(tags.items(), key=lambda kv: -kv[1]):
        print(f"  {tag:32s} {c}")


if __name__ == "__main__":
    main()
