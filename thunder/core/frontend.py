"""The tracing frontend: runs the user's Python once with proxies and records a trace.

The user's code runs natively. Its tensors are ``TensorProxy`` objects, and a ``TorchFunctionMode``
sees every torch-level call (``torch.*``, ``torch.nn.functional.*``, Tensor methods and operators,
factories) and records the matching ``ltorch`` symbol instead of computing. Python control flow on
shapes and numbers therefore simply runs, and is specialized into the trace.

[Note: in-place updates] Traces are functional. ``x.add_(y)`` records ``t1 = ltorch.add(x, y)``
and *rebinds* ``x`` to ``t1``: later uses of the Python object ``x`` read ``t1``. When ``x`` is an
input (argument, parameter, buffer or captured tensor) the trace ends with ``prims.copy_(t1, x)``
so the caller's tensor is updated exactly as eager would. Views of a tensor updated in place
become stale (using one raises), and updating a view in place raises: both would need aliasing
the functional trace cannot express.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import threading
import types
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from thunder.core import prims
from thunder.core.interpreter import InterpreterError
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.symbol import Tag
from thunder.core.trace import TraceCtx, tracectx
from thunder.torch import TORCH_TO_SYMBOL, INPLACE_TO_SYMBOL
from thunder.torch import shapes as ltorch_shapes
from thunder.torch.fallback import fallback_symbol, describe
from thunder.torch.registry import property_key
from thunder.torch import autocast as ltorch_autocast

# ---------------------------------------------------------------------------------------------
# Sources: where an input of the trace comes from on each call (the prologue fetches it again).
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArgSource:
    path: tuple  # ("args", 0, "key", ...) or ("kwargs", "x", ...)


@dataclasses.dataclass(frozen=True, eq=False)
class ModuleTensorSource:
    module: torch.nn.Module
    qualname: str  # the submodule's qualified name, for printing
    collection: str  # "_parameters" or "_buffers"
    name: str


@dataclasses.dataclass(frozen=True, eq=False)
class AttrSource:
    obj: Any
    label: str
    name: str


@dataclasses.dataclass(frozen=True, eq=False)
class GlobalSource:
    globals_dict: dict
    name: str


@dataclasses.dataclass(frozen=True, eq=False)
class CellSource:
    cell: Any
    name: str


@dataclasses.dataclass(frozen=True, eq=False)
class ConstantSource:
    value: Any


@dataclasses.dataclass
class TraceInput:
    proxy: Any  # TensorProxy or NumberProxy
    source: Any


# ---------------------------------------------------------------------------------------------
# Input containers for the functional jit: mutation of an input collection is a sharp edge.
# ---------------------------------------------------------------------------------------------

def _unsupported(what):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"{what} is not yet supported")

    return method


class ThunderSharpEdgeError(RuntimeError):
    """Raised with ``thunder.jit(..., sharp_edges="error")`` when the program reads state outside its arguments."""


class InputList(list):
    append = _unsupported("Appending to an input list")
    extend = _unsupported("Extending an input list")
    insert = _unsupported("Inserting into an input list")
    pop = _unsupported("Popping from an input list")
    remove = _unsupported("Removing from an input list")
    clear = _unsupported("Clearing an input list")
    sort = _unsupported("Sorting an input list")
    reverse = _unsupported("Reversing an input list")
    __setitem__ = _unsupported("Setting an item of an input list")
    __delitem__ = _unsupported("Deleting an item of an input list")
    __iadd__ = _unsupported("Extending an input list")
    __imul__ = _unsupported("Repeating an input list in place")


class InputDict(dict):
    __setitem__ = _unsupported("Setting an item of an input dict")
    __delitem__ = _unsupported("Deleting an item of an input dict")
    pop = _unsupported("Popping from an input dict")
    popitem = _unsupported("Popping from an input dict")
    clear = _unsupported("Clearing an input dict")
    update = _unsupported("Updating an input dict")
    setdefault = _unsupported("Setting a default in an input dict")
    __ior__ = _unsupported("Updating an input dict")


# ---------------------------------------------------------------------------------------------
# Metadata queries answered directly from the proxy.
# ---------------------------------------------------------------------------------------------

_TB = torch._C.TensorBase.__dict__
_PASSTHROUGH = set()
for _name in ("shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_cpu", "is_meta", "layout", "is_leaf",
              "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "names", "is_mps", "is_xpu", "itemsize", "nbytes",
              "grad_fn", "_base", "is_complex", "is_floating_point", "dim", "size", "numel", "nelement", "ndimension",
              "element_size", "get_device", "is_signed", "stride", "has_names", "is_inference", "is_conj", "is_neg",
              "storage_offset", "__len__", "__hash__", "__format__", "__repr__", "_is_view", "is_sparse_csr"):
    for _obj in (_TB.get(_name), torch.Tensor.__dict__.get(_name)):
        if _obj is not None:
            _PASSTHROUGH.add(_obj)
_PASSTHROUGH |= {torch.is_tensor, torch.is_floating_point, torch.is_complex, torch.numel, torch.Tensor.__format__,
                 torch.result_type}

_CONTIGUOUS = {_TB.get("is_contiguous")}
_ITER = torch.Tensor.__iter__
_SETITEM = _TB["__setitem__"]
_GRAD = _TB.get("grad")


class TracingMode(TorchFunctionMode):
    """Routes every torch-level call made by the traced program to the tracer."""

    def __init__(self, tracer: "Tracer"):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.tracer.handle(func, args, kwargs or {})


def _tensor_leaves(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _tensor_leaves(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _tensor_leaves(y, out)
    return out


class _TracerStack(threading.local):
    """The tracers recording in this thread, innermost last (each thread traces independently)."""

    def __init__(self):
        self.tracers: list["Tracer"] = []


_TRACERS = _TracerStack()


def current_tracer() -> "Tracer | None":
    tracers = _TRACERS.tracers
    return tracers[-1] if tracers else None


@contextlib.contextmanager
def active(tracer: "Tracer"):
    """Makes ``tracer`` the current tracer of this thread; library code sees that it is being compiled
    (see [Note: compiling flag])."""
    _TRACERS.tracers.append(tracer)
    _compiling_flag.enter()
    try:
        yield tracer
    finally:
        _compiling_flag.exit()
        _TRACERS.tracers.pop()


# [Note: compiling flag]
# Libraries guard value-dependent code (e.g. Hugging Face transformers' mask construction, which skips
# work after inspecting the mask's values) with ``torch.compiler.is_compiling()``, taking a path that
# needs no tensor values when it reports True. While any thread traces, thunder sets torch's own flag,
# so that ``torch.compiler.is_compiling()``, ``torch._dynamo.is_compiling()`` and
# ``torch._utils.is_compiling()`` report True, exactly as under ``torch.compile``.
# ``torch.compiler.is_dynamo_compiling()``, ``torch.compiler.is_exporting()`` and
# ``torch.jit.is_tracing()`` keep reporting False: thunder is neither dynamo, export nor the JIT tracer.
# The flag is process-wide (it is torch's), so eager code running in another thread at the same time
# also sees True; such code paths are written to compute the same results.
class _CompilingFlag:
    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = False

    def enter(self):
        import torch.compiler

        with self.lock:
            if self.depth == 0:
                self.saved = torch.compiler._is_compiling_flag
                torch.compiler._is_compiling_flag = True
            self.depth += 1

    def exit(self):
        import torch.compiler

        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                torch.compiler._is_compiling_flag = self.saved


_compiling_flag = _CompilingFlag()


def rebind(original: TensorProxy, new: TensorProxy):
    """In-place update of ``original`` to the value ``new`` (see [Note: in-place updates])."""
    current_tracer().inplace(original, new)


class Tracer:
    """Records one trace of ``fn``. Create one per cache miss."""

    def __init__(self, fn: Callable, *, functional: bool, trace: TraceCtx, known_sources: dict, sharp_edges=None):
        self.fn = fn
        self.sharp_edges = sharp_edges
        self.functional = functional
        self.trace = trace
        self.known_sources = known_sources  # id(real tensor) -> source
        self.inputs: list[TraceInput] = []
        self.captured: dict[int, TensorProxy] = {}
        self.keepalive: list = []  # real tensors seen, so their ids stay unique while tracing
        self.latest: dict[str, TensorProxy] = {}
        self.input_names: dict[str, TensorProxy] = {}
        self.view_base: dict[str, str] = {}
        self.views_of: dict[str, list] = {}
        self.stale: set[str] = set()
        self.writebacks: dict[str, tuple] = {}
        self.root_of: dict[str, str] = {}  # a version's name -> the name of the tensor it updates
        self.roots: dict[str, TensorProxy] = {}
        self.checkpoint_depth = 0

    # -- inputs --------------------------------------------------------------------------
    def add_input(self, proxy, source):
        self.inputs.append(TraceInput(proxy, source))
        if isinstance(proxy, TensorProxy):
            self.input_names[proxy.name] = proxy
        return proxy

    def _capture(self, t: torch.Tensor) -> TensorProxy:
        proxy = self.captured.get(id(t))
        if proxy is not None:
            return proxy
        if self.functional:
            raise InterpreterError(
                f"Encountered exception ValueError: {t!r} had an unexpected type {type(t)}. Supported types are "
                f"({TensorProxy}, <class 'numbers.Number'>) while tracing {self.fn!r}:")
        check_tensor_type(t)
        source = self.known_sources.get(id(t)) or ConstantSource(t)
        if self.sharp_edges in ("warn", "error"):
            what = getattr(source, "name", None) or "a tensor reached outside the function's arguments"
            msg = (f"Sharp edge: {self.fn!r} reads the tensor {what!r}, which is not an argument; thunder fetches it "
                   "again on every call (a new tensor bound to that name is seen), but it is not part of the signature")
            if self.sharp_edges == "error":
                raise ThunderSharpEdgeError(msg)
            import warnings

            warnings.warn(msg, stacklevel=2)
        name = getattr(source, "name", None)
        proxy = self.trace.tensor(tuple(t.shape), t.dtype, t.device, t.requires_grad,
                                  name=_sanitize(name) if name else None)
        self.keepalive.append(t)
        self.captured[id(t)] = proxy
        return self.add_input(proxy, source)

    # -- argument resolution ---------------------------------------------------------------
    def resolve(self, x):
        """Maps proxies to their latest version and real tensors to captured inputs."""
        if isinstance(x, TensorProxy):
            name = x.name
            if name in self.stale:
                raise NotImplementedError(
                    f"{name} is a view of a tensor that was updated in place after the view was taken; thunder cannot "
                    "trace this aliasing. Take the view after the in-place update, or use out-of-place operations.")
            return self.latest.get(name, x)
        if isinstance(x, torch.Tensor):
            return self._capture(x)
        if isinstance(x, (tuple, list)):
            items = [self.resolve(y) for y in x]
            if type(x) is tuple or type(x) is list:
                return type(x)(items)
            if isinstance(x, torch.Size):
                return torch.Size(items)
            if hasattr(x, "_fields"):
                return type(x)(*items)
            if hasattr(type(x), "n_fields"):  # torch.return_types (values, indices)
                return type(x)(items)
            return list(items) if isinstance(x, list) else tuple(items)
        if isinstance(x, dict):
            if type(x) is dict or type(x) is InputDict:
                return {k: self.resolve(v) for k, v in x.items()}
            out = copy.copy(x)  # OrderedDict, HF ModelOutput, ...: keep the type
            for k, v in x.items():
                out[k] = self.resolve(v)
            return out
        return x

    # -- the interception point --------------------------------------------------------------
    def handle(self, func, args, kwargs):
        key = property_key(func)
        if key in _PASSTHROUGH:
            return func(*args, **kwargs)
        if key in _CONTIGUOUS:
            return True
        if key is _GRAD:
            return None
        if key is _ITER:
            return iter(self.call(ltorch_shapes.unbind, (self.resolve(args[0]), 0), {}))
        if "out" in kwargs and kwargs["out"] is not None:
            raise NotImplementedError(f"{describe(func)} with out= is not supported by thunder; assign the result instead")
        first = args[0] if args else None  # the caller's object, for in-place updates
        args = self.resolve(args)
        kwargs = self.resolve(kwargs) if kwargs else kwargs
        if key is _SETITEM:
            target, index, value = args
            out = self.call(ltorch_shapes.setitem, (target, index, value), {})
            self.inplace(first, out)
            return None
        sym = INPLACE_TO_SYMBOL.get(key)
        if sym is not None:
            if kwargs.get("dtype") not in (None, getattr(args[0], "dtype", None)):  # x.cumsum_(0, dtype=...)
                raise RuntimeError(f"Bad in-place call: input tensor dtype {args[0].dtype} and output tensor dtype "
                                   f"{kwargs['dtype']} should match")
            out = self.call(sym, args, kwargs)
            return self.inplace(first, out)
        sym = TORCH_TO_SYMBOL.get(key)
        if sym is None:
            return self._unknown(func, args, kwargs)
        out = self.call(sym, args, kwargs)
        if getattr(sym, "has_inplace_param", False) and _bound_inplace(sym, args, kwargs):
            return self.inplace(first, out)
        return out

    def call(self, sym, args, kwargs):
        args, kwargs = ltorch_autocast.maybe_autocast(sym, args, kwargs)
        out = sym(*args, **kwargs)
        if getattr(sym, "is_view", False) and args and isinstance(args[0], TensorProxy):
            base = self.view_base.get(args[0].name, args[0].name)
            for o in _tensor_leaves(out, []):
                if o is not args[0]:
                    self.view_base[o.name] = base
                    self.views_of.setdefault(base, []).append(o.name)
        return out

    def _unknown(self, func, args, kwargs):
        tensors = _tensor_leaves((args, kwargs), [])
        if not tensors:
            out = func(*args, **kwargs)  # utilities such as torch.broadcast_shapes
            if not _tensor_leaves(out, []):
                return out
        return self.call(fallback_symbol(func), args, kwargs)

    # -- in-place updates (see [Note: in-place updates]) -------------------------------------
    def inplace(self, original, new):
        if not isinstance(original, TensorProxy):
            original = self.resolve(original)  # a captured real tensor
        root_name = self.root_of.get(original.name, original.name)
        root_proxy = self.input_names.get(root_name)
        original = root_proxy if root_proxy is not None else self.roots.get(root_name, original)
        target = self.latest.get(original.name, original)
        if target.name in self.view_base or original.name in self.view_base:
            raise NotImplementedError(
                f"In-place update of {original.name}, which is a view of another tensor, is not supported by thunder: "
                "the update would have to be reflected in the base tensor. Update the base tensor, or use the "
                "out-of-place operation.")
        if tuple(new.shape) != tuple(target.shape):
            raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape {list(new.shape)}")
        if new.dtype is not target.dtype:
            from thunder.torch.utils import convert

            if not torch.can_cast(new.dtype, target.dtype):  # as eager: int_tensor.add_(1.5) raises
                raise RuntimeError(f"result type {new.dtype} can't be cast to the desired output type {target.dtype}")

            new = convert(new, target.dtype)
        root = original.name
        if root in self.input_names and original.requires_grad and torch.is_grad_enabled():
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        for v in self.views_of.pop(target.name, ()):
            self.stale.add(v)
        for v in self.views_of.pop(root, ()):
            self.stale.add(v)
        self.latest[root] = new
        self.root_of[new.name] = root
        self.roots[root] = original
        if root in self.input_names:
            self.writebacks[root] = (self.input_names[root], new)
        return original

    def finish_writebacks(self):
        for original, new in self.writebacks.values():
            prims.copy_(new, original)


def _bound_inplace(sym, args, kwargs) -> bool:
    try:
        return bool(sym.signature.bind(*args, **kwargs).arguments.get("inplace", False))
    except TypeError:
        return False


def _sanitize(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else "t_" + out


def check_tensor_type(t: torch.Tensor):
    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
        raise NotImplementedError(
            "thunder cannot trace a module with uninitialized (lazy) parameters or buffers, whose shapes are only "
            "known after a first call: run the module once on an example input before thunder.jit")
    if type(t) not in (torch.Tensor, torch.nn.Parameter) and not isinstance(t, TensorProxy):
        if not (isinstance(t, torch.nn.Parameter) or type(t).__torch_function__ is torch.Tensor.__torch_function__):
            raise NotImplementedError(
                f"thunder does not support tensor subclasses such as {type(t).__qualname__} as inputs "
                "(see the sharp edges documentation); convert to a plain torch.Tensor first")


# ---------------------------------------------------------------------------------------------
# Finding where tensors used by the traced program live, so that they are fetched on every call.
# ---------------------------------------------------------------------------------------------


def _code_names(code, out: set):
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, out)
    return out


def scan_function_sources(fn, sources: dict):
    """Tensors ``fn`` reads from its globals and closure."""
    fn = inspect.unwrap(fn) if callable(fn) else fn
    func = getattr(fn, "__func__", fn)
    code = getattr(func, "__code__", None)
    if code is None:
        return sources
    g = func.__globals__
    for name in _code_names(code, set()):
        v = g.get(name)
        if isinstance(v, torch.Tensor) and id(v) not in sources:
            sources[id(v)] = GlobalSource(g, name)
    if func.__closure__:
        for name, cell in zip(code.co_freevars, func.__closure__):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if isinstance(v, torch.Tensor) and id(v) not in sources:
                sources[id(v)] = CellSource(cell, name)
    return sources


def scan_module_sources(module: torch.nn.Module, sources: dict):
    """Plain tensor attributes of the module's submodules (not parameters or buffers)."""
    for qualname, m in module.named_modules(remove_duplicate=True):
        for k, v in vars(m).items():
            if isinstance(v, torch.Tensor) and id(v) not in sources:
                sources[id(v)] = AttrSource(m, qualname, k)
        forward = type(m).forward
        scan_function_sources(forward, sources)
    return sources
