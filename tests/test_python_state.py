"""Python state a jitted program reads, changed between calls: every call gives eager's result.

Each case is a (program, state change) pair: the program is jitted and called twice, the state is
changed, and the program is called again; every call is compared with eager PyTorch (bitwise: the
same kernels run). A change the trace depends on must recompile (checked by the prologue).
"""
from __future__ import annotations

import copy
import dataclasses
import types
import warnings
from typing import Callable

import pytest
import torch
import torch.nn as nn

import thunder
from thunder.driver.frontend import ThunderSharpEdgeError


class Cfg:
    def __init__(self, mult=3.0):
        self.mult = mult
        self.offset = torch.ones(4)


@dataclasses.dataclass
class Options:
    scale: float = 2.0
    shift: int = 1


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 2.0
        self.use_shift = True
        self.sizes = [1, 2]
        self.cfg = Cfg()

    def forward(self, x):
        y = self.fc(x) * self.scale
        if self.use_shift:
            y = y + 1
        return y * len(self.sizes) * self.cfg.mult


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).relu()


GLOBAL_SCALE = 2.0


def helper(x):
    return x * 2


def uses_globals(x):
    return helper(x) * GLOBAL_SCALE


# globals named as the prologue's own names (its parameters, its imports): checked as any other
kwargs: dict = {}
dtypes = Options(scale=3.0)


def _scaled(x, scale=1.0, shift=0):
    return x * scale + shift


def uses_prologue_names(x):
    return _scaled(x, **kwargs) * dtypes.scale


class _RegistryState:
    def __init__(self, table):
        self.table = dict(table)

    def get(self, key):
        return _RegistryState(self.table), self.table[key]


class _Registry:  # replaces its state object on every call, as einx's backend registry does
    def __init__(self, scale=2.0):
        self.state = _RegistryState({"scale": scale})


REGISTRY = _Registry()


def uses_registry(x):
    REGISTRY.state, scale = REGISTRY.state.get("scale")
    return x * scale


def _closure():
    state = {"factor": None}
    factor = 2.0

    def f(x):
        return x * factor

    def set_factor(v):
        nonlocal factor
        factor = v

    state["set"] = set_factor
    return f, set_factor


def takes_object(x, cfg):
    return x * cfg.mult + cfg.offset


def takes_options(x, opts):
    return x * opts.scale + opts.shift


def reads_vars(x, opts):
    return x * sum(vars(opts).values())


@dataclasses.dataclass
class Case:
    name: str
    make: Callable[[], tuple]  # () -> (program, args)
    change: Callable  # (program, args) -> new args (a tuple), or anything else to keep them
    restore: Callable | None = None
    misses_after: int = 2  # cache misses after the change's call


def _set_global(name, value):
    def change(program, args):
        globals()[name] = value

    return change


def _module_case(name, make_module, change, **kw):
    return Case(name, lambda: (make_module(), (torch.randn(2, 4),)), change, **kw)


def _patched_block_forward(self, x):
    return self.fc(x) * 5


_HOOKS: list = []


def _add_hook(target, kind="forward"):
    def change(program, args):
        module = target(program)
        if kind == "forward":
            _HOOKS.append(module.register_forward_hook(lambda m, i, o: o * 2))
        elif kind == "pre":
            _HOOKS.append(module.register_forward_pre_hook(lambda m, i: (i[0] + 1,)))
        else:
            _HOOKS.append(torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o + 1))

    return change


def _remove_hooks():
    while _HOOKS:
        _HOOKS.pop().remove()


def _with_hook(module):
    _HOOKS.append(module.register_forward_hook(lambda m, i, o: o * 2))
    return module


CASES = [
    _module_case("module float attribute", Scaled, lambda m, a: setattr(m, "scale", 3.0)),
    _module_case("module float attribute to int", Scaled, lambda m, a: setattr(m, "scale", 2)),
    _module_case("module flag", Scaled, lambda m, a: setattr(m, "use_shift", False)),
    _module_case("list attribute mutated in place", Scaled, lambda m, a: m.sizes.append(3)),
    _module_case("attribute of an object held by the module", Scaled, lambda m, a: setattr(m.cfg, "mult", 5.0)),
    _module_case("object held by the module replaced", Scaled, lambda m, a: setattr(m, "cfg", Cfg(7.0))),
    _module_case("submodule replaced", Scaled, lambda m, a: setattr(m, "fc", nn.Linear(4, 4))),
    _module_case("parameter replaced", Scaled, lambda m, a: setattr(m.fc, "weight", nn.Parameter(torch.randn(4, 4))),
                 misses_after=1),
    _module_case("absent bias becomes a parameter", lambda: nn.Linear(4, 4, bias=False),
                 lambda m, a: setattr(m, "bias", nn.Parameter(torch.randn(4)))),
    _module_case("dropout probability", lambda: nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)),
                 lambda m, a: setattr(m[1], "p", 0.2)),
    _module_case("train to eval", lambda: nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)), lambda m, a: m.eval()),
    _module_case("Sequential item replaced", lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU()),
                 lambda m, a: m.__setitem__(1, nn.Tanh())),
    _module_case("ModuleList appended", Stack, lambda m, a: m.layers.append(nn.Linear(4, 4))),
    _module_case("forward patched on the instance", Block, lambda m, a: setattr(m.fc, "forward", lambda x: x * 3)),
    _module_case("forward patched on the class", Block, lambda m, a: setattr(Block, "forward", _patched_block_forward),
                 restore=lambda: setattr(Block, "forward", _BLOCK_FORWARD)),
    _module_case("forward hook added", Block, _add_hook(lambda m: m), restore=_remove_hooks),
    _module_case("forward hook added to a submodule", Block, _add_hook(lambda m: m.fc), restore=_remove_hooks),
    _module_case("forward pre-hook added", Block, _add_hook(lambda m: m, "pre"), restore=_remove_hooks),
    _module_case("forward hook removed", lambda: _with_hook(Block()), lambda m, a: _remove_hooks(), restore=_remove_hooks),
    _module_case("global module forward hook added", Block, _add_hook(lambda m: m, "global"), restore=_remove_hooks),
    _module_case("global module forward hook added to a module with hooks", lambda: _with_hook(Block()),
                 _add_hook(lambda m: m, "global"), restore=_remove_hooks),
    Case("global number", lambda: (uses_globals, (torch.randn(3),)), _set_global("GLOBAL_SCALE", 3.0),
         restore=lambda: globals().__setitem__("GLOBAL_SCALE", 2.0)),
    Case("global named kwargs", lambda: (uses_prologue_names, (torch.randn(3),)), _set_global("kwargs", {"shift": 4}),
         restore=lambda: globals().__setitem__("kwargs", {})),
    Case("attribute of a global named dtypes", lambda: (uses_prologue_names, (torch.randn(3),)),
         lambda f, a: setattr(dtypes, "scale", 5.0), restore=lambda: setattr(dtypes, "scale", 3.0)),
    Case("object the program replaces on every call", lambda: (uses_registry, (torch.randn(3),)),
         lambda f, a: setattr(REGISTRY, "state", _RegistryState({"scale": 5.0})),
         restore=lambda: setattr(REGISTRY, "state", _RegistryState({"scale": 2.0}))),
    Case("global function replaced", lambda: (uses_globals, (torch.randn(3),)),
         _set_global("helper", lambda x: x * 7), restore=lambda: globals().__setitem__("helper", _helper)),
    Case("closure variable", lambda: (_closure()[0], (torch.randn(3),)),
         lambda f, a: _set_cell(f, "factor", 4.0)),
    Case("attribute of an argument object", lambda: (takes_object, (torch.randn(4), Cfg())),
         lambda f, a: setattr(a[1], "mult", 1.5)),
    Case("tensor attribute of an argument object", lambda: (takes_object, (torch.randn(4), Cfg())),
         lambda f, a: setattr(a[1], "offset", torch.zeros(4)), misses_after=1),
    Case("dataclass argument field", lambda: (takes_options, (torch.randn(3), Options())),
         lambda f, a: setattr(a[1], "shift", 4)),
    Case("argument object replaced by an equal one", lambda: (takes_options, (torch.randn(3), Options())),
         lambda f, a: (a[0], Options()), misses_after=1),
    Case("argument object replaced by a different one", lambda: (takes_options, (torch.randn(3), Options())),
         lambda f, a: (a[0], Options(scale=5.0))),
    Case("argument object read as a whole replaced by an equal one", lambda: (reads_vars, (torch.randn(3), Options())),
         lambda f, a: (a[0], Options())),
]

_helper = helper
_BLOCK_FORWARD = Block.forward


def _set_cell(f, name, value):
    cell = f.__closure__[f.__code__.co_freevars.index(name)]
    cell.cell_contents = value


def _check(jitted, program, args):
    torch.manual_seed(0)
    expected = program(*args)
    torch.manual_seed(0)
    out = jitted(*args)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_python_state_changed_between_calls(case):
    program, args = case.make()
    jitted = thunder.jit(program)
    try:
        _check(jitted, program, args)
        _check(jitted, program, args)
        assert thunder.cache_misses(jitted) == 1 and thunder.cache_hits(jitted) == 1
        new_args = case.change(program, args)
        args = new_args if isinstance(new_args, tuple) else args
        _check(jitted, program, args)
        _check(jitted, program, args)
        assert thunder.cache_misses(jitted) == case.misses_after
    finally:
        if case.restore is not None:
            case.restore()


def test_deterministic_algorithms_join_the_global_state_check():
    jf = thunder.jit(helper)
    x = torch.randn(3)
    jf(x)
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.equal(jf(x), helper(x))
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(jf(x), helper(x))
    assert thunder.cache_misses(jf) == 2 and thunder.cache_hits(jf) == 1


def test_deleted_attribute_fails_as_in_eager():
    m = Scaled()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    jm(x)
    del m.scale
    with pytest.raises(AttributeError, match="scale"):
        m(x)
    with pytest.raises(AttributeError, match="scale"):
        jm(x)


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def test_state_the_program_changes_itself_gives_eager_results():
    m, twin = Counting(), Counting()
    jm = thunder.jit(m)
    x = torch.randn(3)
    for _ in range(3):
        assert torch.equal(jm(x), twin(x))
    assert m.calls == twin.calls == 3


def test_prologue_shows_the_checks_of_python_state():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    jm = thunder.jit(m)
    jm(torch.randn(2, 4))
    prologue = str(thunder.last_prologue_traces(jm)[-1])
    assert "check_items(m_1.__dict__, ('p', 'inplace'), (0.1, False))" in prologue
    assert "check_module_calls((module, m_0, m_1), (Sequential, Linear, Dropout))" in prologue
    assert "check_global_module_hooks(())" in prologue


def test_hooks_run_as_in_eager_on_every_call():
    seen = []
    m = Block()
    m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
    m.fc.register_forward_hook(lambda mod, inp, out: out + 1)
    jm = thunder.jit(m)
    for _ in range(2):
        x = torch.randn(2, 4)
        assert torch.equal(jm(x), m(x))
    assert thunder.cache_hits(jm) == 1


def test_hooks_registered_on_the_thunder_module_reach_the_original():
    m = Block()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    jm(x)
    handle = jm.register_forward_hook(lambda mod, inp, out: out * 3)
    assert torch.equal(jm(x), m(x)) and torch.equal(jm(x), m.fc(x).relu() * 3)
    handle.remove()
    assert torch.equal(jm(x), m(x))


def _warnings_of(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return [str(w.message) for w in caught if "Sharp edge" in str(w.message)]


BIG = list(range(100))


def reads_big_list(x):
    return x * len(BIG)


@pytest.mark.parametrize("program, args, what", [
    (lambda x, ns: x * ns.scale, (torch.randn(2), types.SimpleNamespace(scale=2.0)), "SimpleNamespace"),
    (reads_big_list, (torch.randn(2),), "BIG"),
], ids=["C-type argument", "large list"])
def test_sharp_edges_report_what_the_prologue_cannot_check(program, args, what):
    assert not _warnings_of(thunder.jit(copy.copy(program)), *args)
    reported = _warnings_of(thunder.jit(copy.copy(program), sharp_edges="warn"), *args)
    assert any(what in m for m in reported), reported
    with pytest.raises(ThunderSharpEdgeError, match=what):
        thunder.jit(copy.copy(program), sharp_edges="error")(*args)


def test_threads_tracing_modules_of_the_same_classes():
    import threading

    errors = []

    def work(seed):
        try:
            torch.manual_seed(seed)
            m = Scaled()
            for i in range(3):
                m.scale = float(i)
                jm = thunder.jit(m)
                x = torch.randn(2, 4)
                assert torch.equal(jm(x), m(x))
        except Exception as e:  # reported below, with the thread's traceback
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert "__getattribute__" not in Scaled.__dict__ and "__getattribute__" not in nn.Linear.__dict__


def test_fresh_argument_objects_holding_the_same_values_reuse_the_trace():
    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
        scale: float

    def step(batch):
        return batch.x * batch.scale

    jstep = thunder.jit(step)
    for i in range(4):
        batch = Batch(torch.randn(3), 2.0)
        assert torch.equal(jstep(batch), step(batch))
    assert thunder.cache_misses(jstep) == 1 and thunder.cache_hits(jstep) == 3
    batch = Batch(torch.randn(3), 3.0)
    assert torch.equal(jstep(batch), step(batch))
    assert thunder.cache_misses(jstep) == 2
    assert "check_same_object" not in str(thunder.last_prologue_traces(jstep)[-1])


class _Mode:
    def __init__(self, flag):
        self.flag = flag


class _ModeHolder:
    def __init__(self):
        self.mode = _Mode(True)


MODE = _ModeHolder()


def toggles_mode(x):
    mode = MODE.mode
    MODE.mode = _Mode(not mode.flag)
    return x * 2 if mode.flag else x * 3


def test_an_object_replaced_by_one_holding_other_values_recompiles():
    """The replaced object is checked by what was read from it: the new one holds another flag."""
    x = torch.randn(3)
    MODE.mode = _Mode(True)
    expected = [toggles_mode(x) for _ in range(5)]
    MODE.mode = _Mode(True)
    jf = thunder.jit(toggles_mode)
    for n, e in enumerate(expected):
        assert torch.equal(jf(x), e), n
        assert MODE.mode.flag == (n % 2 == 1)
    assert thunder.cache_misses(jf) == 2 and thunder.cache_hits(jf) == 3
