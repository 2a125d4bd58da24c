"""AG-UI over HTTP and Server-Sent Events: the client side of an AG-UI agent server.

Theory of operation
-------------------
One run is one HTTP request. :meth:`AguiHttpBackend.run` POSTs the ``RunAgentInput``
(camelCase JSON, ``Accept: text/event-stream``) and reads the response with our own
SSE reader over a body we decode ourselves (:mod:`toolrelay.backends._wire`)::

    POST url  --RunAgentInput-->  (429/503, reset before the answer: retry, RetryPolicy)
       status 2xx?  Content-Type text/event-stream?
       -> inflate gzip/deflate in 64 KiB steps -> drop a BOM, check UTF-8
       -> bound each event block on decoded bytes -> SseReader
       -> for each SSE event: size <= max_event_bytes?  decode_event(data)  -> yield

(``decode_event`` with its fast path inlined: a typed msgspec decode, and
``decode_event`` itself only when that fails.) The bounds are the run's
:class:`~toolrelay.core.Limits`: the driving engine's (see
:class:`~toolrelay.backends.RunSettings`), else the backend's own.

Everything that can go wrong on the wire ends as a typed
:class:`~toolrelay.errors.RemoteProtocolError`, which the engine turns into the turn's
terminal reason, keeping every message already received (promise 7):

=====================================  ====================  ====================
what happened                          error                 ``reason.code``
=====================================  ====================  ====================
connection refused, DNS failure,       ConnectError          ``connect_error``
connect timeout, bad URL scheme
no byte within the read timeout        ReadTimeoutError      ``read_timeout``
connection broken mid-stream           StreamDroppedError    ``stream_dropped``
(incomplete chunked body, reset)
non-2xx status (with a bounded         HTTPStatusError       the status
excerpt of the body; a redirect
names its target)
a response that is not an event        ContentTypeError      ``content_type``
stream
an SSE event whose decoded data is     LimitExceededError    ``max_event_bytes``
larger than ``max_event_bytes``
the run outlived ``run_seconds``       DeadlineError         ``run_seconds``
a ``data:`` that is not JSON           MalformedEventError
JSON nested too deeply                 MalformedEventError   ``nesting_too_deep``
bytes that are not UTF-8               MalformedEventError   ``invalid_utf8``
an encoding other than gzip/deflate,   MalformedEventError   ``content_encoding``
or a corrupt one
a ``data:`` that is not a valid event  InvalidEventError
any other transport failure            TransportError        ``transport_error``
=====================================  ====================  ====================

The errors live in :mod:`toolrelay.errors`. httpx exceptions are translated in one
place, :func:`map_transport_errors`, and chained (``raise ... from exc``), as httpx's own
``map_httpcore_exceptions`` does.

Tolerated, as the SSE specification asks: a leading byte order mark, comments
(``: keep-alive``), ``event:`` names (the data is decoded whatever the name),
``retry:`` fields (ignored), multi-line data
(joined with newlines, which JSON reads as whitespace) and events with empty data
(skipped). An unknown event ``type`` passes through as
:class:`~toolrelay.protocol.UnknownEvent`; a lone surrogate escape in a string costs
one character (U+FFFD), not the event.

Limits: the size of each event's data is checked before it is decoded, and a memory
bound also applies while the bytes stream: an event block larger than
``2 * max_event_bytes + 64 KiB`` of decoded bytes (data, field names and comments
together) is refused before it is complete, whatever the compression ratio. Events per
run and argument bytes are bounded by the processor; time by ``Limits.run_seconds``
(here) and ``turn_seconds`` (the engine). docs/limits.md lists them all.

Reconnecting: a stream that breaks mid-run (``StreamDroppedError``) after the server
sent event ids (``id:``), from a server that said it resumes (the response header
``Toolrelay-Resume: last-event-id``, or ``resume="ids"``), is resumed, not restarted:
the same POST goes again with ``Last-Event-ID`` set to the last id received, within
the ``reconnect`` policy's attempts and seconds, each attempt reported like a retry
(:class:`~toolrelay.runtime.RunRetrying` with ``resume_from``). A server that resumes
sends, under that same id, what it had sent after it, so the part of a message or call
cut in the middle may come again whole; :class:`_Replay` drops what was already
delivered (equal events, a repeated ``RUN_STARTED``, the text and argument characters
already yielded) until the ids move on. A stream with no ids, a run that ended, or a
server that answers the reconnection with anything but an event stream (toolrelay's
own server answers 204 when the position has no open run, 416 when it does not know
it) fails the run with the original drop, as without reconnecting. A stream that had
not started (no response yet) is the retry policy's, never resumed.

Cancellation: leaving :meth:`AguiHttpBackend.run`'s context (the engine does, on
RUN_FINISHED, on cancel and on error) closes the response at once, and with it the
connection of an unfinished stream, so the server sees the client go away.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeAlias

import anyio
import httpx
import msgspec
from httpx_sse import SSEError

from toolrelay.backends._base import (
    EventStream,
    RetryNotice,
    ThreadKey,
    current_run_settings,
    effective_limits,
)
from toolrelay.backends._propagation import inject_trace_context
from toolrelay.backends._retry import NO_RETRY, RetryPolicy, parse_retry_after, start_with_retries
from toolrelay.backends._wire import (
    ACCEPT_ENCODING,
    SseEvent,
    SseReader,
    body_excerpt,
    bound_body,
    run_deadline,
)
from toolrelay.core import Limits
from toolrelay.errors import (
    ConnectError,
    ContentTypeError,
    DeadlineError,
    HTTPStatusError,
    LimitExceededError,
    MalformedEventError,
    ReadTimeoutError,
    RemoteProtocolError,
    StreamDroppedError,
    TransportError,
)
from toolrelay.protocol import (
    Event,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    UnknownEvent,
    decode_event,
    encode,
)
from toolrelay.protocol._codec import decode_known_event

__all__ = (
    "DEFAULT_TIMEOUT",
    "AguiHttpBackend",
    "AuthHook",
    "RunAllocator",
    "map_transport_errors",
)

_RUN_ENDS: Final = frozenset((RunFinishedEvent, RunErrorEvent))

#: Seconds to connect, and seconds without a byte before a stream counts as stalled.
DEFAULT_TIMEOUT: Final = httpx.Timeout(60.0, connect=10.0)

#: What ``auth=`` accepts: an :class:`httpx.Auth` (token refresh flows, digest...) or a
#: function that takes the request and returns it with credentials added.
AuthHook: TypeAlias = httpx.Auth | Callable[[httpx.Request], httpx.Request]

#: Asks the server for a run id before a run starts (for servers that allocate runs).
RunAllocator: TypeAlias = Callable[[ThreadKey], Awaitable[str | None]]

_SSE_MEDIA_TYPE = "text/event-stream"
_DRAIN_SECONDS = 0.25  # to read the rest of a finished run's body
#: The response header by which a server says it resumes a POST sent again with
#: ``Last-Event-ID`` (see "Reconnecting" above).
RESUME_HEADER: Final = "toolrelay-resume"
_MAX_EVENT_ID = 256  # the longest SSE id sent back as Last-Event-ID
_MAX_REPLAY = 4096  # events (other than deltas) kept to reconcile a resumed stream

logger = logging.getLogger("toolrelay.backends")


@contextlib.contextmanager
def map_transport_errors() -> Iterator[None]:
    """Translate httpx and httpx-sse exceptions into toolrelay's typed errors.

    The one boundary where third-party transport exceptions are caught; each is
    re-raised as a :class:`~toolrelay.errors.TransportError` subclass (or, for a broken
    SSE framing, :class:`~toolrelay.errors.MalformedEventError`) chained to the original.
    Anything else passes through untouched, cancellation included.

    Raises:
        ConnectError: The server could not be reached (refused, DNS, connect timeout,
            no pooled connection in time, an unsupported URL scheme).
        ReadTimeoutError: No byte arrived within the read timeout.
        StreamDroppedError: The connection broke while the response was streaming.
        MalformedEventError: httpx-sse rejected the stream, or its bytes could not be
            decoded.
        TransportError: Any other transport failure (a write error, a proxy error...).
    """
    try:
        yield
    except SSEError as exc:  # before httpx.TransportError, which it subclasses
        raise MalformedEventError(f"malformed SSE stream: {exc}", code="malformed_sse") from exc
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise ConnectError(
            f"cannot connect to the agent server: {_describe(exc)}", code="connect_error"
        ) from exc
    except httpx.UnsupportedProtocol as exc:
        raise ConnectError(f"cannot connect: {_describe(exc)}", code="connect_error") from exc
    except httpx.ReadTimeout as exc:
        raise ReadTimeoutError(
            "no data from the agent server within the read timeout", code="read_timeout"
        ) from exc
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.CloseError) as exc:
        raise StreamDroppedError(
            f"the connection to the agent server broke: {_describe(exc)}", code="stream_dropped"
        ) from exc
    except httpx.DecodingError as exc:
        raise MalformedEventError(
            f"the response body cannot be decoded: {_describe(exc)}", code="malformed_sse"
        ) from exc
    except httpx.HTTPError as exc:
        raise TransportError(
            f"transport failure: {_describe(exc)}", code="transport_error"
        ) from exc


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AguiHttpBackend:
    """An AG-UI agent server reached over HTTP with Server-Sent Events.

    One pooled :class:`httpx.AsyncClient` serves every run. Use the backend as an async
    context manager, or call :meth:`aclose`, to close the client it created::

        async with AguiHttpBackend("http://127.0.0.1:8000/agent") as backend:
            async with Engine(backend, tools=registry) as engine:
                turn = await engine.run_turn("thread-1", "What are the secret numbers?")

    Works on asyncio and trio (httpx picks the running library).

    Args:
        url: The agent's endpoint (a run is a POST to it).
        client: A client to use instead of creating one; the caller keeps owning it
            (:meth:`aclose` leaves it open). Its base URL, headers, auth and timeout
            apply unless overridden here.
        transport: The transport of the client created here; an
            :class:`httpx.MockTransport` runs the real httpx and httpx-sse code
            against a handler. Ignored with ``client``.
        headers: Static headers sent with every run (for instance ``X-Api-Key``).
        auth: Credentials per request: an :class:`httpx.Auth` or a function adding
            them to the request.
        timeout: Connect and read timeouts (an :class:`httpx.Timeout`, or seconds for
            all of them). Default: :data:`DEFAULT_TIMEOUT` for a client created here,
            the client's own for an injected one. The read timeout bounds the silence
            between two bytes, so SSE keep-alive comments keep a slow run alive.
        limits: The bounds used when no engine drives the run: an
            :class:`~toolrelay.Engine` hands the backend its own for each run (see
            :class:`~toolrelay.backends.RunSettings`); an engine given none adopts
            these. ``max_event_bytes`` is checked here on decoded bytes, per SSE event,
            and ``run_seconds`` bounds each run's stream.
        retry: How a run that could not start (HTTP 429 or 503, the connection reset
            before the answer) is retried; :data:`~toolrelay.backends.NO_RETRY` turns
            it off. A run whose response was accepted is never retried.
        reconnect: How a run whose stream broke mid-run (``StreamDroppedError``) is
            resumed: the same POST again with ``Last-Event-ID``, the id of the last
            event received, within the policy's attempts and seconds (counted afresh
            once the resumed stream moves past that id); :data:`~toolrelay.backends.NO_RETRY`
            turns it off. A server that sent no id, or refuses the resumption, fails the
            run as before.
        resume: Which servers are asked to resume: ``"declared"`` (the default) only
            one whose response said it can, with the header ``Toolrelay-Resume:
            last-event-id`` (toolrelay's server does), since a server that ignored
            ``Last-Event-ID`` would start the run again; ``"ids"`` any server that sent
            event ids, for servers known to resume a POST that carries it.
        allocate_run: For servers that allocate run ids before a run: called by
            :meth:`allocate_run`. Without it the client chooses the run id.
    """

    def __init__(
        self,
        url: str | httpx.URL,
        *,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        auth: AuthHook | None = None,
        timeout: httpx.Timeout | float | None = None,
        limits: Limits | None = None,
        allocate_run: RunAllocator | None = None,
        retry: RetryPolicy | None = None,
        reconnect: RetryPolicy | None = None,
        resume: Literal["declared", "ids"] = "declared",
    ) -> None:
        if resume not in ("declared", "ids"):
            raise ValueError(f"resume must be 'declared' or 'ids', not {resume!r}")
        self.url = httpx.URL(url) if isinstance(url, str) else url
        self.limits = limits if limits is not None else Limits()
        self.retry = retry if retry is not None else RetryPolicy()
        self.reconnect = reconnect if reconnect is not None else RetryPolicy()
        self.resume = resume
        self._headers = dict(headers or {})
        self._auth = auth
        self._allocator = allocate_run
        self._owns_client = client is None
        if client is None:
            client = httpx.AsyncClient(
                transport=transport,
                timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
            )
            self._timeout: httpx.Timeout | float | None = None  # the client's, set above
        else:
            self._timeout = timeout
        self._client = client

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client runs are sent with."""
        return self._client

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client, if this backend created it. Idempotent."""
        if self._owns_client:
            await self._client.aclose()

    # -- the AgentBackend protocol ----------------------------------------------------

    async def allocate_run(self, key: ThreadKey) -> str | None:
        """The run id for the next run of ``key``'s thread.

        Returns:
            ``None`` (AG-UI servers do not allocate runs: the engine makes the id),
            unless an ``allocate_run`` callback was given, whose answer is returned.

        Raises:
            TransportError: The callback failed on the transport (translated by
                :func:`map_transport_errors`); other exceptions of the callback
                propagate as they are.
        """
        if self._allocator is None:
            return None
        with map_transport_errors():
            return await self._allocator(key)

    @contextlib.asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        """Start a run: POST ``run_input`` and give its decoded events.

        Leaving the context after the run ended (RUN_FINISHED or RUN_ERROR, or the
        server closed the stream) first reads what is left of the body, for at most a
        quarter of a second, discarding it: a server closes the stream right after its
        last event, so the connection goes back to the pool. Leaving it any other way
        (cancellation, an error) closes the response, and with it the connection, at
        once.

        Raises:
            ConnectError, HTTPStatusError, ContentTypeError, TransportError: The run
                could not start; raised on entering the context.

        The iterator raises, while streaming, the errors in the module's table:
        :class:`~toolrelay.errors.StreamDroppedError`,
        :class:`~toolrelay.errors.ReadTimeoutError`,
        :class:`~toolrelay.errors.LimitExceededError`,
        :class:`~toolrelay.errors.MalformedEventError` and
        :class:`~toolrelay.errors.InvalidEventError`. It ends quietly when the server
        closes the stream; deciding whether that was early is the processor's job.
        """
        limits = effective_limits(self.limits)
        body = encode(run_input)
        headers = {
            "Accept-Encoding": ACCEPT_ENCODING,
            **self._headers,
            "Accept": _SSE_MEDIA_TYPE,
            "Cache-Control": "no-store",
            "Content-Type": "application/json",
        }
        inject_trace_context(headers)  # W3C traceparent: the run's span, when traced
        auth = self._auth if self._auth is not None else httpx.USE_CLIENT_DEFAULT
        timeout = self._timeout if self._timeout is not None else httpx.USE_CLIENT_DEFAULT

        async def start(
            stack: contextlib.AsyncExitStack, last_event_id: str | None = None
        ) -> httpx.Response:
            sent = headers if last_event_id is None else {**headers, "Last-Event-ID": last_event_id}
            async with contextlib.AsyncExitStack() as attempt:
                with map_transport_errors():
                    request = self._client.stream(
                        "POST",
                        str(self.url),
                        content=body,
                        headers=sent,
                        auth=auth,
                        timeout=timeout,
                    )
                    response = await attempt.enter_async_context(request)
                    await _check_response(response, limits.max_event_bytes)
                stack.push_async_exit(attempt.pop_all())
                return response

        deadline = run_deadline(limits.run_seconds)
        async with contextlib.AsyncExitStack() as stack:
            with anyio.CancelScope(deadline=deadline) as timer:
                response = await start_with_retries(self.retry, lambda: start(stack))

                async def reopen(last_event_id: str) -> SseReader:
                    resumed = await start(stack, last_event_id)
                    assert isinstance(resumed.stream, httpx.AsyncByteStream)
                    return SseReader(resumed.stream)

                assert isinstance(response.stream, httpx.AsyncByteStream)
                resumable = self.resume == "ids" or (
                    response.headers.get(RESUME_HEADER, "").strip().lower() == "last-event-id"
                )
                run = _RunStream(
                    SseReader(response.stream),
                    limits.max_event_bytes,
                    self.reconnect if resumable else NO_RETRY,
                    reopen,
                )
                events = _Events(run)
                try:
                    yield events
                    if run.ended:
                        await _drain(run.sse_events)
                finally:
                    await events.aclose()
            if timer.cancelled_caught:
                assert limits.run_seconds is not None
                raise DeadlineError(limits.run_seconds)


class _Events:
    """A run's decoded events, one by one (``async for``) or, for the engine, a read's
    events at once (:meth:`batches`); one way per stream."""

    __slots__ = ("_iterator", "_run", "_way")

    def __init__(self, run: _RunStream) -> None:
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


class _RunStream:
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
        while True:
            try:
                with map_transport_errors():
                    # A read's events at once (one await per read, not per event).
                    while batch := await self.sse_events.batch():
                        events: list[Event | UnknownEvent] = []
                        try:
                            self._decode(batch, events)
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

    def _decode(self, batch: list[SseEvent], events: list[Event | UnknownEvent]) -> None:
        """Append the decoded events of one read's SSE events to ``events``."""
        # Once per event, so written out: decode_event's fast path is called inline.
        max_bytes = self._max_event_bytes
        decode, run_ends = decode_known_event, _RUN_ENDS
        append = events.append
        for sse in batch:
            data = sse.data
            if not data:
                continue  # an event with no data: a named ping, an id, a retry
            if len(data) > max_bytes:
                raise LimitExceededError(
                    "max_event_bytes",
                    max_bytes,
                    f"an SSE event of {len(data)} bytes",
                )
            try:
                event: Event | UnknownEvent = decode(data)
            except (msgspec.MsgspecError, ValueError, RecursionError):
                # Unknown type, snake_case, a lone surrogate, or the typed
                # error (deep nesting and bad UTF-8 included).
                event = decode_event(data)
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
            append(event)

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


async def _drain(sse_events: SseReader) -> None:
    """Read the rest of a finished run's stream, boundedly, and discard it.

    Exhausting the stream lets httpx return the connection to its pool. Anything
    that goes wrong here is ignored: the run is over.
    """
    late = 0
    with anyio.move_on_after(_DRAIN_SECONDS):
        try:
            async for sse in sse_events:
                late += bool(sse.data)
        except (httpx.HTTPError, RemoteProtocolError):
            pass
    if late:
        logger.debug("ignored %d event(s) after the end of the run", late)


async def _check_response(response: httpx.Response, max_event_bytes: int) -> None:
    """Refuse a response that is not a 2xx event stream (before any event is read);
    bound the body of the one that is (see :func:`~toolrelay.backends._wire.bound_body`)."""
    if response.is_redirect:
        location = response.headers.get("location", "")
        await body_excerpt(response)  # read (boundedly), so the connection is reused
        raise HTTPStatusError(
            response.status_code,
            f"the server redirects to {location!r}; redirects are not followed, "
            "give the final URL of the agent's endpoint",
        )
    if not response.is_success:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        _, excerpt = await body_excerpt(response)
        raise HTTPStatusError(response.status_code, excerpt, retry_after=retry_after)
    content_type = response.headers.get("content-type", "")
    media_type, sep, parameters = content_type.partition(";")
    if media_type.strip().lower() == _SSE_MEDIA_TYPE:
        # httpx-sse compares case-sensitively; our check is the liberal one.
        response.headers["content-type"] = _SSE_MEDIA_TYPE + sep + parameters
        bound_body(response, record="sse", max_record_bytes=max_event_bytes)
    else:
        _, excerpt = await body_excerpt(response)
        shown = repr(content_type) if content_type else "none"
        suffix = f"; its body begins: {excerpt}" if excerpt else ""
        raise ContentTypeError(
            f"the server answered with Content-Type {shown}, not an event stream "
            f"({_SSE_MEDIA_TYPE}): is the URL the agent's AG-UI endpoint?{suffix}",
            code="content_type",
        )
