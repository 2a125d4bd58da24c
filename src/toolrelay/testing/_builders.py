"""Event builders: a tool call, a text message or a whole run in one line.

Ids default to short deterministic-looking values derived from a counter, so tests
that do not care about ids need not invent them; pass ``id=`` where they matter.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import msgspec

from toolrelay.protocol import (
    Event,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = (
    "run_cancelled",
    "run_error",
    "run_finished",
    "run_interrupted",
    "run_started",
    "server_tool_call",
    "split_deltas",
    "text",
    "tool_call",
)

_counter = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}-{next(_counter)}"


def split_deltas(value: str, size: int) -> list[str]:
    """``value`` cut into pieces of ``size`` characters (at least one piece)."""
    if size < 1:
        raise ValueError("size must be >= 1")
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def tool_call(
    name: str,
    arguments: str | dict[str, Any] | None = None,
    *,
    id: str | None = None,
    parent_message_id: str | None = None,
    chunk: int | None = None,
) -> list[Event]:
    """TOOL_CALL_START, ARGS (one, or pieces of ``chunk`` characters) and END.

    ``arguments`` may be a JSON string or a dict (encoded); ``None`` sends no ARGS at
    all, as agents do for a zero-argument tool.
    """
    call_id = id or _next_id("call")
    events: list[Event] = [
        ToolCallStartEvent(
            tool_call_id=call_id, tool_call_name=name, parent_message_id=parent_message_id
        )
    ]
    if arguments is not None:
        raw = arguments if isinstance(arguments, str) else msgspec.json.encode(arguments).decode()
        pieces = split_deltas(raw, chunk) if chunk else [raw]
        events.extend(ToolCallArgsEvent(tool_call_id=call_id, delta=piece) for piece in pieces)
    events.append(ToolCallEndEvent(tool_call_id=call_id))
    return events


def server_tool_call(
    name: str,
    arguments: str | dict[str, Any] | None,
    result: str,
    *,
    id: str | None = None,
    message_id: str | None = None,
    parent_message_id: str | None = None,
) -> list[Event]:
    """A tool the agent ran itself: START/ARGS/END then TOOL_CALL_RESULT."""
    call_id = id or _next_id("call")
    return [
        *tool_call(name, arguments, id=call_id, parent_message_id=parent_message_id),
        ToolCallResultEvent(
            message_id=message_id or _next_id("msg"), tool_call_id=call_id, content=result
        ),
    ]


def text(content: str, *, id: str | None = None, chunk: int | None = None) -> list[Event]:
    """TEXT_MESSAGE_START, CONTENT (one, or pieces of ``chunk`` characters) and END."""
    message_id = id or _next_id("msg")
    pieces = split_deltas(content, chunk) if chunk else [content]
    return [
        TextMessageStartEvent(message_id=message_id, role="assistant"),
        *(TextMessageContentEvent(message_id=message_id, delta=p) for p in pieces if p),
        TextMessageEndEvent(message_id=message_id),
    ]


def run_started(thread_id: str, run_id: str) -> RunStartedEvent:
    """RUN_STARTED for ``run_id`` on ``thread_id``."""
    return RunStartedEvent(thread_id=thread_id, run_id=run_id)


def run_finished(thread_id: str, run_id: str) -> RunFinishedEvent:
    """RUN_FINISHED with no outcome (success) for ``run_id`` on ``thread_id``."""
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id)


def run_interrupted(thread_id: str, run_id: str, *interrupts: Interrupt) -> RunFinishedEvent:
    """RUN_FINISHED with the AG-UI 1.0 ``interrupt`` outcome: the agent waits for answers."""
    return RunFinishedEvent(
        thread_id=thread_id,
        run_id=run_id,
        outcome=RunFinishedInterruptOutcome(interrupts=list(interrupts)),
    )


def run_cancelled(thread_id: str, run_id: str) -> RunFinishedEvent:
    """RUN_FINISHED with the AG-UI 1.0 ``cancelled`` outcome: the agent was told to stop."""
    return RunFinishedEvent(
        thread_id=thread_id, run_id=run_id, outcome=RunFinishedCancelledOutcome()
    )


def run_error(message: str, code: str | None = None) -> RunErrorEvent:
    """RUN_ERROR: the agent reports that the run failed, with ``message`` and ``code``."""
    return RunErrorEvent(message=message, code=code)


def flatten(parts: Iterable[Event | Iterable[Event]]) -> list[Event]:
    """Events and lists of events, flattened in order."""
    out: list[Event] = []
    for part in parts:
        if isinstance(part, msgspec.Struct):
            out.append(part)
        else:
            out.extend(part)
    return out
