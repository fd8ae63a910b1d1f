"""The generic fallback for torch operations the torch language does not define.

An operation without a thunder definition is still traced: its output metadata comes from torch's
own meta kernels, the torch executor runs the torch callable itself, and autodiff differentiates it
with torch's autograd. So an unusual op costs a little readability, never the whole model. An op
whose output shape depends on tensor values (``nonzero``, ``unique``, ``masked_select``, ...) gets
run-time extents from torch's fake tensors (see [Note: fallback metadata with run-time extents]).
See [Note: in-place fallback] for operations that update a tensor.
"""
from __future__ import annotations

import functools
import operator
import re

import torch

from thunder.core.extents import is_symbolic_shape
from thunder.core.proxies import TensorProxy, NumberProxy, known_value, tensor_value
from thunder.core.pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten
from thunder.core.symbol import Symbol, Tag
from thunder.core.trace import get_tracectx
from thunder.torch.registry import property_key, signature_of

_NAMESPACES = (("torch.nn.functional", torch.nn.functional), ("torch.special", torch.special),
               ("torch.linalg", torch.linalg), ("torch.fft", torch.fft), ("torch", torch))

_RANDOM_NAMES = frozenset({"bernoulli", "multinomial", "normal", "poisson", "rand", "randn", "randint", "randperm",
                           "rand_like", "randn_like", "randint_like", "dropout", "alpha_dropout", "feature_alpha_dropout",
                           "dropout1d", "dropout2d", "dropout3d", "rrelu", "exponential_", "geometric_", "uniform_",
                           "normal_", "random_", "cauchy_", "log_normal_", "bernoulli_", "gumbel_softmax",
                           "dropout_", "alpha_dropout_", "feature_dropout_", "feature_alpha_dropout_", "rrelu_",
                           "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
                           "orthogonal_", "sparse_"})
# torch functions whose tensors are made of Python data in host memory (Tag.HOST_DATA)
_HOST_DATA_NAMES = frozenset({"tensor", "as_tensor", "asarray", "from_numpy", "frombuffer"})


def _tags_of(fn) -> tuple:
    name = getattr(fn, "__name__", "")
    return (Tag.RANDOM,) * (name in _RANDOM_NAMES) + (Tag.HOST_DATA,) * (name in _HOST_DATA_NAMES)


_PATHS: dict[int, str] | None = None


def _build_paths() -> dict[int, str]:
    paths: dict[int, str] = {}
    for path, ns in reversed(_NAMESPACES):  # earlier namespaces win: torch.nn.functional.linear over torch.linear
        for name in dir(ns):
            if name.startswith("__"):
                continue
            obj = getattr(ns, name, None)
            if callable(obj):
                paths[id(obj)] = f"{path}.{name}"
    for name, obj in list(torch.Tensor.__dict__.items()) + list(torch._C.TensorBase.__dict__.items()):
        if callable(obj) and id(obj) not in paths:
            paths[id(obj)] = f"torch.Tensor.{name}"
    return paths


def printable_name(fn) -> str | None:
    """A dotted path under ``torch`` that names ``fn``, if there is one."""
    global _PATHS
    if isinstance(fn, torch._ops.OpOverload):
        return f"torch.ops.{fn.namespace}.{fn._opname}.{fn._overloadname}"
    if isinstance(fn, torch._ops.OpOverloadPacket):  # torch.ops.mylib.op (its __qualname__ is pybind11's)
        return "torch.ops." + fn._qualified_op_name.replace("::", ".")
    if _PATHS is None:
        _PATHS = _build_paths()
    path = _PATHS.get(id(fn))
    if path is None:
        name = getattr(fn, "__name__", None)
        for cls in (torch.Tensor, torch._C.TensorBase):
            if name and cls.__dict__.get(name) is fn:
                return f"torch.Tensor.{name}"
    return path


def describe(fn) -> str:
    if fn is operator.getitem:
        return "tensor indexing"
    return printable_name(fn) or getattr(fn, "__qualname__", None) or repr(fn)


# [Note: fallback metadata with run-time extents]
# Inputs whose shapes hold run-time extents (see [Note: run-time extents] in thunder/core/extents.py)
# are given concrete placeholder sizes, twice with different placeholders: an output dim that equals
# an input extent in both runs is that extent, one equal in both runs is static, and any other is
# refused (it would be a new relation thunder cannot name). An operation whose output shape depends on
# tensor values (``nonzero``, ``unique``, boolean-mask indexing, ...) has no meta kernel; torch's
# fake tensors with a ShapeEnv give its outputs unbacked sizes, and each becomes a fresh extent.
_PLACEHOLDERS = ((7919, 7927, 7933, 7937, 7949, 7951), (8623, 8627, 8629, 8641, 8647, 8663))
_CHECK_VALUES = (5003, 5081, 5167, 5273, 5387, 5471)  # their differences from the first placeholders all differ


def meta_outputs(fn, args, kwargs, *, device=None):
    """Outputs of ``fn(*args, **kwargs)`` as fresh proxies, computed by torch's meta (or fake) kernels."""
    from thunder.torch import data_dependent

    out = data_dependent.outputs(fn, describe(fn), args, kwargs)
    if out is not None:
        return out
    flat = tree_leaves((args, kwargs))
    proxies = [x for x in flat if isinstance(x, TensorProxy)]
    if device is None:
        device = proxies[0].device if proxies else _factory_device(kwargs)
    roots = _roots(flat)
    check(len(roots) <= len(_PLACEHOLDERS[0]),
          lambda: f"thunder cannot trace {describe(fn)} on inputs with more than {len(_PLACEHOLDERS[0])} run-time extents",
          NotImplementedError)
    try:
        runs = [_run(fn, args, kwargs, dict(zip(roots, values))) for values in _PLACEHOLDERS[:2 if roots else 1]]
    except RuntimeError as e:
        if not roots:
            raise
        raise NotImplementedError(
            f"thunder cannot trace {describe(fn)} on inputs whose shapes hold extents known only at run time "
            f"({', '.join(roots)}): torch's meta kernel rejects them at placeholder sizes ({e}). If two of them are equal "
            "when the program runs, compute them from the same operation (one mask, one set of indices).") from e
    outs = [tree_leaves(r) for r in runs]
    if roots and any(isinstance(x, (int, float, torch.SymInt)) for x in outs[0]):
        raise NotImplementedError(
            f"thunder cannot trace {describe(fn)}: it returns a Python number computed from extents known only at run "
            f"time ({', '.join(roots)})")
    if proxies and not any(isinstance(x, torch.Tensor) for x in outs[0]):
        raise NotImplementedError(
            f"thunder cannot trace {describe(fn)}: it returns a Python value ({type(runs[0]).__name__}) computed from "
            "tensor data, which is not known while tracing")
    requires_grad = (torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
                     and any(p.requires_grad for p in proxies))
    grads = _outputs_requiring_grad(fn, args, kwargs, dict(zip(roots, _PLACEHOLDERS[0]))) if requires_grad else None
    trace = get_tracectx()
    extents = _Extents(fn, flat, dict(zip(roots, zip(*_PLACEHOLDERS))) if roots else {}, trace)

    def to_proxy(k, x):
        if not isinstance(x, torch.Tensor):
            return x
        shape = tuple(extents.extent(k, d, [o[k].shape[d] for o in outs]) for d in range(x.ndim))
        differentiable = x.dtype.is_floating_point or x.dtype.is_complex
        return trace.tensor(shape, x.dtype, device, (grads[k] if grads is not None else requires_grad) and differentiable)

    flat_out, spec = tree_flatten(runs[0])
    if grads is not None and len(grads) != len(flat_out):
        grads = None
    out = [to_proxy(k, x) for k, x in enumerate(flat_out)]
    if roots:
        _check_small_extents(fn, args, kwargs, roots, out)
        if extents.offsets:
            _check_offsets(fn, args, kwargs, roots, out)
    return tree_unflatten(out, spec)


def _check_small_extents(fn, args, kwargs, roots, out):
    """Refuses an output extent that holds at the large placeholders but not when the run-time extents are small:
    torch clamps (``x[:3, idx]`` of ``i0`` rows has 3 only when ``i0 >= 3``), checked at 0 and at 1. Where torch raises
    at the small sizes, it raises when the program runs too (the fallback runs torch's own operation)."""
    for small in (0, 1):
        try:
            mismatch = _mismatch(fn, args, kwargs, roots, out, dict.fromkeys(roots, small))
        except Exception:  # noqa: BLE001 - torch raises at these sizes: so will the program
            continue
        if mismatch is not None:
            d, s, got = mismatch
            raise NotImplementedError(
                f"thunder cannot trace {describe(fn)}: the extent of dim {d} of its output is {_named(s)} only when the "
                f"extents known at run time ({', '.join(roots)}) are large enough (torch gives {got} when they are "
                f"{small}). Slice or size it so that its extents hold for every value.")


def _check_offsets(fn, args, kwargs, roots, out):
    """An output extent named as an input extent plus a constant (``_Extents._offset``) is checked at a third set of
    values, different for each extent: two runs cannot tell ``i0 - 1`` from a combination of extents that moves
    with ``i0`` by chance."""
    values = dict(zip(roots, _CHECK_VALUES))
    try:
        mismatch = _mismatch(fn, args, kwargs, roots, out, values)
    except Exception:  # noqa: BLE001 - a value torch rejects: say nothing
        return
    if mismatch is not None:
        d, s, got = mismatch
        raise NotImplementedError(
            f"thunder cannot trace {describe(fn)}: the extent of dim {d} of its output depends on run-time extents of "
            f"its inputs in a way thunder cannot name (it is not {_named(s)}: torch gives {got} when "
            f"{', '.join(f'{r} is {v}' for r, v in values.items())}). Compute it with simpler torch operations.")


def _named(s) -> str:
    return s.name if isinstance(s, NumberProxy) else str(s)


def _mismatch(fn, args, kwargs, roots, out, values: dict):
    """(dim, extent, torch's extent) of the first output extent that differs from torch's when the run-time extents
    have ``values``; None if all agree."""
    from thunder.core.extents import poly_of

    run = tree_leaves(_run(fn, args, kwargs, values))
    for x, p in zip(run, out):
        if not isinstance(p, TensorProxy):
            continue
        for d, (got, s) in enumerate(zip(x.shape, p.shape)):
            if not isinstance(got, int) or isinstance(s, NumberProxy) and not set(poly_of(s).base_roots()) <= set(roots):
                continue  # a fresh extent of a data-dependent shape
            if got != (poly_of(s).value(values) if isinstance(s, NumberProxy) else s):
                return d, s, got
    return None


def _roots(flat) -> list:
    """The names of the run-time extents the inputs' shapes and numbers are built from, in order."""
    from thunder.core.extents import is_runtime, poly_of

    names = {}
    for x in flat:
        values = tuple(x.shape) if isinstance(x, TensorProxy) and is_symbolic_shape(x.shape) else (x,)
        for s in values:
            if is_runtime(s):
                for r in poly_of(s).base_roots():
                    names[r] = None
    return list(names)


class _Extents:
    """Names the output extents of one fallback call (see [Note: fallback metadata with run-time extents])."""

    def __init__(self, fn, flat, placeholders: dict, trace):
        from thunder.core.extents import is_runtime

        self.fn, self.trace, self.unbacked = fn, trace, {}
        self.offsets = False  # whether an extent was named as an input extent plus a constant
        self.known = {}  # the values an input extent takes in the runs -> the extent
        for x in flat:
            for s in (tuple(x.shape) if isinstance(x, TensorProxy) else (x,)):
                if is_runtime(s):
                    self.known.setdefault(tuple(_evaluate(s, placeholders, i) for i in range(2)), s)

    def extent(self, k: int, d: int, values: list):
        if isinstance(values[0], torch.SymInt):
            return self._unbacked(k, d, values[0])
        if len(values) > 1:
            found = self.known.get(tuple(values))
            if found is None:
                found = self._offset(values)
            if found is not None:
                return found
            check(values[0] == values[1], lambda: (
                f"thunder cannot trace {describe(self.fn)}: the extent of dim {d} of its output depends on run-time "
                f"extents of its inputs in a way thunder cannot name (torch gives {values[0]} and {values[1]} when "
                f"{self._described_placeholders()}). Compute it with simpler torch operations."),
                NotImplementedError)
        return int(values[0])

    def _offset(self, values: list):
        """An input extent plus a constant in both runs (``x.diff()`` of ``i0`` rows has ``i0 - 1``, ``F.pad`` adds
        2): that extent plus the constant, clamped at zero as torch clamps (``max(0, i0 - 1)``); None otherwise. The
        small sizes' check (``_check_small_extents``) refuses an operation where torch does otherwise there."""
        from thunder.core.extents import clamp_at_zero

        if values[0] == values[1]:
            return None  # the same in both runs: a static extent
        offsets = [(values[0] - a, s) for (a, b), s in self.known.items() if a != b and values[0] - a == values[1] - b]
        if not offsets:
            return None
        c, s = min(offsets, key=lambda cs: abs(cs[0]))
        self.offsets = True
        return clamp_at_zero(s + c)

    def _described_placeholders(self) -> str:
        extents = sorted(self.known.items(), key=lambda kv: kv[1].name)
        return "; ".join(f"{s.name} is {a} and {b}" for (a, b), s in extents)

    def _unbacked(self, k, d, value):
        from thunder.core.extents import fresh

        expr = value.node.expr
        check(getattr(expr, "is_Symbol", False), lambda: (
            f"thunder cannot trace {describe(self.fn)}: the extent of dim {d} of its output ({expr}) is an expression "
            "of sizes known only at run time"), NotImplementedError)
        if expr not in self.unbacked:
            where = f"output {k}" if k else "the output"
            self.unbacked[expr] = fresh(self.trace, f"the extent of dim {d} of {where} of {describe(self.fn)}")
        return self.unbacked[expr]


def _evaluate(s, placeholders: dict, run: int) -> int:
    from thunder.core.extents import poly_of

    return poly_of(s).value({r: v[run] for r, v in placeholders.items()})


def _concrete(x, values: dict, fake_mode):
    """A meta (or fake) tensor for a tensor proxy, a concrete number for a NumberProxy."""
    if isinstance(x, NumberProxy):
        return _evaluate(x, values, 0) if x.origin is not None else x._specialize()
    if not isinstance(x, TensorProxy):
        return x
    if known_value(x) is not None:
        return known_value(x)  # a size given as a tensor (as_strided(size=[n, tensor])): torch reads its value
    shape = tuple(_evaluate(s, values, 0) if isinstance(s, NumberProxy) else s for s in x.shape)
    if fake_mode is None:
        return torch.empty(shape, dtype=x.dtype, device="meta")
    with fake_mode:
        return torch.empty(shape, dtype=x.dtype, device=x.device)


def meta_tensor(x):
    """A meta tensor for a tensor proxy of known shape (anything else as it is)."""
    return _concrete(x, {}, None)


def _run_under_grad(fn, args, kwargs, values: dict):
    """``fn`` run on meta tensors that require grad where the proxies do: (its output, the flattened meta arguments),
    or None where that run fails or ``fn``'s meta function is hand-written (it makes new tensors: it says nothing of
    autograd)."""
    if (fn.fn if isinstance(fn, AutocastCall) else fn) in _MANUAL_META:
        return None
    single = {r: (v, v) for r, v in values.items()}

    def concrete(x):
        t = _concrete(x, single, None)
        if isinstance(x, TensorProxy) and x.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex):
            t.requires_grad_()
        return t

    leaves, spec = tree_flatten((args, kwargs))
    try:
        metas = [concrete(x) for x in leaves]
        margs, mkwargs = tree_unflatten(metas, spec)
        if mkwargs.get("device") is not None:
            mkwargs["device"] = "meta"
        with torch._C.DisableTorchFunction(), torch.enable_grad():
            return fn(*margs, **mkwargs), metas
    except Exception:  # noqa: BLE001 - no plain meta run (a data-dependent shape, an in-place update of a leaf)
        return None


def may_return_a_view(fn, args, kwargs) -> bool:
    """Whether some tensor output of ``fn(*args, **kwargs)`` (args holding proxies) shares memory with a tensor
    argument in eager: asked of meta tensors laid out contiguous (``torch.diagonal``, ``Tensor.unfold``: yes; a
    kernel that computes: no). Where that cannot be told (run-time extents, no meta run), it may."""
    leaves = tree_leaves((args, kwargs))
    if any(isinstance(x, TensorProxy) and any(isinstance(s, NumberProxy) for s in x.shape) for x in leaves):
        return True
    try:
        out = _run_under_grad(fn, args, kwargs, {})
    except Exception:  # noqa: BLE001 - undecidable: it may
        return True
    if out is None:
        return True
    out, metas = out
    storages = {t.untyped_storage()._cdata for t in metas if isinstance(t, torch.Tensor)}
    return any(isinstance(o, torch.Tensor) and o.untyped_storage()._cdata in storages for o in tree_leaves(out))


def _outputs_requiring_grad(fn, args, kwargs, values: dict) -> list | None:
    """Which outputs eager's autograd marks as requiring grad (``x.new_tensor(data)`` does not, though ``x`` does);
    None where that cannot be found (see _run_under_grad)."""
    run = _run_under_grad(fn, args, kwargs, values)
    return None if run is None else [isinstance(x, torch.Tensor) and x.requires_grad for x in tree_leaves(run[0])]


def unreached_inputs(fn, args, kwargs) -> frozenset:
    """Positions, among ``tree_leaves((args, kwargs))``, of the tensors requiring grad that eager's autograd graph of
    ``fn`` does not connect to its outputs (``hinge_embedding_loss``'s target, used in comparisons only): eager gives
    them no gradient (None), not a zero one. Empty where that cannot be found (see _run_under_grad)."""
    leaves = tree_leaves((args, kwargs))
    wanted = {i for i, x in enumerate(leaves) if isinstance(x, TensorProxy) and x.requires_grad
              and (x.dtype.is_floating_point or x.dtype.is_complex)}
    if not wanted or any(not isinstance(s, int) for i in wanted for s in leaves[i].shape):
        return frozenset()
    run = _run_under_grad(fn, args, kwargs, {})
    if run is None:
        return frozenset()
    out, metas = run
    reached, seen = set(), set()
    stack = []
    for o in tree_leaves(out):
        if isinstance(o, torch.Tensor) and o.requires_grad:
            if o.grad_fn is None:
                reached.add(id(o))
            else:
                stack.append(o.grad_fn)
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None:
            reached.add(id(variable))
        stack.extend(n for n, _ in node.next_functions)
    unreached = {i for i in wanted if id(metas[i]) not in reached}
    return frozenset(unreached | _undefined_gradients(out, metas, wanted - unreached))


def _undefined_gradients(out, metas, reached: set) -> set:
    """Positions among ``reached`` whose gradient eager's backward formula leaves undefined (None) though the graph
    connects them (``torch.linalg.norm(x, 0)``: its backward gives ``x`` none), from a backward of the meta run."""
    outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    order = sorted(reached)
    if not outs or not order:
        return set()
    try:
        with torch._C.DisableTorchFunction():
            grads = torch.autograd.grad(outs, [metas[i] for i in order], [torch.ones_like(o) for o in outs],
                                        allow_unused=True)
    except Exception:  # noqa: BLE001 - no meta backward: as connected
        return set()
    return {i for i, g in zip(order, grads) if g is None}


def _run(fn, args, kwargs, values: dict):
    """``fn`` on meta tensors (fake tensors with unbacked sizes where its output shape depends on data)."""
    single = {r: (v, v) for r, v in values.items()}
    if isinstance(fn, AutocastCall):
        return _run_autocast(fn, args, kwargs, single)
    margs, mkwargs = tree_map(lambda x: _concrete(x, single, None), (args, kwargs))
    if "device" in mkwargs and mkwargs["device"] is not None:
        mkwargs["device"] = "meta"
    manual = _MANUAL_META.get(fn)
    try:
        with torch._C.DisableTorchFunction():
            return manual(*margs, **mkwargs) if manual is not None else fn(*margs, **mkwargs)
    except (NotImplementedError, RuntimeError) as e:
        meta_error = e
    tracing = getattr(get_tracectx(), "tensor_values", None) is not None
    scalars = [x for x in tree_leaves((args, kwargs)) if isinstance(x, TensorProxy) and x.ndim == 0
               and known_value(x) is None] if tracing and "item() cannot be called on meta tensors" in str(meta_error) else ()
    if scalars:
        # it reads the value of a 0-dim tensor argument (a size in as_strided(size=[n, tensor])), as eager does: the
        # trace specializes on it where it can (see [Note: value guards] in thunder/driver/value_guards.py)
        for x in scalars:
            tensor_value(x, "item", f"{describe(fn)}, which reads the value of its 0-dim tensor argument,")
        return _run(fn, args, kwargs, values)
    out = _run_fake(fn, args, kwargs, single) if _dynamic_output_shape(meta_error) else None
    if out is None:
        msg = str(meta_error)
        if isinstance(meta_error, NotImplementedError) and not ("data-independent" in msg or "data-dependent" in msg):
            raise NotImplementedError(f"thunder cannot trace {describe(fn)}: torch has no meta kernel for it ({msg})") from meta_error
        if isinstance(meta_error, NotImplementedError) or "meta" in msg.lower() or "data-dependent" in msg:
            raise NotImplementedError(_VALUE_DEPENDENT.format(describe(fn), msg)) from meta_error
        raise meta_error
    return out


_VALUE_DEPENDENT = ("thunder cannot trace {}: it reads tensor values (its output's shape depends on them, or it "
                    "validates its inputs by value), and thunder traces without values ({}). Call it outside the "
                    "jitted function, or express it with operations whose output shapes do not depend on values.")


def _ctc_loss_meta(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    batch = () if log_probs.ndim == 2 else (log_probs.shape[1],)
    return torch.empty(batch if reduction == "none" else (), dtype=log_probs.dtype, device="meta")


def _in_input_dtype(fn):
    """``fn``'s meta kernel, its result in the dtype of its first argument: the losses whose kernels write into a
    tensor like the input (``huber_loss``, ``soft_margin_loss``) where their meta kernels promote with the target."""

    def meta(input, *args, **kwargs):
        return fn(input, *args, **kwargs).to(input.dtype)

    return meta


# Output metadata of torch operations that have no meta kernel, or whose meta kernel disagrees with the device
# kernels, computed from their arguments' metadata.
_MANUAL_META = {torch.nn.functional.ctc_loss: _ctc_loss_meta,
                torch.nn.functional.huber_loss: _in_input_dtype(torch.nn.functional.huber_loss),
                torch.nn.functional.soft_margin_loss: _in_input_dtype(torch.nn.functional.soft_margin_loss)}


def _dynamic_output_shape(meta_error) -> bool:
    """Whether the meta kernel failed for an aten operation whose output shape depends on data (torch tags those
    ``dynamic_output_shape``; fake tensors, expensive to set up, are tried only for them)."""
    msg = str(meta_error)
    if not isinstance(meta_error, NotImplementedError):
        return False
    if "data-independent" in msg:  # nonzero's meta registration
        return True
    match = re.match(r"aten::(\w+)", msg)
    packet = getattr(torch.ops.aten, match.group(1), None) if match else None
    return packet is not None and any(
        torch.Tag.dynamic_output_shape in getattr(packet, o).tags for o in packet.overloads())


def _run_fake(fn, args, kwargs, values: dict):
    """``fn`` under torch's fake tensors with a ShapeEnv, where sizes that depend on data are unbacked; None if it fails."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_fallback_kernels=False)
    fargs, fkwargs = tree_map(lambda x: _concrete(x, values, mode), (args, kwargs))
    try:
        with torch._C.DisableTorchFunction(), mode:
            return fn(*fargs, **fkwargs)
    except Exception:  # noqa: BLE001 - any failure of the fake kernel means: not traceable this way
        return None


def _run_autocast(call: AutocastCall, args, kwargs, values: dict):
    """``call`` on fake tensors of the real device, which autocast as real ones do (see [Note: fallback calls under
    autocast])."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_fallback_kernels=False)  # data-dependent sizes are unbacked
    fargs, fkwargs = tree_map(lambda x: _concrete(x, values, mode), (args, kwargs))
    try:
        with torch._C.DisableTorchFunction(), mode:
            return call(*fargs, **fkwargs)
    except Exception as e:  # noqa: BLE001 - what its dtypes would be is unknown: refused, not guessed
        raise NotImplementedError(f"thunder cannot trace {describe(call.fn)} under autocast: torch's fake kernels "
                                  f"reject it ({e}). Call it outside the autocast region, or outside the jitted "
                                  "function.") from e


def _factory_device(kwargs):
    dev = kwargs.get("device")
    if dev is None:
        return torch.get_default_device()
    return torch.device(dev)


# Tensor methods that act on eager autograd's graph of the tensor itself. Inside a jitted function the
# tensor is a traced value and the backward one compiled program, so they could only be ignored: refused.
_HOOK_FIX = "Register it on a tensor outside the jitted function: an input before the call, or an output after it."
_REFUSED = {
    torch.Tensor.register_hook: "Tensor.register_hook inside a jitted function is not supported: thunder's backward is "
                                "one compiled program, and the hook would never be called. " + _HOOK_FIX,
    torch.Tensor.register_post_accumulate_grad_hook: "Tensor.register_post_accumulate_grad_hook inside a jitted "
                                                     "function is not supported. " + _HOOK_FIX,
    **{fn: f"{what} inside a jitted function is not supported: thunder differentiates the program as a whole, once, "
           "from the gradients of its outputs (loss.backward() or torch.autograd.grad on the jitted call's results); "
           "gradients taken inside the program (a gradient penalty, a custom torch.autograd.Function whose backward "
           "calls torch.autograd.grad) are not. Compute them outside the jitted function."
       for fn, what in ((torch.autograd.grad, "torch.autograd.grad"), (torch.autograd.backward, "torch.autograd.backward"),
                        (torch.Tensor.backward, "Tensor.backward"))},
    **{fn: "forward-mode automatic differentiation (torch.autograd.forward_ad: make_dual, unpack_dual) inside a "
           "jitted function is not supported: thunder records the program's values, not their tangents. Compute "
           "the dual numbers outside the jitted function, or differentiate the jitted function's results in reverse "
           "mode (backward, torch.autograd.grad)."
       for fn in (torch._make_dual, torch._unpack_dual)},
    # only nn.Module._apply asks it (module.to, .float(), .double(), .half(), .cuda(), .cpu())
    torch._has_compatible_shallow_copy_type: "nn.Module.to (or .float(), .double(), .half(), .bfloat16(), .cuda(), "
                                             ".cpu(): Module._apply) of a module inside a jitted function is not "
                                             "supported: it replaces the module's parameters and buffers, which "
                                             "thunder holds as the program's inputs. Convert the module before the "
                                             "jitted call.",
    torch._C.TensorBase.retain_grad: "Tensor.retain_grad inside a jitted function is not supported: the tensor is a "
                                     "value inside thunder's compiled program and its .grad would stay None. Return the "
                                     "tensor and call retain_grad() on the result of the jitted call.",
}

_FALLBACK_SYMBOLS: dict[object, Symbol] = {}
_FALLBACK_IDS: set[str] = set()


def _getter_name(fn) -> str | None:
    """``Tensor.real`` for the getter of the ``real`` property (it arrives as a method-wrapper ``__get__``)."""
    owner = getattr(fn, "__self__", None)
    if getattr(fn, "__name__", None) == "__get__" and type(owner).__name__ == "getset_descriptor":
        return f"Tensor.{owner.__name__}"
    return None


# [Note: fallback symbol identity]
# One symbol per torch callable, keyed by the callable (a property getter by its descriptor, see
# ``registry.property_key``), and each symbol's id unique: executors map ids to implementations, so
# two callables sharing a name (the getters of ``Tensor.real`` and ``Tensor.imag`` are both
# ``__get__``) must never share an id, or one would run as the other.
def fallback_symbol(fn) -> Symbol:
    """The symbol that records a call of the torch callable ``fn`` and runs it with torch. In-place callables
    never get here: the frontend computes their new values (thunder/torch/inplace.py, [Note: in-place fallback])."""
    key = property_key(fn)
    sym = _FALLBACK_SYMBOLS.get(key)
    if sym is not None:
        return sym
    refused = _REFUSED.get(key)
    if refused is not None:
        raise NotImplementedError(refused)
    path = printable_name(fn)
    name = path.removeprefix("torch.") if path else _getter_name(fn) or getattr(fn, "__name__", "op")
    unique, i = name, 1
    while f"torch.{unique}" in _FALLBACK_IDS:
        unique, i = f"{name}_{i}", i + 1
    _FALLBACK_IDS.add(f"torch.{unique}")
    tags = _tags_of(fn)

    def meta(*args, **kwargs):
        return meta_outputs(fn, args, kwargs)

    sym = Symbol(unique, meta, module="torch", is_prim=True, tags=tags, print_name=path)
    sym.torch_impl = fn
    sym.is_fallback = True
    if path is None:
        hint = "".join(c if c.isalnum() else "_" for c in unique)
        sym.printer = lambda bsym, printer: _print_constant_call(fn, bsym, printer, hint)
    _FALLBACK_SYMBOLS[key] = sym
    return sym


def check(cond, msg, exc=RuntimeError):
    if not cond:
        raise exc(msg() if callable(msg) else msg)


def _print_constant_call(fn, bsym, printer, hint=None):
    callee = printer.constant(fn, hint)
    call = f"{callee}({printer.call_args(bsym.args, bsym.kwargs)})"
    return f"{printer.output(bsym.output)} = {call}" if bsym.output is not None else call


def fallback_call(fn, args, kwargs):
    return fallback_symbol(fn)(*args, **kwargs)


# [Note: fallback calls under autocast]
# Eager runs every operation under autocast, and a composite torch function (``torch.einsum``, ``tensordot``,
# ``linalg.multi_dot``, an RNN's ``_VF.lstm``) autocasts the operations inside it: ``einsum`` of float32 tensors
# gives bfloat16 because its ``bmm`` does. Thunder records the casts of the operations it defines itself
# (thunder/torch/autocast.py) and runs traces with autocast off, so a torch function it runs as is must run under
# the autocast state it was traced in: ``AutocastCall`` does, and its outputs' metadata comes from fake tensors on
# the real device (meta tensors never autocast).
class AutocastCall:
    """``fn`` run under ``torch.autocast(device_type, dtype)``."""

    def __init__(self, fn, device_type: str, dtype: torch.dtype):
        self.fn, self.device_type, self.dtype = fn, device_type, dtype
        self.__name__ = f"{getattr(fn, '__name__', 'op')}_autocast_{str(dtype).removeprefix('torch.')}"

    def __call__(self, *args, **kwargs):
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.fn(*args, **kwargs)

    def __repr__(self):
        return f"AutocastCall({describe(self.fn)}, {self.device_type!r}, {self.dtype})"


_AUTOCAST_CALLS: dict = {}


def autocast_symbol(fn, device_type: str, dtype: torch.dtype) -> Symbol:
    """The symbol that runs the torch callable ``fn`` under autocast (see [Note: fallback calls under autocast])."""
    key = (property_key(fn), device_type, dtype)
    call = _AUTOCAST_CALLS.get(key)
    if call is not None:
        return fallback_symbol(call)
    call = _AUTOCAST_CALLS[key] = AutocastCall(fn, device_type, dtype)
    sym = fallback_symbol(call)
    sym.tags = sym.tags | (fallback_symbol(fn).tags & {Tag.RANDOM})  # a random op stays one
    return sym


# [Note: in-place fallback]
# A torch operation without a thunder definition may update its first argument in place: a Tensor
# method or torch function named ``op_`` (``scatter_``, ``zero_``, ``bernoulli_``, ``torch.relu_``),
# an augmented assignment (``__ior__``), an ``nn.init`` initializer, or an operation called with
# ``inplace=True``. Recording its call like an out-of-place one would lose the update (later reads
# of the tensor would see the old value), so it is recorded functionally, like the in-place
# operations thunder defines (see [Note: in-place updates] in thunder/driver/functionalization.py):
# ``updated_copy(op, a, ...)`` runs ``op`` on a copy of ``a`` and returns the copy, and the tracer
# rebinds ``a`` to it. The same torch kernel runs, so values and random draws are eager's.
# Operations that change a tensor's shape, strides or storage in place cannot be expressed so and
# are refused with an error.

_INPLACE_DUNDERS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__idiv__", "__ifloordiv__",
                              "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                              "__imatmul__"})
_METADATA_INPLACE = frozenset({"resize_", "resize_as_", "resize_as_sparse_", "sparse_resize_",
                               "sparse_resize_and_clear_", "set_", "as_strided_", "squeeze_", "unsqueeze_", "t_",
                               "transpose_", "swapaxes_", "swapdims_", "detach_", "share_memory_", "apply_", "map_",
                               "map2_", "requires_grad_"})


def inplace_call(fn, args, kwargs):
    """``(symbol, args, kwargs)`` recording ``fn(*args, **kwargs)`` as an update of its first argument, which comes
    first in ``args``; None when the call updates nothing in place (see [Note: in-place fallback])."""
    if not _updates_in_place(fn, args, kwargs):
        return None
    if not args:  # nn.init's initializers pass the tensor by keyword
        args, kwargs = first_positional(fn, kwargs)
    if not args or not isinstance(args[0], TensorProxy):
        _refuse(fn, "its first argument is not a tensor")
    return inplace_fallback_symbol(fn), args, kwargs


def _updates_in_place(fn, args, kwargs) -> bool:
    if isinstance(fn, torch._ops.OpOverload):
        written = [a.name for a in fn._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if written and written != [fn._schema.arguments[0].name]:
            _refuse(fn, "it updates several of its arguments")
        return bool(written)
    name = getattr(fn, "__name__", "") or ""
    if name in _INPLACE_DUNDERS or name.endswith("_") and not name.endswith("__"):
        if name in _METADATA_INPLACE:
            _refuse(fn, "it changes a tensor's shape, strides or storage")
        return True
    return kwargs.get("inplace") is True or len(args) > 1 and _bound(fn, args).get("inplace") is True


def _refuse(fn, why: str):
    raise NotImplementedError(
        f"thunder cannot trace the in-place operation {describe(fn)}: {why}, which a functional trace cannot "
        "express. Use the out-of-place operation and assign its result instead")


def _bound(fn, args) -> dict:
    sig = signature_of(fn)
    try:
        return dict(sig.bind_partial(*args).arguments) if sig is not None else {}
    except TypeError:
        return {}


def first_positional(fn, kwargs):
    """``(args, kwargs)`` with ``fn``'s first parameter, given by keyword, passed positionally."""
    sig = signature_of(fn)
    first = next(iter(sig.parameters)) if sig is not None and sig.parameters else None
    if first not in kwargs:
        return (), kwargs
    kwargs = dict(kwargs)
    return (kwargs.pop(first),), kwargs


def updated_copy(fn, a, /, *args, **kwargs):
    """The value the in-place operation ``fn`` gives ``a``, computed on a copy of ``a`` (``a`` is unchanged)."""
    out = a.clone()
    fn(out, *args, **kwargs)
    return out


_INPLACE_SYMBOLS: dict[object, Symbol] = {}


def inplace_fallback_symbol(fn) -> Symbol:
    """The symbol recording ``fn``, an in-place torch operation, as ``updated_copy(fn, a, ...)``."""
    sym = _INPLACE_SYMBOLS.get(fn)
    if sym is not None:
        return sym
    path = printable_name(fn)
    name = path.removeprefix("torch.") if path else getattr(fn, "__name__", "op")
    tags = _tags_of(fn)
    impl = functools.partial(updated_copy, fn)

    def meta(*args, **kwargs):
        return meta_outputs(impl, args, kwargs)

    sym = Symbol(f"updated_copy[{name}]", meta, module="torch", is_prim=True, tags=tags)
    sym.torch_impl = impl
    sym.is_fallback = True
    sym.printer = lambda bsym, printer: _print_updated_copy(fn, path, bsym, printer)
    _INPLACE_SYMBOLS[fn] = sym
    return sym


def _print_updated_copy(fn, path, bsym, printer):
    printer.imports["from thunder.torch.fallback import updated_copy"] = None
    callee = path if path is not None else printer.constant(fn)
    return f"{printer.output(bsym.output)} = updated_copy({callee}, {printer.call_args(bsym.args, bsym.kwargs)})"
