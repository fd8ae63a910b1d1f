"""Running a cache entry."""
from __future__ import annotations


def run_entry(entry, inps):
    if entry.uses_autograd:
        from thunder.transforms.autodiff import run_with_autograd

        out = run_with_autograd(entry, inps)
    else:
        out = entry.computation(*inps)
    rebuild = entry.output_rebuild
    return out if rebuild is None else rebuild(out)
