"""The Python state a traced program reads, recorded while tracing and checked by the prologue on every call.

[Note: Python state]
A trace bakes in every Python value the program read while it was traced: numbers and flags on modules
(a dropout's ``self.p``), submodules (``self.fc``), methods (``forward``), hooks, globals and closure
cells of the functions that ran, attributes of objects passed as arguments. ``StateRecorder`` records
these reads while the program is traced; each then becomes a prologue check, so that a later change
recompiles instead of running a stale trace:

- Attribute reads of *watched* objects: the jitted module and its submodules, non-tensor argument
  objects, and the modules and plain objects reached from them, from globals or from closures (e.g.
  ``self.config``). Reads are seen by replacing ``__getattribute__`` (and ``__getattr__``,
  ``__setattr__``) on the watched objects' classes while tracing; the replacements record only in the
  tracing thread and only for watched objects, and are removed when tracing ends.
- Globals and closure cells of the user's functions that ran: a trace function (chained to any other,
  e.g. the instruction recorder's) sees each function start, and the names its code loads.
- Module calls: ``forward`` and ``_call_impl`` come from the class, no compiled call, and the hooks of
  the module and torch's global module hooks are those that ran (hooks are traced like the program).

A non-tensor argument object is then checked by its type and these reads alone when it is a plain Python
object something was read from (``by_identity``): a fresh dataclass holding the same values reuses the
trace. Other argument objects are checked by identity, through a weak reference.

Only the first read of a name counts (later reads see what the program itself wrote). Values are
checked by kind (``expected``): value-like ones (numbers, strings, None, dtypes, enums, tuples of
these) by type and value, functions, classes and modules by identity, small lists, dicts and sets by
their contents, other objects by identity, and, when they are watched, by their own recorded reads.
What cannot be checked this way (attributes of objects of library or C types, large or nested
containers, closures of functions reached some other way) is reported under ``sharp_edges="warn"`` /
``"error"``. What the program stores in Python state (tensors and other values) is stored again after
every call (see [Note: state writes]).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import sysconfig
import threading
import types
import enum
import weakref
from numbers import Number
from typing import Any

import torch

from thunder.core import pytree
from thunder.driver import frontend
from thunder.driver.outputs import flatten_output
from thunder.core import proxies
from thunder.core.proxies import Var
from thunder.executors import pythonex as px
from thunder.executors.pythonex import MISSING, Contents, MethodOf

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
# Hooks that a library runs only when ``torch.compiler.is_compiling()`` is False, which it is not while thunder traces
# (see [Note: compiling flag] in frontend.py): registered, they would be skipped silently. module attribute -> library
_HOOKS_SKIPPED_WHILE_COMPILING = {
    f"_{stage}_forward{pre}_hooks": "PyTorch Geometric's MessagePassing"
    for stage in ("propagate", "message", "aggregate", "message_and_aggregate", "edge_update") for pre in ("", "_pre")}
_CALL_STATE = {"_compiled_call_impl": (None, MISSING), "forward": (MISSING,), "_call_impl": (MISSING,)}
_VALUE_TYPES = (int, float, complex, bool, str, bytes, type(None), torch.dtype, torch.device, type(Ellipsis), range,
                enum.Enum)
_IDENTITY_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type,
                   types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType)
_UNCHECKED_TYPES = (logging.Logger,)  # library objects whose state does not change what a program computes
_MAX_CONTENTS = 64  # larger containers are checked by identity only (and reported as a sharp edge)
_NO_CHECK = object()  # tensors: fetched again by the prologue, not compared


class Keys:
    """A module's ``_parameters`` / ``_buffers`` read as a whole: its names (the tensors are fetched on each call)."""

    __slots__ = ("type", "keys")

    def __init__(self, d):
        self.type, self.keys = type(d), tuple(d)

    def matches(self, x) -> bool:
        return type(x) is self.type and tuple(x) == self.keys

    def __repr__(self):
        return f"Keys({self.keys!r})"


px.register_snapshot_type(Keys)


class Watched:
    """A watched object and what the program read from it."""

    def __init__(self, obj, label: str, var: Var | None, qualname: str | None):
        self.obj = obj
        self.cls = type(obj)
        self.label = label
        self.var = var  # its prologue variable when it is an argument
        self.qualname = qualname  # its name in the jitted module, for modules of the jitted module
        self.dict = _instance_dict(obj)
        self.seen: set[str] = set()
        self.items: dict[str, Any] = {}  # name -> expected, read from the instance __dict__
        self.attrs: dict[str, Any] = {}  # name -> expected, read through getattr (slots, custom __getattribute__)
        self.entries: dict[str, dict[str, Any]] = {}  # "_modules"/"_parameters"/"_buffers" -> name -> expected
        self.whole = False  # its __dict__ was read as a whole (vars(obj), obj.__dict__): check it by identity


def _instance_dict(obj):
    try:
        return object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None


# ---------------------------------------------------------------------------------------------
# Class patches: recording attribute reads of watched objects
# ---------------------------------------------------------------------------------------------


class _Active(threading.local):
    recorder: "StateRecorder | None" = None


_ACTIVE = _Active()
_PATCH_LOCK = threading.Lock()
_PATCHES: dict[type, list] = {}  # class -> [count, {name: saved value or MISSING}]


def current() -> "StateRecorder | None":
    """The recorder of the program this thread is tracing, if any."""
    return _ACTIVE.recorder


def _patched_getattribute(orig):
    def __getattribute__(self, name):
        try:
            value = orig(self, name)
        except AttributeError:
            rec = _ACTIVE.recorder
            if rec is not None:
                rec.on_missing(self, name)
            raise
        rec = _ACTIVE.recorder
        if rec is not None:
            rec.on_read(self, name, value)
        return value

    return __getattribute__


def _patched_getattr(orig):
    def __getattr__(self, name):
        try:
            value = orig(self, name)
        except AttributeError:
            rec = _ACTIVE.recorder
            if rec is not None:
                rec.on_getattr(self, name, MISSING)
            raise
        rec = _ACTIVE.recorder
        if rec is not None:
            rec.on_getattr(self, name, value)
        return value

    return __getattr__


def _patched_setattr(orig):
    def __setattr__(self, name, value):
        rec = _ACTIVE.recorder
        if rec is None or not rec.is_watched(self):  # unwatched: no read (a lazy __getattr__ may assign)
            return orig(self, name, value)
        old = rec.read_quietly(self, name)
        orig(self, name, value)
        rec.on_write(self, name, old)

    return __setattr__


def _patch(cls: type) -> bool:
    """Installs the recording methods on ``cls`` (counted: several tracing threads may share a class)."""
    with _PATCH_LOCK:
        entry = _PATCHES.get(cls)
        if entry is None:
            saved = {}
            originals = {"__getattribute__": cls.__getattribute__, "__setattr__": cls.__setattr__}
            if getattr(cls, "__getattr__", None) is not None:
                originals["__getattr__"] = cls.__getattr__
            makers = {"__getattribute__": _patched_getattribute, "__getattr__": _patched_getattr,
                      "__setattr__": _patched_setattr}
            try:
                for name, orig in originals.items():
                    saved[name] = cls.__dict__.get(name, MISSING)
                    setattr(cls, name, makers[name](orig))
            except (TypeError, AttributeError):  # a class that cannot be changed
                _restore(cls, saved)
                return False
            entry = _PATCHES[cls] = [0, saved]
        entry[0] += 1
        return True


def _unpatch(cls: type):
    with _PATCH_LOCK:
        entry = _PATCHES[cls]
        entry[0] -= 1
        if entry[0] == 0:
            del _PATCHES[cls]
            _restore(cls, entry[1])


def _restore(cls, saved: dict):
    for name, value in saved.items():
        if value is MISSING:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            setattr(cls, name, value)


_USER_CODE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # code -> whether it is the user's


def _library_prefixes() -> tuple[tuple, tuple, tuple]:
    """Prefixes of library files: thunder and torch, and the standard library except its installed packages
    (site-packages: e.g. transformers' code counts as the user's)."""
    thunder_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sysconfig.get_paths()

    def prefixes(dirs):
        return tuple(dict.fromkeys(os.path.realpath(d) + os.sep for d in dirs))

    return (prefixes([thunder_root, os.path.dirname(torch.__file__)]), prefixes([paths["stdlib"], paths["platstdlib"]]),
            prefixes([paths["purelib"], paths["platlib"]]))


_LIBRARY_FILES: dict[str, bool] = {}


def _is_library_file(filename: str, prefixes: tuple) -> bool:
    known = _LIBRARY_FILES.get(filename)
    if known is not None:
        return known
    ours, stdlib, installed = prefixes
    path = filename if filename.startswith(ours + stdlib) else os.path.realpath(filename)
    library = (filename.startswith(("thunder.", "<frozen ")) or path.startswith(ours)
               or (path.startswith(stdlib) and not path.startswith(installed)))
    _LIBRARY_FILES[filename] = library
    return library


_LIBRARY_PREFIXES = _library_prefixes()


# [Note: type() of traced tensors]
# A traced tensor is a TensorProxy, a torch.Tensor subclass, so ``type(x) is torch.Tensor`` would be False while
# tracing where eager says True. While a program is traced, the user modules whose code calls ``type`` see a global
# ``type`` (``_TracedType``) that answers ``torch.Tensor`` (``nn.Parameter`` for parameters) for a proxy, and is
# the builtin otherwise: ``type(x, ...)`` with three arguments, ``isinstance(c, type)``, ``class M(type)`` and
# ``type.__name__`` behave as the builtin's. It is removed when tracing ends.
class _TypeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, type)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, type)

    def __repr__(cls):
        return repr(type)


class _TracedType(type, metaclass=_TypeMeta):
    def __new__(mcls, *args, **kwargs):
        if mcls is _TracedType:
            if len(args) == 1 and not kwargs:
                t = type(args[0])
                if t is proxies.TensorProxy:
                    return torch.nn.Parameter if getattr(args[0], "_is_param", False) else torch.Tensor
                return _TracedType if t is type else t  # type(C) is type, for a class C
            return type(*args, **kwargs)
        return type.__new__(mcls, *args, **kwargs)  # a metaclass the program defines: class M(type)


_TYPE_SHADOWS: dict[int, list] = {}  # id(globals) -> [globals, count]: modules whose ``type`` is shadowed


def _shadow_type(g: dict) -> bool:
    with _PATCH_LOCK:
        entry = _TYPE_SHADOWS.get(id(g))
        if entry is None:
            if "type" in g:
                return False  # the module defines its own ``type``
            entry = _TYPE_SHADOWS[id(g)] = [g, 0]
            g["type"] = _TracedType
        entry[1] += 1
        return True


def _unshadow_type(g: dict):
    with _PATCH_LOCK:
        entry = _TYPE_SHADOWS[id(g)]
        entry[1] -= 1
        if not entry[1]:
            del _TYPE_SHADOWS[id(g)]
            if g.get("type") is _TracedType:
                del g["type"]


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import statement (importlib's frames are on the stack)."""
    f = frame.f_back
    while f is not None:
        if f.f_code.co_filename.startswith("<frozen importlib"):
            return True
        f = f.f_back
    return False


def _python_class(cls: type) -> bool:
    """Whether ``cls`` and its bases are all defined in Python (heap types), ``object`` aside."""
    return all(c is object or c.__flags__ & (1 << 9) for c in cls.__mro__)


def _watchable(cls: type, skipped: tuple) -> bool:
    """Instances of classes defined in Python outside torch, thunder and the standard library, and all modules."""
    if cls.__flags__ & (1 << 8) or not cls.__flags__ & (1 << 9):  # immutable or static (C) types
        return False
    if issubclass(cls, torch.nn.Module):
        return True
    if issubclass(cls, (torch.Tensor, enum.Enum, BaseException)) or cls.__module__ == "builtins":
        return False
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    return filename is not None and not _is_library_file(filename, skipped)


# ---------------------------------------------------------------------------------------------
# The recorder
# ---------------------------------------------------------------------------------------------


class StateRecorder:
    """Records the Python state one trace depends on (see [Note: Python state])."""

    def __init__(self, tracer, sharp_edges=None):
        self.tracer = tracer
        self.known_sources = tracer.known_sources
        self.sharp_edges = sharp_edges
        self.skipped = _LIBRARY_PREFIXES
        self.watched: dict[int, Watched] = {}
        self.patched: list[type] = []
        self.class_attrs: dict[tuple, Any] = {}  # (class, name) -> expected
        self.class_lookups: dict[tuple, Any] = {}  # (class, name) -> _class_lookup(class, name), while tracing
        self.globals: dict[int, tuple] = {}  # id(globals dict) -> (dict, {name: expected})
        self.type_shadowed: dict[int, dict] = {}  # see [Note: type() of traced tensors]
        self.functions: dict[int, types.FunctionType] = {}
        self.cells: dict[int, tuple] = {}  # id(cell) -> (function, cell, name, expected)
        self.codes: dict = {}  # code objects that ran -> True when it is user code
        self.problems: dict[str, None] = {}
        self.writes: dict[tuple, tuple] = {}  # (id(obj), name) -> (obj, name, value before the first write, label)
        self.containers: dict[int, tuple] = {}  # id -> (list, dict or set the program read, label, its first contents)
        self.snapshots: dict[int, list] = {}  # id(container) -> the Contents it is checked against
        self.write_targets: set[int] = set()  # argument objects written back: checked by identity
        self.busy = False
        self.internal = 0  # > 0 while thunder handles a torch call: the code running then is not the program's
        self._prev_trace = None

    def emit(self, pb):
        """Adds a check of everything recorded to the prologue being built (``pb``, a ``PrologueBuilder``)."""
        from thunder.driver.state_checks import emit_checks

        pb.check_objects(self.by_identity)
        emit_checks(self, pb)

    def by_identity(self, obj) -> bool:
        """Whether an argument object must be the very object of the first call: unless it is a plain Python object
        (its classes all defined in Python, not a module) whose attributes the program read one by one, and so
        were recorded, in which case another object of the same class holding the same values gives the same trace."""
        w = self.watched.get(id(obj))
        if w is None or w.whole or not w.seen or isinstance(obj, torch.nn.Module) or id(obj) in self.write_targets:
            return True  # (an object nothing was read from may be a sentinel, compared with `is`)
        return not _python_class(type(obj))

    def replaced_objects(self) -> dict:
        """Objects the program read from and then replaced where it found them (``holder.state = new_state``; einx
        replaces its backend registry's state object on every call): ``id(object) -> (the holder's Watched, the
        attribute)``. Such an object is checked by its class and by what the program read from it, on whatever
        object the attribute holds at the call, not as the very object, which the program's own write replaced
        (it would miss on every call). Plain Python objects only, as for argument objects (``by_identity``)."""
        found = {}
        for obj, name, old, _ in self.writes.values():
            holder, w = self.watched.get(id(obj)), self.watched.get(id(old))
            if (holder is None or w is None or not w.seen or w.whole or w.var is not None or w.qualname is not None
                    or isinstance(old, torch.nn.Module) or id(old) in self.write_targets
                    or holder.items.get(name) is not old
                    or not _python_class(w.cls)):
                continue
            found[id(old)] = (holder, name)
        return found

    # -- what is watched ----------------------------------------------------------------------
    def watch(self, obj, label: str, *, var: Var | None = None, qualname: str | None = None) -> bool:
        if id(obj) in self.watched:
            return True
        cls = type(obj)
        if not _watchable(cls, self.skipped) or not _patch(cls):
            return False
        self.patched.append(cls)
        w = self.watched[id(obj)] = Watched(obj, label, var, qualname)
        if isinstance(obj, torch.nn.Module):
            self._no_hooks_skipped_while_compiling(w)
            if qualname is None:
                self._module_sources(obj, label)
        return True

    def _no_hooks_skipped_while_compiling(self, w: Watched):
        """Refuses a module with hooks its library skips while compiling; where it has none, the prologue checks that
        none is added (which recompiles, and refuses)."""
        for name, library in _HOOKS_SKIPPED_WHILE_COMPILING.items():
            hooks = w.dict.get(name) if w.dict is not None else None
            if hooks is None:
                continue
            if hooks:
                raise NotImplementedError(
                    f"thunder cannot run the hooks in {w.label}.{name}: {library} runs them only when "
                    "torch.compiler.is_compiling() is False, and it is True while thunder traces (as under torch.compile), "
                    "so they would be skipped silently. Remove them, or call the module outside the jitted function.")
            w.seen.add(name)
            w.items[name] = self.expected(hooks, f"{w.label}.{name}", w.obj, name)

    def _module_sources(self, module: torch.nn.Module, label: str):
        """Parameters and buffers of a module outside the jitted module are fetched from it on every call."""
        for collection in ("_parameters", "_buffers"):
            for name, t in module.__dict__[collection].items():
                if isinstance(t, torch.Tensor) and id(t) not in self.known_sources:
                    self.known_sources[id(t)] = frontend.ModuleTensorSource(module, label, collection, name)

    def discover(self, fn):
        """A function the program may call: tensors in its closure are fetched on each call, other cells are
        checked if it runs (against what they hold now, before it runs)."""
        fn = getattr(fn, "__func__", fn)
        if not isinstance(fn, types.FunctionType) or id(fn) in self.functions:
            return
        self.functions[id(fn)] = fn
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            if name == "__class__" or id(cell) in self.cells:
                continue
            try:
                v = cell.cell_contents
            except ValueError:
                self.cells[id(cell)] = (fn, cell, name, MISSING)
                continue
            if isinstance(v, torch.Tensor):
                if id(v) not in self.known_sources:
                    self.known_sources[id(v)] = frontend.CellSource(cell, name)
                continue
            self.cells[id(cell)] = (fn, cell, name, self.expected(v, f"{fn.__qualname__}'s closure variable {name}",
                                                                  None, None))

    # -- reads ----------------------------------------------------------------------------------
    def on_read(self, obj, name: str, value):
        w = self.watched.get(id(obj))
        if w is None or self.busy or self.internal or name in w.seen:
            return
        if name[:2] == "__" and name[-2:] == "__":  # internals; the __dict__ of an object (not a module) read as a
            if name == "__dict__" and not isinstance(obj, torch.nn.Module):  # whole: what it holds is not recorded
                w.whole = True
            return
        w.seen.add(name)
        self.busy = True
        try:
            self._read(w, name, value)
        finally:
            self.busy = False

    def _read(self, w: Watched, name: str, value):
        if w.qualname is not None and name == "training":
            return  # checked for every module of the jitted module (check_training)
        if name == "_compiled_call_impl" and isinstance(w.obj, torch.nn.Module):
            w.items[name] = w.dict.get(name, MISSING)  # a module's call state (see _standard_call)
            return
        lookups = self.class_lookups
        key = (w.cls, name)
        cattr = lookups.get(key, lookups)  # the dict itself: not looked up yet
        if cattr is lookups:
            cattr = lookups[key] = _class_lookup(w.cls, name)
        if cattr is not MISSING and _is_data_descriptor(cattr):
            self._class_attr(w.cls, name, w.label)
            if isinstance(cattr, types.MemberDescriptorType):  # a slot
                w.attrs[name] = self.expected(value, f"{w.label}.{name}", w.obj, name)
            return
        if w.dict is not None and name in w.dict:
            if name in ("_parameters", "_buffers") and isinstance(w.obj, torch.nn.Module):
                w.items[name] = Keys(value)
                return
            w.items[name] = self.expected(value, f"{w.label}.{name}", w.obj, name)
        elif cattr is not MISSING:
            if w.dict is not None:
                w.items[name] = MISSING  # not shadowed by an instance attribute
            self._class_attr(w.cls, name, w.label)
        else:  # produced by the class's own __getattribute__
            w.attrs[name] = self.expected(value, f"{w.label}.{name}", w.obj, name)

    def on_missing(self, obj, name: str):
        w = self.watched.get(id(obj))
        if w is None or self.busy or self.internal or name in w.seen or getattr(w.cls, "__getattr__", None) is not None:
            return
        w.seen.add(name)
        if w.dict is not None:
            w.items[name] = MISSING
        else:
            w.attrs[name] = MISSING

    def on_getattr(self, obj, name: str, value):
        """A read that ``__getattr__`` answered (or failed to: ``MISSING``): a module's parameters, buffers, submodules."""
        w = self.watched.get(id(obj))
        if w is None or self.busy or self.internal or name in w.seen:
            return
        w.seen.add(name)
        self.busy = True
        try:
            if not isinstance(obj, torch.nn.Module):
                w.attrs[name] = value if value is MISSING else self.expected(value, f"{w.label}.{name}", obj, name)
            elif value is MISSING:
                w.items[name] = MISSING
                for collection in ("_parameters", "_buffers", "_modules"):
                    w.entries.setdefault(collection, {})[name] = MISSING
            else:
                self._module_entry(w, name, value)
        finally:
            self.busy = False

    def _module_entry(self, w: Watched, name: str, value):
        for collection in ("_parameters", "_buffers", "_modules"):
            if name not in w.dict.get(collection, ()):
                continue
            if value is None:  # e.g. a Linear without bias: a later parameter must recompile
                w.entries.setdefault(collection, {})[name] = None
            elif collection == "_modules":
                w.entries.setdefault(collection, {})[name] = value
                self._watch_child(value, w, name)
            elif not isinstance(value, frontend.TensorProxy) and id(value) not in self.known_sources:
                self.known_sources[id(value)] = frontend.ModuleTensorSource(w.obj, w.label, collection, name)
            return  # tensors are fetched by the prologue on each call
        w.attrs[name] = self.expected(value, f"{w.label}.{name}", w.obj, name)  # the class's own __getattr__

    def is_watched(self, obj) -> bool:
        return id(obj) in self.watched

    def read_quietly(self, obj, name: str):
        """``obj.name`` (MISSING if unset), read without recording it."""
        busy, self.busy = self.busy, True
        try:
            return getattr(obj, name, MISSING)
        except Exception:  # noqa: BLE001 - a property that fails: nothing to restore
            return MISSING
        finally:
            self.busy = busy

    def on_write(self, obj, name: str, old=MISSING):
        w = self.watched.get(id(obj))
        if w is None or self.busy or self.internal:
            return
        self.writes.setdefault((id(obj), name), (obj, name, old, w.label))
        w.seen.add(name)  # later reads see what the program wrote, not outside state

    def _watch_child(self, module, parent: Watched, name: str):
        if id(module) in self.watched:
            return
        qualname = None
        if parent.qualname is not None:
            qualname = f"{parent.qualname}.{name}" if parent.qualname else name
        self.watch(module, f"{parent.label}.{name}", qualname=qualname)

    def _class_attr(self, cls: type, name: str, label: str):
        key = (cls, name)
        if key in self.class_attrs:
            return
        value = getattr(cls, name, MISSING)
        if isinstance(value, types.MethodType) and getattr(cls, name, None) is not value:
            self.class_attrs[key] = MethodOf(value)  # a classmethod: bound afresh on each read
            self.discover(value)
        elif hasattr(type(value), "__get__") and not isinstance(value, types.FunctionType):
            self.class_attrs[key] = value  # a descriptor (property, ...): what it reads from the object is recorded
            self.discover(getattr(value, "fget", None))
        else:
            self.class_attrs[key] = self.expected(value, f"{cls.__qualname__}.{name}", None, None)

    # -- what a value is checked against ----------------------------------------------------------
    def expected(self, value, label: str, owner, name, depth: int = 0):
        """What the prologue compares a value read by the program with (see [Note: Python state])."""
        if isinstance(value, torch.Tensor):
            if owner is not None and id(value) not in self.known_sources and not isinstance(value, frontend.TensorProxy):
                self.known_sources[id(value)] = frontend.AttrSource(owner, label, name)
            return _NO_CHECK
        if isinstance(value, _VALUE_TYPES):
            return value
        if isinstance(value, tuple) and type(value) in (tuple, torch.Size) and depth < 4:
            if all(self.expected(v, label, None, None, depth + 1) is v for v in value):
                return value
        if isinstance(value, _IDENTITY_TYPES):
            self.discover(value)
            return value
        if type(value) in (list, dict, set, frozenset, tuple) or type(value).__name__ == "OrderedDict":
            if isinstance(value, (list, dict, set)) and id(value) not in self.containers:
                self.containers[id(value)] = (value, label, value.copy())
            return self._contents(value, label, depth)
        if isinstance(value, torch.nn.Module):
            self.watch(value, label)
            return value
        if not self.watch(value, label) and not isinstance(value, _UNCHECKED_TYPES):
            self._problem(f"{label} is a {type(value).__qualname__} object: thunder checks that it is the same object "
                          "on each call, but not its attributes; changing them after the first call is not seen")
        return value

    def _contents(self, value, label: str, depth: int):
        if isinstance(value, (set, frozenset)) and all(isinstance(v, _VALUE_TYPES) for v in value):
            snapshot = Contents(type(value), frozenset(value))  # of any size: compared as one set, in C
            self.snapshots.setdefault(id(value), []).append(snapshot)
            return snapshot
        if len(value) > _MAX_CONTENTS or depth >= 3:
            self._problem(f"{label} is a {type(value).__name__} of {len(value)} items{' nested in others' if depth else ''}"
                          ": thunder checks that it is the same object on each call, but not its contents (it compares "
                          f"the contents of lists, dicts and sets of up to {_MAX_CONTENTS} items, 3 levels deep)")
            return value
        if isinstance(value, (set, frozenset)):
            self._problem(f"{label} is a set of objects: thunder checks that it is the same set, but not its contents")
            return value
        if isinstance(value, dict):
            items = tuple((k, self._item(v, label, depth)) for k, v in value.items())
        else:
            items = tuple(self._item(v, label, depth) for v in value)
        snapshot = Contents(type(value), items)
        self.snapshots.setdefault(id(value), []).append(snapshot)
        return snapshot

    def _item(self, v, label: str, depth: int):
        e = self.expected(v, label + "[...]", None, None, depth + 1)
        return v if e is _NO_CHECK else e  # a tensor in a container: the same tensor object

    def _problem(self, message: str):
        self.problems[message] = None

    # -- globals and closures of the functions that ran -------------------------------------------
    def _trace_calls(self, frame, event, arg):
        code = frame.f_code
        if code not in self.codes and not self.internal and code.co_name != "<module>" and not _importing(frame):
            self._new_code(frame)  # (code run by an import, e.g. a library's lazy import inside torch, is not the program's)
        prev = self._prev_trace
        return prev(frame, event, arg) if prev is not None else None

    def _new_code(self, frame):
        code = frame.f_code
        user = _USER_CODE.get(code)
        if user is None:
            user = _USER_CODE[code] = not _is_library_file(code.co_filename, self.skipped)
        self.codes[code] = user
        if not user:
            return
        g = frame.f_globals
        entry = self.globals.get(id(g))
        if entry is None:
            entry = self.globals[id(g)] = (g, {})
        read = entry[1]
        self.busy = True
        try:
            for name in code.co_names:
                if name in read or name not in g:
                    continue
                value = g[name]
                if value is _TracedType:
                    continue  # see [Note: type() of traced tensors]
                if isinstance(value, types.ModuleType):
                    continue  # an imported module (torch, F, math): assumed never rebound (see the README)
                if isinstance(value, torch.Tensor):
                    if id(value) not in self.known_sources:
                        self.known_sources[id(value)] = frontend.GlobalSource(g, name)
                    continue
                read[name] = self.expected(value, f"the global {name}", None, None)
        finally:
            self.busy = False
        if "type" in code.co_names and id(g) not in self.type_shadowed and _shadow_type(g):
            self.type_shadowed[id(g)] = g  # see [Note: type() of traced tensors]

    @contextlib.contextmanager
    def active(self):
        """Records while the program runs in this thread."""
        prev_rec = _ACTIVE.recorder
        self._prev_trace = sys.gettrace()
        _ACTIVE.recorder = self
        sys.settrace(self._trace_calls)
        try:
            yield self
        finally:
            sys.settrace(self._prev_trace)
            _ACTIVE.recorder = prev_rec

    def close(self):
        """Removes the class patches and the shadowed ``type``s (call once, after tracing)."""
        for cls in self.patched:
            _unpatch(cls)
        self.patched.clear()
        for g in self.type_shadowed.values():
            _unshadow_type(g)
        self.type_shadowed.clear()

    def ran_cells(self) -> list:
        """(cell, name, expected) of the closures of the user's functions that ran."""
        ran = {code for code, user in self.codes.items() if user}
        return [(cell, name, e) for fn, cell, name, e in self.cells.values() if fn.__code__ in ran and e is not _NO_CHECK]

    def unchecked_closures(self) -> list:
        """User functions with closures that ran but that thunder reached no function object of."""
        ran = [code for code, user in self.codes.items() if user]
        known = {fn.__code__ for fn in self.functions.values()}
        nested = {c for code in ran for c in code.co_consts if isinstance(c, types.CodeType)}
        return [code for code in ran if set(code.co_freevars) - {"__class__"} and code not in known and code not in nested]

    def take_state_writes(self, module_tensors: frozenset) -> list["StateWrite"]:
        """The attributes the program assigned and the lists, dicts and sets it read and changed, as ``StateWrite``s,
        which the cache entry repeats after every call (see [Note: state writes]). Those holding traced tensors are
        put back as they were first; what cannot be written back is refused.

        ``module_tensors``: the names of the proxies standing for the jitted module's parameters and buffers. A value
        holding only those (nn.LSTM's ``_flat_weights`` lists its parameters) is given the real tensors instead, once:
        they are the same tensors on every call.
        """
        taken, refused = [], []
        real = self.tracer.real_inputs
        for obj, name, old, label in self.writes.values():
            value = self.read_quietly(obj, name)
            traced = _proxies_in(value) if value is not MISSING else []
            if traced and self._module_tensors_only(traced, module_tensors):
                setattr(obj, name, _with_real_tensors(value, real))
                continue
            if traced:
                if old is MISSING:
                    delattr(obj, name)
                else:
                    setattr(obj, name, old)
            taken.append((obj, name, value, f"{label}.{name}"))
        for container, label, first in self.containers.values():
            if _same_contents(container, first):
                continue
            traced = _proxies_in(container)
            if traced and self._module_tensors_only(traced, module_tensors):
                _refill(container, _with_real_tensors(container.copy(), real))
                if not _proxies_in(container):
                    continue
            if id(container) not in self.snapshots:  # its contents are not checked (reported): nor written back
                if traced:
                    _refill(container, first)
                    refused.append(f"{label} (a {type(container).__name__} of {len(container)} items)")
                continue
            contents = container.copy()
            if traced:
                _refill(container, first)
                if isinstance(container, set):
                    refused.append(f"{label} (a set)")
                    continue
            taken.append((container, None, contents, label))
        # Everything is back as it was: objects of the program's state in a value hold no traced tensor now (they are
        # kept as they are; what the program stored in them is written back on its own), unless it got there unseen.
        writes = []
        for target, name, value, label in taken:
            if _rebuildable(value, self.watched):
                writes.append(StateWrite(target, name, value, label))
            else:
                refused.append(label if name is not None else f"{label} (a {type(target).__name__})")
        if refused:
            raise NotImplementedError(
                f"The program stores a tensor it computes in {', '.join(refused)} while thunder traces it. thunder "
                "repeats such assignments after every call only for a tensor, or tuples, lists, dicts and new objects "
                "holding tensors and constants, assigned to an attribute or put in a list or dict (of at most "
                f"{_MAX_CONTENTS} items); this value would keep a traced tensor. Return the tensor from the jitted "
                "function instead (and keep the state outside it), or update an existing tensor in place "
                "(`self.buf.copy_(value)`).")
        for w in writes:
            target = w.target()
            if w.name is None:
                for snapshot in self.snapshots.get(id(target), ()):
                    snapshot.same = target  # written into: the very container on later calls
            elif not isinstance(target, torch.nn.Module):
                self.write_targets.add(id(target))  # an argument object: the very object (checked by identity)
        return writes

    def _module_tensors_only(self, proxies: list, module_tensors: frozenset) -> bool:
        real, aliases = self.tracer.real_inputs, self.tracer.aliases.current
        return all(p.name in real and p.name not in aliases and
                   (p.name in module_tensors or isinstance(real[p.name], torch.nn.Parameter)) for p in proxies)

    def report(self):
        """Reports what thunder cannot check, as ``sharp_edges`` asks."""
        for code in self.unchecked_closures():
            self._problem(f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) reads variables of an enclosing "
                          "function (a closure) that thunder cannot check, as it reached the function in a way it does "
                          "not follow; changing them after the first call is not seen")
        if self.sharp_edges not in ("warn", "error") or not self.problems:
            return
        if self.sharp_edges == "error":
            raise frontend.ThunderSharpEdgeError("Sharp edge: " + "\n".join(self.problems))
        import warnings

        for message in self.problems:
            warnings.warn("Sharp edge: " + message, stacklevel=4)


# [Note: state writes]
# A program may store tensors in Python state: ``self.cache = k`` on a module, ``layer.keys = torch.cat(...)`` on an
# argument object (Hugging Face's DynamicCache), ``self.table[key] = bias`` in a dict it reads (timm's LeViT in eval
# mode), ``history.append(y)``. Later calls run the trace, not the Python, so the trace itself must do the storing.
# When tracing ends, each attribute or container that holds traced tensors is put back as it was, and becomes a
# ``StateWrite``: its value's traced tensors join the computation's outputs (the trace returns ``(output, (t1,
# ...))``), and after every call the cache entry stores the value again with that call's tensors (``run_entry``).
# Tensors keep their autograd history, as in eager. The target is the very object of the first call: argument
# objects and containers written into are checked by identity by the prologue, so another object gives another
# entry. Values may be tensors, or tuples, lists, dicts and objects the program made, holding tensors and constants
# (a new object is made again, as a shallow copy, on every call); anything else holding a traced tensor (a set, a
# dataclass, an object that existed before the call) is refused. Python values alone (a counter, a shape) are
# stored as the trace saw them: the prologue checks what they were computed from, so a call that reuses the entry
# (after a reset, say) stores what eager would.


class StateWrite:
    """``target.name = value`` (``name`` None: a list's, dict's or set's contents become ``value``), repeated by the
    cache entry after every call with that call's tensors (see [Note: state writes]). ``leaves``: the traced tensors
    in ``value``, which the computation returns; ``apply`` takes their values."""

    __slots__ = ("target", "name", "leaves", "rebuild", "label")

    def __init__(self, target, name: str | None, value, label: str):
        try:
            self.target = weakref.ref(target)
        except TypeError:  # (lists, dicts, objects with __slots__): the prologue holds them too
            self.target = lambda: target
        self.name, self.label = name, label
        self.leaves, self.rebuild = flatten_output(value)

    def apply(self, values):
        target = self.target()
        if target is None:
            return
        value = self.rebuild(values)
        if self.name is None:
            _refill(target, value)
        elif value is MISSING:  # (assigned, then deleted)
            if hasattr(target, self.name):
                delattr(target, self.name)
        else:
            setattr(target, self.name, value)

    def __repr__(self):
        return f"StateWrite({self.label})"


def _rebuildable(value, watched: dict, depth=0) -> bool:
    """Whether ``value``'s traced tensors can be replaced by each call's: it is one, or tuples, lists and dicts of
    them and of values that hold none (kept as they are), or objects the program made while traced (made again, as
    shallow copies, on every call, as eager makes a new one on every call)."""
    if isinstance(value, (proxies.TensorProxy, proxies.NumberProxy)) or not _proxies_in(value):
        return True
    if depth >= 8:
        return False
    if type(value) in (tuple, list):
        return all(_rebuildable(v, watched, depth + 1) for v in value)
    if type(value) is dict:
        return not _proxies_in(list(value)) and all(_rebuildable(v, watched, depth + 1) for v in value.values())
    d = getattr(value, "__dict__", None)
    if (type(d) is dict and id(value) not in watched and not dataclasses.is_dataclass(value)
            and not isinstance(value, (type, types.ModuleType, torch.nn.Module, torch.Tensor))):
        return all(_rebuildable(v, watched, depth + 1) for v in d.values())
    return False


def _proxies_in(value, depth=0) -> list:
    """The traced tensors (and numbers) in ``value`` and the lists, tuples, dicts and plain objects it holds (a few
    levels deep)."""
    if isinstance(value, (proxies.TensorProxy, proxies.NumberProxy)):
        return [value]
    if type(value) is weakref.ref:
        return _proxies_in(value(), depth)
    if depth > 3:
        return []
    if isinstance(value, (list, tuple, set, frozenset)):
        return [p for v in value for p in _proxies_in(v, depth + 1)]
    if isinstance(value, dict):
        return [p for kv in value.items() for v in kv for p in _proxies_in(v, depth + 1)]
    d = getattr(value, "__dict__", None)
    if isinstance(d, dict) and not isinstance(value, (type, types.ModuleType, torch.nn.Module)):
        return [p for v in list(d.values()) for p in _proxies_in(v, depth + 1)]
    return []


def _same_contents(container, first) -> bool:
    """Whether a list, dict or set holds what it held when the program first read it (``first``, a copy)."""
    if isinstance(container, (set, frozenset)):
        return container == first
    if len(container) != len(first):
        return False
    if isinstance(container, dict):
        return all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(container.items(), first.items()))
    return all(a is b for a, b in zip(container, first))


def _refill(container, contents):
    """Gives a list, dict or set the contents ``contents`` in place."""
    container.clear()
    if isinstance(container, list):
        container.extend(contents)
    else:
        container.update(contents)


def _with_real_tensors(value, real: dict):
    if isinstance(value, (set, frozenset)):  # (not a pytree container)
        return type(value)(_with_real_tensors(v, real) for v in value)

    def real_of(x):
        if isinstance(x, frontend.TensorProxy):
            return real[x.name]
        if type(x) is weakref.ref and isinstance(x(), frontend.TensorProxy):
            return weakref.ref(real[x().name])  # (nn.LSTM's _flat_weight_refs)
        return x

    return pytree.tree_map(real_of, value)


def watch_program(state: StateRecorder, fn, modules: list, objects: list):
    """Starts watching what a program starts from: the jitted module and its submodules (``modules``, from
    ``named_modules``), else the function and what it is bound to, and the non-tensor argument objects."""
    for qualname, m in modules:
        state.watch(m, "module" + ("." + qualname if qualname else ""), qualname=qualname)
    if not modules:
        owner = getattr(fn, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            state.watch(owner, getattr(fn, "__qualname__", "the jitted method").split(".")[0])
        elif not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
            state.watch(fn, type(fn).__qualname__)
            fn = getattr(type(fn), "__call__", fn)
        state.discover(fn)
    for obj, var, hint in objects:
        if isinstance(obj, Number):
            continue  # checked by value
        if isinstance(obj, _IDENTITY_TYPES):
            state.discover(obj)
        elif not state.watch(obj, f"the argument {hint}", var=var):
            state._problem(f"the argument {hint} is a {type(obj).__qualname__} object: thunder checks that the same "
                           "object is passed, but not its attributes; changing them after the first call is not seen")


def _class_lookup(cls: type, name: str):
    """What ``name`` is in the class dicts along ``cls``'s MRO (``MISSING``: nothing), as attribute lookup finds it."""
    for k in cls.__mro__:
        d = k.__dict__
        if name in d:
            return d[name]
    return MISSING


def _is_data_descriptor(x) -> bool:
    t = type(x)
    return hasattr(t, "__set__") or hasattr(t, "__delete__")
