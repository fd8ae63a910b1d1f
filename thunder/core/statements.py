"""Trace statements: the lines of a trace that are plain Python rather than operations.

``return``, ``del``, the unpacking of a program's inputs (``a, b, = args``, ``t_w = module._parameters['w']``)
and the checks of prologues (``check_tensor(a, ...)``) are symbols like any other, defined here, in the IR, so
that passes recognize them by identity (``bsym.sym is statements.python_return``, ``bsym.sym in CHECKS``), never
by name. Called while tracing they define no values; their bound symbols are recorded with the outputs they
bind. No executor claims them: they run as they print (``transform_for_execution`` keeps them as they are).

Most print as Python syntax. A check prints as a call of its implementation, a function of the python
executor (thunder/executors/pythonex.py) that raises ``CacheMiss`` when a cache entry does not apply to a
call; the printed prologue imports it from there.
"""
from __future__ import annotations

from thunder.core.symbol import Symbol

_IMPORT = "from thunder.executors.pythonex import {}"  # where the checks' implementations are


def _no_output(*args, **kwargs):
    return None


def _statement(name: str, printer) -> Symbol:
    return Symbol(name, _no_output, module="python", is_prim=True, printer=printer, print_name=name)


def _check(name: str, printer=None) -> Symbol:
    """A check prints as ``name(*args)``, importing its implementation, unless ``printer`` says otherwise."""
    return Symbol(name, _no_output, module="python", is_prim=True, printer=printer, print_name=name,
                  imports=() if printer is not None else (_IMPORT.format(name),))


# -- statements --------------------------------------------------------------------------------


def _print_return(bsym, p):
    value = bsym.args[0]
    if type(value) is tuple and len(value) > 1:
        return "return " + ", ".join(p.value(v) for v in value)
    return f"return {p.value(value)}"


python_return = _statement("python_return", _print_return)


def _print_del(bsym, p):
    return "del " + ", ".join(a.name for a in bsym.args)


python_del = _statement("python_del", _print_del)


def _print_unpack_sequence(bsym, p):
    outs = bsym.output
    if not outs:
        return f"check_len({p.value(bsym.args[0])}, 0)"
    return ", ".join(o.name for o in outs) + f", = {p.value(bsym.args[0])}"


unpack_sequence = _statement("unpack_sequence", _print_unpack_sequence)


def _print_unpack_key(bsym, p):
    return f"{bsym.output.name} = {p.value(bsym.args[0])}[{p.value(bsym.args[1])}]"


unpack_key = _statement("unpack_key", _print_unpack_key)


def _print_unpack_attr(bsym, p):
    return f"{bsym.output.name} = {p.value(bsym.args[0])}.{bsym.args[1]}"


unpack_attr = _statement("unpack_attr", _print_unpack_attr)


def _print_unpack_module_tensor(bsym, p):
    module, collection, name = bsym.args
    return f"{bsym.output.name} = {p.value(module)}.{collection}[{name!r}]"


unpack_module_tensor = _statement("unpack_module_tensor", _print_unpack_module_tensor)


def _print_unpack_cell(bsym, p):
    return f"{bsym.output.name} = {p.value(bsym.args[0])}.cell_contents"


unpack_cell = _statement("unpack_cell", _print_unpack_cell)


def _print_unpack_constant(bsym, p):
    return f"{bsym.output.name} = {p.value(bsym.args[0])}"


unpack_constant = _statement("unpack_constant", _print_unpack_constant)


def _print_clear(bsym, p):
    return f"{p.value(bsym.args[0])}.clear()"


clear_mutable_collection = _statement("clear_mutable_collection", _print_clear)

# -- prologue checks (their arguments are those of the functions of the same names in pythonex) -------

check_tensor = _check("check_tensor")
check_layout = _check("check_layout")
check_strides = _check("check_strides")
check_values = _check("check_values")
check_distinct = _check("check_distinct")
check_unshared = _check("check_unshared")
check_len = _check("check_len")
check_keys = _check("check_keys")
check_literal = _check("check_literal")
check_number = _check("check_number")
check_type = _check("check_type")
check_is = _check("check_is")
check_same_object = _check("check_same_object")
check_id = _check("check_id")
check_global_state = _check("check_global_state")
check_training = _check("check_training")
# checks of Python state (see [Note: Python state] in thunder/driver/python_state.py)
check_attrs = _check("check_attrs")
check_class_attrs = _check("check_class_attrs")
check_cells = _check("check_cells")
check_types = _check("check_types")
check_module_calls = _check("check_module_calls")
check_global_module_hooks = _check("check_global_module_hooks")


def _print_check_items(bsym, p):
    """``check_items(obj.attr, names, values)``: the bound symbol holds the object and the attribute apart."""
    obj, attr, names, values = bsym.args
    p.imports[_IMPORT.format("check_items")] = None
    where = p.value(obj) + (f".{attr}" if attr else "")
    return f"check_items({where}, {p.value(names)}, {p.value(values)})"


check_items = _check("check_items", _print_check_items)

CHECKS = frozenset({check_tensor, check_layout, check_strides, check_values, check_distinct, check_unshared, check_len, check_keys, check_literal,
                    check_number, check_type, check_is, check_same_object, check_id, check_global_state,
                    check_training, check_attrs, check_class_attrs, check_cells, check_types, check_module_calls,
                    check_global_module_hooks, check_items})
STATEMENTS = frozenset({python_return, python_del, unpack_sequence, unpack_key, unpack_attr, unpack_module_tensor,
                        unpack_cell, unpack_constant, clear_mutable_collection}) | CHECKS
