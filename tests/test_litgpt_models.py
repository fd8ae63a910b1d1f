"""litgpt models train under thunder.jit exactly as in eager.

``litgpt.model.GPT`` from the configurations of real checkpoints shrunk to 2 layers, 64 channels,
4 heads of 16, vocabulary 128 and block size 32; the jitted module also computes the cross-entropy
loss. One forward+backward and three SGD steps are compared with a deep copy run eagerly
(``tests/parity.py``). The configurations cover parallel residuals (shared attention norm or not),
LayerNorm and RMSNorm (with unit offset), GptNeoxMLP, LLaMAMLP and GemmaMLP, full and partial
rotary embeddings, grouped-query and multi-query attention, sliding windows, attention biases,
embedding scaling, post-attention/MLP norms, q/k norms, logit soft-capping and mixtures of experts (whose
token counts per expert are run-time extents). A sweep of every architecture in litgpt's 210 configurations
(17 distinct ones, 2026-11-24) found all bitwise; those not listed here differ from one listed in sizes only.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.parity import NotBitwise, check_training_parity

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed")

VOCAB, BATCH, SEQ = 128, 2, 16
SHRINK = dict(n_layer=2, n_embd=64, n_head=4, head_size=16, intermediate_size=128, vocab_size=VOCAB,
              padded_vocab_size=VOCAB, padding_multiple=1, block_size=32)
CONFIGS = {
    "pythia-14m": dict(n_query_groups=4),  # parallel residual, LayerNorm, GptNeoxMLP, rotary on a quarter
    "phi-2": dict(n_query_groups=4),  # parallel residual with a shared attention norm, rotary on 40%
    "falcon-7b": dict(n_query_groups=1),  # parallel residual, shared norm, multi-query attention
    "Llama-2-7b-hf": dict(n_query_groups=4),  # RMSNorm, LLaMAMLP
    "Mistral-7B-v0.1": dict(n_query_groups=2, sliding_window_size=8),  # grouped queries, sliding window
    "Qwen2.5-0.5B": dict(n_query_groups=2),  # attention biases
    "gemma-2b": dict(n_query_groups=1),  # GemmaMLP, RMSNorm with unit offset, scaled embeddings
    "gemma-2-2b": dict(n_query_groups=2, sliding_window_size=8),  # post norms, logit soft-capping
    "Gemma-3-1b-it": dict(n_query_groups=4, sliding_window_size=8),  # q/k norms, local and global rope bases
    "Qwen3-0.6B": dict(n_query_groups=2),  # q/k norms
    "OLMo-2-1124-7B": dict(n_query_groups=4),  # post norms only
    "Phi-3-mini-4k-instruct": dict(n_query_groups=4),  # fused gate and up projection
    "falcon-40b": dict(n_query_groups=2),  # parallel residual with two norms, grouped queries
    # mixtures of experts: each expert runs on the tokens routed to it, a run-time extent (torch.where of a mask)
    "Mixtral-8x7B-v0.1": dict(n_query_groups=1),
    "Qwen3-30B-A3B": dict(n_query_groups=2, n_expert=8, moe_intermediate_size=32),
}

NOT_BITWISE = {}  # every configuration is bitwise


class GPTWithLoss(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gpt = litgpt.model.GPT(config)

    def forward(self, idx, targets):
        logits = self.gpt(idx)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


@pytest.mark.parametrize("name", CONFIGS)
def test_training_parity(name):
    config = litgpt.Config.from_name(name, **SHRINK, **CONFIGS[name])
    torch.manual_seed(0)
    model = GPTWithLoss(config).train()
    idx = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    targets = torch.roll(idx, -1, dims=1)
    check_training_parity(model, (idx, targets), loss_of=lambda loss: loss, not_bitwise=NOT_BITWISE.get(name))


@pytest.mark.parametrize("name", ["Llama-2-7b-hf", "gemma-2-2b", "falcon-40b", "Qwen3-30B-A3B"])
def test_a_step_under_cpu_autocast_is_eagers(name):
    """The forward under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (casts of the listed ops, parameters cast
    once), the backward outside: the loss and every parameter's gradient bit for bit."""
    import copy

    import thunder

    config = litgpt.Config.from_name(name, **SHRINK, **CONFIGS[name])
    torch.manual_seed(0)
    model = GPTWithLoss(config).train()
    idx = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    targets = torch.roll(idx, -1, dims=1)
    results = []
    for jit in (False, True):
        m = copy.deepcopy(model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (thunder.jit(m) if jit else m)(idx, targets)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in m.named_parameters()}))
    (loss, grads), (j_loss, j_grads) = results
    assert torch.equal(loss, j_loss)
    for n, g in grads.items():
        assert (g is None) == (j_grads[n] is None) and (g is None or torch.equal(g, j_grads[n])), n


# Fused by the inductor executor: the same steps within float tolerance (inductor's kernels sum in other orders).
# (Mixtral's blocks are litgpt's Llama blocks with experts in place of the MLP: Llama-2 fused would add
# compilations, not code; Gemma-2's soft-capping and extra norms run fused in tests/test_hf_models.py.)
@pytest.mark.parametrize("name", ["pythia-14m", "Mixtral-8x7B-v0.1"])
def test_training_parity_with_inductor_fusion(name):
    import shutil

    import thunder

    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("inductor's CPU kernels need a C++ compiler")
    config = litgpt.Config.from_name(name, **SHRINK, **CONFIGS[name])
    torch.manual_seed(0)
    model = GPTWithLoss(config).train()
    g = torch.Generator().manual_seed(1)
    inputs = (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g))
    jm, _ = check_training_parity(model, inputs, loss_of=lambda loss: loss, executors=["inductor", "torch"],
                                  not_bitwise=NotBitwise("inductor's fused kernels sum in other orders than eager's",
                                                         atol=1e-5, rtol=1e-4, depends_on_machine=True))
    assert "InductorFusion" in str(thunder.last_backward_traces(jm)[-1])
