"""thunder.lightning: the Trainer's and Fabric's thunder strategies against Lightning's own.

Single-process tests run here; the data-parallel ones spawn 2 gloo ranks (``tests/distributed.py``), and each
spawn trains every configuration once with Lightning's ``"ddp"`` and with ``"thunder_ddp"`` / ``"thunder_fsdp"``
from the same initialization on the same data (Lightning's distributed sampler gives each rank its own part);
the tests then compare the parameters (whole ones gathered from the FSDP shards), the losses ``training_step``
saw at every step, the values it logged, and the gradient collectives each batch ran.
"""
from __future__ import annotations

import functools
import gc
import logging
import os
import subprocess
import sys
import warnings
import weakref

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import lightning.fabric as lf
import lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset

import thunder
import thunder.lightning  # registers the strategy names
from thunder.distributed import FSDPTransform
from thunder.lightning import Parallelism, ThunderFabricStrategy, ThunderStrategy
from tests.distributed import run_ranks
from tests.models import GPT, GPTConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _quiet():
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)


# -- the models ------------------------------------------------------------------------------------------------
class Regressor(pl.LightningModule):
    """An MLP trained on (x, y) pairs; ``training_step`` logs the loss and records it (Python on every step)."""

    def __init__(self, bypass: bool = False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
        self.bypass = bypass  # calls self.net directly, not self(...): the model would run outside thunder
        self.seen = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss((self.net(x) if self.bypass else self(x)).float(), y)
        self.log("loss", loss)
        self.seen.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x).float(), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class TinyGPT(pl.LightningModule):
    """The GPT of ``tests/models.py`` (tied embedding and head) on random tokens."""

    def __init__(self):
        super().__init__()
        self.model = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0))
        self.seen = []

    def forward(self, idx, targets):
        return self.model(idx, targets)[1]

    def training_step(self, batch, batch_idx):
        loss = self(*batch)
        self.log("loss", loss)
        self.seen.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def _regression_data(n: int = 64):
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g))


def _token_data(n: int = 32):
    g = torch.Generator().manual_seed(2)
    return TensorDataset(torch.randint(0, 32, (n, 8), generator=g), torch.randint(0, 32, (n, 8), generator=g))


def _trainer(strategy, devices: int, **kwargs) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", devices=devices, strategy=strategy, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **kwargs)


class CountSyncs(pl.Callback):
    """Gradient collectives (all-reduces, reduce-scatters) of each training batch, and the logged loss."""

    NAMES = ("c10d::allreduce_", "c10d::_reduce_scatter_base_")

    def __init__(self):
        self.syncs, self.logged = [], []

    def on_train_batch_start(self, trainer, *args):
        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.profiler.__enter__()

    def on_train_batch_end(self, trainer, *args):
        self.profiler.__exit__(None, None, None)
        self.syncs.append(sum(e.name in self.NAMES for e in self.profiler.events()))
        self.logged.append(trainer.callback_metrics["loss"].item())


def _whole_parameters(module: nn.Module, thunder_module=None) -> dict:
    """The module's parameters; those an FSDP transform sharded are gathered from every rank, padding cut off."""
    transform = None
    if thunder_module is not None:
        transform = next((t for t in thunder.list_transforms(thunder_module) if isinstance(t, FSDPTransform)), None)
    whole = {}
    for name, p in module.named_parameters():
        p = p.detach()
        if transform is not None and id(module.get_parameter(name)) in transform.shards:
            parts = [torch.empty_like(p) for _ in range(transform.world_size)]
            dist.all_gather(parts, p.contiguous())
            p = torch.cat(parts)[: transform.shards[id(module.get_parameter(name))].shape[0]]
        whole[name] = p.clone()
    return whole


# -- import and registration --------------------------------------------------------------------------------------
def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_import_thunder_does_not_import_lightning():
    r = _python("import sys, thunder, thunder.distributed; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                "('lightning', 'pytorch_lightning', 'lightning_fabric')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_missing_lightning_is_a_clear_import_error():
    r = _python("import sys; sys.modules['lightning'] = None\n"
                "try:\n    import thunder.lightning\nexcept ImportError as e:\n    print('ImportError:', e)")
    assert r.returncode == 0, r.stderr
    assert 'pip install "thunder[lightning]"' in r.stdout and "pip install lightning" in r.stdout, r.stdout


@pytest.mark.parametrize("name, parallelism", [("thunder", Parallelism.NONE), ("thunder_ddp", Parallelism.DDP),
                                               ("thunder_fsdp", Parallelism.FSDP)])
def test_names_are_registered_on_import(name, parallelism):
    from lightning.fabric.strategies import STRATEGY_REGISTRY
    from lightning.pytorch.strategies import StrategyRegistry

    for registry, cls in ((StrategyRegistry, ThunderStrategy), (STRATEGY_REGISTRY, ThunderFabricStrategy)):
        strategy = registry.get(name)
        assert type(strategy) is cls and strategy.options.parallelism is parallelism
    if parallelism is Parallelism.NONE:  # one device: no processes to launch
        assert type(_trainer(name, 1).strategy) is ThunderStrategy
        assert type(lf.Fabric(accelerator="cpu", devices=1, strategy=name).strategy) is ThunderFabricStrategy


@pytest.mark.parametrize("kwargs, match", [
    (dict(parallelism="pipeline"), "parallelism must be one of 'none', 'ddp', 'fsdp'"),
    (dict(parallelism="ddp", sharding_strategy="zero3"), "sharding_strategy does not apply to parallelism='ddp'"),
    (dict(parallelism="none", bucket_size_in_mb=10), "bucket_size_in_mb does not apply to parallelism='none'"),
    (dict(parallelism="fsdp", sharding_strategy="zero4"), "sharding_strategy must be one of 'zero2', 'zero3'"),
    (dict(parallelism="ddp", bucket_size_in_mb=-1), "bucket_size_in_mb must be a non-negative number"),
    (dict(parallelism="ddp", state_dict_type="sharded"), "state_dict_type='sharded' applies to parallelism='fsdp'"),
    (dict(parallelism="ddp", jit=False, executors=["torch"]), "does not call with jit=False"),
    (dict(parallelism="ddp", start_method="thread"), "start_method must be"),
])
@pytest.mark.parametrize("cls", [ThunderStrategy, ThunderFabricStrategy])
def test_option_errors(cls, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        cls(**kwargs)


def test_options_by_name():
    from thunder.distributed import FSDPBucketingStrategy, FSDPType

    s = ThunderStrategy("fsdp", sharding_strategy="ZERO3", bucketing_strategy="block", state_dict_type="sharded")
    assert dict(s.options.transform_options) == dict(sharding_strategy=FSDPType.ZERO3, broadcast_from=0,
                                                     bucketing_strategy=FSDPBucketingStrategy.BLOCK)


def test_one_process_refuses_several_devices():
    with pytest.raises(ValueError, match="parallelism='none' trains in one process.*thunder_ddp"):
        _trainer("thunder", 2)


# -- one process ------------------------------------------------------------------------------------------------
def _fit_one_device(strategy, precision, accumulate):
    torch.manual_seed(0)
    module = Regressor()
    trainer = _trainer(strategy, 1, max_steps=4, accumulate_grad_batches=accumulate, precision=precision,
                       limit_val_batches=2, val_check_interval=4, callbacks=[CountSyncs()])
    data = _regression_data()
    trainer.fit(module, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    return module, trainer


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_trainer_one_device_equals_lightning(precision, accumulate):
    _quiet()
    reference, ref_trainer = _fit_one_device("auto", precision, accumulate)
    module, trainer = _fit_one_device("thunder", precision, accumulate)
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name
    assert module.seen == reference.seen and len(module.seen) == 4 * accumulate  # training_step ran every step
    assert trainer.callbacks[0].logged == ref_trainer.callbacks[0].logged  # and so did self.log
    assert trainer.callback_metrics["val_loss"] == ref_trainer.callback_metrics["val_loss"]
    jm = trainer.strategy.thunder_module
    assert thunder.cache_misses(jm) == 2  # one program for training, one for validation
    assert "torch.nn.functional.linear" in str(thunder.last_traces(jm)[-1])
    if precision == "bf16-mixed":
        assert "bfloat16" in str(thunder.last_traces(jm)[-1])  # autocast's casts are in the trace
    assert module.__dict__["_compiled_call_impl"] is None  # nothing left on the module after the steps
    assert trainer.model is module


def test_jit_false_needs_a_thunder_module():
    from thunder.lightning.options import setup_thunder_module

    options = ThunderStrategy("ddp", jit=False).options
    with pytest.raises(ValueError, match="jit=False: the strategy adds thunder.distributed.ddp to the ThunderModules"):
        setup_thunder_module(nn.Linear(2, 2), options, torch.device("cpu"))


def test_trainer_jit_false_trains_your_thunder_modules():
    _quiet()

    class Inner(Regressor):
        def __init__(self):
            super().__init__()
            self.net = thunder.jit(self.net)

        def forward(self, x):
            return self.net(x)

    torch.manual_seed(0)
    reference = Regressor()
    torch.manual_seed(0)
    module = Inner()
    for strategy, m in ((ThunderStrategy(jit=False), module), ("auto", reference)):
        _trainer(strategy, 1, max_steps=3).fit(m, DataLoader(_regression_data(), batch_size=4))
    assert module.seen == reference.seen
    assert thunder.cache_hits(module.net) == 2
    with pytest.raises(ValueError, match="holds modules that are already jitted.*jit=False"):
        _trainer("thunder", 1, max_steps=1).fit(Inner(), DataLoader(_regression_data(), batch_size=4))


def _fabric_one_device(strategy, precision):
    fabric = lf.Fabric(accelerator="cpu", devices=1, strategy=strategy, precision=precision)
    fabric.launch()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    losses = []
    for x, y in DataLoader(_regression_data(16), batch_size=4):
        loss = F.mse_loss(model(x).float(), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return model, losses


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_fabric_one_device_equals_lightning(precision):
    _quiet()
    reference, ref_losses = _fabric_one_device("auto", precision)
    model, losses = _fabric_one_device("thunder", precision)
    assert losses == ref_losses
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p, q)
    assert isinstance(model._forward_module, thunder.ThunderModule)
    assert thunder.cache_hits(model._forward_module) == 3


# -- two processes: the Trainer -----------------------------------------------------------------------------------
# configuration -> (module, Trainer arguments); each runs with Lightning's "ddp" and with the thunder strategies
TRAINER_CONFIGS = {
    "accumulate": (Regressor, dict(accumulate_grad_batches=2)),
    "clip_norm": (Regressor, dict(accumulate_grad_batches=2, gradient_clip_val=0.05)),
    "clip_value": (Regressor, dict(gradient_clip_val=0.01, gradient_clip_algorithm="value")),
    "bf16": (Regressor, dict(accumulate_grad_batches=2, precision="bf16-mixed")),
    "gpt": (TinyGPT, dict(accumulate_grad_batches=2)),
}
STRATEGIES = ("ddp", "thunder_ddp", "thunder_fsdp")


def _trainer_run(config: str, strategy: str) -> dict:
    make, kwargs = TRAINER_CONFIGS[config]
    torch.manual_seed(dist.get_rank())  # ranks start different: the strategies make them equal
    module = make()
    counter = CountSyncs()
    trainer = _trainer(strategy, 2, max_steps=3, callbacks=[counter], **kwargs)
    data = _token_data() if make is TinyGPT else _regression_data()
    try:
        trainer.fit(module, DataLoader(data, batch_size=4))
    except (NotImplementedError, RuntimeError) as e:
        return dict(error=f"{type(e).__name__}: {e}")
    jm = trainer.strategy.thunder_module if strategy != "ddp" else None
    return dict(params=_whole_parameters(module, jm), seen=module.seen, logged=counter.logged, syncs=counter.syncs)


def _trainer_worker(rank, world_size):
    _quiet()
    results = {(c, s): _trainer_run(c, s) for c in TRAINER_CONFIGS for s in STRATEGIES}
    torch.manual_seed(0)
    try:
        _trainer("thunder_ddp", 2, max_steps=1).fit(Regressor(bypass=True), DataLoader(_regression_data(), batch_size=4))
    except RuntimeError as e:
        results["bypass"] = str(e)
    results["outside_steps"] = _calls_outside_steps()
    results["empty_init"] = _trainer_empty_init()
    return results


def _trainer_empty_init() -> dict:
    trainer = _trainer("thunder_fsdp", 2, max_steps=1)
    with trainer.init_module(empty_init=True):
        module = Regressor()
    on_meta = all(p.is_meta for p in module.parameters())
    trainer.fit(module, DataLoader(_regression_data(), batch_size=4))
    return dict(on_meta=on_meta, shapes=[tuple(p.shape) for p in module.parameters()], seen=module.seen)


class CallAtEnd(pl.Callback):
    def on_train_end(self, trainer, module):
        self.out = module(torch.ones(2, 8)).detach()  # with fsdp, eager code would see this rank's shards


def _calls_outside_steps() -> dict:
    """Calls of the module outside the step methods (the model summary's example input, a callback) run the
    ThunderModule too: with fsdp they see whole parameters. Validating afterwards reuses the sharded module."""
    torch.manual_seed(0)
    module = Regressor()
    module.example_input_array = torch.zeros(3, 8)
    callback = CallAtEnd()
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="thunder_fsdp", max_steps=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, callbacks=[callback])
    trainer.fit(module, DataLoader(_regression_data(), batch_size=4))
    jm = trainer.strategy.thunder_module
    whole = _whole_parameters(module, jm)
    expected = F.linear(F.gelu(F.linear(torch.ones(2, 8), whole["net.0.weight"], whole["net.0.bias"])),
                        whole["net.2.weight"], whole["net.2.bias"])
    calls = thunder.compile_stats(jm).calls
    validation = DataLoader(_regression_data(8), batch_size=4)
    trainer.validate(module, validation, verbose=False)  # set up again: not resharded
    result = dict(out=callback.out, expected=expected, calls=calls, routed_after=module.__dict__["_compiled_call_impl"],
                  same_after_validate=trainer.strategy.thunder_module is jm,
                  shapes_after_validate=[tuple(p.shape) for p in module.parameters()],
                  val_loss=trainer.callback_metrics["val_loss"].item())
    # A second Trainer once the first is gone (the module holds its trainer until given another: dropped here, the
    # ThunderModule goes with it, nothing else holds it) jits the module again and uses the shards in place; once
    # the module goes too, nothing of it is left.
    shards, old = list(module.parameters()), weakref.ref(jm)
    module.trainer = None
    del trainer, jm, callback
    gc.collect()
    second = _trainer("thunder_fsdp", 2)
    second.validate(module, validation, verbose=False)
    result.update(first_freed=old() is None, second_val_loss=second.callback_metrics["val_loss"].item(),
                  same_shards=all(p is q for p, q in zip(module.parameters(), shards)))
    gone = weakref.ref(module)
    del second, module, shards
    gc.collect()
    result["module_freed"] = gone() is None
    return result


@functools.cache
def _trainer_results():
    return run_ranks(_trainer_worker)


def _compare(result: dict, reference: dict, exact: bool) -> None:
    assert "error" not in result, result.get("error")
    for name, p in reference["params"].items():
        q = result["params"][name]
        assert torch.equal(p, q) if exact else torch.allclose(p, q, rtol=1e-5, atol=1e-6), name
    if exact:
        assert result["seen"] == reference["seen"] and result["logged"] == reference["logged"]
    else:
        torch.testing.assert_close(result["seen"], reference["seen"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(result["logged"], result["seen"])
    assert result["logged"] == result["seen"]  # self.log reached the Trainer on every step


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["thunder_ddp", "thunder_fsdp"])
def test_trainer_clip_by_norm_equals_lightning_ddp(strategy):
    for results in _trainer_results():
        _compare(results[("clip_norm", strategy)], results[("clip_norm", "ddp")], exact=strategy == "thunder_ddp")


@pytest.mark.distributed
@pytest.mark.parametrize("config", [c for c in TRAINER_CONFIGS if c != "clip_norm"])
@pytest.mark.parametrize("strategy", ["thunder_ddp", "thunder_fsdp"])
def test_trainer_equals_lightning_ddp(config, strategy):
    """Parameters after 3 optimizer steps, losses and logged values: bitwise for ddp, to float rounding for fsdp."""
    for results in _trainer_results():
        _compare(results[(config, strategy)], results[(config, "ddp")], exact=strategy == "thunder_ddp")


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["thunder_ddp", "thunder_fsdp"])
def test_trainer_accumulation_synchronizes_once_per_group(strategy):
    """accumulate_grad_batches=2: the first batch of each group runs no gradient collective, the second does
    (ddp: one all-reduce for this model's single bucket; fsdp: one reduce-scatter per parameter), as Lightning's.
    Besides, the all-reduces that check that every rank issues the same collectives (see [Note: ranks that trace
    different programs]): ddp's before a synchronized backward's, fsdp's before each forward's gathers and before a
    synchronized backward's collectives."""
    for results in _trainer_results():
        syncs, reference = results[("accumulate", strategy)]["syncs"], results[("accumulate", "ddp")]["syncs"]
        assert reference[0::2] == [0, 0, 0]
        assert syncs[0::2] == ([0, 0, 0] if strategy == "thunder_ddp" else [1, 1, 1])
        assert syncs[1::2] == ([1 + 1, 1 + 1, 1 + 1] if strategy == "thunder_ddp" else [2 + 4, 2 + 4, 2 + 4])


@pytest.mark.distributed
def test_trainer_calls_outside_the_steps_run_the_thunder_module():
    for results in _trainer_results():
        r = results["outside_steps"]
        torch.testing.assert_close(r["out"], r["expected"])
        assert r["calls"] == 4  # the summary's example input, 2 training steps, the callback
        assert r["routed_after"] is None
        assert r["same_after_validate"] and r["shapes_after_validate"] == [(8, 8), (8,), (2, 16), (2,)]


@pytest.mark.distributed
def test_trainer_releases_the_module_and_a_second_trainer_reuses_its_shards():
    """Nothing global keeps a module a strategy set up, or its ThunderModule, alive (they hold the process group);
    a second Trainer after the first is gone validates with the shards the first made, not sharded again."""
    for results in _trainer_results():
        r = results["outside_steps"]
        assert r["first_freed"] and r["module_freed"]
        assert r["same_shards"] and r["second_val_loss"] == r["val_loss"]


@pytest.mark.distributed
def test_trainer_fsdp_empty_init_materializes_shards():
    for results in _trainer_results():
        r = results["empty_init"]
        assert r["on_meta"] and r["shapes"] == [(8, 8), (8,), (2, 16), (2,)] and len(r["seen"]) == 1


@pytest.mark.distributed
def test_trainer_refuses_a_step_that_bypasses_the_jitted_module():
    for results in _trainer_results():
        assert "Regressor.training_step computed its loss without running the jitted module" in results["bypass"]
        assert "call self(...)" in results["bypass"]


# -- two processes: Fabric ----------------------------------------------------------------------------------------
FABRIC_CONFIGS = {
    "accumulate": {},
    "clip_norm": dict(max_norm=0.05),
    "clip_value": dict(clip_val=0.01),
    "bf16": dict(precision="bf16-mixed"),
}


def _count_syncs(fn) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.name in CountSyncs.NAMES for e in prof.events())


def _fabric_run(config: str, strategy, setup: str = "joint") -> dict:
    options = dict(FABRIC_CONFIGS[config])
    fabric = lf.Fabric(accelerator="cpu", devices=2, strategy=strategy, precision=options.pop("precision", "32-true"))
    fabric.launch()
    torch.manual_seed(fabric.global_rank)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    if isinstance(strategy, ThunderFabricStrategy) and not strategy.options.jit:
        model = thunder.jit(model)  # yours; the strategy adds the transform
    if setup == "joint":
        model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    else:  # the order Lightning's own FSDP asks for
        model = fabric.setup_module(model)
        optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.01))
    loader = fabric.setup_dataloaders(DataLoader(_regression_data(), batch_size=4))
    losses, syncs = [], []
    for i, (x, y) in zip(range(6), loader):
        def step():
            with fabric.no_backward_sync(model, enabled=i % 2 == 0):
                loss = F.mse_loss(model(x).float(), y)
                fabric.backward(loss / 2)
            losses.append(loss.item())
        syncs.append(_count_syncs(step))
        if i % 2 == 1:
            try:
                if options:
                    fabric.clip_gradients(model, optimizer, **options)
            except NotImplementedError as e:
                return dict(error=f"NotImplementedError: {e}")
            optimizer.step()
            optimizer.zero_grad()
    jm = model._forward_module if strategy != "ddp" else None
    return dict(params=_whole_parameters(model.module, jm), seen=losses, logged=losses, syncs=syncs)


def _partly_jitted_error() -> str:
    fabric = lf.Fabric(accelerator="cpu", devices=2, strategy=ThunderFabricStrategy("ddp", jit=False))
    fabric.launch()
    try:
        fabric.setup_module(nn.Sequential(thunder.jit(nn.Linear(8, 16)), nn.Linear(16, 4)))
    except ValueError as e:
        return str(e)


def _empty_init_run(empty_init: bool) -> dict:
    fabric = lf.Fabric(accelerator="cpu", devices=2, strategy="thunder_fsdp")
    fabric.launch()
    torch.manual_seed(0)
    with fabric.init_module(empty_init=empty_init):
        model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 5))
    on_meta = all(p.is_meta for p in model.parameters())
    torch.manual_seed(0)  # fsdp's reset_parameters() of the empty model draws what the constructor drew
    model = fabric.setup_module(model)
    return dict(on_meta=on_meta, shapes=[tuple(p.shape) for p in model.parameters()],
                params=_whole_parameters(model.module, model._forward_module))


def _fabric_worker(rank, world_size):
    _quiet()
    results = {(c, s): _fabric_run(c, s) for c in FABRIC_CONFIGS for s in STRATEGIES}
    results["separate"] = _fabric_run("accumulate", "thunder_fsdp", setup="separate")
    results["jit_false"] = _fabric_run("accumulate", ThunderFabricStrategy("ddp", jit=False))
    results["partly_jitted"] = _partly_jitted_error()
    results["empty_init"] = {flag: _empty_init_run(flag) for flag in (True, False)}
    return results


@functools.cache
def _fabric_results():
    return run_ranks(_fabric_worker)


@pytest.mark.distributed
@pytest.mark.parametrize("config", [c for c in FABRIC_CONFIGS if c != "clip_norm"])
@pytest.mark.parametrize("strategy", ["thunder_ddp", "thunder_fsdp"])
def test_fabric_equals_lightning_ddp(config, strategy):
    for results in _fabric_results():
        _compare(results[(config, strategy)], results[(config, "ddp")], exact=strategy == "thunder_ddp")


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["thunder_ddp", "thunder_fsdp"])
def test_fabric_clip_by_norm_equals_lightning_ddp(strategy):
    for results in _fabric_results():
        _compare(results[("clip_norm", strategy)], results[("clip_norm", "ddp")], exact=strategy == "thunder_ddp")


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["thunder_ddp", "thunder_fsdp"])
def test_fabric_no_backward_sync_synchronizes_once_per_group(strategy):
    """As the Trainer's (see test_trainer_accumulation_synchronizes_once_per_group)."""
    for results in _fabric_results():
        syncs, reference = results[("accumulate", strategy)]["syncs"], results[("accumulate", "ddp")]["syncs"]
        assert reference[0::2] == [0, 0, 0]
        assert syncs[0::2] == ([0, 0, 0] if strategy == "thunder_ddp" else [1, 1, 1])
        assert syncs[1::2] == ([1 + 1, 1 + 1, 1 + 1] if strategy == "thunder_ddp" else [2 + 4, 2 + 4, 2 + 4])


@pytest.mark.distributed
def test_fabric_fsdp_optimizer_set_up_before_or_after_the_module():
    """fabric.setup(model, optimizer) moves the optimizer onto the shards: the same training as setting up the
    module first and making the optimizer from its shards."""
    for results in _fabric_results():
        _compare(results["separate"], results[("accumulate", "thunder_fsdp")], exact=True)


@pytest.mark.distributed
def test_fabric_jit_false_adds_the_transform_to_your_thunder_module():
    for results in _fabric_results():
        _compare(results["jit_false"], results[("accumulate", "ddp")], exact=True)
        assert results["partly_jitted"].startswith("parameters of Sequential outside the jitted modules would not be "
                                                   "synchronized by thunder.distributed.ddp: 1.weight, 1.bias")


@pytest.mark.distributed
def test_fabric_fsdp_empty_init_materializes_shards():
    for results in _fabric_results():
        empty, full = results["empty_init"][True], results["empty_init"][False]
        assert empty["on_meta"] and not full["on_meta"]
        assert empty["shapes"] == full["shapes"] == [(8, 8), (8,), (3, 16), (3,)]  # this rank's shards only
        for name, p in full["params"].items():
            assert torch.equal(p, empty["params"][name]), name


# -- checkpoints ----------------------------------------------------------------------------------------------------
# name -> how to make the strategy (a new one per Trainer / Fabric)
CHECKPOINTING = {
    "ddp": lambda cls: "ddp",
    "thunder_ddp": lambda cls: cls("ddp"),
    "thunder_fsdp_full": lambda cls: cls("fsdp"),
    "thunder_fsdp_sharded": lambda cls: cls("fsdp", state_dict_type="sharded"),
}
CHECKPOINT_CASES = list(CHECKPOINTING)


def _fit_epochs(name: str, epochs: int, seed: int, save=None, resume=None) -> dict:
    """Trains ``epochs`` epochs of 2 optimizer steps (4 batches, accumulated by 2) from a checkpoint or not."""
    torch.manual_seed(seed)
    module = Regressor()
    trainer = _trainer(CHECKPOINTING[name](ThunderStrategy), 2, max_epochs=epochs, accumulate_grad_batches=2)
    try:
        trainer.fit(module, DataLoader(_regression_data(32), batch_size=4), ckpt_path=resume)
        if save is not None:
            trainer.save_checkpoint(save)
    except NotImplementedError as e:
        return dict(error=str(e))
    jm = trainer.strategy.thunder_module if name != "ddp" else None
    return dict(params=_whole_parameters(module, jm), seen=module.seen, step=trainer.global_step)


def _trainer_checkpoint_worker(rank, world_size, directory):
    _quiet()
    results = {}
    for name in CHECKPOINTING:
        path = os.path.join(directory, f"trainer-{name}.ckpt")
        first = _fit_epochs(name, 1, seed=rank, save=path)
        resumed = first if "error" in first else _fit_epochs(name, 2, seed=100 + rank, resume=path)
        results[name] = dict(whole=_fit_epochs(name, 2, seed=rank), first=first, resumed=resumed)
    # a checkpoint of Lightning's ddp (whole tensors) resumes a sharded run
    results["ddp_to_fsdp"] = _fit_epochs("thunder_fsdp_full", 2, seed=7, resume=os.path.join(directory, "trainer-ddp.ckpt"))
    return results


@functools.cache
def _trainer_checkpoint_results(directory):
    return run_ranks(_trainer_checkpoint_worker, directory)


@pytest.fixture(scope="module")
def checkpoint_directory(tmp_path_factory):
    return str(tmp_path_factory.mktemp("checkpoints"))


@pytest.mark.distributed
@pytest.mark.parametrize("name", CHECKPOINT_CASES)
def test_trainer_resumes_from_checkpoint_as_if_uninterrupted(name, checkpoint_directory):
    """fit 1 epoch, save_checkpoint, fit(ckpt_path=...) a fresh module to epoch 2: the parameters (Adam's state
    restored) and the losses of epoch 2 are bitwise those of 2 epochs without a break."""
    for results in _trainer_checkpoint_results(checkpoint_directory):
        r = results[name]
        for run in r.values():
            assert "error" not in run, run["error"]
        assert r["resumed"]["step"] == r["whole"]["step"] == 4
        assert r["resumed"]["seen"] == r["whole"]["seen"][4:]
        for key, p in r["whole"]["params"].items():
            assert torch.equal(p, r["resumed"]["params"][key]), key


@pytest.mark.distributed
def test_trainer_fsdp_resumes_from_a_lightning_ddp_checkpoint(checkpoint_directory):
    for results in _trainer_checkpoint_results(checkpoint_directory):
        resumed, reference = results["ddp_to_fsdp"], results["ddp"]["whole"]
        assert "error" not in resumed, resumed["error"]
        for key, p in reference["params"].items():
            torch.testing.assert_close(resumed["params"][key], p, rtol=1e-5, atol=1e-6)


def _fabric_steps(name: str, steps: range, seed: int, save=None, resume=None) -> dict:
    fabric = lf.Fabric(accelerator="cpu", devices=2, strategy=CHECKPOINTING[name](ThunderFabricStrategy))
    fabric.launch()
    torch.manual_seed(seed)
    model = fabric.setup_module(nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.01))
    state = {"model": model, "optimizer": optimizer, "step": 0}
    try:
        if resume is not None:
            fabric.load(resume, state)
        losses = []
        for step in steps:
            assert step == state["step"]
            g = torch.Generator().manual_seed(100 * fabric.global_rank + step)
            loss = F.mse_loss(model(torch.randn(4, 8, generator=g)), torch.randn(4, 4, generator=g))
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            state["step"] += 1
        if save is not None:
            fabric.save(save, state)
    except NotImplementedError as e:
        return dict(error=str(e))
    jm = model._forward_module if name != "ddp" else None
    return dict(params=_whole_parameters(model.module, jm), seen=losses)


def _fabric_checkpoint_worker(rank, world_size, directory):
    _quiet()
    results = {}
    for name in CHECKPOINTING:
        path = os.path.join(directory, f"fabric-{name}.ckpt")
        first = _fabric_steps(name, range(2), seed=rank, save=path)
        resumed = first if "error" in first else _fabric_steps(name, range(2, 4), seed=100 + rank, resume=path)
        results[name] = dict(whole=_fabric_steps(name, range(4), seed=rank), first=first, resumed=resumed)
    return results


@functools.cache
def _fabric_checkpoint_results(directory):
    return run_ranks(_fabric_checkpoint_worker, directory)


@pytest.mark.distributed
@pytest.mark.parametrize("name", CHECKPOINT_CASES)
def test_fabric_load_continues_as_if_uninterrupted(name, checkpoint_directory):
    for results in _fabric_checkpoint_results(checkpoint_directory):
        r = results[name]
        for run in r.values():
            assert "error" not in run, run["error"]
        assert r["resumed"]["seen"] == r["whole"]["seen"][2:]
        for key, p in r["whole"]["params"].items():
            assert torch.equal(p, r["resumed"]["params"][key]), key


# -- the examples, started the ways Lightning users start them ------------------------------------------------------
def _example(*command, timeout: int = 240) -> str:
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.distributed
def test_trainer_example_starts_its_second_process():
    """``python examples/lightning_trainer.py``: the Trainer (devices=2) runs the script again as rank 1."""
    out = _example(sys.executable, "examples/lightning_trainer.py", "--steps", "3", "--log-every", "1", "--show-trace")
    assert "done: 3 steps on 2 process(es) with thunder_ddp" in out
    assert "step    3  loss" in out and "all_reduce(" in out


@pytest.mark.distributed
def test_trainer_example_under_torchrun():
    out = _example(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   "examples/lightning_trainer.py", "--steps", "3", "--strategy", "thunder_fsdp",
                   "--precision", "bf16-mixed", "--show-trace")
    assert "done: 3 steps on 2 process(es) with thunder_fsdp" in out and "reduce_scatter(" in out


@pytest.mark.distributed
def test_fabric_example_starts_its_second_process():
    out = _example(sys.executable, "examples/lightning_fabric.py", "--steps", "3", "--log-every", "1", "--show-trace")
    assert "done: 3 steps on 2 process(es) with thunder_fsdp" in out
    assert "step    3  loss" in out and "reduce_scatter(" in out
