"""Parameter-efficient fine-tuning with Hugging Face PEFT trains under thunder.jit exactly as in eager.

Every PEFT method that adapts a decoder's linear layers, norms or embeddings, or prepends virtual tokens, is applied
to a tiny Hugging Face Llama (tests/test_hf_models.py); LoRA also to GPT-2 (whose ``Conv1D`` layers store the
weight transposed: ``fan_in_fan_out``), BERT and T5. The base model is frozen, so only the adapters get gradients;
they start from their usual initialization plus a small random change (many start at zero or at the identity,
which would hide a wrong gradient). One forward+backward and three SGD steps are compared with an eager deep copy
(``tests/parity.py``), bitwise unless listed in ``NOT_BITWISE``.
"""
from __future__ import annotations

import pytest
import torch

from tests.parity import NotBitwise, check_training_parity
from tests.test_hf_models import CASES, make_inputs, make_model
from thunder.core.proxies import DataDependentError

peft = pytest.importorskip("peft", reason="peft is not installed")

_QV = ["q_proj", "v_proj"]
METHODS = {
    "lora": lambda: peft.LoraConfig(r=4, lora_alpha=8, target_modules=_QV, lora_dropout=0.1),
    "lora-all-linear": lambda: peft.LoraConfig(r=4, target_modules="all-linear"),
    "rslora": lambda: peft.LoraConfig(r=4, target_modules=_QV, use_rslora=True),
    "dora": lambda: peft.LoraConfig(r=4, target_modules=_QV, use_dora=True),
    "lora-embedding": lambda: peft.LoraConfig(r=4, target_modules=["embed_tokens", "q_proj"]),
    "ia3": lambda: peft.IA3Config(target_modules=["k_proj", "v_proj", "down_proj"], feedforward_modules=["down_proj"]),
    "adalora": lambda: peft.AdaLoraConfig(r=4, target_modules=_QV, total_step=10),
    "vera": lambda: peft.VeraConfig(r=4, target_modules=_QV),
    "randlora": lambda: peft.RandLoraConfig(r=4, target_modules=_QV),
    "boft": lambda: peft.BOFTConfig(boft_block_size=4, target_modules=_QV),
    "oft": lambda: peft.OFTConfig(r=0, oft_block_size=4, target_modules=_QV),
    "hra": lambda: peft.HRAConfig(r=4, target_modules=_QV),
    "fourierft": lambda: peft.FourierFTConfig(n_frequency=16, target_modules=_QV),
    "shira": lambda: peft.ShiraConfig(r=4, target_modules=_QV),
    "c3a": lambda: peft.C3AConfig(block_size=4, target_modules=_QV),
    "miss": lambda: peft.MissConfig(r=4, target_modules=_QV),
    "road": lambda: peft.RoadConfig(target_modules=["q_proj"], group_size=8),
    "ln-tuning": lambda: peft.LNTuningConfig(target_modules=["input_layernorm"]),
    "prompt-tuning": lambda: peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
    "prefix-tuning": lambda: peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
    "p-tuning": lambda: peft.PromptEncoderConfig(task_type="CAUSAL_LM", num_virtual_tokens=4, encoder_hidden_size=32),
    "loha": lambda: peft.LoHaConfig(r=4, target_modules=_QV),
    "lokr": lambda: peft.LoKrConfig(r=4, target_modules=_QV),
}

NOT_BITWISE = {}  # every method is bitwise

_MODULE_DROPOUT = ("LoHa's and LoKr's layers draw torch.rand(1) in training and compare it with module_dropout in "
                   "Python: a decision on a random value")
EXPECTED_ERRORS = {
    "loha": (DataDependentError, "Converting a tensor to a Python bool", _MODULE_DROPOUT),
    "lokr": (DataDependentError, "Converting a tensor to a Python bool", _MODULE_DROPOUT),
}


def _adapted(base, config):
    model = peft.get_peft_model(base, config)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.mark.parametrize("method", METHODS)
def test_llama_with_adapter_trains_as_eager(method):
    model = _adapted(make_model(CASES["llama"]), METHODS[method]())
    inputs = make_inputs(CASES["llama"], mask=True)
    if method in EXPECTED_ERRORS:
        error, match, _ = EXPECTED_ERRORS[method]
        with pytest.raises(error, match=match):
            check_training_parity(model, inputs)
        return
    check_training_parity(model, inputs, not_bitwise=NOT_BITWISE.get(method))


LORA_TARGETS = {"gpt2": ["c_attn", "c_proj"], "bert": ["query", "value"], "t5": ["q", "v", "wo"]}


@pytest.mark.parametrize("name", LORA_TARGETS)
def test_lora_on_other_architectures_trains_as_eager(name):
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS[name], lora_dropout=0.1,
                             fan_in_fan_out=name == "gpt2")
    model = _adapted(make_model(CASES[name]), config)
    check_training_parity(model, make_inputs(CASES[name], mask=True))
