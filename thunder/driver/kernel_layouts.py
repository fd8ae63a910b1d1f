"""Where torch's meta kernels lay out a result otherwise than the kernels that run.

Layouts (thunder/driver/layouts.py) computes the strides of a traced tensor by running its operation on meta tensors
laid out as the operands. For the operations below, torch 2.13's meta kernel lays out the result otherwise than the
CPU kernel (and, for the elementwise ones, the CUDA kernel: both follow TensorIterator's rule), which the strides a
program reads, whether a later ``reshape`` views or copies, and so whether an in-place update of it writes back,
depend on. Each rule gives the strides the kernel gives, or None to keep the meta kernel's.
``tests/test_ops.py::test_op_output_layouts_follow_eager`` compares every op's strides with eager's on operands laid
out transposed.
"""
from __future__ import annotations

import contextlib
import math
from numbers import Number

import torch
import torch.nn.functional as F
import torch.utils._python_dispatch
from torch._prims_common import compute_elementwise_output_strides, suggest_memory_format
from torch.utils._pytree import tree_leaves

# torch callable -> rule(shape, output proxy, args, kwargs) -> strides or None; args: meta tensors laid out as the
# operands, and numbers given values; ``shape``: the output's, run-time extents given values
RULES: dict = {}


def rule(*fns):
    def register(r):
        for fn in fns:
            RULES[fn] = r
        return r

    return register


def strides(fn, shape: tuple, out, args, kwargs, source=None):
    """The strides of ``out`` (of ``shape``: run-time extents given values), or None: the meta kernel's. ``source``:
    the traced tensor the operation reads first."""
    r = RULES.get(fn)
    if r is None:
        return None
    return r(tuple(shape), out, args, kwargs, source) if r is conversion else r(tuple(shape), out, args, kwargs)


# [Note: TensorIterator's fast setup]
# An elementwise kernel whose tensor operands all have the result's shape and are all contiguous (or all
# channels-last), by torch's test that ignores the strides of extents of one, allocates its result with the standard
# strides of that format; the meta kernels keep an operand's strides, those of extents of one too (``-t`` of a
# ``(1, 5, 1, 1)`` tensor with strides ``(5, 1, 5, 1)``: ``(5, 1, 1, 1)`` on the CPU, ``(5, 1, 5, 1)`` on meta). Those
# strides address nothing, but the next kernel's TensorIterator orders dimensions by them (a ``torch.where`` of it
# and a broadcast operand came out with dims 1 and 3 swapped: fused relayout nn 13839). A Python number is an operand
# of the arithmetic, comparison and bitwise kernels (a wrapped 0-dim tensor: no fast setup), a parameter of the
# others (``clamp``'s bounds, ``pow``'s exponent).
_NUMBERS_ARE_OPERANDS = frozenset({
    "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge",
    "where", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "copysign",
    "rsub", "rdiv", "rfloordiv", "rmod", "rpow", "logical_and", "logical_or", "logical_xor", "atan2", "hypot",
    "maximum", "minimum", "nextafter", "float_power", "xlogy", "special_xlogy", "special_xlog1py", "xlog1py",
    "special_zeta", "zeta"})
# [Note: operands cast on the CPU]
# On the CPU, TensorIterator replaces an operand of another dtype than the one its kernel computes in by a copy in
# that dtype (``to``: laid out as the operand where that is dense, else densely in the order of its strides, a
# broadcast operand's stride 0 telling nothing), before it takes its fast setup or orders the dimensions, which the
# copy's strides then decide (``int_row.expand(3, 3) / int_t`` of a transposed ``int_t``: row-major, where the same
# operands of one dtype give the transposed order; fused relayout 28670). CUDA's kernels cast as they read: no copy.
# The kernels that promote their operands to a common dtype: the binary and comparison ones, ``where``'s two values,
# and the unary kernels that compute an integer operand in floating point.
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"})
_PROMOTING = _NUMBERS_ARE_OPERANDS | frozenset({"pow", "clamp", "clamp_min", "clamp_max", "fmax", "fmin", "logaddexp",
                                                "logaddexp2", "igamma", "igammac", "addcmul", "addcdiv"})


def _as_cast_on_the_cpu(name: str, out_dtype, args, operands: list) -> list:
    """``operands`` as the CPU kernel ``name`` reads them (see [Note: operands cast on the CPU])."""
    first, common = 0, out_dtype  # the first operand cast, and the dtype
    if name == "where":  # the condition is read as it is; the two values in the result's dtype
        first = 1
    elif name in _COMPARISONS:  # a boolean result of operands compared in their common dtype
        values = [x for x in args if isinstance(x, (torch.Tensor, Number))]
        common = torch.result_type(*values[:2]) if len(values) >= 2 else out_dtype
    elif name not in _PROMOTING and not (len(operands) == 1 and out_dtype.is_floating_point and not (
            operands[0].dtype.is_floating_point or operands[0].dtype.is_complex)):  # (``sin`` of integers)
        return operands
    return operands[:first] + [t.to(common) if t.dtype != common and t.ndim else t for t in operands[first:]]


def _tensor_iterator_layout(name: str, shape: tuple, strides: tuple, args, kwargs, out_dtype=None,
                            device_type: str = "cpu") -> tuple:
    """The strides TensorIterator gives the result of the elementwise kernel ``name`` of ``args``: its fast setup
    where every operand has the result's shape, else ``tensor_iterator_strides``; ``strides`` (the meta kernel's)
    where an operand has more dimensions than the result. ``out_dtype``: the result's (on the CPU, operands of
    another dtype are read as copies: [Note: operands cast on the CPU])."""
    operands = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    if name == "rsub":  # ``other - self``: TensorIterator's operands in that order
        operands.reverse()
    if device_type == "cpu" and out_dtype is not None and operands:
        operands = _as_cast_on_the_cpu(name, out_dtype, args, operands)
    if not operands or any(len(t.shape) > len(shape) for t in operands):
        return strides
    numbers = name in _NUMBERS_ARE_OPERANDS and any(isinstance(x, Number) for x in args)
    if not numbers and all(tuple(t.shape) == shape for t in operands):
        if all(t.is_contiguous() for t in operands):
            return _contiguous(shape)
        channels_last = _CHANNELS_LAST.get(len(shape))
        if channels_last is not None and all(t.is_contiguous(memory_format=channels_last) for t in operands):
            return _contiguous(shape, channels_last)
        if all(non_overlapping_and_dense(tuple(t.shape), tuple(t.stride())) for t in operands) and \
                len({tuple(t.stride()) for t in operands}) == 1:
            return tuple(operands[0].stride())
    return tensor_iterator_strides(shape, [(tuple(t.shape), tuple(t.stride())) for t in operands])


# [Note: kernels inside composite operations]
# A torch function that decomposes (``F.softsign``: ``x / (1 + x.abs())``; ``isfinite``; the losses of reduction
# "none") runs ATen kernels one after the other, each laying out its result from its operands'. Run on meta tensors,
# each is laid out by its meta kernel, which keeps an operand's strides of extents of one where TensorIterator's fast
# setup gives standard ones, and the next kernel orders its dimensions by them. ``KernelLayouts`` restrides each
# ATen kernel's meta result as the CPU and CUDA kernels lay it out: elementwise kernels (torch's ``pointwise`` tag) as
# TensorIterator does, and those below by their own rules. The answers of a whole function (``RULES``) come first.

# ``empty_like(self)``, then the kernel writes into it (its strides exactly, where the meta kernel's are another's),
# every output of the input's shape (``sort``'s values and indices)
_ATEN_EMPTY_LIKE = frozenset({"hardtanh", "nan_to_num", "binary_cross_entropy", "flip", "huber_loss", "_prelu_kernel",
                              "sort", "frexp", "index_put", "deg2rad", "rad2deg"})
_ATEN_LIKE_FACTORIES = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
                                  "randint_like"})
# a contiguous result whatever the input's layout (a vector norm's too over extents of one, where the meta kernel
# takes the absolute values)
_ATEN_CONTIGUOUS = frozenset({"tril", "triu", "masked_fill", "_softmax", "_log_softmax", "linalg_vector_norm",
                              "normal", "poisson", "renorm", "mvlgamma"})
# TensorIterator's kernels without the ``pointwise`` tag (``leaky_relu`` lacks it in torch 2.11)
_ATEN_TENSOR_ITERATOR = frozenset({"rsub", "floor_divide", "hardswish", "leaky_relu", "mse_loss", "smooth_l1_loss",
                                   "polar", "complex"})
# kernels with the tag that are not TensorIterator's (the input itself, a copy laid out as the input)
_ATEN_NOT_TENSOR_ITERATOR = frozenset({"positive", "_to_copy", "clone", "lift_fresh", "alias"})


def _isinf(x):  # ATen's: an integer tensor's zeros_like, else ``abs(x) == inf``
    if not x.dtype.is_floating_point:
        return empty_like_strides(x)
    return tuple((x.abs() == math.inf).stride())


def _isfinite(x):  # ATen's: an integer tensor's ones_like, else ``(x == x) * (abs(x) != inf)``
    if not x.dtype.is_floating_point:
        return empty_like_strides(x)
    return tuple(((x == x) * (x.abs() != math.inf)).stride())


def _binary_cross_entropy_with_logits(x, target, *args, **kwargs):  # ``(1 - target)``: empty_like(target), filled
    return empty_like_strides(target)


def _soft_margin_loss(x, *args, **kwargs):  # ``neg(x)``, then updated in place
    return tuple((-x).stride())


def _rot90(x, k=1, dims=(0, 1)):  # flips and a transpose, or a contiguous clone
    k, (d0, d1) = k % 4, dims
    if k == 0:
        return _contiguous(tuple(x.shape))
    return tuple((x.flip(dims) if k == 2 else x.flip((d1 if k == 1 else d0,)).transpose(d0, d1)).stride())


def _ldexp(x, other):
    """Of an integer exponent, ``empty_like(x)`` written by a kernel of its own (where the result has ``x``'s shape);
    else ``x * 2 ** other``."""
    if x.dtype.is_floating_point and not (other.dtype.is_floating_point or other.dtype.is_complex) and \
            torch.broadcast_shapes(x.shape, other.shape) == x.shape:
        return empty_like_strides(x)
    return tuple((x * torch.pow(2.0, other)).stride())


# ATen's composites (one operation to torch's dispatcher, several kernels inside): the strides of their result from
# those kernels, run on meta tensors under ``KernelLayouts``
_ATEN_COMPOSITES = {"isinf": _isinf, "isfinite": _isfinite, "soft_margin_loss": _soft_margin_loss, "rot90": _rot90,
                    "binary_cross_entropy_with_logits": _binary_cross_entropy_with_logits, "ldexp": _ldexp}


# [Note: the layouts of CPU Fourier transforms]
# torch's meta kernels for ``_fft_r2c``, ``_fft_c2r`` and ``_fft_c2c`` lay a meta tensor's result out as cuFFT does
# (the meta device stands for CUDA there). The CPU kernels (MKL's) run one batched transform: the dimensions not
# transformed become one batch dimension, ordered by the input's strides (largest first; ties in the order
# ``std::partition`` left them), the transformed ones follow in the order the kernel transforms them, and the result
# is dense in that order. A complex-to-complex transform orders the transformed dimensions by the input's strides too,
# a real-to-complex one all but the last, which stays last; a complex-to-real one over several dimensions is first a
# complex-to-complex one over all but the last, then a complex-to-real one over the last. Without MKL (PocketFFT) the
# results are contiguous. ``rfftn`` of a contiguous ``(3, 5)`` tensor: ``(3, 1)`` on the CPU, ``(1, 3)`` on meta; a
# ``reshape`` of it is a view in eager, which an update through it must reach.
def _fft_result(x, out_shape: tuple, dims, dtype) -> torch.Tensor:
    """The meta result of a transform over ``dims`` (in the kernel's order) of ``x``, of ``out_shape``."""
    return torch.empty_strided(out_shape, _fft_strides(x, out_shape, dims), dtype=dtype, device="meta")


def _fft_strides(x, out_shape: tuple, dims) -> tuple:
    if not torch.backends.mkl.is_available():
        return _contiguous(out_shape)
    batch = sorted(_partitioned(list(range(x.dim())), lambda d: d not in dims), key=lambda d: -x.stride(d))
    strides, step = [0] * x.dim(), 1
    for d in reversed(dims):  # the transformed dimensions, contiguous
        strides[d] = step
        step *= max(out_shape[d], 1)
    for d in reversed(batch):  # then the batch, from the input's innermost dimension out
        strides[d] = step
        step *= out_shape[d]
    return tuple(strides)


def _partitioned(items: list, pred) -> list:
    """The items for which ``pred`` holds, in the order libstdc++'s ``std::partition`` leaves them (ATen's CPU build):
    scanning from both ends and swapping, not stable (``[0, 1, 2]`` without ``0``: ``[2, 1]``). Ties in the sort by
    stride that follows keep this order."""
    first, last = 0, len(items)
    while True:
        while first != last and pred(items[first]):
            first += 1
        if first == last:
            return items[:first]
        last -= 1
        while first != last and not pred(items[last]):
            last -= 1
        if first == last:
            return items[:first]
        items[first], items[last] = items[last], items[first]
        first += 1


def _by_stride(x, dims) -> list:
    return sorted(dims, key=lambda d: -x.stride(d))


def _fft_c2c(x, dim, normalization, forward):
    return _fft_result(x, tuple(x.shape), _by_stride(x, dim), x.dtype) if dim else x.clone()


def _fft_r2c(x, dim, normalization, onesided):
    shape = list(x.shape)
    if onesided:
        shape[dim[-1]] = shape[dim[-1]] // 2 + 1
    return _fft_result(x, tuple(shape), _by_stride(x, dim[:-1]) + [dim[-1]], x.dtype.to_complex())


def _fft_c2r(x, dim, normalization, last_dim_size):
    if len(dim) > 1:  # a complex-to-complex transform first, then the last dimension's
        x = _fft_c2c(x, dim[:-1], normalization, False)
    shape = list(x.shape)
    shape[dim[-1]] = last_dim_size
    return _fft_result(x, tuple(shape), [dim[-1]], x.dtype.to_real())


def _pow(func, base, exponent):
    """``pow(2, t)`` writes a contiguous result on the CPU, whatever the exponent's layout."""
    if not isinstance(base, Number):
        return None
    out = func(base, exponent)
    return torch.empty(out.shape, dtype=out.dtype, device="meta")


def _suggested(func, x, *args, **kwargs):
    """A fresh result in the memory format ATen suggests for the input: the CPU's resampling and 3-D padding kernels
    (the meta kernels' decompositions keep a stride of an extent of one, or lay a channels-last input's 3-D padding
    out contiguous)."""
    out = func(x, *args, **kwargs)
    return torch.empty(out.shape, dtype=out.dtype, device="meta", memory_format=suggest_memory_format(x))


# kernels laid out otherwise on the CPU than on CUDA, which their meta kernels follow: func, its arguments -> result,
# or None: not this case
_ATEN_CPU_KERNELS = {"_fft_c2c": lambda func, *a: _fft_c2c(*a), "_fft_r2c": lambda func, *a: _fft_r2c(*a),
                     "_fft_c2r": lambda func, *a: _fft_c2r(*a), "pow": _pow,
                     **dict.fromkeys(("upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d",
                                      "upsample_bicubic2d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa",
                                      "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
                                      "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
                                      "_upsample_nearest_exact3d", "reflection_pad3d", "replication_pad3d"),
                                     _suggested)}


@contextlib.contextmanager
def _meta_kernels_of(device_type: str):
    """torch's meta kernels that lay out a result otherwise on the CPU than on CUDA (the vectors of ``linalg_eig`` and
    ``_linalg_svd`` are column-major on the CPU, row-major on CUDA) ask ``device_hint`` which, and it answers CUDA for
    a meta tensor: for the CPU's, it answers CPU."""
    hint = getattr(torch._meta_registrations, "device_hint", None)
    if device_type != "cpu" or hint is None:
        yield
        return
    torch._meta_registrations.device_hint = lambda t: t.fake_device.type \
        if isinstance(t, torch._subclasses.FakeTensor) else "cpu"
    try:
        yield
    finally:
        torch._meta_registrations.device_hint = hint


class KernelLayouts(torch.utils._python_dispatch.TorchDispatchMode):
    """Meta kernels whose results are laid out as the kernels that run on ``device_type`` lay them out (see [Note:
    kernels inside composite operations])."""

    def __init__(self, device_type: str = "cpu"):
        super().__init__()
        self.device_type = device_type

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if self.device_type == "cpu" and name in _ATEN_CPU_KERNELS and "out" not in func._overloadname:
            # (the meta kernel not run first: torch 2.11's Fourier transforms fail on some layouts)
            out = _ATEN_CPU_KERNELS[name](func, *args, **kwargs)
            if out is not None:
                return out
        with _meta_kernels_of(self.device_type):
            out = func(*args, **kwargs)
        if func._schema.is_mutable:
            return out
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if isinstance(out, tuple):  # (``sort``: values and indices)
            if name not in _ATEN_EMPTY_LIKE or x is None:
                return out
            return tuple(self._laid_out(o, empty_like_strides(x)) if isinstance(o, torch.Tensor)
                         and tuple(o.shape) == tuple(x.shape) else o for o in out)
        if not isinstance(out, torch.Tensor):
            return out
        shape = tuple(out.shape)
        same_shape = x is not None and tuple(x.shape) == shape
        if name in _ATEN_EMPTY_LIKE:
            strides = empty_like_strides(x) if same_shape else None
        elif name in _ATEN_LIKE_FACTORIES:
            memory_format = kwargs.get("memory_format") or torch.preserve_format
            strides = empty_like_strides(x, memory_format) if same_shape and x.layout == torch.strided else None
        elif name in _ATEN_CONTIGUOUS:
            strides = _contiguous(shape)
        elif name in _ATEN_COMPOSITES:
            if x is None:
                return out
            with KernelLayouts(self.device_type):
                strides = _ATEN_COMPOSITES[name](*args, **kwargs)
            strides = strides if len(strides) == len(shape) else None
        elif name in _ATEN_TENSOR_ITERATOR or (torch.Tag.pointwise in func.tags
                                               and name not in _ATEN_NOT_TENSOR_ITERATOR):
            strides = _tensor_iterator_layout(name, shape, tuple(out.stride()), args, kwargs, out.dtype,
                                              self.device_type)
        else:
            return out
        return self._laid_out(out, strides)

    @staticmethod
    def _laid_out(out, strides):
        if strides is None or tuple(strides) == tuple(out.stride()) or out.device.type != "meta":
            return out
        return torch.empty_strided(out.shape, strides, dtype=out.dtype, device="meta")


def tensor_iterator_strides(shape: tuple, operands: list) -> tuple:
    """The strides TensorIterator allocates an elementwise result of ``shape`` with, from its operands' (shape,
    strides), when it takes no fast setup: the dimensions ordered by the operands' strides (the first operand that
    tells two apart decides; broadcast dimensions tell nothing; of equal strides the smaller extent is the faster),
    the result dense in that order (ATen's ``reorder_dimensions`` and ``compatible_stride``)."""
    ndim = len(shape)
    if ndim == 0:
        return ()
    broadcast = []
    for op_shape, op_strides in operands:
        offset = ndim - len(op_shape)
        st = [0] * offset + [0 if n == 1 and shape[offset + i] != 1 else s
                             for i, (n, s) in enumerate(zip(op_shape, op_strides))]
        broadcast.append(st)

    def should_swap(d0, d1):
        for st in broadcast:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # fastest first
    if ndim > 1:
        for i in range(1, ndim):
            d1 = i
            for d0 in range(i - 1, -1, -1):
                c = should_swap(perm[d0], perm[d1])
                if c > 0:
                    perm[d0], perm[d1] = perm[d1], perm[d0]
                    d1 = d0
                elif c < 0:
                    break
    out, step = [0] * ndim, 1
    for d in perm:
        out[d] = step
        step *= shape[d]
    return tuple(out)


def _contiguous(shape, memory_format=torch.contiguous_format) -> tuple:
    return torch.empty(shape, device="meta", memory_format=memory_format).stride()


def non_overlapping_and_dense(shape, strides) -> bool:
    """ATen's test (``TensorImpl::is_non_overlapping_and_dense``): some order of the dimensions of two or more elements
    is contiguous; the strides of extents of one, a stride 0 there too, do not count (torch's Python test counts
    them)."""
    if math.prod(shape) < 2:
        return True
    order = sorted((st, n) for n, st in zip(shape, strides) if n >= 2)
    expected = 1
    for st, n in order:
        if st != expected:
            return False
        expected *= n
    return True


def empty_like_strides(x: torch.Tensor, memory_format=torch.preserve_format) -> tuple:
    """The strides ATen's ``empty_like`` gives a tensor like ``x`` (CPU and CUDA; the ``*_like`` factories, casts and
    copies allocate so): ``preserve_format`` keeps the strides of a non-overlapping and dense ``x`` exactly, those of
    extents of one too, where the meta kernel lays it out afresh in the order of its dimensions (``(4, 3, 1)`` with
    strides ``(3, 1, 3)``: ``(3, 1, 1)`` on meta; a ``mul`` of it by a number then follows those: fused generated
    program 18637). Otherwise the meta kernel's (ATen's ``infer_dense_strides``, the same order)."""
    if memory_format is torch.preserve_format and non_overlapping_and_dense(tuple(x.shape), tuple(x.stride())):
        return tuple(x.stride())
    return tuple(torch.empty_like(x, memory_format=memory_format).stride())




@rule(F.logsigmoid, F.rrelu, torch.rrelu, torch.isin, F.layer_norm, torch.layer_norm, torch.native_layer_norm)
def contiguous_on_cpu(shape, out, args, kwargs):
    """Also layer norm's results: a fresh contiguous tensor, where the meta kernel keeps an input's strides of extents
    of one (``(1, 1, 4)`` with strides ``(4, 1, 1)``), which a convolution reading it would see."""
    return _contiguous(shape) if out.device.type == "cpu" else None


@rule(F.one_hot, torch.diag_embed, torch.Tensor.diag_embed)
def contiguous(shape, out, args, kwargs):
    """Results their kernels write into fresh contiguous memory (``zeros`` then a scatter or a diagonal), where
    torch's meta kernels follow the input's layout."""
    return _contiguous(shape)


@rule(F.max_pool1d, torch.max_pool1d)
def max_pool1d(shape, out, args, kwargs):
    """As ``suggested_by_the_input`` where autograd does not record it; where it does, ATen's ``max_pool1d`` runs
    ``max_pool1d_with_indices``, which lays its result out as the meta kernel does (following a transposed input: a
    ``reshape`` of it then copies, where thunder took it for a view, relayout nn 31774)."""
    return None if out.requires_grad else suggested_by_the_input(shape, out, args, kwargs)


@rule(F.group_norm, torch.group_norm, torch.native_group_norm, F.pixel_shuffle, torch.pixel_shuffle,
      F.channel_shuffle, torch.channel_shuffle, torch.native_channel_shuffle)
def suggested_by_the_input(shape, out, args, kwargs):
    """The CPU kernels lay out their result as ATen suggests for the input (channels-last, else contiguous)."""
    if out.device.type != "cpu" or not isinstance(args[0], torch.Tensor):
        return None
    return _contiguous(shape, suggest_memory_format(args[0]))


_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


@rule(F.batch_norm, torch.batch_norm, torch.native_batch_norm)
def batch_norm(shape, out, args, kwargs):
    """The CPU kernel lays out its result contiguous where the input is contiguous, else channels-last where the input
    is that (both ignoring the strides of extents of one: ``(1, 3, 1, 2)`` with strides ``(6, 1, 1, 3)`` is
    channels-last, where ATen's suggestion is contiguous), else as ATen suggests."""
    x = args[0]
    if out.device.type != "cpu" or not isinstance(x, torch.Tensor) or len(shape) != x.dim():
        return None
    if x.is_contiguous():
        return _contiguous(shape)
    channels_last = _CHANNELS_LAST.get(x.dim())
    if channels_last is not None and x.is_contiguous(memory_format=channels_last):
        return _contiguous(shape, channels_last)
    return _contiguous(shape, suggest_memory_format(x))


@rule(torch.conv1d, torch.conv2d, F.conv1d, F.conv2d, torch.conv_transpose1d, torch.conv_transpose2d,
      F.conv_transpose1d, F.conv_transpose2d)
def convolution(shape, out, args, kwargs):
    """CPU convolutions, transposed ones too, of float tensors (oneDNN; float64's kernels alike) are channels-last
    where the input or the weight suggests it, else contiguous; a 1-D one is run as 2-D on both unsqueezed, the input
    made contiguous first (a no-op where it already is, as for a length of one whatever its stride: then its
    unsqueezed layout may suggest channels-last); an unbatched one as a batch of one."""
    x, w = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
    if out.device.type != "cpu" or not isinstance(w, torch.Tensor) or w.dim() not in (3, 4) or x.dtype not in (
            torch.float32, torch.bfloat16, torch.float16, torch.float64):
        return None
    if len(shape) == w.dim() - 1:  # unbatched
        batched = convolution((1,) + shape, out, (x.unsqueeze(0), w, *args[2:]), kwargs)
        return None if batched is None else batched[1:]
    if w.dim() == 3:
        x = x if x.is_contiguous() else x.contiguous()
        if torch.channels_last not in (suggest_memory_format(x.unsqueeze(2)), suggest_memory_format(w.unsqueeze(2))):
            return _contiguous(shape)
        n, c, length = shape
        s = _contiguous((n, c, 1, length), torch.channels_last)
        return (s[0], s[1], s[3])
    channels_last = torch.channels_last in (suggest_memory_format(x), suggest_memory_format(w))
    return _contiguous(shape, torch.channels_last if channels_last else torch.contiguous_format)


@rule(torch.Tensor.to, torch.Tensor.type)
def conversion(shape, out, args, kwargs, source):
    """A cast or a copy is laid out as ``empty_like`` lays it out (the meta kernel cannot copy to a device, nor read a
    type's name); where nothing changes, the result is the input itself."""
    x = args[0]
    memory_format = kwargs.get("memory_format", torch.preserve_format)
    unchanged = source is not None and out.dtype == source.dtype and out.device == source.device
    if unchanged and not kwargs.get("copy") and memory_format is torch.preserve_format:
        return tuple(x.stride())
    return empty_like_strides(x, memory_format)


@rule(torch.Tensor.__getitem__)
def advanced_indexing(shape, out, args, kwargs):
    """``x[key]`` with integer index tensors (or lists): torch views ``x`` by the rest of the key, then ATen's ``index``
    gathers, laying out its result as TensorIterator does for the view restrided (the indexed dimensions replaced by
    the indices' broadcast shape, stride 0) and the index tensors reshaped to match, where the meta kernel's result
    is contiguous: a transposed ``x`` or index tensor gives a transposed result."""
    try:
        return _index_strides(shape, args[0], args[1])
    except (RuntimeError, IndexError, ValueError, TypeError):  # a key eager rejects too: the meta kernel's error
        return None


def _index_strides(shape, x, key):
    key = key if isinstance(key, tuple) else (key,)
    key = tuple(torch.tensor(k) if _int_list(k) else k for k in key)
    if not isinstance(x, torch.Tensor) or not any(isinstance(k, torch.Tensor) for k in key):
        return None
    consumed = 0
    for k in key:
        if isinstance(k, torch.Tensor):
            if k.dtype in (torch.bool, torch.uint8) or k.dim() == 0 or k.is_floating_point() or k.is_complex():
                return None  # masks (data-dependent, strides set elsewhere) and 0-dim indices (taken as numbers)
            consumed += 1
        elif isinstance(k, (int, slice)) and not isinstance(k, bool):
            consumed += 1
        elif k is not None and k is not Ellipsis:
            return None
    view_key, positions, dim = [], [], 0
    for k in key:
        if isinstance(k, torch.Tensor):
            positions.append(dim)
            view_key.append(slice(None))
            dim += 1
            continue
        view_key.append(k)
        if k is Ellipsis:
            dim += x.dim() - consumed
        elif k is None or isinstance(k, slice):
            dim += 1
    src = x[tuple(view_key)]
    indices = [k for k in key if isinstance(k, torch.Tensor)]
    common = torch.broadcast_shapes(*(i.shape for i in indices))
    indices = [i.expand(common) for i in indices]
    if positions != list(range(positions[0], positions[-1] + 1)):  # apart: ATen moves the indexed dimensions first
        src = src.permute(positions + [d for d in range(src.dim()) if d not in positions])
        first = 0
    else:
        first = positions[0]
    after = src.dim() - first - len(positions)
    full = (*src.shape[:first], *common, *src.shape[first + len(positions):])
    strides = (*src.stride()[:first], *(0,) * len(common), *src.stride()[first + len(positions):])
    restrided = src.as_strided(full, strides, src.storage_offset())
    operands = [restrided] + [i.reshape((1,) * first + tuple(common) + (1,) * after).expand(full) for i in indices]
    result = compute_elementwise_output_strides(*operands)
    return tuple(result) if tuple(full) == tuple(shape) else None


def _int_list(k) -> bool:
    return type(k) is list and len(k) > 0 and all(type(v) is int for v in k)


@rule(F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
def attention(shape, out, args, kwargs):
    """CPU attention: where torch picks its flash kernel, the result is laid out as ``empty_like`` lays out the query
    (chunks of a permuted projection, timm's CPUBone: heads before positions in memory), where the meta kernel's is
    contiguous. The choice reads the operands' shapes, strides and dtypes: asked of uninitialized CPU tensors laid
    out as them (the meta device picks otherwise)."""
    if out.device.type != "cpu":
        return None
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
    bound = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names + ("scale", "enable_gqa")}
    q = bound.get("query")
    if not isinstance(q, torch.Tensor) or any(isinstance(x, torch.Tensor) and any(
            type(s) is not int for s in x.shape) for x in bound.values()):
        return None

    def real(x):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype) if isinstance(x, torch.Tensor) else x

    try:
        choice = torch._fused_sdp_choice(*(real(bound.get(n)) for n in ("query", "key", "value", "attn_mask")),
                                         bound.get("dropout_p", 0.0), bound.get("is_causal", False),
                                         scale=bound.get("scale"), enable_gqa=bound.get("enable_gqa", False))
    except Exception:  # noqa: BLE001 - operands eager rejects: the meta kernel's error
        return None
    if choice != int(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        return None
    return empty_like_strides(q)
