"""Gradient clipping by the norm of the whole gradient, also when each rank holds a shard of it."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from thunder.distributed.checkpoint import rows_held, sharding_transform


def clip_grad_norm_(module: torch.nn.Module, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """Scales the gradients of ``module``'s parameters in place so that their total ``norm_type``-norm is at most
    ``max_norm``, as ``torch.nn.utils.clip_grad_norm_`` (coefficient ``max_norm / (norm + 1e-6)``, at most 1),
    and returns the total norm. For an FSDP-sharded ThunderModule the norm is that of the whole gradient: each
    rank's sum of ``|g| ** p`` over the rows its shards hold, summed over the FSDP group (the largest ``|g|``
    for ``inf``), then the p-th root; every rank calls it. For DDP modules (averaged gradients, the same on every
    rank), other ThunderModules and plain modules, it is ``torch.nn.utils.clip_grad_norm_`` of their parameters."""
    fsdp = sharding_transform(module)
    if fsdp is None:
        return torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm, norm_type)
    norm_type = float(norm_type)
    if not (norm_type > 0):
        raise ValueError(f"clip_grad_norm_ of an FSDP-sharded module takes a positive norm_type (or inf), got "
                         f"{norm_type}: the shards' padding rows would count in a norm over the smallest entries")
    params = [p for p in module.parameters() if p.grad is not None]
    local = _local_norm(params, fsdp, norm_type)
    if math.isinf(norm_type):
        dist.all_reduce(local, op=dist.ReduceOp.MAX, group=fsdp.process_group)
        total = local
    else:
        dist.all_reduce(local, op=dist.ReduceOp.SUM, group=fsdp.process_group)
        total = local ** (1.0 / norm_type)
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def _local_norm(params: list, fsdp, norm_type: float) -> torch.Tensor:
    """This rank's part of the norm: the largest |g| (inf), else the sum of |g| ** p over the rows it holds."""
    grads = []
    for p in params:
        info = fsdp.shards.get(id(p))
        if info is None:
            raise RuntimeError("clip_grad_norm_: the module has a parameter that thunder.distributed.fsdp did not shard "
                               "(added after fsdp was applied?); shard the module after building all its parameters")
        rows = rows_held(info, fsdp)
        if rows:  # a shard of padding only (no inf norm of an empty tensor)
            grads.append(p.grad.detach()[:rows])
    if not grads:
        return torch.zeros((), dtype=torch.float32, device=fsdp.device)
    norm = torch.nn.utils.get_total_norm(grads, norm_type).to(torch.float32)
    return norm if math.isinf(norm_type) else norm ** norm_type
