"""thunder.distributed.ddp and fsdp on models from real libraries, against torch's DDP and FSDP2, on 2 gloo ranks.

The models are Hugging Face transformers' Llama and GPT-2 (tied embedding and head, ``Conv1D`` layers, dropout),
litgpt's GPT (Pythia: parallel residual, partial rotary) and torchvision's MobileNetV3 (BatchNorm, depthwise
convolutions, squeeze-excitation, dropout), tiny. Each rank trains a thunder model and a torch model side by side
from the same initialization on its own batches, for ``STEPS`` SGD steps, the RNG seeded alike before each forward
(the same dropout masks). Everything must be bitwise equal: losses, with ddp every ``.grad``, parameters after each
step (fsdp: gathered from the shards, against FSDP2's ``full_tensor()``) and buffers (BatchNorm's statistics).
FSDP2 shards each block (decoder layer, MobileNet stage) and the root, as its documentation does.
"""
from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.distributed import FSDPType, ddp, fsdp
from tests.distributed import run_ranks

pytestmark = [pytest.mark.distributed]

STEPS = 2
VOCAB, BATCH, SEQ = 128, 2, 16


# -- the models: name -> builder of (model, the path of the blocks FSDP2 shards, loss of a batch) --------------------
def _hf(model_type: str, **config):
    import transformers

    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **config))
    blocks = "model.layers" if model_type == "llama" else "transformer.h"
    return model, blocks, lambda m, batch: m(input_ids=batch[0], labels=batch[1]).loss


def _hf_llama():
    return _hf("llama", hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64)


def _hf_gpt2():
    return _hf("gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64)


class _GPTWithLoss(nn.Module):
    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx, targets):
        logits = self.gpt(idx)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def _litgpt_pythia():
    import litgpt

    config = litgpt.Config.from_name("pythia-14m", n_layer=2, n_embd=64, n_head=4, head_size=16, intermediate_size=128,
                                     vocab_size=VOCAB, padded_vocab_size=VOCAB, padding_multiple=1, block_size=32,
                                     n_query_groups=4)
    model = _GPTWithLoss(litgpt.model.GPT(config))
    return model, "gpt.transformer.h", lambda m, batch: m(*batch)


def _mobilenet():
    from tests.libraries import import_torchvision

    model = import_torchvision().models.mobilenet_v3_small(num_classes=10)
    return model, "features", lambda m, batch: F.cross_entropy(m(batch[0]), batch[1])


MODELS = {"hf-llama": _hf_llama, "hf-gpt2": _hf_gpt2, "litgpt-pythia": _litgpt_pythia, "torchvision-mobilenet": _mobilenet}
NEEDS = {"hf-llama": "transformers", "hf-gpt2": "transformers", "litgpt-pythia": "litgpt", "torchvision-mobilenet": None}


def _batch(name: str, rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if name == "torchvision-mobilenet":
        return torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def _step(model, loss_of, batch, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)  # the same dropout masks in both models
    loss = loss_of(model, batch)
    loss.backward()
    return loss.detach()


def _differences(a: nn.Module, b: nn.Module, what: str, gather=None) -> list:
    diffs = []
    if what == "buffer":
        for (name, x), y in zip(a.named_buffers(), b.buffers()):
            if not torch.equal(x, y):
                diffs.append(f"buffer {name}")
        return diffs
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        x, y = (p, q) if what == "param" else (p.grad, q.grad)
        if gather is not None:
            x, y = gather(x, y)
        if (x is None) != (y is None) or (x is not None and not torch.equal(x, y)):
            diffs.append(f"{what} {name}")
    return diffs


def _full(shard: torch.Tensor, full) -> tuple:
    """(the whole parameter gathered from thunder's shards, FSDP2's DTensor as a whole tensor)."""
    whole = full.full_tensor()
    parts = [torch.empty_like(shard) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, shard.detach().contiguous())
    return torch.cat(parts)[:whole.shape[0]], whole


def _ddp_run(rank: int, name: str) -> list:
    torch.manual_seed(rank)  # ranks start different: both broadcast rank 0's parameters
    model, _, loss_of = MODELS[name]()
    reference = copy.deepcopy(model)
    jm = thunder.jit(ddp(model))
    tddp = nn.parallel.DistributedDataParallel(reference)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    diffs = _differences(model, reference, "param")
    for step in range(STEPS):
        batch = _batch(name, rank, step)
        losses = [_step(m, loss_of, batch, seed=step) for m in (jm, tddp)]
        if not torch.equal(*losses):
            diffs.append(f"loss at step {step}")
        diffs += _differences(model, reference, "grad")
        for opt in opts:
            opt.step()
            opt.zero_grad()
        diffs += _differences(model, reference, "param") + _differences(model, reference, "buffer")
    del tddp  # torch DDP's reducer goes before the process group does
    return diffs


def _fsdp_run(rank: int, name: str, strategy: FSDPType) -> list:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model, blocks, loss_of = MODELS[name]()
    reference = copy.deepcopy(model)
    for block in reference.get_submodule(blocks):
        fully_shard(block, reshard_after_forward=strategy is FSDPType.ZERO3)
    fully_shard(reference, reshard_after_forward=strategy is FSDPType.ZERO3)
    jm = thunder.jit(fsdp(model, sharding_strategy=strategy))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    diffs = []
    for step in range(STEPS):
        batch = _batch(name, rank, step)
        losses = [_step(m, loss_of, batch, seed=step) for m in (jm, reference)]
        if not torch.equal(*losses):
            diffs.append(f"loss at step {step}")
        for opt in opts:
            opt.step()
            opt.zero_grad()
        diffs += _differences(model, reference, "param", gather=_full) + _differences(model, reference, "buffer")
    return diffs


def _worker(rank, world_size, names):
    results = {}
    for name in names:
        for kind in ("ddp", "fsdp-zero2", "fsdp-zero3"):
            try:
                if kind == "ddp":
                    results[(name, kind)] = _ddp_run(rank, name)
                else:
                    results[(name, kind)] = _fsdp_run(rank, name, FSDPType.ZERO2 if kind.endswith("2") else FSDPType.ZERO3)
            except Exception as e:  # noqa: BLE001 - reported by the test of this configuration
                results[(name, kind)] = [f"raised {type(e).__name__}: {e}"]
    return results


@functools.cache
def _results(name):
    return run_ranks(_worker, [name])


@pytest.mark.parametrize("kind", ["ddp", "fsdp-zero2", "fsdp-zero3"])
@pytest.mark.parametrize("name", MODELS)
def test_training_equals_torch_ddp_and_fsdp2(name, kind):
    if NEEDS[name]:
        pytest.importorskip(NEEDS[name], reason=f"{NEEDS[name]} is not installed")
    for rank, results in enumerate(_results(name)):
        assert results[(name, kind)] == [], f"rank {rank}: not bitwise torch's {kind}: {results[(name, kind)]}"
