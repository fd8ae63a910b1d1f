"""``ThunderStrategy``: the Lightning Trainer's strategy that trains the LightningModule through ``thunder.jit``.

It starts processes as Lightning's DDP does (``thunder/lightning/processes.py``) and uses thunder in place of
torch's DDP wrapper: at set-up the LightningModule becomes a
``ThunderModule`` (``thunder.jit``) with ``thunder.distributed.ddp`` or ``fsdp`` applied, and its ``forward``
runs the compiled program. The step methods (``training_step``, ...) stay eager Python: see
[Note: calls of the LightningModule run its ThunderModule].
"""
from __future__ import annotations

import contextlib
import dataclasses
from datetime import timedelta

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.strategies import ParallelStrategy
from lightning.pytorch.strategies.launchers import _MultiProcessingLauncher, _SubprocessScriptLauncher
from lightning.pytorch.trainer.states import TrainerFn

import thunder
from thunder.lightning import sharded_state
from thunder.lightning.options import (DEFAULT, Parallelism, StateDictType, ThunderOptions, has_meta_tensors,
                                       no_sync_context, setup_thunder_module)
from thunder.lightning.precision import GlobalNormClipping
from thunder.lightning.processes import ThunderProcesses

# [Note: calls of the LightningModule run its ThunderModule]
# The Trainer calls the step methods of the LightningModule itself (``training_step`` logs, reads the batch,
# computes the loss: Python that must run on every step, not once while tracing). From the strategy's set-up to its
# teardown, calls of the module (``self(x)`` in ``training_step``, in a callback, in an ``on_*`` hook) run its
# ThunderModule: the strategy installs a route in ``nn.Module``'s ``_compiled_call_impl`` slot (the one
# ``module.compile()`` uses). The route removes itself for the duration of the jitted call, so what thunder traces
# (``module(x)`` -> ``forward``) and checks on later calls is the module without it, and calling the ThunderModule
# directly (``thunder_module(trainer)(x)``) runs the same compiled programs. After teardown the module is as it
# was. A training step that computes a loss without calling the module (``self.net(x)`` directly) would train
# outside thunder and, with ddp or fsdp, without synchronized gradients: the strategy raises instead (see
# ``_check_module_ran``).


class _Route:
    """Installed as the LightningModule's ``_compiled_call_impl``: calls its ThunderModule."""

    def __init__(self, module: torch.nn.Module, thunder_module):
        self.module = module
        self.thunder_module = thunder_module

    def __call__(self, *args, **kwargs):
        slot = self.module.__dict__
        slot["_compiled_call_impl"] = None
        try:
            return self.thunder_module(*args, **kwargs)
        finally:
            slot["_compiled_call_impl"] = self

    def install(self) -> None:
        held = self.module.__dict__.get("_compiled_call_impl")
        if held is not None and not isinstance(held, _Route):
            raise RuntimeError(f"{type(self.module).__name__} was compiled with torch.compile (module.compile()); the "
                               "thunder strategy compiles it with thunder.jit. Remove the torch.compile call")
        self.module.__dict__["_compiled_call_impl"] = self

    def remove(self) -> None:
        if self.module.__dict__.get("_compiled_call_impl") is self:
            self.module.__dict__["_compiled_call_impl"] = None


class ThunderStrategy(ThunderProcesses, ParallelStrategy):
    """Trains the LightningModule with ``thunder.jit``: its ``forward``, whenever the module is called (``self(...)``
    in the step methods, callbacks, hooks) between the strategy's set-up and teardown.

    Args:
        parallelism: ``"none"`` (one device), ``"ddp"`` (``thunder.distributed.ddp``) or ``"fsdp"``
            (``thunder.distributed.fsdp``: parameters sharded over the processes; create the optimizer in
            ``configure_optimizers`` from ``self.parameters()``, which are the shards by then).
        executors: given to ``thunder.jit`` (None: thunder's default).
        jit: True: the strategy jits the LightningModule. False: you jit its inner modules yourself
            (``self.model = thunder.jit(GPT())``) and call them in ``training_step``; the strategy adds the
            data-parallel transform to every ThunderModule in the LightningModule.
        bucket_size_in_mb, broadcast_from: options of ``thunder.distributed.ddp`` (``broadcast_from`` of fsdp too,
            where it defaults to 0 as for ddp: the ranks start from rank 0's weights; None: from their own).
        sharding_strategy, bucketing_strategy: options of ``thunder.distributed.fsdp`` (enums or their names).
        state_dict_type: ``"full"`` (one checkpoint file of whole tensors, written by rank 0) or, with fsdp,
            ``"sharded"`` (a checkpoint directory every rank writes its shards into).
        process_group_backend: None: gloo on the CPU, NCCL on CUDA.
        timeout: of the process group's collectives.
        start_method: how Lightning starts the other processes (``"popen"``: run the script again; ``"spawn"``,
            ``"fork"``), as for Lightning's DDP.

    The jitted module is ``thunder.lightning.thunder_module(trainer)`` (``trainer.strategy.thunder_module``), for
    ``thunder.last_traces`` and the other queries.
    """

    strategy_name = "thunder"
    _subprocess_launcher = _SubprocessScriptLauncher
    _multiprocessing_launcher = _MultiProcessingLauncher

    def __init__(self, parallelism: str = "none", *, executors=None, jit: bool = True, bucket_size_in_mb=DEFAULT,
                 sharding_strategy=DEFAULT, bucketing_strategy=DEFAULT, broadcast_from=DEFAULT,
                 state_dict_type: str = "full", process_group_backend: str | None = None,
                 timeout: timedelta | None = default_pg_timeout, start_method: str = "popen", accelerator=None,
                 parallel_devices=None, cluster_environment=None, checkpoint_io=None, precision_plugin=None):
        self.options = ThunderOptions.parse(
            parallelism=parallelism, executors=executors, jit=jit, state_dict_type=state_dict_type,
            bucket_size_in_mb=bucket_size_in_mb, sharding_strategy=sharding_strategy,
            bucketing_strategy=bucketing_strategy, broadcast_from=broadcast_from)
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=cluster_environment, checkpoint_io=checkpoint_io,
                         precision_plugin=precision_plugin)
        self._init_processes(process_group_backend, timeout, start_method)
        self._parts: list = []  # the ThunderModules trained (one with jit=True)
        self._route: _Route | None = None
        self._clipping: GlobalNormClipping | None = None

    @property
    def thunder_module(self):
        """The ThunderModule the strategy made of the LightningModule (jit=True; with jit=False, your own)."""
        if len(self._parts) != 1:
            raise RuntimeError("the strategy has no ThunderModule yet: it jits the LightningModule when the Trainer "
                               "sets it up (fit, validate, test, predict)" if not self._parts else
                               f"jit=False: the LightningModule holds {len(self._parts)} ThunderModules (your own)")
        return self._parts[0]

    def reduce(self, tensor, group=None, reduce_op="mean"):
        return self._reduce(tensor, group, reduce_op)

    # -- the model ---------------------------------------------------------------------------------------
    def setup(self, trainer) -> None:
        self.accelerator.setup(trainer)
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and self._layer_sync is not None:
            raise NotImplementedError("sync_batchnorm=True (torch's SyncBatchNorm) is not supported by the thunder "
                                      "strategies: remove it from the Trainer")
        module = self.lightning_module
        self.model = self.precision_plugin.convert_module(module)
        self.model_to_device()
        self.model, self._parts = setup_thunder_module(module, self.options, self.root_device)
        if self.options.jit:
            self._route = _Route(module, self.model)
            self._route.install()
        if fitting:
            self.setup_optimizers(trainer)
            sharded_state.check_optimizers_hold_parameters(self.optimizers, module, self.options)
        self.setup_precision_plugin()
        if fitting:
            from lightning.fabric.utilities.optimizer import _optimizers_to_device

            _optimizers_to_device(self.optimizers, self.root_device)

    def model_to_device(self) -> None:
        if has_meta_tensors(self.model):
            return  # thunder.distributed.fsdp materializes each parameter on the device as it shards it
        self.model.to(self.root_device)

    @contextlib.contextmanager
    def tensor_init_context(self, empty_init: bool | None = None):
        if not (empty_init and self.options.parallelism is Parallelism.FSDP):
            with super().tensor_init_context(empty_init):
                yield
            return
        # the model is built on the meta device; fsdp materializes it submodule by submodule (reset_parameters)
        with torch.device("meta"), self.precision_plugin.tensor_init_context():
            yield

    @contextlib.contextmanager
    def block_backward_sync(self):
        with no_sync_context(self._parts):
            yield

    @property
    def precision_plugin(self):
        plugin = super().precision_plugin
        if self.options.parallelism is not Parallelism.FSDP:
            return plugin
        if self._clipping is None or self._clipping.plugin is not plugin:
            self._clipping = GlobalNormClipping(plugin, self._clip_norm)
        return self._clipping

    @precision_plugin.setter
    def precision_plugin(self, plugin) -> None:
        self._precision_plugin = plugin.plugin if isinstance(plugin, GlobalNormClipping) else plugin

    def _clip_norm(self, optimizer, max_norm: float) -> None:
        sharded_state.clip_grad_norm(self._parts, max_norm)

    # -- steps -------------------------------------------------------------------------------------------
    def _step(self, method: str, context, *args, **kwargs):
        module = self.lightning_module
        calls = [thunder.compile_stats(p).calls for p in self._parts]
        with context:
            out = getattr(module, method)(*args, **kwargs)
        if method == "training_step" and self.parallel:
            _check_module_ran(module, out, calls != [thunder.compile_stats(p).calls for p in self._parts], self.options)
        return out

    def training_step(self, *args, **kwargs):
        return self._step("training_step", self.precision_plugin.train_step_context(), *args, **kwargs)

    def validation_step(self, *args, **kwargs):
        return self._step("validation_step", self.precision_plugin.val_step_context(), *args, **kwargs)

    def test_step(self, *args, **kwargs):
        return self._step("test_step", self.precision_plugin.test_step_context(), *args, **kwargs)

    def predict_step(self, *args, **kwargs):
        return self._step("predict_step", self.precision_plugin.predict_step_context(), *args, **kwargs)

    # -- checkpoints (see thunder/lightning/sharded_state.py) ------------------------------------------------
    @property
    def _sharded(self) -> bool:
        return self.options.parallelism is Parallelism.FSDP

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return self._sharded  # the checkpoint is loaded into the shards, which exist once the module is set up

    @property
    def lightning_restore_optimizer(self) -> bool:
        return not self._sharded  # load_checkpoint loads the optimizers' shards

    def lightning_module_state_dict(self) -> dict:
        if not self._sharded:
            return super().lightning_module_state_dict()
        return sharded_state.model_state_dict(self._parts, self.options, self.global_rank)

    def optimizer_state(self, optimizer) -> dict:
        if not self._sharded:
            return super().optimizer_state(optimizer)
        optimizer = getattr(optimizer, "_optimizer", optimizer)  # a LightningOptimizer
        return sharded_state.optimizer_state_dict(optimizer, self.options, self.global_rank)

    def save_checkpoint(self, checkpoint: dict, filepath, storage_options=None) -> None:
        if not (self._sharded and self.options.state_dict_type is StateDictType.SHARDED):
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        tensors = {"state_dict": checkpoint.pop("state_dict")}
        tensors.update({f"optimizer_{i}": s for i, s in enumerate(checkpoint.pop("optimizer_states", []))})
        sharded_state.save_sharded(self.broadcast(filepath), tensors, checkpoint, self.global_rank)

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict:
        if not self._sharded:
            return super().load_checkpoint(checkpoint_path, weights_only)
        path = self.broadcast(checkpoint_path)
        module = self.lightning_module
        optimizers = [getattr(o, "_optimizer", o) for o in self.optimizers]
        if not module.trainer.state.fn == TrainerFn.FITTING:
            optimizers = []
        if not sharded_state.is_sharded_checkpoint(path):
            checkpoint = super().load_checkpoint(path, weights_only)  # whole tensors, read by every rank
            states = checkpoint.pop("optimizer_states", [])
            for optimizer, state in zip(optimizers, states):
                sharded_state.load_optimizer_state_dict(optimizer, state)
            return checkpoint
        sharded = dataclasses.replace(self.options, state_dict_type=StateDictType.SHARDED)
        template = {"state_dict": sharded_state.model_state_dict(self._parts, sharded, self.global_rank)}
        for i, optimizer in enumerate(optimizers):
            template[f"optimizer_{i}"] = sharded_state.optimizer_state_dict(
                sharded_state.with_initialized_state(optimizer), sharded, self.global_rank)
        metadata = sharded_state.load_sharded(path, template, module.strict_loading, weights_only)
        sharded_state.load_model_state_dict(template["state_dict"], self._parts, self.global_rank, module.strict_loading)
        for i, optimizer in enumerate(optimizers):
            sharded_state.load_optimizer_state_dict(optimizer, template[f"optimizer_{i}"])
        return metadata  # without "state_dict": load_model_state_dict has nothing left to do

    def load_model_state_dict(self, checkpoint, strict: bool = True) -> None:
        if not self._sharded:
            return super().load_model_state_dict(checkpoint, strict)
        if "state_dict" in checkpoint:  # whole tensors (a sharded checkpoint is loaded by load_checkpoint)
            sharded_state.load_model_state_dict(checkpoint["state_dict"], self._parts, self.global_rank, strict)

    def teardown(self) -> None:
        module = self.lightning_module
        if self._route is not None:
            self._route.remove()
        super().teardown()
        self.model = module  # the ThunderModule stays reachable as `thunder_module`


def _loss_of(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return out.get("loss")
    return None


def _check_module_ran(module, out, ran: bool, options: ThunderOptions) -> None:
    """A training step whose loss requires grad must have called the ThunderModule: gradients computed outside
    thunder's programs are not synchronized (see [Note: calls of the LightningModule run its ThunderModule])."""
    loss = _loss_of(out)
    if ran or not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        return
    how = ("the strategy jits the LightningModule, whose forward runs when training_step calls `self(...)`: define "
           f"{type(module).__name__}.forward and call self(...) instead of its submodules, or pass jit=False and "
           "jit the inner module yourself (self.model = thunder.jit(...))" if options.jit else
           "jit=False: training_step must call the ThunderModules in the LightningModule")
    raise RuntimeError(f"{type(module).__name__}.training_step computed its loss without running the jitted module, "
                       f"so its gradients would not be synchronized by thunder.distributed.{options.parallelism.value}: "
                       f"{how}")
