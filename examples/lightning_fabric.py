"""Trains a small GPT on bytes of text with Lightning Fabric and a thunder strategy.

    python examples/lightning_fabric.py                                   # 2 CPU processes, thunder_fsdp
    python examples/lightning_fabric.py --strategy thunder_ddp --precision bf16-mixed
    torchrun --nproc-per-node 2 examples/lightning_fabric.py              # torchrun starts the processes
    python examples/lightning_fabric.py --accelerator gpu --devices 4     # one GPU per process, NCCL

``fabric.setup_module`` jits the model with ``thunder.distributed.fsdp`` (or ``ddp``); under fsdp the model is
created on the meta device (``fabric.init_module(empty_init=True)``) and each rank materializes only its shards.
Each optimizer step accumulates ``--grad-accum`` micro-batches, all but the last under
``fabric.no_backward_sync``, so gradients are communicated once per step. The model is GPT from
``launch/gpt.py``; each rank reads its own slice of ``launch/corpus.txt``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import lightning.fabric as lf

import thunder
import thunder.lightning  # registers "thunder", "thunder_ddp", "thunder_fsdp"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from gpt import GPT, GPTConfig  # noqa: E402
from procgroup import shutdown  # noqa: E402
from textdata import VOCAB_SIZE, ShardedBatches, load_bytes  # noqa: E402

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategy", default="thunder_fsdp", help="thunder | thunder_ddp | thunder_fsdp (or ddp, fsdp)")
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="optimizer steps")
    p.add_argument("--grad-accum", type=int, default=2, help="micro-batches per optimizer step")
    p.add_argument("--batch", type=int, default=8, help="sequences per micro-batch and process")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--precision", default="32-true")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping (0: none)")
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--show-trace", action="store_true")
    p.add_argument("--checkpoint", help="save model and optimizer here at the end (fabric.save)")
    train(p.parse_args())
    # the Trainer/Fabric objects, the jitted module (its traces hold the process group) and the optimizer
    # are gone with train's frame: the group ends after them (see [Note: ending a job], launch/procgroup.py)
    shutdown(clean=True)


def train(args) -> None:
    fabric = lf.Fabric(accelerator=args.accelerator, devices=args.devices, strategy=args.strategy,
                       precision=args.precision)
    fabric.launch()
    fabric.seed_everything(0, verbose=False)
    config = GPTConfig(vocab_size=VOCAB_SIZE, block_size=args.seq_len, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
    with fabric.init_module(empty_init=args.strategy == "thunder_fsdp"):
        model = GPT(config)
    model = fabric.setup_module(model)
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=3e-3))
    batches = ShardedBatches(load_bytes(), rank=fabric.global_rank, world_size=fabric.world_size, batch=args.batch,
                             seq_len=args.seq_len, seed=0, device=fabric.device)

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        total = 0.0
        for micro in range(args.grad_accum):
            idx, targets = next(batches)
            with fabric.no_backward_sync(model, enabled=micro < args.grad_accum - 1):
                _, loss = model(idx, targets)
                fabric.backward(loss / args.grad_accum)
            total += loss.item() / args.grad_accum
        if args.clip:
            fabric.clip_gradients(model, optimizer, max_norm=args.clip)
        optimizer.step()
        optimizer.zero_grad()
        loss = fabric.all_reduce(torch.tensor(total), reduce_op="mean").item()  # the mean over the ranks
        if step % args.log_every == 0 or step == args.steps:
            fabric.print(f"step {step:4d}  loss {loss:.4f}  {(time.perf_counter() - start) / step * 1000:.0f} ms/step")
        if step == 1 and args.show_trace and args.strategy.startswith("thunder"):
            trace = thunder.last_backward_traces(thunder.lightning.thunder_module(model))[-1]
            lines = [line.strip() for line in str(trace).splitlines()
                     if any(c in line for c in COLLECTIVES) and not line.lstrip().startswith("#")]
            fabric.print(f"the backward trace's {len(lines)} collectives (the first 4):\n  " + "\n  ".join(lines[:4]))
    if args.checkpoint:
        fabric.save(args.checkpoint, {"model": model, "optimizer": optimizer, "step": args.steps})
    fabric.print(f"done: {args.steps} steps on {fabric.world_size} process(es) with {args.strategy}, final loss {loss:.4f}")


if __name__ == "__main__":
    main()
