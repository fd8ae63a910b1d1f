"""What a thunder strategy does to the model, shared by the Trainer's and Fabric's strategies.

``ThunderOptions`` holds the strategy's configuration, validated when the strategy is constructed.
``setup_thunder_module(module, options, device)`` turns the module into what the strategy trains: with
``jit=True`` a ``ThunderModule`` of it (``thunder.jit``) with the data-parallel transform; with ``jit=False`` the
module itself, whose ``ThunderModule`` parts (jitted by the user, e.g. ``self.model = thunder.jit(GPT())``) get the
transform. Either way every parameter that requires grad must be in a jitted module: gradients computed
outside thunder's traces would not be synchronized.
"""
from __future__ import annotations

import dataclasses
import enum
import numbers
import weakref

import torch

import thunder
from thunder.driver.module import ThunderModule


class Parallelism(enum.Enum):
    NONE = "none"  # one process: thunder.jit only
    DDP = "ddp"  # thunder.distributed.ddp: gradients all-reduced in the backward trace
    FSDP = "fsdp"  # thunder.distributed.fsdp: parameters sharded over the processes


class StateDictType(enum.Enum):
    FULL = "full"  # checkpoints hold whole tensors (rank 0 writes one file)
    SHARDED = "sharded"  # FSDP: every rank writes its part into a checkpoint directory


class _Default:
    def __repr__(self):
        return "default"


DEFAULT = _Default()  # an option left to its default (a value of its own: None means "no broadcast")


def _enum(kind: type, value, what: str):
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        for member in kind:
            if value.lower() in (member.name.lower(), str(member.value).lower()):
                return member
    names = ", ".join(repr(m.name.lower()) for m in kind)
    raise ValueError(f"{what} must be one of {names} (or a {kind.__qualname__}), got {value!r}")


@dataclasses.dataclass(frozen=True)
class ThunderOptions:
    """The configuration of a thunder strategy (see ``ThunderStrategy`` for what each option means)."""

    parallelism: Parallelism
    executors: tuple | None
    jit: bool
    state_dict_type: StateDictType
    transform_options: tuple  # (name, value) pairs given to DDPTransform / FSDPTransform

    @staticmethod
    def parse(*, parallelism, executors, jit, state_dict_type, bucket_size_in_mb, sharding_strategy,
              bucketing_strategy, broadcast_from) -> "ThunderOptions":
        from thunder.distributed import FSDPBucketingStrategy, FSDPType

        kind = _enum(Parallelism, parallelism, "parallelism")
        if not isinstance(jit, bool):
            raise TypeError(f"jit must be True or False, got {jit!r}")
        if executors is not None and not jit:
            raise ValueError("executors are given to thunder.jit, which the strategy does not call with jit=False: pass "
                             "them to your own thunder.jit(...) call, or use jit=True")
        given = {"bucket_size_in_mb": bucket_size_in_mb, "sharding_strategy": sharding_strategy,
                 "bucketing_strategy": bucketing_strategy, "broadcast_from": broadcast_from}
        allowed = {Parallelism.NONE: (), Parallelism.DDP: ("bucket_size_in_mb", "broadcast_from"),
                   Parallelism.FSDP: ("sharding_strategy", "bucketing_strategy", "broadcast_from")}[kind]
        stray = [k for k, v in given.items() if v is not DEFAULT and k not in allowed]
        if stray:
            raise ValueError(f"{', '.join(stray)} {'does' if len(stray) == 1 else 'do'} not apply to "
                             f"parallelism={kind.value!r} (options of {kind.value}: {', '.join(allowed) or 'none'})")
        chosen = {k: v for k, v in given.items() if v is not DEFAULT}
        if kind is Parallelism.FSDP:  # as DDP: every rank starts from rank 0's weights, however it initialized them
            chosen.setdefault("broadcast_from", 0)
        if "sharding_strategy" in chosen:
            chosen["sharding_strategy"] = _enum(FSDPType, chosen["sharding_strategy"], "sharding_strategy")
        if "bucketing_strategy" in chosen:
            chosen["bucketing_strategy"] = _enum(FSDPBucketingStrategy, chosen["bucketing_strategy"],
                                                 "bucketing_strategy")
        size = chosen.get("bucket_size_in_mb", 0)
        if isinstance(size, bool) or not isinstance(size, numbers.Real) or not size >= 0:
            raise ValueError(f"bucket_size_in_mb must be a non-negative number of megabytes, got {size!r}")
        source = chosen.get("broadcast_from")
        if source is not None and (isinstance(source, bool) or not isinstance(source, int) or source < 0):
            raise ValueError(f"broadcast_from must be a rank (an int >= 0) or None, got {source!r}")
        sd_type = _enum(StateDictType, state_dict_type, "state_dict_type")
        if sd_type is StateDictType.SHARDED and kind is not Parallelism.FSDP:
            raise ValueError("state_dict_type='sharded' applies to parallelism='fsdp', whose parameters are sharded; "
                             f"with parallelism={kind.value!r} every rank holds whole tensors: use 'full'")
        execs = tuple(executors) if isinstance(executors, (list, tuple)) else executors
        return ThunderOptions(kind, execs, jit, sd_type, tuple(sorted(chosen.items())))

    def make_transform(self, device: torch.device):
        """The data-parallel transform (None for NONE); torch.distributed must be initialized."""
        from thunder.distributed import DDPTransform, FSDPTransform

        if self.parallelism is Parallelism.DDP:
            return DDPTransform(**dict(self.transform_options))
        if self.parallelism is Parallelism.FSDP:
            return FSDPTransform(device=device, **dict(self.transform_options))
        return None


# [Note: what a strategy made of a module]
# A LightningModule given to a second Trainer (fit, then test) is set up once: with fsdp its parameters are shards
# that only that set-up knows how to use. ``_SET_UP`` maps the module (weakly) to a ``SetUp``, which must not
# hold the module strongly either: the ThunderModule holds the module, so a table holding the ThunderModule would
# keep every model ever fitted alive (with its process group, past the group's end). The ThunderModule and the
# parts are held weakly (by the strategy that trains them, strongly); the data-parallel transform strongly (it
# holds no module). Once the ThunderModule is gone with its Trainer, a new set-up jits the module again with the
# same transform: fsdp adopts the shards it made instead of sharding them again.
@dataclasses.dataclass(eq=False)
class SetUp:
    options: ThunderOptions
    transform: object  # the data-parallel transform of a jit=True set-up (None: none, or jit=False)
    result: weakref.ref  # what the strategy trains in place of the module
    parts: list  # weak references to the ThunderModules trained

    def alive(self):
        """(what the strategy trains, its ThunderModules), or None once they are gone."""
        result, parts = self.result(), [ref() for ref in self.parts]
        return None if result is None or any(p is None for p in parts) else (result, parts)


_SET_UP: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def set_up_parts() -> list:
    """The ThunderModules of every module a thunder strategy has set up that are alive."""
    return [part for held in list(_SET_UP.values()) if (alive := held.alive()) for part in alive[1]]


def jitted_parts(module: torch.nn.Module) -> list[ThunderModule]:
    """The outermost ThunderModules among ``module`` and its submodules."""
    if isinstance(module, ThunderModule):
        return [module]
    found, inside = [], set()
    for m in module.modules():
        if isinstance(m, ThunderModule) and id(m) not in inside:
            found.append(m)
            inside.update(id(x) for x in m.modules())
    return found


def setup_thunder_module(module: torch.nn.Module, options: ThunderOptions, device: torch.device):
    """What the strategy trains in place of ``module`` (see the module docstring) and the ThunderModules in it
    (see [Note: what a strategy made of a module])."""
    held = _SET_UP.get(module)
    if held is not None:
        if held.options != options:
            raise RuntimeError(f"this {type(module).__name__} was already set up by a thunder strategy with other options "
                               f"({held.options}); its parameters are held as that setup arranged (sharded, say). Use the "
                               "same strategy options, or a new instance of the module")
        alive = held.alive()
        if alive is not None:
            return alive
    transform = None
    if options.jit:
        transform = held.transform if held is not None else options.make_transform(device)
        result = _jit(module, options, transform)
        parts = [result]
    else:
        result, parts = module, jitted_parts(module)
        if not parts and options.parallelism is not Parallelism.NONE:
            raise ValueError(f"jit=False: the strategy adds thunder.distributed.{options.parallelism.value} to the "
                             f"ThunderModules in the model, and {type(module).__name__} has none. Jit the model "
                             "(or its inner module: self.model = thunder.jit(...)) yourself, or use jit=True")
        for part in parts:
            part_transform = options.make_transform(device)
            if part_transform is not None:
                thunder.add_transform(part, part_transform)
    _check_covered(module, parts, options)
    _SET_UP[module] = SetUp(options, transform, weakref.ref(result), [weakref.ref(p) for p in parts])
    return result, parts


def _jit(module: torch.nn.Module, options: ThunderOptions, transform) -> ThunderModule:
    if isinstance(module, ThunderModule):
        if transform is not None:
            thunder.add_transform(module, transform)
        return module
    inner = jitted_parts(module)
    if inner:
        raise ValueError(f"{type(module).__name__} holds modules that are already jitted ({len(inner)} ThunderModule(s)); "
                         "with jit=True the strategy jits the whole module. Pass jit=False to have the strategy add "
                         "the data-parallel transform to your ThunderModules instead")
    return thunder.jit(module, executors=options.executors, transforms=[transform] if transform is not None else None)


def _check_covered(module: torch.nn.Module, parts: list, options: ThunderOptions) -> None:
    if options.parallelism is Parallelism.NONE:
        return
    covered = {id(p) for part in parts for p in part.parameters()}
    outside = [n for n, p in module.named_parameters() if p.requires_grad and id(p) not in covered]
    if outside:
        more = f" (and {len(outside) - 5} more)" if len(outside) > 5 else ""
        raise ValueError(f"parameters of {type(module).__name__} outside the jitted modules would not be synchronized "
                         f"by thunder.distributed.{options.parallelism.value}: {', '.join(outside[:5])}{more}. Put "
                         "them in a jitted module, freeze them (requires_grad=False), or use jit=True")


def has_meta_tensors(module: torch.nn.Module) -> bool:
    """Whether the module was built on the meta device (``init_module(empty_init=True)`` with fsdp)."""
    return any(t.is_meta for t in (*module.parameters(), *module.buffers()))


def no_sync_context(parts: list):
    """One context that disables gradient synchronization in every jitted part."""
    import contextlib

    stack = contextlib.ExitStack()
    for part in parts:
        stack.enter_context(part.no_sync())
    return stack


def thunder_module(obj) -> ThunderModule:
    """The ThunderModule a thunder strategy trains, for ``thunder.last_traces`` and the other queries: of a Trainer
    (``trainer``), of Fabric's wrapper (what ``fabric.setup`` returned), or of a module a strategy set up."""
    strategy = getattr(obj, "strategy", None)
    if strategy is not None and hasattr(strategy, "thunder_module"):
        return strategy.thunder_module
    inner = getattr(obj, "_forward_module", None)  # Fabric's wrapper
    if isinstance(inner, ThunderModule):
        return inner
    if isinstance(obj, ThunderModule):
        return obj
    alive = held.alive() if isinstance(obj, torch.nn.Module) and (held := _SET_UP.get(obj)) is not None else None
    if alive is not None and len(alive[1]) == 1:
        return alive[1][0]
    raise TypeError(f"{type(obj).__name__} is not a Trainer, Fabric module or module that a thunder strategy set up "
                    "with one ThunderModule (with jit=False, query your own ThunderModules)")
