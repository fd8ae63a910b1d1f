"""Values of tensors a program reads while thunder traces it, computed from the call's tensor arguments (see
[Note: value guards] in thunder/driver/value_guards.py): the same results as eager on every call, a new trace where
a value changes, and clear refusals where the value could change with every step."""
from __future__ import annotations

import copy

import pytest
import torch

import thunder
from thunder.core.proxies import DataDependentError
from tests.parity import check_training_parity


def _same(a, b):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) or torch.allclose(a, b, rtol=0, atol=0, equal_nan=True), (a, b)
    elif isinstance(b, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert type(a) is type(b) and a == b, (a, b)


def _validate(x, labels):  # Hugging Face's CTC heads: `if labels.max() >= self.config.vocab_size: raise`
    if labels.max() >= 10:
        raise ValueError("Label values must be <= vocab_size: 10")
    return x * 2


def _branch(x, mask):  # `if torch.all(mask == 1): mask = None`
    if torch.all(mask == 1):
        return x * 2
    return x * mask


def _item(x, lengths):
    return x[: int(lengths.max())] * lengths.sum().item()


def _tolist(x, sizes):
    return torch.split(x, sizes.tolist())


def _after_update(x, labels):  # the value after an in-place update of the argument, which the prologue sees before
    labels = labels.clone()
    labels.clamp_(max=3)
    return x * float(labels.float().mean())


def _of_a_view(x, t):
    return x + t[1:].sum().item() if bool(t[0] > 0) else x - 1


def _float_nan(x, t):
    return x * t.max().item()


def _rows_tolist(x):  # a selection's values (of a run-time extent: tests/test_dynamic_shapes.py)
    return x * len(torch.nonzero(x[:, 0] > 0).tolist())


def _count_compared(x, labels):  # DeBERTa's loss: ``if label_index.size(0) > 0`` of (labels >= 0).nonzero()
    index = (labels >= 0).nonzero()
    return x * 2 if index.size(0) > 0 else x - 1


def _count_used(x):
    return x * torch.ones(x.nonzero().shape[0]).sum().item()


def _narrow(x, lengths):  # Longformer: attn_probs.narrow(-1, 0, num_global_attn_indices.max())
    return x.narrow(0, 0, lengths.max()) * 2


CASES = {
    "narrow": (_narrow, [(torch.randn(5), torch.tensor([1, 3])), (torch.randn(5), torch.tensor([2, 3])),
                         (torch.randn(5), torch.tensor([4, 1]))], 2),
    "count_compared": (_count_compared, [(torch.randn(3), torch.tensor([1, -1, 2])),
                                         (torch.randn(3), torch.tensor([3, 4, -5])),
                                         (torch.randn(3), torch.tensor([-1, -1, -1])),
                                         (torch.randn(3), torch.tensor([0, 0, 0]))], 2),
    "count_used": (_count_used, [(torch.tensor([1.0, 0.0]),), (torch.tensor([0.0, 2.0]),),
                                 (torch.tensor([1.0, 2.0]),)], 2),
    "rows_tolist": (_rows_tolist, [(torch.tensor([[1.0, 2.0], [-1.0, 0.0]]),),
                                   (torch.tensor([[1.0, 2.0], [-2.0, 5.0]]),),
                                   (torch.tensor([[1.0, 2.0], [3.0, 0.0]]),)], 2),
    "validate": (_validate, [(torch.randn(4), torch.tensor([1, 2, 3])), (torch.randn(4), torch.tensor([1, 9, 3]))], 1),
    "branch": (_branch, [(torch.randn(4), torch.ones(4)), (torch.randn(4), torch.tensor([1.0, 0.0, 1.0, 1.0])),
                         (torch.randn(4), torch.ones(4))], 2),
    "item": (_item, [(torch.randn(6), torch.tensor([2, 3])), (torch.randn(6), torch.tensor([2, 3])),
                     (torch.randn(6), torch.tensor([4, 1]))], 2),
    "tolist": (_tolist, [(torch.randn(6), torch.tensor([2, 4])), (torch.randn(6), torch.tensor([3, 3]))], 2),
    "after_update": (_after_update, [(torch.randn(3), torch.tensor([1, 5, 9])),
                                     (torch.randn(3), torch.tensor([1, 6, 9]))], 1),
    "of_a_view": (_of_a_view, [(torch.randn(3), torch.tensor([1.0, 2.0, 3.0])),
                               (torch.randn(3), torch.tensor([-1.0, 2.0, 3.0]))], 2),
    "float_nan": (_float_nan, [(torch.randn(3), torch.tensor([1.0, float("nan")])),
                               (torch.randn(3), torch.tensor([float("nan"), 1.0])),
                               (torch.randn(3), torch.tensor([1.0, 0.0]))], 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_values_of_arguments_are_eagers_on_every_call(name):
    fn, calls, compilations = CASES[name]
    jfn = thunder.jit(fn)
    for args in calls:
        _same(jfn(*args), fn(*args))
    assert thunder.cache_misses(jfn) == compilations
    assert "check_values(" in str(thunder.last_prologue_traces(jfn)[-1])


def test_a_changed_value_retraces_and_takes_eagers_branch():
    jfn = thunder.jit(_validate)
    x = torch.randn(4)
    _same(jfn(x, torch.tensor([1, 2, 3])), x * 2)
    with pytest.raises(ValueError, match="Label values must be <= vocab_size"):
        jfn(x, torch.tensor([1, 2, 30]))
    _same(jfn(x, torch.tensor([4, 5, 6])), x * 2)
    assert thunder.cache_hits(jfn) == 1


def test_the_prologue_shows_how_it_computes_the_value():
    jfn = thunder.jit(_validate)
    jfn(torch.randn(4), torch.tensor([1, 2, 3]))
    text = str(thunder.last_prologue_traces(jfn)[-1])
    assert "check_values(value_of_t1, (labels,), False)" in text
    assert "# t0 = torch.max(labels)" in text and "# t1 = torch.ge(t0, 10)" in text
    assert "max" not in str(thunder.last_traces(jfn)[-1])  # the computation does not compute it


def _selected_added_to_all(x, labels):  # PyG's GPSConv: the rows of a padded batch its mask selects are the nodes
    return (x * 2)[labels >= 0] + x


@pytest.mark.parametrize("grad", [False, True])
def test_extents_that_must_be_equal_are_decided_by_their_values(grad):
    """A selection by a mask computed from the arguments, broadcast with a tensor of the arguments' extent: equal only
    when every element is selected. thunder decides it by the values (the prologue counts the mask's True elements on
    every call, not the selection it makes), as eager decides by the sizes: the same result where they are equal, the
    same error where not."""
    jfn = thunder.jit(_selected_added_to_all)
    for labels in (torch.tensor([1, 2, 0]), torch.tensor([3, 0, 4])):
        x = torch.randn(3, 2, requires_grad=grad)
        actual, expected = jfn(x, labels), _selected_added_to_all(x, labels)
        _same(actual.detach(), expected.detach())
        if grad:
            _same(torch.autograd.grad(actual.sum(), x)[0], torch.autograd.grad(expected.sum(), x)[0])
    assert (thunder.cache_misses(jfn), thunder.cache_hits(jfn)) == (1, 1)
    assert "check_values(" in str(thunder.last_prologue_traces(jfn)[-1])
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        _selected_added_to_all(x, torch.tensor([1, -1, 2]))
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        jfn(x, torch.tensor([1, -1, 2]))


def _added_to_the_largest(x, labels):  # as many rows as labels equal to the largest: broadcast when one, or all
    largest = x[labels == labels.max()]
    return x + largest, largest.expand(3), torch.where(largest < x, largest.detach(), x)


@pytest.mark.parametrize("labels,error", [
    (torch.tensor([1, 5, 2]), None), (torch.tensor([3, 0, 3]), "must match|cannot broadcast|expanded size"),
    (torch.tensor([4, 4, 4]), None)], ids=["one", "two", "all"])
@pytest.mark.parametrize("grad", [False, True])
def test_an_extent_of_one_broadcasts_where_its_value_is_one(labels, error, grad):
    """A selection of one row broadcasts (and expands) as a row of size 1 does; where the count is neither 1 nor the
    other extent, eager's error. (It raised eager's error when the count was 1: generated program 33740; its gradient
    failed to reshape the broadcast sum to the selection's extent, which the trace had equated with 1: 905373.)"""
    jfn = thunder.jit(_added_to_the_largest)
    x = torch.randn(3, requires_grad=grad)
    if error is None:
        actual, expected = jfn(x, labels), _added_to_the_largest(x, labels)
        for a, e in zip(actual, expected):
            _same(a.detach(), e.detach())
        if grad:
            _same(torch.autograd.grad(sum(a.sum() for a in actual), x)[0],
                  torch.autograd.grad(sum(e.sum() for e in expected), x)[0])
    else:
        with pytest.raises(RuntimeError, match=error):
            _added_to_the_largest(x, labels)
        with pytest.raises(RuntimeError, match=error):
            jfn(x, labels)


def _compared_then_matched(x, labels):
    a, b = x[labels >= 0], x[labels >= 0]  # two masks, two extents
    if b.shape[0] > 1:  # a guard on the second extent
        b = b * 2
    return a + b  # the two extents must match: decided by their values, then the second stands for the first


def test_a_guard_keeps_the_extents_it_compared():
    """A comparison guarded on an extent that a later match makes stand for another: the prologue evaluates the
    comparison as it was made (it evaluated the extent's new polynomial, of an extent it had not computed: KeyError on
    the second call; generated program 24078)."""
    jfn = thunder.jit(_compared_then_matched)
    for labels in (torch.tensor([1, -1, 2]), torch.tensor([3, 0, -4]), torch.tensor([-1, -1, 5])):
        x = torch.randn(3)
        _same(jfn(x, labels), _compared_then_matched(x, labels))
    assert thunder.cache_misses(jfn) == 2


class _ParameterBranch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x):
        return x * 2 if self.lin(x).sum() > 0 else x  # changes with every optimizer step


@pytest.mark.parametrize("fn,x,reason", [
    (_ParameterBranch(), torch.randn(2, 3), "t_lin_\\w+, which is not a tensor argument"),
    (lambda x: x * x.sum().item(), torch.randn(3, requires_grad=True), "x, which requires grad"),
    (lambda x: x * 2 if torch.rand(3).sum() > x.sum() else x, torch.randn(3), "random operation"),
    (lambda x: x * int(x.nonzero().shape[0]), torch.tensor([1.0, 0.0]), "nonzero"),  # an extent's value itself
    # an in-place update broadcast only because a masked selection has one element: eager's result has the view's
    # shape, thunder's the count's (generated program 127550: it crashed in the write-back to the view's base)
    (lambda x: (lambda m: m[1:].add_(m[m > 0]))(x > 0), torch.tensor([[1.0], [-1.0], [-1.0]]), "boolean mask"),
])
def test_values_that_may_change_every_call_are_refused(fn, x, reason):
    with pytest.raises(DataDependentError, match=reason):
        thunder.jit(fn)(x)


def test_training_with_a_check_on_the_labels():
    """A training step whose loss validates its labels first, as Hugging Face's CTC heads do: bitwise eager's."""
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 5)

        def forward(self, x, labels):
            if labels.max() >= 5:
                raise ValueError("labels out of range")
            lengths = (labels >= 0).sum(-1)
            return torch.nn.functional.cross_entropy(self.lin(x)[:, : int(lengths.max())].flatten(0, 1),
                                                     labels[:, : int(lengths.max())].flatten())

    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 5, (2, 6), generator=g)
    labels[1, 4:] = -100
    check_training_parity(Head(), (torch.randn(2, 6, 8, generator=g), labels), loss_of=lambda loss: loss)


class _ActNorm(torch.nn.Module):
    """Glow's data-dependent initialization: a boolean buffer says whether the first batch has set the parameters."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.loc, self.log_scale = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(4))
        self.register_buffer("initialized", torch.tensor(False))
        self.register_buffer("mask", torch.tensor([True, False, True, True]))

    def forward(self, x):
        h = self.linear(x)
        if not self.initialized:
            with torch.no_grad():
                self.loc.copy_(-h.mean(0))
                self.log_scale.copy_(-h.std(0).log())
                self.initialized.fill_(True)
        out = (h + self.loc) * self.log_scale.exp()
        return out[:, self.mask] if self.mask.any() else out


def test_boolean_buffers_are_checked_like_arguments():
    """A module's boolean buffers (flags, masks) do not change with training as parameters do: their values are
    checked like arguments' (DataDependentError before). The first call initializes and sets the flag, the second
    compiles the other branch, the later ones hit the cache; the mask's selection is a run-time extent, so a changed
    mask needs no new trace, and its values reach the result."""
    torch.manual_seed(0)
    model = _ActNorm()
    expected_model = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for step in range(4):
        if step == 3:
            for m in (model, expected_model):
                m.mask[1] = True
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
        actual, expected = jitted(x), expected_model(x)
        actual.square().sum().backward()
        expected.square().sum().backward()
        assert torch.equal(actual, expected)
        for (name, p), e in zip(model.named_parameters(), expected_model.parameters()):
            assert torch.equal(p, e) and torch.equal(p.grad, e.grad), name
            p.grad = e.grad = None
    assert thunder.cache_misses(jitted) == 2


class _Coupling(torch.nn.Module):  # zuko's RealNVP: the masked features and the context condition a layer
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.tensor([True, False, False]))
        self.hyper = torch.nn.Linear(1 + 2, 2)

    def forward(self, x, c):
        a, b = x[..., self.mask], x[..., ~self.mask]
        shift = self.hyper(torch.cat([a, c], -1))
        return torch.cat([a, b * shift.exp()], -1).square().mean()


@pytest.mark.parametrize("grad", [False, True])
def test_a_layer_fed_a_selection_by_a_mask_buffer_trains(grad):
    """A layer of fixed width fed the elements a mask buffer selects (and more: an extent ``i + 2``, equal to the
    width by the mask's values, which the prologue checks). The gradient's re-trace of the concatenation gave the
    extent a fresh name, not known equal to the width: NotImplementedError ("cannot tell whether the extents ...
    are equal"). A mask selecting another count: eager's error."""
    torch.manual_seed(0)
    model = _Coupling()
    expected_model = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for step in range(3):
        x = torch.randn(8, 3, requires_grad=grad)
        c = torch.randn(8, 2)
        actual, expected = jitted(x, c), expected_model(x, c)
        assert torch.equal(actual, expected)
        if grad:
            actual.backward()
            expected.backward()
            for p, e in zip(model.parameters(), expected_model.parameters()):
                assert torch.equal(p.grad, e.grad)
    assert thunder.cache_misses(jitted) == 1
    for m in (model, expected_model):
        m.mask[1] = True
    for fn in (expected_model, jitted):
        with pytest.raises(RuntimeError, match="cannot be multiplied|shapes"):
            fn(x, c)


def _relative_positions(x):
    """As Hugging Face's Funnel: an arange whose bounds are tensors computed from constants (other aranges), then a
    reshape by its length."""
    pos = torch.arange(0, x.shape[1], dtype=torch.long)
    span = torch.arange(pos[-1], pos[0] - 1, -1)
    return x.reshape(x.shape[0], -1, span.shape[0]) * span


def test_an_arange_with_bounds_computed_from_constants_has_a_length_known_while_tracing():
    """Its bounds are the same on every call: the trace knows the length (a run-time extent before, which the reshape
    refused: 'needs the value of i6'), and the prologue checks nothing of them."""
    x = torch.randn(2, 6)
    jfn = thunder.jit(_relative_positions)
    assert torch.equal(jfn(x), _relative_positions(x))
    assert torch.equal(jfn(x + 1), _relative_positions(x + 1)) and thunder.cache_misses(jfn) == 1
    assert "check_values" not in str(thunder.last_prologue_traces(jfn)[-1])


def test_an_arange_with_bounds_computed_from_an_argument_keeps_a_run_time_length():
    def fn(x, n):
        return torch.arange(n.sum()) * x.sum()

    jfn = thunder.jit(fn)
    x = torch.randn(3)
    for n in (torch.tensor([2, 3]), torch.tensor([2, 4])):
        assert torch.equal(jfn(x, n), fn(x, n))
    assert thunder.cache_misses(jfn) == 1  # one trace for every length


@pytest.mark.parametrize("compare", [lambda x, y: torch.equal(x, y), lambda x, y: x.allclose(y, atol=1e-3)],
                         ids=["equal", "allclose"])
def test_equal_and_allclose_of_arguments_are_decided_by_their_values(compare):
    """torch.equal / torch.allclose return Python bools of the values: decided as ``bool(t)`` is (the prologue
    checks the answer), where they were refused ('no meta kernel for aten::equal', 'returns a Python value')."""
    def fn(x, y):
        return x * 2 if compare(x, y) else x - y

    jfn = thunder.jit(fn)
    x = torch.randn(3)
    for y in (x.clone(), x + 1, x.clone()):
        assert torch.equal(jfn(x, y), fn(x, y))
    assert thunder.cache_misses(jfn) == 2
    assert thunder.jit(lambda x, y: torch.equal(x, y))(x, x[:2]) is False  # other shapes: not equal, nothing read
    with pytest.raises(DataDependentError, match="computed from"):
        weight = torch.nn.Parameter(torch.randn(3))
        thunder.jit(lambda x: x if compare(x, weight) else -x)(x)
