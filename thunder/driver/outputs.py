"""Flattening a traced program's output into proxies, and rebuilding the user's structure from values."""
from __future__ import annotations

import copy
import dataclasses
import types

import torch

from thunder.core.proxies import TensorProxy, NumberProxy


def is_printable_structure(x) -> bool:
    """Outputs made of tuples, lists, dicts, proxies and plain constants are returned by the trace as they are."""
    if isinstance(x, (TensorProxy, NumberProxy)) or x is None or type(x) in (int, float, bool, str, complex):
        return True
    if type(x) in (tuple, list):
        return all(is_printable_structure(y) for y in x)
    if type(x) is dict:
        return all(type(k) in (str, int) and is_printable_structure(v) for k, v in x.items())
    if isinstance(x, (torch.dtype, torch.device)):
        return True
    return False


def flatten_output(x):
    """(leaves, rebuild): ``rebuild(values)`` reconstructs ``x``'s structure with ``values`` for its leaves.

    Tuples (named tuples too), lists, dicts (their subclasses too), dataclasses and other objects whose
    attributes hold proxies (e.g. Hugging Face's ``DynamicCache`` of key/value tensors) are rebuilt on
    every call, as fresh copies; anything else is returned as it was while tracing.
    """
    leaves = []
    build = _flatten(x, leaves, {})

    def rebuild(values):
        return build(iter(values))

    return leaves, rebuild


def _flatten(x, leaves, active: dict):
    if isinstance(x, (TensorProxy, NumberProxy)):
        leaves.append(x)
        return lambda it: next(it)
    if isinstance(x, tuple):
        builds = [_flatten(y, leaves, active) for y in x]
        if hasattr(x, "_fields"):
            return lambda it: type(x)(*(b(it) for b in builds))
        if type(x) is not tuple and hasattr(type(x), "n_fields"):  # torch.return_types
            return lambda it: type(x)(tuple(b(it) for b in builds))
        return lambda it: tuple(b(it) for b in builds)
    if isinstance(x, list):
        builds = [_flatten(y, leaves, active) for y in x]
        return lambda it: [b(it) for b in builds]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = [f.name for f in dataclasses.fields(x)]
        builds = {n: _flatten(getattr(x, n), leaves, active) for n in names}

        def build_dataclass(it):
            out = copy.copy(x)
            for n in names:
                value = builds[n](it)
                object.__setattr__(out, n, value)
                if isinstance(out, dict) and n in out:
                    dict.__setitem__(out, n, value)
            return out

        return build_dataclass
    if isinstance(x, dict):
        builds = {k: _flatten(v, leaves, active) for k, v in x.items()}
        if type(x) is dict:
            return lambda it: {k: b(it) for k, b in builds.items()}

        def build_mapping(it):
            out = copy.copy(x)
            for k, b in builds.items():
                out[k] = b(it)
            return out

        return build_mapping
    if _has_attributes(x):
        return _flatten_object(x, leaves, active)
    return lambda it: x


def _has_attributes(x) -> bool:
    return hasattr(x, "__dict__") and not isinstance(x, (type, types.FunctionType, types.MethodType, types.ModuleType,
                                                          torch.nn.Module, torch.Tensor))


def _flatten_object(x, leaves, active: dict):
    """An object whose attributes hold proxies is rebuilt as a shallow copy with those attributes rebuilt."""
    if id(x) in active:  # a cycle: fine unless the object holds proxies (checked when its walk ends)
        active[id(x)] = True
        return lambda it: x
    active[id(x)] = False
    start = len(leaves)
    builds = {k: _flatten(v, leaves, active) for k, v in vars(x).items()}
    cyclic = active.pop(id(x))
    if len(leaves) == start:
        return lambda it: x
    if cyclic:
        raise NotImplementedError(
            f"thunder cannot return the {type(x).__qualname__} object: it refers to itself and holds tensors. "
            "Return its tensors in a tuple or dict instead")

    def build_object(it):
        out = copy.copy(x)
        for k, b in builds.items():
            value = b(it)
            if value is not getattr(x, k):
                object.__setattr__(out, k, value)
        return out

    return build_object
