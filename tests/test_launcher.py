"""The training launcher (launch/) end to end: torchrun jobs on CPU (gloo) with ddp and gradient accumulation,
two nodes on localhost, the SLURM template with stand-ins for srun and scontrol, one process, a rank that
fails, and the configuration errors. Each job is a few steps of a small GPT and ends within a minute."""
from __future__ import annotations

import importlib.util
import math
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.distributed,
              pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]  # @record under capsys

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "launch"
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "TORCHELASTIC_RUN_ID")
SMALL = ("--layers", "1", "--width", "32", "--heads", "2", "--seq-len", "32", "--log-every", "2")
STEP_LINE = re.compile(r"^step +(\d+)/(\d+) \| loss (\S+) \| +([\d.]+) ms/step.* \| +([\d,]+) tokens/s$", re.M)
CHECKSUM_LINE = re.compile(r"^rank (\d+): parameter checksum (\w+)$", re.M)
JOB_TIMEOUT_S = 120  # a job that takes longer is a hang (they take 5 to 25 s)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHON=sys.executable, **extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd, env) -> subprocess.Popen:
    return subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(*procs: subprocess.Popen, timeout: float = JOB_TIMEOUT_S) -> list[tuple[int, str]]:
    """(return code, output) of each process; a process still running at the deadline is killed with its
    process group (torchrun's workers) and the test fails."""
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"job did not end within {timeout} s:\n{out}")
        results.append((proc.returncode, out))
    return results


def _run(cmd, timeout: float = JOB_TIMEOUT_S, **env) -> tuple[int, str]:
    return _finish(_start(cmd, _env(**env)), timeout=timeout)[0]


def _check_training(out: str, *, steps: int, world_size: int) -> None:
    """Rank 0 logged the first and last steps with finite, decreasing losses and positive throughput,
    printed the summary, and every rank ended with the same parameters."""
    logged = {int(m[1]): (float(m[3]), float(m[5].replace(",", ""))) for m in STEP_LINE.finditer(out)}
    assert {1, steps} <= set(logged), out
    losses = [loss for loss, _ in logged.values()]
    assert all(math.isfinite(x) for x in losses) and logged[steps][0] < logged[1][0], out
    assert all(tokens_per_s > 0 for _, tokens_per_s in logged.values()), out
    assert f"summary: {steps} steps in " in out and "tokens/s" in out.split("summary:")[-1], out
    checksums = dict(CHECKSUM_LINE.findall(out))
    assert set(checksums) == {str(r) for r in range(world_size)} and len(set(checksums.values())) == 1, out
    if world_size > 1:
        assert f"parameters are equal on all {world_size} ranks" in out, out
    assert "terminate called" not in out, out


def test_single_node_ddp_with_gradient_accumulation():
    rc, out = _run(["bash", LAUNCH / "run_single_node.sh", "--nproc-per-node", "2", *SMALL, "--steps", "6",
                    "--batch", "8", "--grad-accum", "2", "--bucket-size-mb", "0.01", "--show-trace"])
    assert rc == 0, out
    assert "strategy ddp | world size 2 | device cpu (gloo)" in out, out
    assert "batch 8 x 32 bytes = 2 ranks x 2 micro-batches x 2 sequences" in out, out
    _check_training(out, steps=6, world_size=2)
    # --show-trace: the backward trace's collectives, once; small buckets give several of each
    assert out.count("collectives of the backward trace") == 1, out
    shown = out.split("collectives of the backward trace")[1].split("\nstep ")[0]
    counts = {name: len(re.findall(rf"\b{name}\(", shown)) for name in ("pack_bucket", "all_reduce", "wait",
                                                                        "unpack_bucket")}
    assert counts["all_reduce"] > 1 and len(set(counts.values())) == 1, shown


@pytest.mark.parametrize("sharding,bucketing", [("zero2", "none"), ("zero3", "block")])
def test_single_node_fsdp_with_gradient_accumulation(sharding, bucketing):
    rc, out = _run(["bash", LAUNCH / "run_single_node.sh", "--nproc-per-node", "2", *SMALL, "--steps", "6",
                    "--batch", "8", "--grad-accum", "2", "--strategy", "fsdp", "--sharding", sharding,
                    "--bucketing", bucketing, "--show-trace"])
    assert rc == 0, out
    assert "strategy fsdp | world size 2 | device cpu (gloo)" in out, out
    _check_training(out, steps=6, world_size=2)  # the gathered whole parameters agree across ranks
    shown = out.split("collectives of the backward trace")[1].split("\nstep ")[0]
    assert re.search(r"\breduce_scatter\(", shown) and (sharding == "zero2") != bool(re.search(r"\ball_gather\(", shown))


def test_two_nodes_on_localhost():
    port = _free_port()
    env = _env()
    nodes = [_start(["bash", LAUNCH / "run_multi_node.sh", "--nnodes", "2", "--node-rank", str(r),
                     "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}", "--",
                     *SMALL, "--steps", "4"], env) for r in (0, 1)]
    results = _finish(*nodes)
    assert [rc for rc, _ in results] == [0, 0], results
    out = "\n".join(out for _, out in results)
    assert "strategy ddp | world size 2 | device cpu (gloo)" in out, out
    _check_training(out, steps=4, world_size=2)


def test_slurm_template_with_stand_ins_for_srun_and_scontrol(tmp_path):
    """slurm.sbatch as SLURM would run it on two nodes: srun starts its command once per node."""
    (tmp_path / "scontrol").write_text("#!/usr/bin/env bash\nprintf '127.0.0.1\\n127.0.0.1\\n'\n")
    (tmp_path / "srun").write_text(textwrap.dedent("""\
        #!/usr/bin/env bash
        while [[ "$1" == --* ]]; do shift; done
        pids=()
        for ((i = 0; i < SLURM_JOB_NUM_NODES; i++)); do SLURM_NODEID=$i "$@" & pids+=($!); done
        rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc
        """))
    for tool in ("scontrol", "srun"):
        (tmp_path / tool).chmod(0o755)
    port = _free_port()
    rc, out = _run(["bash", LAUNCH / "slurm.sbatch", *SMALL, "--steps", "4"],
                   PATH=f"{tmp_path}:{os.environ['PATH']}", SLURM_JOB_NODELIST="node[1-2]", SLURM_JOB_NUM_NODES="2",
                   SLURM_JOB_ID=f"slurm-{port}", SLURM_SUBMIT_DIR=str(ROOT), MASTER_PORT=str(port), NPROC_PER_NODE="1")
    assert rc == 0, out
    _check_training(out, steps=4, world_size=2)


@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_one_process(launcher):
    """--strategy none in a plain process (the default there), and ddp with a world size of 1."""
    if launcher == "python":
        cmd = [sys.executable, LAUNCH / "train.py", "--show-trace"]
    else:
        cmd = ["bash", LAUNCH / "run_single_node.sh", "--nproc-per-node", "1", "--strategy", "ddp"]
    rc, out = _run([*cmd, *SMALL, "--steps", "4", "--executors", "torch,python"])
    assert rc == 0, out
    strategy = "none" if launcher == "python" else "ddp"
    assert f"strategy {strategy} | world size 1 | device cpu" in out and "executors torch,python" in out, out
    _check_training(out, steps=4, world_size=1)
    if launcher == "python":
        assert "(gloo)" not in out and "(none: no data-parallel strategy)" in out, out


def test_failing_rank_ends_the_job_with_its_error():
    start = time.monotonic()
    rc, out = _run(["bash", LAUNCH / "run_single_node.sh", "--nproc-per-node", "2", *SMALL, "--steps", "6",
                    "--fail-on-rank", "1", "--fail-at-step", "3", "--timeout-s", "20"], timeout=90)
    assert rc != 0, out
    assert time.monotonic() - start < 90
    assert "RuntimeError: rank 1 fails at step 3, as asked by --fail-on-rank 1 --fail-at-step 3" in out, out
    assert re.search(r"^step +1/6 \| loss", out, re.M), out  # the job ran before it failed
    assert "terminate called" not in out and "summary:" not in out, out


def test_failing_rank_on_another_node_ends_the_job():
    port = _free_port()
    env = _env()
    start = time.monotonic()
    nodes = [_start(["bash", LAUNCH / "run_multi_node.sh", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
                     "--rdzv-id", f"fail-{port}", *SMALL, "--steps", "6", "--fail-on-rank", "1",
                     "--fail-at-step", "2", "--timeout-s", "20"], env) for _ in range(2)]
    results = _finish(*nodes, timeout=90)
    assert time.monotonic() - start < 90
    out = "\n".join(out for _, out in results)
    assert all(rc != 0 for rc, _ in results), out
    assert "RuntimeError: rank 1 fails at step 2, as asked by --fail-on-rank 1 --fail-at-step 2" in out, out
    assert "terminate called" not in out, out


def test_hanging_rank_ends_the_job_after_the_timeout():
    """A rank that stops answering: its peer's collective fails after --timeout-s, and the job ends."""
    start = time.monotonic()
    rc, out = _run(["bash", LAUNCH / "run_single_node.sh", "--nproc-per-node", "2", *SMALL, "--steps", "6",
                    "--fail-on-rank", "1", "--fail-at-step", "2", "--fail-mode", "hang", "--timeout-s", "3"],
                   timeout=90)
    assert rc != 0, out
    assert time.monotonic() - start < 90
    assert "rank 1 hangs at step 2, as asked by --fail-mode hang" in out, out
    assert "Timed out waiting 3000ms" in out, out  # rank 0's all-reduce, after the process group's timeout
    assert "terminate called" not in out, out


# -- configuration errors -------------------------------------------------------------------------------
@pytest.fixture
def train_main(monkeypatch):
    """launch/train.py's ``main``, imported in this process (its sibling modules removed again after)."""
    for var in TORCHRUN_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.syspath_prepend(str(LAUNCH))
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location("launch_train", LAUNCH / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module.main
    for name in set(sys.modules) - before:
        if str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(LAUNCH)):
            del sys.modules[name]


FAKE_TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
BAD_CONFIGS = {
    "ddp without torchrun": (["--strategy", "ddp"], {}, "--strategy ddp needs torchrun's environment"),
    "unknown strategy": (["--strategy", "fsdp9"], {}, "argument --strategy: invalid choice: 'fsdp9'"),
    "unknown executor": (["--executors", "torch,nvfuserx"], {},
                         "argument --executors: unknown executor 'nvfuserx' (known executors: "),  # python, torch, ...
    "empty executors": (["--executors", ","], {}, "argument --executors: unknown executor ','"),
    "batch not divisible": (["--batch", "6", "--grad-accum", "4"], {},
                            "--batch 6 must be divisible by the world size (1) times --grad-accum (4)"),
    "batch not divisible by ranks": (["--batch", "3"], FAKE_TORCHRUN,
                                     "--batch 3 must be divisible by the world size (2) times --grad-accum (1)"),
    "none with two ranks": (["--strategy", "none"], FAKE_TORCHRUN,
                            "--strategy none trains in one process, but torchrun started 2"),
    "incomplete torchrun environment": ([], {"RANK": "0"}, "torchrun's environment is incomplete"),
    "zero steps": (["--steps", "0"], {}, "argument --steps: expected a positive int, got '0'"),
    "negative timeout": (["--timeout-s", "-1"], {}, "argument --timeout-s: expected a positive float"),
    "negative bucket size": (["--bucket-size-mb", "-1"], {}, "argument --bucket-size-mb: expected a non-negative"),
    "dropout out of range": (["--dropout", "1.5"], {}, "--dropout 1.5 must be a probability in [0, 1)"),
    "empty data file": (["--data", os.devnull], {}, "needs at least 65 bytes per rank, but the data's 0 bytes"),
    "heads do not divide width": (["--width", "30", "--heads", "4"], {}, "--width 30 must be divisible by --heads 4"),
    "sequence longer than a shard": (["--seq-len", "100000"], {}, "--seq-len 100000 needs at least 100001 bytes"),
    "missing data file": (["--data", "/nonexistent/text.txt"], {}, "--data /nonexistent/text.txt: No such file"),
    "fail flags alone": (["--fail-on-rank", "0"], {}, "--fail-on-rank and --fail-at-step go together"),
    "fail on a rank that does not exist": (["--fail-on-rank", "3", "--fail-at-step", "1"], {},
                                           "--fail-on-rank must be a rank (0 to 0)"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_configuration_is_an_argparse_error(case, train_main, monkeypatch, capsys):
    argv, env, message = BAD_CONFIGS[case]
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(SystemExit) as exit_info:
        train_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: " in err and message in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_cuda_is_an_argparse_error(train_main, capsys):
    with pytest.raises(SystemExit):
        train_main(["--device", "cuda"])
    assert "--device cuda: no CUDA device is available here" in capsys.readouterr().err


def test_bad_configuration_from_the_command_line():
    rc, out = _run([sys.executable, LAUNCH / "train.py", "--strategy", "ddp"], timeout=60)
    assert rc == 2 and "train.py: error: --strategy ddp needs torchrun's environment" in out, out


def test_multi_node_wrapper_needs_nnodes_and_endpoint():
    rc, out = _run(["bash", LAUNCH / "run_multi_node.sh", "--rdzv-endpoint", "127.0.0.1:1"], timeout=30)
    assert rc != 0 and "give the number of nodes: --nnodes N" in out, out
    rc, out = _run(["bash", LAUNCH / "run_multi_node.sh", "--nnodes", "2"], timeout=30)
    assert rc != 0 and "give the rendezvous address: --rdzv-endpoint HOST:PORT" in out, out


# -- the data -------------------------------------------------------------------------------------------
def _textdata():
    spec = importlib.util.spec_from_file_location("launch_textdata", LAUNCH / "textdata.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_rank_reads_its_own_slice_reproducibly():
    textdata = _textdata()
    data = textdata.load_bytes()
    assert 1000 < data.numel() < 20_000 and int(data.max()) < textdata.VOCAB_SIZE  # embedded, a few KB of bytes
    half = data.numel() // 2

    def batches(rank, seed=0):
        return textdata.ShardedBatches(data, rank=rank, world_size=2, batch=16, seq_len=8, seed=seed,
                                       device=torch.device("cpu"))

    shards = [data[:half], data[half:]]
    for rank in (0, 1):
        inputs, targets = next(batches(rank))
        assert inputs.shape == targets.shape == (16, 8)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the next bytes
        windows = shards[rank].unfold(0, 9, 1)
        rows = torch.cat([inputs, targets[:, -1:]], dim=1)
        assert all((windows == row).all(dim=1).any() for row in rows)  # from this rank's slice
        assert torch.equal(next(batches(rank))[0], inputs)  # the same seed draws the same batch
        assert not torch.equal(next(batches(rank, seed=1))[0], inputs)
    assert not torch.equal(next(batches(0))[0], next(batches(1))[0])
