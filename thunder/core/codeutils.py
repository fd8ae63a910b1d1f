"""Printing values and bound symbols as Python source."""
from __future__ import annotations

import math
import torch

from thunder.core import dtypes, devices
from thunder.core.proxies import TensorProxy, NumberProxy, Var, type_string
from thunder.core.pytree import tree_leaves

_BUILTIN_TYPES = {k: v for k, v in vars(__import__("builtins")).items() if isinstance(v, type)}
_LEAF_TYPES = (type(None), bool, int, float, complex, str, torch.dtype, torch.device, type(Ellipsis))
_PROXIES = (TensorProxy, NumberProxy, Var)


def flat_proxies(x) -> list:
    """All proxies in a nested structure (a pytree: tuples, lists, dicts, slices, ...), in order."""
    if isinstance(x, _PROXIES):
        return [x]
    return [p for p in tree_leaves(x) if isinstance(p, _PROXIES)]


# Names a printed program uses for other things than its variables and constants: its imports, a prologue's
# parameters, builtins and keywords.
RESERVED_NAMES = frozenset({"torch", "dtypes", "devices", "no_autocast", "prims", "ltorch", "args", "kwargs"}) | frozenset(
    __import__("keyword").kwlist) | frozenset(dir(__import__("builtins")))

# Names that constants of these types print under (``process_group`` for a torch.distributed ProcessGroup),
# registered by the modules that put them in traces. An object may also name itself (a ``trace_name`` attribute).
CONSTANT_NAMES: dict[type, str] = {}


def _constant_name(x) -> str | None:
    try:
        name = getattr(x, "trace_name", None)
    except Exception:  # an object whose attribute lookup fails in its own way
        name = None
    if not (isinstance(name, str) and name.isidentifier()):
        name = CONSTANT_NAMES.get(type(x))
    return name


class Printer:
    """Collects what a printed program needs besides its text: import lines and named constants."""

    def __init__(self, constants: dict | None = None, variables=frozenset()):
        self.imports: dict[str, None] = {}
        self.constants = constants if constants is not None else {}
        self._constant_names = {id(v): k for k, v in self.constants.items()}
        self._variables = variables  # the program's variable names, which a constant's name must not shadow

    def constant(self, value, hint: str | None = None) -> str:
        name = self._constant_names.get(id(value))
        if name is None:
            name = hint if hint and hint not in self.constants else f"_C{len(self.constants)}"
            while name in self.constants or name in self._variables or name in RESERVED_NAMES:
                name += "_"
            self.constants[name] = value
            self._constant_names[id(value)] = name
        return name

    def value(self, x) -> str:
        if isinstance(x, (TensorProxy, NumberProxy, Var)):
            return x.name
        if x is None or type(x) in (bool, int, str):
            return repr(x)
        if isinstance(x, type) and _BUILTIN_TYPES.get(x.__name__) is x:
            return x.__name__  # tuple, list, dict, ...: printed by name
        if type(x) is float:  # (subclasses: named constants; the repr of NumPy's float64 is not Python code)
            if math.isinf(x):
                return "float('inf')" if x > 0 else "-float('inf')"
            if math.isnan(x):
                return "float('nan')" if math.copysign(1.0, x) > 0 else "-float('nan')"
            return repr(x)
        if type(x) is complex:
            if all(math.isfinite(v) and v != 0.0 for v in (x.real, x.imag)):
                return repr(x)
            return f"complex({self.value(x.real)}, {self.value(x.imag)})"  # repr loses nan, inf and signed zeros
        if isinstance(x, torch.dtype):
            self.imports["from thunder.core import dtypes"] = None
            return dtypes.print_name(x)
        if isinstance(x, torch.device):
            self.imports["from thunder.core import devices"] = None
            return devices.print_name(x)
        if x is Ellipsis:
            return "..."
        if isinstance(x, slice):
            return f"slice({self.value(x.start)}, {self.value(x.stop)}, {self.value(x.step)})"
        if isinstance(x, list):
            return "[" + ", ".join(self.value(y) for y in x) + "]"
        if isinstance(x, torch.Size):
            return f"torch.Size([{', '.join(self.value(y) for y in x)}])"
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            if len(x) == 1:
                return f"({self.value(x[0])},)"
            return "(" + ", ".join(self.value(y) for y in x) + ")"
        if isinstance(x, dict) and type(x) is dict:
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in x.items()) + "}"
        return self.constant(x, _constant_name(x))

    def call_args(self, args, kwargs) -> str:
        parts = [self.value(a) for a in args]
        parts += [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    def output(self, out) -> str:
        if out is None:
            return "_"  # an output slot that holds no value (e.g. a gradient that was not asked for)
        if isinstance(out, list):
            return "[" + ", ".join(self.output(o) for o in out) + "]"
        if isinstance(out, (tuple, list)):
            names = ", ".join(self.output(o) for o in out)
            return f"({names},)" if len(out) == 1 else f"({names})"
        return self.value(out)


def output_comment(out) -> str:
    if isinstance(out, (TensorProxy, NumberProxy)):
        return f'{out.name}: "{type_string(out)}"'
    proxies = [p for p in flat_proxies(out) if not isinstance(p, Var)]
    if not proxies:
        return ""
    return ", ".join(f'{p.name}: "{type_string(p)}"' for p in proxies)


def _at_path(path: str):
    """The object a dotted path under ``torch`` names now (None if none)."""
    obj = torch
    for name in path.split(".")[1:]:
        obj = getattr(obj, name, None)
    return obj


def print_bsym(bsym, printer: Printer, indent: int = 1, comment: bool = False, depth: int | None = None) -> list[str]:
    """Lines for a bound symbol and, as nested comments, its decomposition."""
    pad = "  " * indent
    sym = bsym.sym
    if sym.printer is not None:
        code = sym.printer(bsym, printer)
    else:
        for imp in sym.imports:
            printer.imports[imp] = None
        impl = getattr(sym, "impl", None)
        callee = sym.print_name
        if impl is not None and not sym.imports and "." not in callee:
            printer.constants.setdefault(callee, impl)  # an executor's callable, passed as a global
        elif impl is not None and callee.startswith("torch.") and _at_path(callee) is not impl:
            # a library replaced torch's function (PyTorch Geometric's torch.index_select): the executor's, by value
            callee = printer.constant(impl, callee.rsplit(".", 1)[-1])
        call = f"{callee}({printer.call_args(bsym.args, bsym.kwargs)})"
        has_out = bsym.output is not None and flat_proxies(bsym.output) or isinstance(bsym.output, (TensorProxy, NumberProxy))
        code = f"{printer.output(bsym.output)} = {call}" if has_out else call
    oc = output_comment(bsym.output)
    line = f"{pad}{'# ' if comment else ''}{code}"
    if oc:
        line += f"  # {oc}"
    lines = [line]
    if depth is None or depth > 0:
        for sub in bsym.subsymbols:
            lines += print_bsym(sub, printer, indent + 1, comment=True, depth=None if depth is None else depth - 1)
    return lines
