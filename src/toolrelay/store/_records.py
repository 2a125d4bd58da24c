"""What a thread's log holds: one record per block, as it exists (reference 004).

A thread's log is append-only. Each record is written the moment its block exists
(never one row per delta: text and arguments are written when their message or call
is final), and gets the thread's next sequence number when its transaction commits.

==================  ===========================================================
record              written when
==================  ===========================================================
``TurnStarted``     a turn begins (with the answers to interrupts it carries)
``MessageSaved``    a message reached its final form: the user's message, text,
                    reasoning (with its encrypted value), a committed batch of
                    tool calls with their results. A later ``MessageSaved`` with
                    the same message id replaces the earlier one, in place
``ToolsStarted``    a run ended with calls pending: the batch, final arguments,
                    before any of it runs (the write-ahead of promise 10), and
                    where the calls the agent ran itself go back
``ToolFinished``    one call of the batch has its result (or error)
``StateSaved``      the agent state changed during a run (written at its end)
``TurnEnded``       the turn reached a final state, with its reason (and the
                    interrupts, for ``interrupted``)
==================  ===========================================================

Records are msgspec Structs tagged by ``kind``; they encode to JSON for every store.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from toolrelay._core import (
    ChatMessage,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
    ToolResult,
)
from toolrelay._machines import ToolCallStatus
from toolrelay._reasons import TerminalReason
from toolrelay.protocol import Context, Interrupt, Message, ResumeEntry

__all__ = (
    "Record",
    "MessageSaved",
    "StateSaved",
    "StoredAgentResult",
    "StoredCall",
    "StoredMessage",
    "ToolFinished",
    "ToolsStarted",
    "TurnEnded",
    "TurnStarted",
    "call_from_record",
    "call_to_record",
    "decode_record",
    "encode_record",
    "message_from_record",
    "message_to_record",
    "record_encoder",
)


class _Base(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Frozen data that points at nothing that points back (text, numbers, the
    agent's JSON state, messages and results of the same kind), so never part of a
    reference cycle: the collector does not track records (``gc=False``). Every write
    holds some while it waits for its commit, and under load the collector would walk
    them in the old generation."""


# -- messages ------------------------------------------------------------------------


class StoredCall(_Base, frozen=True, kw_only=True):
    """One tool call: its final arguments and, once it has one, its result."""

    id: str
    name: str
    arguments: str
    status: ToolCallStatus
    run_id: str | None = None
    parent_message_id: str | None = None
    encrypted_value: str | None = None
    result: ToolResult | None = None


class AguiMessage(_Base, tag_field="type", tag="agui", frozen=True, kw_only=True):
    """An AG-UI message as the embedding code gave it (the user's, a system prompt)."""

    message: Message


class StoredText(_Base, tag_field="type", tag="text", frozen=True, kw_only=True):
    id: str
    role: str
    text: str
    interrupted: bool = False


class StoredReasoning(_Base, tag_field="type", tag="reasoning", frozen=True, kw_only=True):
    id: str
    text: str
    encrypted_value: str | None = None


class StoredBatch(_Base, tag_field="type", tag="tool_calls", frozen=True, kw_only=True):
    id: str
    calls: tuple[StoredCall, ...]
    result_message_ids: tuple[str, ...]
    before: tuple[str | None, ...] = ()


StoredMessage: TypeAlias = AguiMessage | StoredText | StoredReasoning | StoredBatch
"""A conversation message as a log record holds it."""


def call_to_record(call: ToolCallInfo) -> StoredCall:
    """The stored form of a tool call: its id, name, arguments, status, run and result."""
    return StoredCall(
        id=call.id,
        name=call.name,
        arguments=call.arguments,
        status=call.status,
        run_id=call.run_id,
        parent_message_id=call.parent_message_id,
        encrypted_value=call.encrypted_value,
        result=call.result,
    )


def call_from_record(stored: StoredCall) -> ToolCallInfo:
    """A :class:`ToolCallInfo` in the state the record says (its machine cursor too)."""
    call = ToolCallInfo(
        stored.id,
        stored.name,
        parent_message_id=stored.parent_message_id,
        run_id=stored.run_id,
        arguments=stored.arguments,
        status=stored.status,
    )
    call.encrypted_value = stored.encrypted_value
    call.result = stored.result
    return call


def message_to_record(message: ChatMessage) -> StoredMessage:
    """The stored form of a conversation message (text, reasoning or a tool-call batch)."""
    if isinstance(message, TextMessage):
        return StoredText(
            id=message.id, role=message.role, text=message.text, interrupted=message.interrupted
        )
    if isinstance(message, ReasoningRecord):
        return StoredReasoning(
            id=message.id, text=message.text, encrypted_value=message.encrypted_value
        )
    if isinstance(message, ToolCallBatch):
        return StoredBatch(
            id=message.id,
            calls=tuple(call_to_record(call) for call in message.calls),
            result_message_ids=message.result_message_ids,
            before=message.before,
        )
    return AguiMessage(message=message)


def message_from_record(stored: StoredMessage) -> ChatMessage:
    """The conversation message a stored record holds (:func:`message_to_record` undone)."""
    match stored:
        case StoredText():
            text = TextMessage(stored.id, stored.role, stored.text)
            text.interrupted = stored.interrupted
            return text
        case StoredReasoning():
            return ReasoningRecord(stored.id, stored.text, encrypted_value=stored.encrypted_value)
        case StoredBatch():
            return ToolCallBatch(
                id=stored.id,
                calls=tuple(call_from_record(call) for call in stored.calls),
                result_message_ids=stored.result_message_ids,
                before=stored.before,
            )
        case AguiMessage():
            return stored.message


# -- records -------------------------------------------------------------------------


class TurnStarted(_Base, tag_field="kind", tag="turn_started", frozen=True, kw_only=True):
    """A turn began on the thread.

    Attributes:
        turn_id: The turn's id (unique in the thread).
        resume: The answers to the agent's interrupts its first run carries.
        retry_of: The failed turn this one retries (its input is sent again).
        context: The ``context`` its runs carry, when the turn was given its own
            (``None``: the engine's).
        forwarded_props: The ``forwardedProps`` its runs carry, when the turn was
            given its own (``None``: the engine's).
    """

    turn_id: str
    resume: tuple[ResumeEntry, ...] = ()
    retry_of: str | None = None
    context: tuple[Context, ...] | None = None
    forwarded_props: Any = None


class MessageSaved(_Base, tag_field="kind", tag="message", frozen=True, kw_only=True):
    """A conversation message in its final form (replaces an earlier one, by id)."""

    turn_id: str
    message: StoredMessage


class StoredAgentResult(_Base, frozen=True, kw_only=True):
    """A call of the batch the agent ran itself: its result's message id, and how many
    messages came after its start when the run ended (see
    :class:`~toolrelay.sansio.AgentResult`)."""

    call_id: str
    message_id: str
    after: int = 0


class ToolsStarted(_Base, tag_field="kind", tag="tools_started", frozen=True, kw_only=True):
    """A run ended with calls pending: they are about to run (promise 10's write-ahead).

    Attributes:
        run_id: The run that asked for them.
        depth: The turn's continuation depth when the run ended.
        runs: How many runs the turn has started.
        calls: Every call of the run: ``executing`` ones about to run, and any the
            agent resolved itself (with their result).
        agent_results: For each call the agent resolved itself, what commits it where
            the stream had it, under the agent's result id (left out when there is
            none; older versions never wrote it, and their batches are restored with
            the agent's calls in the batch).
    """

    turn_id: str
    run_id: str
    depth: int
    runs: int
    calls: tuple[StoredCall, ...]
    agent_results: tuple[StoredAgentResult, ...] = ()


class ToolFinished(_Base, tag_field="kind", tag="tool_finished", frozen=True, kw_only=True):
    """One call of the running batch has its outcome."""

    turn_id: str
    call_id: str
    result: ToolResult


class StateSaved(_Base, tag_field="kind", tag="state", frozen=True, kw_only=True):
    """The agent state (``STATE_SNAPSHOT`` / ``STATE_DELTA``) as a run left it."""

    turn_id: str
    state: Any


class TurnEnded(_Base, tag_field="kind", tag="turn_ended", frozen=True, kw_only=True):
    """The turn reached a final state.

    Attributes:
        status: The run lifecycle's final state (``completed``, ``failed``...).
        reason: Why.
        interrupts: What the agent asks, for an ``interrupted`` turn.
    """

    turn_id: str
    status: str
    reason: TerminalReason
    interrupts: tuple[Interrupt, ...] = ()


Record: TypeAlias = (
    TurnStarted | MessageSaved | ToolsStarted | ToolFinished | StateSaved | TurnEnded
)
"""Everything a thread's log holds."""

#: What :func:`encode_record` uses (its ``encode`` called directly where every call counts).
record_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Record] = msgspec.json.Decoder(Record)


def encode_record(record: Record) -> bytes:
    """The record as JSON bytes (what every store keeps)."""
    return record_encoder.encode(record)


def decode_record(data: bytes | str) -> Record:
    """A record from its JSON; raises ``msgspec.DecodeError`` on anything else."""
    return _decoder.decode(data)
