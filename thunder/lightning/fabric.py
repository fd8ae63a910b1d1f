"""``ThunderFabricStrategy``: Fabric's strategy that runs the set-up module through ``thunder.jit``.

``fabric.setup(model)`` returns Fabric's wrapper around a ``ThunderModule`` of the model (with
``thunder.distributed.ddp`` or ``fsdp`` applied); ``model(x)`` runs the compiled program (under the precision
plugin's autocast), ``fabric.backward`` its backward, ``fabric.no_backward_sync(model)`` its ``no_sync``.
``model.module`` is the original module, ``model._forward_module`` the ThunderModule (for ``thunder.last_traces``).
"""
from __future__ import annotations

import contextlib
import dataclasses
from datetime import timedelta

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies import ParallelStrategy
from lightning.fabric.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from lightning.fabric.strategies.launchers.subprocess_script import _SubprocessScriptLauncher
from lightning.fabric.strategies.strategy import _BackwardSyncControl
from lightning.fabric.utilities.types import _Stateful

from thunder.lightning import sharded_state
from thunder.lightning.options import (DEFAULT, Parallelism, StateDictType, ThunderOptions, has_meta_tensors,
                                       jitted_parts, no_sync_context, setup_thunder_module)
from thunder.lightning.processes import ThunderProcesses


class _ThunderBackwardSyncControl(_BackwardSyncControl):
    def no_backward_sync(self, module: torch.nn.Module, enabled: bool):
        if not enabled:
            return contextlib.nullcontext()
        parts = jitted_parts(module)
        if not parts:
            raise TypeError(f"fabric.no_backward_sync: {type(module).__name__} has no ThunderModule; set it up with "
                            "fabric.setup(...) under the thunder strategy")
        return no_sync_context(parts)


class ThunderFabricStrategy(ThunderProcesses, ParallelStrategy):
    """Fabric's counterpart of ``thunder.lightning.ThunderStrategy``, with the same options.

    With ``jit=True`` the strategy jits the module given to ``fabric.setup`` (a module already jitted by you gets
    the transform added); with ``jit=False`` the module must hold the ThunderModules (your own ``thunder.jit``
    calls), and they get the transform. With ``parallelism="fsdp"`` an optimizer made before ``fabric.setup`` is
    moved onto the shards (when it has no state yet); ``fabric.init_module(empty_init=True)`` builds the model on
    the meta device and fsdp materializes it submodule by submodule, sharding as it goes. As with Lightning's DDP,
    call ``fabric.launch()`` first (with ``parallelism="none"`` too).
    """

    strategy_name = "thunder"
    _subprocess_launcher = _SubprocessScriptLauncher
    _multiprocessing_launcher = _MultiProcessingLauncher

    def __init__(self, parallelism: str = "none", *, executors=None, jit: bool = True, bucket_size_in_mb=DEFAULT,
                 sharding_strategy=DEFAULT, bucketing_strategy=DEFAULT, broadcast_from=DEFAULT,
                 state_dict_type: str = "full", process_group_backend: str | None = None,
                 timeout: timedelta | None = default_pg_timeout, start_method: str = "popen", accelerator=None,
                 parallel_devices=None, cluster_environment=None, checkpoint_io=None, precision=None):
        self.options = ThunderOptions.parse(
            parallelism=parallelism, executors=executors, jit=jit, state_dict_type=state_dict_type,
            bucket_size_in_mb=bucket_size_in_mb, sharding_strategy=sharding_strategy,
            bucketing_strategy=bucketing_strategy, broadcast_from=broadcast_from)
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=cluster_environment, checkpoint_io=checkpoint_io, precision=precision)
        self._init_processes(process_group_backend, timeout, start_method)
        self._backward_sync_control = _ThunderBackwardSyncControl()

    def all_reduce(self, tensor, group=None, reduce_op="mean"):
        return self._reduce(tensor, group, reduce_op)

    # -- modules and optimizers ---------------------------------------------------------------------------
    def setup_module_and_optimizers(self, module, optimizers, scheduler=None):
        before = dict(module.named_parameters(remove_duplicate=False))
        module = self.setup_module(module)
        if self.options.parallelism is Parallelism.FSDP:
            sharded_state.move_optimizers_to_shards(optimizers, before, module)
        return module, [self.setup_optimizer(o) for o in optimizers], scheduler

    def setup_module(self, module: torch.nn.Module):
        result, _ = setup_thunder_module(module, self.options, self.root_device)
        return result

    def setup_optimizer(self, optimizer):
        if self.options.parallelism is Parallelism.FSDP:
            sharded_state.check_optimizer_holds_shards(optimizer)
        return optimizer

    def module_to_device(self, module: torch.nn.Module) -> None:
        if has_meta_tensors(module):
            return  # thunder.distributed.fsdp materializes each parameter on the device as it shards it
        module.to(self.root_device)

    def module_init_context(self, empty_init: bool | None = None):
        if not (empty_init and self.options.parallelism is Parallelism.FSDP):
            return super().module_init_context(empty_init)
        # the model is built on the meta device; fsdp materializes it submodule by submodule (reset_parameters)
        stack = contextlib.ExitStack()
        stack.enter_context(torch.device("meta"))
        stack.enter_context(self.precision.module_init_context())
        return stack

    def clip_gradients_norm(self, module, optimizer, max_norm, norm_type=2.0, error_if_nonfinite: bool = True):
        if self.options.parallelism is not Parallelism.FSDP:
            return super().clip_gradients_norm(module, optimizer, max_norm, norm_type, error_if_nonfinite)
        self.precision.unscale_gradients(optimizer)
        norm = sharded_state.clip_grad_norm(jitted_parts(module), max_norm, norm_type)
        if error_if_nonfinite and not torch.isfinite(norm):
            raise RuntimeError(f"The total norm of order {norm_type} of the gradients is {norm.item()}, so they cannot "
                               "be clipped; pass error_if_nonfinite=False to clip (to NaN) anyway")
        return norm

    # -- checkpoints (see thunder/lightning/sharded_state.py) ------------------------------------------------
    @property
    def _sharded(self) -> bool:
        return self.options.parallelism is Parallelism.FSDP

    def get_module_state_dict(self, module: torch.nn.Module) -> dict:
        if not self._sharded:
            return super().get_module_state_dict(module)
        return sharded_state.model_state_dict(jitted_parts(module), self.options, self.global_rank)

    def get_optimizer_state(self, optimizer) -> dict:
        if not self._sharded:
            return super().get_optimizer_state(optimizer)
        return sharded_state.optimizer_state_dict(optimizer, self.options, self.global_rank)

    def load_module_state_dict(self, module: torch.nn.Module, state_dict: dict, strict: bool = True) -> None:
        if not self._sharded:
            return super().load_module_state_dict(module, state_dict, strict)
        sharded_state.load_model_state_dict(state_dict, jitted_parts(module), self.global_rank, strict)

    def save_checkpoint(self, path, state: dict, storage_options=None, filter=None) -> None:
        if not (self._sharded and self.options.state_dict_type is StateDictType.SHARDED):
            return super().save_checkpoint(path, state, storage_options, filter)
        if filter is not None or storage_options is not None:
            raise NotImplementedError("a sharded checkpoint (state_dict_type='sharded') is written whole, by "
                                      "thunder.distributed.checkpoint.save: filter and storage_options do not apply")
        tensors, metadata = {}, {}
        for key, obj in state.items():
            if isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
                tensors[key] = self._convert_stateful_objects_in_state({key: obj}, filter={})[key]
            else:
                metadata[key] = obj.state_dict() if isinstance(obj, _Stateful) else obj
        sharded_state.save_sharded(self.broadcast(path), tensors, metadata, self.global_rank)

    def load_checkpoint(self, path, state=None, strict: bool = True, weights_only: bool | None = None) -> dict:
        if not self._sharded:
            return super().load_checkpoint(path, state, strict, weights_only)
        path = self.broadcast(path)
        if not sharded_state.is_sharded_checkpoint(path):
            return self._load_whole(path, state, strict, weights_only)
        if not isinstance(state, dict) or not state:
            raise ValueError("a sharded checkpoint is read into the objects it was saved from: pass them, "
                             "fabric.load(path, {'model': model, 'optimizer': optimizer, ...})")
        sharded = dataclasses.replace(self.options, state_dict_type=StateDictType.SHARDED)
        template = {}
        for key, obj in state.items():
            if isinstance(obj, torch.nn.Module):
                template[key] = sharded_state.model_state_dict(jitted_parts(obj), sharded, self.global_rank)
            elif isinstance(obj, torch.optim.Optimizer):
                template[key] = sharded_state.optimizer_state_dict(sharded_state.with_initialized_state(obj), sharded,
                                                                 self.global_rank)
        metadata = sharded_state.load_sharded(path, template, strict, weights_only)
        for key, obj in state.items():
            if isinstance(obj, torch.nn.Module):
                self.load_module_state_dict(obj, template[key], strict)
            elif isinstance(obj, torch.optim.Optimizer):
                sharded_state.load_optimizer_state_dict(obj, template[key])
            elif key in metadata:
                value = metadata.pop(key)
                if isinstance(obj, _Stateful):
                    obj.load_state_dict(value)
                else:
                    state[key] = value
            elif strict:
                raise KeyError(f"the checkpoint at {str(path)!r} has no {key!r}; strict=False loads what it has")
        return metadata

    def _load_whole(self, path, state, strict: bool, weights_only) -> dict:
        """A checkpoint of whole tensors (``state_dict_type="full"``, or saved by another strategy)."""
        if isinstance(state, torch.optim.Optimizer):
            sharded_state.load_optimizer_state_dict(state, self.checkpoint_io.load_checkpoint(path, weights_only=weights_only))
            return {}
        if not isinstance(state, dict):
            return super().load_checkpoint(path, state, strict, weights_only)
        optimizers = {k: v for k, v in state.items() if isinstance(v, torch.optim.Optimizer)}
        state.update({k: _LoadsShards(v) for k, v in optimizers.items()})  # in place: Fabric reads the dict back
        try:
            return super().load_checkpoint(path, state, strict, weights_only)
        finally:
            state.update(optimizers)


class _LoadsShards:
    """An optimizer of shards, for Lightning's loading of whole checkpoints: ``load_state_dict`` cuts the state."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        sharded_state.load_optimizer_state_dict(self.optimizer, state)
