"""What the strategies do with FSDP-sharded state: optimizers over the shards, clipping, checkpoints.

With fsdp each rank's module holds shards (``thunder.distributed.fsdp``), and so does the optimizer state.
Model state dicts and clipping go through ``thunder.distributed.checkpoint`` and ``thunder.distributed.clip_grad_norm_``.
"""
from __future__ import annotations

import torch

from thunder.lightning.options import Parallelism, ThunderOptions


def _distributed_api(name: str):
    import thunder.distributed as td

    found = getattr(td, name, None)
    if found is None:
        raise NotImplementedError(f"this needs thunder.distributed.{name}, which this version of thunder lacks")
    return found


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
    return _distributed_api("clip_grad_norm_")(parts[0], max_norm, norm_type)


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
    from thunder.lightning.options import _SET_UP

    shards = {i for _, _, parts in list(_SET_UP.values()) for part in parts
              if (t := _fsdp_transform(part)) is not None for i in t.shards}
    if any(id(p) not in shards for group in optimizer.param_groups for p in group["params"]):
        raise RuntimeError(f"the {type(optimizer).__name__} holds tensors that are not the shards of a module set up with "
                           "parallelism='fsdp' (which replaces the parameters by shards): create the optimizer from "
                           "the parameters of the module fabric.setup_module returned, or set both up together with "
                           "fabric.setup(model, optimizer)")
