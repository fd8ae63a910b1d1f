"""Known faults of inductor's code generation that thunder steers around while it compiles a region
(``inductor_workarounds()``, entered by ``CompiledRegion._compile``); torch.compile's own compilations are left
as they are.

[Note: inductor's unmasked tail store of a 2-D tiled reduction]
On CPU inductor may tile a reduction's loop nest in two dimensions: an outer, non-reduction axis (the output's
contiguous one) and the innermost, reduced one. It then generates one kernel per main/tail combination of the two
axes. When a pointwise loop level sits between the two tiled axes (as in attention scores laid out
[batch, heads, seq, window] and read [batch, seq, heads, window]), inductor (2.13 and earlier) keeps only the main
kernel's epilogue, which stores the accumulated vector at full width, also for the outer axis's tail: with 4 heads
and 16-lane vectors every store writes 12 floats past the row. Rows written later mostly overwrite the spill; the
last one writes past the buffer (heap corruption: "double free or corruption" at a later free, seen with HF
Longformer) and, with threads splitting the outer loop, a spill can land on another thread's finished rows
(a silently wrong result). Reported upstream as pytorch/pytorch#196681.

Inductor does choose per-range epilogues when the second tiled axis is the level right after the first; thunder
tells it to do the same when the second tiled axis is further in (the check inductor meant to make). Where the
tail kernel is a vector kernel, its masked store is then the one that runs on the tail. Where it is the scalar
kernel, the region is not compiled (it falls back to the torch executor with a warning), as that epilogue was
never exercised for this loop shape.

[Note: inductor's vectorized expm1 and atanh]
Inductor's C++ vector code computes ``expm1(x)`` as ``exp(x) - 1`` and ``atanh(x)`` as ``0.5 * log((1 + x) / (1 - x))``
(2.13 and earlier), which cancel catastrophically near zero: ``expm1(-1e-8)`` is 0 (eager: -1e-8), ``atanh(1e-6)``
2.03e-6, and every ELU, SELU and CELU of a small negative value with them. Eager's kernels call ATen's vectorized
``expm1()`` and ``atanh()`` (SLEEF's, within an ulp), and thunder has inductor do the same: the fused values are eager's,
bit for bit.
"""
from __future__ import annotations

import contextlib
import functools
import threading

_ACTIVE = threading.local()


class UnsafeInductorKernel(RuntimeError):
    """Inductor would generate a kernel with a known fault; the region runs unfused instead."""


@contextlib.contextmanager
def inductor_workarounds(depends_on: tuple = ()):
    """Within this block, inductor's code generation in this thread avoids the faults this module knows of. Its
    compiled graphs are cached apart from others (a graph compiled without the workarounds, by torch.compile or
    another version of this module, is not reused): the key of inductor's graph cache holds a post-grad pass that
    does nothing but name them, and ``depends_on``, what else the compiled code depends on that inductor's key
    leaves out (the inputs whose memory it may reuse)."""
    import torch._inductor.config as inductor_config

    _install()
    previous = getattr(_ACTIVE, "on", False)
    _ACTIVE.on = True
    try:
        if inductor_config.post_grad_custom_post_pass is None:
            with inductor_config.patch(post_grad_custom_post_pass=_cache_marker(tuple(depends_on))):
                yield
        else:  # the program's own pass holds that place: no cache, rather than a cached unsafe kernel
            with inductor_config.patch(fx_graph_cache=False):
                yield
    finally:
        _ACTIVE.on = previous


@functools.cache
def _source_hash() -> str:
    import hashlib

    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@functools.cache
def _cache_marker(depends_on: tuple):
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class ThunderWorkarounds(CustomGraphPass):
        def __call__(self, graph):
            pass

        def uuid(self):
            return f"thunder inductor workarounds {_source_hash()}; {depends_on!r}"

    return ThunderWorkarounds()


def _tail_store_unmasked(proxy, outer_loop) -> bool:
    """Whether inductor, left alone, would store a 2-D tiled vertical reduction's tail at full width (see the
    note): the main kernel tiles two axes, the inner one reduced, the outer one not and with a tail, and they are
    not adjacent loop levels (the adjacent case inductor handles)."""
    from torch._inductor.codegen.cpp import CppTile2DKernel

    main = proxy.kernels[0] if proxy.kernels else None
    if not isinstance(main, CppTile2DKernel) or outer_loop is None or outer_loop.is_reduction:
        return False
    outer, inner = main.tiling_indices
    loops = proxy.loop_nest.loops
    if inner >= len(loops) or not loops[inner].is_reduction or inner == outer + 1:
        return False
    tail = outer_loop.size - outer_loop.tiled_size
    return not (getattr(tail, "is_number", True) and tail == 0)


@functools.cache
def _install() -> None:
    _install_tail_store()
    _install_accurate_vector_ops()


# inductor's vector op -> the ATen vector method eager's kernel calls (see the note on expm1 and atanh)
_ACCURATE_VECTOR_OPS = {
    "expm1": "{x}.expm1()",
    "atanh": "{x}.atanh()",
}


def _install_accurate_vector_ops() -> None:
    try:
        from torch._inductor.codegen.cpp import CppVecOverrides
    except ImportError:  # an inductor without a C++ backend
        return
    for name, code in _ACCURATE_VECTOR_OPS.items():
        original = getattr(CppVecOverrides, name, None)
        if original is None:
            continue

        def accurate(x, original=original, code=code):
            return code.format(x=x) if getattr(_ACTIVE, "on", False) else original(x)

        functools.update_wrapper(accurate, original)  # its name: inductor looks the scalar op up by it
        setattr(CppVecOverrides, name, staticmethod(accurate))


def _install_tail_store() -> None:
    try:
        from torch._inductor.codegen.cpp import CppKernelProxy, CppVecKernel
    except ImportError:  # an inductor without a C++ backend
        return
    original = getattr(CppKernelProxy, "aggregate_reduction_buffers", None)
    if original is None:  # inductor reorganized: nothing of this fault's shape to steer
        return

    @functools.wraps(original)
    def aggregate_reduction_buffers(self, inner_loop_reduction_outer_not, outer_loop, *args, **kwargs):
        if getattr(_ACTIVE, "on", False) and not inner_loop_reduction_outer_not \
                and _tail_store_unmasked(self, outer_loop):
            if not isinstance(self.kernels[-1], CppVecKernel):
                raise UnsafeInductorKernel(
                    "inductor would store a 2-D tiled reduction's tail at full vector width "
                    "(pytorch/pytorch#196681); the region runs unfused")
            inner_loop_reduction_outer_not = True
        return original(self, inner_loop_reduction_outer_not, outer_loop, *args, **kwargs)

    CppKernelProxy.aggregate_reduction_buffers = aggregate_reduction_buffers
