"""A thread's log read back: its conversation, its last turn, and a live turn to resume.

:func:`replay` folds a log into a :class:`ThreadHistory` in one pass. A
``MessageSaved`` whose message id was seen before replaces that message in place
(a signature that arrived late, a tool result renamed); every other record is read
for what it says of the turn it belongs to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toolrelay._core import ChatMessage, ToolResult
from toolrelay.protocol import Context, Interrupt, ResumeEntry
from toolrelay.store._contract import Entry
from toolrelay.store._records import (
    MessageSaved,
    StateSaved,
    StoredBatch,
    ToolFinished,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
    message_from_record,
)

__all__ = ("EndedTurn", "LiveTurn", "ThreadHistory", "replay")


@dataclass(slots=True)
class LiveTurn:
    """A turn the log shows started and not ended (what recovery resumes).

    Attributes:
        turn_id: Its id.
        first_message: Where its messages start in the conversation.
        resume: The answers to interrupts its first run carried.
        tools: The last tool batch its runs asked for (``None``: its first run had
            not finished).
        batch_open: Whether that batch was still running (its results not yet
            committed to the conversation).
        results: The results already stored for calls of that batch, by call id.
        context: The ``context`` its runs carry, when it had its own (``None``: the
            engine's).
        forwarded_props: Its own ``forwardedProps`` (``None``: the engine's).
    """

    turn_id: str
    first_message: int
    resume: tuple[ResumeEntry, ...] = ()
    tools: ToolsStarted | None = None
    batch_open: bool = False
    results: dict[str, ToolResult] = field(default_factory=dict)
    context: tuple[Context, ...] | None = None
    forwarded_props: Any = None


@dataclass(frozen=True, slots=True)
class EndedTurn:
    """The last turn of the thread that ended: how, what it asked, and the context and
    forwarded props its runs carried when it had its own (``None``: the engine's)."""

    turn_id: str
    status: str
    reason_kind: str
    interrupts: tuple[Interrupt, ...]
    context: tuple[Context, ...] | None = None
    forwarded_props: Any = None


@dataclass(slots=True)
class ThreadHistory:
    """What a thread's log says.

    Attributes:
        messages: The conversation, in order.
        state: The agent state the last run left (``None``: never set).
        live: The turn to resume, if the log has one.
        last_ended: The last turn that ended, if any.
        last_seq: The sequence number of the last record read.
    """

    messages: list[ChatMessage] = field(default_factory=list)
    state: Any = None
    live: LiveTurn | None = None
    last_ended: EndedTurn | None = None
    last_seq: int = 0


def replay(entries: Iterable[Entry]) -> ThreadHistory:
    """Fold a thread's log (oldest first) into what it says; O(records)."""
    history = ThreadHistory()
    messages = history.messages
    where: dict[str, int] = {}  # message id -> index in messages
    for entry in entries:
        history.last_seq = entry.seq
        record = entry.record
        live = history.live
        match record:
            case MessageSaved(message=stored):
                message = message_from_record(stored)
                index = where.get(message.id)
                if index is None:
                    where[message.id] = len(messages)
                    messages.append(message)
                else:
                    messages[index] = message
                if isinstance(stored, StoredBatch) and live is not None and live.batch_open:
                    # The batch was committed: its calls are no longer running.
                    assert live.tools is not None
                    batch_ids = {call.id for call in live.tools.calls}
                    if any(call.id in batch_ids for call in stored.calls):
                        live.batch_open = False
                        live.results = {}
            case TurnStarted():
                # A turn left without an end by a newer one was superseded.
                history.live = LiveTurn(
                    record.turn_id,
                    len(messages),
                    record.resume,
                    context=record.context,
                    forwarded_props=record.forwarded_props,
                )
            case ToolsStarted():
                if live is not None and live.turn_id == record.turn_id:
                    live.tools = record
                    live.batch_open = True
                    live.results = {
                        call.id: call.result for call in record.calls if call.result is not None
                    }
            case ToolFinished():
                if live is not None and live.turn_id == record.turn_id:
                    live.results[record.call_id] = record.result
            case StateSaved():
                history.state = record.state
            case TurnEnded():
                own = live if live is not None and live.turn_id == record.turn_id else None
                history.last_ended = EndedTurn(
                    record.turn_id,
                    record.status,
                    record.reason.kind.value,
                    record.interrupts,
                    context=None if own is None else own.context,
                    forwarded_props=None if own is None else own.forwarded_props,
                )
                if own is not None:
                    history.live = None
    return history
