"""Sweeps Hugging Face transformers' model types that tests/test_hf_models.py does not cover: each gets a tiny
random config (the overrides below that its config class knows), one forward and backward eagerly and under
thunder.jit, and a verdict: BITWISE, COMPILED (bit for bit eager's results with torch.compiler.is_compiling()
reporting True, as while thunder traces: the model's compile path computes otherwise), CLOSE (within 1e-4 relative),
WRONG, ERROR (thunder raised), EAGERFAIL (eager raised: a config this sweep cannot make), TIMEOUT.

    python scripts/sweep_hf.py causal              # AutoModelForCausalLM types
    python scripts/sweep_hf.py masked              # AutoModelForMaskedLM types
    python scripts/sweep_hf.py seq2seq             # AutoModelForSeq2SeqLM types
    python scripts/sweep_hf.py image               # AutoModelForImageClassification types (or audio, ctc)
    python scripts/sweep_hf.py seqcls              # AutoModelForSequenceClassification types (or tokcls, qa, choice)
    python scripts/sweep_hf.py causal llama,gpt2   # these types only
    python scripts/sweep_hf.py causal --autocast   # every type (covered ones too), the forward under CPU bfloat16 autocast
    python scripts/sweep_hf.py causal --fused      # every type, thunder.jit(executors=["inductor", "torch"]): CLOSE is
                                                   # the expected verdict, WRONG ones are rechecked in float64
    python scripts/sweep_hf.py causal --bf16       # every type, its parameters and floating-point inputs in bfloat16
                                                   # (combines with --fused)
"""
from __future__ import annotations

import contextlib
import copy
import pathlib
import resource
import sys
import warnings

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import transformers  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402

import thunder  # noqa: E402
from tests.test_hf_models import CASES  # noqa: E402
from tests.metadata_check import CheckMetadata  # noqa: E402
from scripts._sweep import as_close_as_eager, bit_for_bit, first_that_runs, sweep  # noqa: E402

VOCAB = 128
TINY = dict(hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=64, head_dim=16, n_embd=64, n_layer=2, n_head=4,
            d_model=64, num_layers=2, n_layers=2, n_heads=4, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
            ffn_dim=128, n_positions=64, num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
            max_seq_len=64, n_ctx=64, embedding_size=64, layerdrop=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)
# images and waveforms: the towers small, the rest (hierarchical stages, feature extractors) as the config has it
TINY_IMAGE = dict(image_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  num_labels=10, layerdrop=0.0, drop_path_rate=0.0, mask_time_prob=0.0, vocab_size=VOCAB,
                  num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, conv_dim=(16, 16), conv_stride=(5, 2),
                  conv_kernel=(10, 3), pad_token_id=0)
KINDS = {"causal": (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "AutoModelForCausalLM"),
         "masked": (modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "AutoModelForMaskedLM"),
         "seq2seq": (modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "AutoModelForSeq2SeqLM"),
         "image": (modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES, "AutoModelForImageClassification"),
         "audio": (modeling_auto.MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES, "AutoModelForAudioClassification"),
         "ctc": (modeling_auto.MODEL_FOR_CTC_MAPPING_NAMES, "AutoModelForCTC"),
         "seqcls": (modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, "AutoModelForSequenceClassification"),
         "tokcls": (modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES, "AutoModelForTokenClassification"),
         "qa": (modeling_auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES, "AutoModelForQuestionAnswering"),
         "choice": (modeling_auto.MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES, "AutoModelForMultipleChoice")}
_TEXT = ("AutoModelForCausalLM", "AutoModelForMaskedLM", "AutoModelForSeq2SeqLM", "AutoModelForSequenceClassification",
         "AutoModelForTokenClassification", "AutoModelForQuestionAnswering", "AutoModelForMultipleChoice")


AUTOCAST = False  # --autocast: the forward under torch.autocast("cpu", dtype=torch.bfloat16), the backward outside
EXECUTORS = None  # --fused: ["inductor", "torch"]
DTYPE = None  # --bf16: torch.bfloat16, the model's parameters and buffers and the floating-point inputs


def _run(model, inputs, jit: bool):
    m = copy.deepcopy(model)
    f = thunder.jit(m, executors=EXECUTORS, transforms=[CheckMetadata()]) if jit else m  # see there
    torch.manual_seed(5)
    with torch.autocast("cpu", dtype=torch.bfloat16) if AUTOCAST else contextlib.nullcontext():
        out = f(**inputs)
    out.loss.backward()
    logits = out.logits if "logits" in out else torch.stack([out.start_logits, out.end_logits])  # (question answering)
    return out.loss.detach(), logits.detach(), {n: p.grad for n, p in m.named_parameters() if p.grad is not None}


def _build(model_type: str, auto: str, tiny: dict):
    classes = next(types for types, a in KINDS.values() if a == auto)[model_type]
    if isinstance(classes, (list, tuple)):  # several heads: the first (Auto picks by the config's architectures)
        tiny = dict(tiny, architectures=[classes[0]])
    config = transformers.AutoConfig.for_model(model_type, **tiny)
    torch.manual_seed(0)
    model, inputs = getattr(transformers, auto).from_config(config).train(), _inputs(config, auto)
    return (model, inputs) if DTYPE is None else _in_dtype(model, inputs, DTYPE)


def _inputs(config, auto: str) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 16), generator=g)
    if auto == "AutoModelForSequenceClassification":  # right-padded rows: the head pools each row's last token
        ids[1, 12:] = config.pad_token_id if config.pad_token_id is not None else 0
        return dict(input_ids=ids, labels=torch.tensor([0, 1]))
    if auto == "AutoModelForTokenClassification":
        return dict(input_ids=ids, labels=ids % 2)
    if auto == "AutoModelForQuestionAnswering":  # an answer span per row
        return dict(input_ids=ids, start_positions=torch.tensor([1, 3]), end_positions=torch.tensor([4, 9]))
    if auto == "AutoModelForMultipleChoice":  # three choices per row
        return dict(input_ids=ids.view(2, 1, 16).expand(2, 3, 16) % (VOCAB - 3 - torch.arange(3).view(1, 3, 1)) + 3,
                    labels=torch.tensor([0, 2]))
    if auto in _TEXT:
        return dict(input_ids=ids, labels=ids.clone())
    if auto == "AutoModelForImageClassification":
        size = getattr(getattr(config, "vision_config", config), "image_size", 64)
        size = size if isinstance(size, int) else size[-1]
        return dict(pixel_values=torch.randn(2, getattr(config, "num_channels", 3), size, size, generator=g),
                    labels=torch.randint(0, 10, (2,), generator=g))
    return dict(input_values=torch.randn(2, 4000, generator=g),  # a waveform
                labels=ids[:, :4] if auto == "AutoModelForCTC" else torch.randint(0, 10, (2,), generator=g))


def _build_and_run(model_type: str, auto: str, tiny: dict):
    model, inputs = _build(model_type, auto, tiny)
    return model, inputs, _run(model, inputs, jit=False)


def _on_the_compile_path(model, inputs):
    """Eager's results with ``torch.compiler.is_compiling()`` reporting True, as it does while thunder traces (README,
    "Library code sees that it is being compiled"): the model's compile path is another program (T5's all-zero mask,
    Doge's causal mask, a mask for grouped-query attention). None where eager fails on it."""
    from thunder.driver.frontend import _compiling_flag  # the flag thunder sets while it traces

    _compiling_flag.enter()
    try:
        return _run(model, inputs, jit=False)
    except Exception:  # noqa: BLE001
        return None
    finally:
        _compiling_flag.exit()


def _bitwise_with_the_compile_path(model, inputs, jitted) -> bool:
    """Whether thunder's results are bit for bit eager's on the model's compile path (``_on_the_compile_path``)."""
    compiled = _on_the_compile_path(model, inputs)
    if compiled is None:
        return False
    loss, logits, grads = compiled
    j_loss, j_logits, j_grads = jitted
    return set(grads) == set(j_grads) and bit_for_bit(loss, j_loss) and bit_for_bit(logits, j_logits) and all(
        bit_for_bit(grads[n], j_grads[n]) for n in grads)


def _in_dtype(model, inputs, dtype):
    """A copy of ``model`` and of the floating-point ``inputs`` in ``dtype``."""
    to = lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
    return copy.deepcopy(model).to(dtype), {k: to(v) for k, v in inputs.items()}


def _in_float64(model, inputs):
    """A float64 copy of ``model`` and of the floating-point ``inputs``."""
    return _in_dtype(model, inputs, torch.float64)


def _eager_in_float64(model, inputs, compile_path=False):
    """Eager's results in float64 (``compile_path``: on the model's compile path), or None where eager fails. Under
    ``--bf16``, where float64 fails (FSMT fills its mask with float32's lowest value cast to the mask's dtype: float64's
    overflows), eager's results in float32, still far more precise than either bf16 run."""
    for dtype in (torch.float64, torch.float32) if DTYPE is torch.bfloat16 else (torch.float64,):
        try:
            wide = _in_dtype(model, inputs, dtype)
            return _on_the_compile_path(*wide) if compile_path else _run(*wide, jit=False)
        except Exception:  # noqa: BLE001
            continue
    return None


def _as_close_to_float64_as_eager(model, inputs, eager, jitted, compile_path=False) -> bool:
    """Whether thunder's results are within a few times eager's distance from eager's results in float64 (fused
    kernels round otherwise: a model whose gradients amplify rounding differs from float32 eager by more than the
    sweep's tolerance, yet no more than eager does from exact values). ``compile_path``: the float64 run is eager's on
    the model's compile path (``_on_the_compile_path``)."""
    ref = _eager_in_float64(model, inputs, compile_path)
    if ref is None:
        return False
    (loss, logits, grads), (j_loss, j_logits, j_grads), (r_loss, r_logits, r_grads) = eager, jitted, ref
    return as_close_as_eager(loss, j_loss, r_loss) and as_close_as_eager(logits, j_logits, r_logits) and all(
        as_close_as_eager(grads[n], j_grads[n], r_grads[n]) for n in grads)


def _same_in_float64(model, inputs, compile_path=False) -> bool:
    """Whether thunder's run in float64 equals eager's in float64 to 1e-9 of each value's scale: the same
    computation, whose float32 results differ by rounding sent through a discontinuity (a ReLU's input within rounding
    of zero passes its gradient in one run and not in the other: T5's feed-forward). ``compile_path``: eager's on the
    model's compile path (``_on_the_compile_path``)."""
    eager = _eager_in_float64(model, inputs, compile_path)
    try:
        jitted = _run(*_in_float64(model, inputs), jit=True)
    except Exception:  # noqa: BLE001
        return False
    if eager is None:
        return False
    (loss, logits, grads), (j_loss, j_logits, j_grads) = eager, jitted
    scale = max((g.abs().max().item() for g in grads.values() if g.numel()), default=0.0)
    return set(grads) == set(j_grads) and torch.allclose(j_loss, loss, rtol=1e-9, atol=1e-9) and torch.allclose(
        j_logits, logits, rtol=1e-9, atol=1e-9 * logits.abs().max().item()) and all(
        torch.allclose(j_grads[n], grads[n], rtol=1e-9, atol=1e-9 * scale) for n in grads)


def sweep_one(model_type: str, auto: str) -> tuple[str, str]:
    defaults = vars(type(transformers.AutoConfig.for_model(model_type))())
    tiny = dict(TINY, num_labels=2) if auto in _TEXT else TINY_IMAGE
    # the overrides of the same kind as the config's own values (not an int where it holds a size per stage); where
    # eager cannot run that config, the config's own image size, then its own sizes throughout
    def same_kind(k, v):
        d = defaults[k]
        return d is None or type(d) is type(v) or isinstance(d, (list, tuple)) and isinstance(v, tuple)

    # (T5's config leaves decoder_start_token_id to its generation config, which the loss's shifted labels need)
    tiny = {k: v for k, v in tiny.items() if k in ("num_labels", "decoder_start_token_id") or k in defaults
            and same_kind(k, v)}
    attempts = [tiny, {k: v for k, v in tiny.items() if k != "image_size"},
                {k: v for k, v in tiny.items() if k in ("num_labels", "layerdrop", "mask_time_prob", "vocab_size")}]
    built, failure = first_that_runs(lambda attempt=attempt: _build_and_run(model_type, auto, attempt)
                                     for attempt in attempts)
    if built is None:
        return "EAGERFAIL", failure
    model, inputs, (loss, logits, grads) = built
    j_loss, j_logits, j_grads = _run(model, inputs, jit=True)
    compile_path = ""
    if EXECUTORS and (compiled := _on_the_compile_path(model, inputs)) is not None and not (
            bit_for_bit(loss, compiled[0]) and all(n in compiled[2] and bit_for_bit(grads[n], compiled[2][n]) for n in grads)):
        (loss, logits, grads), compile_path = compiled, "eager on the model's compile path: "  # the reference
    if set(grads) != set(j_grads):
        return "WRONG", f"parameters with a gradient differ: {sorted(set(grads) ^ set(j_grads))[:5]}"
    differ = [n for n in grads if not bit_for_bit(grads[n], j_grads[n])]
    if bit_for_bit(loss, j_loss) and bit_for_bit(logits, j_logits) and not differ:
        return "BITWISE", ""
    if not EXECUTORS and _bitwise_with_the_compile_path(model, inputs, (j_loss, j_logits, j_grads)):
        return "COMPILED", f"bitwise with eager on the model's compile path, {len(differ)} gradients differ from plain eager's"
    close = torch.allclose(loss, j_loss, rtol=1e-4, atol=1e-5) and torch.allclose(logits, j_logits, rtol=1e-4, atol=1e-5) \
        and all(torch.allclose(grads[n], j_grads[n], rtol=1e-3, atol=1e-5) for n in grads)
    diff = max([(grads[n] - j_grads[n]).abs().max().item() for n in differ] + [(logits - j_logits).abs().max().item()])
    if not close and EXECUTORS and _as_close_to_float64_as_eager(model, inputs, (loss, logits, grads), (j_loss, j_logits, j_grads),
                                                            bool(compile_path)):
        return "CLOSE64", (f"{compile_path}as close to float64 as eager: loss {loss.item():.6g} vs {j_loss.item():.6g}, max diff {diff:.3g}, "
                           f"{len(differ)} gradients differ")
    if not close and EXECUTORS and _same_in_float64(model, inputs, bool(compile_path)):
        return "CLOSE", (f"{compile_path}equal to eager in float64 (rounding through a discontinuity): loss "
                         f"{loss.item():.6g} vs {j_loss.item():.6g}, max diff {diff:.3g}, {len(differ)} gradients differ")
    return ("CLOSE" if close else "WRONG"), (f"{compile_path}loss {loss.item():.6g} vs {j_loss.item():.6g}, max diff {diff:.3g}, "
                                             f"{len(differ)} gradients differ: {differ[:3]}")


def main(argv):
    global AUTOCAST, EXECUTORS, DTYPE
    AUTOCAST = "--autocast" in argv
    EXECUTORS = ["inductor", "torch"] if "--fused" in argv else None
    DTYPE = torch.bfloat16 if "--bf16" in argv else None
    argv = [a for a in argv if a not in ("--autocast", "--fused", "--bf16")]
    types, auto = KINDS[argv[1] if len(argv) > 1 else "causal"]
    known = set() if AUTOCAST or EXECUTORS or DTYPE else {c.model_type for c in CASES.values() if c.auto == auto}
    names = argv[2].split(",") if len(argv) > 2 else sorted(set(types) - known)
    torch.set_num_threads(1)
    resource.setrlimit(resource.RLIMIT_AS, (10 * 2**30, 10 * 2**30))  # default configs can be huge: fail, not swap
    sweep(((name, lambda name=name: sweep_one(name, auto)) for name in names), 240, 28)


if __name__ == "__main__":
    main(sys.argv)
