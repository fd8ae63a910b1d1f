"""thunder in two minutes: jit a function and a model, check them against eager, and read their traces.

    python examples/quickstart.py
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


def banner(title: str):
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}")


# -- a function ---------------------------------------------------------------------------------


def gelu_mlp(x, w1, w2):
    return F.gelu(x @ w1) @ w2


class Block(nn.Module):
    """A pre-norm transformer-style MLP block with dropout."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


def main():
    torch.manual_seed(0)

    banner("1. A function: thunder.jit(fn)")
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 32), torch.randn(32, 8)
    jfn = thunder.jit(gelu_mlp)
    out = jfn(x, w1, w2)  # first call: trace, transform, compile; later calls with alike inputs reuse it
    print("matches eager:", torch.equal(out, gelu_mlp(x, w1, w2)))
    jfn(x, w1, w2)
    print(f"cache misses: {thunder.cache_misses(jfn)}, cache hits: {thunder.cache_hits(jfn)}")
    print("\nThe program thunder executed (the last of its computation traces):")
    print(thunder.last_traces(jfn)[-1])

    banner("2. A model: thunder.jit(module) returns a ThunderModule sharing the module's parameters")
    model = Block()
    jmodel = thunder.jit(model)
    x = torch.randn(2, 5, 16)
    model.eval()
    with torch.no_grad():
        print("eval, matches eager:", torch.equal(jmodel(x), model(x)))
    model.train()  # the training flag is part of the cache key: this call compiles a second program
    torch.manual_seed(1)
    expected = model(x)
    torch.manual_seed(1)  # the same seed gives the same dropout mask: thunder draws random numbers as eager does
    actual = jmodel(x)
    print("train, matches eager (dropout included):", torch.equal(actual, expected))
    actual.sum().backward()  # gradients flow to the shared parameters
    print("fc1.weight received a gradient:", model.fc1.weight.grad is not None)

    print("\nThe forward program of the training call:")
    print(thunder.last_traces(jmodel)[-1])
    print("\nThe backward program autograd runs for it:")
    print(thunder.last_backward_traces(jmodel)[-1])
    print("\nThe prologue: it checks that a call fits this compiled program and gathers its inputs")
    print(thunder.last_prologue_traces(jmodel)[-1])

    traces = thunder.last_traces(jmodel)
    print(f"\n{len(traces)} computation traces were made for this program, one per pass:")
    for t in traces:
        print("  ", str(t).splitlines()[0])


if __name__ == "__main__":
    main()
