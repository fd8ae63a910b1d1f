"""State dicts of (data-parallel) modules, and checkpoints that every rank writes its part of.

``get_model_state_dict(module, options, rank)`` gives a module's state dict as ``options`` asks:

- ``full_state_dict=True``: whole tensors. The parameters of an FSDP-sharded ThunderModule are gathered from
  the ranks' shards (padding rows removed); with ``rank0_only=True`` only rank 0 keeps them (the others get
  ``{}``, after taking part in the gathers); with ``cpu_offload=True`` they are moved to the CPU one by one.
- ``full_state_dict=False`` (the default): each rank's part, for ``save``. A sharded parameter is a ``DTensor``
  placed ``Shard(0)`` (see [Note: sharded checkpoints]); everything else is the module's own tensor.

DDP ThunderModules, ThunderModules without a data-parallel transform and plain modules hold whole tensors:
their state dict is the module's. ``load_model_state_dict(state_dict, module, options, rank)`` loads either
kind into the module (``rank0_only=True``: rank 0's full state dict is broadcast to the others), reporting
missing and unexpected keys as ``torch.nn.Module.load_state_dict`` does when ``options.strict``.

``save(state_dict, path)`` writes a state dict with ``torch.distributed.checkpoint`` into the directory
``path``, every rank its own part; ``load(state_dict, path)`` fills ``state_dict`` in place from it, as
``torch.distributed.checkpoint.load`` does, after checking that the checkpoint has the same keys and shapes.

# [Note: sharded checkpoints]
# A sharded parameter goes to the checkpoint as a DTensor of the parameter's *full* shape (no padding),
# placed Shard(0) on a one-dimensional mesh of the FSDP process group, whose local tensor is the rows the
# rank really holds (its shard without the padding rows; possibly none). thunder's shards are the chunks of
# torch.chunk (ceil(rows / world size) rows per rank, the last ranks short), which is exactly the uneven
# Shard(0) layout of DTensor, so the DTensor's local tensor is a view of the parameter: saving reads the
# parameters and loading writes them. The checkpoint records each tensor by its full shape and the rows
# each chunk covers, independent of the world size: DCP reads the rows a rank needs from whichever files
# hold them, so a checkpoint written with one world size loads with any other (or into an unsharded
# module), and a full state dict saved with ``save`` loads as a sharded one. This works wherever DCP does
# (gloo on CPU, NCCL on CUDA) and needs a file system that every rank sees.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import NamedTuple

import torch
import torch.distributed as dist
from thunder.distributed.prims import torch_all_gather_single

__all__ = ["StateDictOptions", "get_model_state_dict", "load_model_state_dict", "save", "load"]

_LISTED = 20  # keys named in a mismatch message, per kind


@dataclasses.dataclass(frozen=True)
class StateDictOptions:
    """What ``get_model_state_dict`` gives and how ``load_model_state_dict`` loads (see the module docstring)."""

    full_state_dict: bool = False
    cpu_offload: bool = False
    rank0_only: bool = False
    strict: bool = True

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, bool):
                raise TypeError(f"StateDictOptions.{field.name} must be True or False, got {value!r}")
        if self.rank0_only and not self.full_state_dict:
            raise ValueError("StateDictOptions(rank0_only=True) needs full_state_dict=True: a sharded state dict has a "
                             "part on every rank")


class _TensorEntry(NamedTuple):
    """How rank 0 describes a tensor of the state dict it broadcasts (``rank0_only`` loading)."""

    shape: tuple
    dtype: torch.dtype
    dtensor: bool


# -- which data-parallel transform, which group ------------------------------------------------------------
def sharding_transform(module: torch.nn.Module):
    """The ``FSDPTransform`` of ``module`` (a ThunderModule), or None when its parameters are whole tensors."""
    import thunder
    from thunder.distributed.fsdp import SHARDED_MODULES, FSDPTransform
    from thunder.driver.module import ThunderModule
    from thunder.transforms.base import requested_transforms

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module or a ThunderModule, got {type(module).__name__}")
    if isinstance(module, ThunderModule):
        return next((t for t in thunder.list_transforms(module) if isinstance(t, FSDPTransform)), None)
    if module in SHARDED_MODULES or any(isinstance(t, FSDPTransform) for t in requested_transforms(module)):
        raise TypeError("this module was given to thunder.distributed.fsdp: pass the ThunderModule that thunder.jit "
                        "returned for it, which knows how its parameters are sharded")
    return None


def _process_group(module, fsdp):
    """The group the module's data-parallel transform works over; the default group, or None without one."""
    import thunder
    from thunder.distributed.ddp import DDPTransform
    from thunder.driver.module import ThunderModule

    if fsdp is not None:
        return fsdp.process_group
    if isinstance(module, ThunderModule):
        ddp = next((t for t in thunder.list_transforms(module) if isinstance(t, DDPTransform)), None)
        if ddp is not None:
            return ddp.process_group
    return dist.group.WORLD if dist.is_available() and dist.is_initialized() else None


def _checked(module, options, rank: int):
    if not isinstance(options, StateDictOptions):
        raise TypeError("options must be a thunder.distributed.checkpoint.StateDictOptions, got "
                        f"{type(options).__name__}")
    fsdp = sharding_transform(module)
    group = _process_group(module, fsdp)
    expected = dist.get_rank(group) if group is not None else 0
    if rank != expected:
        raise ValueError(f"rank is {rank!r}, but this process is rank {expected} of the module's process group (the "
                         "FSDP or DDP group, else the default one): pass torch.distributed.get_rank(group)")
    return fsdp, group


def _like(state_dict) -> collections.OrderedDict:
    """An empty state dict with the module versions (``_metadata``) that ``load_state_dict`` reads."""
    new = collections.OrderedDict()
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        new._metadata = metadata
    return new


# -- getting state dicts --------------------------------------------------------------------------------------
def get_model_state_dict(module: torch.nn.Module, options: StateDictOptions, rank: int) -> dict:
    """``module``'s state dict, whole or this rank's part (``options``); ``rank``: this process's rank in the
    module's process group (that of its FSDP or DDP transform, else the default group; 0 without one)."""
    fsdp, _ = _checked(module, options, rank)
    # the shards as the module holds them (ThunderModule.state_dict may move them, see move_state_dict_to_cpu)
    state = module._model.state_dict() if fsdp is not None else module.state_dict()
    names = fsdp.sharded_names(module) if fsdp is not None else {}
    keep = rank == 0 or not options.rank0_only
    offload = (options.cpu_offload or (fsdp is not None and fsdp.move_state_dict_to_cpu)) and keep
    result, mesh = _like(state), None
    for key, value in state.items():
        info = names.get(key)
        if info is None:
            value = _offloaded(value, offload)
        elif options.full_state_dict:
            value = _offloaded(_gathered(value, info, fsdp), offload)
        else:
            local = _offloaded(value.detach()[: rows_held(info, fsdp)], offload)
            mesh = mesh if mesh is not None else _mesh(fsdp.process_group, local.device.type)
            value = _as_dtensor(local, info, mesh)
        if keep:
            result[key] = value
    return result if keep else {}


def _offloaded(value, offload: bool):
    return value.cpu() if offload and isinstance(value, torch.Tensor) else value


def _gathered(shard: torch.Tensor, info, fsdp) -> torch.Tensor:
    """The full parameter: all ranks' shards gathered, padding rows dropped."""
    whole = shard.new_empty((info.rows_per_rank * fsdp.world_size, *info.shape[1:]))
    torch_all_gather_single(whole, shard.detach().contiguous(), group=fsdp.process_group)
    return whole if whole.shape[0] == info.shape[0] else whole[: info.shape[0]].clone()


def rows_held(info, fsdp) -> int:
    """How many rows of the full parameter this rank's shard holds (the others are padding)."""
    start = min(fsdp.rank * info.rows_per_rank, info.shape[0])
    return min(info.rows_per_rank, info.shape[0] - start)


def _mesh(group, device_type: str):
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(group, device_type)


def _as_dtensor(local: torch.Tensor, info, mesh):
    from torch.distributed.tensor import DTensor, Shard

    stride = torch.empty(info.shape, device="meta").stride()
    return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(info.shape), stride=stride)


# -- loading state dicts --------------------------------------------------------------------------------------
def load_model_state_dict(state_dict: dict, module: torch.nn.Module, options: StateDictOptions, rank: int):
    """Loads a full or sharded ``state_dict`` (as ``get_model_state_dict`` gives, or the module's own) into
    ``module``; ``options.rank0_only``: only rank 0's ``state_dict`` is read, and broadcast. Returns what
    ``load_state_dict`` does (missing and unexpected keys; an error for them when ``options.strict``)."""
    fsdp, group = _checked(module, options, rank)
    if options.rank0_only and group is not None:
        state_dict = _broadcast_from_rank0(state_dict if rank == 0 else None, module, fsdp, group)
    elif fsdp is not None:
        names = fsdp.sharded_names(module)
        loaded = _like(state_dict)
        for key, value in state_dict.items():
            loaded[key] = _padded_shard(key, value, names[key], fsdp) if key in names else value
        state_dict = loaded
    return module.load_state_dict(state_dict, strict=options.strict)


def _padded_shard(key: str, value, info, fsdp):
    """This rank's shard (padded) from a DTensor of ``get_model_state_dict``; other values as they are."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(value, DTensor):
        return value
    local = value.to_local()
    expected = (rows_held(info, fsdp), *info.shape[1:])
    if tuple(value.placements) != (Shard(0),) or tuple(value.shape) != info.shape or tuple(local.shape) != expected:
        raise ValueError(f"load_model_state_dict: {key!r} is a DTensor of shape {tuple(value.shape)} placed "
                         f"{tuple(value.placements)} holding {tuple(local.shape)} here; this rank of the FSDP module "
                         f"(world size {fsdp.world_size}) holds rows of a parameter of shape {info.shape} placed "
                         f"(Shard(dim=0),) ({expected} here). Use the state dict that get_model_state_dict "
                         "gives for this module, filled by thunder.distributed.checkpoint.load")
    padding = info.rows_per_rank - local.shape[0]
    return torch.cat([local, local.new_zeros((padding, *local.shape[1:]))]) if padding else local


def _broadcast_from_rank0(state_dict, module, fsdp, group) -> collections.OrderedDict:
    """Rank 0's full state dict on every rank, the sharded parameters cut into this rank's shards as they arrive.
    What rank 0 holds (keys, shapes, dtypes) is broadcast first, so every rank reports the same mismatches."""
    from torch.distributed.tensor import DTensor

    target = module.state_dict()
    names = fsdp.sharded_names(module) if fsdp is not None else {}
    listing = [None]
    if state_dict is not None:
        listing = [[(k, _TensorEntry(tuple(v.shape), v.dtype, isinstance(v, DTensor)) if isinstance(v, torch.Tensor)
                     else v) for k, v in state_dict.items()]]
    dist.broadcast_object_list(listing, group=group, group_src=0)
    sharded = [k for k, described in listing[0] if isinstance(described, _TensorEntry) and described.dtensor]
    if sharded:
        raise ValueError("load_model_state_dict(rank0_only=True) loads rank 0's full state dict, but its "
                         f"{sharded[:3]} are DTensors (a sharded state dict): pass StateDictOptions(rank0_only=False) for those")
    loaded = _like(target)
    for key, described in listing[0]:
        if not (isinstance(described, _TensorEntry) and key in target):  # not a tensor, or a key the module lacks
            loaded[key] = state_dict[key] if state_dict is not None else described
            continue
        device = target[key].device
        if state_dict is not None:
            value = state_dict[key].to(device).contiguous()
        else:
            value = torch.empty(described.shape, dtype=described.dtype, device=device)
        dist.broadcast(value, group=group, group_src=0)
        loaded[key] = fsdp.local_shard(key, value, names[key]) if key in names else value
    return loaded


# -- checkpoints on disk --------------------------------------------------------------------------------------
def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def save(state_dict: dict, path, *, process_group=None) -> None:
    """Writes ``state_dict`` into the directory ``path`` (created if needed) with ``torch.distributed.checkpoint``:
    every rank of ``process_group`` (default: all ranks) calls it and writes its part; tensors every rank holds
    whole (buffers, DDP parameters) are written once."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state_dict, checkpoint_id=path, process_group=process_group, no_dist=not _distributed())


def load(state_dict: dict, path, *, strict: bool = True, process_group=None) -> None:
    """Fills ``state_dict`` in place (its tensors, and the DTensors' local parts) from the checkpoint directory
    ``path`` written by ``save``, with any world size. Every rank of ``process_group`` calls it. Raises naming
    the keys when an entry has another shape in the checkpoint, or (``strict``) when the checkpoint lacks some
    of the state dict's entries or holds others: a checkpoint of another model. ``strict=False`` loads the
    entries both have and leaves the others."""
    import torch.distributed.checkpoint as dcp

    problems = _mismatches(state_dict, _saved_entries(path), strict)
    if problems:
        fix = "; strict=False loads the entries both have (and leaves the others)" if strict else ""
        raise ValueError(f"thunder.distributed.checkpoint.load: the checkpoint at {str(path)!r} does not match the "
                         "state dict (was it written for another model?):\n" + "\n".join(problems)
                         + f"\nLoad it into a state dict of the model it was saved from{fix}")
    planner = dcp.DefaultLoadPlanner(allow_partial_load=not strict)
    dcp.load(state_dict, checkpoint_id=path, planner=planner, process_group=process_group, no_dist=not _distributed())


def _saved_entries(path) -> dict:
    from torch.distributed.checkpoint import FileSystemReader

    try:
        return FileSystemReader(path).read_metadata().state_dict_metadata
    except FileNotFoundError:
        raise FileNotFoundError(f"thunder.distributed.checkpoint.load: no checkpoint at {str(path)!r} (a directory "
                                "written by thunder.distributed.checkpoint.save, with a .metadata file)") from None


def _mismatches(state_dict: dict, saved: dict, strict: bool) -> list[str]:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    nested = [k for k, v in state_dict.items() if isinstance(v, (dict, list, tuple))]  # DCP checks their entries
    missing = [k for k in state_dict if k not in saved and k not in nested]
    shapes = [f"{k}: {tuple(saved[k].size) if isinstance(saved[k], TensorStorageMetadata) else 'not a tensor'} in the "
              f"checkpoint, {tuple(v.shape)} in the state dict" for k, v in state_dict.items()
              if isinstance(v, torch.Tensor) and k in saved
              and not (isinstance(saved[k], TensorStorageMetadata) and tuple(saved[k].size) == tuple(v.shape))]
    unexpected = [k for k in saved if k not in state_dict and not any(k.startswith(f"{n}.") for n in nested)]
    if not strict:  # only the entries both have are loaded
        missing = unexpected = []
    problems = [_listed("missing from the checkpoint", missing), _listed("with other shapes", shapes),
                _listed("in the checkpoint but not in the state dict", unexpected)]
    return [p for p in problems if p]


def _listed(what: str, items: list) -> str:
    if not items:
        return ""
    more = f" (and {len(items) - _LISTED} more)" if len(items) > _LISTED else ""
    return f"  {what}: " + ", ".join(items[:_LISTED]) + more
