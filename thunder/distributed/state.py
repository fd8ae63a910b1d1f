"""The process group a data-parallel transform uses, and making a module's state equal on every rank."""
from __future__ import annotations

import torch
import torch.distributed as dist

_BROADCAST_CHUNK_BYTES = 250 * 2**20  # tensors are broadcast in flat chunks of about this size


def resolve_process_group(process_group, who: str):
    """``process_group``, or the default group; a clear error when torch.distributed is not set up."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{who} needs torch.distributed to be initialized: call torch.distributed.init_process_group() first "
            "(with the environment that torchrun sets up, e.g. `torchrun --nproc-per-node 2 train.py`)")
    if process_group is None:
        return dist.group.WORLD
    if not isinstance(process_group, dist.ProcessGroup):
        raise TypeError(f"{who}: process_group must be a torch.distributed.ProcessGroup or None, got "
                        f"{type(process_group).__name__}")
    return process_group


def broadcast_module_state(module: torch.nn.Module, src: int, group) -> None:
    """Copies the parameters and buffers of rank ``src`` of ``group`` to every rank."""
    broadcast_tensors(list({id(t): t for t in (*module.parameters(), *module.buffers())}.values()), src, group)


def broadcast_tensors(tensors: list, src: int, group) -> None:
    """Copies ``tensors`` of rank ``src`` of ``group`` into the same tensors of every rank, in place: tensors of
    one dtype and device are flattened into chunks, one broadcast per chunk rather than one per tensor."""
    by_kind: dict = {}
    for t in tensors:
        if t.numel():
            by_kind.setdefault((t.dtype, t.device), []).append(t)
    with torch.no_grad():
        for group_tensors in by_kind.values():
            for chunk in _chunks(group_tensors):
                flat = torch.cat([t.detach().reshape(-1) for t in chunk])
                dist.broadcast(flat, group=group, group_src=src)
                offset = 0
                for t in chunk:
                    n = t.numel()
                    t.copy_(flat[offset:offset + n].view(t.shape))
                    offset += n


def _chunks(tensors: list):
    chunk, size = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if chunk and size + nbytes > _BROADCAST_CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(t)
        size += nbytes
    if chunk:
        yield chunk
