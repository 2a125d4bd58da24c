"""The declared state machines of toolrelay, and their compiled tables.

Two machines are declared with python-statemachine and nowhere else:
:class:`RunLifecycle` (one turn on a thread) and :class:`ToolCallLifecycle` (one
tool call). :data:`RUN_MACHINE` and :data:`TOOL_CALL_MACHINE` are the same
machines read, at import, into immutable tables that the core drives through
cursors; :func:`compare_with_declared` proves each table is its machine.
"""

from __future__ import annotations

from toolrelay._machines._compiled import (
    RUN_MACHINE as RUN_MACHINE,
    TOOL_CALL_MACHINE as TOOL_CALL_MACHINE,
    CompiledMachine as CompiledMachine,
    CompiledRunMachine as CompiledRunMachine,
    Cursor as Cursor,
    RunCursor as RunCursor,
    compile_machine as compile_machine,
)
from toolrelay._machines._equivalence import compare_with_declared as compare_with_declared
from toolrelay._machines._graph import GraphReport as GraphReport, check_graph as check_graph
from toolrelay._machines._run import RunLifecycle as RunLifecycle
from toolrelay._machines._status import (
    RunEvent as RunEvent,
    RunStatus as RunStatus,
    ToolCallEvent as ToolCallEvent,
    ToolCallStatus as ToolCallStatus,
)
from toolrelay._machines._tool_call import ToolCallLifecycle as ToolCallLifecycle
from toolrelay._reasons import ReasonKind as ReasonKind, TerminalReason as TerminalReason

__all__ = (
    "CompiledMachine",
    "CompiledRunMachine",
    "Cursor",
    "GraphReport",
    "RUN_MACHINE",
    "ReasonKind",
    "RunCursor",
    "RunEvent",
    "RunLifecycle",
    "RunStatus",
    "TOOL_CALL_MACHINE",
    "TerminalReason",
    "ToolCallEvent",
    "ToolCallLifecycle",
    "ToolCallStatus",
    "check_graph",
    "compare_with_declared",
    "compile_machine",
)
