"""The conversation model of one thread: its messages and the tool calls of a turn.

A :class:`Conversation` is the thread's history. It holds AG-UI messages the embedding
code supplied (``UserMessage``, ``SystemMessage``, earlier ``AssistantMessage`` and
``ToolMessage`` records) beside the records toolrelay builds while it streams:

- :class:`TextMessage`: text streamed by the agent (TEXT_MESSAGE_* or *_CHUNK).
- :class:`ReasoningRecord`: reasoning / thinking text (REASONING_*, legacy THINKING_*).
- :class:`ToolCallBatch`: the tool calls of one run, every call final
  (completed or failed) with its result; the mapper turns it into the assistant
  message with ``toolCalls`` and one ``tool`` message per call.

Records that are still streaming are mutable and already in the list, so a UI sees
text appear; nothing is copied per event (promise 8). Once a record is final it is
not changed again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, Set as AbstractSet

import msgspec

from toolrelay._core._arguments import Chunks
from toolrelay._core._tool_result import ToolResult
from toolrelay._machines import TOOL_CALL_MACHINE, ToolCallEvent, ToolCallStatus
from toolrelay.protocol import AssistantMessage, Message, ToolMessage

__all__ = (
    "AgentResult",
    "ChatMessage",
    "Conversation",
    "ReasoningRecord",
    "TextMessage",
    "ToolCallBatch",
    "ToolCallInfo",
)


# The states in which a call still takes argument deltas (after END too, until the
# run ends: see the processor's args_after_end).
_TAKING_ARGUMENTS = frozenset((ToolCallStatus.streaming, ToolCallStatus.pending))


class ToolCallInfo(Chunks):
    """One tool call of a run, from TOOL_CALL_START to its result.

    Its status is driven by the declared ``ToolCallLifecycle`` (through its compiled
    table); argument deltas are appended without a transition, to chunks the call
    holds itself (:class:`~toolrelay._core._arguments.Chunks`).

    Attributes:
        id: The ``toolCallId``.
        name: The ``toolCallName``.
        parent_message_id: The assistant message the call belongs to, when the agent said.
        result: The outcome once the call is final (``None`` before).
        run_id: The run that asked for the call.
    """

    __slots__ = (
        "_status",
        "encrypted_value",
        "id",
        "name",
        "parent_message_id",
        "result",
        "run_id",
    )

    def __init__(
        self,
        id: str,
        name: str,
        *,
        parent_message_id: str | None = None,
        run_id: str | None = None,
        arguments: str = "",
        status: ToolCallStatus | None = None,
    ) -> None:
        """``status``: where the call starts in its machine (``streaming`` unless a
        store restores a call it saved)."""
        self.id = id
        self.name = name
        self.parent_message_id = parent_message_id
        self.run_id = run_id
        self.result: ToolResult | None = None
        #: An opaque artefact the provider attached to the call (REASONING_ENCRYPTED_VALUE
        #: with subtype ``tool-call``, e.g. a thought signature), sent back with it.
        self.encrypted_value: str | None = None
        self._start_chunks(arguments)
        # Where the call stands in the compiled ToolCallLifecycle (a state of its own
        # rather than a cursor object: one object less per call for the collector).
        self._status = TOOL_CALL_MACHINE.initial if status is None else status

    @property
    def status(self) -> ToolCallStatus:
        """The call's state in the tool-call machine."""
        return self._status

    @property
    def arguments(self) -> str:
        """The raw argument JSON received so far (``""`` when none arrived)."""
        return self._joined()

    @property
    def argument_bytes(self) -> int:
        """UTF-8 size of the arguments received so far."""
        return self._settle()

    def replace_arguments(self, arguments: str) -> None:
        """Put ``arguments`` in place of what streamed (the server's own record won)."""
        self._start_chunks(arguments)

    def append_arguments(self, delta: str) -> int:
        """Append an argument delta (no transition); returns the new byte count."""
        return self._append_counted(delta)

    @property
    def argument_adder(self) -> Callable[[str], None]:
        """Appends a non-empty argument delta, counted when asked (the event
        processor's hot path; see :attr:`TextAccumulator.add`); valid while the call
        takes arguments (``streaming``, ``pending``)."""
        return self._open_chunks().append

    def send(self, event: ToolCallEvent) -> ToolCallStatus:
        """Move the call through its machine; raises ``IllegalTransition`` if refused
        (the call stays where it was)."""
        status = self._status = TOOL_CALL_MACHINE.step(self._status, event)
        if status not in _TAKING_ARGUMENTS:
            self._seal()  # no argument comes any more
        return status

    def __repr__(self) -> str:
        return (
            f"ToolCallInfo(id={self.id!r}, name={self.name!r}, status={self.status.value!r}, "
            f"arguments={self.arguments!r})"
        )


class TextMessage(Chunks):
    """Text of one message, as the agent streamed it; mutable while ``complete`` is False.

    One built by the embedding code (earlier history, say) is complete unless it says
    otherwise; the processor builds the ones it streams open, and closes them.

    Attributes:
        id: The ``messageId``.
        role: The role the agent gave (``assistant`` unless it said otherwise).
        complete: True once TEXT_MESSAGE_END (or the end of the run) closed it. While
            it is False the text may still grow, so the mapper does not keep its mapping.
        interrupted: True when the run ended before the message was closed: the text is
            what arrived, kept (promise 7), but may be cut short.
    """

    __slots__ = ("complete", "id", "interrupted", "role")

    def __init__(
        self, id: str, role: str = "assistant", text: str = "", *, complete: bool = True
    ) -> None:
        self.id = id
        self.role = role
        self._start_chunks(text)
        self.complete = complete
        self.interrupted = False

    @property
    def text(self) -> str:
        return self._joined()

    def append(self, delta: str) -> int:
        return self._append_counted(delta)

    @property
    def byte_count(self) -> int:
        """UTF-8 size of the text received so far."""
        return self._settle()

    @property
    def adder(self) -> Callable[[str], None]:
        """Appends a non-empty text delta, counted when asked (the event processor's hot
        path; see :attr:`TextAccumulator.add`); valid until the message is settled."""
        return self._open_chunks().append

    def __repr__(self) -> str:
        return f"TextMessage(id={self.id!r}, role={self.role!r}, text={self.text!r})"


class ReasoningRecord(Chunks):
    """Reasoning or thinking text the agent streamed (not sent back by default).

    Complete unless built otherwise, like :class:`TextMessage`.

    Attributes:
        encrypted_value: The provider's signature or encrypted form of the reasoning
            (REASONING_ENCRYPTED_VALUE), which some providers require back with it
            (Anthropic's signed thinking blocks, when tools are used).
    """

    __slots__ = ("complete", "encrypted_value", "id")

    def __init__(
        self,
        id: str,
        text: str = "",
        *,
        complete: bool = True,
        encrypted_value: str | None = None,
    ) -> None:
        self.id = id
        self._start_chunks(text)
        self.complete = complete
        self.encrypted_value = encrypted_value

    @property
    def text(self) -> str:
        return self._joined()

    def append(self, delta: str) -> int:
        return self._append_counted(delta)

    def __repr__(self) -> str:
        return f"ReasoningRecord(id={self.id!r}, text={self.text!r})"


class ToolCallBatch(msgspec.Struct, frozen=True, gc=False):
    """The tool calls of one run, every one final, with their results.

    Not tracked by the cycle collector (``gc=False``): its calls never point back at
    it, and a long thread holds one per continuation.

    Attributes:
        id: A message id for the batch.
        calls: The calls in the order the agent streamed them.
        result_message_ids: For each call, the ``tool`` message id to use (the agent's
            ``messageId`` when it sent TOOL_CALL_RESULT itself, otherwise generated).
        before: Where each call goes back (empty: every call with the batch). ``None``:
            in the batch's own assistant message, with the calls toolrelay ran, after
            the run's messages. A message id: the call ran on the agent's side (its
            result came in the stream) in an assistant message of its own, and goes
            back in that message, with its result after it, just before the run's
            message of that id: where the stream had it. The batch's own id puts it
            just before the batch's message.
    """

    id: str
    calls: tuple[ToolCallInfo, ...]
    result_message_ids: tuple[str, ...]
    before: tuple[str | None, ...] = ()


class AgentResult(msgspec.Struct, frozen=True, gc=False):
    """A call of a run that the agent ran itself (its result came in the stream), as
    its batch needs it to be committed: what a store keeps while the batch runs, so
    that a batch restored after a crash is committed as the run would have committed
    it (:attr:`ToolCallBatch.result_message_ids` and :attr:`ToolCallBatch.before`).

    Attributes:
        call_id: The call's id.
        message_id: The ``messageId`` the agent gave its result.
        after: How many messages the run appended after the call started, counted
            when the run ended (the call goes back before the first of them).
    """

    call_id: str
    message_id: str
    after: int


#: A message of a :class:`Conversation`: text, reasoning or a tool-call batch as
#: toolrelay keeps them, or an AG-UI message the embedding code supplied.
ChatMessage = Message | TextMessage | ReasoningRecord | ToolCallBatch
"""Anything a conversation holds."""


class _Index:
    """What a conversation knows of its messages' ids (made at the first question,
    which most threads never ask): the call ids it holds, every message id, and
    which batch holds each committed call. Sets of ids are kept as dicts
    (id -> True): a dict of strings is not tracked by the cycle collector, and an
    empty one is a quarter of an empty set's size."""

    __slots__ = ("batches", "call_ids", "indexed", "known", "last_indexed")

    def __init__(self) -> None:
        self.call_ids: dict[str, bool] = {}
        self.known: dict[str, bool] = {}
        self.batches: dict[str, int] = {}
        self.indexed = 0
        self.last_indexed: ChatMessage | None = None  # the message at indexed - 1

    def forget(self) -> None:
        """Empty the index in place (a view of ``known`` stays live)."""
        self.call_ids.clear()
        self.known.clear()
        self.batches.clear()
        self.indexed = 0


class Conversation:
    """The history of one thread: an append-only list of messages plus thread state.

    Attributes:
        thread_id: The AG-UI ``threadId``.
        messages: Everything said so far, in order.
        state: The agent state to send with the next run (updated by STATE_SNAPSHOT
            and STATE_DELTA events).
        last_snapshot: The last MESSAGES_SNAPSHOT the agent sent, kept for the
            embedding code; toolrelay does not rewrite its history from it.
    """

    __slots__ = (
        "_index",
        "_mapping",
        "last_snapshot",
        "messages",
        "state",
        "thread_id",
    )

    def __init__(
        self,
        thread_id: str,
        messages: Sequence[ChatMessage] = (),
        *,
        state: object = None,
    ) -> None:
        self.thread_id = thread_id
        self.messages: list[ChatMessage] = list(messages)
        self.state: object = {} if state is None else state
        self.last_snapshot: tuple[Message, ...] | None = None
        # The index of ids (see _catch_up), made when first asked.
        self._index: _Index | None = None
        # What core._mapper keeps between runs (its mapper, made at the first run),
        # which it alone reads and writes; the conversation only drops it when its
        # history changes other than by append.
        self._mapping: object = None

    def append(self, message: ChatMessage) -> None:
        self.messages.append(message)

    def __iter__(self) -> Iterator[ChatMessage]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def tool_calls(self) -> Iterator[ToolCallInfo]:
        """Every committed tool call of the thread, oldest first."""
        for message in self.messages:
            if isinstance(message, ToolCallBatch):
                yield from message.calls

    def _catch_up(self) -> _Index:
        """Index the messages appended since the last call, each message once; returns
        the index.

        The index (call ids, message ids, which batch holds a call) makes the
        questions below amortised O(1) (promise 8): asking never walks the history.
        """
        messages = self.messages
        index = self._index
        if index is None:
            index = self._index = _Index()
        elif index.indexed and (
            len(messages) < index.indexed or messages[index.indexed - 1] is not index.last_indexed
        ):
            # The list was cut, and perhaps grown back past where it was indexed (the
            # message there is another): index it again.
            index.forget()
        ids = index.call_ids
        known = index.known
        for i in range(index.indexed, len(messages)):
            message = messages[i]
            known[message.id] = True
            if isinstance(message, ToolCallBatch):
                _index_batch(index, i, message)
            elif isinstance(message, AssistantMessage):
                for call in message.tool_calls or ():
                    ids[call.id] = True
            elif isinstance(message, ToolMessage):
                ids[message.tool_call_id] = True
        index.indexed = len(messages)
        index.last_indexed = messages[-1] if messages else None
        return index

    def holds_tool_call(self, call_id: str) -> bool:
        """Whether the thread already holds the tool call ``call_id``: committed by
        toolrelay, or in an AG-UI ``assistant`` / ``tool`` message the embedding code
        supplied. Amortised O(1)."""
        return call_id in self._catch_up().call_ids

    def replace_head(self, count: int, messages: Sequence[ChatMessage]) -> None:
        """Replace the first ``count`` messages by ``messages`` (a thread's history read
        from a store, in place of what the embedding code supplied); what the
        conversation indexed and mapped is computed afresh."""
        self.messages[0:count] = messages
        if self._index is not None:
            self._index.forget()
        self._mapping = None

    def remap(self) -> None:
        """Forget the mapping kept for the next run: a record that was settled changed
        (say, a signature arrived for closed reasoning), so map the thread afresh."""
        self._mapping = None

    def known_ids(self) -> AbstractSet[str]:
        """Every message id the conversation would send or has seen: its messages',
        its batches' and their tool results' (a live view; amortised O(1))."""
        return self._catch_up().known.keys()

    def adopt_result_ids(self, stored: Mapping[str, str]) -> list[ToolCallBatch]:
        """Send each committed tool result under the id the server stored it under.

        O(``len(stored)``): the batches are found through the index, not by a walk.

        Args:
            stored: ``toolCallId -> message id`` of the ``tool`` messages of the agent's
                last ``MESSAGES_SNAPSHOT``.

        Returns:
            The renamed batches: each replaced in :attr:`messages` by a copy (batches
            are immutable).
        """
        index = self._catch_up()
        batches = index.batches
        positions = sorted({batches[c] for c in stored if c in batches})
        renamed: list[ToolCallBatch] = []
        messages = self.messages
        for i in positions:
            message = messages[i]
            if not isinstance(message, ToolCallBatch):  # the list was edited in place
                index.forget()
                return renamed + self.adopt_result_ids(stored)
            ids = tuple(
                stored.get(call.id, current)
                for call, current in zip(message.calls, message.result_message_ids, strict=True)
            )
            if ids != message.result_message_ids:
                batch = msgspec.structs.replace(message, result_message_ids=ids)
                messages[i] = batch
                _index_batch(index, i, batch)
                renamed.append(batch)
        return renamed

    def texts(self) -> Iterator[TextMessage]:
        """Every streamed text message, oldest first."""
        for message in self.messages:
            if isinstance(message, TextMessage):
                yield message

    def __repr__(self) -> str:
        return f"Conversation(thread_id={self.thread_id!r}, messages={len(self.messages)})"


def _index_batch(index: _Index, position: int, batch: ToolCallBatch) -> None:
    known = index.known
    known.update(dict.fromkeys(batch.result_message_ids, True))
    for call in batch.calls:
        index.call_ids[call.id] = True
        index.batches[call.id] = position
        if call.parent_message_id:
            known[call.parent_message_id] = True
