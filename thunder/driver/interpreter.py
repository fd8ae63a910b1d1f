"""What the interpreter saw while tracing: the bytecode instructions of the user's program.

Thunder runs the user's Python natively (see ``thunder.driver.frontend``); the interpreter's own hooks
record what ran: ``sys.settrace`` opcode events, in the tracing thread only. Only the user's code
is recorded: frames of torch, thunder and the
standard library are skipped.
"""
from __future__ import annotations

import dataclasses
import dis
import os
import sys
import sysconfig


class InterpreterError(RuntimeError):
    """An error raised while tracing a program, such as a value of a type the functional jit cannot proxy."""


@dataclasses.dataclass(frozen=True)
class CallEvent:
    """Entering a function of the user's program."""

    qualname: str
    filename: str
    lineno: int

    def __str__(self):
        return f"Calling {self.qualname} ({self.filename}:{self.lineno})"


@dataclasses.dataclass(frozen=True)
class ReturnEvent:
    """Returning from a function of the user's program."""

    qualname: str

    def __str__(self):
        return f"Returning from {self.qualname}"


_LIBRARY_MODULES = ("torch", "pytest", "_pytest", "pluggy", "lightning", "lightning_utilities")
_prefixes_cache: dict = {}


def _skipped_prefixes() -> tuple:
    """Where code that is not the user's lives: thunder, the standard library and the libraries above, as loaded
    (their resolved paths are computed once for each set of them: they cost a third of a millisecond a trace)."""
    files = tuple(getattr(sys.modules.get(m), "__file__", None) for m in _LIBRARY_MODULES)
    prefixes = _prefixes_cache.get(files)
    if prefixes is None:
        thunder_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        roots = [thunder_root, sysconfig.get_paths()["stdlib"]] + [os.path.dirname(f) for f in files if f]
        prefixes = _prefixes_cache[files] = tuple(os.path.realpath(r) + os.sep for r in roots)
    return prefixes


class InstructionRecorder:
    """Context manager recording executed instructions of user code into ``instructions`` and ``log``."""

    _code_cache: dict = {}

    def __init__(self):
        self.instructions: list[dis.Instruction] = []
        self.log: list = []
        self._skip = _skipped_prefixes()
        self._user_code: dict = {}
        self._offsets: dict = {}

    def _is_user(self, code) -> bool:
        v = self._user_code.get(code)
        if v is None:
            fn = code.co_filename
            v = not (fn.startswith(self._skip) or os.path.realpath(fn).startswith(self._skip) or fn.startswith("thunder."))
            self._user_code[code] = v
        return v

    def _instruction(self, code, offset):
        table = self._offsets.get(code)
        if table is None:
            table = {i.offset: i for i in dis.get_instructions(code)}
            self._offsets[code] = table
        return table.get(offset)

    def _record(self, code, offset):
        inst = self._instruction(code, offset)
        if inst is not None:
            self.instructions.append(inst)
            self.log.append(inst)

    # -- sys.settrace: this thread only (sys.monitoring's events are process-wide, and instrumenting code
    # from its callbacks while other threads run is not safe) --------------------------------------
    def _global_trace(self, frame, event, arg):
        code = frame.f_code
        if not self._is_user(code):
            return None
        frame.f_trace_opcodes = True
        self.log.append(CallEvent(code.co_qualname, code.co_filename, code.co_firstlineno))
        return self._local_trace

    def _local_trace(self, frame, event, arg):
        if event == "opcode":
            self._record(frame.f_code, frame.f_lasti)
        elif event == "return":
            self.log.append(ReturnEvent(frame.f_code.co_qualname))
        return self._local_trace

    def __enter__(self):
        self._previous = sys.gettrace()
        sys.settrace(self._global_trace)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._previous)
        return False
