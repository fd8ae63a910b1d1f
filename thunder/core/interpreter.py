"""What the interpreter saw while tracing: the bytecode instructions of the user's program.

Thunder runs the user's Python natively (see ``thunder.core.frontend``); the interpreter's own hooks
record what ran: ``sys.settrace`` opcode events on Python 3.11, ``sys.monitoring`` instruction
events on 3.12 and later. Only the user's code is recorded: frames of torch, thunder and the
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


def _skipped_prefixes() -> tuple:
    thunder_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = [thunder_root, sysconfig.get_paths()["stdlib"]]
    for mod in ("torch", "pytest", "_pytest", "pluggy", "lightning", "lightning_utilities"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            roots.append(os.path.dirname(m.__file__))
    return tuple(os.path.realpath(r) + os.sep for r in roots)


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

    # -- Python 3.11: sys.settrace ---------------------------------------------------------
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

    # -- Python 3.12+: sys.monitoring ------------------------------------------------------
    def _start_monitoring(self):
        mon = sys.monitoring
        tool = next((i for i in range(5, 0, -1) if mon.get_tool(i) is None), None)
        if tool is None:
            return False
        self._tool = tool
        self._enabled_codes = []
        mon.use_tool_id(tool, "thunder")
        E = mon.events

        def on_start(code, offset):
            if not self._is_user(code):
                return mon.DISABLE
            self.log.append(CallEvent(code.co_qualname, code.co_filename, code.co_firstlineno))
            if code not in self._enabled_codes:
                self._enabled_codes.append(code)
                mon.set_local_events(tool, code, E.INSTRUCTION | E.PY_RETURN)
            return None

        def on_instruction(code, offset):
            self._record(code, offset)

        def on_return(code, offset, retval):
            self.log.append(ReturnEvent(code.co_qualname))

        mon.register_callback(tool, E.PY_START, on_start)
        mon.register_callback(tool, E.INSTRUCTION, on_instruction)
        mon.register_callback(tool, E.PY_RETURN, on_return)
        mon.set_events(tool, E.PY_START)
        return True

    def _stop_monitoring(self):
        mon = sys.monitoring
        tool = self._tool
        for code in self._enabled_codes:
            mon.set_local_events(tool, code, 0)
        mon.set_events(tool, 0)
        for ev in (mon.events.PY_START, mon.events.INSTRUCTION, mon.events.PY_RETURN):
            mon.register_callback(tool, ev, None)
        mon.free_tool_id(tool)
        mon.restart_events()

    def __enter__(self):
        if sys.version_info >= (3, 12):
            self._monitoring = self._start_monitoring()
        else:
            self._previous = sys.gettrace()
            sys.settrace(self._global_trace)
        return self

    def __exit__(self, *exc):
        if sys.version_info >= (3, 12):
            if self._monitoring:
                self._stop_monitoring()
        else:
            sys.settrace(self._previous)
        return False
