"""Gradient clipping by norm for the Trainer when the parameters are FSDP shards.

The Trainer clips through its precision plugin (``gradient_clip_val`` -> ``LightningModule.clip_gradients`` ->
``precision_plugin.clip_gradients``), which takes the norm of the gradients the optimizer holds: with fsdp,
this rank's shards only, so every rank would scale by a different factor. ``GlobalNormClipping`` is the
strategy's view of the precision plugin: everything is the plugin's, except that clipping by norm uses the norm
of the whole gradient (``thunder.distributed.clip_grad_norm_``, over the shards of every rank).
"""
from __future__ import annotations

from lightning.pytorch.utilities import GradClipAlgorithmType


class GlobalNormClipping:
    """The precision plugin ``plugin``, with ``clip_gradients`` by norm done by ``clip_norm(optimizer, max_norm)``."""

    def __init__(self, plugin, clip_norm):
        object.__setattr__(self, "plugin", plugin)
        object.__setattr__(self, "_clip_norm", clip_norm)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("plugin", "_clip_norm"):  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.plugin, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.plugin, name, value)

    def __repr__(self):
        return f"GlobalNormClipping({self.plugin!r})"

    def clip_gradients(self, optimizer, clip_val=0.0, gradient_clip_algorithm=GradClipAlgorithmType.NORM) -> None:
        if clip_val <= 0:
            return
        if gradient_clip_algorithm == GradClipAlgorithmType.VALUE:
            self.plugin.clip_grad_by_value(optimizer, clip_val)
        else:
            self.clip_grad_by_norm(optimizer, clip_val)

    def clip_grad_by_norm(self, optimizer, clip_val) -> None:
        self._clip_norm(optimizer, clip_val)
