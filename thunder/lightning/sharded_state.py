"""What the strategies do with FSDP-sharded state: optimizers over the shards, clipping, state dicts.

With fsdp each rank's module holds shards (``thunder.distributed.fsdp``), and so does the optimizer state: a
state tensor of a sharded parameter's shard shape (Adam's moments, SGD's momentum) holds the same rows.

- ``state_dict_type="full"``: the model's state dict has whole tensors (``thunder.distributed.checkpoint``
  gathers them) and so has the optimizer's (gathered here), as Lightning's DDP would save them: rank 0 writes
  one file, which loads into a module and optimizer of any parallelism and world size (cut into this rank's
  shards on loading).
- ``state_dict_type="sharded"``: sharded parameters and their optimizer state are ``DTensor``s of the whole shape
  placed ``Shard(0)`` (see [Note: sharded checkpoints] in ``thunder/distributed/checkpoint.py``), which
  ``thunder.distributed.checkpoint.save`` writes into a directory, every rank its rows; ``load`` reads them
  into the same structure (with any world size), from which the module and optimizer are loaded.

Model state dicts and norm clipping go through ``thunder.distributed.checkpoint`` and
``thunder.distributed.clip_grad_norm_``.
"""
from __future__ import annotations

from pathlib import Path

import torch

from thunder.distributed import checkpoint, clip_grad_norm_
from thunder.lightning.options import Parallelism, ThunderOptions


def check_optimizers_hold_parameters(optimizers, module: torch.nn.Module, options: ThunderOptions) -> None:
    """fsdp replaced the module's parameters by shards: an optimizer made before would step tensors nothing uses."""
    if options.parallelism is not Parallelism.FSDP:
        return
    current = {id(p) for p in module.parameters()}
    for optimizer in optimizers:
        optimizer = getattr(optimizer, "_optimizer", optimizer)
        if any(id(p) not in current for group in optimizer.param_groups for p in group["params"]):
            raise RuntimeError(
                f"the {type(optimizer).__name__} holds tensors that are not parameters of the module: with "
                "parallelism='fsdp' the parameters are replaced by their shards when the strategy sets the module up. "
                "Create the optimizer from the module's parameters after that (in configure_optimizers with the "
                "Trainer; after fabric.setup_module with Fabric)")


def clip_grad_norm(parts: list, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """Scales the gradients of the FSDP-sharded ThunderModule so that the norm of the whole gradient is at most
    ``max_norm``; returns that norm."""
    if len(parts) != 1:
        raise NotImplementedError(f"clipping by norm over {len(parts)} separately sharded ThunderModules (jit=False) is "
                                  "not supported: jit the whole model (one ThunderModule), or clip by value")
    return clip_grad_norm_(parts[0], max_norm, norm_type)


def _fsdp_transform(part):
    import thunder
    from thunder.distributed import FSDPTransform

    return next((t for t in thunder.list_transforms(part) if isinstance(t, FSDPTransform)), None)


def move_optimizers_to_shards(optimizers, before: dict, module: torch.nn.Module) -> None:
    """Fabric's joint set-up under fsdp: optimizers made from the whole parameters (``before``, by name) step their
    shards instead. An optimizer that already has state refers to whole-size tensors and cannot be moved."""
    after = dict(module.named_parameters(remove_duplicate=False))
    moved = {id(p): after[name] for name, p in before.items() if name in after}
    for optimizer in optimizers:
        if optimizer.state:
            raise RuntimeError(f"the {type(optimizer).__name__} already has state (it has stepped) for the whole parameters, "
                               "which parallelism='fsdp' replaces by shards. Create it after fabric.setup_module(model), "
                               "then fabric.setup_optimizers(optimizer)")
        for group in optimizer.param_groups:
            group["params"] = [moved.get(id(p), p) for p in group["params"]]


def check_optimizer_holds_shards(optimizer) -> None:
    """An optimizer set up under fsdp must step the shards (made after ``fabric.setup_module``)."""
    from thunder.lightning.options import set_up_parts

    shards = {i for part in set_up_parts() if (t := _fsdp_transform(part)) is not None for i in t.shards}
    if any(id(p) not in shards for group in optimizer.param_groups for p in group["params"]):
        raise RuntimeError(f"the {type(optimizer).__name__} holds tensors that are not the shards of a module set up with "
                           "parallelism='fsdp' (which replaces the parameters by shards): create the optimizer from "
                           "the parameters of the module fabric.setup_module returned, or set both up together with "
                           "fabric.setup(model, optimizer)")


# -- which transform shards what ------------------------------------------------------------------------------
def _sharded_part(parts: list):
    """The one FSDP-sharded ThunderModule whose state is checkpointed, and its transform."""
    if len(parts) != 1:
        raise NotImplementedError(f"checkpoints of {len(parts)} separately sharded ThunderModules (jit=False) are not "
                                  "supported: jit the whole model (jit=True), or save each ThunderModule's state yourself")
    transform = _fsdp_transform(parts[0])
    assert transform is not None, "parallelism='fsdp' without an FSDP transform"
    return parts[0], transform


def _shard_info_of(optimizer) -> dict:
    """Optimizer state index -> (transform, ShardInfo) of each parameter it steps that fsdp sharded."""
    from thunder.lightning.options import set_up_parts

    transforms = [t for part in set_up_parts() if (t := _fsdp_transform(part))]
    found, index = {}, 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            owner = next((t for t in transforms if id(p) in t.shards), None)
            if owner is not None:
                found[index] = (owner, owner.shards[id(p)])
            index += 1
    return found


def _is_shard_state(value, transform, info) -> bool:
    return isinstance(value, torch.Tensor) and tuple(value.shape) == (info.rows_per_rank, *info.shape[1:])


# -- model state dicts ----------------------------------------------------------------------------------------
def model_state_dict(parts: list, options: ThunderOptions, rank: int) -> dict:
    """Whole tensors (on rank 0, in CPU memory; ``{}`` elsewhere) or this rank's DTensors (see the module docstring)."""
    part, _ = _sharded_part(parts)
    full = options.state_dict_type.value == "full"
    return checkpoint.get_model_state_dict(part, checkpoint.StateDictOptions(full_state_dict=full, cpu_offload=full, rank0_only=full),
                                   rank)


def load_model_state_dict(state_dict: dict, parts: list, rank: int, strict: bool = True):
    """Loads a whole or a sharded (DTensor) state dict into the sharded module."""
    part, _ = _sharded_part(parts)
    return checkpoint.load_model_state_dict(state_dict, part, checkpoint.StateDictOptions(strict=strict), rank)


# -- optimizer state dicts ------------------------------------------------------------------------------------
def optimizer_state_dict(optimizer, options: ThunderOptions, rank: int) -> dict:
    """The optimizer's state dict with each sharded parameter's state whole (rank 0; ``{}`` elsewhere) or as
    DTensors (``sharded``)."""
    state = optimizer.state_dict()
    full = options.state_dict_type.value == "full"
    infos = _shard_info_of(optimizer)
    converted = {}
    for index, entries in state["state"].items():
        transform, info = infos.get(index, (None, None))
        converted[index] = {k: (_whole(v, transform, info) if full else _as_dtensor(v, transform, info))
                            if transform is not None and _is_shard_state(v, transform, info) else v
                            for k, v in entries.items()}
    if full and rank != 0:
        return {}
    return {"state": converted, "param_groups": state["param_groups"]}


def _whole(shard: torch.Tensor, transform, info) -> torch.Tensor:
    whole = shard.new_empty((info.rows_per_rank * transform.world_size, *shard.shape[1:]))
    gather = getattr(torch.distributed, "all_gather_single", None) or torch.distributed.all_gather_into_tensor
    gather(whole, shard.detach().contiguous(), group=transform.process_group)
    return whole[: info.shape[0]].cpu()


def _as_dtensor(shard: torch.Tensor, transform, info):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard

    local = shard.detach()[: checkpoint.rows_held(info, transform)]
    mesh = DeviceMesh.from_group(transform.process_group, shard.device.type)
    stride = torch.empty(info.shape, device="meta").stride()
    return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(info.shape), stride=stride)


def load_optimizer_state_dict(optimizer, state: dict) -> None:
    """Loads a state dict of whole tensors (any parallelism saved it) or of DTensors into the optimizer of shards."""
    from torch.distributed.tensor import DTensor
    from thunder.distributed.fsdp import shard_rows

    infos = _shard_info_of(optimizer)
    converted = {}
    for index, entries in state["state"].items():
        transform, info = infos.get(index, (None, None))
        local = {}
        for k, v in entries.items():
            if isinstance(v, DTensor):
                v = _padded(v.to_local(), info)
            elif transform is not None and isinstance(v, torch.Tensor) and tuple(v.shape) == info.shape:
                v = shard_rows(v, transform.rank, transform.world_size)
            local[k] = v
        converted[index] = local
    optimizer.load_state_dict({"state": converted, "param_groups": state["param_groups"]})


def _padded(local: torch.Tensor, info) -> torch.Tensor:
    missing = info.rows_per_rank - local.shape[0]
    return torch.cat([local, local.new_zeros((missing, *local.shape[1:]))]) if missing else local


def with_initialized_state(optimizer):
    """The optimizer, its state created (a step with learning rate 0 on zero gradients) when it has none yet: the
    sharded checkpoint is read into the tensors of its state dict."""
    if optimizer.state:
        return optimizer
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if any(p.grad is not None for p in params):
        raise RuntimeError("loading a sharded checkpoint into an optimizer that has gradients but no state: call "
                           "optimizer.zero_grad() first")
    rates = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = torch.zeros_like(group["lr"]) if isinstance(group["lr"], torch.Tensor) else 0.0
    for p in params:
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    optimizer.zero_grad(set_to_none=True)
    return optimizer


# -- sharded checkpoint directories ---------------------------------------------------------------------------
METADATA = "meta.pt"  # in a sharded checkpoint directory: what is neither a module nor an optimizer (rank 0's)


def is_sharded_checkpoint(path) -> bool:
    return Path(path).is_dir() and (Path(path) / METADATA).is_file()


def save_sharded(path, tensors: dict, metadata: dict, rank: int) -> None:
    """Writes ``tensors`` (state dicts with DTensors) into the directory ``path``, every rank its part, and rank 0
    writes ``metadata`` beside them."""
    path = Path(path)
    if path.is_file():
        raise FileExistsError(f"{str(path)!r} is a file; a sharded checkpoint (state_dict_type='sharded') is a "
                              "directory: choose another path, or remove the file")
    path.mkdir(parents=True, exist_ok=True)
    checkpoint.save(tensors, path)
    if rank == 0:
        torch.save(metadata, path / METADATA)


def load_sharded(path, template: dict, strict: bool = True, weights_only: bool | None = None) -> dict:
    """Fills ``template`` (state dicts with DTensors, as when saving) from the directory ``path``; returns the
    metadata saved beside them."""
    path = Path(path)
    checkpoint.load(template, path, strict=strict)
    return torch.load(path / METADATA, weights_only=weights_only)
