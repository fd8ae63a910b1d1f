"""First-call (tracing and compiling) time of library models under thunder.jit, against an eager training step.

For each model: eager's forward and backward (the median of ``--repeats``), thunder's first call (a fresh
``thunder.jit`` of the model: tracing, transforms, the first forward and backward; the median of ``--repeats``
fresh jits) and its second call, with the traced program's size. The models are the libraries' own, at small sizes:
Hugging Face's Llama (``--layers`` decoder layers of width 256, sequence 64, batch 2) and torchvision's ResNet-50 and
DenseNet-121 (64x64 images, batch 2). thunder runs with its default executors (the torch executor on the CPU), so
the first call is thunder's own work, not a fusion compiler's. ``--compile`` adds torch.compile's first call (tens
of seconds each on a small machine).

    python benchmarks/first_call.py [--models hf-llama,resnet50,densenet121] [--layers 12] [--repeats 3]

This prints a table; it is not a timed test.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import thunder  # noqa: E402


def _hf_llama(layers: int):
    import transformers

    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 1000, (2, 64), generator=torch.Generator().manual_seed(0))
    return f"HF Llama {layers}x256, seq 64, batch 2", model, lambda m: m(ids, labels=ids).loss


def _torchvision(name: str):
    from tests.libraries import import_library

    model = getattr(import_library("torchvision").models, name)(num_classes=10)
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    return f"torchvision {name}, 64x64, batch 2", model, lambda m: m(images).square().mean()


MODELS = {"hf-llama": None, "resnet50": lambda args: _torchvision("resnet50"),
          "densenet121": lambda args: _torchvision("densenet121")}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _step(model, loss_of):
    loss_of(model).backward()
    model.zero_grad(set_to_none=True)


def measure(name: str, args) -> dict:
    label, model, loss_of = _hf_llama(args.layers) if name == "hf-llama" else MODELS[name](args)
    _step(model, loss_of)  # warm-up: allocations, lazy imports
    eager = statistics.median(_timed(lambda: _step(model, loss_of)) for _ in range(args.repeats))
    firsts, seconds, size = [], [], 0
    for _ in range(args.repeats):
        jitted = thunder.jit(copy.deepcopy(model))
        firsts.append(_timed(lambda: _step(jitted, loss_of)))
        seconds.append(_timed(lambda: _step(jitted, loss_of)))
        size = len(thunder.last_traces(jitted)[-1].bound_symbols)
    row = {"model": label, "eager step s": eager, "thunder first call s": statistics.median(firsts),
           "thunder second call s": statistics.median(seconds), "forward trace ops": size}
    if args.compile:
        compiled = torch.compile(copy.deepcopy(model))
        row["torch.compile first call s"] = _timed(lambda: _step(compiled, loss_of))
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="hf-llama,resnet50,densenet121")
    p.add_argument("--layers", type=int, default=12, help="decoder layers of the HF Llama")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also torch.compile's first call")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    rows = [measure(name, args) for name in args.models.split(",")]
    columns = list(rows[0])
    print(f"torch {torch.__version__}, {args.threads} thread(s), first call = tracing + transforms + the first step")
    print("| " + " | ".join(columns) + " | first call / eager step |")
    print("|" + "---|" * (len(columns) + 1))
    for r in rows:
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()]
        print("| " + " | ".join(cells) + f" | {r['thunder first call s'] / r['eager step s']:.1f} |")


if __name__ == "__main__":
    main()
