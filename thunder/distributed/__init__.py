"""Distributed training as trace transforms: collectives are primitives of the trace IR
(``thunder/distributed/prims.py``), data parallelism a transform of the backward trace (``ddp``,
``DDPTransform``), gradients reduced in buckets (``bucketing.py``) scheduled for overlap (``scheduling.py``).
"""
from thunder.distributed.ddp import DDPTransform, ddp
from thunder.distributed.fsdp import FSDPBucketingStrategy, FSDPTransform, FSDPType, fsdp

__all__ = ["ddp", "DDPTransform", "fsdp", "FSDPTransform", "FSDPType", "FSDPBucketingStrategy"]
