"""AG-UI over HTTP and Server-Sent Events: the client side of an AG-UI agent server.

Theory of operation
-------------------
One run is one HTTP request. :meth:`AguiHttpBackend.run` POSTs the ``RunAgentInput``
(camelCase JSON, ``Accept: text/event-stream``) and reads the response with our own
SSE reader (:mod:`toolrelay.backends._readers`) over a body we decode ourselves
(:mod:`toolrelay.backends._wire`)::

    POST url  --RunAgentInput-->  (429/503, reset before the answer: retry, RetryPolicy)
       status 2xx?  Content-Type text/event-stream?
       -> inflate gzip/deflate in 64 KiB steps -> drop a BOM, check UTF-8
       -> bound each event block on decoded bytes -> SseReader
       -> for each SSE event: size <= max_event_bytes?  decode_event(data)  -> yield

(``decode_event`` with its fast path inlined: a typed msgspec decode, and
``decode_event`` itself only when that fails.) The bounds are the run's
:class:`~toolrelay.Limits`: the driving engine's (see
:class:`~toolrelay.backends.RunSettings`), else the backend's own.

Everything that can go wrong on the wire ends as a typed
:class:`~toolrelay.RemoteProtocolError`, which the engine turns into the turn's
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

The errors live in :mod:`toolrelay._errors`. httpx exceptions are translated in one
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

Reconnecting: a stream that breaks mid-run after the server sent event ids, from a
server that said it resumes, is resumed with ``Last-Event-ID`` rather than restarted
(:mod:`toolrelay.backends._agui_run` says how, and what a resumed stream may repeat).

Cancellation: leaving :meth:`AguiHttpBackend.run`'s context (the engine does, on
RUN_FINISHED, on cancel and on error) closes the response at once, and with it the
connection of an unfinished stream, so the server sees the client go away.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Final, Literal, TypeAlias

import anyio
import httpx

from toolrelay._core import Limits
from toolrelay._errors import ContentTypeError, DeadlineError, HTTPStatusError, RemoteProtocolError
from toolrelay.backends._agui_run import RunEvents, RunStream
from toolrelay.backends._base import ClosedOnExit, EventStream, ThreadKey, effective_limits
from toolrelay.backends._propagation import inject_trace_context
from toolrelay.backends._readers import SseReader
from toolrelay.backends._retry import NO_RETRY, RetryPolicy, parse_retry_after, start_with_retries
from toolrelay.backends._transport import map_transport_errors
from toolrelay.backends._wire import ACCEPT_ENCODING, body_excerpt, bound_body, run_deadline
from toolrelay.protocol import RunAgentInput, encode

__all__ = (
    "DEFAULT_TIMEOUT",
    "AguiHttpBackend",
    "AuthHook",
    "RunAllocator",
    "map_transport_errors",
)

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

logger = logging.getLogger("toolrelay.backends")


class AguiHttpBackend(ClosedOnExit):
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
        :class:`~toolrelay.StreamDroppedError`,
        :class:`~toolrelay.ReadTimeoutError`,
        :class:`~toolrelay.LimitExceededError`,
        :class:`~toolrelay.MalformedEventError` and
        :class:`~toolrelay.InvalidEventError`. It ends quietly when the server
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
                run = RunStream(
                    SseReader(response.stream),
                    limits.max_event_bytes,
                    self.reconnect if resumable else NO_RETRY,
                    reopen,
                )
                events = RunEvents(run)
                try:
                    yield events
                    if run.ended:
                        await _drain(run.sse_events)
                finally:
                    await events.aclose()
            if timer.cancelled_caught:
                assert limits.run_seconds is not None
                raise DeadlineError(limits.run_seconds)


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
