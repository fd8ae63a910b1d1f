"""Distributed training as trace transforms: collectives are primitives of the trace IR
(``thunder/distributed/prims.py``), data parallelism a transform of the backward trace (``ddp``,
``DDPTransform``), gradients reduced in buckets (``bucketing.py``) scheduled for overlap (``scheduling.py``).
"""
from thunder.distributed.ddp import DDPTransform, ddp
from thunder.distributed.fsdp import FSDPBucketingStrategy, FSDPTransform, FSDPType, fsdp
from thunder.distributed import checkpoint
from thunder.distributed.clip import clip_grad_norm_
from thunder.distributed import program_collectives  # noqa: F401 - registers how torch.distributed's calls are traced

__all__ = ["ddp", "DDPTransform", "fsdp", "FSDPTransform", "FSDPType", "FSDPBucketingStrategy", "checkpoint",
           "clip_grad_norm_"]
