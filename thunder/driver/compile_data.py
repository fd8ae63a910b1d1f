"""What ``thunder.jit`` knows about a jitted callable (``CompileData``) and what happened to it (``CompileStats``)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from thunder.driver.cache import DEFAULT_CACHE_LIMIT
from thunder.driver.prologue import CACHE_OPTIONS


@dataclasses.dataclass
class CompileData:
    """The jitted callable and the options it was compiled with. Transforms read their configuration here."""

    fn: Callable
    module: torch.nn.Module | None
    executors: tuple
    cache_option: CACHE_OPTIONS
    functional: bool = False
    sharp_edges: Any = None
    disable_torch_autograd: bool = False
    transforms: tuple = ()
    compile_options: dict = dataclasses.field(default_factory=dict)
    langctx: Any = None
    used_options: set = dataclasses.field(default_factory=set)
    cache_limit: int = DEFAULT_CACHE_LIMIT
    thunder_module: Any = None  # the ThunderModule, when a module was jitted
    # Inside ``ThunderModule.no_sync()``: data-parallel transforms leave gradients unsynchronized. Transforms
    # read it with ``compilation.read_state``, which makes it part of the cache entry's prologue checks.
    no_sync: bool = False

    @property
    def is_module(self) -> bool:
        return self.module is not None


@dataclasses.dataclass
class CacheEntry:
    """One compiled specialization: its prologue, computation and (when training) backward."""

    prologue: Callable
    computation: Callable
    prologue_traces: list
    computation_traces: list
    backward_traces: list
    backward: Callable | None
    output_rebuild: Callable | None
    uses_autograd: bool
    interpreted_instructions: list
    interpreter_log: list
    grad_info: Any = None  # autodiff bookkeeping for the autograd.Function
    refs: tuple = ()  # weak references to argument objects the prologue checks by identity
    state_writes: tuple = ()  # Python state the program assigns, stored again after each call
    marked_inputs: tuple = ()  # inputs the program sets requires_grad on: the call sets the caller's tensors' flags
    key: Any = None  # the cache key it is stored under
    last_used: int = 0  # the call that used it last (the cache evicts the least recently used entry)

    def alive(self) -> bool:
        """False once an argument object the entry was compiled for is gone: no call can match it again."""
        return all(r() is not None for r in self.refs)


@dataclasses.dataclass
class CompileStats:
    calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    last_entry: CacheEntry | None = None
    last_trace_tracing_time_ms: float = 0.0
    last_compile_time_ms: float = 0.0
    cache: Any = None  # thunder.driver.cache.Cache

    @property
    def entries(self) -> list:
        """The cached entries, most recently compiled first within each key."""
        return self.cache.entries() if self.cache is not None else []

    @property
    def last_traces(self):
        return self.last_entry.computation_traces if self.last_entry else None
