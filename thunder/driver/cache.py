"""The cache of a jitted callable: compiled entries found by a key of the call's arguments.

[Note: cache keys]
Every call computes a key from its arguments alone, cheaply: a tensor gives its shape, a number,
string, bool or None its value (all NaNs are one value), a tuple, list or dict its items' keys, any
other object its type ("symbolic values" keys numbers by type). A prologue checks at least what the
key holds, so all the calls an entry accepts have the same key: entries are kept in buckets by key,
and a call runs only the prologues of its own bucket. A lookup therefore costs the same with 1 or
1000 entries. The prologue still confirms everything else (dtypes, devices, requires_grad, module
state, globals, grad mode, ...); entries that differ only there share a bucket and are tried in
turn, most recent first. Only ``CacheMiss`` makes the lookup go on: any other error of a prologue
propagates.

The cache holds at most ``cache_limit`` entries (``thunder.jit(..., cache_limit=N)``, default
``DEFAULT_CACHE_LIMIT``, as ``torch.compile`` limits recompilations). Past it, thunder warns once,
naming the function and what keeps changing, and keeps working by evicting the least recently used
entry. Entries whose argument objects are gone (weakly referenced, see the prologue) are dropped.
"""
from __future__ import annotations

import traceback
import warnings
from typing import Callable, NamedTuple

import torch

from thunder.executors.pythonex import CacheMiss

DEFAULT_CACHE_LIMIT = 32
_MAX_KEY_DEPTH = 8  # deeper containers are keyed by their type (their prologue still checks everything)


class NaNKey:
    """The key of every NaN (NaN != NaN, but a trace specialized to NaN applies to all NaNs)."""

    def __repr__(self):
        return "nan"


_NAN = NaNKey()
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_Size = torch.Size


class Call(NamedTuple):
    """A call of a jitted callable, for describing what changes between calls."""

    fn: Callable
    args: tuple
    kwargs: dict


class RecompilationWarning(UserWarning):
    """A jitted callable was recompiled more often than its cache holds entries."""


def _item_key(x, depth: int):
    t = type(x)
    if t is _Tensor or t is _Parameter:
        return x.shape
    if t is float:
        return x if x == x else _NAN
    if t is int or t is str or t is bool or x is None:
        return x
    if depth > _MAX_KEY_DEPTH:
        return t
    if t is tuple or t is list:
        return (t, *[_item_key(y, depth + 1) for y in x])
    if t is dict:
        return (t, *[(k, _item_key(v, depth + 1)) for k, v in x.items()])
    if t is _Size or t is torch.dtype or t is torch.device:
        return x
    return t


def _symbolic_item_key(x, depth: int):
    t = type(x)
    if t is _Tensor or t is _Parameter:
        return x.shape
    if t is float or t is int:
        return t
    if t is str or t is bool or x is None:
        return x
    if depth > _MAX_KEY_DEPTH:
        return t
    if t is tuple or t is list:
        return (t, *[_symbolic_item_key(y, depth + 1) for y in x])
    if t is dict:
        return (t, *[(k, _symbolic_item_key(v, depth + 1)) for k, v in x.items()])
    if t is _Size or t is torch.dtype or t is torch.device:
        return x
    return t


def key_function(symbolic: bool):
    """The key of a call ``(args, kwargs)`` (see [Note: cache keys])."""
    item = _symbolic_item_key if symbolic else _item_key

    def call_key(args, kwargs):
        if not kwargs:  # the most common calls, unrolled: this runs on every call
            n = len(args)
            if n == 1:
                a = args[0]
                return (a.shape if type(a) is _Tensor else item(a, 0),)
            if n == 2:
                a, b = args
                return (a.shape if type(a) is _Tensor else item(a, 0), b.shape if type(b) is _Tensor else item(b, 0))
        key = []
        for x in args:
            key.append(x.shape if type(x) is _Tensor else item(x, 0))
        for k, v in kwargs.items():
            key.append(k)
            key.append(item(v, 0))
        return tuple(key)

    return call_key


def same_input_key(args, kwargs):
    """``cache="same input"``: the caller promises every call is like the first; one entry serves all."""
    return None


class Cache:
    """The entries of one jitted callable, in buckets by key (see [Note: cache keys])."""

    def __init__(self, limit: int, name: str, stacklevel: int = 4):
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"cache_limit must be a positive int, got {limit!r}")
        self.buckets: dict = {}
        self.limit = limit
        self.name = name
        self.size = 0
        self.warned = False
        self.stacklevel = stacklevel  # of the warning: the user's call

    def clear(self):
        """Drops every entry (the program changed: e.g. a transform was added)."""
        self.buckets.clear()
        self.size = 0

    def entries(self) -> list:
        return [e for bucket in self.buckets.values() for e in bucket]

    def add(self, key, entry, call: Call | None = None):
        """Stores ``entry``; past the limit, evicts the least recently used entry (and warns once)."""
        entry.key = key
        if self.size >= self.limit:
            self._drop_dead()
        if self.size >= self.limit:
            if not self.warned:
                self.warned = True
                warnings.warn(self._storm_message(key, call), RecompilationWarning, stacklevel=self.stacklevel)
            self._remove(min(self.entries(), key=lambda e: e.last_used))
        self.buckets.setdefault(key, []).insert(0, entry)
        self.size += 1

    def _remove(self, entry):
        bucket = self.buckets[entry.key]
        bucket.remove(entry)
        if not bucket:
            del self.buckets[entry.key]
        self.size -= 1

    def _drop_dead(self):
        for entry in self.entries():
            if not entry.alive():
                self._remove(entry)

    def _storm_message(self, key, call: Call | None) -> str:
        changing = describe_changes([e.key for e in self.entries()] + [key], call)
        if not changing and call is not None:
            changing = failing_checks(self.buckets.get(key, ()), call.args, call.kwargs)
        return (f"thunder.jit: {self.name} was compiled {self.limit + 1} times, more than its cache holds "
                f"(cache_limit={self.limit}). What keeps changing between calls: {changing or 'unknown'}. thunder "
                "keeps working and evicts the least recently used entry, but each recompilation traces and compiles "
                "the program again. Keep that input's shape or value the same between calls (e.g. pad to a few "
                "sizes, pass a changing number as a tensor, or use cache='symbolic values'), or raise cache_limit.")


def describe_changes(keys: list, call: Call | None = None) -> str:
    """Which arguments differ between these keys (the last is ``call``'s), in words, with a few of their values."""
    if len({len(k) if isinstance(k, tuple) else -1 for k in keys}) > 1:
        return "the number of arguments or the keyword arguments passed"
    if not isinstance(keys[-1], tuple):
        return ""
    names = _arg_names(call)
    n_args = len(call.args) if call is not None else len(keys[-1])
    parts = []
    for i in range(len(keys[-1])):
        values = list(dict.fromkeys(k[i] for k in keys))
        if len(values) < 2:
            continue
        if i >= n_args:  # keyword arguments are keyed as name, value, name, value, ...
            label = f"keyword argument {keys[-1][i - 1]!r}" if (i - n_args) % 2 else "the keyword arguments passed"
        else:
            label = f"argument {names[i]!r}" if i < len(names) else f"argument {i}"
        what = "shapes" if all(isinstance(v, torch.Size) for v in values) else "values"
        shown = ", ".join(_show(v) for v in values[-4:])
        parts.append(f"{label} ({what} {shown}{', ...' if len(values) > 4 else ''})")
    return "; ".join(parts)


def _show(v) -> str:
    return str(tuple(v)) if isinstance(v, torch.Size) else (v.__qualname__ if isinstance(v, type) else repr(v))


def _arg_names(call: Call | None) -> list:
    if call is None:
        return []
    from thunder.driver.pipeline import _arg_names as names

    return names(call.fn, call.args, call.kwargs)


def failing_checks(entries, args, kwargs) -> str:
    """The prologue lines that reject this call in these entries (with the call's key): what differs besides the arguments."""
    lines = dict.fromkeys(line for line in (rejecting_line(e, args, kwargs) for e in entries) if line)
    return "what the prologue checks " + ", ".join(f"`{line}`" for line in lines) if lines else ""


def rejecting_line(entry, args, kwargs) -> str | None:
    """The line of ``entry``'s prologue that rejects this call, or None if it accepts it."""
    try:
        entry.prologue(args, kwargs)
    except CacheMiss as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == "thunder.prologue"]
        if frames:
            return entry.prologue.__thunder_source__.splitlines()[frames[-1].lineno - 1].strip()
        return "(unknown)"
    return None
