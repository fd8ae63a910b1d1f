"""The core JIT: tracing, trace printing, caching and prologues, the public query API, ThunderModule."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import dis
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.driver.interpreter import InterpreterError
from thunder.core.proxies import DataDependentError
from thunder.core.trace_checker import check_trace


def _check_all_traces(jfn):
    for t in thunder.last_traces(jfn) + thunder.last_backward_traces(jfn) + thunder.last_prologue_traces(jfn):
        check_trace(t)


# ---------------------------------------------------------------------------------------------
# The seed notebook's cells
# ---------------------------------------------------------------------------------------------


def foo(a, b):
    return a + b


def test_seed_simple_add_and_its_trace():
    from thunder.functional import jit

    jfoo = jit(foo)
    a = torch.randn((2, 2))
    b = torch.randn((2, 2))
    assert torch.equal(jfoo(a, b), foo(a, b))
    traces = thunder.last_traces(jfoo)
    expected = '''# Constructed by Delete Last Used (took 0 milliseconds)
import torch
from thunder.executors.torchex import no_autocast

def computation(a, b):
  # a: "cpu f32[2, 2]"
  # b: "cpu f32[2, 2]"
  t0 = torch.add(a, b)  # t0: "cpu f32[2, 2]"
    # t0 = ltorch.add(a, b, alpha=None)  # t0: "cpu f32[2, 2]"
      # t0 = prims.add(a, b)  # t0: "cpu f32[2, 2]"
  del a, b
  return t0
'''
    printed = str(traces[-1])
    assert printed.split("\n", 1)[1] == expected.split("\n", 1)[1]
    assert printed.startswith("# Constructed by Delete Last Used (took ")
    _check_all_traces(jfoo)


def test_seed_torch_function_is_translated():
    from thunder.functional import jit

    def foo_torch(a, b):
        return torch.add(a, b)

    jfoo_torch = jit(foo_torch)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    assert torch.equal(jfoo_torch(a, b), foo(a, b))
    assert "ltorch.add(a, b, alpha=None)" in str(thunder.last_traces(jfoo_torch)[-1])


class TensorPair:
    def __init__(self, a, b):
        self.a = a
        self.b = b


def test_seed_unsupported_input_type():
    from thunder.functional import jit

    def bar(tp):
        return tp.a + tp.b

    jbar = jit(bar)
    tp = TensorPair(torch.randn(2, 2), torch.randn(2, 2))
    with pytest.raises(ValueError) as e:
        jbar(tp)
    assert str(e.value) == f"Cannot unpack object of type {TensorPair}. Please file an issue requesting support."

    jfoo = jit(foo)

    def tensorpair_wrapper(tp):
        return jfoo(tp.a, tp.b)

    assert torch.equal(tensorpair_wrapper(tp), tp.a + tp.b)


def test_seed_inputs_not_from_the_signature():
    from thunder.functional import jit

    b = torch.randn(2, 2)

    def partial_add(a):
        return a + b

    jpartial_add = jit(partial_add)
    with pytest.raises(InterpreterError) as e:
        jpartial_add(torch.randn(2, 2))
    msg = str(e.value)
    assert "had an unexpected type <class 'torch.Tensor'>" in msg
    assert msg.startswith("Encountered exception ValueError: tensor(")
    assert "Supported types are (<class 'thunder.core.proxies.TensorProxy'>, <class 'numbers.Number'>)" in msg
    assert "while tracing <function" in msg


def test_seed_modifying_inputs():
    from thunder.functional import jit

    def list_sum(lst):
        accum = lst[0]
        for x in lst[1:]:
            accum = accum + x
        lst.append(accum)

    jlist_sum = jit(list_sum)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    with pytest.raises(NotImplementedError, match="^Appending to an input list is not yet supported$"):
        jlist_sum([a, b])


@pytest.mark.parametrize("mutate,message", [
    (lambda lst: lst.extend([1]), "Extending an input list is not yet supported"),
    (lambda lst: lst.insert(0, 1), "Inserting into an input list is not yet supported"),
    (lambda lst: lst.pop(), "Popping from an input list is not yet supported"),
    (lambda lst: lst.__setitem__(0, 1), "Setting an item of an input list is not yet supported"),
    (lambda lst: lst.clear(), "Clearing an input list is not yet supported"),
])
def test_other_input_list_mutations(mutate, message):
    from thunder.functional import jit

    def f(lst):
        mutate(lst)
        return lst[0]

    with pytest.raises(NotImplementedError, match=message):
        jit(f)([torch.randn(2)])


def test_input_dict_mutation():
    from thunder.functional import jit

    def f(d):
        d["c"] = d["a"]
        return d["a"]

    with pytest.raises(NotImplementedError, match="Setting an item of an input dict is not yet supported"):
        jit(f)({"a": torch.randn(2)})


def test_seed_random_random_is_a_trace_constant():
    from thunder.functional import jit

    def add_random(a):
        return a + random.random()

    jadd_random = jit(add_random)
    a = torch.randn(2, 2)
    first = jadd_random(a)
    assert torch.equal(jadd_random(a), first)  # the same constant on every call
    trace = str(thunder.last_traces(jadd_random)[-1])
    constant = float(trace.split("torch.add(a, ")[1].split(")")[0])
    assert torch.allclose(first, a + constant)
    assert f"prims.add(a, {constant})" in trace


@pytest.mark.parametrize("value", [
    3, 2.5, True, "mean", torch.float16, torch.device("cpu"), None, slice(1, None), Ellipsis, torch.Size([2, 3]),
    (1, 2), [3, 4], {"k": 5},
])
def test_functional_jit_accepts_the_documented_input_types(value):
    from thunder.functional import jit

    def f(x, v):
        return x * 2, v

    jf = jit(f)
    x = torch.randn(3)
    out, v = jf(x, value)
    assert torch.equal(out, x * 2)
    assert v == value or (v is value)


def test_functional_jit_nested_collections_of_tensors():
    from thunder.functional import jit

    def f(d, seq):
        return d["a"] * seq[0] + seq[1][0]

    d = {"a": torch.randn(2)}
    seq = [torch.randn(2), (torch.randn(2),)]
    assert torch.equal(jit(f)(d, seq), f(d, seq))


# ---------------------------------------------------------------------------------------------
# thunder.jit: captured tensors, control flow, errors
# ---------------------------------------------------------------------------------------------

G = torch.ones(3)


def uses_global(x):
    return x + G


def test_jit_captures_globals_and_sees_rebinding():
    global G
    jf = thunder.jit(uses_global)
    x = torch.randn(3)
    assert torch.equal(jf(x), x + G)
    old = G
    try:
        G = torch.full((3,), 5.0)
        assert torch.equal(jf(x), x + 5)
        G.add_(1)  # in-place changes of the captured tensor are seen too
        assert torch.equal(jf(x), x + 6)
    finally:
        G = old
    assert "G" in str(thunder.last_prologue_traces(jf)[-1])


def test_jit_captures_closures():
    scale = torch.tensor([2.0, 3.0])

    def f(x):
        return x * scale

    jf = thunder.jit(f)
    x = torch.randn(2)
    assert torch.equal(jf(x), x * scale)
    scale.mul_(10)
    assert torch.equal(jf(x), x * scale)


@pytest.mark.parametrize("use", ["detach", "no_grad"])
def test_a_captured_tensor_with_a_history_that_no_gradient_reaches(use):
    """PyTorch Geometric's SGConv(cached=True) keeps ``x``'s propagation (with its history) and reads it detached on
    later calls. The Function's node once had an edge into that history, which a second backward reached after the
    first had freed it."""
    x = torch.randn(3, requires_grad=True)
    cache = x * 2

    def f(y):
        if use == "detach":
            return (cache.detach() * y).sum()
        with torch.no_grad():
            c = cache * 1
        return (c * y).sum()

    jf = thunder.jit(f)
    for _ in range(3):
        grads = []
        for fn in (f, jf):
            y = torch.randn(3, generator=torch.Generator().manual_seed(0), requires_grad=True)
            fn(y).backward()
            grads.append(y.grad)
        assert torch.equal(*grads) and x.grad is None


def test_python_control_flow_on_shapes_is_specialized():
    def f(x):
        if x.shape[0] > 2:
            return x * 2
        n = x.size(-1) // 2
        return x[..., :n].sum(-1)

    jf = thunder.jit(f)
    a, b = torch.randn(4, 6), torch.randn(2, 6)
    assert torch.equal(jf(a), f(a))
    assert torch.equal(jf(b), f(b))
    assert thunder.cache_misses(jf) == 2
    assert torch.equal(jf(a), f(a)) and thunder.cache_hits(jf) == 1


@pytest.mark.parametrize("fn,op", [
    (lambda x: x * 2 if x.sum() > 0 else x, "Tensor.__bool__"),
    (lambda x: x * x.sum().item(), "Tensor.item()"),
    (lambda x: x[: int(x.max())], "int(tensor)"),
    (lambda x: x.tolist(), "Tensor.tolist()"),
])
def test_control_flow_on_tensor_values_raises_naming_the_operation(fn, op):
    """Values of a tensor that requires grad (of tensor arguments that do not, thunder specializes on: see
    tests/test_value_guards.py)."""
    with pytest.raises(DataDependentError, match=op.replace("(", r"\(").replace(")", r"\)")):
        thunder.jit(fn)(torch.randn(4, requires_grad=True))


def test_untraceable_op_raises_not_implemented_naming_it():
    with pytest.raises(NotImplementedError, match="histogramdd"):  # no meta kernel, not even a fake one
        thunder.jit(lambda x: torch.histogramdd(x, bins=3))(torch.randn(4, 2))


def test_a_custom_operator_without_a_meta_kernel_is_refused_by_its_name():
    """A ``torch.library`` operator called as ``torch.ops.ns.op`` (not an overload) was named by pybind11's
    qualified name of its function record."""
    lib = torch.library.Library("thunder_test_no_meta", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    with pytest.raises(NotImplementedError, match=r"thunder cannot trace torch\.ops\.thunder_test_no_meta\.twice: "
                                                  "torch has no meta kernel"):
        thunder.jit(lambda x: torch.ops.thunder_test_no_meta.twice(x).exp())(torch.randn(3))


# ---------------------------------------------------------------------------------------------
# In-place operations
# ---------------------------------------------------------------------------------------------


def test_inplace_on_intermediates_is_functionalized():
    def f(x):
        y = x * 2
        y.add_(1)
        y[0] = 0.0
        y.mul_(3).relu_()
        return y

    jf = thunder.jit(f)
    x = torch.randn(4, 3)
    assert torch.equal(jf(x), f(x))
    trace = thunder.last_traces(jf)[-1]
    check_trace(trace)
    assert "add_(" not in str(trace)


def test_inplace_on_inputs_reaches_the_caller():
    def f(x, y):
        x.add_(y)
        return x * 2

    jf = thunder.jit(f)
    x1, y = torch.randn(3), torch.randn(3)
    x2 = x1.clone()
    out = jf(x1, y)
    expected = f(x2, y)
    assert torch.equal(out, expected) and torch.equal(x1, x2)
    out = jf(x1, y)  # cache hit: updates again
    assert torch.equal(out, f(x2, y)) and torch.equal(x1, x2)


@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_running_stats_like_eager(train):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    ref = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    ref.load_state_dict(m.state_dict())
    m.train(train)
    ref.train(train)
    jm = thunder.jit(m)
    for _ in range(3):
        x = torch.randn(2, 3, 6, 6)
        with torch.no_grad():
            assert torch.equal(jm(x), ref(x))
    for (n, a), b in zip(ref.named_buffers(), m.buffers()):
        assert torch.equal(a, b), n


def test_inplace_update_of_a_view_updates_its_base():
    def f(x):
        y = x * 1
        z = y[0]
        z.add_(1)
        return y, z

    x = torch.randn(2, 2)
    for a, e in zip(thunder.jit(f)(x), f(x)):
        assert torch.equal(a, e)


# ---------------------------------------------------------------------------------------------
# Caching and prologues
# ---------------------------------------------------------------------------------------------


def test_cache_option_strings_and_enum():
    assert thunder.cache_option(thunder.jit(foo)) is thunder.CACHE_OPTIONS.CONSTANT_VALUES
    for opt in ("no caching", "same input", "constant values", "symbolic values"):
        assert thunder.cache_option(thunder.jit(foo, cache=opt)).value == opt
    with pytest.raises(ValueError, match="cache option"):
        thunder.jit(foo, cache="sometimes")


def test_constant_values_recompile_for_new_numbers():
    def f(x, n):
        return x * n

    jf = thunder.jit(f)
    x = torch.randn(3)
    for n in (2, 3, 2, 3):
        assert torch.equal(jf(x, n), x * n)
    assert (thunder.cache_misses(jf), thunder.cache_hits(jf)) == (2, 2)
    assert "check_literal(n, " in str(thunder.last_prologue_traces(jf)[-1])


def test_symbolic_values_do_not_recompile_for_new_numbers():
    def f(x, n):
        return x * n + n

    jf = thunder.jit(f, cache="symbolic values")
    x = torch.randn(3)
    for n in (2, 3, 7):
        assert torch.equal(jf(x, n), x * n + n)
    assert thunder.cache_misses(jf) == 1 and thunder.cache_hits(jf) == 2
    trace = str(thunder.last_traces(jf)[-1])
    assert "def computation(x, n):" in trace


def test_symbolic_values_specialize_when_used_for_control_flow():
    def f(x, n):
        return x * 2 if n > 2 else x * 3

    jf = thunder.jit(f, cache="symbolic values")
    x = torch.randn(3)
    assert torch.equal(jf(x, 5), x * 2) and torch.equal(jf(x, 1), x * 3)
    assert thunder.cache_misses(jf) == 2


def test_no_caching_retraces_every_call():
    jf = thunder.jit(foo, cache="no caching")
    a = torch.randn(2)
    for _ in range(3):
        jf(a, a)
    assert thunder.cache_misses(jf) == 3 and thunder.cache_hits(jf) == 0


def test_same_input_skips_checks():
    jf = thunder.jit(foo, cache="same input")
    a = torch.randn(2)
    jf(a, a)
    jf(a, a)
    assert thunder.cache_hits(jf) == 1
    assert "check_tensor" not in str(thunder.last_prologue_traces(jf)[-1])


def test_statements_are_symbols_of_the_ir():
    """Traces' statements are recognized by identity; each check prints as the python executor's function."""
    from thunder.core import statements
    from thunder.executors import pythonex

    for sym in statements.CHECKS:
        assert callable(getattr(pythonex, sym.name)), sym.name
    jf = thunder.jit(foo)
    a = torch.randn(2)
    jf(a, a)
    prologue = thunder.last_prologue_traces(jf)[-1]
    assert prologue.bound_symbols[0].sym is statements.check_len
    assert prologue.bound_symbols[-1].sym is statements.python_return
    computation = thunder.last_traces(jf)[-1].bound_symbols
    assert [b.sym for b in computation[-2:]] == [statements.python_del, statements.python_return]


@pytest.mark.parametrize("change", ["shape", "dtype", "requires_grad", "grad_mode", "default_dtype", "autocast"])
def test_prologue_checks_metadata_and_global_state(change):
    def f(x):
        return x * 2 + torch.ones(1)

    jf = thunder.jit(f)
    x = torch.randn(3)
    jf(x)
    misses = thunder.cache_misses(jf)
    if change == "shape":
        out = jf(torch.randn(4))
    elif change == "dtype":
        out = jf(torch.randn(3, dtype=torch.float64))
    elif change == "requires_grad":
        out = jf(torch.randn(3, requires_grad=True))
    elif change == "grad_mode":
        with torch.no_grad():
            out = jf(x)
    elif change == "default_dtype":
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            out = jf(x)
            assert out.dtype is torch.float64  # torch.ones follows the default dtype
        finally:
            torch.set_default_dtype(old)
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = jf(x)
    assert thunder.cache_misses(jf) == misses + 1
    jf(x)
    assert thunder.cache_misses(jf) == misses + 1  # the first specialization is still cached


def test_module_train_eval_gives_new_cached_trace():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        m.eval()
        assert torch.equal(jm(x), m(x))
        m.train()
        torch.manual_seed(0)
        a = jm(x)
        torch.manual_seed(0)
        assert torch.equal(a, m(x))
        m.eval()
        assert torch.equal(jm(x), m(x))
    assert thunder.cache_misses(jm) == 2 and thunder.cache_hits(jm) == 1
    assert "check_training" in str(thunder.last_prologue_traces(jm)[-1])


# ---------------------------------------------------------------------------------------------
# Query API
# ---------------------------------------------------------------------------------------------


def test_queries_reject_functions_that_are_not_jitted():
    for query in (thunder.compile_data, thunder.compile_stats, thunder.last_traces, thunder.cache_hits,
                  thunder.cache_option, thunder.list_transforms):
        with pytest.raises(TypeError, match="not a thunder-jitted"):
            query(foo)


def test_queries_before_first_call():
    jf = thunder.jit(foo)
    for query in (thunder.last_traces, thunder.last_backward_traces, thunder.last_prologue_traces,
                  thunder.last_interpreted_instructions, thunder.last_interpreter_log):
        with pytest.raises(TypeError, match="after the jitted function has been called"):
            query(jf)
    assert thunder.cache_hits(jf) == 0 and thunder.cache_misses(jf) == 0


def test_compile_data_stats_and_transforms():
    jf = thunder.jit(foo, executors=["torch"], my_option=1)
    a = torch.randn(2)
    jf(a, a)
    cd = thunder.compile_data(jf)
    assert cd.fn is foo and [e.name for e in cd.executors][0] == "torch"
    assert thunder.compile_stats(jf).calls == 1
    assert thunder.list_transforms(jf) == []
    assert len(thunder.last_prologue_traces(jf)) == 1


def test_last_compile_options_prints(capsys):
    jf = thunder.jit(foo, my_option=1)
    thunder.last_compile_options(jf)
    out = capsys.readouterr().out
    assert "my_option" in out and "Unused" in out


def helper(x):
    y = x * 2
    return y + 1


def test_last_interpreted_instructions_and_log():
    def f(x):
        return helper(x).sum()

    jf = thunder.jit(f)
    jf(torch.randn(3))
    instructions = thunder.last_interpreted_instructions(jf)
    assert instructions and all(isinstance(i, dis.Instruction) for i in instructions)
    names = {i.opname for i in instructions}
    assert "RETURN_VALUE" in names and any("BINARY_OP" == n or n.startswith("CALL") for n in names)
    log = thunder.last_interpreter_log(jf)
    calls = [str(e) for e in log if not isinstance(e, dis.Instruction)]
    assert any("helper" in c for c in calls)
    assert len(log) > len(instructions)
    # no new instructions on a cache hit
    jf(torch.randn(3))
    assert thunder.last_interpreted_instructions(jf) == instructions


# ---------------------------------------------------------------------------------------------
# ThunderModule
# ---------------------------------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net_b = nn.Module()
        self.net_b.linear = nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        return self.net_b.linear(x) * self.scale


def test_thunder_module_shares_parameters_both_ways():
    m = Net()
    jm = thunder.jit(m)
    assert isinstance(jm, thunder.ThunderModule) and isinstance(jm, nn.Module)
    x = torch.randn(2, 4)
    assert torch.equal(jm(x), m(x))
    with torch.no_grad():
        m.net_b.linear.weight.mul_(2)  # the original changes: the jitted sees it
    assert torch.equal(jm(x), m(x))
    with torch.no_grad():
        jm.get_parameter("net_b.linear.bias").add_(1)  # the jitted's parameter is the original's
    assert torch.equal(m.net_b.linear.bias, jm.get_parameter("net_b.linear.bias"))
    assert torch.equal(jm(x), m(x))
    assert [n for n, _ in jm.named_parameters()] == [n for n, _ in m.named_parameters()]
    assert [n for n, _ in jm.named_buffers()] == ["scale"]
    assert jm.get_buffer("scale") is m.scale
    assert jm.get_submodule("net_b.linear") is m.net_b.linear
    assert list(jm.parameters())[0] is m.net_b.linear.weight
    assert list(jm.state_dict()) == list(m.state_dict())


def test_thunder_module_errors_match_nn_module():
    m = Net()
    jm = thunder.jit(m)
    for query, name in ((lambda t, n: t.get_parameter(n), "net_b.nope"), (lambda t, n: t.get_buffer(n), "nope"),
                        (lambda t, n: t.get_submodule(n), "net_b.zzz"), (lambda t, n: t.get_parameter(n), "scale")):
        with pytest.raises(AttributeError) as theirs:
            query(m, name)
        with pytest.raises(AttributeError) as ours:
            query(jm, name)
        assert str(ours.value) == str(theirs.value)


def test_thunder_module_load_state_dict():
    m, other = Net(), Net()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    jm(x)
    jm.load_state_dict(other.state_dict())
    assert torch.equal(jm(x), other(x))
    with pytest.raises(RuntimeError) as ours:
        jm.load_state_dict({"bogus": torch.zeros(1)})
    with pytest.raises(RuntimeError) as theirs:
        m.load_state_dict({"bogus": torch.zeros(1)})
    assert str(ours.value) == str(theirs.value)


def test_no_sync_is_a_noop_context_manager():
    m = Net()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    with jm.no_sync():
        jm(x).sum().backward()
    g = m.net_b.linear.weight.grad.clone()
    jm(x).sum().backward()
    torch.testing.assert_close(m.net_b.linear.weight.grad, 2 * g)


def test_dataclass_dict_and_namedtuple_outputs():
    @dataclasses.dataclass
    class Out:
        logits: torch.Tensor
        aux: dict

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x, *, scale=1.0):
            y = self.l(x) * scale
            return Out(y, {"mean": y.mean(), "n": x.shape[0]})

    m = M()
    jm = thunder.jit(m)
    x = torch.randn(2, 3)
    out = jm(x, scale=2.0)
    ref = m(x, scale=2.0)
    assert isinstance(out, Out) and torch.equal(out.logits, ref.logits)
    assert torch.equal(out.aux["mean"], ref.aux["mean"]) and out.aux["n"] == 2
    out.logits.sum().backward()
    assert m.l.weight.grad is not None


def test_thunder_module_attributes_reach_the_original_module():
    m = Net()
    m.temperature = 0.5
    jm = thunder.jit(m)
    assert jm.temperature == 0.5 and jm.net_b is m.net_b and jm.get_submodule("net_b.linear").in_features == 4
    assert thunder.jit(nn.Linear(3, 5)).out_features == 5
    jm.temperature = 2.0  # writes reach the original too
    assert m.temperature == 2.0 and "temperature" not in jm.__dict__
    assert jm.extra_repr() == m.extra_repr() and "Linear(in_features=4, out_features=3" in repr(jm)
    jm.eval()
    assert not m.training and not jm.training
    m.train()
    assert jm.training
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        jm.nope
    del jm.temperature
    assert not hasattr(m, "temperature")


def test_thunder_module_deepcopy_is_independent():
    import copy

    m = Net()
    jm = thunder.jit(m, cache_limit=7)
    x = torch.randn(2, 4)
    jm(x)
    jc = copy.deepcopy(jm)
    assert isinstance(jc, thunder.ThunderModule) and jc._model is not m
    assert thunder.compile_data(jc).cache_limit == 7 and thunder.cache_misses(jc) == 0
    assert torch.equal(jc(x), jm(x))
    with torch.no_grad():
        jc.get_parameter("net_b.linear.weight").mul_(2)
    assert torch.equal(jc(x), jc._model(x)) and torch.equal(jm(x), m(x)) and not torch.equal(jc(x), jm(x))


def test_thunder_module_pickles_as_its_module_and_options():
    import pickle

    m = Net()
    jm = thunder.jit(m, cache="symbolic values")
    x = torch.randn(2, 4)
    jm(x)
    loaded = pickle.loads(pickle.dumps(jm))
    assert isinstance(loaded, thunder.ThunderModule)
    assert thunder.cache_option(loaded) is thunder.CACHE_OPTIONS.SYMBOLIC_VALUES
    assert torch.equal(loaded(x), jm(x))


def test_thunder_module_pickling_refuses_clearly_what_cannot_be_loaded_again():
    import pickle
    from thunder.extend import OperatorExecutor

    jm = thunder.jit(Net(), executors=[OperatorExecutor("not_registered"), "torch"])
    with pytest.raises(TypeError, match="Pickle the original module"):
        pickle.dumps(jm)
    jm = thunder.jit(Net(), my_option=lambda: None)
    with pytest.raises(TypeError, match="Pickle the original module"):
        pickle.dumps(jm)


async def _coroutine(x):
    return x


def _generator(x):
    yield x


async def _async_generator(x):
    yield x


class _GeneratorModule(nn.Module):
    def forward(self, x):
        yield x


@pytest.mark.parametrize("target, match", [
    (nn.Linear, "class Linear"), (42, "not callable"), (_generator, "generator function"),
    (_coroutine, "async function"), (_async_generator, "async generator"), (_GeneratorModule(), "generator function"),
], ids=["class", "not callable", "generator", "coroutine", "async generator", "module with a generator forward"])
def test_jit_refuses_what_it_cannot_compile(target, match):
    from thunder.functional import jit as functional_jit

    with pytest.raises(TypeError, match=match):
        thunder.jit(target)
    if not isinstance(target, nn.Module):
        with pytest.raises(TypeError, match=match):
            functional_jit(target)


def test_jitted_function_called_inside_another_jitted_function():
    inner = thunder.jit(lambda x, w: (x @ w).tanh())
    layer = nn.Linear(3, 3)
    jlayer = thunder.jit(layer)

    def outer(x, w):
        return inner(x, w).sum(0) * 2 + jlayer(x).sum()

    jouter = thunder.jit(outer)
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    out = jouter(x, w)
    expected = (x @ w).tanh().sum(0) * 2 + layer(x).sum()
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.sum(), (x, w, layer.weight))
    expected_grads = torch.autograd.grad(expected.sum(), (x, w, layer.weight))
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e)
    assert "tanh" in str(thunder.last_traces(jouter)[-1])  # the inner program is part of the outer trace
    assert thunder.cache_misses(inner) == 0
    with torch.no_grad():  # the inner module's parameters are fetched on each call, not baked in
        layer.weight.mul_(2)
        torch.testing.assert_close(jouter(x, w), (x @ w).tanh().sum(0) * 2 + layer(x).sum())
        layer.weight = nn.Parameter(torch.randn(3, 3))
        torch.testing.assert_close(jouter(x, w), (x @ w).tanh().sum(0) * 2 + layer(x).sum())


# ---------------------------------------------------------------------------------------------
# Executors
# ---------------------------------------------------------------------------------------------


def test_executors_by_name_and_unknown_name():
    jf = thunder.jit(foo, executors=["torch"])
    a = torch.randn(2)
    assert torch.equal(jf(a, a), a + a)
    with pytest.raises(ValueError, match="Unknown executor"):
        thunder.jit(foo, executors=["nope"])


def test_custom_operator_executor_claims_a_symbol():
    from thunder.extend import OperatorExecutor, register_executor
    import thunder.torch as ltorch

    ex = OperatorExecutor("my_executor")
    register_executor(ex)
    calls = []

    def my_add(a, b, *, alpha=None):
        calls.append(1)
        return torch.add(a, b)

    op = ex.register_operator("my_add", fn=my_add, meta=lambda a, b, *, alpha=None: None)
    ex.register_implementation(ltorch.add, op, checker=lambda a, b, *, alpha=None: alpha is None)
    jf = thunder.jit(foo, executors=[ex, "torch"])
    a, b = torch.randn(2), torch.randn(2)
    assert torch.equal(jf(a, b), a + b)
    assert calls == [1]
    trace = str(thunder.last_traces(jf)[-1])
    assert "t0 = my_add(a, b, alpha=None)" in trace and "# t0 = ltorch.add(a, b, alpha=None)" in trace


def test_cache_hit_does_not_retrace():
    jf = thunder.jit(foo)
    a = torch.randn(2)
    jf(a, a)
    traces = thunder.last_traces(jf)
    jf(a, a)
    assert thunder.last_traces(jf) is traces


def test_fusion_executor_claims_regions():
    from thunder.extend import FusionExecutor
    from thunder.executors.passes import transform_for_execution
    from thunder.executors.torchex import ex as torch_ex

    class ElementwiseFusion(FusionExecutor):
        """A toy fusion executor: fuses elementwise primitives, runs a region as one Python function."""

        fusion_name = "toyFusion"

        def can_fuse(self, bsym):
            return bsym.sym.module == "prims" and bsym.sym.name in ("add", "mul", "exp", "tanh", "sub", "neg", "sum",
                                                                    "broadcast_in_dim")

        def compile_region(self, region):
            runs.append(region)
            return transform_for_execution(region, (torch_ex,)).python_callable()

    runs = []
    fex = ElementwiseFusion("toy")

    def f(x, w):
        y = (x * 2 + 1).tanh()
        z = y @ w
        return z.exp() - y.sum()

    jf = thunder.jit(f, executors=[fex, "torch"])
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(jf(x, w), f(x, w))
    trace = str(thunder.last_traces(jf)[-1])
    assert "[t2] = toyFusion0(x)" in trace or "toyFusion0(x)" in trace
    assert "# t0 = prims.mul(x, 2" in trace  # the fused primitives print below the fusion
    assert "torch.matmul(" in trace
    assert len(runs) == 2  # two regions: before and after the matmul
    # by data flow, y.sum() (after the matmul in the program) joins the region computing y
    assert any(b.sym.name == "sum" for b in runs[0].bound_symbols)
    check_trace(thunder.last_traces(jf)[-1])


def test_transforms_are_applied_and_listed():
    from thunder.transforms.base import Transform
    from thunder.core.symbol import BoundSymbol
    import thunder.torch as ltorch

    class DoubleOutput(Transform):
        """Multiplies the program's (single tensor) output by 2, in inference and training alike."""

        def __init__(self):
            self.seen = []

        def transform_module(self, compile_data):
            self.seen.append("module")

        def transform_computation(self, trace, compile_data):
            from thunder.core.trace import tracectx
            from thunder.core.statements import python_return

            self.seen.append("computation")
            body = list(trace.bound_symbols)
            ret = body.pop()
            new = trace.from_trace(body)
            with tracectx(new):
                doubled = ltorch.mul(ret.args[0], 2)
                python_return(doubled)
            return new

        def transform_forward_backward(self, fwd, bwd, compile_data):
            self.seen.append("forward_backward")
            return fwd, bwd

    t = DoubleOutput()
    jf = thunder.jit(lambda x: x.sin(), transforms=[t])
    assert thunder.list_transforms(jf) == [t]
    x = torch.randn(3, requires_grad=True)
    out = jf(x)
    torch.testing.assert_close(out, 2 * x.sin())
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())
    with torch.no_grad():
        torch.testing.assert_close(jf(x), 2 * x.sin())
    assert t.seen == ["module", "computation", "forward_backward", "computation"]
    with pytest.raises(TypeError, match="Transform objects"):
        thunder.jit(foo, transforms=[object()])


@pytest.mark.parametrize("mode", ["allow", "warn", "error"])
def test_sharp_edges_option_for_tensors_outside_the_arguments(mode):
    from thunder.driver.frontend import ThunderSharpEdgeError
    import warnings

    jf = thunder.jit(uses_global, sharp_edges=mode)
    x = torch.randn(3)
    if mode == "error":
        with pytest.raises(ThunderSharpEdgeError, match="'G'"):
            jf(x)
        return
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert torch.equal(jf(x), x + G)
    assert any("Sharp edge" in str(m.message) for m in w) == (mode == "warn")


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last],
                         ids=str)
def test_contiguous_in_a_memory_format(memory_format):
    """``Tensor.contiguous`` takes its memory format by keyword only (the trace once passed it positionally)."""
    def f(x):
        return x.contiguous(memory_format=memory_format) + 1

    x = torch.randn(2, 3, 4, 5).transpose(1, 3)
    out, expected = thunder.jit(f)(x), f(x)
    assert torch.equal(out, expected) and out.stride() == expected.stride()


KEYWORD_SPELLINGS = {
    "torch.zeros(size=)": lambda x: torch.zeros(size=(2, 3)) + x,  # Hugging Face's BEiT
    "torch.ones(size=, dtype=)": lambda x: torch.ones(size=(2, 3), dtype=torch.float64) + x,
    "torch.empty(size=)": lambda x: torch.empty(size=(2, 3)).fill_(1) + x,
    "torch.rand(size=)": lambda x: torch.rand(size=(2, 3)) + x,
    "torch.randn(size=)": lambda x: torch.randn(size=(2, 3)) + x,
    "torch.randint(size=)": lambda x: torch.randint(0, 5, size=(2, 3)) + x,
    "Tensor.new_zeros(size=)": lambda x: x.new_zeros(size=(2, 3)) + x,
    "Tensor.new_empty(size=)": lambda x: x.new_empty(size=(2, 3)).fill_(0) + x,
    "Tensor.view(size=)": lambda x: x.view(size=(3, 2)),
    "Tensor.reshape(shape=)": lambda x: x.reshape(shape=(3, 2)),
    "Tensor.expand(size=)": lambda x: x[:1].expand(size=(4, 3)),
    "Tensor.permute(dims=)": lambda x: x.permute(dims=(1, 0)),
    "torch.zeros_like(input=)": lambda x: torch.zeros_like(input=x) + x,
    "torch.sum(input=, dim=)": lambda x: torch.sum(input=x, dim=0),
    "torch.mean(input=, dim=)": lambda x: torch.mean(input=x, dim=1),
    "F.softmax(input=, dim=)": lambda x: F.softmax(input=x, dim=-1),
    "torch.mul(input=, other=)": lambda x: torch.mul(input=x, other=x),
    "torch.add(input=, other=, alpha=)": lambda x: torch.add(input=x, other=x, alpha=2),
    "Tensor.add(other=)": lambda x: x.add(other=x),
    "torch.transpose(input=, dim0=, dim1=)": lambda x: torch.transpose(input=x, dim0=0, dim1=1),
    "torch.where(condition=, input=, other=)": lambda x: torch.where(condition=x > 0, input=x, other=-x),
}


@pytest.mark.parametrize("name", list(KEYWORD_SPELLINGS))
def test_torch_keyword_spellings(name):
    """Arguments passed by torch's keywords, where thunder's definitions take them by position or by other names."""
    f = KEYWORD_SPELLINGS[name]
    x = torch.randn(2, 3)
    torch.manual_seed(0)
    expected = f(x)
    torch.manual_seed(0)
    out = thunder.jit(f)(x)
    assert out.dtype == expected.dtype and torch.equal(out, expected)


_FUNC_TRANSFORMS = {
    "vmap": lambda x: torch.vmap(lambda row: row * 2 + row.sum())(x),
    "vmap_imported_before": lambda x: _imported_vmap(lambda row: row * 2 + row.sum())(x),
    "grad": lambda x: torch.func.grad(lambda r: r.sin().sum())(x),
    "vjp": lambda x: torch.func.vjp(torch.sin, x)[1](torch.ones_like(x))[0],
    "jvp": lambda x: torch.func.jvp(torch.sin, (x,), (torch.ones_like(x),))[1],
    "jacrev": lambda x: torch.func.jacrev(torch.sin)(x[0]),
    "jacfwd": lambda x: torch.func.jacfwd(torch.sin)(x[0]),
    "hessian": lambda x: torch.func.hessian(lambda r: r.sin().sum())(x[0]),
}
_imported_vmap = torch.func.vmap  # as a library imports it, before thunder does anything


def _forward_ad(x):
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        return fwAD.unpack_dual(fwAD.make_dual(x, torch.ones_like(x)).sin()).tangent


@pytest.mark.parametrize("name", list(_FUNC_TRANSFORMS) + ["forward_ad"])
def test_torch_func_transforms_of_traced_tensors_are_refused_with_a_clear_message(name):
    """torch.func's transforms act below torch's Python-level interception (Hugging Face's Falcon builds its mask with
    vmap): refused by name, where before ``grad`` and ``vjp`` blamed ``requires_grad_``, ``jvp`` raised torch's
    "invalid forward AD level", ``jacfwd`` an aten op; forward-mode AD gave a tangent of None (eager's: cos(x)). Outside
    a jitted function they are torch's own, and a jitted function is not traced inside one either."""
    fn = _FUNC_TRANSFORMS.get(name, _forward_ad)
    x = torch.randn(3, 4)
    expected = fn(x)
    assert isinstance(expected, torch.Tensor)
    match = "forward-mode automatic differentiation" if name == "forward_ad" else "does not support torch.func"
    with pytest.raises(NotImplementedError, match=match):
        thunder.jit(fn)(x)
    assert torch.equal(fn(x), expected)
    if name == "vmap":
        with pytest.raises(NotImplementedError, match="nor tracing a jitted function inside one"):
            torch.vmap(thunder.jit(lambda row: row * 2))(x)


class _ConvertsItselfInForward(torch.nn.Module):
    def __init__(self, convert):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.convert = convert

    def forward(self, x):
        return self.convert(self.lin)(x.double())


@pytest.mark.parametrize("convert", [lambda m: m.double(), lambda m: m.to(torch.float64)], ids=["double", "to"])
def test_converting_a_module_inside_the_program_is_refused_by_name(convert):
    """``module.to(dtype)`` / ``.double()`` in forward replaces the module's parameters, thunder's inputs: refused by
    name (before: "thunder cannot trace torch._has_compatible_shallow_copy_type: it returns a Python value")."""
    m = _ConvertsItselfInForward(convert)
    with pytest.raises(NotImplementedError, match=r"nn.Module.to \(or .float\(\), .double\(\).*Convert the module "
                                                  "before the jitted call"):
        thunder.jit(m)(torch.randn(2, 3))
    assert m.lin.weight.dtype == torch.float32
    assert m(torch.randn(2, 3)).dtype == torch.float64


class _Axis(__import__("enum").IntEnum):
    ROWS = 0
    COLS = 1


@pytest.mark.parametrize("case", ["numpy float64", "numpy sqrt", "IntEnum dim"])
def test_subclasses_of_python_numbers_in_the_program_run_from_the_trace(case):
    """``np.sqrt(d)`` is a NumPy float64, a subclass of float (HF's CTRL scales attention by it); its repr is
    ``np.float64(4.0)``, which the trace's code could not run (NameError: np). Such values are constants of the
    trace, as are IntEnum members."""
    np = pytest.importorskip("numpy")
    fn = {"numpy float64": lambda x: x * np.float64(2.5),
          "numpy sqrt": lambda x: x / np.sqrt(x.shape[-1]),
          "IntEnum dim": lambda x: x.sum(dim=_Axis.COLS) * _Axis.COLS}[case]
    x = torch.randn(3, 4)
    jfn = thunder.jit(fn)
    assert torch.equal(jfn(x), fn(x)) and torch.equal(jfn(x), fn(x))


@pytest.mark.parametrize("other", ["Rep", None, [1.0, 2.0, 3.0], (1, 2, 3), object()],
                         ids=["str", "None", "list", "tuple", "object"])
@pytest.mark.parametrize("op", ["__eq__", "__ne__", "__add__", "__radd__", "__lt__", "__mul__", "__rsub__", "__pow__",
                                "__and__", "__matmul__"])
def test_operators_with_operands_torch_does_not_take_return_not_implemented(op, other):
    """As torch's: Python then decides (``x == "Rep"`` is False, as Wan's video autoencoder asks; ``x + "a"`` raises)."""
    x = torch.randn(3)
    assert getattr(x, op)(other) is NotImplemented
    assert thunder.jit(lambda t: getattr(t, op)(other))(x) is NotImplemented


def test_comparing_a_tensor_with_a_string_is_false():
    def f(x, cache):
        return x * 2 if cache[0] == "Rep" else x + 1

    x = torch.randn(3)
    assert torch.equal(thunder.jit(f)(x, [x]), f(x, [x]))
    with pytest.raises(TypeError):
        thunder.jit(lambda t: t + "a")(x)


@pytest.mark.parametrize("collective", ["broadcast", "all_gather", "scatter"])
def test_unsupported_torch_distributed_collectives_inside_the_function_are_refused_clearly(collective):
    """No process group is needed to see it: thunder refuses while tracing, before torch.distributed is called (the
    supported ones are tested on 2 ranks in tests/test_program_collectives.py)."""
    import torch.distributed as dist

    def f(x):
        y = x * 2
        if collective == "broadcast":
            dist.broadcast(y, 0)
        elif collective == "all_gather":
            dist.all_gather([torch.empty(3), torch.empty(3)], y)
        else:
            dist.scatter(y, [y, y])
        return y

    with pytest.raises(NotImplementedError, match=rf"torch.distributed.{collective} inside the function"):
        thunder.jit(f)(torch.randn(3))


@pytest.mark.parametrize("make", ["transposed", "dtype", "sum"])
def test_torch_tensor_of_a_tensor_is_a_detached_copy(make):
    """As eager (which warns): diffusers' FIR resampling calls torch.tensor on a kernel it computed."""
    f = {"transposed": lambda x: torch.tensor(x.t()), "dtype": lambda x: torch.tensor(x, dtype=torch.float64) * 2,
         "sum": lambda x: torch.tensor(x).sum() + x.sum()}[make]
    x = torch.randn(3, 4, requires_grad=True)
    with pytest.warns(UserWarning, match="To copy construct from a tensor"):
        expected = f(x)
    with pytest.warns(UserWarning, match="To copy construct from a tensor"):
        actual = thunder.jit(f)(x)
    assert torch.equal(actual, expected) and actual.stride() == expected.stride()
    assert actual.dtype == expected.dtype and actual.requires_grad == expected.requires_grad


@pytest.mark.parametrize("op", ["reshape", "view", "view_as", "reshape_as"])
def test_a_view_to_the_same_shape_is_a_view_as_in_eager(op):
    """Eager's reshape/view to the shape a tensor has still makes a view, with the strides of size-one dims recomputed
    (a convolution then picks its kernel by them: diffusers' FIR resampling), and a node autograd sums the gradient
    of before it reaches the input (``x + f(x.reshape(x.shape))`` rounds as eager)."""
    def f(x):
        t = x.permute(0, 3, 1, 2)
        h = getattr(t, op)(t if op.endswith("_as") else t.shape)
        return h, t + (h + h.sin().pow(2))

    x = torch.randn(16, 10, 10, 1, requires_grad=True)
    expected = f(x)
    (expected[1].square().mean()).backward()
    grad, x.grad = x.grad, None
    actual = thunder.jit(f)(x)
    (actual[1].square().mean()).backward()
    assert actual[0].stride() == expected[0].stride() == (100, 100, 10, 1)
    assert torch.equal(actual[1], expected[1]) and torch.equal(x.grad, grad)


@pytest.mark.parametrize("fn", [
    lambda x: torch.div(8, 3),
    lambda x: torch.div(8, 3, rounding_mode="trunc"),
    lambda x: torch.div(8.0, 3, rounding_mode="floor"),
    lambda x: torch.mul(2, 3.5),
    lambda x: torch.add(True, 3, alpha=2),
    lambda x: torch.floor_divide(7, 2),
    lambda x: torch.true_divide(3, 2),
    lambda x: torch.mul(2j, 2),
    lambda x: x.double() * torch.div(8, 3),  # the float32 quotient, not Python's double one
    lambda x: x.view(x.size(0), torch.div(x.size(1), 4, rounding_mode="trunc"), 4),  # Longformer's chunks
    lambda x: isinstance(torch.sub(x.size(1), 1), torch.Tensor),
], ids=["div", "div_trunc", "div_floor", "mul", "add_alpha", "floor_divide", "true_divide", "complex", "float64",
        "view", "isinstance"])
def test_torch_arithmetic_of_numbers_is_a_tensor_as_in_eager(fn):
    x = torch.randn(2, 8)
    expected, actual = fn(x), thunder.jit(fn)(x)
    assert type(actual) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and torch.equal(actual, expected), (actual, expected)
    else:
        assert actual == expected


def test_a_torch_function_a_library_replaced_is_not_what_the_trace_calls(monkeypatch):
    """PyTorch Geometric replaces ``torch.index_select``, ``torch.select`` and ``torch.manual_seed`` with wrappers when
    imported (its index_select refuses a 0-dim input). A trace printed ``torch.index_select(...)``, looked up when it
    runs: the wrapper ran instead of the function thunder traced (the whole suite failed where PyG's tests ran first
    in the same process). The function thunder traced is passed to the trace by value."""
    original = torch.index_select  # (PyG's own, where a test imported it before: it calls torch's)
    fn = lambda x, i: original(x, 0, i) * 2  # noqa: E731
    x, i = torch.randn(3, 2), torch.tensor([0, 2])
    thunder.jit(fn)(x, i)  # thunder has seen torch's functions: the library is imported later

    def replaced(*args, **kwargs):
        raise AssertionError("the library's replacement ran")

    monkeypatch.setattr(torch, "index_select", replaced)
    jfn = thunder.jit(fn)
    assert torch.equal(jfn(x, i), fn(x, i))
    assert " = index_select(x, 0, i)" in str(thunder.last_traces(jfn)[-1])


@pytest.mark.parametrize("where", ["factory", "default device", "to"])
def test_cpu_with_an_index_is_the_cpu(where):
    # eager makes a tensor asked for on "cpu:0" on "cpu"; a trace that kept the index saw two devices and refused
    def fn(x):
        if where == "factory":
            return x * torch.ones(3, device="cpu:0") + torch.zeros(3)
        if where == "to":
            return x.to("cpu:0") + torch.arange(3.0)
        return x + torch.ones(3)

    x = torch.randn(3)
    with torch.device("cpu:0") if where == "default device" else contextlib.nullcontext():
        expected, actual = fn(x), thunder.jit(fn)(x)
    assert torch.equal(actual, expected) and actual.device == expected.device


class _CallsACompiledLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.compile(torch.nn.Linear(3, 3))
        self.scale = torch.compile(lambda t: t.sin() * 2)

    def forward(self, x):
        return self.scale(self.inner(x)).relu()


@pytest.mark.parametrize("wrap", [lambda m: m, torch.compile], ids=["calls-compiled", "compiled-module"])
def test_torch_compiled_code_inside_the_program_is_traced_as_its_python(wrap):
    """A torch.compile'd module or function the program calls runs as its Python while thunder traces (dynamo
    raised, tracing the proxies itself: an InternalTorchDynamoError); values and gradients are eager's."""
    torch.manual_seed(0)
    model = _CallsACompiledLayer()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3)
    out = thunder.jit(wrap(model))(x)
    with torch.compiler.set_stance("force_eager"):  # (eager's values without inductor's compile time)
        expected = reference(x)
    out.sum().backward()
    expected.sum().backward()
    assert torch.equal(out, expected) and torch.equal(model.inner.weight.grad, reference.inner.weight.grad)


@pytest.mark.parametrize("fn", [lambda x: torch.cat([x, x * 2], axis=1), lambda x: torch.sum(x, axis=1, keepdims=True),
                                lambda x: x.mean(axis=0), lambda x: torch.softmax(x, axis=-1),
                                lambda x: torch.max(x, axis=1).values, lambda x: torch.stack([x, x], axis=2)],
                         ids=["cat", "sum", "mean-method", "softmax", "max", "stack"])
def test_numpys_argument_names_are_torchs(fn):
    """torch's argument parser takes NumPy's names for its builtins' dim, keepdim, input and other (``axis=``,
    ``keepdims=``: Hugging Face's Funnel calls ``torch.cat(..., axis=...)``); a TypeError before."""
    x = torch.randn(2, 3)
    assert torch.equal(thunder.jit(fn)(x), fn(x))
