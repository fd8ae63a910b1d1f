"""The strides thunder gives elementwise results, against eager's kernels: TensorIterator's (thunder/driver/
kernel_layouts.py, [Note: TensorIterator's fast setup]), strides of extents of one included, which address nothing but
order the dimensions of the next elementwise kernel's result."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.driver.kernel_layouts import KernelLayouts, tensor_iterator_strides


def _operand(shape, rng):
    """A tensor of (a suffix of) ``shape``, some extents broadcast to one, its dims laid out in a random order, its
    extents of one given arbitrary strides."""
    nd = rng.randint(1, len(shape))
    op_shape = [n if rng.random() < 0.8 else 1 for n in shape[len(shape) - nd:]]
    order = list(range(nd))
    rng.shuffle(order)
    t = torch.randn([op_shape[d] for d in order]).permute(*[order.index(d) for d in range(nd)])
    if rng.random() < 0.4:
        t = t.as_strided(t.shape, [st if n != 1 else rng.choice([1, 2, 7]) for n, st in zip(t.shape, t.stride())])
    return t


@pytest.mark.parametrize("seed", range(4))
def test_tensor_iterator_strides_are_the_cpu_kernels(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(400):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
        a, b = _operand(shape, rng), _operand(shape, rng)
        out = torch.add(a, b)
        if list(out.shape) != shape or (list(a.shape) == shape and list(b.shape) == shape):
            continue  # a fast setup may apply: not this function's case
        assert tensor_iterator_strides(tuple(shape), [(tuple(t.shape), t.stride()) for t in (a, b)]) == out.stride(), \
            f"{shape}: {a.shape} {a.stride()} + {b.shape} {b.stride()}"
        checked += 1
    assert checked > 100


def _odd(shape, strides):
    return torch.randn(shape).as_strided(shape, strides)


@pytest.mark.parametrize("executors", [None, ["inductor", "torch"]], ids=["torch", "inductor"])
@pytest.mark.parametrize("case", ["neg", "times a number", "sum of two", "where", "sigmoid", "broadcast"])
def test_elementwise_results_have_eagers_strides_of_extents_of_one(case, executors):
    """A ``(1, 5, 1, 1)`` input with strides ``(5, 1, 5, 1)`` is contiguous by torch's test: ``-x`` is ``(5, 1, 1,
    1)`` on the CPU (the fast setup), ``x * 2`` keeps ``(5, 1, 5, 1)`` (a number is an operand: no fast setup), and a
    ``where`` of such a result orders its dimensions by them (fused relayout nn 13839)."""
    fns = {
        "neg": lambda x: -x,
        "times a number": lambda x: x * 2,
        "sum of two": lambda x: x + x.exp(),
        "where": lambda x: torch.where(-x >= 0, torch.randn(1, 1, 3)[..., :3], x),
        "sigmoid": lambda x: torch.sigmoid(x) * 1,
        "broadcast": lambda x: torch.where((-x) > 0, x.new_ones(3), -x),
    }
    fn = fns[case]
    x = _odd((1, 5, 1, 1), (5, 1, 5, 1))
    torch.manual_seed(0)
    expected = fn(x)
    torch.manual_seed(0)
    actual = thunder.jit(fn, **({"executors": executors} if executors else {}))(x)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected)


def _any_layout(rng):
    """A tensor of up to 4 dims (extents 0 to 3) laid out in a random order, with gaps, broadcast dims, and arbitrary
    strides (0 too) for extents of one."""
    nd = rng.randint(1, 4)
    shape = [rng.choice([1, 1, 2, 3]) if rng.random() > 0.05 else 0 for _ in range(nd)]
    order = list(range(nd))
    rng.shuffle(order)
    strides, reach = [0] * nd, 1
    for d in order:
        strides[d] = reach
        reach *= max(shape[d], 1) * rng.choice([1, 1, 2])
    strides = [rng.randint(0, 9) if n == 1 and rng.random() < 0.5 else 0 if rng.random() < 0.1 else st
               for n, st in zip(shape, strides)]
    return torch.randn(4 * reach + 64).as_strided(shape, strides)


def test_empty_like_strides_are_atens():
    """ATen's ``empty_like`` keeps a non-overlapping and dense tensor's strides exactly, those of extents of one too;
    torch's meta kernel lays it out afresh (``(4, 3, 1)`` with strides ``(3, 1, 3)``: ``(3, 1, 1)``)."""
    from thunder.driver.kernel_layouts import empty_like_strides

    rng = random.Random(0)
    for _ in range(3000):
        x = _any_layout(rng)
        meta = torch.empty_strided(x.shape, x.stride(), device="meta")
        for memory_format in (torch.preserve_format, torch.contiguous_format):
            expected = torch.empty_like(x, memory_format=memory_format).stride()
            assert empty_like_strides(meta, memory_format) == expected, f"{tuple(x.shape)} {x.stride()} {memory_format}"


_LIKE = {
    "ones_like": lambda x: torch.ones_like(x),
    "zeros_like * 2": lambda x: torch.zeros_like(x) * 2,  # a number is an operand: keeps the strides of extents of 1
    "full_like": lambda x: torch.full_like(x, 3.0),
    "empty_like": lambda x: torch.empty_like(x).fill_(1),
    "rand_like": lambda x: torch.rand_like(x),
    "randint_like": lambda x: torch.randint_like(x, 5),
    "to float64": lambda x: x.to(torch.float64),
    "dropout": lambda x: torch.nn.functional.dropout(x, 0.5),
    "dropout p=1": lambda x: torch.nn.functional.dropout(x, 1.0),
    "torch.dropout": lambda x: torch.dropout(x, 0.25, True),
}


@pytest.mark.parametrize("case", list(_LIKE))
def test_results_allocated_like_an_input_have_eagers_strides(case):
    """The strides a program reads of a result allocated as ``empty_like`` allocates, for inputs of generated layouts
    (the ``*_like`` factories, casts, CPU dropout: ``x * mask``, TensorIterator's fast setup where both are contiguous),
    and a region fusing it returns it so (fused generated program 18637: ``ones_like(x) * 2`` came out ``(3, 1, 1)``
    where eager's is ``(3, 1, 3)``, and an advanced index of it then transposed)."""
    fn = _LIKE[case]
    jfn = thunder.jit(lambda x: fn(x).stride())
    rng = random.Random(1)
    for _ in range(40):
        x = _any_layout(rng)
        assert jfn(x) == fn(x).stride(), f"{tuple(x.shape)} {x.stride()}"


@pytest.mark.parametrize("case", ["ones_like * 2", "rand_like + x"])
def test_fused_results_allocated_like_an_input_have_eagers_strides(case):
    fn = {"ones_like * 2": lambda x: torch.ones_like(x) * 2, "rand_like + x": lambda x: torch.rand_like(x) + x}[case]
    x = _odd((4, 3, 1), (3, 1, 3))
    torch.manual_seed(0)
    expected = fn(x)
    torch.manual_seed(0)
    actual = thunder.jit(fn, executors=["inductor", "torch"])(x)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected)


_FUNCTIONS = {  # torch functions whose kernels lay out their results otherwise than their meta kernels do
    "prelu": lambda x: F.prelu(x, torch.tensor([0.25])),
    "soft_margin_loss": lambda x: F.soft_margin_loss(x, torch.ones_like(x), reduction="none"),
    "huber_loss": lambda x: F.huber_loss(x, x * 2, reduction="none"),
    "mse_loss": lambda x: F.mse_loss(x, x * 2, reduction="none"),
    "l1_loss": lambda x: F.l1_loss(x, x * 2, reduction="none"),
    "binary_cross_entropy_with_logits": lambda x: F.binary_cross_entropy_with_logits(x, x * 0.5, reduction="none"),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, True),
    "sort": lambda x: x.sort(1),
    "polar": lambda x: torch.polar(x.abs(), x),
    "rot90": lambda x: x.rot90(1, (0, 1)),
    "rot90 thrice": lambda x: x.rot90(3, (1, 2)),
    "isinf": torch.isinf,
    "isfinite": torch.isfinite,
    "softsign": F.softsign,
    "hardtanh": F.hardtanh,
    "hardswish": F.hardswish,
    "leaky_relu": F.leaky_relu,
    "nan_to_num": torch.nan_to_num,
    "log_softmax": lambda x: F.log_softmax(x, 1),
    "normalize": lambda x: F.normalize(x, 1.0, 0),
    "flip": lambda x: x.flip(0),
    "tril": torch.tril,
    "normal": lambda x: torch.normal(x, 1.0),
    "poisson": torch.poisson,
    "xlogy of a number": lambda x: torch.xlogy(2.0, x),
    "frexp": torch.frexp,
    "one_hot": lambda x: F.one_hot((x * 3).long(), 3),
    "mvlgamma": lambda x: torch.mvlgamma(x + 1, 1),
    "diag_embed": torch.diag_embed,
    "index_put": lambda x: torch.index_put(x, (torch.tensor([0]),), torch.tensor(1.0)),
    "renorm": lambda x: torch.renorm(x, 2, 0, 1.0),
    "channel_shuffle": lambda x: F.channel_shuffle(x.unsqueeze(0), 1),
    "complex": lambda x: torch.complex(x, x).abs(),
    "deg2rad": torch.deg2rad,
    "rad2deg": torch.rad2deg,
    "ldexp of an integer": lambda x: torch.ldexp(x, torch.tensor(2)),
    "ldexp": lambda x: torch.ldexp(x, x),
    "a power of a number": lambda x: 2 ** x,
}
def _strides_of(fn):
    """A function giving the strides of ``fn``'s result (of each of its results)."""
    def strides(x):
        out = fn(x)
        return [t.stride() for t in ((out,) if isinstance(out, torch.Tensor) else out)]

    return strides


_UNIT_LAYOUTS = [((4, 3, 1), (3, 1, 3)), ((4, 3, 1), (1, 4, 5)), ((1, 4, 3), (7, 1, 4)), ((4, 2, 1), (1, 4, 8)),
                 ((2, 3, 4), (1, 2, 6))]


@pytest.mark.parametrize("case", list(_FUNCTIONS))
def test_results_of_kernels_inside_functions_have_eagers_strides(case):
    """The strides a program reads of results of functions that run kernels other than their meta kernels' (ATen's
    composites, ``empty_like`` and contiguous allocations, TensorIterator's fast setup), for inputs whose extents of
    one have strides that address nothing (kernel_layouts.KernelLayouts)."""
    strides = _strides_of(_FUNCTIONS[case])
    jstrides = thunder.jit(strides)
    for shape, layout in _UNIT_LAYOUTS:
        x = torch.empty_strided(shape, layout).uniform_(0.1, 0.9)
        torch.manual_seed(0)
        expected = strides(x)
        torch.manual_seed(0)
        assert jstrides(x) == expected, f"{shape} {layout}"


def test_an_update_through_a_reshape_of_a_one_hot_of_transposed_indices_reaches_it():
    """``F.one_hot`` writes zeros in contiguous memory and scatters into them whatever the indices' layout; thunder
    took it for laid out as the indices (transposed), so ``reshape`` was a copy to it where eager's is a view, and
    the update through it was lost (a wrong value, found by the layout probe of this file's functions)."""
    def fn(t):
        oh = F.one_hot(t, 3)
        oh.reshape(-1)[0] = 5
        return oh

    t = torch.tensor([[0, 1], [2, 0]]).t()
    assert torch.equal(thunder.jit(fn)(t), fn(t))


def _fft_operand(rng, complex_=False):
    """A tensor of 1 to 4 dims, its dims laid out in a random order, its extents of one given arbitrary strides."""
    shape = [rng.choice([1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
    order = list(range(len(shape)))
    rng.shuffle(order)
    t = torch.randn([shape[d] for d in order], dtype=torch.complex64 if complex_ else torch.float32)
    t = t.permute(*[order.index(d) for d in range(len(shape))])
    if rng.random() < 0.5:
        t = t.as_strided(t.shape, [st if n != 1 else rng.choice([1, 2, 7]) for n, st in zip(t.shape, t.stride())])
    return t


@pytest.mark.parametrize("kernel", ["_fft_c2c", "_fft_r2c", "_fft_c2r"])
def test_cpu_fourier_transform_kernels_are_laid_out_as_atens(kernel):
    """KernelLayouts("cpu") lays out the results of ATen's CPU Fourier transforms as the kernels do ([Note: the
    layouts of CPU Fourier transforms]), where the meta kernels follow cuFFT: random layouts and dimensions."""
    from thunder.driver.kernel_layouts import KernelLayouts

    rng = random.Random(kernel)
    differ_from_meta = 0
    for _ in range(300):
        x = _fft_operand(rng, complex_=kernel != "_fft_r2c")
        dims = sorted(rng.sample(range(x.dim()), rng.randint(1, x.dim())))
        rng.shuffle(dims)
        if kernel == "_fft_c2r" and len(dims) > 1:
            dims = sorted(dims)  # (torch's functions pass them so)
        half = x.shape[dims[-1]]  # a complex-to-real result's last extent n: half is n // 2 + 1
        args = {"_fft_c2c": (dims, 0, rng.random() < 0.5), "_fft_r2c": (dims, 0, rng.random() < 0.5),
                "_fft_c2r": (dims, 0, max(1, 2 * (half - 1) + rng.randint(0, 1)))}[kernel]
        op = getattr(torch.ops.aten, kernel)
        expected = op(x, *args).stride()
        meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        with KernelLayouts("cpu"):
            actual = op(meta, *args).stride()
        assert actual == expected, f"{kernel} of {tuple(x.shape)} {x.stride()} over {dims}"
        try:
            differ_from_meta += op(meta, *args).stride() != expected
        except RuntimeError:  # (torch 2.11's meta kernels fail on some of these layouts)
            differ_from_meta += 1
    if torch.backends.mkl.is_available():
        assert differ_from_meta > 10  # (the meta kernels' own layouts are cuFFT's: the test tells them apart)


_TRANSFORMS = {
    "fft": lambda x: torch.fft.fft(x, dim=0), "ifft": lambda x: torch.fft.ifft(x),
    "rfft": lambda x: torch.fft.rfft(x, dim=0), "irfft": lambda x: torch.fft.irfft(x, dim=0),
    "hfft": lambda x: torch.fft.hfft(x, dim=0), "ihfft": lambda x: torch.fft.ihfft(x), "fftn": torch.fft.fftn,
    "rfftn": torch.fft.rfftn, "irfftn": torch.fft.irfftn, "fft2": lambda x: torch.fft.fft2(x) if x.dim() >= 2 else x,
    "fft of a complex": lambda x: torch.fft.fft(torch.complex(x, x), dim=0),
}


@pytest.mark.parametrize("case", list(_TRANSFORMS))
def test_fourier_transforms_have_eagers_strides(case):
    """The strides a program reads of torch.fft's results on the CPU, inputs laid out every way."""
    fn = _TRANSFORMS[case]

    def strides(x):
        return fn(x).stride()

    jstrides = thunder.jit(strides)
    rng = random.Random(case)
    checked = 0
    for _ in range(16):
        x = _fft_operand(rng)
        try:
            expected = strides(x)
        except RuntimeError:  # (an inverse real transform of one element: none in eager either)
            continue
        assert jstrides(x) == expected, f"{tuple(x.shape)} {x.stride()}"
        checked += 1
    assert checked >= 8


def test_an_update_through_a_reshape_of_a_fourier_transform_reaches_it():
    """``rfftn`` of a contiguous ``(3, 5)`` tensor is contiguous on the CPU, where torch's meta kernel (cuFFT's layout)
    transposes it: thunder took ``reshape`` of it for a copy and lost the update through it (a wrong value)."""
    def fn(x):
        y = torch.fft.rfftn(x)
        y.reshape(-1).add_(1)
        return y

    x = torch.randn(3, 5)
    assert torch.equal(thunder.jit(fn)(x), fn(x))


_CPU_KERNELS = {  # torch functions whose meta kernels lay their results out as the CUDA kernels do
    "svd": lambda x: torch.linalg.svd(x),
    "svd reduced": lambda x: torch.linalg.svd(x[..., :2], full_matrices=False),
    "eig": lambda x: torch.linalg.eig(x),
    "reflection pad 3-D": lambda x: F.pad(x.unsqueeze(0), (1, 1, 1, 1, 0, 0), mode="reflect"),
    "replication pad 3-D": lambda x: F.pad(x.unsqueeze(0), (1, 1, 1, 1, 1, 1), mode="replicate"),
    "bilinear": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "bicubic": lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", antialias=True),
    "trilinear": lambda x: F.interpolate(x.unsqueeze(0), scale_factor=2, mode="trilinear"),
}
_CPU_LAYOUTS = [((1, 3, 3, 3), "contiguous"), ((2, 3, 3, 3), "channels-last"), ((2, 1, 3, 3), "odd strides"),
                ((2, 3, 3, 3), "transposed")]


def _laid_out(shape, how):
    x = torch.randn(shape)
    if how == "channels-last":
        return x.contiguous(memory_format=torch.channels_last)
    if how == "odd strides":
        return x.as_strided(shape, (9, 64, 3, 1))
    return x.transpose(-1, -2) if how == "transposed" else x


@pytest.mark.parametrize("case", list(_CPU_KERNELS))
def test_results_of_kernels_laid_out_otherwise_on_the_cpu_have_eagers_strides(case):
    """torch's meta kernels lay out the vectors of ``svd`` and ``eig`` row-major and a channels-last input's 3-D
    padding contiguous, as CUDA's kernels do; the CPU's are column-major and channels-last (KernelLayouts asks the
    meta kernels for the CPU's layouts); resampling keeps a stride of an extent of one where the CPU's is fresh."""
    strides = _strides_of(_CPU_KERNELS[case])
    jstrides = thunder.jit(strides)
    for shape, how in _CPU_LAYOUTS:
        x = _laid_out(shape, how)
        assert jstrides(x) == strides(x), f"{shape} {how}"


def test_an_update_through_a_reshape_of_svds_vectors_stays_apart():
    """``Vh`` of ``svd`` is column-major on the CPU, so ``reshape`` copies it; thunder took it for row-major (the meta
    kernel's, CUDA's layout), viewed it, and the update through the copy reached ``Vh`` (a wrong value)."""
    def fn(x):
        _, _, vh = torch.linalg.svd(x)
        vh.reshape(-1).mul_(0)
        return vh

    x = torch.randn(2, 3, 3)
    assert torch.equal(thunder.jit(fn)(x), fn(x))


# elementwise kernels that read operands of another dtype than their computation's ([Note: operands cast on the CPU])
_PROMOTING = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "true_divide": torch.true_divide,
    "floor_divide": torch.floor_divide, "remainder": torch.remainder, "eq": torch.eq, "lt": torch.lt,
    "logical_and": torch.logical_and, "maximum": torch.maximum, "atan2": torch.atan2, "copysign": torch.copysign,
    "pow": torch.pow, "clamp": lambda a, b: torch.clamp(a, min=b), "where": lambda a, b: torch.where(a > 0, a, b),
    "plus a number": lambda a, b: a + 2.5, "equal to a number": lambda a, b: a == 2.5, "sin": lambda a, b: a.sin(),
    "sigmoid": lambda a, b: torch.sigmoid(a), "abs": lambda a, b: a.abs(),
}
_DTYPES = [torch.int64, torch.int32, torch.bool, torch.float32, torch.float64, torch.bfloat16]


def _in_dtype(t, dtype):
    """``t``'s layout (strides, offset, storage) in ``dtype``."""
    base = t._base if t._base is not None else t
    base = base > 0 if dtype is torch.bool else base.to(dtype)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


@pytest.mark.parametrize("seed", range(3))
def test_elementwise_results_of_operands_of_mixed_dtypes_have_the_cpu_kernels_strides(seed):
    """The CPU's TensorIterator reads an operand of another dtype than it computes in as a copy (``to``), laid out
    densely in the order of its strides, a broadcast one's telling nothing, and orders the result's dimensions by the
    copy's strides; thunder ordered them by the operand's (an int row broadcast to 3 x 3 divided by a transposed
    int matrix: transposed in thunder, row-major in eager; fused relayout 28670)."""
    rng = random.Random(seed)
    checked = 0
    for _ in range(1500):
        name = rng.choice(list(_PROMOTING))
        a, b = (_in_dtype(_any_layout(rng), rng.choice(_DTYPES)) for _ in range(2))
        try:
            expected = _PROMOTING[name](a, b)
        except RuntimeError:
            continue  # dtypes the kernel refuses
        meta = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in (a, b)]
        with KernelLayouts("cpu"):
            actual = _PROMOTING[name](*meta)
        if expected.numel():
            assert actual.stride() == expected.stride(), \
                f"{name}: {a.dtype} {tuple(a.shape)} {a.stride()}, {b.dtype} {tuple(b.shape)} {b.stride()}"
            checked += 1
    assert checked > 800


@pytest.mark.parametrize("executors", [None, ["inductor", "torch"]], ids=["torch", "inductor"])
def test_an_update_through_a_reshape_of_a_quotient_of_broadcast_integers_reaches_it(executors):
    """``true_divide`` of an int row broadcast to 3 x 3 and a transposed int matrix is row-major on the CPU (the
    broadcast operand's float copy decides), so ``reshape`` views it; thunder took it for transposed, copied, and lost
    the update through the copy (a wrong value); fused, the region wrote the result transposed."""
    def fn(a):
        y = torch.true_divide(a.sum(-1, keepdim=True).expand_as(a), a)
        y.reshape(-1).add_(1)
        return y

    a = torch.randint(1, 5, (3, 3), generator=torch.Generator().manual_seed(0)).mT
    expected = fn(a)
    actual = thunder.jit(fn, **({"executors": executors} if executors else {}))(a)
    assert torch.equal(actual, expected) and actual.stride() == expected.stride()
