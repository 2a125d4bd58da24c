"""Provider streams translated: the shape every adapter's translator has, and the
pieces translators share.

A :class:`StreamTranslator` is pure: fed the provider's decoded stream chunks, it
answers with AG-UI events, and never emits TOOL_CALL_END before the provider said the
call is complete (the backend side is ``_base``'s :class:`ProviderBackend`).
"""

from __future__ import annotations

import itertools
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec

from toolrelay._errors import InvalidEventError, LimitExceededError, MalformedEventError
from toolrelay.protocol import (
    Event,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
)

__all__ = (
    "BuffersArguments",
    "MessageStreams",
    "Recent",
    "StreamTranslator",
    "TrailingUsage",
    "convert_chunk",
    "counter",
    "hold_piece",
    "nonempty",
    "token_count",
    "uuid_id",
)

_T = TypeVar("_T")


class StreamTranslator(Protocol):
    """Provider stream chunks in, AG-UI events out. Pure: no I/O, no clock."""

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        """One decoded chunk (and its SSE event name, if any) -> AG-UI events."""
        ...

    def finish(self) -> list[Event]:
        """The provider's stream closed -> the events that close what is open.

        RUN_FINISHED only if the provider said the response is complete; otherwise the
        run is left unended (the processor fails it: the stream ended early).
        """
        ...


@runtime_checkable
class BuffersArguments(Protocol):
    """A translator that holds argument pieces before it emits them (a call's name
    not come yet, a provider that sends a call whole at its end): the backend sets the
    bound on what it may hold, ``Limits.max_argument_bytes``; past it the translator
    raises :class:`~toolrelay.LimitExceededError`."""

    max_argument_bytes: int


@runtime_checkable
class TrailingUsage(Protocol):
    """A translator whose provider may send the response's token usage after the chunk
    that ends it (Chat Completions sends its usage chunk after ``finish_reason``): the
    backend feeds it what it reads of the response after the run's end, and puts
    ``trailing_usage`` on the run's RUN_FINISHED when that carries none."""

    @property
    def trailing_usage(self) -> list[TokenUsage] | None: ...


class Recent(OrderedDict[str, _T]):
    """What a backend remembers of what it streamed, by id (a call's thought signature,
    a message's phase), for its later requests: the ``limit`` most recent entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: str, value: _T) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


def hold_piece(pieces: list[str], held: int, piece: str, bound: int) -> int:
    """Append an argument piece a translator holds, in O(len(piece)); returns the UTF-8
    bytes now held.

    Raises:
        LimitExceededError: The pieces held would pass ``bound``
            (``max_argument_bytes``).
    """
    held += len(piece) if piece.isascii() else len(piece.encode())
    if held > bound:
        raise LimitExceededError(
            "max_argument_bytes", bound, f"a tool call's buffered arguments reached {held} bytes"
        )
    pieces.append(piece)
    return held


def nonempty(value: Any) -> str | None:
    """``value`` if it is a non-empty string."""
    return value if isinstance(value, str) and value else None


def token_count(parent: Any, key: str) -> int | None:
    """``parent[key]`` if ``parent`` is a JSON object and that is a count of tokens (a
    non-negative integer); ``None`` for anything else."""
    if not isinstance(parent, dict):
        return None
    value = parent.get(key)
    if type(value) is not int or value < 0:  # bool is an int: not a count
        return None
    return value


def convert_chunk(data: Any, kind: type[_T], shape: str, *, sent: str | None = None) -> _T:
    """A decoded chunk (or a part of one) as the provider's ``kind``.

    Args:
        data: What the provider sent, decoded from JSON.
        kind: The msgspec struct it must fit (unknown fields are skipped).
        shape: The provider's name for the shape, for the error.
        sent: What a chunk is, said by the provider ("Gemini sent a chunk"): given,
            ``data`` must be a JSON object.

    Raises:
        MalformedEventError: ``sent`` is given and ``data`` is not a JSON object.
        InvalidEventError: ``data`` does not fit ``kind``.
    """
    if sent is not None and not isinstance(data, dict):
        raise MalformedEventError(f"{sent} that is not a JSON object: {data!r:.120}")
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise InvalidEventError(shape, None, str(exc)) from exc


def counter(prefix: str) -> Callable[[], str]:
    """Ids ``<prefix>1``, ``<prefix>2``... (for providers that give calls no id)."""
    numbers = itertools.count(1)
    return lambda: f"{prefix}{next(numbers)}"


def uuid_id() -> str:
    """A random message id."""
    return uuid.uuid4().hex


class MessageStreams:
    """The open text and reasoning message of a translated stream, as AG-UI events.

    Shared by the translators of providers that stream text and reasoning as plain
    deltas (Google, Ollama, Cohere): a text delta closes open reasoning and opens a text
    message if none is open, and the other way round; a failure closes both and ends
    the run with RUN_ERROR. Subclasses call :meth:`_init_streams` with their id makers.
    """

    def _init_streams(
        self, message_ids: Callable[[], str], call_ids: Callable[[], str] | None
    ) -> None:
        """Start with nothing open; ``call_ids`` defaults to ``call_1``, ``call_2``..."""
        self._message_ids = message_ids
        self._call_ids = call_ids if call_ids is not None else counter("call_")
        self._text_id: str | None = None
        self._last_text_id: str | None = None
        self._reasoning_id: str | None = None
        self._ended = False

    @property
    def ended(self) -> bool:
        """Whether RUN_FINISHED or RUN_ERROR was emitted (later chunks are ignored)."""
        return self._ended

    def finish(self) -> list[Event]:
        """The stream closed: close open messages. Without the provider's own end the
        run is left open, and the backend fails it as a stream that ended early."""
        if self._ended:
            return []
        return self._close_messages()

    def _text(self, delta: str) -> list[Event]:
        events = self._close_reasoning()
        if self._text_id is None:
            self._text_id = self._last_text_id = self._message_ids()
            events.append(TextMessageStartEvent(message_id=self._text_id, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self._text_id, delta=delta))
        return events

    def _close_text(self) -> list[Event]:
        if self._text_id is None:
            return []
        message_id, self._text_id = self._text_id, None
        return [TextMessageEndEvent(message_id=message_id)]

    def _reasoning(self, delta: str) -> list[Event]:
        events = self._close_text()
        if self._reasoning_id is None:
            self._reasoning_id = self._message_ids()
            events.append(ReasoningStartEvent(message_id=self._reasoning_id))
            events.append(ReasoningMessageStartEvent(message_id=self._reasoning_id))
        events.append(ReasoningMessageContentEvent(message_id=self._reasoning_id, delta=delta))
        return events

    def _close_reasoning(self) -> list[Event]:
        if self._reasoning_id is None:
            return []
        message_id, self._reasoning_id = self._reasoning_id, None
        return [
            ReasoningMessageEndEvent(message_id=message_id),
            ReasoningEndEvent(message_id=message_id),
        ]

    def _close_messages(self) -> list[Event]:
        return [*self._close_reasoning(), *self._close_text()]

    def _fail(self, message: str, code: str) -> list[Event]:
        events = self._close_messages()
        self._ended = True
        events.append(RunErrorEvent(message=message, code=code))
        return events

    def _end_run(
        self, stop_reason: str, provider_reason: str, usage: list[TokenUsage] | None
    ) -> list[Event]:
        """Close open messages and end the run with RUN_FINISHED (the backend stamps
        the run's ids)."""
        events = self._close_messages()
        self._ended = True
        events.append(
            RunFinishedEvent(
                thread_id="",
                run_id="",
                result={"stopReason": stop_reason, "providerStopReason": provider_reason},
                usage=usage,
            )
        )
        return events
