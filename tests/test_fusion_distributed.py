"""Fusion composes with the distributed transforms (2 gloo ranks): collectives are never fused, regions
neither delay a collective's issue nor move its wait, and training matches torch DDP / unfused FSDP within
float tolerance. Regions run with the toy fusion executor of test_rematerialization (no C++ compiler), and the
matrix products with the oneDNN executor where this torch has oneDNN."""
from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn as nn

import thunder
from thunder.core.symbol import Tag
from thunder.distributed import ddp, fsdp
from thunder.executors.onednnex import OneDNNExecutor, onednn_available
from tests.distributed import run_ranks
from tests.models import GPT, GPTConfig
from tests.test_rematerialization import ToyFusion

pytestmark = [pytest.mark.distributed]


def _gpt():
    return GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randint(0, 64, (2, 8), generator=g), torch.randint(0, 64, (2, 8), generator=g)


def _structure(trace) -> dict:
    """Which top-level bound symbols are collectives or fused regions, in order, and whether a region holds a
    collective."""
    names = []
    collective_in_region = False
    for b in trace.bound_symbols:
        if b.sym.name.startswith("toyFusion"):
            names.append("region")
            collective_in_region |= any(Tag.COLLECTIVE in s.sym.tags for s in b.subsymbols)
        elif Tag.COLLECTIVE in b.sym.tags:
            names.append(b.sym.name)
        else:
            names.append(b.sym.name)
    return dict(names=names, collective_in_region=collective_in_region)


def _fused_executors() -> list:
    products = [OneDNNExecutor("onednn_every_product", min_multiply_adds=0)] if onednn_available() else []
    return [*products, ToyFusion(True), "torch"]


def _worker(rank, world_size):
    out = {}
    torch.manual_seed(rank)
    model = _gpt()
    reference = copy.deepcopy(model)
    fused = thunder.jit(ddp(model, bucket_size_in_mb=0.002), executors=_fused_executors())
    tddp = nn.parallel.DistributedDataParallel(reference, bucket_cap_mb=0.002)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    worst = 0.0
    for step in range(3):
        batch = _batch(rank, step)
        for m, opt in zip((fused, tddp), opts):
            opt.zero_grad()
            m(*batch)[1].backward()
        worst = max(worst, max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(),
                                                                                  reference.parameters())))
        for opt in opts:
            opt.step()
    out["ddp_grad_diff"] = worst
    out["ddp_bwd"] = _structure(thunder.last_backward_traces(fused)[-1])
    del tddp

    losses = {}
    for name, executors in (("fused", _fused_executors()), ("torch", ["torch"])):
        torch.manual_seed(0)
        jm = thunder.jit(fsdp(_gpt()), executors=executors)
        opt = torch.optim.SGD(jm.parameters(), lr=0.1)
        losses[name] = []
        for step in range(3):
            opt.zero_grad()
            loss = jm(*_batch(rank, step))[1]
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
        if name == "fused":
            out["fsdp_fwd"] = _structure(thunder.last_traces(jm)[-1])
            out["fsdp_bwd"] = _structure(thunder.last_backward_traces(jm)[-1])
    out["fsdp_losses"] = losses
    return out


@functools.cache
def _results():
    return run_ranks(_worker)


def test_ddp_with_fusion_trains_like_torch_ddp():
    for r in _results():
        assert r["ddp_grad_diff"] < 1e-5


def test_collectives_are_never_fused_and_keep_their_place():
    for r in _results():
        for key in ("ddp_bwd", "fsdp_fwd", "fsdp_bwd"):
            s = r[key]
            assert "region" in s["names"], key
            assert not s["collective_in_region"], key
            assert any(n.startswith("onednn_") for n in s["names"]) == onednn_available(), key
        names = [n for n in r["ddp_bwd"]["names"] if n != "python_del"]
        # each bucket's all-reduce is issued right after it is packed (no region in between) ...
        for i, n in enumerate(names):
            if n == "all_reduce":
                assert names[i - 1] == "pack_bucket"
        # ... and the waits come after every computation (regions included)
        first_wait = names.index("wait")
        assert "region" not in names[first_wait:]
        assert max(i for i, n in enumerate(names) if n == "all_reduce") < first_wait
        fwd = r["fsdp_fwd"]["names"]
        assert "all_gather" in fwd and "wait" in fwd


def test_fsdp_with_fusion_trains_like_unfused_fsdp():
    for r in _results():
        torch.testing.assert_close(r["fsdp_losses"]["fused"], r["fsdp_losses"]["torch"], rtol=1e-5, atol=1e-6)
