"""TorchScript in a jitted program (thunder/driver/torchscript.py): a scripted function is traced through the Python
function it was scripted from (as x-transformers' attention calls ``softclamp``); functions without Python source and
TorchScript modules are refused with a clear error."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunder


@torch.jit.script
def softclamp(t: torch.Tensor, value: float) -> torch.Tensor:
    return (t / value).tanh() * value


@torch.jit.script
def gelu_gate(x: torch.Tensor, gate: torch.Tensor, approximate: bool = True) -> torch.Tensor:
    if approximate:
        return x * torch.nn.functional.gelu(gate, approximate="tanh")
    return x * torch.nn.functional.gelu(gate)


class Scripted(nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.lin, self.gate = nn.Linear(6, 6), nn.Linear(6, 6)
        self.approximate = approximate

    def forward(self, x):
        h = softclamp(self.lin(x), 2.0)
        return gelu_gate(h, self.gate(x), approximate=self.approximate)


class Python(Scripted):
    def forward(self, x):
        h = softclamp._torchdynamo_inline(self.lin(x), 2.0)
        return gelu_gate._torchdynamo_inline(h, self.gate(x), approximate=self.approximate)


@pytest.mark.parametrize("approximate", [True, False])
def test_a_scripted_function_is_traced_through_its_python_function(approximate):
    """Bitwise equal to the Python functions run eagerly; TorchScript's own gradients (its differentiable graphs,
    after a few calls) may differ from autograd's in the last bits."""
    torch.manual_seed(0)
    model = Scripted(approximate)
    python, jmodel = Python(approximate), thunder.jit(copy.deepcopy(model))
    python.load_state_dict(model.state_dict())
    for _ in range(3):
        x = torch.randn(4, 6)
        outs = [m(x) for m in (model, python, jmodel)]
        torch.testing.assert_close(outs[2], outs[0])
        assert torch.equal(outs[2], outs[1])
        for out in outs:
            out.sum().backward()
    for p, e, q in zip(model.parameters(), python.parameters(), jmodel.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
        assert torch.equal(q.grad, e.grad)
    assert thunder.cache_misses(jmodel) == 1 and thunder.cache_hits(jmodel) == 2
    assert "tanh" in str(thunder.last_traces(jmodel)[-1])
    # outside a traced program the scripted function still runs in TorchScript
    assert softclamp(torch.ones(2), 2.0).tolist() == [2.0 * torch.tanh(torch.tensor(0.5)).item()] * 2


def test_a_traced_function_runs_its_python():
    traced = torch.jit.trace(lambda x: x.sin() * 2, (torch.ones(3),))
    x = torch.randn(5)
    assert torch.equal(thunder.jit(lambda x: traced(x) + 1)(x), traced(x) + 1)


def test_a_torchscript_function_without_python_source_is_refused():
    unit = torch.jit.CompilationUnit("def twice_sin(x):\n    return x.sin() * 2\n")

    with pytest.raises(NotImplementedError, match="cannot trace the TorchScript function 'twice_sin'.* no Python source"):
        thunder.jit(lambda x: unit.twice_sin(x) + 1)(torch.ones(3))


class Tanh2(nn.Module):
    def forward(self, x):
        return x.tanh() * 2


@pytest.mark.parametrize("make", [torch.jit.script, lambda m: torch.jit.trace(m, (torch.ones(3),))],
                         ids=["script", "trace"])
@pytest.mark.parametrize("where", ["submodule", "top"])
def test_a_torchscript_module_is_refused(make, where):
    scripted = make(Tanh2())
    model = nn.Sequential(nn.Linear(3, 3), scripted) if where == "submodule" else scripted
    name = "module.1" if where == "submodule" else "the module"
    with pytest.raises(NotImplementedError, match=f"cannot trace {name}, a TorchScript module"):
        thunder.jit(model)(torch.ones(3))
