"""The Transform interface and the compile pipeline's phase order (thunder/transforms/base.py,
thunder/driver/pipeline.py): what each hook sees and may do, checked on small programs against eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thunder
import thunder.torch as ltorch
from thunder.core.trace import tracectx
from thunder.transforms.base import Transform


class Recorder(Transform):
    """Records which hooks ran, in order, with what they were told."""

    def __init__(self):
        self.calls = []

    def transform_module(self, compile_data):
        self.calls.append(("module", compile_data.thunder_module))

    def transform_computation(self, trace, compilation):
        self.calls.append(("computation", None))
        return trace

    def transform_forward_backward(self, forward, backward, compilation):
        names = [compilation.parameter_name(p) for p in compilation.grad_inputs]
        self.calls.append(("forward_backward", names))
        return forward, backward

    def transform_executed(self, trace, compilation, kind):
        self.calls.append(("executed", kind))
        return trace


def test_hooks_run_in_the_pipelines_order_and_see_the_module():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    t = Recorder()
    jm = thunder.jit(model, transforms=[t])
    x = torch.randn(3, 4)
    jm(x).sum().backward()
    assert t.calls[0] == ("module", jm)
    # the backward's outputs are the gradients of the forward's inputs, named by their parameters
    assert t.calls[1:] == [("computation", None), ("forward_backward", [None, "0.weight", "0.bias", "2.weight", "2.bias"]),
                           ("executed", "forward"), ("executed", "backward")]
    with torch.no_grad():
        jm(x)
    assert t.calls[-2:] == [("computation", None), ("executed", "computation")]


class ScaleGradsByForwardValue(Transform):
    """The backward reads a forward value autodiff did not save: each gradient is multiplied by the (detached)
    sum of the program's output. The values saved for the backward are chosen after this hook, so it works."""

    def transform_forward_backward(self, forward, backward, compilation):
        ret = forward.bound_symbols[-1]
        out = ret.args[0][0]["flat_output"][0]
        body, bret = list(backward.bound_symbols[:-1]), backward.bound_symbols[-1]
        new = backward.from_trace(body)
        with tracectx(new):
            s = ltorch.sum(out)
            grads = tuple(None if g is None else ltorch.mul(g, s) for g in bret.args[0])
            new.bound_symbols.append(bret.replace(args=(grads,)))
        return forward, new


def test_a_backward_transform_may_read_any_forward_value():
    w = torch.randn(4, requires_grad=True)
    x = torch.randn(4)

    def f(w, x):
        return (w * x).tanh()

    jf = thunder.jit(f, transforms=[ScaleGradsByForwardValue()])
    out = jf(w, x)
    out.sum().backward()
    expected = torch.autograd.grad(f(w, x).sum(), w)[0] * f(w, x).detach().sum()
    torch.testing.assert_close(w.grad, expected)
    ret = thunder.last_traces(jf)[-1].bound_symbols[-1]  # the forward's return: (outputs, (saved tensors, others))
    assert ret.args[0][0]["flat_output"][0].name in [p.name for p in ret.args[0][1][0]]


class Sync:
    def __init__(self):
        self.enabled = True


class SpecializeOnState(Transform):
    """Multiplies the output by 2 or 3 depending on Python state the prologue checks (as no_sync is)."""

    def __init__(self):
        self.state = Sync()

    def transform_computation(self, trace, compilation):
        factor = 2 if compilation.read_state(self.state, "enabled") else 3
        body = list(trace.bound_symbols)
        ret = body.pop()
        new = trace.from_trace(body)
        with tracectx(new):
            new.bound_symbols.append(ret.replace(args=(ltorch.mul(ret.args[0], factor),)))
        return new


def test_state_read_by_a_transform_is_checked_by_the_prologue():
    t = SpecializeOnState()
    jf = thunder.jit(lambda x: x + 1, transforms=[t])
    x = torch.randn(3)
    assert torch.equal(jf(x), (x + 1) * 2)
    t.state.enabled = False
    assert torch.equal(jf(x), (x + 1) * 3)
    t.state.enabled = True
    assert torch.equal(jf(x), (x + 1) * 2)
    assert (thunder.cache_misses(jf), thunder.cache_hits(jf)) == (2, 1)
    assert "check_attrs" in str(thunder.last_prologue_traces(jf)[-1])


def test_adding_a_transform_to_a_jitted_module_recompiles():
    model = nn.Linear(3, 3)
    jm = thunder.jit(model)
    x = torch.randn(2, 3)
    assert torch.equal(jm(x), model(x))
    t = SpecializeOnState()
    thunder.add_transform(jm, t)
    assert thunder.list_transforms(jm) == [t]
    assert torch.equal(jm(x), model(x) * 2)
    assert thunder.cache_misses(jm) == 2
    with pytest.raises(TypeError, match="Transform objects"):
        thunder.add_transform(jm, object())


class TwiceTheWeights(Transform):
    """The program sees each parameter doubled (as FSDP would see a gathered shard): gradients follow."""

    def transform_module_tensors(self, tensors, compilation):
        return [ltorch.mul(proxy, 2) if source.collection == "_parameters" else proxy for proxy, source in tensors]


def test_module_tensors_may_be_replaced_while_tracing():
    model = nn.Linear(3, 2)
    jm = thunder.jit(model, transforms=[TwiceTheWeights()])
    x = torch.randn(4, 3)
    out = jm(x)
    expected = torch.nn.functional.linear(x, 2 * model.weight, 2 * model.bias)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    ref_w, ref_b = torch.autograd.grad(expected.sum(), (model.weight, model.bias))
    torch.testing.assert_close(model.weight.grad, ref_w)
    torch.testing.assert_close(model.bias.grad, ref_b)


class ResetStatistics(Transform):
    """Before each call the buffers become ones (as ddp's broadcast gives them rank 0's values)."""

    def update_module_tensors(self, tensors, compilation):
        return [(proxy, ltorch.ones_like(proxy)) for proxy, source in tensors
                if source.collection == "_buffers" and proxy.dtype is torch.float32]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_module_tensors_may_be_updated_before_the_program(train):
    """The program sees the updated buffers, and they are written back (then updated by BatchNorm in training)."""
    torch.manual_seed(0)
    model, reference = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    model.train(train), reference.train(train)
    jm = thunder.jit(model, transforms=[ResetStatistics()])
    for step in range(2):
        x = torch.randn(4, 3)
        with torch.no_grad():
            reference.running_mean.fill_(1), reference.running_var.fill_(1)
        assert torch.equal(jm(x), reference(x))
        for name, b in model.named_buffers():
            assert torch.equal(b, reference.get_buffer(name)), (step, name)
    assert "ones_like" in str(thunder.last_traces(jm)[-1])


class HalfStored(Transform):
    """FSDP's pattern on one process: the module holds the first half of each weight matrix's rows (a "shard"),
    the program sees the shard repeated to full size, the state dict shows (and loading accepts) full-size
    weights."""

    def transform_module(self, compile_data):
        jm = compile_data.thunder_module
        for name, p in list(jm.named_parameters()):
            if p.dim() == 2 and p.shape[0] % 2 == 0:
                jm.replace_module_tensor(name, nn.Parameter(p.detach()[: p.shape[0] // 2].clone()))

    def transform_module_tensors(self, tensors, compilation):
        return [ltorch.cat([proxy, proxy]) if source.collection == "_parameters" and proxy.dim() == 2 else proxy
                for proxy, source in tensors]

    def transform_state_dict(self, state_dict, thunder_module):
        return {k: torch.cat([v, v]) if v.dim() == 2 else v for k, v in state_dict.items()}

    def transform_loaded_state_dict(self, state_dict, thunder_module):
        return {k: v[: v.shape[0] // 2] if v.dim() == 2 else v for k, v in state_dict.items()}


def test_transforms_replace_module_tensors_and_present_state_dicts():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    jm = thunder.jit(model, transforms=[HalfStored()])
    assert [tuple(p.shape) for p in model.parameters()] == [(2, 3), (4,), (1, 4), (2,)]
    full = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    full.load_state_dict(jm.state_dict())
    assert torch.equal(full[0].weight[:2], model[0].weight) and torch.equal(full[0].weight[2:], model[0].weight)
    x = torch.randn(5, 3)
    torch.testing.assert_close(jm(x), full(x))
    jm(x).sum().backward()
    full(x).sum().backward()
    # the shard's gradient is the sum over the rows it stands for
    torch.testing.assert_close(model[0].weight.grad, full[0].weight.grad[:2] + full[0].weight.grad[2:])
    with torch.no_grad():
        full[2].weight.fill_(0.5)
    jm.load_state_dict(full.state_dict())
    assert torch.equal(model[2].weight, torch.full((1, 4), 0.5))
    with pytest.raises(TypeError, match="give a torch.nn.Parameter"):
        jm.replace_module_tensor("0.weight", torch.zeros(2, 3))
    with pytest.raises(KeyError, match="no parameter or buffer named '0.nope'"):
        jm.replace_module_tensor("0.nope", nn.Parameter(torch.zeros(1)))
