"""The nvFuser executor (optional): fused regions of a trace compiled into CUDA kernels by NVIDIA's nvFuser.

It is registered as ``"nvfuser"``, first among the default executors (ahead of torch, whose operations it
takes over), only when a CUDA device is available and ``nvfuser`` imports; thunder imports nvfuser only
then, when it loads its executors. It claims regions of elementwise operations, casts, views,
reductions (sum, prod, amax, amin, var, var_mean), creation (full, iota) and random numbers (uniform, randn)
on CUDA tensors of the dtypes nvFuser supports (the rules and their checks: ``RULES`` in
thunder/executors/nvfuser_translate.py), and leaves matmuls, convolutions, indexing and all else to the
other executors. A region prints as ``[t10, t2, t7] = nvFusion0(t1)`` with its primitives as comments beneath.

[Note: nvFuser definitions]
- A region becomes one ``nvfuser.FusionDefinition`` per input signature (shapes, strides, dtypes), built on
  its first call with that signature and kept: later calls execute it directly. Inputs are defined with
  nvFuser's symbolic shapes (-1; a size-1 dimension as 1, which broadcasts) and the contiguity and stride
  order of the tensors given (``nvfuser.compute_tensor_descriptor``); each primitive is translated by its
  rule; the outputs are added in the region's order, which is the order ``execute`` returns them in.
- The first execution of a definition checks its outputs' shapes and dtypes against the trace's.
- A region nvFuser rejects (its definition, compilation or first execution fails with nvFuser's
  RuntimeError, or with the TypeError of an ``fd.ops`` call it does not accept, or that check fails) runs
  with the torch executor from then on, with a warning. A region whose tensors lie on several devices
  (independent operations fused side by side) runs with the torch executor too.

[Note: random numbers in nvFuser regions]
Each random primitive of a region (``prims.uniform``, ``prims.randn``) draws with nvFuser's Philox generator
from a seed and an offset that are inputs of the fusion (``fd.ops.uniform(..., rng_seed=, rng_offset=)``),
taken on every call from torch's default CUDA generator of the region's device: the seed is the
generator's ``initial_seed()``, the offset its current Philox offset (``get_offset()``), which is then
advanced by 4. nvFuser counts offsets in groups of four 32-bit draws (it receives ``offset // 4``) and each
element of a draw reads its own Philox subsequence, so one group per random primitive reserves its numbers:
torch's later draws and other regions' never reuse them (this is how nvFuser itself advances torch's
generator when no seed is given). A program seeded with ``torch.manual_seed`` therefore draws the same
numbers on every run, in the trace's order of random operations (fusion keeps that order, see
thunder/executors/regions.py). They are other numbers than the torch executor's ``torch.rand`` and eager's
dropout kernel draw: a fused dropout mask is another sample of the same distribution. The mask is an output
of the forward region saved for the backward, never drawn again. Reading and advancing the generator on the
host is not possible under CUDA graph capture, which this executor does not support.

What has been verified, and what has not: the translation of every rule, the caching per signature, the
random inputs, the region outputs, the fallback and the printed traces are tested (tests/test_nvfuser.py)
against a stub ``nvfuser`` module whose ``FusionDefinition`` records the calls, checks them as nvFuser's
bindings do and computes them with torch: on CPU tensors, and on CUDA tensors with torch's CUDA generator
(run on an H100 with torch 2.11). The stub follows the Python frontend of the ``nvfuser`` package as its
sources define it (NVIDIA/Fuser, before that frontend was removed in favor of ``nvfuser_direct``, which is
not supported here). No real nvFuser has run this code: no nvFuser wheel exists for the torch versions thunder
is tested with. The test that runs where ``nvfuser`` imports and CUDA is available is the first real check.
"""
from __future__ import annotations

import warnings

import torch

from thunder.executors.nvfuser_translate import (NOT_COMPUTE, RANDOM, RULES, Definition, may_be_identity,
                                                 supported_tensors)
from thunder.extend import FusionExecutor, register_executor


class NvFuserExecutor(FusionExecutor):
    """Fuses regions into nvFuser fusions. ``device_types``: where its tensors may lie (``("cpu",)`` only for
    the tests, which run it with a stub ``nvfuser`` computing with torch)."""

    fusion_name = "nvFusion"
    fuse_random = True  # dropout's mask is drawn inside the fusion, as in the MNIST example's trace
    rematerialize = True

    def __init__(self, name: str = "nvfuser", *, device_types=("cuda",)):
        super().__init__(name)
        self.device_types = frozenset(device_types)

    def can_fuse(self, bsym) -> bool:
        rule = RULES.get(bsym.sym.name) if bsym.sym.module == "prims" else None
        return (rule is not None and supported_tensors(bsym, self.device_types)
                and bool(rule.check(*bsym.args, **bsym.kwargs)))

    def worth_fusing(self, prims_: list) -> bool:
        return len(prims_) >= self.min_prims and any(p.sym.name not in NOT_COMPUTE for p in prims_)

    def compile_region(self, region):
        return FusedRegion(region).__call__


def rng_seed_and_offset(device: torch.device) -> list:
    """The seed and offset a random primitive of a region on ``device`` draws with (see [Note: random numbers
    in nvFuser regions]). On another device than CUDA (the tests' CPU regions) a seed drawn from torch's
    generator of that device, at offset 0."""
    if device.type != "cuda":
        return [int(torch.randint(2**62, (), device=device)), 0]
    torch.cuda.init()  # the generators exist once CUDA is initialized
    gen = torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    offset = gen.get_offset()
    gen.set_offset(offset + 4)
    seed = gen.initial_seed()
    return [seed - 2**64 if seed >= 2**63 else seed, offset // 4]  # an Int (int64) input holds the seed's bits


class FusedRegion:
    """A region's FusionDefinitions by input signature (see [Note: nvFuser definitions])."""

    def __init__(self, region):
        self.region = region
        self.prims = region.bound_symbols[:-1]
        self.outputs = region.bound_symbols[-1].args[0]
        devices = {v.device for b in self.prims for v in (*b.flat_args, *b.flat_outs)}
        self.device = next(iter(devices)) if len(devices) == 1 else None
        self.n_random = sum(b.sym.name in RANDOM for b in self.prims)
        self.definitions: dict = {}  # (shape, stride, dtype) of each input -> FusionDefinition
        self.fn = self._fused if self.device is not None else self._torch

    def __call__(self, *args):
        return self.fn(*args)

    def _rng_inputs(self) -> list:
        return [x for _ in range(self.n_random) for x in rng_seed_and_offset(self.device)]

    def _fused(self, *args):
        key = tuple((a.shape, a.stride(), a.dtype) for a in args)
        fd = self.definitions.get(key)
        if fd is None:
            return self._first_call(key, args)
        return fd.execute([*args, *self._rng_inputs()], device=self.device)

    def _first_call(self, key, args):
        try:
            fd = self._define(args)
            outs = fd.execute([*args, *self._rng_inputs()], device=self.device)
            self._check_outputs(outs)
        except (RuntimeError, TypeError) as e:  # nvFuser's errors, and the ops calls it does not accept
            self._fall_back(e)
            return self.fn(*args)
        self.definitions[key] = fd
        return outs

    def _define(self, args):
        import nvfuser

        with nvfuser.FusionDefinition() as fd:
            d = Definition(nvfuser, fd)
            for p, a in zip(self.region.params, args):
                contiguity, stride_order = nvfuser.compute_tensor_descriptor(tuple(a.shape), a.stride())
                d.values[p.name] = fd.define_tensor(shape=[1 if s == 1 else -1 for s in a.shape],
                                                    contiguity=list(contiguity), dtype=d.dtype(a.dtype),
                                                    stride_order=list(stride_order))
            identities = set()
            for b in self.prims:
                out = RULES[b.sym.name].translate(d, *b.args, **b.kwargs)
                outs = out if isinstance(out, (tuple, list)) else (out,)  # var_mean gives two
                d.values.update(zip((o.name for o in b.flat_outs), outs))
                if may_be_identity(b):
                    identities.add(b.flat_outs[0].name)
            for o in self.outputs:
                value = d.values[o.name]
                fd.add_output(fd.ops.set(value) if o.name in identities else value)
        return fd

    def _check_outputs(self, outs):
        got = [(tuple(t.shape), t.dtype) for t in outs]
        expected = [(tuple(o.shape), o.dtype) for o in self.outputs]
        if got != expected:
            raise RuntimeError(f"the fusion returned tensors of shapes and dtypes {got}, the trace has {expected}")

    def _fall_back(self, error: BaseException):
        names = ", ".join(dict.fromkeys(b.sym.name for b in self.prims))
        warnings.warn(f"thunder: the nvFuser executor could not run a fused region of {len(self.prims)} primitives "
                      f"({names}): {type(error).__name__}: {error}. It runs with the torch executor instead",
                      stacklevel=4)
        self.fn = self._torch

    def _torch(self, *args):
        from thunder.executors.passes import transform_for_execution
        from thunder.executors.torchex import ex as torch_ex

        self.fn = transform_for_execution(self.region, (torch_ex,)).python_callable()
        return self.fn(*args)


def nvfuser_available() -> bool:
    """Whether nvFuser can run here: a CUDA device, and ``nvfuser`` imports (tried only with a CUDA device)."""
    if not torch.cuda.is_available():
        return False
    try:
        import nvfuser  # noqa: F401
    except (ImportError, OSError):  # not installed, or built for another torch or CUDA (its libraries fail to load)
        return False
    return True


ex = NvFuserExecutor()


def register_if_available() -> bool:
    """Registers ``ex`` first among the default executors where nvFuser can run; whether it did."""
    if not nvfuser_available():
        return False
    register_executor(ex, default=True, priority=0)
    return True


register_if_available()
