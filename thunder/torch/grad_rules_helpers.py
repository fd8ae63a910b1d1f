"""Small helpers shared by gradient rules of broadcasting torch-language operations."""
from __future__ import annotations

from thunder.transforms.grad_rules import _reduce_to


def reduce_like(g, t):
    """``g`` summed down to ``t``'s shape (the inverse of broadcasting ``t``), in ``t``'s dtype."""
    from thunder.torch.utils import convert

    return convert(_reduce_to(g, tuple(t.shape)), t.dtype)
