"""The spellings of the two machines: their states and their events.

Each state's value is, at once, the value persisted in a run log, the state id in
the declared machine (``States.from_enum(..., use_enum_instance=True)``) and the
label drawn in the diagrams: one spelling, three uses. Each event's value is the
event id the declared machine answers to, and the label it is drawn with.

Members are lowercase on purpose: ``States.from_enum`` makes the member *name* the
state id, so ``RunStatus.executing_tools`` is named, valued and identified
``executing_tools``. python-statemachine would humanize the label ("Executing
tools"); :func:`labelled_by_value` names each state by its value instead, and each
event is declared with ``Event(..., name=RunEvent.continue_run)``, so the diagrams,
the ``{statechart:md}`` table in ``help()`` and the library's own messages print
``executing_tools`` and ``continue_run``.

These enums carry no transitions, nor which states are final. The transitions and
the finals live in ``_run.py`` and ``_tool_call.py`` and nowhere else;
``_compiled.py`` checks at import that these enums and the declared machines name
the same states and events, and hands each enum the finals it read (:data:`FINALS`).
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from statemachine.states import States

__all__ = (
    "FINALS",
    "RunEvent",
    "RunStatus",
    "ToolCallEvent",
    "ToolCallStatus",
    "labelled_by_value",
)


_States = TypeVar("_States", bound=States)

#: The final states of each machine, by its states enum, as the declared machine says
#: (``final=``). Filled by ``_compiled.py`` when it compiles the machines, at import;
#: ``is_final`` reads it.
FINALS: dict[type[enum.StrEnum], frozenset[Any]] = {}


def labelled_by_value(states: _States) -> _States:
    """Label every state of ``states`` (from ``States.from_enum``) with its enum value.

    ``State.name`` is the label python-statemachine draws and prints; left empty, the
    library humanizes the state id (``executing_tools`` -> "Executing tools"). Named
    here, before the class body hands the states to the metaclass, the label is the
    value, which is also the id: one spelling. Returns ``states`` itself.
    """
    for state in states:
        state.name = str(state.value)
    return states


class RunStatus(enum.StrEnum):
    """Where one turn (one user message on a thread) stands; see ``RunLifecycle``."""

    #: The turn exists but its first run has not started.
    idle = "idle"
    #: A run is streaming events from the agent (the first one or a continuation).
    running = "running"
    #: A run ended with tool calls pending; toolrelay is executing them (still running
    #: for observers: no flash of idle between Run N and Run N+1).
    executing_tools = "executing_tools"
    #: Final: the agent answered and no tool call is pending.
    completed = "completed"
    #: Final: the agent paused the turn to ask for something only the outside world
    #: can give (an approval, a choice: AG-UI ``RUN_FINISHED`` with the ``interrupt``
    #: outcome). Its interrupts are the turn's; the next turn on the thread answers
    #: them with resume entries. Not ``completed``: the agent did not answer.
    interrupted = "interrupted"
    #: Final: the agent, the wire, the backend or toolrelay failed, or the
    #: continuation depth bound was reached (promise 3).
    failed = "failed"
    #: Final: the embedding code cancelled the turn (promise 4), or the agent reported
    #: its run cancelled (AG-UI ``RUN_FINISHED`` with the ``cancelled`` outcome).
    cancelled = "cancelled"
    #: Final: a newer turn on the same thread took it over (promise 5).
    superseded = "superseded"

    @property
    def is_final(self) -> bool:
        """Whether the turn has ended; no event moves it any more."""
        return self in FINALS[RunStatus]

    @property
    def is_running(self) -> bool:
        """Whether the turn is in flight, as observers see it.

        ``executing_tools`` counts as running, so a UI shows one uninterrupted
        turn across a continuation (ARCHITECTURE: no flash of idle or completed).
        """
        return self is RunStatus.running or self is RunStatus.executing_tools


class ToolCallStatus(enum.StrEnum):
    """Where one tool call stands; see ``ToolCallLifecycle``."""

    #: AG-UI ``TOOL_CALL_START`` was received; ``TOOL_CALL_ARGS`` deltas are arriving.
    streaming = "streaming"
    #: AG-UI ``TOOL_CALL_END`` was received: the arguments are complete.
    pending = "pending"
    #: The run ended and the tool needs the embedding code's approval before it runs
    #: (a tool policy): the turn waits for ``approve`` or ``deny``.
    awaiting_approval = "awaiting_approval"
    #: The tool is running.
    executing = "executing"
    #: Final: the call has a result (ours, or the agent's ``TOOL_CALL_RESULT``).
    completed = "completed"
    #: Final: the tool failed, or the call was abandoned by a broken, cancelled,
    #: interrupted or superseded run (promise 1: a call never stays open).
    failed = "failed"

    @property
    def is_final(self) -> bool:
        """Whether the call has ended; no event moves it any more."""
        return self in FINALS[ToolCallStatus]

    @property
    def is_open(self) -> bool:
        """Whether the call still waits for something (``streaming``, ``pending``,
        ``awaiting_approval``, ``executing``).

        Promise 1: no call is open once the engine is quiet.
        """
        return not self.is_final


class RunEvent(enum.StrEnum):
    """The events ``RunLifecycle`` answers to (values are its event ids)."""

    #: The first run of the turn was started (idle -> running).
    start = "start"
    #: The run's stream ended (``RUN_FINISHED`` or stream done) with tool calls
    #: pending (running -> executing_tools).
    execute_tools = "execute_tools"
    #: The continuation run carrying the tool results started (executing_tools ->
    #: running); the continuation depth grows by one (promise 3).
    continue_run = "continue_run"
    #: The run's stream ended with no tool call pending (running -> completed).
    complete = "complete"
    #: The run's stream ended with the AG-UI ``interrupt`` outcome: the agent waits
    #: for answers (running -> interrupted); calls still pending are abandoned.
    interrupt = "interrupt"
    #: The turn failed, from any non-final state.
    fail = "fail"
    #: The embedding code cancelled the turn, from any non-final state (promise 4).
    cancel = "cancel"
    #: A newer turn on the same thread took over, from any non-final state (promise 5).
    supersede = "supersede"


class ToolCallEvent(enum.StrEnum):
    """The events ``ToolCallLifecycle`` answers to (values are its event ids).

    ``TOOL_CALL_ARGS`` deltas are not events: they change the arguments, not the state.
    """

    #: AG-UI ``TOOL_CALL_END``: the arguments are complete (streaming -> pending).
    finish_args = "finish_args"
    #: The tool starts running (pending -> executing).
    execute = "execute"
    #: The tool needs approval before it runs (pending -> awaiting_approval).
    request_approval = "request_approval"
    #: The embedding code approved the call (awaiting_approval -> executing).
    approve = "approve"
    #: The embedding code denied the call (awaiting_approval -> failed; its message
    #: is the result the model sees).
    deny = "deny"
    #: The tool returned a result (executing -> completed).
    succeed = "succeed"
    #: The tool raised, timed out or was unknown (executing -> failed; the error
    #: text still reaches the model, promise 2).
    fail = "fail"
    #: AG-UI ``TOOL_CALL_RESULT``: the agent ran the tool itself (streaming | pending
    #: -> completed); a client must not run it again.
    receive_result = "receive_result"
    #: The run broke, was cancelled, interrupted or superseded (any non-final state
    #: -> failed; promise 1).
    abandon = "abandon"
