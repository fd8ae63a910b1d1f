"""Hugging Face transformers models train under thunder.jit exactly as in eager.

Each case builds a tiny random-init model with ``AutoConfig.for_model(...)`` and ``from_config``
(hidden size 64, 2 layers, vocabulary 128, batch 2, sequences of 16; with an attention mask, the
second row is left-padded), and checks one forward+backward and three SGD steps against a deep
copy run eagerly (``tests/parity.py``): outputs (``ModelOutput``, ``DynamicCache`` included), loss,
every ``.grad``, every buffer and every parameter, bitwise unless ``NOT_BITWISE`` says why not.
"""
from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

import thunder
from thunder.core.proxies import DataDependentError
from tests.parity import NotBitwise, check_training_parity, one_thread

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

VOCAB, BATCH, SEQ = 128, 2, 16
_DECODER = dict(hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, max_position_embeddings=64, attention_dropout=0.1)
_MOE = dict(num_experts_per_tok=2)
_ENCODER = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                max_position_embeddings=64, vocab_size=VOCAB)
_ENC_DEC = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB)


@dataclasses.dataclass(frozen=True)
class HFCase:
    model_type: str
    config: dict
    auto: str = "AutoModelForCausalLM"
    inputs: str = "tokens"  # "tokens" (input_ids, labels) or "audio" (Whisper's input_features, labels)


CASES = {
    "llama": HFCase("llama", _DECODER),
    "mistral": HFCase("mistral", _DECODER),
    "qwen2": HFCase("qwen2", _DECODER),
    "qwen3": HFCase("qwen3", dict(_DECODER, head_dim=16)),
    "gemma": HFCase("gemma", dict(_DECODER, head_dim=16)),
    "gemma2": HFCase("gemma2", dict(_DECODER, head_dim=16)),
    "gemma3_text": HFCase("gemma3_text", dict(_DECODER, head_dim=16)),
    # Phi-3's default pad_token_id (32000) is outside a 128-token vocabulary: nn.Embedding refuses it
    # ("Padding_idx must be within num_embeddings") before thunder is involved.
    "phi3": HFCase("phi3", dict(_DECODER, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # The MoE models' experts run HF's "grouped_mm" implementation. While thunder traces, HF sees
    # torch.compiler.is_compiling() and, for float32 weights, calls its custom op
    # transformers::grouped_mm_fallback (one torch.mm per expert; the generic fallback runs it and torch's
    # autograd differentiates it) instead of torch.nn.functional.grouped_mm, which eager calls. On CPU both
    # give the same bits, forward and backward.
    "mixtral": HFCase("mixtral", dict(_DECODER, **_MOE, num_local_experts=4)),
    "qwen2_moe": HFCase("qwen2_moe", dict(_DECODER, **_MOE, num_experts=4, moe_intermediate_size=32,
                                          shared_expert_intermediate_size=64)),
    # Multi-head latent attention gives keys as many heads as queries: num_key_value_heads must equal
    # num_attention_heads (HF's sdpa path would repeat the keys by num_attention_heads // num_key_value_heads).
    "deepseek_v3": HFCase("deepseek_v3", dict(_DECODER, **_MOE, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
                                              qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                              n_routed_experts=4, moe_intermediate_size=32, n_shared_experts=1,
                                              first_k_dense_replace=1, n_group=2, topk_group=1)),
    # Llama 4's chunked-attention mask is made with ``torch.zeros(..., dtype=int)``: a Python type as the dtype
    "llama4_text": HFCase("llama4_text", dict(_DECODER, **_MOE, head_dim=16, num_local_experts=4,
                                              intermediate_size_mlp=128)),
    "gpt2": HFCase("gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64)),
    "gpt_neox": HFCase("gpt_neox", dict(_DECODER, hidden_dropout=0.1)),
    "bert": HFCase("bert", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                max_position_embeddings=64, vocab_size=VOCAB), auto="AutoModelForMaskedLM"),
    "roberta": HFCase("roberta", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, max_position_embeddings=64, vocab_size=VOCAB),
                      auto="AutoModelForMaskedLM"),
    "t5": HFCase("t5", dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=VOCAB,
                            decoder_start_token_id=0), auto="AutoModelForSeq2SeqLM"),
    "bart": HFCase("bart", dict(_ENC_DEC, max_position_embeddings=64), auto="AutoModelForSeq2SeqLM"),
    # Whisper's default special tokens (50256, ...) are outside a 128-token vocabulary.
    "whisper": HFCase("whisper", dict(_ENC_DEC, num_mel_bins=16, max_source_positions=SEQ, max_target_positions=32,
                                      pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                                      suppress_tokens=None, begin_suppress_tokens=None, dropout=0.1),
                      auto="AutoModelForSpeechSeq2Seq", inputs="audio"),
    # More decoders, encoders and encoder-decoders, each with its own attention, norm, position embedding or MoE code
    "phi": HFCase("phi", _DECODER),
    "opt": HFCase("opt", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128, vocab_size=VOCAB,
                              max_position_embeddings=64, word_embed_proj_dim=64)),
    "gptj": HFCase("gptj", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64, rotary_dim=8)),
    "codegen": HFCase("codegen", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64, n_ctx=64,
                                      rotary_dim=8)),
    "gpt_neo": HFCase("gpt_neo", dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=VOCAB,
                                      max_position_embeddings=64, attention_types=[[["global", "local"], 1]],
                                      window_size=8)),
    "gpt_bigcode": HFCase("gpt_bigcode", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64)),
    **{name: HFCase(name, _DECODER) for name in ("starcoder2", "olmo", "olmo2", "cohere", "stablelm", "persimmon",
                                                   "granite")},
    "glm": HFCase("glm", dict(_DECODER, head_dim=16, pad_token_id=0)),
    "helium": HFCase("helium", dict(_DECODER, head_dim=16)),
    "smollm3": HFCase("smollm3", dict(_DECODER, pad_token_id=0)),
    "olmoe": HFCase("olmoe", dict(_DECODER, num_experts=4, num_experts_per_tok=2)),
    "xglm": HFCase("xglm", dict(d_model=64, num_layers=2, attention_heads=4, ffn_dim=128, vocab_size=VOCAB,
                                max_position_embeddings=64)),
    "mpt": HFCase("mpt", dict(d_model=64, n_layers=2, n_heads=4, vocab_size=VOCAB, max_seq_len=64)),
    "distilbert": HFCase("distilbert", dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=VOCAB,
                                            max_position_embeddings=64), auto="AutoModelForMaskedLM"),
    **{name.replace("-", "_"): HFCase(name, dict(_ENCODER, **extra), auto="AutoModelForMaskedLM") for name, extra in (
        ("albert", dict(embedding_size=32)), ("electra", dict(embedding_size=32)), ("deberta", {}), ("deberta-v2", {}),
        ("mpnet", {}), ("xlm-roberta", {}), ("camembert", {}),
        ("modernbert", dict(global_attn_every_n_layers=2, local_attention=8, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2, cls_token_id=1, sep_token_id=2)))},
    **{name.replace("-", "_"): HFCase(name, dict(_ENC_DEC, max_position_embeddings=64), auto="AutoModelForSeq2SeqLM")
       for name in ("mbart", "pegasus", "blenderbot-small", "plbart")},
    "marian": HFCase("marian", dict(_ENC_DEC, max_position_embeddings=64, decoder_start_token_id=0, pad_token_id=0),
                     auto="AutoModelForSeq2SeqLM"),
    "umt5": HFCase("umt5", dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=VOCAB,
                                decoder_start_token_id=0), auto="AutoModelForSeq2SeqLM"),
    # Recurrent and state-space decoders, and more encoders (Fourier mixing, rotary, convolutional, grouped and
    # landmark attention)
    "rwkv": HFCase("rwkv", dict(hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB, attention_hidden_size=64,
                                intermediate_size=128, context_length=64)),
    "mamba2": HFCase("mamba2", dict(hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB, state_size=8, expand=2,
                                    conv_kernel=4, num_heads=8, head_dim=16, n_groups=1, chunk_size=8)),
    "ctrl": HFCase("ctrl", dict(n_embd=64, n_layer=2, n_head=4, dff=128, vocab_size=VOCAB, n_positions=64)),
    "xlnet": HFCase("xlnet", dict(d_model=64, n_layer=2, n_head=4, d_inner=128, vocab_size=VOCAB)),
    **{name.replace("-", "_"): HFCase(name, dict(_ENCODER, **extra), auto="AutoModelForMaskedLM") for name, extra in (
        ("fnet", {}), ("roformer", dict(embedding_size=64)),
        ("convbert", dict(embedding_size=64)),
        ("squeezebert", dict(embedding_size=64, q_groups=1, k_groups=1, v_groups=1, post_attention_groups=1,
                             intermediate_groups=1, output_groups=1)),
        ("nystromformer", dict(num_landmarks=4, segment_means_seq_len=16)), ("big_bird", dict(attention_type="original_full")),
        ("rembert", dict(input_embedding_size=32, output_embedding_size=32)), ("ernie", {}), ("megatron-bert", {}))},
    # More decoders found bitwise by a sweep over transformers' causal LMs (2026-11-24): sliding-window and hybrid
    # layers, mixtures of experts with their own routers, differential attention, short convolutions, xLSTM cells
    **{name: HFCase(name, dict(_DECODER, head_dim=16, pad_token_id=0)) for name in (
        "cohere2", "exaone4", "vaultgemma", "nemotron", "diffllama", "bitnet", "seed_oss", "apertus", "arcee")},
    **{name: HFCase(name, dict(_DECODER, **_MOE, head_dim=16, pad_token_id=0, num_experts=4, num_local_experts=4,
                               moe_intermediate_size=32)) for name in (
        "qwen3_moe", "ernie4_5_moe", "gpt_oss", "minimax", "glm4_moe")},
    "lfm2": HFCase("lfm2", dict(_DECODER, pad_token_id=0)),
    # gated delta rule (its torch implementation): the key of a single chunk, key[:, :, 0], has eager's gradient
    # layout (select_backward's) only through thunder's rule for selects from a dimension of size 1
    "olmo_hybrid": HFCase("olmo_hybrid", dict(_DECODER, head_dim=16, pad_token_id=0)),
    **{name: HFCase(name, dict(_DECODER, **_MOE, head_dim=16, pad_token_id=0, num_experts=4)) for name in (
        "hunyuan_v1_dense", "hunyuan_v1_moe")},
    "xlstm": HFCase("xlstm", dict(hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB, num_heads=4,
                                  pad_token_id=0)),
    "biogpt": HFCase("biogpt", dict(_ENCODER, pad_token_id=0)),
    # Custom torch.autograd.Functions in training: BLOOM's GeLU, PhiMoE's router multiplier (a sparse mixer),
    # RecurrentGemma's bounded-derivative square root (see tests/test_custom_function.py)
    "bloom": HFCase("bloom", dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=VOCAB)),
    "phimoe": HFCase("phimoe", dict(_DECODER, **_MOE, num_local_experts=4)),
    "recurrent_gemma": HFCase("recurrent_gemma", dict(_DECODER, head_dim=16, lru_width=64, attention_window_size=8,
                                                      block_types=["recurrent", "attention"], pad_token_id=0)),
    # Models that read tensor values in Python, each computed from the inputs alone (see tests/test_value_guards.py):
    # Longformer's and LED's sliding-window chunks (torch.div of sizes, a tensor in eager, as a size of as_strided;
    # the padding and global-attention checks of the mask), XLM's and Flaubert's checks of lengths
    "longformer": HFCase("longformer", dict(_ENCODER, attention_window=8, pad_token_id=0), auto="AutoModelForMaskedLM"),
    "led": HFCase("led", dict(_ENC_DEC, attention_window=8, max_encoder_position_embeddings=64,
                              max_decoder_position_embeddings=64, pad_token_id=0, decoder_start_token_id=1),
                  auto="AutoModelForSeq2SeqLM"),
    **{name: HFCase(name, dict(emb_dim=64, n_layers=2, n_heads=4, vocab_size=VOCAB, max_position_embeddings=64,
                               pad_index=0), auto="AutoModelForMaskedLM") for name in ("xlm", "flaubert")},
    # Funnel's relative positions: aranges whose bounds are tensors computed from constants (their length known while
    # tracing), and torch.cat(..., axis=...) (NumPy's name, which torch's argument parser takes)
    "funnel": HFCase("funnel", dict(block_sizes=[1, 1], num_decoder_layers=1, d_head=16, n_head=4, d_model=64,
                                    d_inner=128, vocab_size=VOCAB, max_position_embeddings=64),
                     auto="AutoModelForMaskedLM"),
}

# Every case is bitwise: forward, loss, gradients, buffers and parameters after the optimizer steps.
NOT_BITWISE = {}

# Causal LMs run with and without an attention mask (HF builds the mask differently for each);
# encoders and encoder-decoders are given one, Whisper's encoder takes none.
_MASK_ONLY = {"bert", "roberta", "t5", "bart", "distilbert", "albert", "electra", "deberta", "deberta_v2", "mpnet",
              "xlm_roberta", "camembert", "modernbert", "mbart", "pegasus", "blenderbot_small", "plbart", "marian", "umt5",
              "fnet", "roformer", "convbert", "squeezebert", "nystromformer", "big_bird", "rembert", "ernie",
              "megatron_bert", "longformer", "led", "xlm", "flaubert", "funnel",
              # Without a mask, eager's SDPA repeats the grouped keys itself (enable_gqa); under compilation HF builds
              # a mask and repeats them first (repeat_kv): the keys' gradient, equal, comes laid out otherwise, and
              # the norm HunYuan applies to the keys sums its weight's gradient in another order (within 1e-9).
              "hunyuan_v1_dense", "hunyuan_v1_moe"}
_NO_MASK = {"whisper"}


def _params():
    out = []
    for name in CASES:
        masks = [True] if name in _MASK_ONLY else [False] if name in _NO_MASK else [False, True]
        out += [pytest.param(name, m, id=f"{name}-{'mask' if m else 'nomask'}") for m in masks]
    return out


def make_model(case: HFCase):
    config = transformers.AutoConfig.for_model(case.model_type, **case.config)
    torch.manual_seed(0)
    return getattr(transformers, case.auto).from_config(config).train()


def make_inputs(case: HFCase, mask: bool) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
    if case.inputs == "audio":
        return dict(input_features=torch.randn(BATCH, case.config["num_mel_bins"], 2 * SEQ, generator=g), labels=ids)
    inputs = dict(input_ids=ids, labels=ids.clone())
    if mask:
        attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
        attention_mask[1, :5] = 0  # a left-padded row
        inputs["attention_mask"] = attention_mask
        inputs["labels"][attention_mask == 0] = -100
    return inputs


@pytest.mark.parametrize("name,mask", _params())
def test_training_parity(name, mask):
    case = CASES[name]
    check_training_parity(make_model(case), make_inputs(case, mask), not_bitwise=NOT_BITWISE.get(name))


# In bfloat16 (every case was bitwise so on 2026-11-30 but FNet and Nystromformer, which eager cannot run in bf16):
# the mixtures of experts gather each expert's tokens by ``hidden_states[token_idx]``, whose gradient adds the rows of
# a token chosen by several experts; thunder added them as ``index_select``'s gradient does, rounding otherwise than
# eager's accumulating ``index_put`` (GPT-OSS's and ERNIE-4.5-MoE's gradients differed by a bf16 rounding).
@pytest.mark.parametrize("name", ["llama", "gpt2", "bert", "t5", "mixtral", "qwen3_moe", "ernie4_5_moe", "gpt_oss"])
def test_training_parity_in_bfloat16(name):
    case = CASES[name]
    check_training_parity(make_model(case).to(torch.bfloat16), make_inputs(case, mask=True))


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_training_parity_with_gradient_checkpointing(name):
    """HF's gradient checkpointing (torch.utils.checkpoint around each layer): recomputed, not saved."""
    case = CASES[name]
    model = make_model(case)
    model.gradient_checkpointing_enable()
    jmodel, _ = check_training_parity(model, make_inputs(case, mask=True), not_bitwise=NOT_BITWISE.get(name))
    assert "torch.nn.functional.linear(" in str(thunder.last_backward_traces(jmodel)[-1]), "nothing recomputed"


def test_past_key_values_hold_this_calls_keys_and_values():
    """The returned ``DynamicCache`` is rebuilt on every call with that call's tensors."""
    case = CASES["llama"]
    model = make_model(case).eval()
    jmodel = thunder.jit(model)
    with torch.no_grad(), one_thread():
        for seed in range(2):
            ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))
            actual, expected = jmodel(input_ids=ids), model(input_ids=ids)
            assert type(actual.past_key_values) is type(expected.past_key_values)
            assert actual.past_key_values.get_seq_length() == SEQ
            for layer, ref in zip(actual.past_key_values.layers, expected.past_key_values.layers, strict=True):
                assert type(layer.keys) is torch.Tensor
                assert torch.equal(layer.keys, ref.keys) and torch.equal(layer.values, ref.values)


# ---------------------------------------------------------------------------------------------
# Incremental decoding: the cache passed in is updated by every call (see [Note: state writes])
# ---------------------------------------------------------------------------------------------

_DECODING = ["llama", "qwen3", "gemma2", "gemma3_text", "phi3", "mixtral", "deepseek_v3", "gpt2", "gpt_neox",
             "gpt_bigcode", "olmoe", "bart", "t5"]
_STATIC_DECODING = ["llama", "gemma2", "gpt2", "qwen2_moe"]


def _new_cache(model, kind: str):
    if kind == "static":
        return transformers.StaticCache(config=model.config, max_cache_len=SEQ + 8)
    if model.config.is_encoder_decoder:
        return transformers.EncoderDecoderCache(transformers.DynamicCache(), transformers.DynamicCache())
    return transformers.DynamicCache(config=model.config)


def _cache_tensors(cache) -> list:
    if isinstance(cache, transformers.EncoderDecoderCache):
        return _cache_tensors(cache.self_attention_cache) + _cache_tensors(cache.cross_attention_cache)
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("name,kind", [(n, "dynamic") for n in _DECODING] + [(n, "static") for n in _STATIC_DECODING])
def test_incremental_decoding_updates_the_cache_as_eager(name, kind):
    """A prompt, then 3 tokens one at a time, each call given the cache the previous call updated: logits and every
    cached key and value bitwise eager's. ``StaticCache`` runs with ``cache_position`` (as ``generate`` passes it) and
    the attention mask of the prompt's length; DynamicCache (for encoder-decoders, the decoder's self-attention and
    cross-attention caches) with a left-padded attention mask. Before, the first call given a cache was refused."""
    case = CASES[name]
    model = make_model(case).eval()
    jmodel = thunder.jit(model)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    cache, ref_cache = _new_cache(model, kind), _new_cache(model, kind)
    if model.config.is_encoder_decoder:
        with torch.no_grad():
            encoded = model.get_encoder()(input_ids=ids)
        first = dict(encoder_outputs=encoded, decoder_input_ids=ids[:, :4])
        step = lambda token, i: dict(encoder_outputs=encoded, decoder_input_ids=token)  # noqa: E731
    elif kind == "static":
        first = dict(input_ids=ids, cache_position=torch.arange(SEQ))
        step = lambda token, i: dict(input_ids=token, cache_position=torch.tensor([SEQ + i]))  # noqa: E731
    else:
        mask = torch.ones(BATCH, SEQ, dtype=torch.long)
        mask[1, :5] = 0  # a left-padded row
        first = dict(input_ids=ids, attention_mask=mask)
        step = lambda token, i: dict(input_ids=token, attention_mask=torch.cat(  # noqa: E731
            [mask, torch.ones(BATCH, i + 1, dtype=torch.long)], 1))
    with torch.no_grad(), one_thread():
        inputs = first
        for i in range(4):
            actual = jmodel(**inputs, past_key_values=cache, use_cache=True)
            expected = model(**inputs, past_key_values=ref_cache, use_cache=True)
            assert torch.equal(actual.logits, expected.logits), i
            assert actual.past_key_values is cache
            tensors, ref_tensors = _cache_tensors(cache), _cache_tensors(ref_cache)
            assert len(tensors) == len(ref_tensors) and all(
                type(t) is torch.Tensor and torch.equal(t, r) for t, r in zip(tensors, ref_tensors)), i
            inputs = step(expected.logits[:, -1:].argmax(-1), i)
    if kind == "static" and name != "gemma2":  # the prompt, then one compilation for every step (Gemma 2's
        assert thunder.cache_misses(jmodel) == 2 and thunder.cache_hits(jmodel) == 2  # sliding layers count in Python)


def test_static_cache_reset_and_reused_decodes_as_eager():
    """Gemma 2's sliding-window cache layers count the tokens seen in a Python int (``cumulative_length += n``). After
    ``cache.reset()`` the second generation runs the first one's compilations, which must count as eager does: the
    Python values a program stores are stored after every call, not only when it is traced."""
    model = make_model(CASES["gemma2"]).eval()
    jmodel = thunder.jit(model)
    cache, ref_cache = _new_cache(model, "static"), _new_cache(model, "static")
    with torch.no_grad(), one_thread():
        for generation in range(2):
            cache.reset(), ref_cache.reset()
            ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(generation))
            inputs = dict(input_ids=ids, cache_position=torch.arange(SEQ))
            for i in range(3):
                actual = jmodel(**inputs, past_key_values=cache, use_cache=True)
                expected = model(**inputs, past_key_values=ref_cache, use_cache=True)
                assert torch.equal(actual.logits, expected.logits), (generation, i)
                assert [layer.cumulative_length for layer in cache.layers if hasattr(layer, "cumulative_length")] == \
                    [layer.cumulative_length for layer in ref_cache.layers if hasattr(layer, "cumulative_length")]
                inputs = dict(input_ids=expected.logits[:, -1:].argmax(-1), cache_position=torch.tensor([SEQ + i]))
    # The second generation's steps run the first one's compilations (its prompt compiles again: the first one
    # allocated the layers' tensors, lazily)
    assert thunder.cache_hits(jmodel) == 2


# ---------------------------------------------------------------------------------------------
# Layer drop (BART, Whisper, mBART, ...): ``if torch.rand([]) < self.layerdrop: continue`` in training
# ---------------------------------------------------------------------------------------------


class LayerDrop(torch.nn.Module):
    def __init__(self, layerdrop: float):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.layerdrop = layerdrop

    def forward(self, x):
        for layer in self.layers:
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:
                    continue
            x = torch.nn.functional.dropout(layer(x), 0.5, self.training)
        return x


def test_layerdrop_zero_traces_and_draws_as_eager():
    """``rand([]) < 0.0`` is False whatever the draw (see [Note: comparisons decided by value ranges])."""
    model = LayerDrop(0.0).train()
    x = torch.randn(4, 8)
    torch.manual_seed(0)
    actual = thunder.jit(model)(x)
    rng = torch.get_rng_state()
    torch.manual_seed(0)
    assert torch.equal(actual, model(x)) and torch.equal(rng, torch.get_rng_state())


def test_layerdrop_positive_is_data_dependent():
    with pytest.raises(DataDependentError, match="Tensor.__bool__"):
        thunder.jit(LayerDrop(0.5).train())(torch.randn(4, 8))


# ---------------------------------------------------------------------------------------------
# Speech encoders (raw waveforms through a convolutional feature extractor) and image-text models
# ---------------------------------------------------------------------------------------------

_SPEECH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, layerdrop=0.0,
               mask_time_prob=0.0, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3))
_TOWER = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
# LayerDrop draws torch.rand([]) < p in Python (data-dependent; 0 here, see test_layerdrop_positive_is_data_dependent)
# and SpecAugment's time mask is drawn by NumPy while tracing (a constant of the trace, as the sharp edges say of
# Python randomness): both off. Dropout stays on in training.
SPEECH_AND_IMAGE_TEXT = {
    "wav2vec2": ("Wav2Vec2ForSequenceClassification", "Wav2Vec2Config",
                 dict(_SPEECH, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_labels=4)),
    "hubert": ("HubertForSequenceClassification", "HubertConfig",
               dict(_SPEECH, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_labels=4)),
    "wavlm": ("WavLMForSequenceClassification", "WavLMConfig",
              dict(_SPEECH, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_labels=4, num_buckets=32,
                   max_bucket_distance=64)),
    "data2vec_audio": ("Data2VecAudioForSequenceClassification", "Data2VecAudioConfig",
                       dict(_SPEECH, num_conv_pos_embeddings=4, conv_pos_kernel_size=5,
                            num_conv_pos_embedding_groups=4, num_labels=4)),
    "sew": ("SEWForSequenceClassification", "SEWConfig",
            dict(_SPEECH, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_labels=4, squeeze_factor=2)),
    "clip": ("CLIPModel", "CLIPConfig", dict(text_config=dict(_TOWER, vocab_size=64, max_position_embeddings=32),
                                             vision_config=dict(_TOWER, image_size=32, patch_size=8), projection_dim=32)),
    "siglip": ("SiglipModel", "SiglipConfig", dict(text_config=dict(_TOWER, vocab_size=64, max_position_embeddings=32),
                                                   vision_config=dict(_TOWER, image_size=32, patch_size=8))),
}


class _SpeechOrImageTextLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, t):
        if x.ndim == 2:  # a waveform: classify it
            return torch.nn.functional.cross_entropy(self.model(input_values=x).logits, t)
        return self.model(input_ids=t, pixel_values=x, return_loss=True).loss  # contrastive image-text loss


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", list(SPEECH_AND_IMAGE_TEXT))
def test_speech_and_image_text_training_parity(name, train):
    """Before, wav2vec2's family was not bitwise (its positional convolution's GELU read a compact copy of a saved
    slice) and CLIP's and SigLIP's contrastive heads were not (a transposed operand's gradient was computed in another
    layout than eager's mm backward uses)."""
    cls, config_cls, config = SPEECH_AND_IMAGE_TEXT[name]
    torch.manual_seed(0)
    model = getattr(transformers, cls)(getattr(transformers, config_cls)(**config))
    g = torch.Generator().manual_seed(1)
    if name in ("clip", "siglip"):
        inputs = (torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 64, (2, 8), generator=g))
    else:
        inputs = (torch.randn(2, 800, generator=g), torch.randint(0, 4, (2,), generator=g))
    check_training_parity(_SpeechOrImageTextLoss(model).train(train), inputs, loss_of=lambda loss: loss, lr=0.01)


_CTC = dict(_SPEECH, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32, pad_token_id=0,
            ctc_loss_reduction="mean")
CTC_MODELS = {"wav2vec2": {}, "hubert": {}, "wavlm": dict(num_buckets=32, max_bucket_distance=64),
              "data2vec-audio": dict(num_conv_pos_embeddings=4, conv_pos_kernel_size=5), "sew": dict(squeeze_factor=2),
              "sew-d": dict(squeeze_factor=2, position_buckets=16, max_relative_positions=32),
              "unispeech": {}, "unispeech-sat": {}, "wav2vec2-conformer": {}}


@pytest.mark.parametrize("mask", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("name", list(CTC_MODELS))
def test_ctc_training_parity(name, mask):
    """Speech recognition heads: the loss first checks the labels in Python (``if labels.max() >= vocab_size:
    raise``), a value thunder computes from the labels and checks on every call (tests/test_value_guards.py), then
    CTC over lengths from the attention mask and a selection of the labels. Before, the check was refused."""
    config = transformers.AutoConfig.for_model(name, **{**_CTC, **CTC_MODELS[name]})
    torch.manual_seed(0)
    model = transformers.AutoModelForCTC.from_config(config)
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(1, 32, (2, 4), generator=g)
    labels[1, 3] = -100  # a shorter transcript
    inputs = dict(input_values=torch.randn(2, 800, generator=g), labels=labels)
    if mask:
        inputs["attention_mask"] = torch.ones(2, 800, dtype=torch.long)
        inputs["attention_mask"][1, 700:] = 0
    jmodel, _ = check_training_parity(model, inputs, lr=0.01)
    assert "check_values(" in str(thunder.last_prologue_traces(jmodel)[-1])


_HEAD_LABELS = {
    "single_label_classification": lambda g: torch.tensor([0, 2]),
    "multi_label_classification": lambda g: torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]),
    "regression": lambda g: torch.randn(BATCH, 3, generator=g),
}
HEADS = [("llama", "AutoModelForSequenceClassification", p) for p in _HEAD_LABELS] + [
    ("gpt2", "AutoModelForSequenceClassification", "single_label_classification"),
    ("qwen2", "AutoModelForTokenClassification", None),
    ("bert", "AutoModelForTokenClassification", None),
    ("roberta", "AutoModelForMultipleChoice", None),
    ("deberta_v2", "AutoModelForQuestionAnswering", None),
    # DeBERTa's classification loss asks ``if label_index.size(0) > 0`` of (labels >= 0).nonzero(): a comparison of a
    # run-time extent, decided by its value (see tests/test_value_guards.py); before, it was refused
    *[(name, "AutoModelForSequenceClassification", None) for name in ("deberta", "deberta_v2")],
]


@pytest.mark.parametrize("name,auto,problem", HEADS, ids=[f"{n}-{a[12:]}-{p or ''}" for n, a, p in HEADS])
def test_task_heads_training_parity(name, auto, problem):
    """Classification heads (a causal LM's pools its last non-padding token, found with argmax), their three losses,
    token classification, multiple choice and extractive question answering."""
    case = CASES[name]
    extra = dict(num_labels=2 if "Question" in auto else 3, pad_token_id=0)
    if problem:
        extra["problem_type"] = problem
    config = transformers.AutoConfig.for_model(case.model_type, **{**case.config, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, auto).from_config(config).train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
    ids[1, -3:] = 0  # a right-padded row
    inputs = dict(input_ids=ids, attention_mask=(ids != 0).long())
    if problem:
        inputs["labels"] = _HEAD_LABELS[problem](g)
    elif "Sequence" in auto:
        inputs["labels"] = torch.tensor([0, 2])
    elif "Token" in auto:
        inputs["labels"] = torch.randint(0, 3, (BATCH, SEQ), generator=g)
    elif "Question" in auto:
        inputs.update(start_positions=torch.tensor([1, 3]), end_positions=torch.tensor([4, 5]))
    else:  # multiple choice: three copies of each sequence
        inputs = {k: v.unsqueeze(1).expand(BATCH, 3, SEQ).contiguous() for k, v in inputs.items()}
        inputs["labels"] = torch.tensor([0, 2])
    check_training_parity(model, inputs)


# Fused by the inductor executor: the same training steps within float tolerance (inductor's kernels sum in other
# orders than eager's), with the backward's recomputation and the regions' layouts chosen as on a GPU.
# A decoder and an encoder, for the suite's time (each costs 20 to 45 s of cold inductor compilations on a 2-core
# machine): the others add compilations more than code. `scripts/sweep_hf.py causal --fused` runs every causal type
# (Gemma 2's soft-capping, GPT-2's Conv1D, Qwen 3, Mixtral's experts); Longformer's chunked attention, whose 2-D tiled
# reductions once corrupted the heap, is kept by test_a_2d_tiled_reductions_tail_is_stored_masked_or_the_region_is_refused
# in tests/test_fusion_inductor.py and `scripts/sweep_hf.py masked --fused`.
_FUSED = ["llama", "bert"]


@pytest.mark.parametrize("name", _FUSED)
def test_training_parity_with_inductor_fusion(name):
    pytest.importorskip("torch._inductor")
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("inductor's CPU kernels need a C++ compiler")
    case = CASES[name]
    jm, _ = check_training_parity(
        make_model(case), make_inputs(case, mask=name in _MASK_ONLY), executors=["inductor", "torch"],
        not_bitwise=NotBitwise("inductor's fused kernels sum in other orders than eager's", atol=1e-5, rtol=1e-4,
                               depends_on_machine=True))
    assert "InductorFusion" in str(thunder.last_backward_traces(jm)[-1])
