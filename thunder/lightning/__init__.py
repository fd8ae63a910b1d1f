"""Lightning strategies that run the model through ``thunder.jit`` with thunder's data-parallel transforms.

``ThunderStrategy`` is for ``lightning.pytorch.Trainer``, ``ThunderFabricStrategy`` for ``lightning.fabric.Fabric``.
Both take ``parallelism="none" | "ddp" | "fsdp"`` and the options of ``thunder.distributed.ddp`` / ``fsdp``
(see ``thunder/lightning/options.py``). Importing this package registers the strategy names ``"thunder"``,
``"thunder_ddp"`` and ``"thunder_fsdp"`` with the Trainer and with Fabric, so ``Trainer(strategy="thunder_ddp")``
works once ``import thunder.lightning`` ran; ``thunder_module(trainer)`` (or of what ``fabric.setup`` returned) is
the ThunderModule, for ``thunder.last_traces`` and the other queries. Lightning is an optional dependency of thunder: ``import thunder``
never imports it; this package needs it.
"""
try:
    import lightning.fabric  # noqa: F401
    import lightning.pytorch  # noqa: F401
except ImportError as e:
    raise ImportError(
        "thunder.lightning needs Lightning, which is an optional dependency of thunder and is not installed "
        f"({e}). Install it with `pip install \"thunder[lightning]\"` (or `pip install lightning`).") from e

from thunder.lightning.fabric import ThunderFabricStrategy
from thunder.lightning.options import Parallelism, StateDictType, thunder_module
from thunder.lightning.trainer import ThunderStrategy
from thunder.lightning.registry import STRATEGY_NAMES, register_strategies

register_strategies()

__all__ = ["ThunderStrategy", "ThunderFabricStrategy", "Parallelism", "StateDictType", "STRATEGY_NAMES", "thunder_module"]
