"""Distributed training: collectives as prims (with collectives as their gradients), the DDP and FSDP
transforms, bucketing and checkpoints.

Not implemented yet; the data-parallel issues add it. ``ThunderModule.no_sync()`` exists already
and is a no-op until a data-parallel transform gives it meaning.
"""
