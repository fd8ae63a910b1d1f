"""Prologues: the program that checks a cache entry applies to a call and gathers the computation's inputs.

While the frontend proxies the call's arguments, ``PrologueBuilder`` records, into a trace of its
own, how to reach each value from ``(args, kwargs)`` (or from the module, globals and closures)
and what it must look like: a tensor's shape, device, dtype and requires_grad; a number's value
(``"constant values"``) or type (``"symbolic values"``); any other value's equality. The global
state a trace depends on (grad mode, default dtype, autocast) and the modules' training flags are
checked too. The prologue returns the computation's inputs, or raises ``CacheMiss``.
"""
from __future__ import annotations

import enum
import types
import weakref
from numbers import Number

import torch

from thunder.core import statements as st
from thunder.core.proxies import TensorProxy, NumberProxy, Var
from thunder.core.trace import TraceCtx, tracectx
from thunder.driver.interpreter import InterpreterError
from thunder.driver import frontend
from thunder.executors.pythonex import MISSING


class CACHE_OPTIONS(enum.Enum):
    NO_CACHING = "no caching"
    SAME_INPUT = "same input"
    CONSTANT_VALUES = "constant values"
    SYMBOLIC_VALUES = "symbolic values"

    @classmethod
    def resolve(cls, option) -> "CACHE_OPTIONS":
        if option is None:
            return cls.CONSTANT_VALUES
        if isinstance(option, cls):
            return option
        for o in cls:
            if o.value == option:
                return o
        raise ValueError(f"Unknown cache option {option!r}; expected one of {[o.value for o in cls]}")


_LITERAL_TYPES = (str, type(None), torch.dtype, torch.device, slice, type(Ellipsis), torch.Size, bool)
MAX_INPUT_DEPTH = 64  # containers nested deeper than this are refused (the prologue unpacks them level by level)


class PrologueBuilder:
    """Builds the prologue trace while the frontend creates the computation's input proxies."""

    def __init__(self, computation: TraceCtx, cache_option: CACHE_OPTIONS, functional: bool):
        self.comp = computation
        self.trace = TraceCtx("prologue", params=["args", "kwargs"])
        self.cache_option = cache_option
        self.functional = functional
        self.check = cache_option is not CACHE_OPTIONS.SAME_INPUT
        self.inputs: list = []  # (proxy, source) in computation-parameter order
        self.symbolic: dict[str, NumberProxy] = {}
        self.values: dict[str, torch.Tensor] = {}  # input name -> its tensor in the call being traced
        self.tensor_args: dict[int, tuple] = {}  # id of a tensor argument -> (its variable, its proxy)
        self.containers: list = []  # (input list or dict as the program got it, a copy, its variable)
        self.objects: list = []  # (object, var, name): non-tensor argument objects, whose reads are recorded
        self.object_vars: dict[int, Var] = {}
        self.weak_refs: list = []  # the cache entry is useless once one of these dies
        self.state_index = 0  # where the checks of Python state go: after the arguments are unpacked
        self.state_bsyms: list = []
        self.constant_names: dict[int, str] = {}  # id(constant) -> its name (the trace's constants hold it alive)

    def _emit(self, op, *args, **kwargs):
        with tracectx(self.trace):
            return op(*args, **kwargs)

    def _name(self, hint: str) -> str:
        name = self.comp.add_name(hint)
        self.trace.names.add(name)
        return name

    # -- call arguments --------------------------------------------------------------------
    def unpack_call(self, args: tuple, kwargs: dict, arg_names: list):
        args_var, kwargs_var = Var("args"), Var("kwargs")
        names = [self._name(n) for n in arg_names[:len(args)]]
        names += [self._name(f"arg{i}") for i in range(len(names), len(args))]
        outs = [Var(n) for n in names]
        with tracectx(self.trace):
            if self.check:
                st.check_len(args_var, len(args))
            if args:
                _record_unpack(self.trace, args_var, outs)
        pargs = [self._value(a, v, v.name) for a, v in zip(args, outs)]
        pkwargs = {}
        if self.check:
            self._emit(st.check_keys, kwargs_var, tuple(kwargs))
        for k, v in kwargs.items():
            var = Var(self._name(k if k.isidentifier() else "kwarg"))
            _record_unpack_key(self.trace, kwargs_var, k, var)
            pkwargs[k] = self._value(v, var, var.name)
        self.state_index = len(self.trace.bound_symbols)
        return pargs, pkwargs

    def _value(self, value, var: Var, hint: str, depth: int = 0):
        """The traced stand-in for ``value`` (reached in the prologue as ``var``), with its checks."""
        if depth > MAX_INPUT_DEPTH:
            raise ValueError(
                f"thunder.jit: an argument is nested more than {MAX_INPUT_DEPTH} containers deep (at {hint}); thunder "
                "unpacks and checks nested tuples, lists and dicts level by level on every call. Pass the values in a "
                "flatter structure (e.g. a list of tensors).")
        if isinstance(value, torch.Tensor):
            frontend.check_tensor_type(value)
            seen = self.tensor_args.get(id(value))
            if seen is not None:  # the same tensor twice: the program sees one tensor (x is y), as in eager
                if self.check:
                    self._emit(st.check_is, var, seen[0])
                return seen[1]
            proxy = TensorProxy(var.name, tuple(value.shape), value.dtype, value.device, value.requires_grad)
            if isinstance(value, torch.nn.Parameter):
                proxy._is_param = True
            self._check_tensor(proxy, value)
            self.inputs.append((proxy, frontend.ArgSource(())))
            self.values[proxy.name] = value
            self.tensor_args[id(value)] = (var, proxy)
            return proxy
        if isinstance(value, (int, float, complex)) and not isinstance(value, bool):
            if self.cache_option is CACHE_OPTIONS.SYMBOLIC_VALUES:
                ptype = type(value)
                proxy = NumberProxy(var.name, ptype, value, frozenset({var.name}))
                if self.check:
                    self._emit(st.check_type, var, ptype)
                self.inputs.append((proxy, frontend.ArgSource(())))
                self.symbolic[var.name] = proxy
                return proxy
            if self.check:
                self._emit(literal_check(value), var, value)
            return value
        if isinstance(value, _LITERAL_TYPES):
            if self.check:
                self._emit(st.check_literal, var, value)
            return value
        if isinstance(value, (list, tuple)) and (type(value) in (list, tuple) or hasattr(value, "_fields")):
            outs = [Var(self._name(f"{hint}_{i}")) for i in range(len(value))]
            if self.check:
                self._emit(st.check_type, var, type(value))
                self._emit(st.check_len, var, len(value))
            if value:
                _record_unpack(self.trace, var, outs)
            items = [self._value(v, o, o.name, depth + 1) for v, o in zip(value, outs)]
            if isinstance(value, list):
                if self.functional:
                    return frontend.InputList(items)
                self.containers.append((items, list(items), var))
                return items
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, dict) and type(value) is dict:
            if self.check:
                self._emit(st.check_type, var, dict)
                self._emit(st.check_keys, var, tuple(value))
            out = {}
            for k, v in value.items():
                o = Var(self._name(f"{hint}_{k}" if isinstance(k, str) and k.isidentifier() else f"{hint}_item"))
                _record_unpack_key(self.trace, var, k, o)
                out[k] = self._value(v, o, o.name, depth + 1)
            if self.functional:
                return frontend.InputDict(out)
            self.containers.append((out, dict(out), var))
            return out
        if self.functional:
            raise ValueError(f"Cannot unpack object of type {type(value)}. Please file an issue requesting support.")
        # Any other object is used as it is: the trace depends on what the program reads from it and, unless that
        # is all it depends on, on its identity (see check_objects).
        self.objects.append((value, var, hint))
        self.object_vars[id(value)] = var
        return value

    def check_objects(self, by_identity):
        """Checks of the argument objects: by identity where ``by_identity(obj)`` says the trace depends on more
        than the type and the attributes that were read from it (which the checks of Python state cover)."""
        if not self.check:
            return
        for value, var, _ in self.objects:
            if isinstance(value, Number):
                self.emit_state(literal_check(value), var, value)
            elif by_identity(value):
                self._check_identity(value, var)

    def _check_identity(self, value, var: Var):
        """Checks ``var`` is ``value`` without keeping it alive (a weak reference, else its id and type)."""
        if isinstance(value, (type, types.BuiltinFunctionType, types.ModuleType)):
            self.emit_state(st.check_is, var, value)  # long-lived: a strong reference is harmless
            return
        try:
            ref = weakref.ref(value)
        except TypeError:
            self.emit_state(st.check_id, var, id(value), type(value))
            return
        self.weak_refs.append(ref)
        self.emit_state(st.check_same_object, var, self.constant_var(ref, f"ref_{var.name}"))

    def _check_tensor(self, proxy, value):
        if self.check:
            self._emit(st.check_tensor, proxy, tuple(value.shape), value.device, value.dtype, value.requires_grad)

    # -- tensors the program reaches outside its arguments ------------------------------------
    def unpack_source(self, proxy: TensorProxy, source, value: torch.Tensor):
        """Fetches a parameter, buffer, global, closure or attribute tensor on each call."""
        with tracectx(self.trace):
            if isinstance(source, frontend.ModuleTensorSource):
                mvar = self.module_var(source.module, source.qualname)
                _record_python(self.trace, st.unpack_module_tensor, (mvar, source.collection, source.name), proxy)
            elif isinstance(source, frontend.AttrSource):
                _record_python(self.trace, st.unpack_attr, (self.object_var(source.obj, "obj_" + source.label), source.name),
                               proxy)
            elif isinstance(source, frontend.GlobalSource):
                _record_python(self.trace, st.unpack_key, (self.constant_var(source.globals_dict, "fn_globals"), source.name), proxy)
            elif isinstance(source, frontend.CellSource):
                _record_python(self.trace, st.unpack_cell, (self.constant_var(source.cell, "cell_" + source.name),), proxy)
            else:
                _record_python(self.trace, st.unpack_constant, (self.constant_var(source.value, "captured"),), proxy)
        self._check_tensor(proxy, value)
        self.inputs.append((proxy, source))
        self.values[proxy.name] = value

    def module_var(self, module, qualname: str) -> Var:
        """A module's variable: its argument when it was passed as one, else a constant."""
        return self.object_var(module, "m_" + qualname.replace(".", "_") if qualname else "module")

    def object_var(self, obj, hint: str) -> Var:
        """An argument object's variable, else ``obj`` as a constant."""
        var = self.object_vars.get(id(obj))
        return var if var is not None else self.constant_var(obj, hint)

    def attribute_var(self, obj_var: Var, name: str, hint: str) -> Var:
        """A variable bound, among the checks of Python state, to ``obj_var.name`` as it is on each call."""
        from thunder.core.symbol import BoundSymbol

        var = Var(self.trace.add_name(hint))
        self.state_bsyms.append(BoundSymbol(st.unpack_attr, (obj_var, name), {}, var))
        return var

    def missing_var(self) -> Var:
        return self.constant_var(MISSING, "MISSING")

    def emit_state(self, op, *args):
        """Records a check of Python state; these go right after the arguments are unpacked (see ``finish``)."""
        from thunder.core.symbol import BoundSymbol

        self.state_bsyms.append(BoundSymbol(op, args, {}, None))

    def check_attribute(self, obj, name: str, value):
        """A check that ``obj.name`` is still ``value`` (a number, string, bool, None, or the same object)."""
        shown = value if isinstance(value, (int, float, str, type(None))) else self.constant_var(value, name)
        self.emit_state(st.check_attrs, self.object_var(obj, type(obj).__name__), (name,), (shown,))

    def constant_var(self, obj, hint: str) -> Var:
        name = self.constant_names.get(id(obj))
        if name is not None:
            return Var(name)
        name = self.trace.constant_name(frontend._sanitize(hint))
        self.trace.constants[name] = obj
        self.constant_names[id(obj)] = name
        self.trace.names.add(name)
        return Var(name)

    def unpack_grad(self, proxy, tensor_proxy: TensorProxy, value):
        """``tensor_proxy.grad`` as the program read it: a tensor (``proxy``) or None (``proxy`` None), checked on each call."""
        with tracectx(self.trace):
            if proxy is None:
                var = Var(self._name(f"{tensor_proxy.name}_grad"))
                _record_python(self.trace, st.unpack_attr, (tensor_proxy, "grad"), var)
                if self.check:
                    self._emit(st.check_literal, var, None)
                return
            _record_python(self.trace, st.unpack_attr, (tensor_proxy, "grad"), proxy)
        self._check_tensor(proxy, value)
        self.inputs.append((proxy, None))

    def check_containers(self):
        """Input lists and dicts the program changed: their caller would not see the change, so it is refused."""
        for obj, original, var in self.containers:
            same = (len(obj) == len(original) and all(a is b for a, b in zip(obj, original))) if isinstance(obj, list) else (
                list(obj) == list(original) and all(obj[k] is original[k] for k in original))
            if not same:
                kind = "list" if isinstance(obj, list) else "dict"
                raise NotImplementedError(
                    f"The program changed its input {kind} {var.name!r} (e.g. append, pop or item assignment). thunder "
                    f"does not support mutating an input {kind}: the caller would not see the change. Copy it first "
                    f"({kind}(x)) or return the new {kind}.")

    def check_layouts(self, layouts):
        """Inputs whose strides the program depended on (``stride()``, ``is_contiguous()``, aliasing of views)."""
        if not self.check:
            return
        by_name = {p.name: p for p, _ in self.inputs if isinstance(p, TensorProxy)}
        for name in sorted(layouts.observed):
            proxy = by_name.get(name)
            if proxy is not None:
                strides, offset = layouts.inputs[name]
                self._emit(st.check_layout, proxy, strides, offset)

    def check_strides(self, layouts, names):
        """Inputs among ``names`` whose strides the trace's choices followed (the layouts fused regions keep,
        ``EagerOutputLayouts.kept_for``; in-place updates needing no relayout, ``Layouts.strides_observed``): their
        strides, where ``check_layouts`` does not check them already (where they start does not matter)."""
        if not self.check:
            return
        by_name = {p.name: p for p, _ in self.inputs if isinstance(p, TensorProxy)}
        for name in sorted(set(names) - layouts.observed):
            proxy = by_name.get(name)
            if proxy is not None:
                self._emit(st.check_strides, proxy, layouts.inputs[name][0])

    def check_values(self, guards: list):
        """Values of tensors the trace specialized on: recomputed from each call's arguments and compared (see
        [Note: value guards] in value_guards.py)."""
        if not self.check:
            return
        for replay, sources, value in guards:
            compute = self.constant_var(replay, replay.trace.name)
            if type(value) not in (bool, int):
                value = self.constant_var(value, replay.trace.name.replace("value_of", "seen"))
            self._emit(st.check_values, compute, tuple(sources), value)
            # printed beneath it, as comments: the operations computing the value
            self.trace.bound_symbols[-1].subsymbols = [b for b in replay.trace.bound_symbols if b.sym not in st.STATEMENTS]

    def check_updated_inputs(self, updated: list):
        """Inputs the program updates in place must not share memory with another input: the trace treats them
        as separate tensors. Checked here for every input, and on each call for the tensor arguments."""
        by_name = {p.name: (p, src) for p, src in self.inputs if isinstance(p, TensorProxy)}
        storages = {}
        for name, value in self.values.items():
            if isinstance(value, torch.Tensor) and name in by_name:
                storages.setdefault(value.untyped_storage().data_ptr(), []).append(name)
        for name in updated:
            value = self.values.get(name)
            if value is None:
                continue
            sharing = [n for n in storages.get(value.untyped_storage().data_ptr(), []) if n != name]
            if sharing and value.untyped_storage().nbytes():
                raise NotImplementedError(
                    f"The program updates the input {name} in place, and the input {sharing[0]} shares memory with it "
                    "(one is a view of the other). thunder traces them as separate tensors, so it cannot follow this "
                    "update. Pass separate tensors (e.g. clone one of them).")
        if not self.check:
            return
        args = tuple(p for p, src in by_name.values() if isinstance(src, frontend.ArgSource))
        updated_args = tuple(p for p in args if p.name in updated)
        if updated_args:
            self._emit(st.check_unshared, updated_args, args)

    # -- state ------------------------------------------------------------------------------
    def check_state(self, autocast_state: tuple, modules: list):
        if not self.check:
            return
        tensor_vars = tuple(v for v, _ in self.tensor_args.values())
        if len(tensor_vars) > 1:  # distinct tensor arguments stay distinct (x is y, and in-place updates)
            self._emit(st.check_distinct, tensor_vars)
        self._emit(st.check_global_state, torch.is_grad_enabled(), torch.get_default_dtype(), autocast_state,
                   torch.are_deterministic_algorithms_enabled(), torch.is_inference_mode_enabled())
        if modules:
            mvars = tuple(self.module_var(m, q) for q, m in modules)
            self._emit(st.check_training, mvars, tuple(m.training for _, m in modules))

    def check_specialized(self, names):
        if not self.check:
            return
        for name in sorted(names):
            p = self.symbolic[name]
            self._emit(literal_check(p.value), Var(name), p.value)

    def finish(self, params: list) -> TraceCtx:
        """The prologue trace, returning ``params``. Call once."""
        i = self.state_index
        self.trace.bound_symbols[i:i] = self.state_bsyms
        self.state_bsyms = []
        with tracectx(self.trace):
            st.python_return(tuple(params))
        return self.trace


def _record_python(trace, op, args, out):
    from thunder.core.symbol import BoundSymbol

    trace.record(BoundSymbol(op, tuple(args), {}, out))


def _record_unpack(trace, seq_var, outs):
    _record_python(trace, st.unpack_sequence, (seq_var,), tuple(outs))


def _record_unpack_key(trace, dict_var, key, out):
    _record_python(trace, st.unpack_key, (dict_var, key), out)


def literal_check(value):
    """The check of a number: ``check_number`` where NaN or the sign of zero matters, else ``check_literal``."""
    if isinstance(value, float) and (value != value or value == 0.0):
        return st.check_number
    if isinstance(value, complex) and (value != value or value.real == 0.0 or value.imag == 0.0):
        return st.check_number
    return st.check_literal

