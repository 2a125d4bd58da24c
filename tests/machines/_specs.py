"""The two machines' specifications, written out by hand on purpose: the tests compare
the declared classes and the compiled tables against them (only here: the library has
no such copy)."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from typing import Any

from statemachine import StateChart

from toolrelay import RunLifecycle, RunStatus, ToolCallLifecycle, ToolCallStatus
from toolrelay._machines import (
    RUN_MACHINE,
    TOOL_CALL_MACHINE,
    CompiledMachine,
    RunEvent,
    ToolCallEvent,
)

__all__ = ("RUN", "SPECS", "TOOL_CALL", "Spec")

_RUNNING = (RunStatus.idle, RunStatus.running, RunStatus.executing_tools)


@dataclass(frozen=True)
class Spec:
    """One machine as the tests expect it."""

    cls: type[StateChart[Any]]
    compiled: CompiledMachine[Any, Any]
    states: type[enum.StrEnum]
    events: type[enum.StrEnum]
    table: dict[tuple[Any, Any], Any]
    initial: Any
    finals: frozenset[Any]
    #: An AG-UI event type, not one of the machine's events: refused, never ignored.
    foreign_event: str
    #: Rows of the live table the class's help shows, spelled as the ids.
    help_rows: tuple[str, ...]
    #: What the library would print with humanized labels.
    humanized: tuple[str, ...]
    #: A state and an event it refuses, with the library's message.
    refused: tuple[Any, Any, str]
    #: A state and an event it takes (for callbacks).
    moves: tuple[Any, Any]

    @property
    def pairs(self) -> list[tuple[Any, Any]]:
        return list(itertools.product(self.states, self.events))

    def __str__(self) -> str:
        return self.cls.__name__


RUN = Spec(
    cls=RunLifecycle,
    compiled=RUN_MACHINE,
    states=RunStatus,
    events=RunEvent,
    table={
        (RunStatus.idle, RunEvent.start): RunStatus.running,
        (RunStatus.running, RunEvent.execute_tools): RunStatus.executing_tools,
        (RunStatus.executing_tools, RunEvent.continue_run): RunStatus.running,
        (RunStatus.running, RunEvent.complete): RunStatus.completed,
        (RunStatus.running, RunEvent.interrupt): RunStatus.interrupted,
        **{(state, RunEvent.fail): RunStatus.failed for state in _RUNNING},
        **{(state, RunEvent.cancel): RunStatus.cancelled for state in _RUNNING},
        **{(state, RunEvent.supersede): RunStatus.superseded for state in _RUNNING},
    },
    initial=RunStatus.idle,
    finals=frozenset(
        {
            RunStatus.completed,
            RunStatus.interrupted,
            RunStatus.failed,
            RunStatus.cancelled,
            RunStatus.superseded,
        }
    ),
    foreign_event="run_started",
    help_rows=(
        "| executing_tools | continue_run  |       | running         |",
        "| idle            | supersede     |       | superseded      |",
    ),
    humanized=("Executing tools", "Continue run"),
    refused=(RunStatus.idle, RunEvent.continue_run, "Can't continue_run when in idle."),
    moves=(RunStatus.executing_tools, RunEvent.continue_run),
)

TOOL_CALL = Spec(
    cls=ToolCallLifecycle,
    compiled=TOOL_CALL_MACHINE,
    states=ToolCallStatus,
    events=ToolCallEvent,
    table={
        (ToolCallStatus.streaming, ToolCallEvent.finish_args): ToolCallStatus.pending,
        (ToolCallStatus.streaming, ToolCallEvent.receive_result): ToolCallStatus.completed,
        (ToolCallStatus.streaming, ToolCallEvent.abandon): ToolCallStatus.failed,
        (ToolCallStatus.pending, ToolCallEvent.execute): ToolCallStatus.executing,
        (ToolCallStatus.pending, ToolCallEvent.receive_result): ToolCallStatus.completed,
        (ToolCallStatus.pending, ToolCallEvent.abandon): ToolCallStatus.failed,
        (
            ToolCallStatus.pending,
            ToolCallEvent.request_approval,
        ): ToolCallStatus.awaiting_approval,
        (ToolCallStatus.awaiting_approval, ToolCallEvent.approve): ToolCallStatus.executing,
        (ToolCallStatus.awaiting_approval, ToolCallEvent.deny): ToolCallStatus.failed,
        (ToolCallStatus.awaiting_approval, ToolCallEvent.abandon): ToolCallStatus.failed,
        (ToolCallStatus.executing, ToolCallEvent.succeed): ToolCallStatus.completed,
        (ToolCallStatus.executing, ToolCallEvent.fail): ToolCallStatus.failed,
        (ToolCallStatus.executing, ToolCallEvent.abandon): ToolCallStatus.failed,
    },
    initial=ToolCallStatus.streaming,
    finals=frozenset({ToolCallStatus.completed, ToolCallStatus.failed}),
    foreign_event="tool_call_args",
    help_rows=(
        "| streaming         | finish_args      |       | pending           |",
        "| awaiting_approval | deny             |       | failed            |",
        "| executing         | abandon          |       | failed            |",
    ),
    humanized=("Finish args", "Receive result"),
    refused=(
        ToolCallStatus.completed,
        ToolCallEvent.finish_args,
        "Can't finish_args when in completed.",
    ),
    moves=(ToolCallStatus.streaming, ToolCallEvent.finish_args),
)

SPECS = (RUN, TOOL_CALL)
