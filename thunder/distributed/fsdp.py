"""Sharded data parallelism as a trace transform.

``FSDPTransform`` replaces each parameter of the module by its local shard: rows ``rank * n`` to
``(rank + 1) * n`` of the parameter padded with zero rows to a multiple of the world size along dimension 0.
A standard optimizer over ``model.parameters()`` then holds 1/world_size of the state. A model built on the
meta device is materialized one submodule at a time and sharded as it goes.

While tracing, the shards become the whole parameters the program sees through an asynchronous
``all_gather`` and its ``wait`` (and ``narrow`` when padded). With bucketing (LAYER: per module holding
parameters; BLOCK: per block of the model's top-level ``ModuleList``), one all-gather moves a bucket's shards
laid end to end, and each parameter is a slice of the result. Autodiff differentiates that: the gradient of
an all-gather is a reduce-scatter, so the backward reduce-scatters each bucket's gradient into the shards'
gradients, pre-divided by the world size (the average over ranks, as DDP). Then:

- ZeRO2 keeps the gathered parameters from the forward for the backward;
- ZeRO3 saves only the shards and the backward gathers again what it reads, so each gathered parameter
  lives from its gather to its last use in one of the two traces;
- under ``no_sync`` the backward adds each bucket's whole gradient to what accumulated locally instead of
  reducing it, and the shards get no gradient; the next backward outside the context adds the accumulated
  gradient to its own and reduce-scatters the sum once.

After the executors, ``schedule_gathers`` issues each all-gather at most ``prefetch`` gathers ahead of its
use, each wait just before its first use, and each reduce-scatter as soon as its gradient is ready,
waited for at the end of the backward.

Ranks must gather and reduce the same parameters in the same order: each forward, and each backward that
communicates, starts by checking that they do (``check_same_plan``, see [Note: ranks that trace different
programs] in thunder/distributed/prims.py).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import math
import weakref

import torch
import torch.distributed as dist

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Tag
from thunder.core.trace import tracectx
from thunder.extend import declare_primitive
from thunder.distributed.prims import all_gather, check_same_plan, plan_id, reduce_scatter, wait
from thunder.distributed.scheduling import schedule_gathers
from thunder.distributed.state import broadcast_module_state, resolve_process_group
from thunder.driver.frontend import ModuleTensorSource
from thunder.transforms.base import Transform
from thunder.transforms.dce import dce


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


def _top_level_blocks(module: torch.nn.Module) -> list:
    lists = [(name.count("."), name, m) for name, m in module.named_modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ValueError("FSDPBucketingStrategy.BLOCK buckets the blocks of the model's top-level torch.nn.ModuleList, "
                         f"and {type(module).__name__} has none: pass the blocks (fsdp(..., blocks=[...])) or use LAYER")
    _, _, blocks = min(lists, key=lambda x: (x[0], x[1]))
    return list(blocks)


def plan_buckets(module: torch.nn.Module, strategy: FSDPBucketingStrategy, blocks=None) -> dict:
    """Parameter name -> bucket index: one per parameter (NONE), per module holding parameters (LAYER), per
    block and, outside the blocks, per module holding parameters (BLOCK); split by dtype and requires_grad."""
    prefixes = {}
    if strategy is FSDPBucketingStrategy.BLOCK:
        chosen = list(blocks) if blocks is not None else _top_level_blocks(module)
        names = {id(m): n for n, m in module.named_modules()}
        for b in chosen:
            if id(b) not in names:
                raise ValueError(f"fsdp blocks: {type(b).__name__} is not a submodule of {type(module).__name__}")
            prefixes[names[id(b)] + "."] = names[id(b)]
    plan, keys = {}, {}
    for name, p in module.named_parameters():
        if strategy is FSDPBucketingStrategy.NONE:
            group = name
        else:
            group = next((block for prefix, block in prefixes.items() if name.startswith(prefix)), None)
            if group is None:
                group = "module:" + name.rpartition(".")[0]
        key = (group, p.dtype, p.requires_grad)
        plan[name] = keys.setdefault(key, len(keys))
    return plan


# The modules whose parameters an FSDPTransform replaced by shards (a table beside them, not attributes on them):
# functions given such a module rather than its ThunderModule can then refuse it instead of taking shards for
# whole parameters.
SHARDED_MODULES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class FSDPTransform(Transform):
    """Shards the jitted module's parameters over the ranks of ``process_group`` (see the module docstring)."""

    def __init__(self, *, device=None, broadcast_from: int | None = None, sharding_strategy=FSDPType.ZERO2,
                 bucketing_strategy=FSDPBucketingStrategy.NONE, process_group=None, move_state_dict_to_cpu=False,
                 prefetch: int = 2, blocks=None):
        if not isinstance(sharding_strategy, FSDPType):
            raise ValueError(f"sharding_strategy must be a thunder.distributed.FSDPType (ZERO2 or ZERO3), got "
                             f"{sharding_strategy!r}")
        if not isinstance(bucketing_strategy, FSDPBucketingStrategy):
            raise ValueError("bucketing_strategy must be a thunder.distributed.FSDPBucketingStrategy (NONE, LAYER or "
                             f"BLOCK), got {bucketing_strategy!r}")
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
        self.blocks = blocks  # BLOCK bucketing: these submodules (default: the model's top-level ModuleList)
        self.shards: dict[int, ShardInfo] = {}  # id(shard parameter) -> how it is sharded
        self.bucket_of: dict[str, int] = {}  # parameter name -> its bucket (one collective per bucket)
        self.unsynced = UnsyncedGradients()

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
        sharded_by = SHARDED_MODULES.get(module)
        if sharded_by is self:  # a new ThunderModule of the module this transform sharded: its shards are in place
            return
        if sharded_by is not None:
            raise RuntimeError(f"thunder.distributed.fsdp: the parameters of this {type(module).__name__} are already "
                               "shards (another fsdp sharded it); sharding them again would train slices of slices. "
                               "Apply fsdp to the module once, or to a new instance of it")
        self.bucket_of = plan_buckets(module, self.bucketing_strategy, self.blocks)
        SHARDED_MODULES[module] = self
        if any(t.is_meta for t in (*module.parameters(), *module.buffers())):
            self._materialize_and_shard(module, jm)
            return
        module.to(self.device)
        if self.broadcast_from is not None:
            broadcast_module_state(module, self.broadcast_from, self.process_group)
        for name, p in list(module.named_parameters()):
            self._shard(jm, name, p)

    def _shard(self, jm, name: str, p: torch.Tensor) -> None:
        if p.dim() == 0:
            raise NotImplementedError(f"fsdp shards parameters along dimension 0; the parameter {name!r} is a "
                                      "scalar (0-dimensional). Give it shape (1,) instead")
        with torch.no_grad():
            shard = torch.nn.Parameter(shard_rows(p.detach(), self.rank, self.world_size), requires_grad=p.requires_grad)
        jm.replace_module_tensor(name, shard)
        self.shards[id(shard)] = ShardInfo(name, tuple(p.shape), shard.shape[0])

    def _materialize_and_shard(self, module, jm) -> None:
        """A model built on the meta device gets its tensors one submodule at a time: empty tensors on the device,
        initialized by the submodule's ``reset_parameters`` (broadcast from ``broadcast_from`` when set), each
        parameter sharded as soon as every submodule holding it is done, so the whole model is never held."""
        names = {id(p): n for n, p in module.named_parameters()}
        holders: dict = {}
        for _, m in module.named_modules():
            for t in (*m._parameters.values(), *m._buffers.values()):
                if t is not None and t.is_meta:
                    holders[id(t)] = holders.get(id(t), 0) + 1
        made: dict = {}  # id(meta tensor) -> the tensor it became
        for qualname, m in module.named_modules():
            metas = [(d, k, t) for d in (m._parameters, m._buffers) for k, t in d.items() if t is not None and t.is_meta]
            if not metas:
                continue
            if not callable(getattr(m, "reset_parameters", None)):
                raise TypeError(
                    f"fsdp cannot materialize the submodule {qualname or '(the model)'!r} ({type(m).__name__}) created on "
                    f"the meta device: it has no reset_parameters() to initialize {', '.join(k for _, k, _ in metas)}. "
                    "Give it a reset_parameters method, or create the model on a real device")
            for d, k, t in metas:
                if id(t) not in made:
                    empty = torch.empty_like(t, device=self.device)
                    made[id(t)] = torch.nn.Parameter(empty, t.requires_grad) if isinstance(t, torch.nn.Parameter) else empty
                d[k] = made[id(t)]
            with torch.no_grad():
                m.reset_parameters()
            for d, k, t in metas:
                holders[id(t)] -= 1
                if holders[id(t)] == 0:
                    if self.broadcast_from is not None:
                        dist.broadcast(made[id(t)].detach(), group=self.process_group, group_src=self.broadcast_from)
                    if id(t) in names:
                        self._shard(jm, names[id(t)], made[id(t)])
        for name, p in list(module.named_parameters()):  # parameters that were not on the meta device
            if id(p) not in self.shards:
                self._shard(jm, name, p.to(self.device))

    # -- tracing: the program sees whole parameters -------------------------------------------------------
    def _shard_info(self, source):
        if isinstance(source, ModuleTensorSource) and source.collection == "_parameters":
            return self.shards.get(id(source.module._parameters[source.name]))
        return None

    def transform_module_tensors(self, tensors, compilation):
        seen = list(tensors)
        buckets: dict = {}
        for i, (proxy, source) in enumerate(tensors):
            info = self._shard_info(source)
            if info is not None:
                buckets.setdefault(self.bucket_of[info.name], []).append((i, proxy, info))
        for items in buckets.values():
            fulls = self._unshard([(proxy, info) for _, proxy, info in items])
            for (i, _, _), full in zip(items, fulls):
                full._is_param = True  # isinstance(p, nn.Parameter) answers as in eager
                seen[i] = (full, seen[i][1])
        return [proxy for proxy, _ in seen]

    def _unshard(self, shards: list) -> list:
        """The whole parameters of one bucket's shards: one all-gather of the shards laid end to end."""
        if len(shards) == 1:
            (shard, info), = shards
            gathered = wait(all_gather(shard, self.process_group, True))
            return [ltorch.narrow(gathered, 0, 0, info.shape[0]) if gathered.shape[0] != info.shape[0] else gathered]
        flat = ltorch.cat([ltorch.reshape(shard, (-1,)) for shard, _ in shards])
        gathered = ltorch.reshape(wait(all_gather(flat, self.process_group, True)), (self.world_size, flat.shape[0]))
        fulls, offset = [], 0
        for shard, info in shards:
            n = shard.numel()
            rows = ltorch.reshape(ltorch.narrow(gathered, 1, offset, n), (self.world_size * shard.shape[0], *shard.shape[1:]))
            fulls.append(ltorch.narrow(rows, 0, 0, info.shape[0]) if rows.shape[0] != info.shape[0] else rows)
            offset += n
        return fulls

    # -- every rank must issue the same collectives (see [Note: ranks that trace different programs]) ---------
    def transform_computation(self, trace, compilation):
        return self._checked(trace, self._collective_plan(trace, compilation), "parameters to gather")

    def _checked(self, trace, plan: list, what: str):
        """``trace`` starting with the check that every rank's ``plan`` (of the collectives that follow) is this one."""
        new = trace.from_trace([])
        with tracectx(new):
            check_same_plan(plan_id(plan), self.process_group, str(self.device), what)
        new.bound_symbols.extend(trace.bound_symbols)
        return new

    def _collective_plan(self, trace, compilation, scatter_buckets=()) -> list:
        """What the collectives of ``trace`` move, in order, in terms no rank-local detail of the trace changes: the
        parameters an all-gather gathers (the shards its input is made of), the bucket a reduce-scatter reduces
        (``scatter_buckets``, in the order of the trace's reduce-scatters), with shapes and dtypes."""
        producer = {o.name: b for b in trace.bound_symbols for o in b.flat_outs}
        scatters = iter(scatter_buckets)
        plan = []
        for bsym in trace.bound_symbols:
            if bsym.sym is all_gather:
                names, stack, seen = [], [bsym.args[0]], set()
                while stack:
                    p = stack.pop()
                    if p.name in seen:
                        continue
                    seen.add(p.name)
                    info = self._shard_info(compilation.sources.get(p.name))
                    if info is not None:
                        names.append(info.name)
                    elif p.name in producer:
                        stack.extend(a for a in producer[p.name].flat_args if isinstance(a, TensorProxy))
                plan.append(("gather", tuple(sorted(names)), tuple(bsym.args[0].shape), str(bsym.args[0].dtype)))
            elif bsym.sym is reduce_scatter:
                plan.append(("scatter", next(scatters, None), tuple(bsym.args[0].shape), str(bsym.args[0].dtype)))
        return plan

    # -- the backward --------------------------------------------------------------------------------------
    def transform_forward_backward(self, forward, backward, compilation):
        shard_grads = self._shard_gradients(backward, compilation)
        scatter_buckets = [shard_grads[id(b)][0] for b in backward.bound_symbols
                           if b.sym is reduce_scatter and id(b) in shard_grads]
        chain = self._unshard_chain(forward, compilation)
        backward = self._drop_gradients_of_unused(forward, backward, compilation, chain)
        no_sync = compilation.read_state(compilation.compile_data, "no_sync")
        if no_sync:
            backward = self._accumulate_locally(backward, shard_grads)
        else:
            take = compilation.read_state(self.unsynced, "pending")
            backward = self._average_gradients(backward, shard_grads, take)
        if self.sharding_strategy is FSDPType.ZERO3:
            backward = self._gather_again(backward, chain)
        if not (no_sync and self.sharding_strategy is FSDPType.ZERO2):  # (which communicates nothing on any rank)
            backward = self._checked(backward, self._collective_plan(backward, compilation, scatter_buckets),
                                     "gradients to reduce and parameters to gather")
        return forward, backward

    def _shard_gradients(self, backward, compilation) -> dict:
        """Each reduce-scatter of the backward -> the bucket it reduces and the backward outputs (shard
        gradients) computed from its result. One pass: each value records the reduce-scatters it comes from."""
        ret = backward.bound_symbols[-1]
        outputs = {g.name: i for i, g in enumerate(ret.args[0]) if isinstance(g, TensorProxy)}
        origin: dict = {}  # value name -> ids of the reduce-scatters it is computed from
        derived: dict = {}  # reduce-scatter id -> the names computed from its result
        scatters = []
        for bsym in backward.bound_symbols[:-1]:
            sources = frozenset().union(*(origin.get(a.name, ()) for a in bsym.flat_args))
            if bsym.sym is reduce_scatter:
                scatters.append(bsym)
                derived[id(bsym)] = set()
                sources = sources | {id(bsym)}
            if sources:
                for o in bsym.flat_outs:
                    origin[o.name] = sources
                    for k in sources:
                        derived[k].add(o.name)
        found = {}
        for bsym in scatters:
            names_of = derived[id(bsym)]
            out_positions = sorted(i for name, i in outputs.items() if name in names_of)
            names = [compilation.parameter_name(compilation.grad_inputs[i]) for i in out_positions]
            found[id(bsym)] = (self.bucket_of[names[0]], out_positions, names_of)
        return found

    def _drop_gradients_of_unused(self, forward, backward, compilation, chain):
        """A parameter gathered with its bucket but not used by the program gets no gradient (as without buckets)."""
        used = {a.name for b in forward.bound_symbols if id(b) not in chain.bsym_ids for a in b.flat_args}
        unused = {i for i, p in enumerate(compilation.grad_inputs)
                  if getattr(p, "name", None) in chain.full_of_shard and chain.full_of_shard[p.name] not in used}
        if not unused:
            return backward
        ret = backward.bound_symbols[-1]
        grads = tuple(None if i in unused else g for i, g in enumerate(ret.args[0]))
        return dce(backward.from_trace([*backward.bound_symbols[:-1], ret.replace(args=(grads,))]))

    def _average_gradients(self, backward, shard_grads: dict, take: bool):
        """Multiplies each reduce-scatter's input by 1 / world size (the mean over ranks, as DDP), after adding
        what accumulated under ``no_sync`` when some did (``take``)."""
        if self.world_size == 1 and not take:
            return backward
        new = backward.from_trace([])
        with tracectx(new):
            for bsym in backward.bound_symbols:
                if bsym.sym is reduce_scatter and id(bsym) in shard_grads:
                    full = bsym.args[0]
                    if take:
                        full = take_unsynced(self.unsynced, shard_grads[id(bsym)][0], full)
                    if self.world_size != 1:
                        full = ltorch.mul(full, 1.0 / self.world_size)
                    bsym = bsym.replace(args=(full, *bsym.args[1:]))
                new.bound_symbols.append(bsym)
        return new

    def _accumulate_locally(self, backward, shard_grads: dict):
        """``no_sync``: each bucket's whole gradient is added to what accumulated locally; no communication, and
        no gradient for the shards until the first backward outside the context."""
        dropped, none_at = set(), set()
        new = backward.from_trace([])
        with tracectx(new):
            for bsym in backward.bound_symbols[:-1]:
                if bsym.sym is reduce_scatter and id(bsym) in shard_grads:
                    bucket, positions, derived = shard_grads[id(bsym)]
                    accumulate_unsynced(self.unsynced, bucket, bsym.args[0])
                    dropped |= derived
                    none_at.update(positions)
                    continue
                if any(o.name in dropped for o in bsym.flat_outs):
                    continue
                new.bound_symbols.append(bsym)
            ret = backward.bound_symbols[-1]
            grads = tuple(None if i in none_at else g for i, g in enumerate(ret.args[0]))
            new.bound_symbols.append(ret.replace(args=(grads,)))
        return dce(new)

    def _unshard_chain(self, forward, compilation) -> "_UnshardChain":
        return _UnshardChain(forward, {p.name for p in forward.params
                                       if self._shard_info(compilation.sources.get(getattr(p, "name", None)))})

    def _gather_again(self, backward, chain):
        """ZeRO3: the backward computes each gathered parameter it reads again from the shards (the same
        all-gather and reshaping as the forward's), instead of reading the forward's."""
        new = backward.from_trace([])
        emitted: set = set()

        def emit(name):
            bsym = chain.producer.get(name)
            if bsym is None or id(bsym) in emitted:
                return
            for a in bsym.flat_args:
                emit(a.name)
            emitted.add(id(bsym))
            new.bound_symbols.append(bsym)

        for bsym in backward.bound_symbols:
            for a in bsym.flat_args:
                emit(a.name)
            new.bound_symbols.append(bsym)
        return new

    def transform_executed(self, trace, compilation, kind):
        return schedule_gathers(trace, self.prefetch)

    # -- state dicts: model.state_dict() gives the local shards; loading takes shards or full tensors ------------
    def sharded_names(self, module: torch.nn.Module) -> dict[str, ShardInfo]:
        """State-dict key -> ShardInfo of each sharded parameter of ``module``, under every name it has (tied ones)."""
        return {name: self.shards[id(p)] for name, p in module.named_parameters(remove_duplicate=False)
                if id(p) in self.shards}

    def transform_state_dict(self, state_dict, thunder_module):
        """``model.state_dict()``: this rank's shards, moved to the CPU with ``move_state_dict_to_cpu``."""
        if not self.move_state_dict_to_cpu:
            return state_dict
        moved = collections.OrderedDict((k, v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in state_dict.items())
        moved._metadata = getattr(state_dict, "_metadata", None)
        return moved

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


# what turns shards into whole parameters (fsdp's _unshard records only these)
_UNSHARD_OPS = frozenset({all_gather, wait, ltorch.cat, ltorch.reshape, ltorch.narrow})


class _UnshardChain:
    """The statements of a forward trace that turn shards into whole parameters (all-gathers, waits and the
    reshaping, slicing and concatenation around them), and which whole parameter each shard becomes."""

    def __init__(self, forward, shard_names: set):
        # what each value of the chain holds: a shard's name, or for a bucket the (offset, numel, shard) of each
        root: dict = {name: name for name in shard_names}
        self.producer: dict = {}
        self.bsym_ids: set = set()
        for bsym in forward.bound_symbols:
            args = [a.name for a in bsym.flat_args]
            if not (bsym.sym in _UNSHARD_OPS and args and all(a in root for a in args)):
                continue
            self.bsym_ids.add(id(bsym))
            out = bsym.output.name
            self.producer[out] = bsym
            if bsym.sym is ltorch.cat:
                offsets = [0]
                for piece in bsym.args[0]:
                    offsets.append(offsets[-1] + piece.numel())
                root[out] = tuple((o, root[piece.name]) for o, piece in zip(offsets, bsym.args[0]))
            elif bsym.sym is ltorch.narrow and bsym.args[1] == 1 and isinstance(root[args[0]], tuple):
                root[out] = dict(root[args[0]])[bsym.args[2]]  # a bucket's slice: the shard at that offset
            else:
                root[out] = root[args[0]]
        read = {a.name for b in forward.bound_symbols if id(b) in self.bsym_ids for a in b.flat_args}
        self.full_of_shard = {root[name]: name for name in self.producer
                              if name not in read and isinstance(root[name], str)}





class UnsyncedGradients:
    """Whole-size gradients accumulated under ``no_sync``, by bucket, until the next synchronizing backward."""

    trace_name = "unsynced_grads"

    def __init__(self):
        self.grads: dict = {}
        self.pending = False  # whether some accumulated (read by the prologue: the next backward adds them)


def _accumulate_impl(store: UnsyncedGradients, bucket: int, grad):
    held = store.grads.get(bucket)
    store.grads[bucket] = grad if held is None else held + grad
    store.pending = True


def _take_impl(store: UnsyncedGradients, bucket: int, grad):
    held = store.grads.pop(bucket, None)
    if not store.grads:
        store.pending = False
    return grad if held is None else held + grad


_accumulate_impl.__name__ = "accumulate_unsynced"
_take_impl.__name__ = "take_unsynced"
accumulate_unsynced = declare_primitive("accumulate_unsynced", lambda store, bucket, grad: None,
                                        torch_impl=_accumulate_impl, tags=(Tag.SIDE_EFFECT,))
take_unsynced = declare_primitive(
    "take_unsynced", lambda store, bucket, grad: prims.new_tensor(grad.shape, grad.dtype, grad.device),
    torch_impl=_take_impl, tags=(Tag.SIDE_EFFECT,))


def fsdp(model: torch.nn.Module, *, device=None, broadcast_from: int | None = None,
         sharding_strategy: FSDPType = FSDPType.ZERO2, bucketing_strategy: FSDPBucketingStrategy = FSDPBucketingStrategy.NONE,
         process_group=None, move_state_dict_to_cpu: bool = False, blocks=None) -> torch.nn.Module:
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
                              move_state_dict_to_cpu=move_state_dict_to_cpu, blocks=blocks)
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
