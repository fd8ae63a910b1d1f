"""The python executor: plain Python statements of traces (return, del, unpacking) and the checks of prologues.

Prologue checks raise ``CacheMiss`` when a cache entry does not apply to a call, so a hit costs
only the checks themselves.
"""
from __future__ import annotations

import torch

from thunder.core.codeutils import flat_proxies
from thunder.extend import OperatorExecutor, register_executor

ex = OperatorExecutor("python")
register_executor(ex, always=True)
_IMPORT = "from thunder.executors.pythonex import {}"


class CacheMiss(Exception):
    """A prologue check failed: this cache entry does not apply to the call."""


def _no_output(*args, **kwargs):
    return None


def _op(name, fn=None, *, printer=None, imports=True):
    return ex.register_operator(name, fn=fn or _no_output, meta=_no_output, printer=printer,
                                imports=(_IMPORT.format(name),) if imports and printer is None else ())


# -- statements ------------------------------------------------------------------------------

def _print_return(bsym, p):
    value = bsym.args[0]
    if type(value) is tuple and len(value) > 1:
        return "return " + ", ".join(p.value(v) for v in value)
    return f"return {p.value(value)}"


python_return = _op("python_return", printer=_print_return)


def _print_del(bsym, p):
    return "del " + ", ".join(a.name for a in bsym.args)


python_del = _op("python_del", printer=_print_del)


def _print_unpack_sequence(bsym, p):
    outs = bsym.output
    if not outs:
        return f"check_len({p.value(bsym.args[0])}, 0)"
    return ", ".join(o.name for o in outs) + f", = {p.value(bsym.args[0])}"


unpack_sequence = _op("unpack_sequence", printer=_print_unpack_sequence)


def _print_unpack_key(bsym, p):
    return f"{bsym.output.name} = {p.value(bsym.args[0])}[{p.value(bsym.args[1])}]"


unpack_key = _op("unpack_key", printer=_print_unpack_key)


def _print_unpack_attr(bsym, p):
    return f"{bsym.output.name} = {p.value(bsym.args[0])}.{bsym.args[1]}"


unpack_attr = _op("unpack_attr", printer=_print_unpack_attr)


def _print_unpack_module_tensor(bsym, p):
    module, collection, name = bsym.args
    return f"{bsym.output.name} = {p.value(module)}.{collection}[{name!r}]"


unpack_module_tensor = _op("unpack_module_tensor", printer=_print_unpack_module_tensor)


def _print_unpack_cell(bsym, p):
    return f"{bsym.output.name} = {p.value(bsym.args[0])}.cell_contents"


unpack_cell = _op("unpack_cell", printer=_print_unpack_cell)


def _print_clear(bsym, p):
    return f"{p.value(bsym.args[0])}.clear()"


clear_mutable_collection = _op("clear_mutable_collection", printer=_print_clear)

# -- prologue checks ---------------------------------------------------------------------------


def check_tensor(t, shape: tuple, device: torch.device, dtype: torch.dtype, requires_grad: bool):
    if (not isinstance(t, torch.Tensor) or t.shape != shape or t.dtype is not dtype or t.requires_grad is not requires_grad
            or t.device != device):
        raise CacheMiss


def check_len(seq, n: int):
    if len(seq) != n:
        raise CacheMiss


def check_keys(d, keys: tuple):
    if tuple(d) != keys:
        raise CacheMiss


def check_literal(x, value):
    """``x`` is ``value`` (a number, string, dtype, device, slice, None, ...) of the same type."""
    if type(x) is not type(value) or x != value:
        raise CacheMiss


def check_type(x, typ: type):
    if type(x) is not typ:
        raise CacheMiss


_any_autocast = torch._C._is_any_autocast_enabled


def check_global_state(grad_enabled: bool, default_dtype, autocast_state: tuple):
    if torch.is_grad_enabled() is not grad_enabled or torch.get_default_dtype() is not default_dtype:
        raise CacheMiss
    if autocast_state[0] or autocast_state[2]:
        if _autocast_state() != autocast_state:
            raise CacheMiss
    elif _any_autocast():
        raise CacheMiss


def _autocast_state():
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_enabled("cuda"),
            torch.get_autocast_dtype("cuda"))


def check_training(modules: tuple, flags: tuple):
    for m, f in zip(modules, flags):
        if m.training is not f:
            raise CacheMiss


for _fn in (check_tensor, check_len, check_keys, check_literal, check_type, check_global_state, check_training):
    globals()[_fn.__name__ + "_op"] = ex.register_operator(_fn.__name__, fn=_fn, meta=_no_output,
                                                           imports=(_IMPORT.format(_fn.__name__),))

# -- numbers: arithmetic on NumberProxies runs as Python (see [Note: Python number semantics]) -----

from thunder.core import prims  # noqa: E402
from thunder.core.proxies import TensorProxy  # noqa: E402

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//", "remainder": "%", "pow": "**",
          "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "bitwise_left_shift": "<<",
          "bitwise_right_shift": ">>"}
_PREFIX = {"neg": "-", "bitwise_not": "~"}


def _operand(p, x) -> str:
    s = p.value(x)
    return f"({s})" if s.startswith("-") else s


def _number_printer(name, fn):
    def printer(bsym, p):
        out = p.output(bsym.output)
        args = [_operand(p, a) for a in bsym.args]
        if name in _INFIX:
            return f"{out} = {args[0]} {_INFIX[name]} {args[1]}"
        if name in _PREFIX:
            return f"{out} = {_PREFIX[name]}{args[0]}"
        if getattr(fn, "__module__", None) == "math":
            p.imports["import math"] = None
            callee = f"math.{fn.__name__}"
        elif fn in (abs, round, max, min):
            callee = fn.__name__
        else:
            callee = p.constant(fn, f"number_{name}")
        return f"{out} = {callee}({', '.join(args)})"

    return printer


def _numbers_only(*args, **kwargs) -> bool:
    return not any(isinstance(a, TensorProxy) for a in flat_proxies((args, kwargs)))


for _name, _fn in prims.NUMBER_FNS.items():
    ex.register_implementation(getattr(prims, _name),
                               ex.register_operator(f"number_{_name}", fn=_fn, printer=_number_printer(_name, _fn)),
                               checker=_numbers_only)


def _extent(t, dim):
    return t.shape[dim]


ex.register_implementation(prims.size, ex.register_operator(
    "size", fn=_extent, printer=lambda b, p: f"{b.output.name} = {p.value(b.args[0])}.shape[{b.args[1]}]"))
