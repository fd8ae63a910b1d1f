"""Primitives declared outside thunder/core/prims.py, with their meta function, torch implementation and
gradient rule in one place (``thunder.extend.declare_primitive``)."""
import os
import re
import subprocess
import sys

import pytest
import torch

import thunder
from thunder.core import prims
from thunder.core.trace_checker import check_trace
from thunder.extend import declare_primitive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rows(a, n):
    """Meta: ``a`` with ``n`` rows."""
    return prims.new_tensor((n, *a.shape[1:]), a.dtype, a.device, prims.requires_grad(a))


def _sum_halves_impl(a):
    first, second = a.chunk(2)
    return first + second


# On a single process, all_gather and reduce_scatter over two ranks are this pair: each is the other's gradient.
def _repeat2_grad(a):
    return repeat2(a), lambda g: (sum_halves(g),)


def _sum_halves_grad(a):
    return sum_halves(a), lambda g: (repeat2(g),)


repeat2 = declare_primitive("repeat2", lambda a: _rows(a, 2 * a.shape[0]), torch_impl=lambda a: torch.cat([a, a]),
                            grad=_repeat2_grad)
sum_halves = declare_primitive("sum_halves", lambda a: _rows(a, a.shape[0] // 2), torch_impl=_sum_halves_impl,
                               grad=_sum_halves_grad)
no_impl = declare_primitive("no_impl", lambda a: _rows(a, a.shape[0]))
no_grad_rule = declare_primitive("no_grad_rule", lambda a: _rows(a, a.shape[0]), torch_impl=torch.clone)


def _program(rep, halve):
    def f(x, w):
        return halve(rep(x * w).tanh() * w.repeat(2, 1)).sum(0)

    return f


def _inputs():
    torch.manual_seed(0)
    return torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)


def test_declared_primitives_run_forward_and_backward_as_eager():
    jf = thunder.jit(_program(repeat2, sum_halves))
    eager = _program(lambda a: torch.cat([a, a]), _sum_halves_impl)
    x, w = _inputs()
    ex, ew = (t.detach().clone().requires_grad_() for t in (x, w))
    out, expected = jf(x, w), eager(ex, ew)
    assert torch.equal(out, expected)
    out.backward(torch.ones_like(out))
    expected.backward(torch.ones_like(expected))
    assert torch.equal(x.grad, ex.grad) and torch.equal(w.grad, ew.grad)


def test_declared_primitives_print_in_traces():
    jf = thunder.jit(_program(repeat2, sum_halves))
    jf(*_inputs())
    fwd, bwd = thunder.last_traces(jf)[-1], thunder.last_backward_traces(jf)[-1]
    check_trace(fwd)
    check_trace(bwd)
    # The torch implementations run (a lambda under the primitive's name), each with its primitive below it.
    for trace in (fwd, bwd):  # each one's gradient is the other
        assert re.search(r"(t\d+) = repeat2\((t\d+)\)  # .*\n +# \1 = prims\.repeat2\(\2\)", str(trace))
        assert re.search(r"(t\d+) = _sum_halves_impl\((t\d+)\)  # .*\n +# \1 = prims\.sum_halves\(\2\)", str(trace))


@pytest.mark.parametrize("prim, grad_prim, eager", [
    (repeat2, "sum_halves", lambda a: torch.cat([a, a])),
    (sum_halves, "repeat2", _sum_halves_impl),
], ids=["repeat2", "sum_halves"])
def test_gradient_of_each_primitive_is_the_other(prim, grad_prim, eager):
    jf = thunder.jit(lambda a: prim(a))
    a = torch.randn(4, 3, requires_grad=True)
    ea = a.detach().clone().requires_grad_()
    out, expected = jf(a), eager(ea)
    g = torch.randn_like(out)
    (grad,), (expected_grad,) = torch.autograd.grad(out, a, g), torch.autograd.grad(expected, ea, g)
    assert torch.equal(out, expected) and torch.equal(grad, expected_grad)
    assert f"= prims.{grad_prim}(" in str(thunder.last_backward_traces(jf)[-1])


def test_primitive_without_implementation_names_itself():
    jf = thunder.jit(lambda a: no_impl(a * 2))
    with pytest.raises(NotImplementedError, match=r"No executor can run prims\.no_impl.*declare_primitive"):
        jf(torch.randn(2, 2))


def test_primitive_without_gradient_rule_names_itself():
    jf = thunder.jit(lambda a: no_grad_rule(a))
    assert torch.equal(jf(x := torch.randn(2, 2)), x)
    with pytest.raises(NotImplementedError, match=r"no gradient rule for prims\.no_grad_rule"):
        jf(torch.randn(2, 2, requires_grad=True))


def test_primitive_names_are_unique():
    with pytest.raises(ValueError, match="'add' already exists"):
        declare_primitive("add", lambda a, b: a)
    with pytest.raises(ValueError, match="'repeat2' already exists"):
        declare_primitive("repeat2", lambda a: a)


def test_torch_executor_imports_after_primitives_are_declared():
    code = """if True:
        import sys
        import torch
        import thunder
        from thunder.core import prims
        from thunder.extend import declare_primitive

        meta = lambda a: prims.new_tensor(a.shape, a.dtype, a.device)
        declare_primitive("declared_first", meta)
        assert "thunder.executors.torchex" not in sys.modules
        import thunder.executors.torchex  # claims the core primitives only

        double = declare_primitive("double", meta, torch_impl=lambda a: a * 2)
        assert torch.equal(thunder.jit(lambda a: double(a) + 1)(torch.ones(2)), torch.full((2,), 3.0))
    """
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
