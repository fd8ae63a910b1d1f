"""Models built on ``torch.distributions`` train under thunder.jit exactly as in eager, with the distributions'
argument validation on (torch's default) or off.

Validation computes ``torch._is_all_true`` of a constraint's check and raises where it is False. Computed from
parameters, that value is unknown while thunder traces: the trace takes it True and checks it on every call (see
[Note: checks that all elements hold] in thunder/torch/reductions.py), so a call where it is False raises a
ValueError, as eager does, instead of running the branch eager would not run.
"""
from __future__ import annotations

import shutil

import pytest
import torch
import torch.distributions as D
import torch.nn as nn

import thunder
from tests.parity import NotBitwise, check_training_parity

# (torch.distributions' own code, in eager too)
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")


class VAE(nn.Module):
    """A Gaussian posterior sampled with ``rsample``, its KL divergence from a standard normal prior built from
    constant tensors, a Bernoulli likelihood."""

    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = nn.Linear(8, 8), nn.Linear(4, 8)

    def forward(self, x):
        mu, log_std = self.encoder(x).chunk(2, -1)
        posterior = D.Normal(mu, log_std.exp())
        z = posterior.rsample()
        kl = D.kl_divergence(posterior, D.Normal(torch.zeros_like(mu), torch.ones_like(mu))).sum(-1)
        likelihood = D.Bernoulli(logits=self.decoder(z)).log_prob((x > 0).float()).sum(-1)
        return (kl - likelihood).mean()


class CategoricalPolicy(nn.Module):
    """A policy-gradient loss: log-probabilities of taken actions and an entropy bonus."""

    def __init__(self):
        super().__init__()
        self.logits = nn.Linear(8, 5)

    def forward(self, x, actions, advantages):
        policy = D.Categorical(logits=self.logits(x))
        return -(policy.log_prob(actions) * advantages).mean() - 0.01 * policy.entropy().mean()


class TanhGaussianPolicy(nn.Module):
    """SAC's squashed Gaussian: a transformed distribution, its ``rsample`` and the log-probability of the sample."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 4)

    def forward(self, x, actions, advantages):
        mu, log_std = self.head(x).chunk(2, -1)
        policy = D.TransformedDistribution(D.Normal(mu, log_std.exp()), [D.transforms.TanhTransform(cache_size=1)])
        a = policy.rsample()
        return (policy.log_prob(a).sum(-1) * advantages).mean() + a.square().mean()


class MultivariateGaussian(nn.Module):
    """A full-covariance Gaussian from a learned Cholesky factor: its log-density and a reparameterized sample."""

    def __init__(self):
        super().__init__()
        self.mean = nn.Linear(8, 3)
        self.factor = nn.Parameter(torch.eye(3) + 0.1 * torch.randn(3, 3).tril(-1))

    def forward(self, x, actions, advantages):
        scale_tril = self.factor.tril(-1) + torch.diag(self.factor.diagonal().exp())
        dist = D.MultivariateNormal(self.mean(x), scale_tril=scale_tril)
        return -(dist.log_prob(torch.zeros(3)) * advantages).mean() + dist.rsample().square().mean()


def _inputs(name):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 8, generator=g)
    if name == "vae":
        return (x,)
    return x, torch.randint(0, 5, (6,), generator=g), torch.randn(6, generator=g)


MODELS = {"vae": VAE, "categorical": CategoricalPolicy, "tanh_gaussian": TanhGaussianPolicy,
          "multivariate": MultivariateGaussian}


@pytest.fixture(params=[True, False], ids=["validated", "unvalidated"])
def validate_args(request):
    default = D.Distribution._validate_args
    D.Distribution.set_default_validate_args(request.param)
    yield request.param
    D.Distribution.set_default_validate_args(default)


@pytest.mark.parametrize("name", list(MODELS))
def test_distribution_models_train_as_eager(name, validate_args):
    torch.manual_seed(0)
    check_training_parity(MODELS[name](), _inputs(name), loss_of=lambda loss: loss)


@pytest.mark.parametrize("name", ["vae", "tanh_gaussian"])
def test_distribution_models_train_as_eager_fused(name, validate_args):
    """Fused by inductor, the validations' checks too (a constant scale's check is a bool computed from constants:
    inductor failed to compile that region, which then ran unfused with a warning, until thunder gave inductor its
    negation as ``logical_not``)."""
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("inductor's CPU kernels need a C++ compiler")
    torch.manual_seed(0)
    check_training_parity(MODELS[name](), _inputs(name), loss_of=lambda loss: loss, executors=["inductor", "torch"],
                          not_bitwise=NotBitwise("inductor's fused kernels round otherwise than eager's", atol=1e-5,
                                                 rtol=1e-4, depends_on_machine=True))


class NormalPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        mu, scale = self.head(x).unbind(-1)
        return D.Normal(mu, scale).log_prob(torch.zeros_like(mu)).sum()


@pytest.mark.parametrize("executors", [None, ["inductor", "torch"]], ids=["torch", "inductor"])
def test_a_validation_that_fails_when_the_program_runs_raises_value_error(executors):
    """The scale, computed from a parameter, is positive when thunder traces, not on a later call: eager raises a
    ValueError there, and so does the trace's check, rather than computing a log-density of a negative scale."""
    assert D.Distribution._validate_args  # torch's default
    model = NormalPolicy()
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([0.0, 1.0]))
    jitted = thunder.jit(model, executors=executors)
    x = torch.randn(3, 4)
    assert torch.equal(jitted(x), model(x))
    with torch.no_grad():
        model.head.bias[1] = -1.0
    with pytest.raises(ValueError, match="to satisfy the constraint"):
        model(x)
    with pytest.raises(ValueError, match=r"torch._is_all_true\(t\d+\) was False when the jitted program ran"):
        jitted(x)
    with torch.no_grad():
        model.head.bias[1] = 2.0
    assert torch.equal(jitted(x), model(x)) and thunder.cache_misses(jitted) == 1


def test_is_all_true_of_values_known_while_tracing_is_eagers():
    """From the call's arguments (no grad), the value is known while tracing (a value guard): eager's branch, and its
    error, at trace time; ``torch._is_all_true`` of a tensor that is not bool fails as in eager."""
    entropy = thunder.jit(lambda probs: D.Categorical(probs=probs).entropy())
    probs = torch.tensor([[0.2, 0.8], [0.5, 0.5]])
    assert torch.equal(entropy(probs), D.Categorical(probs=probs).entropy())
    with pytest.raises(ValueError, match="to satisfy the constraint"):
        entropy(torch.tensor([[0.2, -0.8], [0.5, 0.5]]))
    with pytest.raises(RuntimeError):
        thunder.jit(torch._is_all_true)(torch.ones(3))
