"""lucidrains' x-transformers (einops- and einx-heavy attention code with dozens of research variants) trains under
thunder.jit exactly as in eager.

Each configuration is a 2-layer, width-32 language model, trained for a forward+backward and three SGD steps
against an eager deep copy (``tests/parity.py``), bitwise. The variants cover positional schemes (rotary, xPos,
ALiBi, T5 relative bias, dynamic bias), norms, residual schemes (gated, hyper-connections, value residuals,
U-Net skips), attention variants (talking heads, grouped and single KV heads, QK norm, top-k sparse, memory
key/values, soft-clamped logits: a ``torch.jit.script`` function, see thunder/driver/torchscript.py) and the
wrappers (encoder, encoder-decoder, ViT, continuous inputs, autoregressive training and generation).

einx traces each new expression and shapes at its first call, and replaces its backend registry's state object on
that call: a trace that ran einx's first call read the old state, so the next call compiles again (reading einx's
cache instead) and later calls hit. Whether a test sees that depends on which earlier test in the process used the
expression first: ``EINX_WARMUP`` compilations.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import thunder
from tests.parity import check_training_parity, one_thread

xt = pytest.importorskip("x_transformers", reason="x-transformers is not installed")

DECODER_VARIANTS = {
    "plain": {},
    "rotary": {"rotary_pos_emb": True},
    "rotary-xpos": {"rotary_xpos": True},
    "alibi": {"alibi_pos_bias": True, "alibi_num_heads": 2},  # computes and registers its bias buffer at a first call
    "t5-relative-bias": {"rel_pos_bias": True},
    "dynamic-bias": {"dynamic_pos_bias": True},
    "rmsnorm-macaron": {"use_rmsnorm": True, "macaron": True},
    "sandwich-norm": {"sandwich_norm": True},
    "post-norm": {"pre_norm": False},
    "gated-scaled-residual": {"gate_residual": True, "scale_residual": True, "use_layerscale": True},
    "hyper-connections": {"num_residual_streams": 4},
    "value-residual-unet": {"add_value_residual": True, "unet_skips": True},
    "shift-tokens-glu": {"shift_tokens": 1, "ff_glu": True, "ff_swish": True},
    "talking-heads-gates": {"attn_pre_talking_heads": True, "attn_post_talking_heads": True, "attn_gate_values": True},
    "grouped-kv-qk-norm": {"attn_kv_heads": 2, "attn_qk_norm": True, "attn_qk_norm_dim_scale": True},
    "sparse-topk-mem-kv": {"attn_sparse_topk": 4, "attn_num_mem_kv": 4},
    "softclamp-logits": {"attn_softclamp_logits": True},
    "flash": {"attn_flash": True},
    "residual-attn-custom-layers": {"residual_attn": True, "custom_layers": ("a", "f", "a", "f", "f")},
}


EINX_WARMUP = range(1, 3)


def _lm(attn_layers=None, **wrapper):
    return xt.TransformerWrapper(num_tokens=64, max_seq_len=32, **wrapper,
                                 attn_layers=attn_layers or xt.Decoder(dim=32, depth=2, heads=4))


def _lm_loss(tokens):
    return lambda logits: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


@pytest.mark.parametrize("variant", list(DECODER_VARIANTS))
def test_decoder_training_parity(variant):
    torch.manual_seed(0)
    model = _lm(xt.Decoder(dim=32, depth=2, heads=4, **DECODER_VARIANTS[variant]))
    tokens = torch.randint(0, 64, (2, 16))
    # the soft clamp is a torch.jit.script function: from its third call on, TorchScript's graph executor
    # differentiates it with formulas of its own, which round otherwise than autograd's on some CPUs (an AVX512-FP16
    # Xeon: step 2's gradients), where thunder traces the Python function (autograd's gradients, see
    # thunder/driver/torchscript.py); eager's reference runs it unoptimized, as autograd differentiates it
    unoptimized = torch.jit.optimized_execution(False) if variant == "softclamp-logits" else contextlib.nullcontext()
    with unoptimized:
        check_training_parity(model, (tokens,), loss_of=_lm_loss(tokens),
                              compilations=2 if variant == "alibi" else EINX_WARMUP)


def _mask():
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, 10:] = False
    return mask


WRAPPERS = {
    "encoder-masked": lambda: (_lm(xt.Encoder(dim=32, depth=2, heads=4, rotary_pos_emb=True)),
                               (torch.randint(0, 64, (2, 16)),), {"mask": _mask()}),
    "memory-tokens-l2norm-embed": lambda: (_lm(num_memory_tokens=3, l2norm_embed=True),
                                           (torch.randint(0, 64, (2, 16)),), {}),
    "continuous": lambda: (xt.ContinuousTransformerWrapper(dim_in=8, dim_out=8, max_seq_len=32,
                                                           attn_layers=xt.Encoder(dim=32, depth=2, heads=4)),
                           (torch.randn(2, 16, 8),), {"mask": _mask()}),
    "vit": lambda: (xt.ViTransformerWrapper(image_size=16, patch_size=4, num_classes=10,
                                            attn_layers=xt.Encoder(dim=32, depth=2, heads=4)),
                    (torch.randn(2, 3, 16, 16),), {}),
    "encoder-decoder": lambda: (xt.XTransformer(dim=32, enc_num_tokens=64, enc_depth=1, enc_heads=4,
                                                enc_max_seq_len=32, dec_num_tokens=64, dec_depth=1, dec_heads=4,
                                                dec_max_seq_len=32),
                                (torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 12))), {"mask": _mask()}),
    "autoregressive": lambda: (xt.AutoregressiveWrapper(_lm()), (torch.randint(0, 64, (2, 17)),), {}),
}


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_wrapper_training_parity(name):
    torch.manual_seed(0)
    model, args, kwargs = WRAPPERS[name]()

    class Call(torch.nn.Module):  # positional and keyword inputs in one call
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *a):
            return self.model(*a, **kwargs)

    loss_of = (lambda out: out) if name in ("autoregressive", "encoder-decoder") else (lambda out: out.pow(2).mean())
    check_training_parity(Call(), args, loss_of=loss_of, compilations=EINX_WARMUP)


def test_tied_embedding_training_parity():
    """``tie_embedding=True`` keeps a lambda that closes over the model (a deep copy would still use the original's
    weight), so the eager model is a second one made from the same seed."""
    def make():
        torch.manual_seed(0)
        return _lm(tie_embedding=True)

    model, ref = make(), make()
    tokens = torch.randint(0, 64, (2, 16))
    jmodel = thunder.jit(model)
    with one_thread():
        for _ in range(2):
            losses = [_lm_loss(tokens)(m(tokens)) for m in (jmodel, ref)]
            assert torch.equal(*losses)
            for loss in losses:
                loss.backward()
            for p, q in zip(model.parameters(), ref.parameters()):
                assert torch.equal(p.grad, q.grad)


@pytest.mark.parametrize("cache_kv", [False, True], ids=["no-cache", "kv-cache"])
def test_generation_with_a_jitted_network(cache_kv):
    """The wrapper's sampling loop, eager, calling the jitted network: with the key/value cache the network takes
    and returns x-transformers' ``LayerIntermediates`` (a dataclass of tensors)."""
    def make():
        torch.manual_seed(0)
        return xt.AutoregressiveWrapper(_lm(xt.Decoder(dim=32, depth=2, heads=4, rotary_pos_emb=True)))

    model, ref = make(), make()
    model.net = thunder.jit(model.net)
    prompt = torch.randint(0, 64, (2, 5))
    with one_thread():
        for temperature in (0.0, 1.0):
            torch.manual_seed(1)
            expected = ref.generate(prompt, 6, cache_kv=cache_kv, temperature=temperature)
            torch.manual_seed(1)
            assert torch.equal(model.generate(prompt, 6, cache_kv=cache_kv, temperature=temperature), expected)
