"""Symbols (operations) and bound symbols (one application of an operation in a trace).

A ``Symbol`` called while a trace is being recorded appends a ``BoundSymbol`` to it. A symbol that
is not a primitive runs its Python definition, and the symbols that definition calls become the
bound symbol's ``subsymbols``: ``ltorch.add`` decomposes into ``prims.add``, and so on. Executors
later replace bound symbols by their own (``torch.add``), keeping the original as the only
subsymbol, which is how a printed trace shows both what runs and what it means.
"""
from __future__ import annotations

import enum
import inspect
from typing import Any, Callable

from thunder.core import codeutils
from thunder.core.proxies import TensorProxy, NumberProxy
from thunder.core.pytree import tree_map


class Tag(enum.Enum):
    """Properties of a symbol that passes must respect."""

    RANDOM = enum.auto()  # consumes the RNG: never removed, reordered across other random ops, or merged
    SIDE_EFFECT = enum.auto()  # mutates state outside the trace (copy into an input): never removed
    RECOMPUTE_IN_BACKWARD = enum.auto()  # recorded inside an activation-checkpointed region
    COLLECTIVE = enum.auto()  # communicates with other processes: never fused; fusion moves nothing across it
    # (a bound symbol's) its output is its first tensor argument itself in eager, with no autograd node of its own
    # (``x.contiguous()`` of a contiguous ``x``): gradients reaching the output are parts of the argument's sum
    RETURNS_INPUT = enum.auto()
    # copies Python data from host memory onto the tensor's device (``torch.tensor([...], device="cuda")``): a
    # CUDA graph cannot capture such a copy (its source is pageable memory, read once at capture)
    HOST_DATA = enum.auto()
    # its values are its torch kernel's roundings, which its decomposition does not reproduce (arange and linspace:
    # ATen's kernels compute ``start + step * i`` with fused multiply-adds): a fusion executor runs it whole
    KERNEL_ROUNDING = enum.auto()


def has_tag(bsym, *tags: Tag) -> bool:
    """Whether ``bsym``'s symbol, or one in its decomposition, has one of ``tags``."""
    return any(t in bsym.sym.tags for t in tags) or any(has_tag(s, *tags) for s in bsym.subsymbols)


# primitives whose output is a view of their input (thunder/core/prims.py)
VIEW_PRIMS = frozenset({"reshape", "transpose", "broadcast_in_dim", "squeeze", "slice_prim"})


def is_view(bsym) -> bool:
    """Whether ``bsym``'s output is (or may be: ``reshape``) a view of its first tensor argument: a symbol marked a view
    (``sym.is_view``, set by the torch language), a reshape, or a view primitive."""
    sym = bsym.sym
    return getattr(sym, "is_view", False) is True or sym.name == "reshape" or (sym.module == "prims"
                                                                               and sym.name in VIEW_PRIMS)


class Symbol:
    """An operation. ``fn`` is its meta function (primitives) or its definition (composites)."""

    def __init__(self, name: str, fn: Callable, *, module: str, is_prim: bool = False, tags=(), printer=None,
                 print_name: str | None = None, imports: tuple = (), executor=None):
        self.name = name
        self.module = module  # printed qualifier: "prims", "ltorch", "torch", ...
        self.fn = fn
        self.is_prim = is_prim
        self.tags = frozenset(tags)
        self.printer = printer  # optional: (bsym, printer) -> source of the call, for executors' inline code
        self.id = f"{module}.{name}"
        self.print_name = print_name or self.id  # the callee as printed (and executed) in traces
        self.imports = imports  # import lines the printed callee needs
        self.executor = executor  # the executor that runs this symbol, for executors' own symbols
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self.signature = None

    def __repr__(self):
        return f"[Symbol name={self.id}]"

    def normalize(self, args, kwargs):
        """Binds arguments to the signature: positional parameters positionally, the rest by keyword, defaults filled in."""
        sig = self.signature
        if sig is None:
            return tuple(args), dict(kwargs)
        ba = sig.bind(*args, **kwargs)
        ba.apply_defaults()
        return ba.args, ba.kwargs

    def __call__(self, *args, **kwargs):
        from thunder.core.trace import get_tracectx

        trace = get_tracectx()
        if trace is None:
            raise RuntimeError(f"{self.id} can only be called while thunder is tracing")
        if self.is_prim:
            out = self.fn(*args, **kwargs)
            subsymbols = ()
        else:
            trace.push_scope()
            try:
                out = self.fn(*args, **kwargs)
                aliased = _outputs_aliasing_inputs(out, args, kwargs)
                if aliased:
                    if not trace._scopes[-1] and len(aliased) == len(codeutils.flat_proxies(out)):
                        return out  # the operation is the identity here: nothing to record
                    out = _copy_aliased(out, aliased)
            finally:
                subsymbols = tuple(trace.pop_scope())
        nargs, nkwargs = self.normalize(args, kwargs)
        bsym = BoundSymbol(self, nargs, nkwargs, out, subsymbols, trace.current_tags)
        if trace.has_extents:
            from thunder.core.extents import record

            record(trace, bsym)
        else:
            trace.record(bsym)
        return out


def _outputs_aliasing_inputs(out, args, kwargs) -> set:
    outs = codeutils.flat_proxies(out)
    if not outs:
        return set()
    ins = {id(p) for p in codeutils.flat_proxies((args, kwargs))}
    return {id(o) for o in outs if id(o) in ins}


def _copy_aliased(out, aliased: set):
    """Outputs that are inputs get a fresh name (``prims.shallow_copy``), keeping traces in SSA form."""
    from thunder.core import prims

    def copy(x):
        return prims.shallow_copy(x) if isinstance(x, (TensorProxy, NumberProxy)) and id(x) in aliased else x

    return tree_map(copy, out)


class BoundSymbol:
    """``output = sym(*args, **kwargs)``, with the decomposition that produced it. Treat as immutable: use ``replace``."""

    __slots__ = ("sym", "args", "kwargs", "output", "subsymbols", "tags", "_flat_args", "_flat_outs")

    def __init__(self, sym: Symbol, args: tuple, kwargs: dict, output: Any, subsymbols: tuple = (), tags=frozenset()):
        self.sym = sym
        self.args = args
        self.kwargs = kwargs
        self.output = output
        self.subsymbols = subsymbols
        self.tags = tags
        self._flat_args = None
        self._flat_outs = None

    def replace(self, **changes) -> "BoundSymbol":
        fields = dict(sym=self.sym, args=self.args, kwargs=self.kwargs, output=self.output,
                      subsymbols=self.subsymbols, tags=self.tags)
        fields.update(changes)
        return BoundSymbol(**fields)

    @property
    def flat_args(self) -> list:
        """The proxies this bound symbol reads."""
        if self._flat_args is None:
            self._flat_args = codeutils.flat_proxies((self.args, self.kwargs))
        return self._flat_args

    @property
    def flat_outs(self) -> list:
        """The proxies this bound symbol defines."""
        if self._flat_outs is None:
            self._flat_outs = codeutils.flat_proxies(self.output)
        return self._flat_outs

    @property
    def has_tag(self):
        return lambda tag: tag in self.sym.tags or tag in self.tags

    def __repr__(self):
        return "\n".join(codeutils.print_bsym(self, codeutils.Printer(), indent=0))
