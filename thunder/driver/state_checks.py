"""The prologue checks of the Python state a trace read (see [Note: Python state] in ``python_state.py``).

Checks print as plain calls that name what they check: ``check_items(m_1.__dict__, ('p', 'inplace'),
(0.1, False))`` (an object's attributes), ``check_items(module._modules, ('fc',), (m_fc,))`` (its
submodules), ``check_module_calls(...)`` (modules called through their class's forward, without hooks),
``check_class_attrs``, ``check_items(g_<module>, ...)`` (globals), ``check_cells`` (closures). They go
right after the arguments are unpacked, before the parameters are fetched, so that a module whose
structure changed (a submodule replaced, a parametrization registered) is a cache miss, not an error.
"""
from __future__ import annotations

import enum

import torch

from thunder.core import statements as st
from thunder.core.proxies import Var
from thunder.driver.python_state import _CALL_STATE, _HOOK_DICTS, _NO_CHECK
from thunder.executors.pythonex import MISSING, Contents, InstanceOf, global_module_hooks


def emit_checks(rec, pb):
    """Adds a check of everything ``rec`` (a ``StateRecorder``) recorded to the prologue ``pb`` (a ``PrologueBuilder``)."""
    objects, classes, calls, call_classes = [], [], [], []
    any_call = False
    replaced = rec.replaced_objects()
    for holder, name in replaced.values():
        holder.items[name] = InstanceOf(holder.items[name].__class__)
    # replaced objects last: each is read from its holder once the holder's checks have found it there
    for w in sorted(rec.watched.values(), key=lambda w: id(w.obj) in replaced):
        if not w.seen and w.var is None:
            continue  # never read: the trace does not depend on it (an argument's type is checked in any case)
        any_call = any_call or (isinstance(w.obj, torch.nn.Module) and "_compiled_call_impl" in w.items)
        if id(w.obj) in replaced:
            holder, name = replaced[id(w.obj)]
            w.var = pb.attribute_var(_var(pb, holder), name, name)
        var = _var(pb, w)
        cls = pb.constant_var(w.cls, w.cls.__name__)
        if _standard_call(w):
            calls.append(var)
            call_classes.append(cls)
            for name in (*_CALL_STATE, *_HOOK_DICTS):
                w.items.pop(name, None)
        else:
            objects.append(var)
            classes.append(cls)
        _emit_items(rec, pb, st.check_items, var, "__dict__", w.items)
        for collection, entries in w.entries.items():
            _emit_items(rec, pb, st.check_items, var, collection, entries)
        _emit_items(rec, pb, st.check_attrs, var, None, w.attrs)
    if objects:
        pb.emit_state(st.check_types, tuple(objects), tuple(classes))
    if calls:
        pb.emit_state(st.check_module_calls, tuple(calls), tuple(call_classes))
    if any_call:  # torch's global module hooks run on every module call
        pb.emit_state(st.check_global_module_hooks, _value(rec, pb, global_module_hooks(), "global_hooks"))
    by_class: dict[type, dict] = {}
    for (cls, name), e in rec.class_attrs.items():
        by_class.setdefault(cls, {})[name] = e
    for cls, attrs in by_class.items():
        _emit_items(rec, pb, st.check_class_attrs, pb.constant_var(cls, cls.__name__), None, attrs)
    for g, read in rec.globals.values():
        hint = "g_" + str(g.get("__name__", "globals")).replace(".", "_")
        _emit_items(rec, pb, st.check_items, pb.constant_var(g, hint), None, read)
    cells = rec.ran_cells()
    if cells:
        pb.emit_state(st.check_cells, tuple(pb.constant_var(c, "cell_" + n) for c, n, _ in cells),
                      tuple(_value(rec, pb, e, n) for _, n, e in cells))


def _standard_call(w) -> bool:
    """Whether a module was called as modules usually are: forward from its class, no hooks, no compiled call."""
    if not isinstance(w.obj, torch.nn.Module) or "_compiled_call_impl" not in w.items:
        return False
    for name, standard in _CALL_STATE.items():
        if name in w.items and not any(w.items[name] is s for s in standard):
            return False
    for name in _HOOK_DICTS:
        e = w.items.get(name)
        if e is not None and not (type(e) is Contents and not e.items):
            return False
    return True


def _var(pb, w) -> Var:
    """How the prologue reaches a watched object: its argument, its module constant, else a constant."""
    if w.var is not None:
        return w.var
    if w.qualname is not None:
        return pb.module_var(w.obj, w.qualname)
    return pb.constant_var(w.obj, w.label.rsplit(".", 1)[-1].split(" ")[-1])


def _emit_items(rec, pb, op, var, where, expected: dict):
    names = tuple(n for n, e in expected.items() if e is not _NO_CHECK)
    if not names:
        return
    values = tuple(_value(rec, pb, expected[n], n) for n in names)
    if op is st.check_items:
        pb.emit_state(op, var, where, names, values)
    else:
        pb.emit_state(op, var, names, values)


def _value(rec, pb, e, hint: str):
    """``e`` as the prologue prints it: numbers, strings, None, dtypes and devices as literals, objects by name
    (tuples too, so that the check finds the very same object: see [Note: fast checks] in pythonex)."""
    if e is MISSING:
        return pb.missing_var()
    if isinstance(e, (int, float, complex, str, type(None), torch.dtype, torch.device)) and not isinstance(e, enum.Enum):
        return e
    if type(e) is tuple and not e:
        return e
    w = rec.watched.get(id(e))
    if w is not None and w.qualname is not None:
        return pb.module_var(e, w.qualname)
    name = getattr(e, "__qualname__", None)
    return pb.constant_var(e, name.replace(".", "_") if isinstance(name, str) else hint)
