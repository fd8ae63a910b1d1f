"""The strategy names registered with Lightning when ``thunder.lightning`` is imported."""
from __future__ import annotations

from lightning.fabric.strategies import STRATEGY_REGISTRY as FABRIC_REGISTRY
from lightning.pytorch.strategies import StrategyRegistry as TRAINER_REGISTRY

# name -> (parallelism, description); each is registered with the Trainer and with Fabric
STRATEGY_NAMES = {
    "thunder": ("none", "thunder.jit on one device"),
    "thunder_ddp": ("ddp", "thunder.jit with thunder.distributed.ddp (gradients all-reduced in the backward trace)"),
    "thunder_fsdp": ("fsdp", "thunder.jit with thunder.distributed.fsdp (parameters sharded over the processes)"),
}


def register_strategies() -> None:
    """Registers ``STRATEGY_NAMES`` in both Lightning registries (again after a reload of this package; a name that
    something else registered is left alone, with an error)."""
    from thunder.lightning.fabric import ThunderFabricStrategy
    from thunder.lightning.trainer import ThunderStrategy

    for registry, cls in ((TRAINER_REGISTRY, ThunderStrategy), (FABRIC_REGISTRY, ThunderFabricStrategy)):
        for name in STRATEGY_NAMES:
            held = dict.get(registry, name)  # the entry (the registry's own get() builds the strategy)
            if held is not None and getattr(held["strategy"], "__qualname__", None) != cls.__qualname__:
                raise ValueError(f"Lightning's strategy name {name!r} is already registered for {held['strategy']!r}; "
                                 "thunder.lightning cannot register its strategy under it")
        cls.register_strategies(registry)
