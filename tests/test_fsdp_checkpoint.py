"""State dicts, distributed checkpoints and gradient clipping of FSDP (and DDP) ThunderModules on 2 gloo ranks
(processes spawned here), checked against an unsharded reference trained in the same process on the mean of
the ranks' losses (as in tests/test_fsdp.py), or against the same module before a save/load round trip.
"""
from __future__ import annotations

import copy
import functools
import math
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint import FileSystemReader

import thunder
from thunder.distributed import FSDPType, checkpoint, clip_grad_norm_, ddp, fsdp
from thunder.distributed.checkpoint import StateDictOptions, get_model_state_dict, load_model_state_dict
from thunder.distributed.prims import torch_all_gather_single
from tests.distributed import run_ranks
from tests.models import GPT, GPTConfig

spawns = pytest.mark.distributed  # the tests that start 2 gloo ranks

STRATEGIES = (FSDPType.ZERO2, FSDPType.ZERO3)
FULL = StateDictOptions(full_state_dict=True)
SHARDED = StateDictOptions()


class OddMLP(nn.Module):
    """Sizes not divisible by 2 (padded shards), a one-row parameter (rank 1's shard is all padding), a frozen
    layer and a buffer."""

    def __init__(self, hidden: int = 7):
        super().__init__()
        self.inp = nn.Linear(5, hidden)
        self.frozen = nn.Linear(hidden, hidden)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(hidden, 3)
        self.row = nn.Parameter(torch.randn(1, 3))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 3))

    def forward(self, x):
        return self.out(self.frozen(self.inp(x).tanh()).relu()) * self.scale + self.row


class WiderMLP(OddMLP):
    """Another model: a wider hidden layer and an extra head."""

    def __init__(self):
        super().__init__(hidden=9)
        self.head = nn.Linear(3, 2)


def _gpt():
    return GPT(GPTConfig(vocab_size=63, block_size=8, n_layer=1, n_head=2, n_embd=18, dropout=0.0))


MODELS = {"odd_mlp": OddMLP, "gpt": _gpt}


def _batch(name, rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if name == "gpt":
        return torch.randint(0, 63, (2, 8), generator=g), torch.randint(0, 63, (2, 8), generator=g)
    return (torch.randn(4, 5, generator=g),)


def _loss(name, model, batch):
    return model(*batch)[1] if name == "gpt" else model(*batch).square().mean()


def _train(name, jm, steps, rank, world_size=2, reference=None, first=0) -> list:
    """SGD steps on this rank's batches (the reference: on the mean of all ranks' losses); the losses."""
    opt = torch.optim.SGD(jm.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1) if reference is not None else None
    losses = []
    for step in range(first, first + steps):
        loss = _loss(name, jm, _batch(name, rank, step))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if reference is not None:
            (sum(_loss(name, reference, _batch(name, r, step)) for r in range(world_size)) / world_size).backward()
            ref_opt.step()
            ref_opt.zero_grad()
    return losses


def _max_diff(sd, ref) -> float:
    assert list(sd) == list(ref)
    return max((sd[k] - ref[k]).abs().max().item() for k in ref if ref[k].numel())


def _cpu(sd: dict) -> dict:
    return {k: v.detach().cpu().clone() for k, v in sd.items()}


# -- full state dicts ----------------------------------------------------------------------------------------
def _full_state_worker(rank, world_size):
    results = {}
    for name in MODELS:
        for strategy in STRATEGIES:
            torch.manual_seed(0)
            model = MODELS[name]()
            reference = copy.deepcopy(model)
            jm = thunder.jit(fsdp(model, sharding_strategy=strategy))
            _train(name, jm, 2, rank, world_size, reference)
            results[(name, strategy.name)] = dict(
                full=_cpu(get_model_state_dict(jm, FULL, rank)),
                rank0=get_model_state_dict(jm, StateDictOptions(full_state_dict=True, rank0_only=True), rank),
                offloaded=get_model_state_dict(jm, StateDictOptions(full_state_dict=True, cpu_offload=True), rank),
                local={k: tuple(v.shape) for k, v in jm.state_dict().items()},
                reference=_cpu(reference.state_dict()))
    return results


@functools.cache
def _full_state():
    return run_ranks(_full_state_worker)


@spawns
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("name", MODELS)
def test_full_state_dict_equals_the_unsharded_models(name, strategy):
    ranks = [r[(name, strategy.name)] for r in _full_state()]
    for rank, r in enumerate(ranks):
        assert _max_diff(r["full"], r["reference"]) <= 1e-6
        assert all(torch.equal(r["full"][k], ranks[0]["full"][k]) for k in r["full"])  # every rank: the same
        assert all(torch.equal(r["offloaded"][k], r["full"][k]) and r["offloaded"][k].device.type == "cpu"
                   for k in r["full"])
        # rank0_only: rank 0 gets it all, the others nothing
        assert (list(r["rank0"]) == list(r["full"])) if rank == 0 else r["rank0"] == {}
        if rank == 0:
            assert all(torch.equal(r["rank0"][k], r["full"][k]) for k in r["full"])


@spawns
@pytest.mark.parametrize("name", MODELS)
def test_module_state_dict_keeps_giving_the_local_shards(name):
    r = _full_state()[0][(name, "ZERO2")]
    for key, shape in r["local"].items():
        full = tuple(r["reference"][key].shape)
        if key != "scale":  # the buffer is not sharded
            assert shape == (math.ceil(full[0] / 2), *full[1:]), key


# -- loading a full state dict into a sharded module, then training -----------------------------------------------
HOWS = ("load_state_dict", "load_model_state_dict", "rank0_only")


def _load_full(rank, world_size, name, how):
    torch.manual_seed(1)
    full = MODELS[name]().state_dict()  # another initialization, loaded into both
    reference = MODELS[name]()
    reference.load_state_dict(full)
    torch.manual_seed(0)
    jm = thunder.jit(fsdp(MODELS[name](), sharding_strategy=FSDPType.ZERO3))
    if how == "load_state_dict":
        jm.load_state_dict(full)
    elif how == "rank0_only":
        options = StateDictOptions(full_state_dict=True, rank0_only=True)
        load_model_state_dict(full if rank == 0 else {}, jm, options, rank)
    else:
        load_model_state_dict(full, jm, FULL, rank)
    loaded = _cpu(get_model_state_dict(jm, FULL, rank))
    _train(name, jm, 2, rank, world_size, reference)
    jm.load_state_dict(jm.state_dict())  # its own shards load as they are
    return dict(loaded=loaded, full=_cpu(full), trained=_cpu(get_model_state_dict(jm, FULL, rank)),
                reference=_cpu(reference.state_dict()))


def _load_full_worker(rank, world_size):
    return {(name, how): _load_full(rank, world_size, name, how) for name in MODELS for how in HOWS}


@functools.cache
def _loads_of_full():
    return run_ranks(_load_full_worker)


@spawns
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("name", MODELS)
def test_loading_a_full_state_dict_then_training_equals_unsharded(name, how):
    for results in _loads_of_full():
        r = results[(name, how)]
        assert all(torch.equal(r["loaded"][k], r["full"][k]) for k in r["full"])
        assert _max_diff(r["trained"], r["reference"]) <= 1e-6


# -- sharded checkpoints: save, perturb, load, train on ---------------------------------------------------------
KINDS = ("fsdp_zero2", "fsdp_zero3", "ddp")


def _wrapped(kind, model):
    if kind.startswith("fsdp"):
        return thunder.jit(fsdp(model, sharding_strategy=FSDPType[kind.split("_")[1].upper()]))
    if kind == "ddp":
        return thunder.jit(ddp(model))
    return thunder.jit(model) if kind == "jit" else model


def _round_trip(rank, world_size, kind, name, path):
    torch.manual_seed(0)
    jm = _wrapped(kind, MODELS[name]())
    _train(name, jm, 2, rank, world_size)
    at_save = _cpu(get_model_state_dict(jm, FULL, rank))
    checkpoint.save(get_model_state_dict(jm, SHARDED, rank), path)
    losses = _train(name, jm, 2, rank, world_size, first=2)
    after = _cpu(get_model_state_dict(jm, FULL, rank))
    with torch.no_grad():
        for p in jm.parameters():
            p.normal_()
    state = get_model_state_dict(jm, SHARDED, rank)
    checkpoint.load(state, path)
    load_model_state_dict(state, jm, SHARDED, rank)
    restored = _cpu(get_model_state_dict(jm, FULL, rank))
    saved = FileSystemReader(path).read_metadata().state_dict_metadata
    return dict(at_save=at_save, restored=restored, losses=losses, after=after,
                saved_shapes={k: tuple(saved[k].size) for k in at_save},
                losses_again=_train(name, jm, 2, rank, world_size, first=2),
                after_again=_cpu(get_model_state_dict(jm, FULL, rank)), files=sorted(os.listdir(path)))


def _round_trip_worker(rank, world_size, path):
    return {(kind, name): _round_trip(rank, world_size, kind, name, os.path.join(path, f"{kind}_{name}"))
            for kind in KINDS for name in MODELS}


@functools.cache
def _round_trips():
    with tempfile.TemporaryDirectory() as path:
        return run_ranks(_round_trip_worker, path)


def _check_round_trip(r):
    assert r["saved_shapes"] == {k: tuple(v.shape) for k, v in r["at_save"].items()}  # full shapes, no padding
    assert all(torch.equal(r["restored"][k], r["at_save"][k]) for k in r["at_save"])
    assert r["losses_again"] == r["losses"]
    assert all(torch.equal(r["after_again"][k], r["after"][k]) for k in r["after"])


@spawns
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("kind", KINDS)
def test_sharded_checkpoint_round_trip_continues_training_identically(kind, name):
    for r in _round_trips():
        _check_round_trip(r[(kind, name)])
    # every rank writes its part (FSDP shards); replicated tensors are written once
    assert _round_trips()[0][(kind, name)]["files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]


@pytest.mark.parametrize("kind", ["plain", "jit"])
def test_checkpoint_round_trip_without_torch_distributed(kind, tmp_path):
    assert not dist.is_initialized()
    _check_round_trip(_round_trip(0, 1, kind, "odd_mlp", str(tmp_path)))
    plain = OddMLP()
    for options in (SHARDED, FULL, StateDictOptions(full_state_dict=True, rank0_only=True, cpu_offload=True)):
        sd = get_model_state_dict(_wrapped(kind, plain), options, 0)
        assert _equal(sd, plain.state_dict())


# -- checkpoints between world sizes, and of a full state dict ---------------------------------------------------
def _trained_odd_mlp(rank, world_size):
    torch.manual_seed(world_size)
    jm = thunder.jit(fsdp(OddMLP()))
    _train("odd_mlp", jm, 1, rank, world_size)
    return jm


def _loaded(rank, path):
    """A freshly initialized sharded OddMLP loaded from the checkpoint ``path``: its full state dict."""
    torch.manual_seed(5)
    jm = thunder.jit(fsdp(OddMLP()))
    state = get_model_state_dict(jm, SHARDED, rank)
    checkpoint.load(state, path)
    load_model_state_dict(state, jm, SHARDED, rank)
    return _cpu(get_model_state_dict(jm, FULL, rank))


def _save_worker(rank, world_size, path, load_from=None):
    """Saves a trained model's sharded and full state dicts (``path``/sharded, /full), then loads ``load_from``
    and ``path``/full into new models."""
    jm = _trained_odd_mlp(rank, world_size)
    checkpoint.save(get_model_state_dict(jm, SHARDED, rank), os.path.join(path, "sharded"))
    checkpoint.save(get_model_state_dict(jm, StateDictOptions(full_state_dict=True, rank0_only=True), rank),
                    os.path.join(path, "full"))
    return dict(saved=_cpu(get_model_state_dict(jm, FULL, rank)), from_full=_loaded(rank, os.path.join(path, "full")),
                loaded=_loaded(rank, load_from) if load_from else None)


@functools.cache
def _between_world_sizes():
    """1 rank saves; 2 ranks load that, and save; 1 rank loads that."""
    with tempfile.TemporaryDirectory() as path:
        one, two = os.path.join(path, "1"), os.path.join(path, "2")
        first = run_ranks(_save_worker, one, world_size=1)
        second = run_ranks(_save_worker, two, os.path.join(one, "sharded"))
        third = run_ranks(_save_worker, os.path.join(path, "3"), os.path.join(two, "sharded"), world_size=1)
    return first, second, third


def _equal(sd, ref) -> bool:
    return list(sd) == list(ref) and all(torch.equal(sd[k], ref[k]) for k in ref)


@spawns
def test_a_checkpoint_loads_with_another_world_size():
    first, second, third = _between_world_sizes()
    assert all(_equal(r["loaded"], first[0]["saved"]) for r in second)  # 1 rank -> 2 ranks
    assert _equal(third[0]["loaded"], second[0]["saved"])  # 2 ranks -> 1 rank


@spawns
def test_a_saved_full_state_dict_loads_as_a_sharded_one():
    for results in _between_world_sizes():
        assert all(_equal(r["from_full"], r["saved"]) for r in results)


# -- errors -------------------------------------------------------------------------------------------------------
def _errors_worker(rank, world_size, path):
    model = OddMLP()
    jm = thunder.jit(fsdp(model))
    later = OddMLP()
    fsdp(thunder.jit(later))  # sharded through its ThunderModule: the original module is refused all the same
    checkpoint.save(get_model_state_dict(jm, SHARDED, rank), path)
    full = get_model_state_dict(jm, FULL, rank)
    wider = thunder.jit(fsdp(WiderMLP()))
    cases = {
        "other_model": lambda: checkpoint.load(get_model_state_dict(wider, SHARDED, rank), path),
        "smaller_model": lambda: checkpoint.load({k: v for k, v in get_model_state_dict(jm, SHARDED, rank).items()
                                                  if k != "row"}, path),
        "no_checkpoint": lambda: checkpoint.load(get_model_state_dict(jm, SHARDED, rank), os.path.join(path, "none")),
        "other_world_size_shard": lambda: jm.load_state_dict({**jm.state_dict(), "inp.weight": torch.zeros(2, 5)}),
        "other_world_size_full": lambda: load_model_state_dict(
            {**full, "out.weight": torch.zeros(4, 7)}, jm,
            StateDictOptions(full_state_dict=True, rank0_only=True), rank),
        "strict": lambda: load_model_state_dict({"inp.weight": torch.zeros(7, 5)}, jm, FULL, rank),
        "strict_rank0_only": lambda: load_model_state_dict(  # every rank hears of rank 0's missing key
            {k: v for k, v in full.items() if k != "row"} if rank == 0 else {}, jm,
            StateDictOptions(full_state_dict=True, rank0_only=True), rank),
        "wrong_rank": lambda: get_model_state_dict(jm, FULL, 1 - rank),
        "original_module": lambda: get_model_state_dict(model, FULL, rank),
        "original_module_jitted_first": lambda: get_model_state_dict(later, FULL, rank),
    }
    messages = {}
    for name, fn in cases.items():
        try:
            fn()
        except (ValueError, TypeError, RuntimeError, FileNotFoundError) as e:
            messages[name] = f"{type(e).__name__}: {e}"
    # not strict: the entries both have load, the others are left as they are
    other = thunder.jit(fsdp(OddMLP()))
    before = _cpu(get_model_state_dict(other, FULL, rank))
    state = {k: v for k, v in get_model_state_dict(other, SHARDED, rank).items() if k != "row"}
    extra = torch.ones(2)
    checkpoint.load({**state, "extra": extra}, path, strict=False)
    load_model_state_dict(state, other, StateDictOptions(strict=False), rank)
    after = _cpu(get_model_state_dict(other, FULL, rank))
    messages["not_strict"] = (torch.equal(after["row"], before["row"]) and torch.equal(extra, torch.ones(2))
                              and all(torch.equal(after[k], v) for k, v in _cpu(full).items() if k != "row"))
    return messages


@spawns
def test_mismatched_checkpoints_and_state_dicts_raise_clear_errors():
    with tempfile.TemporaryDirectory() as path:
        ranks = run_ranks(_errors_worker, path)
    m = ranks[0]
    assert ranks[1].keys() == m.keys() and ranks[1]["other_model"] == m["other_model"]
    other = m["other_model"]
    assert other.startswith("ValueError: thunder.distributed.checkpoint.load: the checkpoint at")
    assert "missing from the checkpoint: head.weight, head.bias" in other
    assert "inp.weight: (7, 5) in the checkpoint, (9, 5) in the state dict" in other
    assert "out.weight: (3, 7) in the checkpoint, (3, 9) in the state dict" in other
    assert "in the checkpoint but not in the state dict: row" in m["smaller_model"]
    assert m["no_checkpoint"].startswith("FileNotFoundError: thunder.distributed.checkpoint.load: no checkpoint at")
    for case in ("other_world_size_shard", "other_world_size_full"):
        key, shape, full, shard = ("inp.weight", (2, 5), (7, 5), (4, 5)) if case.endswith("shard") else \
            ("out.weight", (4, 7), (3, 7), (2, 7))
        assert m[case].startswith(f"ValueError: load_state_dict: {key!r} has shape {shape}, but this FSDP-sharded "
                                  f"module takes the full parameter, of shape {full}, or this rank's shard of it, of "
                                  f"shape {shard} (world size 2)"), m[case]
    assert ranks[0]["not_strict"] and ranks[1]["not_strict"]
    assert m["strict"].startswith("RuntimeError: Error(s) in loading state_dict") and "Missing key(s)" in m["strict"]
    for r in ranks:
        assert r["strict_rank0_only"].startswith("RuntimeError: Error(s) in loading state_dict")
        assert 'Missing key(s) in state_dict: "row"' in r["strict_rank0_only"]
    assert m["wrong_rank"].startswith("ValueError: rank is 1, but this process is rank 0 of the module's process group")
    assert m["original_module_jitted_first"] == m["original_module"]
    assert m["original_module"] == ("TypeError: this module was given to thunder.distributed.fsdp: pass the "
                                    "ThunderModule that thunder.jit returned for it, which knows how its parameters "
                                    "are sharded")


def test_state_dict_options_are_checked():
    with pytest.raises(ValueError, match=r"rank0_only=True\) needs full_state_dict=True"):
        StateDictOptions(rank0_only=True)
    with pytest.raises(TypeError, match="StateDictOptions.cpu_offload must be True or False, got 1"):
        StateDictOptions(cpu_offload=1)


# -- clip_grad_norm_ ----------------------------------------------------------------------------------------------
NORMS = (2.0, math.inf)
MAX_NORMS = (0.05, 1e3)  # clips, does not clip


def _full_grads(model, world_size) -> dict:
    """The whole gradients of a sharded module (gathered, padding dropped) by name."""
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            rows = p.shape[0] * world_size
            whole = p.grad.new_empty((rows, *p.shape[1:]))
            torch_all_gather_single(whole, p.grad.contiguous())
            grads[name] = whole
    return grads


def _clip(rank, world_size, kind, name):
    results = {}
    for norm_type in NORMS:
        for max_norm in MAX_NORMS:
            torch.manual_seed(0)
            model = MODELS[name]()
            reference = copy.deepcopy(model)
            jm = _wrapped(kind, model)
            _loss(name, jm, _batch(name, rank, 0)).backward()
            (sum(_loss(name, reference, _batch(name, r, 0)) for r in range(world_size)) / world_size).backward()
            norm = clip_grad_norm_(jm, max_norm, norm_type)
            ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm, norm_type)
            grads = _full_grads(jm, world_size) if kind.startswith("fsdp") else \
                {n: p.grad for n, p in jm.named_parameters() if p.grad is not None}
            ref_grads = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
            diff = max((grads[n][: g.shape[0]] - g).abs().max().item() for n, g in ref_grads.items())
            results[(norm_type, max_norm)] = (norm.item(), ref_norm.item(), diff, grads.keys() == ref_grads.keys())
    return results


def _clip_worker(rank, world_size):
    return {(kind, name): _clip(rank, world_size, kind, name) for kind in KINDS for name in MODELS}


@functools.cache
def _clips():
    return run_ranks(_clip_worker)


@spawns
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("kind", KINDS)
def test_clip_grad_norm_equals_torchs_on_the_unsharded_model(kind, name):
    for results in _clips():
        for (norm_type, max_norm), (norm, ref_norm, diff, same_keys) in results[(kind, name)].items():
            assert same_keys and abs(norm - ref_norm) <= 1e-6 * ref_norm, (norm_type, norm, ref_norm)
            assert diff <= 1e-7, (norm_type, max_norm, diff)


@pytest.mark.parametrize("max_norm", MAX_NORMS)
@pytest.mark.parametrize("norm_type", NORMS)
@pytest.mark.parametrize("kind", ["plain", "jit"])
def test_clip_grad_norm_of_a_single_process_module_is_torchs(kind, norm_type, max_norm):
    torch.manual_seed(0)
    model = _wrapped(kind, OddMLP())
    _loss("odd_mlp", model, _batch("odd_mlp", 0, 0)).backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    params = [nn.Parameter(torch.zeros_like(g)) for g in grads]  # the same gradients, clipped by torch
    for p, g in zip(params, grads):
        p.grad = g
    expected = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    norm = clip_grad_norm_(model, max_norm, norm_type)
    assert torch.equal(norm, expected)
    clipped = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(torch.equal(g, p.grad) for g, p in zip(clipped, params))
