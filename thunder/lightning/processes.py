"""Processes and collectives of the thunder strategies, shared by the Trainer's and Fabric's.

They start processes and set up the process group as Lightning's DDP does: its launchers start the other
ranks (``python train.py`` runs the script again per rank, with ``start_method="popen"``; ``"spawn"`` / ``"fork"``
start them from the running process), or ``torchrun`` / SLURM started them and the cluster environment says so;
then every rank initializes the default process group with the backend (gloo on the CPU, NCCL on CUDA, unless
given) and the timeout. With ``parallelism="none"`` there is one process and no process group, and the
collectives that metrics and callbacks use are the identity (even when a process group exists for other reasons).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from lightning.fabric.utilities.distributed import (_get_default_process_group_backend_for_device,
                                                    _init_dist_connection, _sync_ddp_if_available)
from lightning.fabric.utilities.distributed import group as _group
from lightning.fabric.utilities.seed import reset_seed
from lightning_utilities.core.rank_zero import rank_zero_only as utils_rank_zero_only

from thunder.lightning.options import Parallelism


class ThunderProcesses:
    """Mixed in before Lightning's ``ParallelStrategy`` (the Trainer's or Fabric's). The strategy sets
    ``options`` (``ThunderOptions``), calls ``_init_processes`` in its constructor and names its launcher classes."""

    _subprocess_launcher: type  # Lightning's _SubprocessScriptLauncher (Trainer or Fabric)
    _multiprocessing_launcher: type  # Lightning's _MultiProcessingLauncher

    def _init_processes(self, process_group_backend, timeout, start_method: str) -> None:
        if start_method not in ("popen", "spawn", "fork", "forkserver"):
            raise ValueError(f"start_method must be 'popen', 'spawn', 'fork' or 'forkserver', got {start_method!r}")
        self._num_nodes = 1
        self._process_group_backend = process_group_backend
        self._timeout = timeout
        self._start_method = start_method

    @property
    def parallel(self) -> bool:
        return self.options.parallelism is not Parallelism.NONE

    @property
    def is_distributed(self) -> bool:  # what Lightning asks a custom strategy (distributed samplers, sync_dist)
        return self.parallel

    @property
    def root_device(self) -> torch.device:
        return self.parallel_devices[self.local_rank]

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    @num_nodes.setter
    def num_nodes(self, num_nodes: int) -> None:
        self._num_nodes = num_nodes

    @property
    def num_processes(self) -> int:
        return len(self.parallel_devices) if self.parallel_devices is not None else 0

    @property
    def distributed_sampler_kwargs(self):
        if not self.parallel:
            return None
        return {"num_replicas": self.num_nodes * self.num_processes, "rank": self.global_rank}

    @property
    def process_group_backend(self) -> str | None:
        return self._process_group_backend

    def _configure_launcher(self) -> None:
        if not self.parallel:
            if self.num_nodes * self.num_processes > 1:
                raise ValueError(f"parallelism='none' trains in one process, but {self.num_processes} devices on "
                                 f"{self.num_nodes} node(s) were asked for: use strategy='thunder_ddp' or "
                                 "'thunder_fsdp' (parallelism='ddp' or 'fsdp'), or devices=1")
            self._launcher = None
        elif self._start_method == "popen":
            self._launcher = self._subprocess_launcher(self.cluster_environment, self.num_processes, self.num_nodes)
        else:
            self._launcher = self._multiprocessing_launcher(self, start_method=self._start_method)

    def setup_environment(self) -> None:
        super().setup_environment()  # the device
        if self.parallel:
            reset_seed()
            self.set_world_ranks()
            self._process_group_backend = (self._process_group_backend
                                           or _get_default_process_group_backend_for_device(self.root_device))
            device_id = self.root_device if self.root_device.type != "cpu" else None
            _init_dist_connection(self.cluster_environment, self._process_group_backend, timeout=self._timeout,
                                  device_id=device_id)

    def set_world_ranks(self) -> None:
        if self.cluster_environment is not None:
            self.cluster_environment.set_global_rank(self.node_rank * self.num_processes + self.local_rank)
            self.cluster_environment.set_world_size(self.num_nodes * self.num_processes)
        utils_rank_zero_only.rank = self.global_rank

    _set_world_ranks = set_world_ranks  # the name Fabric calls

    def _communicating(self) -> bool:
        return self.parallel and dist.is_available() and dist.is_initialized()

    def barrier(self, *args, **kwargs) -> None:
        if not self._communicating():
            return
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[self.root_device.index])
        else:
            dist.barrier()

    def broadcast(self, obj, src: int = 0):
        if not self._communicating():
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src, group=_group.WORLD)
        return box[0]

    def _reduce(self, tensor, group=None, reduce_op="mean"):
        if isinstance(tensor, torch.Tensor) and self.parallel:
            return _sync_ddp_if_available(tensor, group, reduce_op=reduce_op)
        return tensor

    def all_gather(self, tensor, group=None, sync_grads: bool = False):
        return super().all_gather(tensor, group, sync_grads) if self.parallel else tensor

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return super().reduce_boolean_decision(decision, all) if self.parallel else decision

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        """Registers the thunder strategy names (``thunder.lightning.registry.STRATEGY_NAMES``) for this class."""
        from thunder.lightning.registry import STRATEGY_NAMES

        for name, (parallelism, description) in STRATEGY_NAMES.items():
            strategy_registry.register(name, cls, description=description, override=True, parallelism=parallelism)
