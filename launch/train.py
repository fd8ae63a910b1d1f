"""Trains a GPT on bytes of text with thunder, in one process or data parallel under torchrun.

    python launch/train.py --strategy none                                 # one process
    torchrun --standalone --nproc-per-node 2 launch/train.py --show-trace  # DDP on one node
    bash launch/run_multi_node.sh --nnodes 2 --node-rank 0 --rdzv-endpoint HOST:PORT   # on each node

The device is chosen automatically (``--device auto``: one GPU per local rank with NCCL where CUDA is
available, the CPU with gloo otherwise). ``--batch`` is the global batch of one optimizer step: each
rank runs ``--grad-accum`` micro-batches of ``batch / (world size * grad_accum)`` sequences, all but the
last inside ``model.no_sync()``. Rank 0 logs step, loss (the mean over ranks), step time and global
tokens/s, and a summary at the end; every rank prints a checksum of its parameters. See launch/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import time
import traceback

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

import thunder
import thunder.extend

import procgroup
from gpt import GPT, GPTConfig
from procgroup import Placement
from strategies import STRATEGIES
from textdata import DEFAULT_CORPUS, VOCAB_SIZE, ShardedBatches, load_bytes

COLLECTIVE_MARKERS = ("all_reduce", "all_gather", "reduce_scatter", "wait", "pack_bucket")  # what --show-trace prints of the backward trace


# -- options --------------------------------------------------------------------------------------------
def _positive(kind, *, zero_ok: bool = False):
    """An argparse type: a number of type ``kind`` above zero (or at least zero)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (value >= 0 if zero_ok else value > 0):
            raise argparse.ArgumentTypeError(
                f"expected a {'non-negative' if zero_ok else 'positive'} {kind.__name__}, got {text!r}")
        return value
    return parse


def _executor_names(text: str) -> list[str]:
    known = sorted(ex.name for ex in thunder.extend.get_all_executors())
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known] if names else [text]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown executor {unknown[0]!r} (known executors: {', '.join(known)})")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=sorted(STRATEGIES),
                   help="; ".join(f"{k}: {s.help}" for k, s in STRATEGIES.items())
                   + " (default: ddp under torchrun, none otherwise)")
    p.add_argument("--grad-accum", type=_positive(int), default=1, help="micro-batches per optimizer step")
    p.add_argument("--executors", type=_executor_names, default=None,
                   help="comma-separated thunder executor names, e.g. torch,python (default: thunder's)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--layers", type=_positive(int), default=2)
    p.add_argument("--width", type=_positive(int), default=128, help="embedding width")
    p.add_argument("--heads", type=_positive(int), default=4)
    p.add_argument("--seq-len", type=_positive(int), default=64, help="bytes per sequence")
    p.add_argument("--batch", type=_positive(int), default=16, help="global batch of an optimizer step, in sequences")
    p.add_argument("--steps", type=_positive(int), default=30, help="optimizer steps")
    p.add_argument("--lr", type=_positive(float), default=3e-3, help="AdamW learning rate")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--data", default=str(DEFAULT_CORPUS), help="a text file, read as bytes (default: %(default)s)")
    p.add_argument("--bucket-size-mb", type=_positive(float, zero_ok=True), default=25.0,
                   help="ddp: gradient bucket size in MB (0: one all-reduce per gradient)")
    p.add_argument("--sharding", choices=("zero2", "zero3"), default="zero2",
                   help="fsdp: zero3 frees gathered parameters after use and gathers them again in the backward")
    p.add_argument("--bucketing", choices=("none", "layer", "block"), default="none",
                   help="fsdp: one collective per parameter, per layer, or per transformer block")
    p.add_argument("--log-every", type=_positive(int), default=10, help="log every N steps")
    p.add_argument("--show-trace", action="store_true", help="print the collectives of the backward trace once")
    p.add_argument("--timeout-s", type=_positive(float), default=60.0,
                   help="process-group timeout: a collective waiting longer fails instead of hanging")
    # debugging: make one rank raise, to check that the job ends with that rank's error
    p.add_argument("--fail-on-rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--fail-at-step", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--fail-mode", choices=("raise", "hang"), default="raise", help=argparse.SUPPRESS)
    return p


def check_options(parser: argparse.ArgumentParser, options: argparse.Namespace, placement: Placement) -> None:
    """Fills in the default strategy; exits with an argparse error naming the flag for a bad configuration."""
    if options.strategy is None:
        options.strategy = "ddp" if placement.torchrun else "none"
    strategy, world = STRATEGIES[options.strategy], placement.world_size
    if strategy.distributed and not placement.torchrun:
        parser.error(f"--strategy {options.strategy} needs torchrun's environment ({', '.join(procgroup.TORCHRUN_VARS)} "
                     "unset): start it with `torchrun --nproc-per-node N launch/train.py ...` (or "
                     "launch/run_single_node.sh), or train in one process with --strategy none")
    if not strategy.distributed and world > 1:
        parser.error(f"--strategy {options.strategy} trains in one process, but torchrun started {world}: use "
                     "--strategy ddp, or torchrun --nproc-per-node 1")
    if not 0 <= options.dropout < 1:
        parser.error(f"--dropout {options.dropout} must be a probability in [0, 1)")
    if options.width % options.heads:
        parser.error(f"--width {options.width} must be divisible by --heads {options.heads}")
    if options.batch % (world * options.grad_accum):
        parser.error(f"--batch {options.batch} must be divisible by the world size ({world}) times --grad-accum "
                     f"({options.grad_accum}): each rank runs --grad-accum micro-batches of equal size")
    if (options.fail_on_rank is None) != (options.fail_at_step is None):
        parser.error("--fail-on-rank and --fail-at-step go together")
    if options.fail_on_rank is not None and not (0 <= options.fail_on_rank < world
                                                 and 1 <= options.fail_at_step <= options.steps):
        parser.error(f"--fail-on-rank must be a rank (0 to {world - 1}) and --fail-at-step a step (1 to {options.steps})")


def make_batches(parser, options, placement: Placement) -> tuple[torch.device, ShardedBatches]:
    try:
        device = procgroup.choose_device(options.device, placement.local_rank)
        data = load_bytes(options.data)
        micro_batch = options.batch // (placement.world_size * options.grad_accum)
        return device, ShardedBatches(data, rank=placement.rank, world_size=placement.world_size, batch=micro_batch,
                                      seq_len=options.seq_len, seed=options.seed, device=device)
    except OSError as e:
        parser.error(f"--data {options.data}: {e.strerror or e}")
    except ValueError as e:
        parser.error(str(e))


# -- training -------------------------------------------------------------------------------------------
def train_step(model, optimizer, batches: ShardedBatches, grad_accum: int) -> torch.Tensor:
    """One optimizer step over ``grad_accum`` micro-batches; gradients are synchronized once, by the last
    backward (the others run inside ``no_sync()``). Returns the mean loss of the micro-batches."""
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=batches.device)
    for i in range(grad_accum):
        inputs, targets = next(batches)
        with model.no_sync() if i < grad_accum - 1 else contextlib.nullcontext():
            _, loss = model(inputs, targets)
            (loss / grad_accum).backward()
        total += loss.detach()
    optimizer.step()
    return total / grad_accum


def train(options, placement: Placement, device: torch.device, batches: ShardedBatches) -> None:
    torch.manual_seed(options.seed)  # the same initial weights on every rank (ddp also broadcasts rank 0's)
    config = GPTConfig(vocab_size=VOCAB_SIZE, block_size=options.seq_len, n_layer=options.layers,
                       n_head=options.heads, n_embd=options.width, dropout=options.dropout)
    model = STRATEGIES[options.strategy].apply(GPT(config).to(device), options)
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.lr)
    log = Log(options, placement, device, model)
    for step in range(1, options.steps + 1):
        if (placement.rank, step) == (options.fail_on_rank, options.fail_at_step):
            fail(options)
        start = time.perf_counter()
        loss = train_step(model, optimizer, batches, options.grad_accum)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        log.step(step, time.perf_counter() - start, loss)
    log.summary()
    check_parameters_agree(model, placement, STRATEGIES[options.strategy])


def fail(options) -> None:
    """--fail-on-rank R --fail-at-step S: rank R raises at step S, or with --fail-mode hang stops answering
    (its peers' collectives then time out after --timeout-s)."""
    if options.fail_mode == "hang":
        say(f"rank {options.fail_on_rank} hangs at step {options.fail_at_step}, as asked by --fail-mode hang")
        while True:
            time.sleep(60)
    raise RuntimeError(f"rank {options.fail_on_rank} fails at step {options.fail_at_step}, as asked by "
                       f"--fail-on-rank {options.fail_on_rank} --fail-at-step {options.fail_at_step}")


def _mean_over_ranks(value: torch.Tensor, placement: Placement) -> float:
    if dist.is_initialized():
        value = value.clone()
        dist.all_reduce(value)
        value /= placement.world_size
    return value.item()


class Log:
    """What rank 0 prints: a header, a line every --log-every steps (and at the first and last), the
    backward trace's collectives once (--show-trace), a summary. Losses are averaged over the ranks."""

    def __init__(self, options, placement: Placement, device: torch.device, model):
        self.options, self.placement, self.model = options, placement, model
        self.tokens_per_step = options.batch * options.seq_len  # global
        self.times: list[float] = []
        self.losses: dict[int, float] = {}
        self.last_logged = 0
        n_params = sum(p.numel() for p in model.parameters())
        executors = ",".join(ex.name for ex in thunder.extend.resolve_executors(options.executors))
        micro = options.batch // (placement.world_size * options.grad_accum)
        backend = f" ({procgroup.BACKENDS[device.type]})" if dist.is_initialized() else ""
        self.print(f"GPT of {n_params / 1e6:.2f}M parameters ({options.layers} layers, width {options.width}, "
                   f"{options.heads} heads) | strategy {options.strategy} | world size {placement.world_size} | "
                   f"device {device.type}{backend} | executors {executors}")
        self.print(f"batch {options.batch} x {options.seq_len} bytes = {placement.world_size} ranks x "
                   f"{options.grad_accum} micro-batches x {micro} sequences | {options.steps} steps | lr {options.lr}")

    def print(self, text: str) -> None:
        if self.placement.rank == 0:
            say(text)

    def step(self, step: int, seconds: float, loss: torch.Tensor) -> None:
        self.times.append(seconds)
        if step == 1 and self.options.show_trace:
            self.print_collectives()
        if step not in (1, self.options.steps) and step % self.options.log_every:
            return
        self.losses[step] = _mean_over_ranks(loss, self.placement)  # every rank takes part
        window = self.times[self.last_logged:]
        self.last_logged = step
        mean = sum(window) / len(window)
        note = " (compiles)" if step == 1 else ""
        self.print(f"step {step:>5}/{self.options.steps} | loss {self.losses[step]:.4f} | "
                   f"{mean * 1e3:8.1f} ms/step{note} | {self.tokens_per_step / mean:>10,.0f} tokens/s")

    def print_collectives(self) -> None:
        if self.placement.rank != 0:
            return
        trace = thunder.last_backward_traces(self.model)[-1]
        lines = [line for line in str(trace).splitlines()  # the statements, not their decomposition comments
                 if any(marker in line for marker in COLLECTIVE_MARKERS) and not line.lstrip().startswith("#")]
        self.print("collectives of the backward trace (thunder.last_backward_traces(model)[-1]):")
        self.print("\n".join(lines) if lines else "  (none: no data-parallel strategy)")

    def summary(self) -> None:
        first, *rest = self.times
        (first_step, first_loss), (last_step, last_loss) = min(self.losses.items()), max(self.losses.items())
        self.print(f"summary: {len(self.times)} steps in {sum(self.times):.2f} s | loss {first_loss:.4f} (step "
                   f"{first_step}) -> {last_loss:.4f} (step {last_step}) | first step {first:.2f} s (compiles)")
        if rest:
            mean = sum(rest) / len(rest)
            self.print(f"summary: later steps {mean * 1e3:.1f} ms/step, {self.tokens_per_step / mean:,.0f} tokens/s "
                       f"({self.placement.world_size} ranks, {self.tokens_per_step} tokens per step)")


def parameter_checksum(model, strategy) -> str:
    digest = hashlib.sha256()
    for name, p in strategy.whole_parameters(model):
        digest.update(name.encode())
        digest.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def check_parameters_agree(model, placement: Placement, strategy) -> None:
    """Every rank prints its parameters' checksum (after rank 0's summary: the gather waits for it); under a
    process group they must be equal."""
    mine = parameter_checksum(model, strategy)
    every = [mine]
    if dist.is_initialized():
        every = [None] * placement.world_size
        dist.all_gather_object(every, mine)
    say(f"rank {placement.rank}: parameter checksum {mine}")
    if len(set(every)) != 1:
        raise RuntimeError(f"the ranks' parameters differ after training (checksums {every}): "
                           "data-parallel training must keep them equal")
    if placement.rank == 0 and placement.world_size > 1:
        say(f"parameters are equal on all {placement.world_size} ranks")


def say(text: str) -> None:
    """Prints a line in one write, so that the lines of ranks sharing a terminal do not interleave."""
    print(text + "\n", end="", flush=True)


# -- the job --------------------------------------------------------------------------------------------
@record
def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    options = parser.parse_args(argv)
    try:
        placement = Placement.from_environ(os.environ)
    except ValueError as e:
        parser.error(str(e))
    check_options(parser, options, placement)
    device, batches = make_batches(parser, options, placement)
    if STRATEGIES[options.strategy].distributed:
        procgroup.init(device, options.timeout_s)
    try:
        train(options, placement, device, batches)
    except BaseException as error:
        traceback.clear_frames(error.__traceback__)  # drops the model and its pending work, see [Note: ending a job]
        procgroup.shutdown(clean=False)
        raise
    procgroup.shutdown(clean=True)


if __name__ == "__main__":
    main()
