"""The tracing frontend: runs the user's Python once with proxies and records a trace.

The user's code runs natively. Its tensors are ``TensorProxy`` objects, and a ``TorchFunctionMode``
sees every torch-level call (``torch.*``, ``torch.nn.functional.*``, Tensor methods and operators,
factories) and records the matching ``ltorch`` symbol instead of computing. Python control flow on
shapes and numbers therefore simply runs, and is specialized into the trace.

In-place updates and aliasing are functionalized while tracing: see [Note: in-place updates] in
thunder/driver/functionalization.py. Questions the program asks about its tensors (metadata, strides,
autograd state) are answered as eager answers them: see thunder/driver/tensor_queries.py.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import numbers
import sys
import threading
import types
from typing import Any, Callable

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.overrides import TorchFunctionMode

from thunder.core import prims, pytree
from thunder.driver import python_state, tensor_queries
from thunder.driver.functionalization import EXPANDED_UPDATE, Aliases, ViewStep, view_chain
from thunder.driver.interpreter import InterpreterError
from thunder.driver.layouts import Layouts, UnknownLayout
from thunder.driver.outputs import flatten_output
from thunder.core.proxies import TensorProxy, NumberProxy, SymbolicTensorProxy, set_eager_strides_provider, tensor_value
from thunder.core.extents import same_shape
from thunder.core.symbol import Symbol, Tag
from thunder.driver.tensor_queries import TracedGradFn
from thunder.core.trace import TraceCtx, tracectx
from thunder.torch import TORCH_TO_SYMBOL
from thunder.torch import shapes as ltorch_shapes
from thunder.torch.fallback import fallback_symbol, describe, first_positional, inplace_call, inplace_fallback_symbol
from thunder.torch.inplace import (PlanKind, plan_for, detached_update, laid_out_as, root_of_a_retaken_view,
                                   root_of_a_view_update, view_update)
from thunder.torch.registry import (Updates, has_number_proxy, number_values, property_key, takes_list_as_varargs,
                                    signature_of, torch_positions)
from thunder.torch.utils import convert
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
class GradSource:
    """The ``.grad`` of an input tensor (``None`` proxy: the program saw ``None`` there)."""

    tensor: Any  # the input's proxy


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


# Input lists and dicts are walked as the list and dict they stand for; rebuilt (pytree.tree_map), they are plain ones.
pytree.register_pytree_node(InputList, lambda lst: (list(lst), None), lambda values, _: list(values),
                            serialized_type_name="thunder.driver.frontend.InputList")
pytree.register_pytree_node(InputDict, lambda d: (list(d.values()), list(d)),
                            lambda values, keys: dict(zip(keys, values)),
                            serialized_type_name="thunder.driver.frontend.InputDict")


class TracingMode(TorchFunctionMode):
    """Routes every torch-level call made by the traced program to the tracer."""

    def __init__(self, tracer: "Tracer"):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch._C._functorch.peek_interpreter_stack() is not None:
            raise NotImplementedError(_FUNCTORCH_REFUSED)
        if func in DISPATCH_DROPS:
            kwargs = _with_dropped_arguments(func, kwargs)
        if func in _MIRRORED_COMPARISONS and len(args) == 2 and type(args[0]) is not type(args[1]):
            func, args = _as_written(func, args, sys._getframe(1))
        return self.tracer.handle(func, args, kwargs)


# torch.func's transforms (grad, vjp, jvp, jacrev, jacfwd, hessian, vmap) run below torch's Python-level
# interception: what they do to the traced tensors is not recorded (torch.func.grad marks its input with
# requires_grad_ and differentiates by autograd, which a trace has not; vmap batches below __torch_function__)
_FUNCTORCH_REFUSED = (
    "thunder does not support torch.func transforms (grad, vjp, jvp, jacrev, jacfwd, hessian, vmap) of traced "
    "tensors, nor tracing a jitted function inside one: they act below torch's Python-level interception, where "
    "thunder cannot record them. Call them outside the jitted function (the gradient of a jitted function's "
    "result: backward or torch.autograd.grad), or express a vmap with broadcasting.")


# [Note: reflected comparisons] A tensor whose shape holds run-time extents is a SymbolicTensorProxy while tracing, a
# subclass of torch.Tensor, which the other tensors are. For ``a < b`` with such a ``b``, Python asks the subclass
# first, as ``b > a``; the values are the same, the layout not: TensorIterator lays the result out by its operands in
# order (generated program nn 8928). The caller's instruction tells which comparison the program wrote.
_MIRRORED_COMPARISONS = {torch.Tensor.gt: torch.Tensor.lt, torch.Tensor.lt: torch.Tensor.gt,
                         torch.Tensor.ge: torch.Tensor.le, torch.Tensor.le: torch.Tensor.ge,
                         torch.Tensor.__gt__: torch.Tensor.__lt__, torch.Tensor.__lt__: torch.Tensor.__gt__,
                         torch.Tensor.__ge__: torch.Tensor.__le__, torch.Tensor.__le__: torch.Tensor.__ge__}
_WRITTEN = {torch.Tensor.gt: ">", torch.Tensor.lt: "<", torch.Tensor.ge: ">=", torch.Tensor.le: "<=",
            torch.Tensor.__gt__: ">", torch.Tensor.__lt__: "<", torch.Tensor.__ge__: ">=", torch.Tensor.__le__: "<="}


def _as_written(func, args, frame):
    """``(func, args)`` of a comparison as the program wrote it: mirrored back where Python reflected it."""
    import dis

    if not (issubclass(type(args[0]), type(args[1])) and isinstance(args[0], SymbolicTensorProxy)):
        return func, args
    op = next((i for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti), None)
    if op is None or op.opname != "COMPARE_OP" or op.argrepr.removeprefix("bool(").removesuffix(")") == _WRITTEN[func]:
        return func, args
    return _MIRRORED_COMPARISONS[func], (args[1], args[0])


# torch functions that leave some of their arguments out when they dispatch to a TorchFunctionMode (torch 2.13's
# ``F.l1_loss`` passes no ``weight``): the mode reads them from the function's own frame, which is on the stack
# while it dispatches. tests/test_torch_signatures.py checks this table against torch's sources.
DISPATCH_DROPS = {torch.nn.functional.l1_loss: ("weight",)}


def _with_dropped_arguments(func, kwargs: dict) -> dict:
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not func.__code__:
        frame = frame.f_back
    if frame is None:
        return kwargs
    found = {name: frame.f_locals[name] for name in DISPATCH_DROPS[func]
             if name not in kwargs and frame.f_locals.get(name) is not None}
    return {**kwargs, **found} if found else kwargs


_NO_GRAD_VIEW_ADVICE = ("Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your "
                        "code by moving both the view and the inplace either both inside the no_grad block (if you "
                        "don't want the inplace to be tracked) or both outside (if you want the inplace to be tracked).")
_NO_GRAD_VIEW_UPDATED = ("A view was created in no_grad mode and is being modified inplace with grad mode enabled. "
                         + _NO_GRAD_VIEW_ADVICE)
_NO_GRAD_VIEW_READ = ("A view was created in no_grad mode and its base or another view of its base has been modified "
                      "inplace with grad mode enabled. " + _NO_GRAD_VIEW_ADVICE)


def _tensor_leaves(x) -> list:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


class _TracerStack(threading.local):
    """The tracers recording in this thread, innermost last (each thread traces independently)."""

    def __init__(self):
        self.tracers: list["Tracer"] = []


_TRACERS = _TracerStack()


def current_tracer() -> "Tracer | None":
    tracers = _TRACERS.tracers
    return tracers[-1] if tracers else None


def _eager_new_strides(proxy) -> tuple | None:
    tracer = current_tracer()
    return tracer.layouts.empty_like_strides(proxy) if tracer is not None else None


set_eager_strides_provider(_eager_new_strides)


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


_SIZES = ("size", "shape", "dims", "sizes", "repeats")
# Python types torch takes for dtypes (``torch.zeros(n, dtype=int)``, ``x.to(float)``)
_PYTHON_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool, complex: torch.complex128}
# torch functions that take two numbers (eager makes them tensors): see Tracer._handle
_NUMBER_ARITHMETIC = frozenset({torch.add, torch.sub, torch.subtract, torch.mul, torch.multiply, torch.div, torch.divide,
                                torch.true_divide, torch.floor_divide})


def _number_tensor_dtype(python_type: type) -> torch.dtype:
    """The dtype of the tensor torch makes of a Python number (of a default-dtype float)."""
    default = torch.get_default_dtype()
    if python_type is float:
        return default
    if python_type is complex:
        return {torch.float64: torch.complex128, torch.float16: torch.complex32}.get(default, torch.complex64)
    return _PYTHON_DTYPES[python_type]


def torch_arguments(sym, fn, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The program's arguments to torch's ``fn`` as thunder's definition ``sym`` takes them (``torch_positions``).
    By position, an argument given by a keyword that torch accepts and the definition spells otherwise: ``input=``
    (or ``self=``) for the tensor (``torch.sum(input=x, dim=0)``), ``other=`` for the second operand
    (``torch.mul(x, other=y)``), ``torch.pow(x, exponent=2)``, ``torch.tensor_split(x, indices=(1,))``, and
    ``size=``, ``shape=``, ``dims=`` for the sizes torch also takes one by one (``torch.zeros(size=(2, 3))``, as
    Hugging Face's BEiT writes it; ``x.view(size=...)``, ``x.permute(dims=...)``, ``x.repeat(repeats=...)``). By
    name, trailing positional arguments that the definition takes at another position
    (``torch.softmax(x, 1, torch.float64)``). And Python types as the dtypes torch takes them for (``dtype=int``)."""
    if any(a in _PYTHON_DTYPES for a in args if isinstance(a, type)):
        args = tuple(_PYTHON_DTYPES.get(a, a) if isinstance(a, type) else a for a in args)
    if isinstance(kwargs.get("dtype"), type):
        kwargs = {**kwargs, "dtype": _PYTHON_DTYPES.get(kwargs["dtype"], kwargs["dtype"])}
    params = sym.signature.parameters if getattr(sym, "signature", None) is not None else None
    if not params:
        return args, kwargs
    if len(args) > 2 and takes_list_as_varargs(fn) and _one_positional_after_self(params):
        args = (args[0], tuple(args[1:]))  # x.broadcast_to(2, 3): the list of ints given one by one
    positions, names = torch_positions(fn)
    positional = [p for p in params.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    moved = _moved_by_name(args, names, params, positional)
    if moved:
        kwargs = {**kwargs, **{names[i]: args[i] for i in range(moved, len(args))}}
        args = args[:moved]
    if not kwargs:
        return args, kwargs
    kwargs = dict(kwargs)
    if signature_of(fn) is None:  # a builtin: torch's argument parser takes NumPy's names too
        for alias, name in _NUMPY_NAMES.items():
            if alias in kwargs and name not in kwargs and alias not in params:
                kwargs[name] = kwargs.pop(alias)
    positions = {"input": 0, "self": 0, "other": 1, **positions}
    by_position = {positions[n]: n for n in kwargs if n not in params and n in positions}
    var = next((p for p in params.values() if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
    while len(args) in by_position and len(args) < len(positional) + (var is not None):
        args = (*args, kwargs.pop(by_position[len(args)]))  # ``x.view(dtype=...)``: the one value of ``*shape``
    if var is not None:
        name = next((n for n in (var.name,) + _SIZES if n in kwargs and (n == var.name or n not in params)), None)
        if name is not None:
            args = tuple(args) + (kwargs.pop(name),)
    return args, kwargs


# the NumPy names torch's Python argument parser accepts for its builtins' parameters (``torch.cat(xs, axis=1)``, as
# Hugging Face's Funnel writes it; ``x.sum(axis=0, keepdims=True)``)
_NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim", "x": "input", "a": "input", "x1": "input", "x2": "other"}


def _one_positional_after_self(params) -> bool:
    kinds = [p.kind for p in params.values()]
    return inspect.Parameter.VAR_POSITIONAL not in kinds and len(
        [k for k in kinds if k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]) >= 2


def _moved_by_name(args, names, params, positional) -> int:
    """The first of the trailing positional arguments that torch names and the definition takes by that name at
    another position (0: none)."""
    first = len(args)
    for i in range(len(args) - 1, 0, -1):
        name = names.get(i)
        if name is None or name not in params or (i < len(positional) and positional[i].name == name):
            break
        first = i
    return first if first < len(args) else 0


def _making_a_parameter() -> bool:
    """Whether ``nn.Parameter(data)`` calls ``requires_grad_`` (of a traced ``data``: a layer built in forward)."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code is _PARAMETER_NEW:
            return True
        frame = frame.f_back
    return False


_PARAMETER_NEW = torch.nn.Parameter.__new__.__code__


class Tracer:
    """Records one trace of ``fn``. Create one per cache miss."""

    def __init__(self, fn: Callable, *, functional: bool, trace: TraceCtx, known_sources: dict, sharp_edges=None):
        self.fn = fn
        self.sharp_edges = sharp_edges
        self.functional = functional
        self.trace = trace
        self.known_sources = known_sources  # id(real tensor) -> source
        self.inputs: list[TraceInput] = []  # inputs found while tracing (captured tensors, gradients)
        self.captured: dict[int, TensorProxy] = {}
        self.keepalive: list = []  # real tensors seen, so their ids stay unique while tracing
        self.input_names: dict[str, TensorProxy] = {}
        self.real_inputs: dict[str, torch.Tensor] = {}  # input name -> the tensor seen while tracing
        self.aliases = Aliases()
        self.layouts = Layouts()
        self.aliases.on_new_value = lambda key, value: self.layouts.add_value(value, self.aliases.originals[key])
        self.aliases.write_root = self._write_root
        self.aliases.retaken_root = self._root_of_a_retaken_view
        self.grads: dict[str, object] = {}  # input name -> proxy of its .grad (or None) as the program read it
        # input name -> the number of bound symbols before the program set its requires_grad (see set_requires_grad)
        self.marked_inputs: dict[str, int] = {}
        self.marked_values: set[str] = set()  # values computed inside that the program set requires_grad on
        self.checkpoint_depth = 0
        self.autocast_casts = ltorch_autocast.CastCache(self._is_unchanged_leaf)

    # -- inputs --------------------------------------------------------------------------
    def add_input(self, proxy, source, tensor=None):
        """``proxy`` is an input of the trace, found at ``source``; ``tensor`` is its value now."""
        self.inputs.append(TraceInput(proxy, source))
        self.register_input(proxy, tensor)
        return proxy

    def register_input(self, proxy, tensor):
        if isinstance(proxy, TensorProxy):
            self.input_names[proxy.name] = proxy
            if tensor is not None:
                self.real_inputs[proxy.name] = tensor
                self.layouts.add_input(proxy, tensor)

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
        return self.add_input(proxy, source, t)

    # -- argument resolution ---------------------------------------------------------------
    def resolve(self, x):
        """Maps the program's tensors to their current values and real tensors to captured inputs."""
        if isinstance(x, TensorProxy):
            return self.aliases.resolve(x)
        if isinstance(x, torch.Tensor):
            return self.aliases.resolve(self._capture(x))
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
        """A torch call the program made. The code it runs (thunder's, torch's meta kernels, libraries they import)
        is not the program's: the recorder of Python state ignores it (see thunder/driver/python_state.py)."""
        state = python_state.current()
        if state is None:
            out = self._handle(func, args, kwargs)
        else:
            state.internal += 1
            try:
                out = self._handle(func, args, kwargs)
            finally:
                state.internal -= 1
        if self.aliases.no_grad_views and torch.is_grad_enabled():
            self._check_no_grad_views(args, kwargs, out)
        return out

    def _check_no_grad_views(self, args, kwargs, out):
        """Eager forbids autograd to record an operation reading a view taken in no_grad mode (of a tensor requiring
        grad) once its base changed in place since: which value the gradient should flow through is ambiguous."""
        if not any(isinstance(t, TensorProxy) and t.requires_grad for t in _tensor_leaves(out)):
            return  # nothing recorded (``v > 0``, ``v.shape``)
        if any(isinstance(t, TensorProxy) and self.aliases.changed_since_taken_in_no_grad_mode(t)
               for t in _tensor_leaves((args, kwargs))):
            raise RuntimeError(_NO_GRAD_VIEW_READ)

    def _handle(self, func, args, kwargs):
        key = property_key(func)
        if key in _SYMBOLIC_QUERIES and args and type(self.resolve(args[0])) is SymbolicTensorProxy:
            return _SYMBOLIC_QUERIES[key](self.resolve(args[0]), *args[1:], **kwargs)
        if key in tensor_queries.REQUIRES_GRAD and getattr(func, "__name__", None) == "__set__":
            self.set_requires_grad(args[0], bool(args[1]))
            return None
        if key is torch.Tensor.requires_grad_:
            flag = kwargs.get("requires_grad", args[1] if len(args) > 1 else True)
            return self.set_requires_grad(args[0], bool(flag))
        if key in tensor_queries.METADATA:
            return func(*self.resolve(args), **kwargs)
        if key in _QUERIES:
            return _QUERIES[key](self, func, args, kwargs)
        if getattr(func, "__name__", None) == "__set__" and key is not func:
            raise NotImplementedError(
                f"Setting Tensor.{getattr(key, '__name__', key)} inside a function thunder traces is not supported; "
                "set it outside the jitted function")
        if key is _ITER:
            return iter(self.call(ltorch_shapes.unbind, (self.resolve(args[0]), 0), {}))
        handler = TRACE_HANDLERS.get(key)
        if handler is None and getattr(func, "__module__", "") == _C10D:
            import thunder.distributed  # noqa: F401 - loaded on first use (thunder/__init__.py); registers its handlers

            handler = TRACE_HANDLERS.get(key)
        if handler is not None:
            return handler(self, args, kwargs)
        if key in _OPERATORS and len(args) == 2 and not _is_operand(args[1]):
            # torch's operators return NotImplemented for such operands, and Python decides: ``x == "Rep"`` is False
            # (Wan's video autoencoder asks that), ``x + "a"`` raises
            raise TypeError(f"Tensor.{key.__name__} does not take a {type(args[1]).__name__}")
        if kwargs.get("out") is not None:  # torch.eye(n, out=t): computed out of place, then copied into t
            kwargs = dict(kwargs)
            out = kwargs.pop("out")
            if not isinstance(out, torch.Tensor):
                raise NotImplementedError(f"{describe(func)} with a tuple of out= tensors is not supported by thunder; "
                                          "assign the results instead")
            return self._into(out, self.handle(func, args, kwargs), func)
        plan = plan_for(key)
        if plan is not None and not args and kwargs:  # torch.nn.init.uniform_(tensor=w): make it positional
            args, kwargs = first_positional(func, kwargs)
        first = args[0] if args else None  # the caller's object, for in-place updates
        args = self.resolve(args)
        kwargs = self.resolve(kwargs) if kwargs else kwargs
        if key is _SETITEM:
            target, index, value = args
            target = self._retaken(first, target)
            if self._copies_into_slices(first, target, index):
                strides = self._memory_strides(self.aliases.key(first), target)
                if strides is not None:
                    target = self.call(root_of_a_view_update, (target, strides), {})
            out = self.call(ltorch_shapes.setitem, (target, index, value), {})
            self.inplace(first, out, retake=_sets_itself(index, target.shape))
            return None
        if plan is not None:
            return self._inplace_call(plan, func, first, args, kwargs)
        if key in _NUMBER_ARITHMETIC and args and not any(isinstance(a, torch.Tensor) for a in args):
            # torch.div(8, 4, rounding_mode="trunc") of numbers is a tensor in eager (Longformer's chunk counts), of
            # the dtype its first number gets: a 0-dim tensor of it, then the operation
            number = args[0]
            dtype = _number_tensor_dtype(number.python_type if isinstance(number, NumberProxy) else type(number))
            args = (self.handle(torch.full, ((), number), {"dtype": dtype}), *args[1:])
            first = args[0]
        sym = TORCH_TO_SYMBOL.get(key)
        if sym is None:
            return self._unknown(func, first, args, kwargs)
        args, kwargs = torch_arguments(sym, key, args, kwargs)  # key: a stable callable (cached)
        first = first if first is not None or not args else args[0]
        out = self.call(sym, args, kwargs, fn=func)
        if args and out is args[0] and (sym in ltorch_shapes.SAME_SHAPE_VIEWS or _is_view_call(sym, args, kwargs)):
            out = self.call(ltorch_shapes.same_shape_view(sym), args, kwargs, fn=func)  # x.reshape(x.shape): see there
        elif args and out is args[0] and self._copies_in_eager(sym, func, args, kwargs):
            out = self.call(ltorch_shapes.same_value_copy(sym), args, kwargs, fn=func)  # cumsum of a 0-dim x
        if isinstance(out, Updates):  # F.batch_norm: running statistics updated as autograd does not record
            for t, v in out.updates:
                self.inplace(t, v, no_grad=True)
            return out.result
        if getattr(sym, "has_inplace_param", False) and _bound_inplace(sym, args, kwargs):
            return self.inplace(first, out)
        return out

    def call(self, sym, args, kwargs, *, fn=None):
        """Records ``sym(*args, **kwargs)``; ``fn`` is the torch callable the program called, if any."""
        args, kwargs = ltorch_autocast.maybe_autocast(sym, args, kwargs, self.autocast_casts)
        sym = ltorch_autocast.under_autocast(sym, args, kwargs)
        scope = self.trace._scopes[-1]
        n = len(scope)
        out = sym(*args, **kwargs)
        bsym = scope[-1] if len(scope) > n else None
        torch_fn = fn if fn is not None else getattr(sym, "torch_impl", None)
        # (F.batch_norm's result beside its running statistics' updates: laid out as the kernel lays it out; an
        # in-place method, ``x.relu_()``, takes no ``inplace`` flag, which its symbol's arguments bind: fused nn 20709)
        replayed = {k: v for k, v in kwargs.items() if k != "inplace"} \
            if "inplace" in kwargs and getattr(torch_fn, "__name__", "").endswith("_") else kwargs
        self.layouts.add_output(torch_fn, args, replayed, out.result if isinstance(out, Updates) else out)
        if bsym is not None and isinstance(sym, Symbol) and any(isinstance(x, TensorProxy) for x in args):
            self._record_views(sym, bsym, args, kwargs, out, torch_fn)
            if (isinstance(out, TensorProxy) and out.requires_grad and _copies_first_argument(bsym)
                    and self.layouts.returns_input(torch_fn, args, kwargs, args[0])):
                scope[-1] = bsym.replace(tags=bsym.tags | {Tag.RETURNS_INPUT})
        return out

    def _copies_in_eager(self, sym, func, args, kwargs) -> bool:
        """For an operation whose definition returned its input: whether eager returns a new tensor (with the same
        values) rather than the input itself (``x.type_as(x)``, ``F.dropout(x, training=False)``), decided by running
        it on meta tensors laid out as the inputs. Otherwise the two would be one tensor to later updates."""
        if (not isinstance(args[0], TensorProxy) or getattr(sym, "is_fallback", False) or sym.name in _MAYBE_VIEWS
                or sym.name in ("cpu", "cuda")):  # on meta tensors these move them: no answer there
            return False
        torch_fn = func if func is not None else getattr(sym, "torch_impl", None)
        return torch_fn is not None and not self.layouts.aliases(torch_fn, args, kwargs, 0, args[0])

    def _record_views(self, sym, bsym, args, kwargs, out, torch_fn):
        position = next(i for i, x in enumerate(args) if isinstance(x, TensorProxy))  # 1 for einsum's operand
        base, others = args[position], args[:position] + args[position + 1:]
        is_view = getattr(sym, "is_view", False)
        if callable(is_view):  # e.g. indexing: a view for basic indices, a copy for tensor indices
            is_view = is_view(*args, **kwargs)
        if sym.name in ("detach", "data"):
            self.aliases.add_view(base, out, ViewStep(sym, others, kwargs, None, (), kind="detach"))
            return
        might_alias = is_view or sym.name in _MAYBE_VIEWS or getattr(sym, "is_fallback", False)
        if not might_alias:
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for i, o in enumerate(outs):
            if not isinstance(o, TensorProxy) or o is base:
                continue
            chain = view_chain(bsym, base, o)
            o_position, o_base, o_others = position, base, others
            if chain is None and is_view:  # a view of another argument (``broadcast_tensors``: output i of input i)
                o_position, chain = next(((j, c) for j, x in enumerate(args) if isinstance(x, TensorProxy) and x is not base
                                          and (c := view_chain(bsym, x, o)) is not None), (position, None))
            elif getattr(sym, "is_fallback", False):  # torch's own op: a view of whichever argument eager's aliases
                o_position = next((j for j, x in enumerate(args) if j > position and isinstance(x, TensorProxy)
                                   and x.dtype == o.dtype and x.device == o.device
                                   and self.layouts.aliases(torch_fn, args, kwargs, i, x)), position)
                chain = chain if o_position == position else view_chain(bsym, args[o_position], o)
            o_base, o_others = args[o_position], args[:o_position] + args[o_position + 1:]
            definite = is_view and chain is not None and all(_is_view_prim(b) or _is_fallback_view(b) for b in chain)
            if is_view and not definite and not getattr(sym, "is_fallback", False):
                continue  # a view op that copies here (advanced indexing)
            decide = None if definite else functools.partial(self.layouts.aliases, torch_fn, args, kwargs, i, o_base)
            index = i if isinstance(out, (tuple, list)) else None
            usable = chain is not None and all(_is_view_prim(b) or _is_fallback_view(b) for b in chain)
            step = ViewStep(sym, o_others, kwargs, index, chain or (), kind="view" if usable else "opaque",
                            aliases=decide, base_position=o_position)
            self.aliases.add_view(o_base, o, step)

    def _unknown(self, func, first, args, kwargs):
        tensors = _tensor_leaves((args, kwargs))
        if tensors and getattr(func, "__module__", "") == _C10D:
            raise NotImplementedError(
                f"thunder does not support calling torch.distributed.{func.__name__} inside the function it traces "
                "(it supports all_reduce, all_gather_into_tensor and reduce_scatter_tensor): call it outside the "
                "jitted function, or use the collectives of thunder.distributed.prims (all_reduce, all_gather, "
                "reduce_scatter and wait). thunder.distributed.ddp and fsdp insert the collectives training needs.")
        args, kwargs = number_values(args), number_values(kwargs)  # torch sees numbers (specialized), not proxies
        if not tensors and not has_number_proxy((args, kwargs)):  # a run-time extent's use is traced
            out = func(*args, **kwargs)  # utilities such as torch.broadcast_shapes
            if not _tensor_leaves(out):
                return out
        functional = _without_inplace(func, args, kwargs)
        if functional is not None:  # F.rrelu(x, inplace=True): computed out of place, then x is updated
            out = self.call(fallback_symbol(func), *functional, fn=func)
            return self.inplace(first, out)
        update = inplace_call(func, args, kwargs)  # other in-place callables: see [Note: in-place fallback]
        if update is not None:
            sym, args, kwargs = update
            return self.inplace(first if first is not None else args[0], self.call(sym, args, kwargs))
        if func in _READS_MEMORY and args and isinstance(args[0], TensorProxy):
            args = (self._in_eager_layout(args[0], func, args[1:], kwargs), *args[1:])
        return self.call(fallback_symbol(func), args, kwargs, fn=func)

    def _in_eager_layout(self, x: TensorProxy, func, args, kwargs) -> TensorProxy:
        """``x`` as ``func`` (``as_strided``, ``as_strided_scatter``: it reads ``x``'s memory by strides) reads it in
        eager: laid out as eager lays it out, whatever layout a fused region gives it at run time (``prims.in_layout``:
        ``x`` itself when laid out so). Where ``func`` reaches beyond ``x``'s own elements, a copy could not stand in: a run-time layout
        other than eager's is then an error. The inputs that layout depends on are checked at each call."""
        try:
            meta = self.layouts.meta(x)
        except UnknownLayout as e:
            raise NotImplementedError(f"{describe(func)} reads the memory of a tensor whose layout thunder cannot "
                                      f"compute: {e}") from e
        with torch._C.DisableTorchFunction():
            try:
                if func in _WRITES_MEMORY:  # as_strided_scatter(x, src, size, stride, offset): x's elements it writes
                    view = torch.as_strided(meta, *args[1:], **kwargs)
                else:
                    view = func(meta, *args, **kwargs)
            except Exception:  # noqa: BLE001 - the call itself will raise eager's error
                return x
            within = _reaches_only(view, meta)
        return self.call(prims.in_layout, (x, tuple(meta.stride()), meta.storage_offset(), within), {})

    # -- in-place updates (see [Note: in-place updates] in thunder/driver/functionalization.py) --------
    def _inplace_call(self, plan, func, first, args, kwargs):
        if plan.kind == PlanKind.REFUSE:
            raise NotImplementedError(f"{describe(func)} is not supported by thunder: {plan.message}")
        self_value = args[0]
        if plan.kind in (PlanKind.TWIN, PlanKind.VALUE, PlanKind.CLONE_APPLY):
            if not plan.no_grad:
                self_value = self._retaken(first, self_value)
                args = (self_value, *args[1:])
            self._check_no_partial_overlap(func, self_value, args[1:], kwargs)
        if plan.kind == PlanKind.TWIN:
            if plan.inplace_kwarg:  # F.elu_(x) is F.elu(x, inplace=True), which updates x itself
                return self.handle(plan.fn, args, {**kwargs, "inplace": True})
            if isinstance(plan.fn, Symbol):
                if kwargs.get("dtype") not in (None, getattr(self_value, "dtype", None)):  # x.cumsum_(0, dtype=...)
                    raise RuntimeError(f"Bad in-place call: input tensor dtype {self_value.dtype} and output tensor dtype "
                                       f"{kwargs['dtype']} should match")
                if getattr(plan.fn, "has_inplace_param", False):  # torch.dropout_ is dropout(..., inplace=True)
                    kwargs = {**kwargs, "inplace": True}
                new = self.call(plan.fn, args, kwargs, fn=func)
            else:
                new = self.handle(plan.fn, args, kwargs)
            if plan.fn is torch.Tensor.detach:
                return self._detach_in_place(first, new)
            if self._differentiated_narrower(self_value, new, args, kwargs, plan):  # see the method
                new = self.call(inplace_fallback_symbol(func), args, kwargs)
        elif plan.kind == PlanKind.VALUE:
            new = self.call(plan.fn, args, kwargs)
        elif plan.kind == PlanKind.RESIZE:
            return self._resize(first, plan.fn(*args, **kwargs), func)
        elif plan.kind == PlanKind.CLONE_APPLY:
            with torch.no_grad() if plan.no_grad else contextlib.nullcontext():
                new = self.call(inplace_fallback_symbol(plan.fn), args, kwargs)
        else:
            return self._metadata_in_place(first, plan.fn, args, kwargs, func)
        if plan.check is not None:
            plan.check(self_value, new)
        return self.inplace(first, new, no_grad=plan.no_grad)

    def _retaken(self, first, value):
        """The value an in-place update of the program's tensor ``first`` reads: a view (of replayable steps) whose
        update autograd records is taken again from its root, unless it was just taken (see [Note: in-place
        updates]: the view's gradient then reaches the root when eager's ``CopySlices`` gives it)."""
        if not (torch.is_grad_enabled() and isinstance(first, TensorProxy) and isinstance(value, TensorProxy)
                and value.requires_grad):
            return value
        view = self.aliases.view_of(first)
        if view is None or not view.read_back:
            return value
        scope = self.trace._scopes[-1]
        # taken again from the marked root even where just taken; otherwise not then
        if not self._mark_root(view.root) and scope and any(o is value for o in scope[-1].flat_outs):
            return value
        return self.aliases.retake(first)

    def _copies_into_slices(self, first, target, index) -> bool:
        """Whether ``first[index] = value`` of a tensor that is no view is recorded by autograd as eager's
        ``CopySlices`` of it: a basic index (slices, integers) is a view of it copied into, whose gradient is laid out
        as its memory (generated program nn 73566); tensor indices run ``index_put_``, whose gradient is laid out as
        the gradient it receives."""
        return (torch.is_grad_enabled() and isinstance(first, TensorProxy) and isinstance(target, TensorProxy)
                and target.requires_grad and self.aliases.view_of(first) is None
                and ltorch_shapes._is_basic_index(index))

    def _mark_root(self, key: str) -> bool:
        """Gives the root ``key`` of a view about to be updated the value ``root_of_a_view_update`` of its value: its
        gradient, the update's part and its later uses' (the update reads the view taken again from it, and writes
        the root's new value from it), is then laid out as its memory, as eager's. False where that layout is not
        known while tracing. (A 0-dim root too: its two parts of the gradient are copied into one another, as eager
        copies them: see [Note: the gradient of a view's root updated in place] in thunder/transforms/autodiff.py.)"""
        value = self.aliases.root_value(key)
        strides = self._memory_strides(key, value) if value.requires_grad else None
        if strides is None:
            return False
        marked = self.call(root_of_a_view_update, (value, strides), {})
        self.aliases.current[key] = marked
        self.aliases.key_of[marked.name] = key
        self.aliases.on_new_value(key, marked)
        return True

    def _root_of_a_retaken_view(self, key: str, value):
        """``value``, the root ``key`` of a view taken before an update of the root and used after, marked so that
        the view's part of its gradient is laid out as its memory (``root_of_a_retaken_view``) where autograd
        records it."""
        strides = self._memory_strides(key, value) if torch.is_grad_enabled() and value.requires_grad else None
        return value if strides is None else self.call(root_of_a_retaken_view, (value, strides), {})

    def _memory_strides(self, key: str, value) -> tuple | None:
        """The strides of the memory of the root ``key`` (whose value is ``value``), or None where not known while
        tracing."""
        try:
            return tuple(self.layouts.peek(self.aliases.originals.get(key, value)).stride())
        except UnknownLayout:
            return None

    @staticmethod
    def _differentiated_narrower(self_value, new, args, kwargs, plan) -> bool:
        """Whether an in-place update computed in a wider dtype than the tensor it updates (``a_bf16.mul_(b_f32)``)
        is differentiated. Eager's backward then evaluates the op's derivative formulas with the gradient in the
        updated tensor's dtype: ``b``'s gradient is ``grad * a`` rounded to bfloat16, where the out-of-place twin's
        (the product's gradient in float32, then the cast's) is not rounded. The update then runs as the torch
        callable itself on a copy, which torch's autograd differentiates as eager does."""
        if plan.no_grad or not torch.is_grad_enabled() or not isinstance(new, TensorProxy):
            return False
        if not isinstance(self_value, TensorProxy) or new.dtype is self_value.dtype:
            return False
        return any(t.requires_grad for t in _tensor_leaves((args, kwargs)) if isinstance(t, TensorProxy))

    def inplace(self, original, new, *, no_grad: bool = False, retake: bool = True):
        """The program's tensor ``original`` gets the value ``new`` (``x.add_(y)``, ``x[i] = v``, ...); returns ``original``.
        ``retake``: see ``Aliases.update``."""
        if not isinstance(original, TensorProxy):
            self._capture(original)  # a real tensor reached outside the arguments
        proxy = original if isinstance(original, TensorProxy) else self.captured[id(original)]
        target = self.aliases.resolve(proxy)
        if new is target:  # nothing changes (F.dropout(x, 0.0, inplace=True)): eager writes nothing either
            return original
        if not isinstance(new, TensorProxy):
            raise NotImplementedError(f"thunder cannot update {target.name} in place with {new!r}")
        if tuple(new.shape) != tuple(target.shape):
            raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape {list(new.shape)}")
        if not same_shape(tuple(new.shape), tuple(target.shape)):  # equal by the values guarded (a run-time extent
            new = self.call(ltorch_shapes.reshape, (new, tuple(target.shape)), {})  # that is 1): the tensor's shape
        if new.dtype is not target.dtype:
            if not torch.can_cast(new.dtype, target.dtype):  # as eager: int_tensor.add_(1.5) raises
                raise RuntimeError(f"result type {_dtype_word(new.dtype)} can't be cast to the desired output type "
                                   f"{_dtype_word(target.dtype)}")
            new = convert(new, target.dtype)
        view = self.aliases.view_of(proxy)
        root = view.root if view is not None else self.aliases.key(proxy)
        # eager refuses most such updates (x.expand(4, 3).add_(1)), not all (fill_, zero_, masked_fill_)
        if self._shares_elements(target):
            raise NotImplementedError(EXPANDED_UPDATE.format(what=target.name))
        base = self.aliases.originals.get(root)
        if base is not None and base is not target and self._shares_elements(base):
            raise NotImplementedError(EXPANDED_UPDATE.format(what=f"a view of {base.name}"))
        grad_recorded = torch.is_grad_enabled() and not no_grad
        if grad_recorded and self.aliases.taken_in_no_grad_mode(proxy):
            raise RuntimeError(_NO_GRAD_VIEW_UPDATED)
        if grad_recorded:
            self._check_input_update(root, view, target, new)
        elif target.requires_grad and not new.requires_grad:
            new = detached_update(target, new)
        elif target.requires_grad:
            with torch.no_grad():
                new = detached_update(target, new)
        if (view is None or not view.read_back) and self._laid_out_otherwise(new, target, unknown=True):
            new = _relaid(new, target)
        self.aliases.update(proxy, new, retake=retake)
        return original

    def _write_root(self, key: str, value: TensorProxy, compute) -> TensorProxy:
        """The new value of the tensor ``key`` that ``compute`` writes back from ``value``, a view's new value, laid out
        as the tensor where the operations writing it (a transpose's inverse, a slice's scatter) would lay it out
        otherwise (``x.t().masked_fill_(m, 5)`` gives the transpose of a contiguous tensor). The layouts are those the
        trace's operations give when they run (their torch callables, on meta tensors): ``value`` as computed out of
        place, not as eager's in-place update leaves the view."""
        while (producer := self._producer(value)) is not None:
            self.layouts.computed_by(value, *producer)
            if self._producing_bsym(value).sym is not view_update:
                break
            value = producer[1][0]  # view_update(new): new is the value computed
        scope = self.trace._scopes[-1]
        start = len(scope)
        new = compute()
        for bsym in scope[start:]:
            self.layouts.add_output(_torch_callable(bsym.sym), *_torch_call_arguments(bsym), bsym.output)
        root = self.aliases.originals[key]
        # run-time extents: laid_out_as compares the layouts when it runs (a permuted view's write-back into a stack
        # of selected rows, generated program nn 54759)
        if new is not root and tuple(new.shape) == tuple(root.shape) and self._laid_out_otherwise(new, root, unknown=True):
            new = _relaid(new, root)
        return new

    def _shares_elements(self, proxy) -> bool:
        """Whether elements of ``proxy`` share memory (an expanded tensor's), as far as its layout is known."""
        try:
            return torch._debug_has_internal_overlap(self.layouts.peek(proxy)) == 1
        except UnknownLayout:
            return False

    def _laid_out_otherwise(self, new, target, unknown: bool = False) -> bool:
        """Whether ``new``, computed out of place, is laid out otherwise than the tensor it updates in place, which
        keeps its memory in eager: with gaps (a strided slice of the caller's memory), or other strides of size-one
        dims (which decide matmul's path). Its new value is then laid out as it (see laid_out_as, which reads the
        layout of each call: nothing to check in the prologue). Where the layouts cannot be computed (run-time
        extents), ``unknown``: true for an update, whose new value laid_out_as then copies where the layouts differ
        when it runs (a view's may have gaps, ``x[m][::2].detach()``; an out-of-place ``masked_fill`` of a permuted
        ``x[m]`` is contiguous: generated program 43052)."""
        if target.ndim == 0:
            return False
        try:
            target_meta = self.layouts.peek(target)
            laid_out = target_meta.stride()
            if not is_non_overlapping_and_dense_or_false(target_meta):
                return True
            if 1 in tuple(target.shape) and target.ndim > 1:
                # strides of size-one dims: torch's meta kernels do not always give the CPU kernels' ones (relu of a
                # (3, 1, 1) transposed view: (1, 3, 3) on meta, (1, 1, 1) on the CPU; generated program 20215)
                return True
            producer = self._producer(new)
            if producer is None:
                return False
            if self.layouts.replayed(new, *producer).stride() != laid_out:
                return True
            # laid out alike as traced; where the operation writes a layout of its own for another layout of the value
            # it updates (an out-of-place masked_fill of a transposed tensor is contiguous), the call decides
            operands = [x for x in pytree.tree_leaves(producer[1:3]) if isinstance(x, TensorProxy)]
            old = next((x for x in operands if tuple(x.shape) == tuple(target.shape)), None)
            if old is not None and not self.layouts.follows(old, *producer):
                return True
            # otherwise the answer holds for the layouts traced (another one, with gaps, gives the update eager's
            # strided loops, which round otherwise): the prologue checks the strides it depended on
            for x in (target, *operands):
                self.layouts.strides_observed |= self.layouts.inputs_laid_out_after(x)
            return False
        except UnknownLayout:
            return unknown

    def _producing_bsym(self, proxy):
        """The trace's operation (in the current scope) computing ``proxy``, or None."""
        return next((b for b in reversed(self.trace._scopes[-1]) if any(o is proxy for o in b.flat_outs)), None)

    def _producer(self, proxy):
        """(torch callable, args, kwargs, output index) of the trace's operation computing ``proxy``, or None."""
        bsym = self._producing_bsym(proxy)
        torch_fn = _torch_callable(bsym.sym) if bsym is not None else None
        if torch_fn is None:
            return None
        return (torch_fn, *_torch_call_arguments(bsym), next(k for k, o in enumerate(bsym.flat_outs) if o is proxy))

    def _check_input_update(self, root, view, target, new):
        """Updates recorded by autograd, of inputs: eager refuses them for leaves that require grad."""
        root_proxy = self.input_names.get(root)
        if root_proxy is None or view is not None and view.of_memory_only:
            return  # a detach()ed tensor, or a view of one, is no view of the input to autograd
        if root_proxy.requires_grad:
            real = self.real_inputs.get(root)
            if real is None or real.is_leaf:
                raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation."
                                   if view is not None else
                                   "a leaf Variable that requires grad is being used in an in-place operation.")
        # Otherwise the input joins the autograd graph as in eager: see [Note: dirty inputs] in autodiff.py

    def _into(self, out, value, func):
        target = self.resolve(out)
        if not isinstance(value, TensorProxy) or tuple(value.shape) != tuple(target.shape) or value.dtype is not target.dtype:
            raise NotImplementedError(
                f"{describe(func)} with an out= tensor of another shape or dtype than the result (which eager resizes "
                "or casts) is not supported by thunder; assign the result instead")
        return self.inplace(out, value)

    def _check_no_partial_overlap(self, func, target, others, kwargs):
        """An in-place update reading another view of the memory it writes (``t -= t[0]``): eager's result depends on
        the order its kernel visits the elements; thunder computes out of place, so it refuses. The same memory laid
        out alike (``x.add_(x.detach())``) is fine."""
        target_view = self.aliases.view_of(target)
        target_root = target_view.root if target_view is not None else self.aliases.key(target)
        for other in pytree.tree_leaves((others, kwargs)):
            if not isinstance(other, TensorProxy) or other is target:
                continue
            view = self.aliases.view_of(other)
            root = view.root if view is not None else self.aliases.key(other)
            if root != target_root:
                continue
            try:
                a, b = self.layouts.peek(target), self.layouts.peek(other)
            except UnknownLayout:
                continue  # a layout thunder cannot compute: as before, not checked
            same = a.shape == b.shape and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
            if not same and _share_elements(a, b):
                raise NotImplementedError(
                    f"{describe(func)} updates {target.name} in place reading {other.name}, another view of the same "
                    "memory: eager's result depends on the order its kernel visits the elements. Read a clone() of it.")

    def _detach_in_place(self, original, new):
        proxy = original if isinstance(original, TensorProxy) else self._capture(original)
        if _is_autograd_view(self.aliases.view_of(proxy)):
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        if not self.aliases.resolve(proxy).requires_grad:
            return original  # nothing to detach
        if self.aliases.key(proxy) in self.input_names:
            raise NotImplementedError("thunder cannot detach an input that requires grad in place (Tensor.detach_); use "
                                      "detach() inside the jitted function, or detach the tensor before calling it")
        self.aliases.update(proxy, new)
        return original

    def _metadata_in_place(self, original, view_fn, args, kwargs, func):
        """``x.t_()``, ``x.unsqueeze_(0)``: ``x`` now has another shape; supported for tensors nothing else aliases."""
        proxy = original if isinstance(original, TensorProxy) else self._capture(original)
        if not self._unshared(proxy):
            raise NotImplementedError(
                f"{describe(func)} changes the shape of {self.aliases.key(proxy)} in place while it is an input or "
                "shares memory with another tensor, which thunder cannot express; use the out-of-place operation "
                "instead")
        self._rebind(proxy, self.handle(view_fn, args, kwargs))
        return original

    def _resize(self, original, size, func):
        """``t.resize_(size)``, ``t.resize_as_(other)``: supported where eager's result does not depend on the memory
        ``t`` had: ``t`` already has that size, or it has no elements (``x.new()``, as legacy code allocates). The new
        elements are uninitialized, as eager's."""
        proxy = original if isinstance(original, TensorProxy) else self._capture(original)
        value = self.resolve(proxy)
        if tuple(value.shape) == size:
            return original
        if value.numel() != 0 or not self._unshared(proxy):
            raise NotImplementedError(
                f"{describe(func)} is supported by thunder only for a tensor with no elements that nothing else shares "
                "memory with (x.new().resize_(...)): it changes a tensor's size and storage in place; use reshape or "
                "a new tensor instead")
        self._rebind(proxy, self.handle(torch.empty, (size,), {"dtype": value.dtype, "device": value.device}))
        return original

    def _unshared(self, proxy) -> bool:
        """Whether the program's tensor ``proxy`` is no input and shares memory with no other tensor."""
        key = self.aliases.key(proxy)
        return not (key in self.input_names or self.aliases.view_of(proxy) is not None or self.aliases.has_views(key))

    def _rebind(self, proxy, new):
        """The (unshared) tensor ``proxy`` has the value ``new`` now, of another shape: its own, not a view of it."""
        key = self.aliases.key(proxy)
        self.aliases.views.pop(new.name, None)
        self.aliases.current[key] = new
        self.aliases.originals[key] = new  # the memory is laid out as ``new`` now (the strides ``x.t_()`` gives ``x``)
        self.aliases.key_of[new.name] = key

    def finish(self, out):
        """Writes the inputs that got new values back into the caller's tensors; returns the outputs' current values."""
        written = {}
        for key, value in self.aliases.current.items():
            dst = self.input_names.get(key)
            if dst is not None:
                written[key] = prims.copy_(value, dst)
        return self._resolve_outputs(out, written)

    def _resolve_outputs(self, x, written):
        if isinstance(x, TensorProxy):
            key = self.aliases.key(x)
            if key in written:
                return written[key]
            view = self.aliases.view_of(x)
            if view is not None and view.root in written:
                out = self.aliases.regenerate_from(view, written[view.root])
                if not view.of_memory_only and self._unrecorded_update(view.root):
                    raise NotImplementedError(
                        f"thunder cannot return {x.name}, a view of {view.root}, an input that requires grad and that "
                        "the program updated in place where autograd does not record it (under torch.no_grad() or "
                        "through detach()): return a clone() of the view, or update the input outside the function")
                return out
            return self.aliases.resolve(x)
        if isinstance(x, torch.Tensor):
            return self._resolve_outputs(self._capture(x), written)
        if type(x) in (list, InputList, tuple):
            items = [self._resolve_outputs(y, written) for y in x]
            return tuple(items) if type(x) is tuple else items
        if type(x) in (dict, InputDict):
            return {k: self._resolve_outputs(v, written) for k, v in x.items()}
        if isinstance(x, (tuple, list, dict)) and not isinstance(x, torch.Size):
            leaves, rebuild = flatten_output(x)
            return rebuild([self._resolve_outputs(y, written) for y in leaves])
        return x

    def _unrecorded_update(self, key: str) -> bool:
        """Whether the input ``key`` requires grad and its new value is one autograd does not record (detached_update)."""
        bsym = self._producing_bsym(self.aliases.current.get(key))
        while bsym is not None and bsym.sym.name == "laid_out_as":  # the value, laid out as the input
            bsym = self._producing_bsym(bsym.args[0])
        return self.input_names[key].requires_grad and bsym is not None and bsym.sym.name == "detached_update"

    # -- questions about tensors (see thunder/driver/tensor_queries.py) ----------------------------
    def _layout_query(self, func, args, kwargs):
        value = self.resolve(args[0])
        try:
            meta = self.layouts.meta(value)
        except UnknownLayout as e:
            raise NotImplementedError(str(e)) from e
        with torch._C.DisableTorchFunction():
            return func(meta, *args[1:], **kwargs)

    def _storage_offset(self, func, args, kwargs):
        value = self.resolve(args[0])
        self.layouts.meta(value)
        return self.layouts._layout(value)[1]

    def set_requires_grad(self, tensor, flag: bool):
        """``tensor.requires_grad_(flag)`` / ``tensor.requires_grad = flag``, as eager: ``True`` on a tensor that does
        not require grad makes it a leaf of autograd from there on. The traced value is marked (Hugging Face's
        wav2vec2 feature encoder marks a view of its input, for gradient checkpointing); an input of the call (an
        argument, a parameter, a buffer such as vector-quantize-pytorch's ``self.zero``) is an input requiring grad
        whose gradient comes from the uses after this point alone, and the call sets the caller's tensor's flag, as
        eager does (``marked_inputs``; see ``pipeline.detach_before_marking``). ``False`` of a tensor that requires
        grad is refused: eager changes the flag of the caller's leaf, which a trace cannot."""
        proxy = self.resolve(tensor)
        if not flag or proxy.requires_grad or _making_a_parameter():
            ltorch_shapes.check_requires_grad_unchanged(proxy, flag)  # (nn.Parameter's refusal names it)
            return tensor
        if self.aliases.key(proxy) in self.input_names:  # an input itself (a view of one is a value computed inside)
            if not self._is_unchanged_leaf(proxy):
                raise NotImplementedError(
                    f"requires_grad_() of the input {proxy.name} inside a jitted function is supported only for a "
                    "tensor as the call passed it, that is no view and was not updated in place before: call it "
                    "before the jitted call")
            if not self.trace.recording_at_top_level():
                raise NotImplementedError(f"requires_grad_() of the input {proxy.name} inside a region thunder records "
                                          "as one operation is not supported: call it before the jitted call")
            self.marked_inputs[proxy.name] = len(self.trace.bound_symbols)
        else:
            self.marked_values.add(proxy.name)
        proxy.requires_grad = True
        return tensor

    def _is_input_itself(self, value: TensorProxy) -> bool:
        """Whether ``value`` (a current value) is an input of the trace, not a value computed from one."""
        return value.name in self.input_names and self.aliases.key(value) == value.name

    def _is_unchanged_leaf(self, value: TensorProxy) -> bool:
        """Whether ``value`` is an input as the call passed it, a leaf of autograd that is no view (a parameter)."""
        real = self.real_inputs.get(value.name)
        return (real is not None and self._is_input_itself(value) and self.aliases.resolve(value) is value
                and real.is_leaf and real._base is None)

    def _is_leaf(self, func, args, kwargs):
        value = self.resolve(args[0])
        if self._is_input_itself(value):
            real = self.real_inputs.get(value.name)
            return real.is_leaf if real is not None else True
        return not value.requires_grad

    def _grad_fn(self, func, args, kwargs):
        value = self.resolve(args[0])
        if value.name in self.real_inputs and self.aliases.key(value) == value.name:
            real = self.real_inputs[value.name]
            return None if real.grad_fn is None else TracedGradFn(type(real.grad_fn).__name__)
        return TracedGradFn(value.name) if value.requires_grad else None

    def _grad(self, func, args, kwargs):
        """``x.grad``: the input's gradient as it is on each call (checked by the prologue); None for other tensors."""
        proxy = args[0] if isinstance(args[0], TensorProxy) else self._capture(args[0])
        name = self.aliases.key(proxy)
        if name not in self.input_names or self.aliases.view_of(proxy) is not None:
            return None
        if name in self.grads:
            return self.grads[name]
        real = self.real_inputs.get(name)
        grad = None if real is None else real.grad
        if grad is None:
            self.grads[name] = None
            self.inputs.append(TraceInput(None, GradSource(self.input_names[name])))
            return None
        proxy = self.trace.tensor(tuple(grad.shape), grad.dtype, grad.device, False, name=f"{name}_grad")
        self.keepalive.append(grad)
        self.grads[name] = proxy
        return self.add_input(proxy, GradSource(self.input_names[name]), grad)

    def _base(self, func, args, kwargs):
        proxy = args[0] if isinstance(args[0], TensorProxy) else self._capture(args[0])
        view = self.aliases.view_of(proxy)
        return self.aliases.originals[view.root] if _is_autograd_view(view) else None

    def _is_view(self, func, args, kwargs):
        proxy = args[0] if isinstance(args[0], TensorProxy) else self._capture(args[0])
        return _is_autograd_view(self.aliases.view_of(proxy))

    def _printed(self, func, args, kwargs):
        value = self.resolve(args[0])
        text = tensor_queries.printed(value)
        return format(text, *args[1:]) if func in tensor_queries.PRINTING and len(args) > 1 else text

    def _needs_data(self, func, args, kwargs):
        raise NotImplementedError(
            f"{describe(func)} needs the tensor's memory, which thunder does not have while tracing; compare shapes "
            "or use operations instead, or move this code out of the jitted function")


def _is_autograd_view(view) -> bool:
    """Views in autograd's sense: ``detach()`` shares memory without being one."""
    return view is not None and any(step.kind != "detach" for step in view.steps)


def _dtype_word(dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}.get(dtype, str(dtype))


_QUERIES = {}
for _obj in tensor_queries.LAYOUT:
    _QUERIES[_obj] = Tracer._layout_query
for _table, _method in ((tensor_queries.STORAGE_OFFSET, Tracer._storage_offset), (tensor_queries.IS_LEAF, Tracer._is_leaf),
                        (tensor_queries.GRAD_FN, Tracer._grad_fn), (tensor_queries.GRAD, Tracer._grad),
                        (tensor_queries.BASE, Tracer._base), (tensor_queries.IS_VIEW, Tracer._is_view),
                        (tensor_queries.PRINTING, Tracer._printed), (tensor_queries.NEEDS_DATA, Tracer._needs_data)):
    for _obj in _table:
        _QUERIES[_obj] = _method

_ITER = torch.Tensor.__iter__
# torch callables whose tracing a higher layer defines: handler(tracer, args, kwargs) -> what the program gets
# (torch.distributed's collectives: thunder/distributed/program_collectives.py)
TRACE_HANDLERS: dict = {}
_C10D = "torch.distributed.distributed_c10d"  # the module of torch.distributed's collectives


def _equal(tracer, args, kwargs):
    """``torch.equal(a, b)``: a Python bool of the values, known where the value guards know them (computed from the
    call's arguments; see thunder/driver/value_guards.py). Tensors of other shapes are not equal, as in eager."""
    a, b = (tracer.resolve(x) for x in (*args, kwargs.get("input"), kwargs.get("other")) if x is not None)
    if not same_shape(tuple(a.shape), tuple(b.shape)):
        return False
    return tensor_value(tracer.handle(torch.all, (tracer.handle(torch.eq, (a, b), {}),), {}), "bool", "torch.equal")


def _allclose(tracer, args, kwargs):
    """``torch.allclose(a, b, ...)``: ``torch.isclose(...).all()`` as a Python bool, known as torch.equal's."""
    close = tracer.handle(torch.isclose, args, kwargs)
    return tensor_value(tracer.handle(torch.all, (close,), {}), "bool", "torch.allclose")


for _fn in (torch.equal, torch.Tensor.equal):
    TRACE_HANDLERS[_fn] = _equal
for _fn in (torch.allclose, torch.Tensor.allclose):
    TRACE_HANDLERS[_fn] = _allclose
_SETITEM = torch._C.TensorBase.__dict__["__setitem__"]
# Python's binary operators on tensors: torch turns a TypeError for the other operand into NotImplemented
_OPERATORS = frozenset(
    obj for name in ("eq", "ne", "lt", "le", "gt", "ge", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
                     "rtruediv", "div", "rdiv", "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow", "matmul",
                     "rmatmul", "and", "rand", "or", "ror", "xor", "rxor", "lshift", "rlshift", "rshift", "rrshift")
    for cls in (torch._C.TensorBase, torch.Tensor) for obj in (cls.__dict__.get(f"__{name}__"),) if obj is not None)


def _sets_itself(key, shape) -> bool:
    """Whether eager's ``x[key] = value`` writes into ``x`` itself (a key of full slices, ``...`` and tensor indices),
    not into a view of it (an integer, ``None``, a slice of part of a dimension)."""
    items = list(key) if isinstance(key, tuple) else [key]

    def extent(x):  # the dimensions an index item consumes
        if x is None or x is Ellipsis:
            return 0
        return x.ndim if isinstance(x, TensorProxy) and x.dtype is torch.bool else 1

    i = next((i for i, x in enumerate(items) if x is Ellipsis), None)
    if i is not None:
        items[i:i + 1] = [slice(None)] * max(0, len(shape) - sum(extent(x) for x in items))
    dim = 0
    for x in items:
        if x is None or isinstance(x, (bool, int, NumberProxy)) or isinstance(x, TensorProxy) and x.ndim == 0:
            return False
        if isinstance(x, slice):
            size = shape[dim] if dim < len(shape) else None
            full = (x.start is None or type(x.start) is int and x.start == 0) and (
                x.step is None or type(x.step) is int and x.step == 1) and (
                x.stop is None or type(x.stop) is int and type(size) is int and x.stop >= size)
            if not full:
                return False
        dim += extent(x)
    return True


def _is_operand(x) -> bool:
    return isinstance(x, (torch.Tensor, numbers.Number, NumberProxy, torch.SymInt, torch.SymFloat, torch.SymBool))


# Size queries of a tensor with run-time extents answer with its symbolic shape (see [Note: run-time
# extents] in thunder/core/extents.py); its C-level tensor has placeholder sizes.
_SYMBOLIC_QUERIES = {torch.numel: SymbolicTensorProxy.numel}
for _name in ("shape", "size", "numel", "nelement", "__len__", "stride", "nbytes", "is_contiguous"):
    _attr = getattr(SymbolicTensorProxy, _name, None)
    if _attr is None:
        continue
    for _obj in (torch._C.TensorBase.__dict__.get(_name), torch.Tensor.__dict__.get(_name)):
        if _obj is not None:
            _SYMBOLIC_QUERIES[_obj] = _attr.fget if isinstance(_attr, property) else _attr
_MAYBE_VIEWS = ltorch_shapes.MAYBE_VIEWS
_VIEW_PRIMS = frozenset({"reshape", "squeeze", "broadcast_in_dim", "transpose", "slice_prim", "shallow_copy",
                         "in_layout"})


# Callables that read a tensor's memory by strides: their input must be laid out as in eager (see _in_eager_layout)
_WRITES_MEMORY = frozenset({torch.as_strided_scatter, torch.Tensor.as_strided_scatter})
_READS_MEMORY = frozenset({torch.as_strided, torch.Tensor.as_strided, torch.as_strided_copy}) | _WRITES_MEMORY


def _reaches_only(view, t) -> bool:
    """Whether the view ``view`` (a meta tensor on ``t``'s storage) reaches only elements of ``t``; up to 2**22
    elements, beyond which the answer is no (not checked)."""
    def extent(m):
        return m.storage_offset() + sum((n - 1) * s for n, s in zip(m.shape, m.stride())) + 1 if m.numel() else 0

    size = max(extent(view), extent(t))
    if not view.numel():
        return True
    if size > 2 ** 22:
        return False
    offsets = torch.arange(size)
    reached = [offsets.as_strided(m.shape, m.stride(), m.storage_offset()).flatten() for m in (view, t)]
    return bool(torch.isin(reached[0], reached[1]).all())


def _share_elements(a, b) -> bool:
    """Whether two layouts (meta tensors) on one storage reach a common element (different slices of a tensor do
    not); up to 2**22 elements, beyond which the answer is no (not checked)."""
    def extent(t):
        return t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1 if t.numel() else 0

    size = max(extent(a), extent(b))
    if not a.numel() or not b.numel() or size > 2 ** 22:
        return False
    with torch._C.DisableTorchFunction():  # plain torch while tracing
        offsets = torch.arange(size)
        reached = [offsets.as_strided(t.shape, t.stride(), t.storage_offset()).flatten() for t in (a, b)]
        return bool(torch.isin(reached[0], reached[1]).any())


def _torch_callable(sym):
    """The torch callable a symbol runs as: its ``torch_impl``, or the torch executor's for a primitive."""
    from thunder.executors.torchex import prim_torch_callable

    return getattr(sym, "torch_impl", None) or prim_torch_callable(sym)


def _torch_call_arguments(bsym) -> tuple:
    """``bsym``'s arguments as its torch callable takes them. A symbol of the torch language records every argument
    its signature binds, defaults included (``add(a, b, None)``); torch's callables take some of those by keyword only
    (``torch.add(a, b, *, alpha=1)``): the parameters with defaults go by keyword, and only where they differ from the
    default. The computation is replayed out of place: an ``inplace`` flag (``F.relu``'s) is left out. A primitive's
    arguments are its torch callable's."""
    sig = bsym.sym.signature if getattr(bsym.sym, "torch_impl", None) is not None else None
    if sig is None:
        return bsym.args, bsym.kwargs
    try:
        bound = sig.bind(*bsym.args, **bsym.kwargs)
    except TypeError:
        return bsym.args, bsym.kwargs
    args, kwargs = [], {}
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        if name == "inplace":
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif param.default is inspect.Parameter.empty and param.kind is not inspect.Parameter.KEYWORD_ONLY:
            args.append(value)
        elif value is not param.default and not (type(value) is type(param.default) and value == param.default):
            kwargs[name] = value
    return tuple(args), kwargs


def _is_view_call(sym, args, kwargs) -> bool:
    is_view = getattr(sym, "is_view", False)
    return bool(is_view(*args, **kwargs) if callable(is_view) else is_view) and getattr(sym, "torch_impl", None) is not None


def _copies_first_argument(bsym) -> bool:
    """Whether ``bsym`` is a new name for its first argument: a decomposition down to one ``prims.shallow_copy`` of it
    (``contiguous``, ``to(memory_format=...)``); eager returns that argument itself or a copy, as its layout decides."""
    first, out = bsym.args[0] if bsym.args else None, bsym.output
    while len(bsym.subsymbols) == 1:
        bsym = bsym.subsymbols[0]
    return (bsym.sym is prims.shallow_copy and isinstance(first, TensorProxy) and isinstance(out, TensorProxy)
            and bsym.args[0].name == first.name and bsym.output.name == out.name)


def _relaid(value: TensorProxy, like: TensorProxy) -> TensorProxy:
    """``value`` laid out as ``like``, in ``value``'s place in the autograd graph: an update the program makes under
    ``torch.no_grad()`` has a value that still requires grad (``detached_update``), which its relayout, recorded
    there too, would otherwise lose."""
    relaid = laid_out_as(value, like)
    relaid.requires_grad = value.requires_grad
    return relaid


def _is_view_prim(bsym) -> bool:
    return bsym.sym.module == "prims" and bsym.sym.name in _VIEW_PRIMS


def _is_fallback_view(bsym) -> bool:
    from thunder.driver.functionalization import _FALLBACK_SCATTERS

    return getattr(bsym.sym, "torch_impl", None) in _FALLBACK_SCATTERS


_INPLACE_PARAMS: dict = {}


def _without_inplace(func, args, kwargs):
    """``(args, kwargs)`` with ``inplace=False`` if ``func`` was called with ``inplace=True``; else None."""
    sig = _INPLACE_PARAMS.get(func, 0)
    if sig == 0:
        try:
            sig = inspect.signature(func)
            sig = sig if "inplace" in sig.parameters else None
        except (TypeError, ValueError):
            sig = None
        _INPLACE_PARAMS[func] = sig
    if sig is None:
        return None
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    if not bound.arguments.get("inplace", False):
        return None
    bound.arguments["inplace"] = False
    return bound.args, bound.kwargs


def _bound_inplace(sym, args, kwargs) -> bool:
    try:
        return bool(sym.signature.bind(*args, **kwargs).arguments.get("inplace", False))
    except TypeError:
        return False


def _sanitize(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else "t_" + out


def check_tensor_type(t: torch.Tensor):
    if isinstance(t, torch.Tensor) and t.layout is not torch.strided:
        raise NotImplementedError(
            f"thunder does not support tensors of layout {t.layout} (sparse or other non-strided tensors) as inputs; "
            "convert with to_dense() first, or call the sparse operations outside the jitted function")
    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
        raise NotImplementedError(
            "thunder cannot trace a module with uninitialized (lazy) parameters or buffers, whose shapes are only "
            "known after a first call: run the module once on an example input before thunder.jit")
    if isinstance(t, torch.Tensor) and t._is_zerotensor():
        raise NotImplementedError(
            "thunder does not take ZeroTensors (tensors of zeros without memory, such as the gradient torch's autograd "
            "gives for sgn) as inputs when it traces; pass torch.zeros_like(t) or t.clone() instead")
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
    from thunder.driver.torchscript import check_module

    for qualname, m in module.named_modules(remove_duplicate=True):
        check_module(qualname, m)
        for k, v in vars(m).items():
            if isinstance(v, torch.Tensor) and id(v) not in sources:
                sources[id(v)] = AttrSource(m, qualname, k)
        forward = type(m).forward
        scan_function_sources(forward, sources)
    return sources
