"""Trains a small GPT on bytes of text with Lightning's Trainer and a thunder strategy.

    python examples/lightning_trainer.py                                  # 2 CPU processes, thunder_ddp
    python examples/lightning_trainer.py --strategy thunder_fsdp --precision bf16-mixed
    torchrun --nproc-per-node 2 examples/lightning_trainer.py             # torchrun starts the processes
    python examples/lightning_trainer.py --accelerator gpu --devices 4    # one GPU per process, NCCL

With ``devices=2`` and no torchrun, Lightning starts the second process itself (it runs this script again).
The model is GPT from ``launch/gpt.py`` (tied embedding and head) on the bytes of ``launch/corpus.txt``.
``training_step`` calls ``self(idx, targets)``: the strategy runs ``forward`` through ``thunder.jit`` with
``thunder.distributed.ddp`` / ``fsdp``; the rest of the step (logging) runs as written, every step.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset

import thunder
import thunder.lightning  # registers "thunder", "thunder_ddp", "thunder_fsdp"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from gpt import GPT, GPTConfig  # noqa: E402
from procgroup import shutdown  # noqa: E402
from textdata import VOCAB_SIZE, load_bytes  # noqa: E402

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


class Windows(Dataset):
    """Every window of ``seq_len + 1`` bytes: (inputs, targets shifted by one)."""

    def __init__(self, data: torch.Tensor, seq_len: int):
        self.data, self.seq_len = data, seq_len

    def __len__(self):
        return self.data.numel() - self.seq_len

    def __getitem__(self, i):
        window = self.data[i: i + self.seq_len + 1]
        return window[:-1], window[1:]


class GPTModule(pl.LightningModule):
    def __init__(self, config: GPTConfig, lr: float):
        super().__init__()
        self.model = GPT(config)
        self.lr = lr

    def forward(self, idx, targets):  # what thunder compiles
        return self.model(idx, targets)[1]

    def training_step(self, batch, batch_idx):
        loss = self(*batch)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


class PrintProgress(pl.Callback):
    """Rank 0 prints the loss every ``every`` optimizer steps, and the collectives of the backward trace once."""

    def __init__(self, every: int, show_trace: bool):
        self.every, self.show_trace = every, show_trace

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        stepped = (batch_idx + 1) % trainer.accumulate_grad_batches == 0  # the last micro-batch of a step
        if trainer.is_global_zero and stepped and step % self.every == 0:
            print(f"step {step:4d}  loss {trainer.callback_metrics['loss'].item():.4f}", flush=True)
        if self.show_trace and trainer.is_global_zero and step == 1:
            self.show_trace = False
            trace = thunder.last_backward_traces(thunder.lightning.thunder_module(trainer))[-1]
            lines = [line.strip() for line in str(trace).splitlines()
                     if any(c in line for c in COLLECTIVES) and not line.lstrip().startswith("#")]
            print(f"the backward trace's {len(lines)} collectives (the first 4):\n  " + "\n  ".join(lines[:4]), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategy", default="thunder_ddp", help="thunder | thunder_ddp | thunder_fsdp (or ddp, to compare)")
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
    p.add_argument("--checkpoint", help="save a checkpoint here at the end")
    train(p.parse_args())
    # the Trainer/Fabric objects, the jitted module (its traces hold the process group) and the optimizer
    # are gone with train's frame: the group ends after them (see [Note: ending a job], launch/procgroup.py)
    shutdown(clean=True)


def train(args) -> None:
    pl.seed_everything(0, verbose=False)
    config = GPTConfig(vocab_size=VOCAB_SIZE, block_size=args.seq_len, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
    module = GPTModule(config, lr=3e-3)
    trainer = pl.Trainer(accelerator=args.accelerator, devices=args.devices, strategy=args.strategy,
                         precision=args.precision, max_steps=args.steps, accumulate_grad_batches=args.grad_accum,
                         gradient_clip_val=args.clip or None, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[PrintProgress(args.log_every, args.show_trace)])
    data = DataLoader(Windows(load_bytes(), args.seq_len), batch_size=args.batch, shuffle=True, drop_last=True)
    trainer.fit(module, data)
    if args.checkpoint:
        trainer.save_checkpoint(args.checkpoint)
    if trainer.is_global_zero:
        print(f"done: {trainer.global_step} steps on {trainer.world_size} process(es) with {args.strategy}, "
              f"final loss {trainer.callback_metrics['loss'].item():.4f}", flush=True)


if __name__ == "__main__":
    main()
