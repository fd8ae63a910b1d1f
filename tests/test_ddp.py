"""thunder.distributed.ddp against torch's DistributedDataParallel on 2 gloo ranks (processes spawned here).

Each rank trains a thunder DDP model and a torch DDP model side by side from the same (rank-dependent, so
that the initial broadcast matters) initialization on rank-dependent data; losses, every ``.grad`` and
every parameter must be bitwise equal after each SGD step. One spawn per model runs every configuration
(bucket sizes, the three ways to apply DDP); the tests check its results one configuration at a time.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import re

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import thunder
from thunder.distributed import DDPTransform, ddp
from thunder.distributed.prims import all_reduce, wait
from tests.distributed import run_ranks
from tests.models import GPT, CustomFunctionMLP, GPTConfig, MLP, RankDependentBranch

pytestmark = [pytest.mark.distributed]

STEPS = 3
ORDERS = ("jit(ddp(model))", "ddp(jit(model))", "transforms=[DDPTransform]")
BUCKETS = (0, "split", 25, 1000)  # "split": a third of the model's gradient bytes, so several buckets


def _mlp():
    return MLP(width=16, n_layers=3, in_features=8, out_features=4)


def _gpt():
    return GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0))


MODELS = {"mlp": _mlp, "gpt": _gpt, "custom-function": CustomFunctionMLP}


def _batch(name: str, rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if name != "gpt":
        return (torch.randn(5, 8, generator=g),)
    return torch.randint(0, 64, (2, 8), generator=g), torch.randint(0, 64, (2, 8), generator=g)


def _loss(name, model, batch):
    return model(*batch)[1] if name == "gpt" else model(*batch).square().mean()


def _bucket_mb(model, size):
    if size != "split":
        return size
    return sum(p.numel() * p.element_size() for p in model.parameters()) / 3 / 2**20


def _wrap(model, order: str, bucket_mb):
    if order == "jit(ddp(model))":
        return thunder.jit(ddp(model, bucket_size_in_mb=bucket_mb))
    if order == "ddp(jit(model))":
        return ddp(thunder.jit(model), bucket_size_in_mb=bucket_mb)
    return thunder.jit(model, transforms=[DDPTransform(bucket_size_in_mb=bucket_mb)])


def _trace_text(trace) -> str:
    return "\n".join(line for line in str(trace).splitlines() if not line.startswith("# Constructed by"))


def _differences(a: nn.Module, b: nn.Module, what: str) -> list:
    diffs = []
    if what == "buffer":
        return [f"buffer {name}" for (name, x), y in zip(a.named_buffers(), b.buffers()) if not torch.equal(x, y)]
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        x, y = (p, q) if what == "param" else (p.grad, q.grad)
        if (x is None) != (y is None) or (x is not None and not torch.equal(x, y)):
            diffs.append(f"{what} {name}")
    return diffs


def _parity_worker(rank, world_size, name):
    results = {}
    for size in BUCKETS:
        for order in ORDERS:
            torch.manual_seed(rank)  # ranks start different: DDP broadcasts rank 0's parameters
            model = MODELS[name]()
            reference = copy.deepcopy(model)
            bucket_mb = _bucket_mb(model, size)
            jm = _wrap(model, order, bucket_mb)
            tddp = nn.parallel.DistributedDataParallel(reference, bucket_cap_mb=bucket_mb)
            opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
            diffs = _differences(model, reference, "param")
            for step in range(STEPS):
                batch = _batch(name, rank, step)
                losses = []
                for m, opt in zip((jm, tddp), opts):
                    opt.zero_grad()
                    loss = _loss(name, m, batch)
                    loss.backward()
                    losses.append(loss.detach())
                if not torch.equal(*losses):
                    diffs.append(f"loss at step {step}")
                diffs += _differences(model, reference, "grad")
                for opt in opts:
                    opt.step()
                diffs += _differences(model, reference, "param")
            gathered = [torch.empty(0)] * world_size
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            dist.all_gather_object(gathered, flat)
            results[(size, order)] = dict(
                diffs=diffs, same_across_ranks=all(torch.equal(gathered[0], g) for g in gathered),
                trace=_trace_text(thunder.last_backward_traces(jm)[-1]),
                n_grads=sum(p.requires_grad for p in model.parameters()))
            del tddp
    return results


@functools.cache
def _parity(name):
    return run_ranks(_parity_worker, name)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("size", BUCKETS)
@pytest.mark.parametrize("name", MODELS)
def test_gradients_and_parameters_equal_torch_ddp(name, size, order):
    for rank, results in enumerate(_parity(name)):
        r = results[(size, order)]
        assert r["diffs"] == [], f"rank {rank}: not bitwise equal to torch DDP: {r['diffs']}"
        assert r["same_across_ranks"], f"rank {rank}: parameters differ across ranks"


@pytest.mark.parametrize("size", BUCKETS)
@pytest.mark.parametrize("name", MODELS)
def test_ways_of_applying_ddp_give_the_same_trace(name, size):
    results = _parity(name)[0]
    traces = {order: results[(size, order)]["trace"] for order in ORDERS}
    assert len(set(traces.values())) == 1, traces


def _calls(trace: str, fn: str) -> list[str]:
    return [line.strip() for line in trace.splitlines() if re.match(rf"\s+(\S+ = )?{fn}\(", line)]


@pytest.mark.parametrize("size", BUCKETS)
@pytest.mark.parametrize("name", MODELS)
def test_backward_trace_reduces_each_gradient_once_in_buckets(name, size):
    r = _parity(name)[0][(size, ORDERS[0])]
    trace = r["trace"]
    packs, reduces, waits, unpacks = (_calls(trace, f) for f in ("pack_bucket", "all_reduce", "wait", "unpack_bucket"))
    assert len(packs) == len(reduces) == len(waits) == len(unpacks) > 0
    # every parameter gradient is in exactly one bucket (the GPT's tied embedding/head weight once)
    params = [p for line in packs for p in re.search(r"\[(.*?)\]", line).group(1).split(", ")]
    assert len(params) == len(set(params)) == r["n_grads"]
    if size == 0:
        assert len(reduces) == r["n_grads"]  # one all-reduce per gradient
    elif size == "split":
        assert 1 < len(reduces) < r["n_grads"]
    else:
        assert len(reduces) == 1
    lines = [line.strip() for line in trace.splitlines() if not line.strip().startswith("#")]
    # each bucket is issued right after it is packed; every wait comes after the last computation
    for pack, reduce in zip(packs, reduces):
        assert lines[lines.index(pack) + 1 + (lines[lines.index(pack) + 1].startswith("del "))] == reduce
    last_reduce = max(lines.index(x) for x in reduces)
    first_wait = min(lines.index(x) for x in waits)
    assert first_wait > last_reduce
    assert all(line.startswith(("del ", "unpack_bucket(", "return", "t")) for line in lines[first_wait:])
    assert not any("torch." in line for line in lines[first_wait:])  # no computation waits for communication
    assert lines[-1] == "return " + ", ".join(["None"] * len(lines[-1].split(", ")))


# -- no_sync -----------------------------------------------------------------------------------------


def _count_all_reduces(fn) -> int:
    """Gloo all-reduces ``fn`` runs, as torch's profiler sees them (independent of how thunder issues them)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.name == "gloo:all_reduce" for e in prof.events())


def _no_sync_worker(rank, world_size, accumulation_steps):
    torch.manual_seed(0)
    model = _gpt()
    reference = copy.deepcopy(model)
    jm = thunder.jit(ddp(model, bucket_size_in_mb=_bucket_mb(model, "split")))
    tddp = nn.parallel.DistributedDataParallel(reference)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    counts, diffs = [], []
    for group in range(2):
        for opt in opts:
            opt.zero_grad()
        inside = exit_ = 0
        for micro in range(accumulation_steps - 1):
            batch = _batch("gpt", rank, 10 * group + micro)
            ctx = jm.no_sync()
            inside += _count_all_reduces(lambda: (ctx.__enter__(), _loss("gpt", jm, batch).backward()))
            exit_ += _count_all_reduces(lambda: ctx.__exit__(None, None, None))
            with tddp.no_sync():
                _loss("gpt", tddp, batch).backward()
        if accumulation_steps > 1:
            no_sync_trace = str(thunder.last_backward_traces(jm)[-1])
            assert "all_reduce" not in no_sync_trace and "pack_bucket" not in no_sync_trace
        batch = _batch("gpt", rank, 10 * group + 9)
        sync = _count_all_reduces(lambda: _loss("gpt", jm, batch).backward())
        _loss("gpt", tddp, batch).backward()
        diffs += _differences(model, reference, "grad")
        for opt in opts:
            opt.step()
        diffs += _differences(model, reference, "param")
        buckets = len(_calls(str(thunder.last_backward_traces(jm)[-1]), "all_reduce"))
        counts.append(dict(inside=inside, exit=exit_, sync=sync, buckets=buckets))
    del tddp
    return dict(counts=counts, diffs=diffs)


@pytest.mark.parametrize("accumulation_steps", (1, 2, 4))
def test_no_sync_accumulates_locally_and_syncs_once_per_bucket(accumulation_steps):
    for rank, r in enumerate(run_ranks(_no_sync_worker, accumulation_steps)):
        assert r["diffs"] == [], f"rank {rank}: not bitwise equal to torch DDP no_sync: {r['diffs']}"
        for c in r["counts"]:
            assert c["inside"] == 0 and c["exit"] == 0, c
            # one all-reduce per bucket, and first the check that every rank reduces the same gradients
            assert c["buckets"] > 1 and c["sync"] == c["buckets"] + 1, c


# -- buffers: broadcast from rank 0 before forwards, as torch's DDP broadcasts them ----------------------------
class BatchNormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.bn, self.fc2 = nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.bn(self.fc1(x)).relu())


# what each call is: (train mode, grad enabled, inside no_sync); torch's DDP broadcasts the buffers before a call when
# the call before ran with grad enabled outside no_sync (and before the first), so the schedule covers each case
BUFFER_SCHEDULE = [(True, True, False), (True, True, True), (True, True, False), (True, True, False),
                   (False, False, False), (False, False, False), (True, False, False), (True, True, False)]


def _torch_ddp_without_buffer_sync(module):
    import inspect

    if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel).parameters:  # torch >= 2.13
        return nn.parallel.DistributedDataParallel(module, forward_sync_buffers=False)
    return nn.parallel.DistributedDataParallel(module, broadcast_buffers=False)


def _buffers_worker(rank, world_size):
    results = {}
    for sync in (True, False):
        torch.manual_seed(rank)
        model = BatchNormMLP()
        reference = copy.deepcopy(model)
        jm = thunder.jit(ddp(model, forward_sync_buffers=sync))
        tddp = nn.parallel.DistributedDataParallel(reference) if sync else _torch_ddp_without_buffer_sync(reference)
        diffs = []
        for call, (train, grad, no_sync) in enumerate(BUFFER_SCHEDULE):
            x = torch.randn(5, 6, generator=torch.Generator().manual_seed(100 * rank + call))
            outs = []
            for m in (jm, tddp):
                m.train(train)
                with torch.set_grad_enabled(grad), (m.no_sync() if no_sync else contextlib.nullcontext()):
                    out = m(x)
                    if grad:
                        out.square().mean().backward()
                outs.append(out.detach())
            if not torch.equal(*outs):
                diffs.append(f"output of call {call}")
            diffs += [f"{name} after call {call}" for name in _differences(model, reference, "buffer")]
            diffs += [f"{name} after call {call}" for name in _differences(model, reference, "grad")]
        del tddp
        gathered = [None] * world_size
        dist.all_gather_object(gathered, model.bn.running_mean)
        results[sync] = dict(diffs=diffs, same_across_ranks=torch.equal(*gathered),
                             trace=_trace_text(thunder.last_traces(jm)[-1]))
    return results


@functools.cache
def _buffers():
    return run_ranks(_buffers_worker)


@pytest.mark.parametrize("sync", [True, False], ids=["forward_sync_buffers", "no_buffer_sync"])
def test_buffers_are_torch_ddps_through_training_accumulation_and_evaluation(sync):
    for rank, results in enumerate(_buffers()):
        r = results[sync]
        assert r["diffs"] == [], f"rank {rank}: not bitwise equal to torch DDP: {r['diffs']}"
        assert not r["same_across_ranks"]  # each rank updated rank 0's statistics with its own batch last
        assert ("sync_buffers([t_bn_running_mean, t_bn_running_var, t_bn_num_batches_tracked], buffer_sync, True)"
                in r["trace"]) == sync


# -- ranks that trace different programs (see [Note: ranks that trace different programs]) ---------------------------
def _branch_worker(rank, world_size):
    results = {}
    for what in ("layers", "scale"):
        torch.manual_seed(0)
        model = RankDependentBranch(what)
        reference = copy.deepcopy(model)
        jm = thunder.jit(ddp(model))
        tddp = nn.parallel.DistributedDataParallel(reference)
        x = torch.randn(3, 4).abs() * (1 if rank == 0 else -1)
        try:
            jm(x).square().sum().backward()
        except RuntimeError as e:
            results[what] = str(e)
            continue
        tddp(x).square().sum().backward()
        results[what] = _differences(model, reference, "grad")
        del tddp
    # the way out the error names: torch's DDP, whose reducer handles gradients that differ per rank, around thunder.jit
    torch.manual_seed(0)
    model = RankDependentBranch("layers")
    reference = copy.deepcopy(model)
    wrapped = nn.parallel.DistributedDataParallel(thunder.jit(model), find_unused_parameters=True)
    tddp = nn.parallel.DistributedDataParallel(reference, find_unused_parameters=True)
    x = torch.randn(3, 4).abs() * (1 if rank == 0 else -1)
    for m in (wrapped, tddp):
        m(x).square().sum().backward()
    results["torch_ddp_of_jit"] = _differences(model, reference, "grad")
    del wrapped, tddp
    return results


def test_ranks_that_trace_different_gradients_raise_and_others_equal_torch_ddp():
    """Rank 0 runs layer a, rank 1 layer b, of the same shape: their gradients' all-reduce would have summed a's
    gradient with b's (it did, silently). Now every rank raises before reducing; a difference that leaves the
    gradients to reduce the same is no error."""
    for results in run_ranks(_branch_worker):
        assert results["layers"].startswith("thunder.distributed: the ranks traced different programs, and this rank's "
                                            "gradients to reduce differ from another rank's")
        assert "DistributedDataParallel(thunder.jit(model), find_unused_parameters=True)" in results["layers"]
        assert results["scale"] == []
        assert results["torch_ddp_of_jit"] == []


# -- torch's DDP around a jitted module; what parameters get; broadcasting ---------------------------


class PartlyFrozen(nn.Module):
    """A frozen layer, a layer the forward does not use, and grads that keep accumulating between steps."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(6, 6)
        self.frozen.requires_grad_(False)
        self.used = nn.Linear(6, 3)
        self.unused = nn.Linear(6, 3)

    def forward(self, x):
        return self.used(self.frozen(x).relu())


def _special_cases_worker(rank, world_size):
    out = {}
    # a collective in a differentiated program: the gradient of a sum all-reduce is a sum all-reduce
    x = torch.full((3,), float(rank + 1), requires_grad=True)
    y = thunder.jit(lambda x: wait(all_reduce(x * 2, "sum", None, True)) * x)(x)
    y.sum().backward()
    out["all_reduce"] = (y.detach(), x.grad)
    # torch's DDP wrapping a jitted module: its hooks see the gradients thunder's backward returns
    torch.manual_seed(rank)
    model = _mlp()
    reference = copy.deepcopy(model)
    wrapped = nn.parallel.DistributedDataParallel(thunder.jit(model))
    eager = nn.parallel.DistributedDataParallel(reference)
    for step in range(2):
        batch = _batch("mlp", rank, step)
        for m in (wrapped, eager):
            _loss("mlp", m, batch).backward()  # no zero_grad: gradients accumulate across synced steps
    out["torch_ddp_of_jit"] = _differences(model, reference, "grad")
    del wrapped, eager

    # frozen and unused parameters, gradients accumulated across synced steps without zero_grad
    torch.manual_seed(rank)
    model = PartlyFrozen()
    reference = copy.deepcopy(model)
    jm = thunder.jit(ddp(model, bucket_size_in_mb=0))
    tddp = nn.parallel.DistributedDataParallel(reference, find_unused_parameters=True)
    for step in range(3):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(rank * 10 + step))
        jm(x).sum().backward()
        tddp(x).sum().backward()
    out["partly_frozen"] = _differences(model, reference, "grad") + _differences(model, reference, "param")
    out["unused_grad"] = model.unused.weight.grad
    out["frozen_grad"] = model.frozen.weight.grad
    out["backward_reduces"] = len(_calls(str(thunder.last_backward_traces(jm)[-1]), "all_reduce"))
    del tddp

    # a deep copy of a DDP module is data parallel too, with its own transform and buckets
    torch.manual_seed(rank)
    model = _mlp()
    jm = thunder.jit(ddp(model, bucket_size_in_mb=0.001))
    copied = copy.deepcopy(jm)
    batch = _batch("mlp", rank, 0)
    for m in (jm, copied):
        _loss("mlp", m, batch).backward()
    out["deepcopy"] = _differences(model, copied._model, "grad") + [
        "shared transform" for a, b in zip(thunder.list_transforms(jm), thunder.list_transforms(copied)) if a is b]

    # broadcast_from picks the source rank; None leaves each rank's parameters as they are
    for src in (1, None):
        torch.manual_seed(rank)
        model = _mlp()
        mine = [p.detach().clone() for p in model.parameters()]
        ddp(model, broadcast_from=src)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        gathered = [torch.empty(0)] * world_size
        dist.all_gather_object(gathered, flat)
        out[f"broadcast_from={src}"] = dict(
            same=torch.equal(gathered[0], gathered[1]),
            kept_own=all(torch.equal(a, b) for a, b in zip(mine, model.parameters())))
    return out


@functools.cache
def _special_cases():
    return run_ranks(_special_cases_worker)


def test_a_differentiated_all_reduce_has_an_all_reduce_as_gradient():
    for rank, r in enumerate(_special_cases()):
        y, grad = r["all_reduce"]
        x = float(rank + 1)
        total = 2 * (1 + 2)  # the all-reduced 2x over ranks 0 and 1
        assert torch.equal(y, torch.full((3,), total * x))
        # d/dx_r of sum_j (sum_k 2 x_k) x_j = 2 * (x_0 + x_1) + total (each rank's own term)
        assert torch.equal(grad, torch.full((3,), 2 * (1 + 2) + float(total)))


def test_torch_ddp_around_a_jitted_module_equals_torch_ddp():
    for r in _special_cases():
        assert r["torch_ddp_of_jit"] == []


def test_frozen_and_unused_parameters_get_no_gradient_and_nothing_hangs():
    for r in _special_cases():
        assert r["partly_frozen"] == []
        assert r["unused_grad"] is None and r["frozen_grad"] is None
        assert r["backward_reduces"] == 2  # used.weight and used.bias only


def test_a_deep_copy_of_a_ddp_module_is_data_parallel():
    for r in _special_cases():
        assert r["deepcopy"] == []


def test_broadcast_from_chooses_the_source_rank():
    results = _special_cases()
    assert all(r["broadcast_from=1"]["same"] for r in results)
    assert results[1]["broadcast_from=1"]["kept_own"] and not results[0]["broadcast_from=1"]["kept_own"]
    assert all(not r["broadcast_from=None"]["same"] and r["broadcast_from=None"]["kept_own"] for r in results)


# -- errors ------------------------------------------------------------------------------------------


def test_ddp_without_a_process_group_says_how_to_start_one():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"init_process_group.*torchrun"):
        ddp(_mlp())
    with pytest.raises(RuntimeError, match=r"init_process_group.*torchrun"):
        DDPTransform()


def _errors_worker(rank, world_size):
    messages = {}
    for bad in (-1, "25", float("nan"), True, None):
        try:
            ddp(_mlp(), bucket_size_in_mb=bad)
        except ValueError as e:
            messages[repr(bad)] = str(e)
    for name, fn in {
        "twice": lambda: ddp(ddp(_mlp())),
        "twice_jitted": lambda: ddp(thunder.jit(ddp(_mlp()))),
        "function": lambda: thunder.jit(lambda x: x, transforms=[DDPTransform()]),
        "not_a_module": lambda: ddp(lambda x: x),
        "bad_broadcast_from": lambda: ddp(_mlp(), broadcast_from=2),
        "bad_group": lambda: ddp(_mlp(), process_group="world"),
    }.items():
        try:
            fn()
        except (RuntimeError, TypeError, ValueError) as e:
            messages[name] = f"{type(e).__name__}: {e}"
    return messages


def test_bad_arguments_raise_clear_errors():
    messages = run_ranks(_errors_worker)[0]
    for bad in ("-1", "'25'", "nan", "True", "None"):
        assert "bucket_size_in_mb must be a non-negative number" in messages[bad]
    assert messages["twice"] == messages["twice_jitted"] == \
        "RuntimeError: thunder.distributed.ddp was applied twice to the same module"
    assert messages["function"].startswith("TypeError: thunder.distributed.ddp applies to a torch.nn.Module")
    assert messages["not_a_module"].startswith("TypeError: thunder.distributed.ddp expects a torch.nn.Module")
    assert messages["bad_broadcast_from"].startswith("ValueError: broadcast_from must be a rank")
    assert messages["bad_group"].startswith("TypeError: thunder.distributed.ddp: process_group must be")
