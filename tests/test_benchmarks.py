"""Smoke tests of benchmarks/fusion.py: its whole path runs on tiny models (without torch.compile, which
would take minutes), a variant naming an unknown executor is reported without stopping the others, and
thunder's final loss is eager's."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


def run_fusion(*args: str) -> str:
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "fusion.py"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def table_rows(out: str, which: int = 0) -> dict:
    """{(first word of the model's label, variant): the row's cells} of the output's markdown table ``which``
    (0: the step times; 1: with --pairs, the paired ratios)."""
    tables, rows = [], None
    for line in out.splitlines():
        if line.startswith("|-"):  # under the header
            continue
        if not line.startswith("| "):
            rows = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "model":
            rows = {}
            tables.append(rows)
        elif rows is not None:
            rows[cells[0].split()[0], cells[1]] = cells
    return tables[which]


@pytest.mark.parametrize("device", DEVICES)
def test_fusion_benchmark_smoke(device):
    out = run_fusion("--device", device, "--gpu-model-scale", "tiny", "--no-compile", "--steps", "2", "--rounds", "1",
                     "--models", "llama,gpt", "--thunder-executors", "no_such_executor;torch")
    rows = table_rows(out)
    assert "Unknown executor 'no_such_executor'" in out
    for model in ("Llama", "GPT"):
        assert rows[model, "thunder[no_such_executor]"][2] == "failed"
        eager_loss = float(rows[model, "eager"][-1])
        for variant in ("thunder", "thunder[torch]"):
            cells = rows[model, variant]
            assert float(cells[2]) > 0  # step ms
            assert float(cells[-1]) == pytest.approx(eager_loss, abs=1e-4)  # same weights, data and dropout masks


def test_fusion_benchmark_first_call_only():
    out = run_fusion("--first-call-only", "--model", "llama", "--variant", "thunder[torch]", "--gpu-model-scale", "tiny")
    label, seconds = out.strip().splitlines()[-1].split()
    assert label == "first_call_s" and float(seconds) > 0


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="inductor needs a C++ compiler")
def test_fusion_benchmark_reads_a_kept_inductor_cache(tmp_path):
    """--inductor-cache DIR: a second run's regions are read from the cache the first left in DIR."""
    reads = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", "fusion.py"), "--first-call-only", "--model", "llama",
             "--variant", "thunder[inductor,torch]", "--gpu-model-scale", "tiny", "--inductor-cache", str(tmp_path)],
            capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        m = re.search(r"region compilations: (.*), (\d+) read from inductor's cache", proc.stderr)
        assert m, proc.stderr
        reads.append((sum(int(n) for n in re.findall(r"(\d+) \w+", m.group(1))), int(m.group(2))))
    (compiled, read_first), (compiled_again, read_again) = reads
    assert compiled == compiled_again > 0 and read_first == 0 and read_again == compiled


def test_fusion_benchmark_pairs():
    out = run_fusion("--gpu-model-scale", "tiny", "--no-compile", "--steps", "1", "--rounds", "1", "--models", "llama",
                     "--pairs", "5")
    rows = table_rows(out, 1)
    assert rows["Llama", "eager"][2:] == ["5", "n/a", "n/a"]  # cycles; no torch.compile to divide by
    interval = re.fullmatch(r"([\d.]+) \(([\d.]+) to ([\d.]+)\)", rows["Llama", "thunder"][3])
    median, low, high = map(float, interval.groups())
    assert 0 < low <= median <= high


@pytest.mark.parametrize("device", DEVICES)
def test_fusion_benchmark_profile(device, tmp_path):
    """--profile: a row per variant with its host and step times (and, on CUDA, kernel time and launches), and each
    variant's profiler table in the file."""
    path = tmp_path / "profile.txt"
    out = run_fusion("--device", device, "--gpu-model-scale", "tiny", "--no-compile", "--steps", "1", "--rounds", "1",
                     "--models", "llama", "--profile", str(path))
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
            for line in out.splitlines() if line.startswith("| ") and line.count("|") == 6}
    for variant in ("eager", "thunder"):
        host, step, kernel_ms, kernels = map(float, rows[variant][1:])
        assert 0 < host <= step and (kernel_ms > 0 and kernels > 0) == (device == "cuda")
    text = path.read_text()
    assert "## Llama" in text and text.count("\n## ") == (3 if device == "cuda" else 2)  # + thunder+cudagraphs


def test_first_call_benchmark_smoke():
    """benchmarks/first_call.py: a row per model, thunder's second call a cache hit (faster than its first)."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "first_call.py"), "--models", "hf-llama",
                           "--layers", "1", "--repeats", "1"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in proc.stdout.splitlines()
            if line.startswith("| HF Llama 1x256")]
    assert len(rows) == 1, proc.stdout
    eager, first, second, ops, ratio = map(float, rows[0][1:])
    assert 0 < second < first and ops > 0 and ratio > 0
