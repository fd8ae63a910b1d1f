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

import torch.distributed as dist

import thunder
from thunder.distributed import FSDPBucketingStrategy, FSDPTransform, FSDPType, ddp, fsdp


def _named_parameters(model: torch.nn.Module):
    return model.named_parameters()


class Strategy(NamedTuple):
    help: str
    distributed: bool  # needs torch.distributed, i.e. a launch by torchrun
    apply: Callable[[torch.nn.Module, argparse.Namespace], torch.nn.Module]
    # the whole parameters, by name (what every rank must agree on after training)
    whole_parameters: Callable[[torch.nn.Module], object] = _named_parameters


def _single(model: torch.nn.Module, options: argparse.Namespace) -> torch.nn.Module:
    return thunder.jit(model, executors=options.executors)


def _ddp(model: torch.nn.Module, options: argparse.Namespace) -> torch.nn.Module:
    model = ddp(model, bucket_size_in_mb=options.bucket_size_mb)
    return thunder.jit(model, executors=options.executors)


def _fsdp(model: torch.nn.Module, options: argparse.Namespace) -> torch.nn.Module:
    model = fsdp(model, sharding_strategy=FSDPType[options.sharding.upper()],
                 bucketing_strategy=FSDPBucketingStrategy[options.bucketing.upper()])
    return thunder.jit(model, executors=options.executors)


def _gathered_parameters(model: torch.nn.Module):
    """The whole parameters of a sharded module: its shards gathered from every rank, padding cut off."""
    transform = next(t for t in thunder.list_transforms(model) if isinstance(t, FSDPTransform))
    for name, shard in model.named_parameters():
        parts = [torch.empty_like(shard) for _ in range(transform.world_size)]
        dist.all_gather(parts, shard.detach().contiguous(), group=transform.process_group)
        yield name, torch.cat(parts)[: transform.shards[id(shard)].shape[0]]


STRATEGIES: dict[str, Strategy] = {
    "none": Strategy("one process, no parallelism", False, _single),
    "ddp": Strategy("data parallel: the backward all-reduces gradients in buckets (thunder.distributed.ddp)",
                    True, _ddp),
    "fsdp": Strategy("sharded data parallel: parameters sharded over the ranks, gathered in the traces "
                     "(thunder.distributed.fsdp; --sharding, --bucketing)", True, _fsdp, _gathered_parameters),
}
