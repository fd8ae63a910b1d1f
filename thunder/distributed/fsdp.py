"""Sharded data parallelism as a trace transform.

``FSDPTransform`` replaces each parameter of the module by its local shard: rows ``rank * n`` to
``(rank + 1) * n`` of the parameter padded with zero rows to a multiple of the world size along dimension 0.
A standard optimizer over ``model.parameters()`` then holds 1/world_size of the state.

While tracing, each shard becomes the whole parameter in the program through an asynchronous
``all_gather`` and its ``wait`` (and ``narrow`` when padded). Autodiff differentiates that: the gradient of
an all-gather is a reduce-scatter, so the backward reduce-scatters each parameter's gradient into the
shard's gradient (pre-divided by the world size: the average over ranks, as DDP). Then:

- ZeRO2 keeps the gathered parameters from the forward for the backward;
- ZeRO3 saves only the shards and gathers again in the backward, so each gathered parameter lives from
  its gather to its last use in one of the two traces.

After the executors, ``schedule_gathers`` issues each all-gather at most ``prefetch`` gathers ahead of its
use, each wait just before its first use, and each reduce-scatter as soon as its gradient is ready,
waited for at the end of the backward.
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import math

import torch
import torch.distributed as dist

import thunder.torch as ltorch
from thunder.core.statements import python_return
from thunder.core.trace import tracectx
from thunder.distributed.prims import all_gather, reduce_scatter, wait
from thunder.distributed.scheduling import schedule_gathers
from thunder.distributed.state import broadcast_module_state, resolve_process_group
from thunder.driver.frontend import ModuleTensorSource
from thunder.transforms.base import Transform
from thunder.transforms.rename import substitute_bsym


class FSDPType(enum.Enum):
    ZERO2 = enum.auto()  # gathered parameters are kept from the forward for the backward
    ZERO3 = enum.auto()  # gathered parameters are freed after their last use and gathered again in the backward


class FSDPBucketingStrategy(enum.Enum):
    NONE = enum.auto()  # one collective per parameter
    LAYER = enum.auto()  # one per leaf module
    BLOCK = enum.auto()  # one per block of the model's top-level ModuleList


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """How a parameter is sharded: its full shape and the rows each rank holds (the last ranks' padded)."""

    name: str
    shape: tuple
    rows_per_rank: int


def _default_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def shard_rows(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rows ``rank * n`` to ``(rank + 1) * n`` of ``t`` zero-padded along dimension 0 to ``n * world_size`` rows."""
    n = math.ceil(t.shape[0] / world_size)
    shard = t.new_zeros((n, *t.shape[1:]))
    start = min(rank * n, t.shape[0])
    stop = min(start + n, t.shape[0])
    shard[: stop - start].copy_(t[start:stop])
    return shard


class FSDPTransform(Transform):
    """Shards the jitted module's parameters over the ranks of ``process_group`` (see the module docstring)."""

    def __init__(self, *, device=None, broadcast_from: int | None = None, sharding_strategy=FSDPType.ZERO2,
                 bucketing_strategy=FSDPBucketingStrategy.NONE, process_group=None, move_state_dict_to_cpu=False,
                 prefetch: int = 2):
        if not isinstance(sharding_strategy, FSDPType):
            raise ValueError(f"sharding_strategy must be a thunder.distributed.FSDPType (ZERO2 or ZERO3), got "
                             f"{sharding_strategy!r}")
        if not isinstance(bucketing_strategy, FSDPBucketingStrategy):
            raise ValueError("bucketing_strategy must be a thunder.distributed.FSDPBucketingStrategy (NONE, LAYER or "
                             f"BLOCK), got {bucketing_strategy!r}")
        if bucketing_strategy is not FSDPBucketingStrategy.NONE:
            raise NotImplementedError(f"fsdp: bucketing_strategy={bucketing_strategy} is not implemented yet; use "
                                      "FSDPBucketingStrategy.NONE")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be a positive number of all-gathers in flight, got {prefetch!r}")
        self.process_group = resolve_process_group(process_group, "thunder.distributed.fsdp")
        self.world_size = dist.get_world_size(self.process_group)
        self.rank = dist.get_rank(self.process_group)
        if broadcast_from is not None and not (isinstance(broadcast_from, int) and 0 <= broadcast_from < self.world_size):
            raise ValueError(f"broadcast_from must be a rank of the process group (0 to {self.world_size - 1}) or None, "
                             f"got {broadcast_from!r}")
        self.device = torch.device(device) if device is not None else _default_device()
        self.broadcast_from = broadcast_from
        self.sharding_strategy = sharding_strategy
        self.bucketing_strategy = bucketing_strategy
        self.move_state_dict_to_cpu = move_state_dict_to_cpu
        self.prefetch = prefetch
        self.shards: dict[int, ShardInfo] = {}  # id(shard parameter) -> how it is sharded

    def __repr__(self):
        return (f"FSDPTransform(sharding_strategy={self.sharding_strategy}, bucketing_strategy={self.bucketing_strategy},"
                f" world_size={self.world_size})")

    # -- sharding the module --------------------------------------------------------------------------
    def transform_module(self, compile_data):
        from thunder.distributed.ddp import DDPTransform

        module, jm = compile_data.module, compile_data.thunder_module
        if jm is None:
            raise TypeError("thunder.distributed.fsdp applies to a torch.nn.Module (or the ThunderModule of one), "
                            "not to a function")
        others = [t for t in compile_data.transforms if t is not self and isinstance(t, (DDPTransform, FSDPTransform))]
        if others:
            what = "fsdp was applied twice to the same module" if isinstance(others[0], FSDPTransform) else \
                "fsdp cannot be combined with ddp on the same module"
            raise RuntimeError(f"thunder.distributed.{what}")
        module.to(self.device)
        if self.broadcast_from is not None:
            broadcast_module_state(module, self.broadcast_from, self.process_group)
        for name, p in list(module.named_parameters()):
            if p.dim() == 0:
                raise NotImplementedError(f"fsdp shards parameters along dimension 0; the parameter {name!r} is a "
                                          "scalar (0-dimensional). Give it shape (1,) instead")
            with torch.no_grad():
                shard = torch.nn.Parameter(shard_rows(p.detach(), self.rank, self.world_size),
                                           requires_grad=p.requires_grad)
            jm.replace_module_tensor(name, shard)
            self.shards[id(shard)] = ShardInfo(name, tuple(p.shape), shard.shape[0])

    # -- tracing: the program sees whole parameters -------------------------------------------------------
    def _shard_info(self, source):
        if isinstance(source, ModuleTensorSource) and source.collection == "_parameters":
            return self.shards.get(id(source.module._parameters[source.name]))
        return None

    def transform_module_tensor(self, proxy, source, compilation):
        info = self._shard_info(source)
        if info is None:
            return proxy
        full = self._unshard(proxy, info)
        full._is_param = True  # isinstance(p, nn.Parameter) answers as in eager
        return full

    def _unshard(self, shard, info: ShardInfo):
        gathered = wait(all_gather(shard, self.process_group, True))
        return ltorch.narrow(gathered, 0, 0, info.shape[0]) if gathered.shape[0] != info.shape[0] else gathered

    # -- the backward --------------------------------------------------------------------------------------
    def transform_forward_backward(self, forward, backward, compilation):
        backward = self._average_gradients(backward)
        if self.sharding_strategy is FSDPType.ZERO3:
            backward = self._gather_again(backward, self._gathered_parameters(forward, compilation))
        return forward, backward

    def _gathered_parameters(self, forward, compilation) -> dict:
        """The forward's gathered parameters: name -> (its shard, ShardInfo)."""
        shards = {}
        for p in forward.params:
            info = self._shard_info(compilation.sources.get(getattr(p, "name", None)))
            if info is not None:
                shards[p.name] = (p, info)
        found, future_of, gathered_of = {}, {}, {}
        for bsym in forward.bound_symbols:
            if bsym.sym is all_gather and bsym.args[0].name in shards:
                future_of[bsym.output.name] = shards[bsym.args[0].name]
            elif bsym.sym is wait and bsym.args[0].name in future_of:
                gathered_of[bsym.output.name] = found[bsym.output.name] = future_of[bsym.args[0].name]
            elif bsym.sym is ltorch.narrow and bsym.args[0].name in gathered_of:
                found[bsym.output.name] = gathered_of[bsym.args[0].name]
        return found

    def _average_gradients(self, backward):
        """Multiplies each reduce-scatter's input by 1 / world size (the mean over ranks, as DDP)."""
        if self.world_size == 1:
            return backward
        new = backward.from_trace([])
        with tracectx(new):
            for bsym in backward.bound_symbols:
                if bsym.sym is reduce_scatter:
                    scaled = ltorch.mul(bsym.args[0], 1.0 / self.world_size)
                    bsym = bsym.replace(args=(scaled, *bsym.args[1:]))
                new.bound_symbols.append(bsym)
        return new

    def _gather_again(self, backward, shard_of: dict):
        """ZeRO3: the backward gathers each parameter it reads from its shard, instead of reading the forward's."""
        new = backward.from_trace([])
        mapping = {}
        with tracectx(new):
            for bsym in backward.bound_symbols:
                for a in bsym.flat_args:
                    name = getattr(a, "name", None)
                    if name in shard_of and name not in mapping:
                        mapping[name] = self._unshard(*shard_of[name])
                new.bound_symbols.append(substitute_bsym(bsym, mapping))
        return new

    def transform_executed(self, trace, compilation, kind):
        return schedule_gathers(trace, self.prefetch)

    # -- state dicts: model.state_dict() gives the local shards; loading takes shards or full tensors ------------
    def sharded_names(self, module: torch.nn.Module) -> dict[str, ShardInfo]:
        """State-dict key -> ShardInfo of each sharded parameter of ``module``, under every name it has (tied ones)."""
        return {name: self.shards[id(p)] for name, p in module.named_parameters(remove_duplicate=False)
                if id(p) in self.shards}

    def transform_loaded_state_dict(self, state_dict, thunder_module):
        names = self.sharded_names(thunder_module)
        loaded = collections.OrderedDict(state_dict)
        metadata = getattr(state_dict, "_metadata", None)
        if metadata is not None:  # the modules' state-dict versions, which load_state_dict reads
            loaded._metadata = metadata
        for key, info in names.items():
            if key in loaded:
                loaded[key] = self.local_shard(key, loaded[key], info)
        return loaded

    def local_shard(self, key: str, value: torch.Tensor, info: ShardInfo) -> torch.Tensor:
        """This rank's shard of the parameter ``key`` given as its full tensor, or ``value`` when it is the shard.
        A full shape equal to the shard's (one row, or one rank) is taken as full: the other rows are padding."""
        shard_shape = (info.rows_per_rank, *info.shape[1:])
        if tuple(value.shape) == info.shape:
            return shard_rows(value, self.rank, self.world_size)
        if tuple(value.shape) != shard_shape:
            raise ValueError(f"load_state_dict: {key!r} has shape {tuple(value.shape)}, but this FSDP-sharded module "
                             f"takes the full parameter, of shape {info.shape}, or this rank's shard of it, of shape "
                             f"{shard_shape} (world size {self.world_size}); a shard saved with another world size "
                             "cannot be loaded: load the full state dict instead (or a thunder.distributed.checkpoint "
                             "directory, which any world size can load)")
        return value


def fsdp(model: torch.nn.Module, *, device=None, broadcast_from: int | None = None,
         sharding_strategy: FSDPType = FSDPType.ZERO2, bucketing_strategy: FSDPBucketingStrategy = FSDPBucketingStrategy.NONE,
         process_group=None, move_state_dict_to_cpu: bool = False) -> torch.nn.Module:
    """Shards ``model``'s parameters over the ranks of ``process_group``: ``thunder.jit(fsdp(model))`` and
    ``fsdp(thunder.jit(model))`` give a ``ThunderModule`` whose traces gather parameters and reduce-scatter
    gradients (see ``FSDPTransform``). ``device=None``: the current CUDA device when CUDA is available, else
    the CPU. Returns ``model`` (sharded when it is a ThunderModule; at ``thunder.jit`` otherwise)."""
    import thunder
    from thunder.driver.module import ThunderModule
    from thunder.transforms.base import request_transform, requested_transforms

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"thunder.distributed.fsdp expects a torch.nn.Module or a ThunderModule, got {type(model).__name__}")
    transform = FSDPTransform(device=device, broadcast_from=broadcast_from, sharding_strategy=sharding_strategy,
                              bucketing_strategy=bucketing_strategy, process_group=process_group,
                              move_state_dict_to_cpu=move_state_dict_to_cpu)
    if isinstance(model, ThunderModule):
        thunder.add_transform(model, transform)
        return model
    from thunder.distributed.ddp import DDPTransform

    for t in requested_transforms(model):
        if isinstance(t, FSDPTransform):
            raise RuntimeError("thunder.distributed.fsdp was applied twice to the same module")
        if isinstance(t, DDPTransform):
            raise RuntimeError("thunder.distributed.fsdp cannot be combined with ddp on the same module")
    request_transform(model, transform)
    return model
