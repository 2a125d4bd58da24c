"""One run's event stream, as :class:`~toolrelay.backends.AguiHttpBackend` reads it.

:class:`RunStream` turns the SSE events of a response into AG-UI events: each
``data`` is bounded (``max_event_bytes``), decoded straight from its bytes with
msgspec's typed decoder (:func:`~toolrelay.protocol.decode_event` only when that
fails), and yielded; it remembers whether the run said it ended, and the last event
id, for what follows.

Reconnecting: a stream that breaks mid-run (``StreamDroppedError``) after the server
sent event ids (``id:``), from a server that said it resumes (the response header
``Toolrelay-Resume: last-event-id``, or ``resume="ids"``), is resumed, not restarted:
the same POST goes again with ``Last-Event-ID`` set to the last id received, within
the ``reconnect`` policy's attempts and seconds, each attempt reported like a retry
(:class:`~toolrelay.RunRetrying` with ``resume_from``). A server that resumes
sends, under that same id, what it had sent after it, so the part of a message or call
cut in the middle may come again whole; :class:`_Replay` drops what was already
delivered (equal events, a repeated ``RUN_STARTED``, the text and argument characters
already yielded) until the ids move on. A stream with no ids, a run that ended, or a
server that answers the reconnection with anything but an event stream (toolrelay's
own server answers 204 when the position has no open run, 416 when it does not know
it) fails the run with the original drop, as without reconnecting. A stream that had
not started (no response yet) is the retry policy's, never resumed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final

import anyio
import msgspec

from toolrelay._errors import LimitExceededError, RemoteProtocolError, StreamDroppedError
from toolrelay.backends._base import RetryNotice, current_run_settings
from toolrelay.backends._readers import SseEvent, SseReader
from toolrelay.backends._retry import RetryPolicy
from toolrelay.backends._transport import map_transport_errors
from toolrelay.protocol import (
    Event,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    UnknownEvent,
    decode_event,
)
from toolrelay.protocol._codec import decode_known_event

__all__ = ("RunEvents", "RunStream")

_RUN_ENDS: Final = frozenset((RunFinishedEvent, RunErrorEvent))
_MAX_EVENT_ID = 256  # the longest SSE id sent back as Last-Event-ID
_MAX_REPLAY = 4096  # events (other than deltas) kept to reconcile a resumed stream

logger = logging.getLogger("toolrelay.backends")


class RunEvents:
    """A run's decoded events, one by one (``async for``) or, for the engine, a read's
    events at once (:meth:`batches`); one way per stream."""

    __slots__ = ("_iterator", "_run", "_way")

    def __init__(self, run: RunStream) -> None:
        self._run = run
        self._iterator: AsyncGenerator[Any, None] | None = None
        self._way: Callable[[], AsyncGenerator[Any, None]] | None = None

    def __aiter__(self) -> AsyncGenerator[Event | UnknownEvent, None]:
        return self._start(self._run.events)

    async def __anext__(self) -> Event | UnknownEvent:
        event: Event | UnknownEvent = await self._start(self._run.events).__anext__()
        return event

    def batches(self) -> AsyncGenerator[list[Event | UnknownEvent], None]:
        """Each read's decoded events in one list, as they come."""
        return self._start(self._run.batches)

    def _start(self, iterate: Callable[[], AsyncGenerator[Any, None]]) -> AsyncGenerator[Any, None]:
        if self._iterator is None:
            self._iterator = iterate()
            self._way = iterate
        elif self._way != iterate:
            raise RuntimeError("a run's events are read one way: one by one or by reads")
        return self._iterator

    async def aclose(self) -> None:
        if self._iterator is not None:
            await self._iterator.aclose()


class RunStream:
    """Decodes one run's SSE events, remembers whether the run said it ended, and
    resumes the stream after a drop (see the module docstring, "Reconnecting")."""

    def __init__(
        self,
        sse_events: SseReader,
        max_event_bytes: int,
        policy: RetryPolicy,
        reopen: Callable[[str], Awaitable[SseReader]],
    ) -> None:
        self.sse_events = sse_events
        self._max_event_bytes = max_event_bytes
        self._policy = policy
        self._reopen = reopen
        #: RUN_FINISHED or RUN_ERROR was yielded.
        self.ended = False
        self._run_id: str | None = None
        # What was yielded under the last id: a resumed stream sends it again.
        self._last_id = ""
        self._since = _Delivered()
        self._replay: _Replay | None = None  # after a reconnect, until the replay is past
        self._attempt = 0  # reconnections since the last new id
        self._waited = 0.0

    async def events(self) -> AsyncGenerator[Event | UnknownEvent, None]:
        async with contextlib.aclosing(self.batches()) as batches:
            async for events in batches:
                for event in events:
                    yield event

    async def batches(self) -> AsyncGenerator[list[Event | UnknownEvent], None]:
        """Each read's decoded events in one list (never an empty one), as they come."""
        max_bytes = self._max_event_bytes
        run_ends = _RUN_ENDS
        event: Event | UnknownEvent
        while True:
            try:
                with map_transport_errors():
                    reader = self.sse_events
                    while True:
                        # A read's events at once (one await per read, not per event),
                        # and the read awaited here when the body passes it on as it
                        # came: no coroutine of the reader's or the body's between.
                        direct = reader.direct
                        if direct is not None:
                            try:
                                chunk = await direct.__anext__()
                            except StopAsyncIteration:
                                reader.finished()
                                break
                            data = reader.one(chunk)
                            if data is None:
                                batch = reader.take(chunk)
                            elif self._last_id or reader.event_id or self._replay is not None:
                                batch = [SseEvent("message", data, reader.event_id)]
                            else:
                                # A read of one event, on a stream with no ids (a server
                                # flushing event by event): the loop below, for it alone.
                                event = _decoded(data, max_bytes)
                                event_type = type(event)
                                if event_type in run_ends:
                                    self.ended = True
                                elif event_type is RunStartedEvent:
                                    self._run_id = event.run_id  # type: ignore[union-attr]
                                yield [event]
                                continue
                        else:
                            batch = await reader.batch()
                            if not batch:
                                break
                        events: list[Event | UnknownEvent] = []
                        try:
                            for sse in batch:
                                data = sse.data
                                if not data:
                                    continue  # no data: a named ping, an id, a retry
                                event = _decoded(data, max_bytes)
                                if self._replay is not None:
                                    kept = self._replay.admit(sse.id, event)
                                    if kept is None:
                                        continue
                                    event = kept
                                    if not self._replay.active:
                                        self._replay = None
                                event_type = type(event)
                                if event_type in run_ends:
                                    self.ended = True
                                elif event_type is RunStartedEvent:
                                    self._run_id = event.run_id  # type: ignore[union-attr]
                                if sse.id != self._last_id:
                                    self._last_id = sse.id
                                    self._since.clear()
                                    if self._attempt:  # progress: the next drop starts afresh
                                        self._attempt = 0
                                        self._waited = 0.0
                                elif sse.id:
                                    self._since.add(event)
                                events.append(event)
                        except Exception:
                            # What the read held before the bad event comes first, as
                            # it would have event after event.
                            if events:
                                yield events
                            raise
                        if events:
                            yield events
                return
            except StreamDroppedError as dropped:
                if self.ended or not _resumable(self._last_id) or self._since.overflowed:
                    raise
                self.sse_events = await self._resume(dropped)
                self._replay = _Replay(self._last_id, self._since, self._run_id)

    async def _resume(self, dropped: StreamDroppedError) -> SseReader:
        """The stream reopened after the last id, within the policy; raises ``dropped``
        when it cannot be."""
        error: RemoteProtocolError = dropped
        while True:
            self._attempt += 1
            delay = self._policy.delay(error, self._attempt, self._waited)
            if delay is None:
                raise dropped from (None if error is dropped else error)
            self._announce(error, delay)
            await anyio.sleep(delay)
            self._waited += delay
            try:
                return await self._reopen(self._last_id)
            except RemoteProtocolError as refused:
                if not self._policy.retries(refused):
                    # The server cannot resume (no such position, 404, not a stream):
                    # the run fails as it would have without reconnecting.
                    logger.info("reconnect refused: %s", refused.message)
                    raise dropped from refused
                error = refused

    def _announce(self, error: RemoteProtocolError, delay: float) -> None:
        logger.info(
            "stream dropped (%s); reconnect %d after id %r in %.2f s",
            error.message,
            self._attempt,
            self._last_id,
            delay,
        )
        settings = current_run_settings()
        if settings is not None and settings.on_retry is not None:
            settings.on_retry(
                RetryNotice(
                    attempt=self._attempt,
                    delay=delay,
                    reason=error.message,
                    code=error.code,
                    resume_from=self._last_id,
                )
            )


def _decoded(data: bytes, max_bytes: int) -> Event | UnknownEvent:
    """One SSE event's data as an AG-UI event: msgspec's typed decoder, and
    :func:`decode_event` only when that raises (an unknown type, snake_case, a lone
    surrogate, or the typed error: deep nesting and bad UTF-8 included)."""
    if len(data) > max_bytes:
        raise LimitExceededError("max_event_bytes", max_bytes, f"an SSE event of {len(data)} bytes")
    try:
        return decode_known_event(data)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return decode_event(data)


def _resumable(last_id: str) -> bool:
    """Whether ``last_id`` can be sent back as ``Last-Event-ID``: one was received, and
    it is short printable ASCII (a header value httpx sends as it is)."""
    return 0 < len(last_id) <= _MAX_EVENT_ID and last_id.isascii() and last_id.isprintable()


class _Delivered:
    """What a stream yielded under one event id: the characters of each message's text
    and each call's arguments, and the other events (at most :data:`_MAX_REPLAY`; past
    that the position is not resumable)."""

    __slots__ = ("chars", "events", "overflowed")

    def __init__(self) -> None:
        self.chars: dict[tuple[type, str], int] = {}
        self.events: list[Event | UnknownEvent] = []
        self.overflowed = False

    def clear(self) -> None:
        if self.chars:
            self.chars.clear()
        if self.events:
            self.events.clear()
        self.overflowed = False

    def add(self, event: Event | UnknownEvent) -> None:
        if isinstance(event, TextMessageContentEvent):
            key: tuple[type, str] = (TextMessageContentEvent, event.message_id)
            self.chars[key] = self.chars.get(key, 0) + len(event.delta)
        elif isinstance(event, ToolCallArgsEvent):
            key = (ToolCallArgsEvent, event.tool_call_id)
            self.chars[key] = self.chars.get(key, 0) + len(event.delta)
        elif len(self.events) < _MAX_REPLAY:
            self.events.append(event)
        else:
            self.overflowed = True


class _Replay:
    """Reconciles a resumed stream with what the broken one already delivered.

    A server resuming after id ``X`` sends again what it had sent after ``X`` under
    the same id: the rest of a unit (message, call) cut in the middle is resent whole,
    and text that went out live before its record may come back as the record's one
    ``TEXT_MESSAGE_CONTENT``. So, while the resumed stream's ids are still ``X``: an
    event equal to one delivered is dropped, text and arguments already delivered are
    cut from their deltas, and a repeated ``RUN_STARTED`` of the run is dropped. The
    first event with another id ends the replay: from there on, everything is new.
    """

    def __init__(self, last_id: str, delivered: _Delivered, run_id: str | None) -> None:
        self._last_id = last_id
        self._events = list(delivered.events)
        self._sent = dict(delivered.chars)
        self._run_id = run_id
        self.active = True

    def admit(self, event_id: str, event: Event | UnknownEvent) -> Event | UnknownEvent | None:
        """``event`` as the engine gets it (``None``: already delivered)."""
        if event_id != self._last_id:
            self.active = False
            return event
        if isinstance(event, RunStartedEvent) and event.run_id == self._run_id:
            return None
        if isinstance(event, TextMessageContentEvent | ToolCallArgsEvent):
            unit = (
                event.message_id
                if isinstance(event, TextMessageContentEvent)
                else event.tool_call_id
            )
            key = (type(event), unit)
            sent = self._sent.get(key, 0)
            if sent <= 0:
                return event
            self._sent[key] = sent - len(event.delta)
            if len(event.delta) <= sent:
                return None
            return msgspec.structs.replace(event, delta=event.delta[sent:])
        if event in self._events:
            self._events.remove(event)
            return None
        return event
