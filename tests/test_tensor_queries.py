"""What a program sees when it asks about its tensors while thunder traces it: the answers eager gives.

Each program branches on the answer, so a wrong answer shows as a wrong result; the cache must also tell
apart calls whose answers differ (a contiguous and a transposed input, a parameter with and without .grad).
"""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn

import thunder


def _same(a, b):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a, b), (a, b)
    elif isinstance(b, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b, (a, b)


def _check(fn, *calls):
    jfn = thunder.jit(fn)
    for args in calls:
        _same(jfn(*args), fn(*args))
    return jfn


def test_isinstance_parameter():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))
            self.register_buffer("b", torch.randn(3))

        def forward(self, x):
            out = x
            for t in (self.w, self.b, x):
                out = out * 2 if isinstance(t, nn.Parameter) else out + 1
            return out, type(self.w) is nn.Parameter or isinstance(self.w, nn.Parameter)

    m = M()
    x = torch.randn(3)
    with torch.no_grad():
        _same(thunder.jit(m)(x), m(x))


class _TypeQueries(nn.Module):
    """Branches on type() as library code does; returns which branches it took."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x):
        class Meta(type):
            pass

        made = type("Made", (), {})
        flags = torch.tensor([type(x) is torch.Tensor, type(self.w) is nn.Parameter, type(self.w) is torch.Tensor,
                              type(x).__name__ == "Tensor", type(3) is int, type(made) is type,
                              isinstance(int, type), issubclass(Meta, type), type(x) in (torch.Tensor, list)])
        return x * self.w, flags


def test_type_of_traced_tensors_is_eagers():
    """type(x) is torch.Tensor (nn.Parameter for parameters) while tracing, as in eager; the builtin type's other uses
    (three arguments, metaclasses, isinstance(c, type)) are unchanged, and nothing is left in the module afterwards."""
    m = _TypeQueries()
    x = torch.randn(3)
    jm = thunder.jit(m)
    with torch.no_grad():
        out, flags = jm(x)
        expected_out, expected_flags = m(x)
    assert torch.equal(out, expected_out) and flags.tolist() == expected_flags.tolist()
    assert expected_flags.tolist() == [True, True, False, True, True, True, True, True, True]
    assert "type" not in globals()
    with torch.no_grad():
        jm(x)
    assert thunder.cache_hits(jm) == 1


def test_parameter_passed_as_argument_is_a_parameter():
    def f(p, x):
        return x * 2 if isinstance(p, nn.Parameter) else x * 3

    p = nn.Parameter(torch.randn(2))
    _check(f, (p, torch.randn(2)))


@pytest.mark.parametrize("make", ["contiguous", "transposed", "sliced", "expanded"])
def test_strides_and_contiguity_of_inputs(make):
    def f(x):
        y = x if x.is_contiguous() else x.contiguous()
        return y * (2 if x.is_contiguous() else 3), x.stride(), x.storage_offset(), y.is_contiguous()

    base = torch.randn(4, 6)
    x = {"contiguous": base, "transposed": base.t(), "sliced": base[1:, 2:], "expanded": base[:1].expand(3, 6)}[make]
    _check(f, (x,))


def test_layouts_are_part_of_the_cache_key():
    def f(x):
        return x * 2 if x.is_contiguous() else x * 3

    jf = thunder.jit(f)
    a = torch.randn(4, 4)
    _same(jf(a), f(a))
    _same(jf(a.t()), f(a.t()))  # same shape, other strides: must not reuse the contiguous entry
    assert thunder.cache_misses(jf) == 2


def test_strides_of_intermediates():
    def f(x):
        y = x.t()
        z = y * 2  # elementwise on a transposed tensor keeps its layout in eager
        w = z.contiguous()
        return z.stride(), z.is_contiguous(), w.is_contiguous(), y.reshape(-1).stride(), (x + 1).stride()

    _check(f, (torch.randn(3, 5),))


def _second(y):
    return y.roll(1, 1).abs() + 0.5


@pytest.mark.parametrize("op", [
    *(lambda y, f=f: f(y * 2.0, _second(y)) for f in (torch.xlogy, torch.Tensor.xlogy, torch.special.xlogy,
                                                      torch.special.xlog1py, torch.copysign, torch.Tensor.copysign,
                                                      torch.floor_divide, torch.Tensor.floor_divide)),
    lambda y: y // _second(y), lambda y: 7 // (y + 3), torch.nn.functional.logsigmoid,
    lambda y: torch.nn.functional.rrelu(y), lambda y: torch.rrelu(y), lambda y: torch.isin(y, y[0, 0, 0]).float(),
], ids=["xlogy", "Tensor.xlogy", "special.xlogy", "special.xlog1py", "copysign", "Tensor.copysign", "floor_divide",
        "Tensor.floor_divide", "floordiv_operator", "rfloordiv_operator", "logsigmoid", "F.rrelu", "rrelu", "isin"])
def test_ops_whose_meta_kernel_lays_out_otherwise_than_the_cpu_kernel_follow_eager(op):
    """torch 2.13's meta kernels of these lay out their result otherwise than the CPU kernel: contiguous where the CPU
    kernel follows its first operand (TensorIterator: xlogy, copysign, floor_divide), or following the operand where
    the CPU kernel returns a contiguous tensor (logsigmoid, rrelu, isin). thunder took the reshape of the result for a
    view or a copy as eager does not, and wrote an in-place update of it back or not (generated programs, seeds 139680
    and 13499)."""
    def f(x):
        z = op(x.transpose(1, 2))
        return z.reshape(-1).sigmoid_(), z, z.stride()

    _check(f, (torch.randn(4, 2, 5, 3),))


def test_a_1d_convolution_of_a_length_one_input_laid_out_transposed_is_channels_last_as_in_eager():
    """The CPU kernel runs a 1-D convolution as 2-D on its operands unsqueezed, the input made contiguous first: a
    no-op for a transposed input of length one (contiguous whatever the stride of its last dim), whose unsqueezed
    layout then suggests channels-last, and the result is laid out so; thunder said contiguous (from the weight
    alone), and a fused region wrote an output laid out otherwise than eager (generated program nn 5244)."""
    def f(x, w):
        z = torch.nn.functional.conv1d(x, w, None, 1, 1)
        return z.reshape(-1).sigmoid_(), z, z.stride()

    _check(f, (torch.randn(2, 1, 3).mT, torch.randn(4, 3, 1)))


def _operand(shape, order, dtype):
    """A tensor of ``shape`` whose dims are laid out from outermost to innermost in ``order``."""
    return torch.randn([shape[d] for d in order], dtype=dtype).permute([order.index(d) for d in range(len(shape))])


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_the_convolution_layout_rule_gives_eagers_strides_for_every_operand_layout(dtype, transposed):
    """thunder/driver/kernel_layouts.py's rules for convolutions against the CPU kernel's result: every order of the
    operands' dims, extents of one and more, batched and unbatched, with and without padding (torch's meta kernels
    of the transposed convolutions lay out contiguous where the CPU kernels' result is channels-last)."""
    import itertools

    from thunder.driver.kernel_layouts import strides

    F = torch.nn.functional
    conv1d, conv2d = (F.conv_transpose1d, F.conv_transpose2d) if transposed else (F.conv1d, F.conv2d)

    def meta(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")

    def check(conv, x, w, pad):
        out = conv(x, w, None, 1, pad)
        args = (meta(x), meta(w), None, 1, pad)
        predicted = strides(conv, tuple(out.shape), out, args, {}) or conv(*args).stride()  # the rule's, else meta's
        assert predicted == out.stride(), (x.shape, x.stride(), w.shape, w.stride())

    for n, c, length, o, k in itertools.product((1, 2), (1, 3), (1, 4), (1, 2), (1, 2)):
        for order, w_order in itertools.product(itertools.permutations(range(3)), repeat=2):
            x, w = _operand((n, c, length), order, dtype), _operand((c, o, k) if transposed else (o, c, k), w_order, dtype)
            for inp, pad in itertools.product((x, x[0]), (0, 1)):
                if (length - 1 - 2 * pad + k if transposed else length + 2 * pad - k + 1) >= 1:  # an output extent
                    check(conv1d, inp, w, pad)
    for n, c, h, o, k in itertools.product((1, 2), (1, 3), (1, 3), (1, 2), (1, 2)):
        for order in itertools.permutations(range(4)):
            for w_order in ((0, 1, 2, 3), (0, 2, 3, 1), (1, 0, 2, 3), (3, 2, 1, 0)):
                x = _operand((n, c, h, 2), order, dtype)
                w = _operand((c, o, k, k) if transposed else (o, c, k, k), w_order, dtype)
                check(conv2d, x, w, 0 if transposed else 1)


_NORM_AND_SHUFFLE = {  # name -> (torch callable, its other arguments, operand shapes: extents of one and more)
    "batch_norm_train": (torch.nn.functional.batch_norm, (None, None, None, None, True), ((1, 2), (1, 3), (1, 2), (1, 2))),
    "batch_norm_eval": (torch.nn.functional.batch_norm, (torch.zeros(3), torch.ones(3)), ((1, 2), (3,), (1, 2), (1, 2))),
    "batch_norm_3d": (torch.nn.functional.batch_norm, (None, None, None, None, True), ((1,), (3,), (1, 2), (1,), (2,))),
    "group_norm": (torch.nn.functional.group_norm, (1,), ((1, 2), (1, 3), (1, 2), (1, 2))),
    "max_pool1d": (torch.nn.functional.max_pool1d, (1,), ((1, 2), (1, 3), (1, 4))),
    "pixel_shuffle": (torch.nn.functional.pixel_shuffle, (2,), ((1, 2), (4, 8), (1, 2), (1, 3))),
    "pixel_shuffle_by_one": (torch.nn.functional.pixel_shuffle, (1,), ((1, 2), (1, 3), (1, 2), (1, 2))),
}


@pytest.mark.parametrize("name", list(_NORM_AND_SHUFFLE))
def test_normalizations_pooling_and_pixel_shuffle_are_laid_out_as_eager_for_every_operand_layout(name):
    """Batch norm's CPU kernel lays out its result contiguous where the input is, else channels-last where the input is
    that, extents of one ignored (``(1, 3, 1, 2)`` with strides ``(6, 1, 1, 3)``: channels-last, which ATen's
    suggestion, thunder's rule until 2026-11-29, calls contiguous); group norm, ``max_pool1d`` and pixel shuffle lay
    out as ATen suggests (torch's meta kernel of pixel shuffle: contiguous). Every order of the input's dims,
    against the CPU kernels (the strides of extents of one aside: nothing but ``stride()`` reads them)."""
    import itertools

    from thunder.driver.kernel_layouts import strides

    fn, rest, extents = _NORM_AND_SHUFFLE[name]
    decided = None  # an input where the rule, not the meta kernel, gives eager's layout
    for shape in itertools.product(*extents):
        for order in itertools.permutations(range(len(shape))):
            x = _operand(shape, order, torch.float32)
            try:
                out = fn(x, *rest)
            except (RuntimeError, ValueError):  # one value per channel in training
                continue
            args = tuple(torch.empty_strided(a.shape, a.stride(), device="meta") if isinstance(a, torch.Tensor) else a
                         for a in (x, *rest))
            rule, meta = strides(fn, tuple(out.shape), out, args, {}), fn(*args).stride()
            assert _same_layout(out.shape, rule or meta, out.stride()), (x.shape, x.stride())
            if decided is None and not _same_layout(out.shape, meta, out.stride()):
                decided = x
    if decided is not None:
        _check(lambda x: (fn(x, *rest).stride(),), (decided,))


@pytest.mark.parametrize("fn", [
    lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
    lambda x: torch.nn.functional.layer_norm(x, x.shape[-2:], torch.ones(x.shape[-2:]), torch.zeros(x.shape[-2:])),
    lambda x: torch.native_layer_norm(x, x.shape[-1:], None, None, 1e-5)[0],
], ids=["layer_norm", "affine_over_two_dims", "native_layer_norm"])
def test_layer_norm_is_laid_out_as_eager_also_in_extents_of_one(fn):
    """The CPU kernel's result is contiguous, strides of extents of one too, where the meta kernel keeps the input's
    (``(1, 1, 4)`` with strides ``(4, 1, 1)``: a convolution reading it takes it for channels-last; found by a fused
    generated program, nn 8849, whose region wrote the layer norm as the meta kernel lays it out). Every order of the
    input's dims, compared exactly."""
    import itertools

    from thunder.driver.kernel_layouts import strides

    for shape in itertools.product((1, 2), (1, 3), (1, 4)):
        for order in itertools.permutations(range(3)):
            x = _operand(shape, order, torch.float32)
            out, meta_x = fn(x), torch.empty_strided(x.shape, x.stride(), device="meta")
            for callable_ in (torch.nn.functional.layer_norm, torch.layer_norm, torch.native_layer_norm):
                rule = strides(callable_, tuple(out.shape), out, (meta_x,), {})
                assert rule == out.stride(), (x.shape, x.stride(), rule, out.stride())
    _check(lambda x: (fn(x).stride(),), (torch.randn(1, 4, 1).mT,))


def _same_layout(shape, a, b) -> bool:
    """Whether strides ``a`` and ``b`` lay ``shape`` out alike (those of extents of one aside: nothing but ``stride()``
    reads them)."""
    return all(n == 1 or x == y for n, x, y in zip(shape, a, b))


def _laid_out(rng, shape, high=None):
    """A tensor of ``shape`` (integers below ``high`` if given) laid out at random: contiguous, transposed, permuted,
    expanded along a dimension, or every other element of a wider tensor."""
    make = (lambda s: torch.randint(0, high, s)) if high else torch.randn
    kind = rng.choice(["contiguous", "transposed", "permuted", "expanded", "strided"]) if len(shape) > 1 else "plain"
    if kind == "transposed":
        return make(tuple(reversed(shape))).permute(*reversed(range(len(shape))))
    if kind == "permuted":
        order = rng.sample(range(len(shape)), len(shape))
        return make(tuple(shape[i] for i in order)).permute(*[order.index(i) for i in range(len(shape))])
    if kind == "expanded":
        d = rng.randrange(len(shape))
        return make(tuple(1 if i == d else s for i, s in enumerate(shape))).expand(shape)
    if kind == "strided":
        return make((*shape[:-1], 2 * shape[-1]))[..., ::2]
    return make(tuple(shape))


def _advanced_index_case(rng):
    """A tensor and a key of integer index tensors (broadcast against each other, apart or together), lists, slices,
    numbers, None and Ellipsis; the key's tensors are passed as arguments, the rest is part of the program."""
    shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 4)))
    index_shape = tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 3)))
    key = []
    for d, size in enumerate(shape):
        r = rng.random()
        if r < 0.45:
            s = index_shape if rng.random() < 0.7 else tuple(1 if rng.random() < 0.5 else v for v in index_shape)
            key.append(_laid_out(rng, s, high=size))
        elif r < 0.55:
            key.append([rng.randrange(size), 0])
        elif r < 0.7:
            key.append(slice(None, None, rng.choice([1, 2])))
        elif r < 0.8:
            key.append(rng.randrange(size))
        else:
            key += [None, slice(None)]
    if rng.random() < 0.2:
        key[0] = Ellipsis
    return _laid_out(rng, shape), key


@pytest.mark.parametrize("seed", range(12))
def test_advanced_indexing_lays_out_its_result_as_eager(seed):
    """``x[idx]`` with index tensors: ATen lays out the result as TensorIterator does for ``x`` and the indices (a
    transposed index tensor gives a transposed result), where torch's meta kernel gives a contiguous one. thunder
    answered ``stride()`` and ``is_contiguous()`` otherwise than eager, and took a ``reshape`` of the result that
    eager copies for a view, so an in-place update of it changed the result (a silently wrong result)."""
    rng = random.Random(seed)
    checked = 0
    while checked < 20:
        x, key = _advanced_index_case(rng)
        tensors = [k for k in key if isinstance(k, torch.Tensor)]
        try:
            x[tuple(key)]
        except (IndexError, RuntimeError):  # indices that do not broadcast, or no tensor left to index with
            continue
        if not tensors:
            continue

        def f(x, *ts, key=key):
            it = iter(ts)
            y = x[tuple(next(it) if isinstance(k, torch.Tensor) else k for k in key)]
            y.reshape(-1).add_(1)  # a view where y's strides allow one, else a copy
            return y, y.stride(), y.is_contiguous(), y.transpose(0, -1).is_contiguous()

        _check(f, (x, *tensors))
        checked += 1


@pytest.mark.parametrize("ask", ["stride", "inplace"])
def test_layout_at_the_end_of_a_long_chain_of_operations(ask):
    """Strides are computed from the producers' layouts, innermost first: asked only at the end of a chain of
    thousands of operations (timm's EfficientViT: an in-place hardswish deep in the network), with no recursion
    per operation."""
    def f(x):
        y = x.t()
        for _ in range(3000):
            y = y * 1.0001
        return y.stride() if ask == "stride" else y.add_(1)

    _check(f, (torch.randn(3, 5),))


def test_layout_of_parameters_not_checked_unless_read():
    lin = nn.Linear(4, 4)
    jm = thunder.jit(lin)
    with torch.no_grad():
        jm(torch.randn(2, 4))
    text = str(thunder.last_prologue_traces(jm)[-1])
    assert "check_layout" not in text


def test_requires_grad_leaf_and_grad_fn_follow_eager():
    def f(x, w):
        y = x * 1
        before = (y.requires_grad, y.is_leaf, y.grad_fn is None)
        y.mul_(w)
        after = (y.requires_grad, y.is_leaf, y.grad_fn is None, x.is_leaf, w.is_leaf)
        return y, before, after

    x = torch.randn(3)
    w = torch.randn(3, requires_grad=True)
    jf = thunder.jit(f)
    out, b1, a1 = jf(x, w)
    eout, b2, a2 = f(x, w)
    assert torch.equal(out, eout) and b1 == b2 and a1 == a2


def test_grad_attribute_is_read_from_the_tensor():
    lin = nn.Linear(3, 3)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            g = self.lin.weight.grad
            return x * 2 if g is None else x @ g

    m = M()
    jm = thunder.jit(m)
    x = torch.randn(2, 3)
    with torch.no_grad():
        _same(jm(x), m(x))
    lin.weight.grad = torch.randn(3, 3)
    with torch.no_grad():
        _same(jm(x), m(x))  # the gradient appeared: a new specialization
        lin.weight.grad = torch.randn(3, 3)
        _same(jm(x), m(x))  # another gradient tensor: read again on each call
    assert thunder.cache_misses(jm) == 2


def test_base_and_is_view():
    def f(x):
        y = x * 1
        v = y[0]
        d = y.detach()
        return v._is_view(), v._base is y, y._is_view(), d._is_view(), (x * 2)._base is None

    _check(f, (torch.randn(2, 3),))


def test_data_pointers_are_refused_clearly():
    def f(x):
        return x.data_ptr()

    with pytest.raises(NotImplementedError, match="data_ptr"):
        thunder.jit(f)(torch.randn(2))


def test_repr_and_format_do_not_crash():
    seen = []

    def f(x):
        seen.append(repr(x))
        seen.append(f"{x}")
        return x + 1

    thunder.jit(f)(torch.randn(2))
    assert all("TensorProxy" in s for s in seen)


class _LaidOutBlock(nn.Module):
    """A block whose layouts the tracer asks about: ``contiguous()`` returns its input or a copy, by its strides."""

    def __init__(self):
        super().__init__()
        self.linear, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)

    def forward(self, x):
        return torch.relu_(self.norm(self.linear(x))).transpose(0, 1).contiguous().transpose(0, 1)


def test_repeated_blocks_replay_their_layouts_once():
    """The strides of a traced tensor come from running its operation on meta tensors laid out as its operands; a
    model's repeated blocks run the same operations on the same layouts, whose answers are reused: 22 more blocks
    cost a few meta kernels, not 13 each (the replays were a third of a 12-layer HF Llama's compile time)."""
    from thunder.driver import kernel_layouts

    counted = []
    run_kernel = kernel_layouts.KernelLayouts.__torch_dispatch__

    def counting(self, func, types, args=(), kwargs=None):
        counted.append(func)
        return run_kernel(self, func, types, args, kwargs)

    kernels = {}
    for depth in (2, 24):
        torch.manual_seed(0)
        model = nn.Sequential(*[_LaidOutBlock() for _ in range(depth)])
        x = torch.randn(4, 3, 8)
        expected = model(x)
        counted.clear()
        kernel_layouts.KernelLayouts.__torch_dispatch__ = counting
        try:
            actual = thunder.jit(model)(x)
        finally:
            kernel_layouts.KernelLayouts.__torch_dispatch__ = run_kernel
        assert torch.equal(actual, expected) and actual.stride() == expected.stride()
        kernels[depth] = len(counted)
    assert kernels[24] - kernels[2] <= 2 * 22, kernels
