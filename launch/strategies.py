"""How the launcher parallelizes the model: one row of ``STRATEGIES`` per ``--strategy`` value.

A strategy takes the model (on its device, with the same initial weights on every rank) and the parsed
options, and returns the jitted module the training loop runs. Gradient accumulation uses the returned
module's ``no_sync()``, and at the end every rank's parameters must be equal (``named_parameters()`` of
the returned module: a strategy that shards them must present them whole there). Adding a strategy
(FSDP) is a function and a row.
"""
from __future__ import annotations

import argparse
from typing import Callable, NamedTuple

import torch

import thunder
from thunder.distributed import ddp


class Strategy(NamedTuple):
    help: str
    distributed: bool  # needs torch.distributed, i.e. a launch by torchrun
    apply: Callable[[torch.nn.Module, argparse.Namespace], torch.nn.Module]


def _single(model: torch.nn.Module, options: argparse.Namespace) -> torch.nn.Module:
    return thunder.jit(model, executors=options.executors)


def _ddp(model: torch.nn.Module, options: argparse.Namespace) -> torch.nn.Module:
    model = ddp(model, bucket_size_in_mb=options.bucket_size_mb)
    return thunder.jit(model, executors=options.executors)


STRATEGIES: dict[str, Strategy] = {
    "none": Strategy("one process, no parallelism", False, _single),
    "ddp": Strategy("data parallel: the backward all-reduces gradients in buckets (thunder.distributed.ddp)",
                    True, _ddp),
}
