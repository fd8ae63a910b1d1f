"""``ThunderFabricStrategy``: Fabric's strategy that runs the set-up module through ``thunder.jit``.

``fabric.setup(model)`` returns Fabric's wrapper around a ``ThunderModule`` of the model (with
``thunder.distributed.ddp`` or ``fsdp`` applied); ``model(x)`` runs the compiled program (under the precision
plugin's autocast), ``fabric.backward`` its backward, ``fabric.no_backward_sync(model)`` its ``no_sync``.
``model.module`` is the original module, ``model._forward_module`` the ThunderModule (for ``thunder.last_traces``).
"""
from __future__ import annotations

import contextlib
from datetime import timedelta

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.strategies import ParallelStrategy
from lightning.fabric.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from lightning.fabric.strategies.launchers.subprocess_script import _SubprocessScriptLauncher
from lightning.fabric.strategies.strategy import _BackwardSyncControl

from thunder.lightning import checkpoints
from thunder.lightning.options import (DEFAULT, Parallelism, ThunderOptions, jitted_parts, no_sync_context,
                                       setup_thunder_module)
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
    the meta device and fsdp materializes it submodule by submodule, sharding as it goes.
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
            checkpoints.move_optimizers_to_shards(optimizers, before, module)
        return module, [self.setup_optimizer(o) for o in optimizers], scheduler

    def setup_module(self, module: torch.nn.Module):
        result, _ = setup_thunder_module(module, self.options, self.root_device)
        return result

    def setup_optimizer(self, optimizer):
        if self.options.parallelism is Parallelism.FSDP:
            checkpoints.check_optimizer_holds_shards(optimizer)
        return optimizer

    def module_to_device(self, module: torch.nn.Module) -> None:
        if self.options.parallelism is Parallelism.FSDP:
            return  # thunder.distributed.fsdp moves (or materializes) each parameter on the device as it shards it
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
        norm = checkpoints.clip_grad_norm(jitted_parts(module), max_norm, norm_type)
        if error_if_nonfinite and not torch.isfinite(norm):
            raise RuntimeError(f"The total norm of order {norm_type} of the gradients is {norm.item()}, so they cannot "
                               "be clipped; pass error_if_nonfinite=False to clip (to NaN) anyway")
        return norm
