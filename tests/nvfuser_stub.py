"""A stand-in for the ``nvfuser`` package: the part of its Python frontend the nvFuser executor uses.

``FusionDefinition`` records what is defined (``define_tensor``, ``define_scalar``, ``fd.ops.<op>``,
``add_output``), and ``execute`` replays the record with torch on the inputs' device. Calls are checked as
nvFuser's bindings check them: operands are Tensors and Scalars of the definition (never plain numbers),
shapes and dims are sequences of ints, dtypes are ``DataType``s, ``ops`` is used inside the ``with`` block
only; each input given to ``execute`` must match its definition (dtype, rank, broadcast and static sizes,
contiguity and stride order as ``compute_tensor_descriptor`` gives them). A random op draws from a CPU
generator seeded with its (rng_seed, rng_offset). Every definition made is appended to ``DEFINITIONS``.
"""
from __future__ import annotations

import enum

import torch
import torch.nn.functional as F

DEFINITIONS: list = []


class DataType(enum.Enum):
    Double = torch.float64
    Float = torch.float32
    Half = torch.float16
    BFloat16 = torch.bfloat16
    Int = torch.int64
    Int32 = torch.int32
    Bool = torch.bool


def compute_tensor_descriptor(sizes, strides):
    """(contiguity, stride_order) in nvFuser's sense: dimensions of non-zero stride ordered outermost first by
    stride (stride-0 ones keep their place); contiguity, in that order, is None for broadcast dimensions (size 1
    or stride 0), else whether the stride is the next inner non-broadcast dimension's extent (1 innermost);
    stride_order[d] counts d's position from the innermost."""
    dims = sorted((d for d in range(len(sizes)) if strides[d] != 0), key=lambda d: -strides[d])
    for d in range(len(sizes)):
        if strides[d] == 0:
            dims.insert(d, d)
    broadcast = [strides[d] == 0 or sizes[d] == 1 for d in dims]
    contiguity = []
    for i, d in enumerate(dims):
        inner = [e for e, b in zip(dims[i + 1:], broadcast[i + 1:]) if not b]
        expected = strides[inner[0]] * sizes[inner[0]] if inner else 1
        contiguity.append(None if broadcast[i] else strides[d] == expected)
    stride_order = [0] * len(sizes)
    for i, d in enumerate(dims):
        stride_order[d] = len(sizes) - 1 - i
    return contiguity, stride_order


class Value:
    """A Tensor or Scalar of a definition: an input (``index`` into the inputs), a constant or an op's result."""

    def __init__(self, fd, kind: str, dtype: DataType | None = None, constant=None):
        self.fd, self.kind, self.dtype, self.constant = fd, kind, dtype, constant


def _is_ints(x) -> bool:
    return isinstance(x, (list, tuple)) and all(type(i) is int for i in x)


_KINDS = {
    "T": lambda fd, x: isinstance(x, Value) and x.fd is fd and x.kind == "T",
    "S": lambda fd, x: isinstance(x, Value) and x.fd is fd and x.kind == "S",
    "V": lambda fd, x: isinstance(x, Value) and x.fd is fd,
    "Ts": lambda fd, x: isinstance(x, (list, tuple)) and all(_KINDS["T"](fd, t) for t in x),
    "ints": lambda fd, x: _is_ints(x),
    "ints?": lambda fd, x: x is None or _is_ints(x),
    "int": lambda fd, x: type(x) is int,
    "dtype": lambda fd, x: isinstance(x, DataType),
}
OPS: dict = {}  # name -> (positional kinds, keyword kinds, number of outputs, impl(*args, device, **kwargs))


def _op(name, kinds, kw_kinds=None, outputs=1):
    def register(impl):
        OPS[name] = (kinds, kw_kinds or {}, outputs, impl)
        return impl

    return register


def _same_type(a, b):
    """The operands of a binary op in their common dtype (a 0-d Scalar does not promote a Tensor of its kind)."""
    dtype, device = torch.result_type(a, b), a.device if a.ndim else b.device
    return a.to(device, dtype), b.to(device, dtype)


def _binary(fn):
    def binary(a, b, device):
        assert a.ndim or b.ndim, "the executor defines no op of two Scalars"
        return fn(*_same_type(a, b))

    return binary


def _prod(a, dims):
    for d in sorted(dims, reverse=True):
        a = a.prod(d)
    return a


for _n in ("abs neg sign exp exp2 expm1 log log1p log2 log10 sin cos tan asin acos atan sinh cosh tanh asinh acosh "
           "atanh sqrt rsqrt reciprocal floor ceil trunc erf erfc erfinv lgamma sigmoid isfinite isnan isinf signbit "
           "bitwise_not").split():
    _op(_n, ("T",))(lambda a, device, _f=getattr(torch, _n): _f(a))
for _n in ("add sub mul div pow atan2 maximum minimum eq ne lt le gt ge bitwise_and bitwise_or bitwise_xor "
           "logical_and logical_or nextafter").split():
    _op(_n, ("V", "V"))(_binary(getattr(torch, _n)))
for _n, _f in {"sum": torch.sum, "max": torch.amax, "min": torch.amin, "prod": _prod}.items():
    _op(_n, ("T", "ints"))(lambda a, dims, device, _f=_f: _f(a, dims))
_op("set", ("T",))(lambda a, device: a.clone())
_op("cast", ("T", "dtype"))(lambda a, dtype, device: a.to(dtype.value))
_op("reshape", ("T", "ints"))(lambda a, shape, device: a.reshape(shape))
_op("permute", ("T", "ints"))(lambda a, dims, device: a.permute(dims))
_op("squeeze", ("T", "ints"))(lambda a, dims, device: a.squeeze(tuple(dims)))
_op("cat", ("Ts", "int"))(lambda ts, dim, device: torch.cat(ts, dim))
_op("pad", ("T", "ints", "S"))(lambda a, widths, value, device: F.pad(a, widths, value=value.item()))
_op("where", ("T", "V", "V"))(lambda p, a, b, device: torch.where(p, *_same_type(a, b)))
_op("var", ("T", "ints", "int"))(lambda a, dims, correction, device: torch.var(a, dims, correction=correction))
_op("var_mean", ("T", "ints", "int"), outputs=2)(
    lambda a, dims, correction, device: torch.var_mean(a, dims, correction=correction))


@_op("broadcast_in_dim", ("T", "ints", "ints"))
def _broadcast_in_dim(a, shape, broadcast_dims, device):
    view = [1] * len(shape)
    for d, s in zip(broadcast_dims, a.shape):
        view[d] = s
    return a.reshape(view).expand(shape)


@_op("slice", ("T", "ints", "ints", "ints?"))
def _slice(a, start, end, strides, device):
    return a[tuple(slice(s, e, st) for s, e, st in zip(start, end, strides or [1] * a.ndim))]


@_op("full", ("ints", "S", "dtype"))
def _full(shape, fill_value, dtype, device):
    return torch.full(shape, fill_value.item(), dtype=dtype.value, device=device)


@_op("iota", ("S", "S", "S", "dtype"))
def _iota(length, start, step, dtype, device):
    n, a, s = length.item(), start.item(), step.item()
    return torch.arange(a, a + n * s, s, dtype=dtype.value, device=device)[:n]


def _generator(seed, offset):
    return torch.Generator().manual_seed((seed.item() * 1_000_003 + offset.item()) % 2**63)


_RANDOM_KW = {"rng_seed": "S", "rng_offset": "S", "dtype": "dtype"}


@_op("uniform", ("S", "S", "ints"), _RANDOM_KW)
def _uniform(lo, hi, shape, device, rng_seed, rng_offset, dtype):
    u = torch.rand(shape, generator=_generator(rng_seed, rng_offset), dtype=dtype.value)
    return (u * (hi.item() - lo.item()) + lo.item()).to(device)


@_op("normal", ("S", "S", "ints"), _RANDOM_KW)
def _normal(mean, std, shape, device, rng_seed, rng_offset, dtype):
    n = torch.randn(shape, generator=_generator(rng_seed, rng_offset), dtype=dtype.value)
    return (n * std.item() + mean.item()).to(device)


class _Ops:
    def __init__(self, fd):
        self._fd = fd

    def __getattr__(self, name):
        if name not in OPS:
            raise AttributeError(f"nvfuser stub: no op {name!r}")
        return lambda *args, **kwargs: self._fd._record(name, args, kwargs)


class FusionDefinition:
    def __init__(self):
        self.inputs: list[Value] = []
        self.records: list = []  # (op name, args, kwargs, result values)
        self.outputs: list[Value] = []
        self.executions = 0
        self._open = False
        self.ops = _Ops(self)
        DEFINITIONS.append(self)

    def __enter__(self):
        self._open = True
        return self

    def __exit__(self, *exc):
        self._open = False

    def _check_open(self):
        if not self._open:
            raise RuntimeError("Attempting to add to a completed definition!")

    def define_tensor(self, shape, contiguity, dtype=DataType.Float, is_cpu=False, stride_order=()):
        self._check_open()
        if not (_is_ints(shape) and all(s >= -1 for s in shape) and isinstance(dtype, DataType)):
            raise TypeError(f"define_tensor: bad shape {shape!r} or dtype {dtype!r}")
        if len(contiguity) != len(shape) or any(c not in (True, False, None) for c in contiguity):
            raise TypeError(f"define_tensor: bad contiguity {contiguity!r}")
        if stride_order and sorted(stride_order) != list(range(len(shape))):
            raise TypeError(f"define_tensor: bad stride_order {stride_order!r}")
        v = Value(self, "T", dtype)
        v.spec = (list(shape), list(contiguity), list(stride_order))
        self.inputs.append(v)
        return v

    def define_scalar(self, value=None, dtype=None):
        self._check_open()
        if value is None or isinstance(value, DataType):  # an input of the fusion
            v = Value(self, "S", value or dtype or DataType.Double)
            self.inputs.append(v)
            return v
        if type(value) not in (bool, int, float) or not (dtype is None or isinstance(dtype, DataType)):
            raise TypeError(f"define_scalar: bad value {value!r} or dtype {dtype!r}")
        dtype = dtype or {bool: DataType.Bool, int: DataType.Int, float: DataType.Double}[type(value)]
        return Value(self, "S", dtype, constant=torch.tensor(value, dtype=dtype.value))

    def add_output(self, value):
        self._check_open()
        if not _KINDS["T"](self, value):
            raise TypeError("add_output: not a Tensor of this definition")
        self.outputs.append(value)

    def _record(self, name, args, kwargs):
        self._check_open()
        kinds, kw_kinds, n_out, _ = OPS[name]
        bad = [a for a, k in zip(args, kinds) if not _KINDS[k](self, a)]
        bad += [f"{k}={v!r}" for k, v in kwargs.items() if k not in kw_kinds or not _KINDS[kw_kinds[k]](self, v)]
        if len(args) != len(kinds) or bad:
            raise TypeError(f"ops.{name}: incompatible arguments {bad or args}")
        outs = tuple(Value(self, "T") for _ in range(n_out))
        self.records.append((name, args, kwargs, outs))
        return outs if n_out > 1 else outs[0]

    def execute(self, inputs, *, device=None):
        if self._open or len(inputs) != len(self.inputs):
            raise RuntimeError(f"execute: {len(inputs)} inputs for a definition of {len(self.inputs)}")
        env = {}
        for v, x in zip(self.inputs, inputs):
            env[id(v)] = self._input(v, x)
        device = torch.device(device) if device is not None else next(t.device for t in inputs)
        resolve = lambda x: (env[id(x)] if x.constant is None else x.constant) if isinstance(x, Value) else (
            [resolve(i) for i in x] if isinstance(x, list) else x)
        for name, args, kwargs, outs in self.records:
            result = OPS[name][3](*map(resolve, args), device=device, **{k: resolve(v) for k, v in kwargs.items()})
            env.update(zip(map(id, outs), result if len(outs) > 1 else (result,)))
        self.executions += 1
        return [env[id(o)] for o in self.outputs]

    @staticmethod
    def _input(v, x):
        if v.kind == "S":
            if type(x) is not int:
                raise RuntimeError(f"execute: Scalar input {x!r} is not an int")
            return torch.tensor(x)
        shape, contiguity, stride_order = v.spec
        ok = isinstance(x, torch.Tensor) and x.dtype == v.dtype.value and x.ndim == len(shape)
        ok = ok and all((s == 1) == (n == 1) and s in (-1, 1, n) for s, n in zip(shape, x.shape))
        if not ok or [contiguity, stride_order] != list(compute_tensor_descriptor(tuple(x.shape), x.stride())):
            raise RuntimeError(f"execute: input {type(x).__name__} does not match its definition {v.spec}")
        return x
