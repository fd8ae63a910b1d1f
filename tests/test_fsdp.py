"""thunder.distributed.fsdp on 2 gloo ranks (processes spawned here) against unsharded training (and, at the
end, bitwise against torch's FSDP2).

Each rank trains its shards on its own batches; the reference trains the whole model in one process on
the mean of the ranks' losses. After each SGD step the full parameters (gathered from the shards) must
match within float rounding (the mean is taken at a different point, so rounding differs).
"""
from __future__ import annotations

import copy
import functools
import re

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import thunder
from thunder.distributed import FSDPBucketingStrategy, FSDPTransform, FSDPType, ddp, fsdp
from tests.distributed import run_ranks
from tests.models import GPT, CustomFunctionMLP, GPTConfig, RankDependentBranch

pytestmark = [pytest.mark.distributed]

STEPS = 3
STRATEGIES = (FSDPType.ZERO2, FSDPType.ZERO3)
ORDERS = ("jit(fsdp(model))", "fsdp(jit(model))", "transforms=[FSDPTransform]")


class OddMLP(nn.Module):
    """Layer sizes not divisible by 2 (padded shards), a frozen layer and an unused one."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(5, 7)
        self.frozen = nn.Linear(7, 7)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(7, 3)
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.out(self.frozen(self.inp(x).tanh()).relu())


def _gpt():
    return GPT(GPTConfig(vocab_size=63, block_size=8, n_layer=2, n_head=2, n_embd=18, dropout=0.0))


MODELS = {"odd_mlp": OddMLP, "gpt": _gpt, "custom-function": lambda: CustomFunctionMLP(5, 7, 3)}


def _batch(name, rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if name != "gpt":
        return (torch.randn(4, 5, generator=g),)
    return torch.randint(0, 63, (2, 8), generator=g), torch.randint(0, 63, (2, 8), generator=g)


def _loss(name, model, batch):
    return model(*batch)[1] if name == "gpt" else model(*batch).square().mean()


BUCKETINGS = tuple(FSDPBucketingStrategy)
# every way of applying it without bucketing, every bucketing applied one way
CONFIGS = [(s, o, FSDPBucketingStrategy.NONE) for s in STRATEGIES for o in ORDERS] + \
          [(s, ORDERS[0], b) for s in STRATEGIES for b in BUCKETINGS[1:]]


def _wrap(model, order, strategy, bucketing=FSDPBucketingStrategy.NONE):
    if order == ORDERS[0]:
        # the GPT's blocks are found (its top-level ModuleList); the MLPs' are given
        blocks = None
        if bucketing.name == "BLOCK" and not isinstance(model, GPT):
            blocks = [model.inp, model.frozen] if isinstance(model, OddMLP) else [model.fc1, model.fc2]
        return thunder.jit(fsdp(model, sharding_strategy=strategy, bucketing_strategy=bucketing, blocks=blocks))
    if order == ORDERS[1]:
        return fsdp(thunder.jit(model), sharding_strategy=strategy)
    return thunder.jit(model, transforms=[FSDPTransform(sharding_strategy=strategy)])


def _full(shard: torch.Tensor, rows: int, world_size: int) -> torch.Tensor:
    parts = [torch.empty_like(shard) for _ in range(world_size)]
    dist.all_gather(parts, shard.detach().contiguous())
    return torch.cat(parts)[:rows]


def _max_diff(model, reference, world_size) -> float:
    diff = 0.0
    for p, q in zip(model.parameters(), reference.parameters()):
        diff = max(diff, (_full(p, q.shape[0], world_size) - q).abs().max().item())
    return diff


def _trace_lines(trace) -> list[str]:
    return [line.strip() for line in str(trace).splitlines() if line.startswith("  ") and not line.strip().startswith("#")]


def _in_flight(lines, issue="all_gather") -> int:
    """The most all-gathers issued and not yet waited for at any point of a trace."""
    pending, most = set(), 0
    for line in lines:
        m = re.match(rf"(f\d+) = {issue}\(", line)
        if m:
            pending.add(m.group(1))
            most = max(most, len(pending))
        m = re.match(r"\S+ = wait\((f\d+)\)", line)
        if m:
            pending.discard(m.group(1))
    return most


def _alive_gathered(lines) -> int:
    """The most gathered parameters (results of waits on all-gathers, and their slices) alive at once."""
    futures, gathered, alive, most = set(), set(), set(), 0
    for line in lines:
        if m := re.match(r"(f\d+) = all_gather\(", line):
            futures.add(m.group(1))
        elif (m := re.match(r"(t\d+) = (wait|torch\.\S+)\((\w+)", line)) and (m.group(3) in futures or m.group(3) in gathered):
            gathered.add(m.group(1))
            alive.add(m.group(1))
        elif line.startswith("del "):
            alive -= set(line[4:].split(", "))
        most = max(most, len(alive))
    return most


def _parity_worker(rank, world_size, name):
    results = {}
    for strategy, order, bucketing in CONFIGS:
        torch.manual_seed(0)
        model = MODELS[name]()
        reference = copy.deepcopy(model)
        total = sum(p.numel() for p in reference.parameters())
        jm = _wrap(model, order, strategy, bucketing)
        local = sum(p.numel() for p in model.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        diffs, losses = [], []
        for step in range(STEPS):
            opt.zero_grad()
            ref_opt.zero_grad()
            loss = _loss(name, jm, _batch(name, rank, step))
            loss.backward()
            ref_losses = [_loss(name, reference, _batch(name, r, step)) for r in range(world_size)]
            (sum(ref_losses) / world_size).backward()
            losses.append((loss.item(), ref_losses[rank].item()))
            opt.step()
            ref_opt.step()
            diffs.append(_max_diff(model, reference, world_size))
        results[(strategy.name, order, bucketing.name)] = dict(
            diffs=diffs, losses=losses, local=local, total=total,
            final=[_full(p, q.shape[0], world_size) for p, q in zip(model.parameters(), reference.parameters())],
            forward=_trace_lines(thunder.last_traces(jm)[-1]),
            backward=_trace_lines(thunder.last_backward_traces(jm)[-1]),
            grads_of_frozen=[p.grad for n, p in model.named_parameters() if not p.requires_grad or "unused" in n])
    return results


@functools.cache
def _parity(name):
    return run_ranks(_parity_worker, name)


def _key(strategy, order=ORDERS[0], bucketing=FSDPBucketingStrategy.NONE):
    return strategy.name, order, bucketing.name


@pytest.mark.parametrize("strategy,order,bucketing", CONFIGS, ids=lambda x: getattr(x, "name", x))
@pytest.mark.parametrize("name", MODELS)
def test_sharded_training_equals_unsharded_training(name, strategy, order, bucketing):
    for rank, results in enumerate(_parity(name)):
        r = results[_key(strategy, order, bucketing)]
        for loss, ref_loss in r["losses"]:
            assert abs(loss - ref_loss) <= 1e-6 * max(1.0, abs(ref_loss))
        assert max(r["diffs"]) <= 1e-6, r["diffs"]
        assert all(g is None for g in r["grads_of_frozen"])


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("name", MODELS)
def test_each_rank_holds_its_share_of_the_parameters(name, strategy):
    for results in _parity(name):
        r = results[_key(strategy)]
        n_params = len([line for line in r["forward"] if "all_gather(" in line])
        assert r["local"] <= -(-r["total"] // 2) + n_params * 64  # at most one padding row per parameter


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("name", MODELS)
def test_traces_gather_parameters_and_reduce_scatter_gradients(name, strategy):
    r = _parity(name)[0][_key(strategy)]
    fwd, bwd = r["forward"], r["backward"]
    gathers = [line for line in fwd if "= all_gather(" in line]
    scatters = [line for line in bwd if "= reduce_scatter(" in line]
    assert gathers and len(scatters) == sum(1 for line in gathers if "frozen" not in line and "unused" not in line)
    regathers = [line for line in bwd if "= all_gather(" in line]
    if strategy is FSDPType.ZERO3:
        assert regathers  # ZeRO3 gathers again in the backward, and saves only shards
    else:
        assert not regathers
    for lines in (fwd, bwd):
        assert _in_flight(lines) <= 2  # the prefetch bound
    if strategy is FSDPType.ZERO3:
        # gathered parameters alive at once: the 2 prefetched, those one operation reads (weight, bias), and
        # the GPT's embedding, tied to its head, which the forward reads first and last
        assert _alive_gathered(fwd) <= 2 + 2 + (name == "gpt"), _alive_gathered(fwd)
    # each wait of a reduce-scatter comes after all computation
    first_rs_wait = min(i for i, line in enumerate(bwd) if re.match(r"\S+ = wait\(", line)
                        and any(line.endswith(f"wait({s.split(' = ')[0]})") or f"wait({s.split(' = ')[0]})" in line
                                for s in scatters))
    assert not any("torch." in line for line in bwd[first_rs_wait:])


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_ways_of_applying_fsdp_give_the_same_traces(strategy):
    results = _parity("gpt")[0]
    assert len({tuple(results[_key(strategy, o)]["forward"]) for o in ORDERS}) == 1
    assert len({tuple(results[_key(strategy, o)]["backward"]) for o in ORDERS}) == 1


@pytest.mark.parametrize("bucketing", BUCKETINGS[1:], ids=lambda b: b.name)
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("name", MODELS)
def test_bucketing_gives_fewer_collectives_and_the_same_numbers(name, strategy, bucketing):
    for results in _parity(name):
        plain, bucketed = results[_key(strategy)], results[_key(strategy, bucketing=bucketing)]
        assert all(torch.equal(a, b) for a, b in zip(plain["final"], bucketed["final"]))
        totals = [0, 0]
        for trace in ("forward", "backward"):
            for op in ("all_gather", "reduce_scatter"):
                n_plain = sum(f"= {op}(" in line for line in plain[trace])
                n_bucketed = sum(f"= {op}(" in line for line in bucketed[trace])
                assert n_bucketed <= n_plain, (trace, op)
                totals[0] += n_plain
                totals[1] += n_bucketed
        assert totals[1] < totals[0]
        assert _in_flight(bucketed["forward"]) <= 2 and _in_flight(bucketed["backward"]) <= 2


def _errors_worker(rank, world_size):
    messages = {}
    cases = {
        "sharding": lambda: fsdp(nn.Linear(2, 2), sharding_strategy="ZERO3"),
        "bucketing": lambda: fsdp(nn.Linear(2, 2), bucketing_strategy=1),
        "twice": lambda: fsdp(fsdp(nn.Linear(2, 2))),
        "twice_jitted": lambda: fsdp(thunder.jit(fsdp(nn.Linear(2, 2)))),
        "with_ddp": lambda: fsdp(ddp(nn.Linear(2, 2))),
        "with_ddp_jitted": lambda: fsdp(thunder.jit(ddp(nn.Linear(2, 2)))),
        "ddp_after": lambda: ddp(fsdp(nn.Linear(2, 2))),
        "ddp_after_jitted": lambda: ddp(thunder.jit(fsdp(nn.Linear(2, 2)))),
        "scalar": lambda: thunder.jit(fsdp(_WithScalar())),
        "sharded_again": lambda: [thunder.jit(m, transforms=[FSDPTransform()]) for m in [nn.Linear(2, 2)] * 2],
    }
    for name, fn in cases.items():
        try:
            fn()
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
            messages[name] = f"{type(e).__name__}: {e}"
    torch.manual_seed(rank)  # ranks start different; broadcast_from=0 gives everyone rank 0's parameters
    model = OddMLP()
    torch.manual_seed(0)
    rank0 = OddMLP()
    fsdp(thunder.jit(model), broadcast_from=0)
    messages["broadcast_from_0"] = _max_diff(model, rank0, world_size)
    jm = thunder.jit(fsdp(nn.Linear(3, 4), move_state_dict_to_cpu=True))
    sd = jm.state_dict()
    messages["state_dict_on_cpu"] = all(v.device.type == "cpu" for v in sd.values()) and \
        all(torch.equal(sd[k], p) for k, p in jm.named_parameters())
    return messages


class _WithScalar(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return x * self.scale


def test_bad_arguments_raise_clear_errors():
    m = run_ranks(_errors_worker)[0]
    assert m["sharding"].startswith("ValueError: sharding_strategy must be a thunder.distributed.FSDPType")
    assert m["bucketing"].startswith("ValueError: bucketing_strategy must be a thunder.distributed.FSDPBucketingStrategy")
    assert m["twice"] == m["twice_jitted"] == "RuntimeError: thunder.distributed.fsdp was applied twice to the same module"
    assert m["with_ddp"] == m["with_ddp_jitted"] == m["ddp_after"] == m["ddp_after_jitted"] == \
        "RuntimeError: thunder.distributed.fsdp cannot be combined with ddp on the same module"
    assert m["state_dict_on_cpu"]
    assert m["broadcast_from_0"] == 0.0
    assert m["scalar"].startswith("NotImplementedError: fsdp shards parameters along dimension 0; the parameter 'scale'")
    assert m["sharded_again"].startswith("RuntimeError: thunder.distributed.fsdp: the parameters of this Linear are "
                                         "already shards (another fsdp sharded it)")


# -- ranks that trace different programs (see [Note: ranks that trace different programs]) ---------------------------
def _branch_worker(rank, world_size):
    results = {}
    for strategy in STRATEGIES:
        for what in ("layers", "scale"):
            torch.manual_seed(0)
            model = RankDependentBranch(what)
            reference = copy.deepcopy(model)
            jm = thunder.jit(fsdp(model, sharding_strategy=strategy))
            x = torch.randn(3, 4).abs() * (1 if rank == 0 else -1)
            try:
                jm(x).square().sum().backward()
            except RuntimeError as e:
                results[(strategy.name, what)] = str(e)
                continue
            xs = [torch.empty_like(x) for _ in range(world_size)]
            dist.all_gather(xs, x)
            (sum(reference(y).square().sum() for y in xs) / world_size).backward()
            results[(strategy.name, what)] = [n for (n, p), q in zip(model.named_parameters(), reference.parameters())
                                              if not torch.allclose(_full(p.grad, q.shape[0], world_size), q.grad)]
    return results


@functools.cache
def _branches():
    return run_ranks(_branch_worker)


@pytest.mark.parametrize("strategy", [s.name for s in STRATEGIES])
def test_ranks_that_gather_different_parameters_raise_and_others_train(strategy):
    """Rank 0 runs layer a, rank 1 layer b, of the same shape: gathering one rank's a with the other's b would train
    on mixed shards (it did, silently). Now every rank raises in the forward, before any all-gather; a difference
    that leaves the collectives the same is no error."""
    for results in _branches():
        assert results[(strategy, "layers")].startswith(
            "thunder.distributed: the ranks traced different programs, and this rank's parameters to gather differ")
        assert results[(strategy, "scale")] == []


# -- no_sync -----------------------------------------------------------------------------------------


def _count(fn, what: str) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.name.startswith("c10d::") and what in e.name for e in prof.events())  # the backend-independent op


MICRO_BATCHES = (1, 2, 4)


def _no_sync_worker(rank, world_size, strategy_name, bucketing_name):
    """Accumulation groups of 1, 2 and 4 micro-batches, one after the other, on one model."""
    torch.manual_seed(0)
    model = _gpt()
    reference = copy.deepcopy(model)
    jm = thunder.jit(fsdp(model, sharding_strategy=FSDPType[strategy_name],
                          bucketing_strategy=FSDPBucketingStrategy[bucketing_name]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    results = {}
    for group, micro_batches in enumerate(MICRO_BATCHES):
        opt.zero_grad()
        ref_opt.zero_grad()
        inside = 0
        for micro in range(micro_batches - 1):
            batch = _batch("gpt", rank, 10 * group + micro)
            with jm.no_sync():
                inside += _count(lambda: _loss("gpt", jm, batch).backward(), "reduce_scatter")
        batch = _batch("gpt", rank, 10 * group + 9)
        sync = _count(lambda: _loss("gpt", jm, batch).backward(), "reduce_scatter")
        buckets = sum("= reduce_scatter(" in line for line in _trace_lines(thunder.last_backward_traces(jm)[-1]))
        ref_loss = sum(_loss("gpt", reference, _batch("gpt", r, 10 * group + m))
                       for r in range(world_size) for m in [*range(micro_batches - 1), 9]) / world_size
        ref_loss.backward()
        opt.step()
        ref_opt.step()
        results[micro_batches] = dict(diff=_max_diff(model, reference, world_size), inside=inside, sync=sync,
                                      buckets=buckets)
    return results


@functools.cache
def _no_sync(strategy, bucketing):
    return run_ranks(_no_sync_worker, strategy, bucketing)


@pytest.mark.parametrize("micro_batches", MICRO_BATCHES)
@pytest.mark.parametrize("strategy,bucketing", [("ZERO2", "NONE"), ("ZERO3", "BLOCK")])
def test_no_sync_accumulates_whole_gradients_and_reduces_them_once(strategy, bucketing, micro_batches):
    for results in _no_sync(strategy, bucketing):
        r = results[micro_batches]
        assert r["diff"] <= 1e-6, r
        assert r["inside"] == 0 and r["sync"] == r["buckets"] > 0, r


# -- meta-device initialization ----------------------------------------------------------------------


def _reset_in_module_order(model):
    for m in model.modules():
        if any(True for _ in m.parameters(recurse=False)) or any(True for _ in m.buffers(recurse=False)):
            m.reset_parameters()


def _meta_init_worker(rank, world_size, strategy_name):
    with torch.device("meta"):
        model = _gpt()
    torch.manual_seed(123)
    jm = thunder.jit(fsdp(model, sharding_strategy=FSDPType[strategy_name]))
    reference = _gpt()
    torch.manual_seed(123)
    with torch.no_grad():
        _reset_in_module_order(reference)
    out = dict(initial=_max_diff(model, reference, world_size),
               meta_left=[n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta],
               local=sum(p.numel() for p in model.parameters()), total=sum(p.numel() for p in reference.parameters()))
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference))
    for step in range(2):
        _loss("gpt", jm, _batch("gpt", rank, step)).backward()
        (sum(_loss("gpt", reference, _batch("gpt", r, step)) for r in range(world_size)) / world_size).backward()
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    out["trained"] = _max_diff(model, reference, world_size)
    with torch.device("meta"):
        masked = GPT(GPTConfig(vocab_size=63, block_size=8, n_layer=1, n_head=2, n_embd=18, use_sdpa=False))
    try:
        fsdp(thunder.jit(masked))
    except TypeError as e:
        out["error"] = str(e)
    return out


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_a_model_on_the_meta_device_is_materialized_shard_by_shard(strategy):
    for r in run_ranks(_meta_init_worker, strategy.name):
        assert r["meta_left"] == []
        assert r["initial"] == 0.0 and r["trained"] <= 1e-6, r
        assert r["local"] <= -(-r["total"] // 2) + 64
        assert r["error"].startswith("fsdp cannot materialize the submodule 'transformer.h.0.attn' "
                                     "(CausalSelfAttention) created on the meta device: it has no reset_parameters()")


# -- against torch's FSDP2 ------------------------------------------------------------------------------------


FSDP2_CONFIGS = [(s, b) for s in ("ZERO2", "ZERO3") for b in ("NONE", "BLOCK")]


def _fsdp2_worker(rank, world_size):
    from torch.distributed.fsdp import fully_shard

    results = {}
    for strategy, bucketing in FSDP2_CONFIGS:
        torch.manual_seed(0)
        model = _gpt()
        reference = copy.deepcopy(model)
        for block in reference.transformer.h:
            fully_shard(block, reshard_after_forward=strategy == "ZERO3")
        fully_shard(reference, reshard_after_forward=strategy == "ZERO3")
        jm = thunder.jit(fsdp(model, sharding_strategy=FSDPType[strategy],
                              bucketing_strategy=FSDPBucketingStrategy[bucketing]))
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
        same = []
        for step in range(STEPS):
            batch = _batch("gpt", rank, step)
            losses = [_loss("gpt", m, batch) for m in (jm, reference)]
            for loss in losses:
                loss.backward()
            for opt in opts:
                opt.step()
                opt.zero_grad()
            same.append(torch.equal(*(loss.detach() for loss in losses)))
            for p, q in zip(model.parameters(), reference.parameters()):
                full = q.full_tensor()
                same.append(torch.equal(_full(p, full.shape[0], world_size), full))
        results[(strategy, bucketing)] = all(same)
    return results


@functools.cache
def _fsdp2():
    return run_ranks(_fsdp2_worker)


@pytest.mark.parametrize("strategy,bucketing", FSDP2_CONFIGS)
def test_losses_and_parameters_equal_torch_fsdp2(strategy, bucketing):
    assert all(r[(strategy, bucketing)] for r in _fsdp2())
