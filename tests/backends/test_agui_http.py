"""AguiHttpBackend against httpx.MockTransport: the real httpx and httpx-sse code runs,
only the socket is replaced. Every failure class, and the SSE edge cases."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable
from typing import Any

import httpx
import msgspec
import pytest
from httpx_sse import SSEError

from toolrelay import (
    ConnectError,
    ContentTypeError,
    Engine,
    HTTPStatusError,
    InvalidEventError,
    LimitExceededError,
    Limits,
    MalformedEventError,
    ReadTimeoutError,
    RemoteProtocolError,
    RunStatus,
    StreamDroppedError,
    TextMessage,
    ThreadKey,
    ToolCallStatus,
    ToolRegistry,
    TransportError,
    tool,
)
from toolrelay._reasons import ReasonKind
from toolrelay.backends import NO_RETRY, AguiHttpBackend, map_transport_errors
from toolrelay.demo import DEMO_TOOLS, plan_reply
from toolrelay.protocol import (
    AssistantMessage,
    Event,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolMessage,
    UnknownEvent,
    UserMessage,
    decode_run_input,
    encode_event,
)
from toolrelay.testing import run_finished, run_started, text, tool_call

pytestmark = pytest.mark.anyio

# httpx's response iterators are async generators that wrap each other; when a stream is
# left before its end (an error, an early exit) the inner ones are dropped suspended, and
# trio warns as they are garbage collected (encode/httpx#3686). The backend drains a
# finished run's stream so the normal path never warns; the early-exit tests allow it.
HTTPX_GC_ON_TRIO = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx|httpcore)\S*' was garbage collected:ResourceWarning"
)

URL = "http://agent.test/run"
KEY = ThreadKey("t1")
SSE = {"content-type": "text/event-stream"}


def run_input(run_id: str = "r1", **kwargs: Any) -> RunAgentInput:
    return RunAgentInput(
        thread_id="t1",
        run_id=run_id,
        messages=[UserMessage(id="u1", content="hi")],
        **kwargs,
    )


def frames(*events: Event | Iterable[Event]) -> bytes:
    """Events as SSE frames (``data: <json>`` and a blank line each)."""
    out = bytearray()
    for part in events:
        for event in [part] if isinstance(part, msgspec.Struct) else part:
            out += b"data: " + encode_event(event) + b"\n\n"
    return bytes(out)


HELLO = frames(run_started("t1", "r1"), text("Hello there", id="m1"), run_finished("t1", "r1"))


class Chunks(httpx.AsyncByteStream):
    """A response body sent in the given pieces, then ``error`` raised, if any.

    Iterator classes, not async generators: see HTTPX_GC_ON_TRIO.
    """

    def __init__(self, *chunks: bytes, error: Exception | None = None) -> None:
        self.chunks = list(chunks)
        self.error = error
        self.sent = 0
        self.closed = False

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> bytes:
        if self.chunks:
            chunk = self.chunks.pop(0)
            self.sent += len(chunk)
            return chunk
        if self.error is not None:
            raise self.error
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closed = True


class Endless(httpx.AsyncByteStream):
    """A body that never ends: ``head``, then ``chunk`` forever (counts what was sent)."""

    def __init__(self, chunk: bytes, head: bytes = b"") -> None:
        self.chunk = chunk
        self.head = head
        self.sent = 0
        self.closed = False

    def __aiter__(self) -> Endless:
        return self

    async def __anext__(self) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            return head
        self.sent += len(self.chunk)
        return self.chunk

    async def aclose(self) -> None:
        self.closed = True


def backend_for(
    respond: Callable[[httpx.Request], httpx.Response], **kwargs: Any
) -> AguiHttpBackend:
    return AguiHttpBackend(URL, transport=httpx.MockTransport(respond), **kwargs)


def answer(
    body: bytes | httpx.AsyncByteStream,
    status: int = 200,
    content_type: str = "text/event-stream",
) -> Callable[[httpx.Request], httpx.Response]:
    """A handler answering every request with ``body``."""

    def respond(request: httpx.Request) -> httpx.Response:
        hdrs = {"content-type": content_type}
        if isinstance(body, bytes):
            return httpx.Response(status, headers=hdrs, content=body)
        return httpx.Response(status, headers=hdrs, stream=body)

    return respond


async def collect(backend: AguiHttpBackend, given: RunAgentInput | None = None) -> list[Any]:
    async with backend, backend.run(KEY, given or run_input()) as events:
        return [event async for event in events]


async def collect_until_error(backend: AguiHttpBackend) -> tuple[list[Any], Exception]:
    received: list[Any] = []
    with pytest.raises(RemoteProtocolError) as caught:
        async with backend, backend.run(KEY, run_input()) as events:
            async for event in events:
                received.append(event)  # noqa: PERF401 (keep what arrived before the error)
    return received, caught.value


# --- the request ---------------------------------------------------------------------------


async def test_run_posts_the_camelcase_run_input_and_asks_for_an_event_stream() -> None:
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers=SSE, content=HELLO)

    given = run_input(tools=list(DEMO_TOOLS.definitions()), forwarded_props={"a": 1})
    events = await collect(backend_for(respond), given)
    assert [type(e).__name__ for e in events][0] == "RunStartedEvent"
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == URL
    assert request.headers["accept"] == "text/event-stream"
    assert request.headers["content-type"] == "application/json"
    body = msgspec.json.decode(request.content)
    assert body["threadId"] == "t1" and body["runId"] == "r1"
    assert body["forwardedProps"] == {"a": 1}
    assert body["tools"][0]["name"] == "get_secret_number"
    assert decode_run_input(request.content) == given


async def test_static_headers_and_an_auth_function_reach_every_request() -> None:
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers=SSE, content=HELLO)

    def bearer(request: httpx.Request) -> httpx.Request:
        request.headers["Authorization"] = "Bearer s3cret"
        return request

    backend = backend_for(respond, headers={"X-Api-Key": "k1"}, auth=bearer)
    await collect(backend)
    assert seen[0].headers["x-api-key"] == "k1"
    assert seen[0].headers["authorization"] == "Bearer s3cret"


async def test_an_httpx_auth_flow_is_used() -> None:
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers=SSE, content=HELLO)

    await collect(backend_for(respond, auth=httpx.BasicAuth("ann", "pw")))
    assert seen[0].headers["authorization"].startswith("Basic ")


async def test_the_timeout_given_applies_to_an_injected_client() -> None:
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers=SSE, content=HELLO)

    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
        backend = AguiHttpBackend(URL, client=client, timeout=httpx.Timeout(3.0, connect=1.0))
        await collect(backend)
        assert not client.is_closed  # the caller owns an injected client
    assert seen[0].extensions["timeout"] == {"connect": 1.0, "read": 3.0, "write": 3.0, "pool": 3.0}


async def test_a_backend_closes_the_client_it_created() -> None:
    backend = backend_for(answer(HELLO))
    await collect(backend)
    assert backend.client.is_closed


async def test_allocate_run_is_none_unless_a_callback_allocates() -> None:
    assert await backend_for(answer(HELLO)).allocate_run(KEY) is None

    async def allocate(key: ThreadKey) -> str:
        return f"server-run-for-{key.thread_id}"

    backend = backend_for(answer(HELLO), allocate_run=allocate)
    assert await backend.allocate_run(KEY) == "server-run-for-t1"


async def test_an_allocation_callback_failing_on_the_transport_is_typed() -> None:
    async def allocate(key: ThreadKey) -> str:
        raise httpx.ConnectError("refused")

    with pytest.raises(ConnectError):
        await backend_for(answer(HELLO), allocate_run=allocate).allocate_run(KEY)


# --- SSE edge cases --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b": keep-alive\n\n" + HELLO + b": bye\n\n", id="comments"),
        pytest.param(HELLO.replace(b"data: ", b"event: message\ndata: "), id="event-names"),
        pytest.param(HELLO.replace(b"data: ", b"event: agui\ndata: "), id="custom-event-names"),
        pytest.param(b"retry: 3000\n\n" + HELLO, id="retry"),
        pytest.param(HELLO.replace(b"data: ", b"id: 7\ndata: "), id="ids"),
        pytest.param(b"data:\n\n" + HELLO + b"data:\n\n\n\n", id="empty-data-and-blank-lines"),
        pytest.param(HELLO.replace(b"\n", b"\r\n"), id="crlf"),
        pytest.param(HELLO.replace(b"\n", b"\r"), id="cr"),
        pytest.param(HELLO.replace(b"data: ", b"data:"), id="no-space-after-colon"),
        pytest.param(HELLO.replace(b'","', b'",\ndata: "'), id="multi-line-data"),
        pytest.param(b"event: ping\n\n" + HELLO, id="named-event-without-data"),
    ],
)
async def test_sse_framing_variants_decode_to_the_same_events(body: bytes) -> None:
    expected = await collect(backend_for(answer(HELLO)))
    assert await collect(backend_for(answer(body))) == expected


async def test_events_split_across_chunks_at_every_byte_decode_the_same() -> None:
    body = HELLO.replace(b"Hello there", "Héllo thérè ✓".encode())
    expected = await collect(backend_for(answer(body)))
    one_byte_at_a_time = Chunks(*(body[i : i + 1] for i in range(len(body))))
    assert await collect(backend_for(answer(one_byte_at_a_time))) == expected
    assert expected[2] == TextMessageContentEvent(message_id="m1", delta="Héllo thérè ✓")


@pytest.mark.parametrize(
    "content_type",
    [
        "text/event-stream; charset=utf-8",
        "Text/Event-Stream",
        "text/event-stream;charset=UTF-8",
        " text/event-stream ",
    ],
)
async def test_the_content_type_check_is_liberal(content_type: str) -> None:
    events = await collect(backend_for(answer(HELLO, content_type=content_type)))
    assert len(events) == 5


async def test_an_unknown_event_type_passes_through() -> None:
    body = HELLO.replace(b"data: ", b'data: {"type":"FROM_THE_FUTURE","x":1}\n\ndata: ', 1)
    events = await collect(backend_for(answer(body)))
    assert isinstance(events[0], UnknownEvent)
    assert events[0].type == "FROM_THE_FUTURE"
    assert events[0].raw == b'{"type":"FROM_THE_FUTURE","x":1}'


@HTTPX_GC_ON_TRIO
async def test_leaving_the_context_early_closes_the_response_stream() -> None:
    stream = Endless(b": still here\n\n", head=frames(run_started("t1", "r1")))
    async with backend_for(answer(stream)) as backend:
        async with backend.run(KEY, run_input()) as events:
            first = await events.__anext__()
            assert isinstance(first, RunStartedEvent)
    assert stream.closed


# --- failures: each typed, with its reason code ------------------------------------------------


async def test_a_non_2xx_status_is_an_http_status_error_with_a_body_excerpt() -> None:
    body = b'{"detail": "model   overloaded\n, retry later"}'
    backend = backend_for(answer(body, status=503, content_type="application/json"), retry=NO_RETRY)
    with pytest.raises(HTTPStatusError) as caught:
        await collect(backend)
    error = caught.value
    assert error.status_code == 503
    assert error.body_excerpt == '{"detail": "model overloaded , retry later"}'
    assert error.reason.kind is ReasonKind.TRANSPORT_ERROR
    assert error.reason.code == "503"


@HTTPX_GC_ON_TRIO
async def test_an_error_body_is_read_boundedly() -> None:
    stream = Endless(b"x" * 512)
    backend = backend_for(answer(stream, status=500, content_type="text/plain"))
    with pytest.raises(HTTPStatusError) as caught:
        await collect(backend)
    assert stream.sent <= 64 * 1024 + 512
    assert len(caught.value.body_excerpt) <= 303
    assert caught.value.body_excerpt.endswith("...")


@pytest.mark.parametrize(
    "headers",
    [{"content-type": "application/json"}, {"content-type": "text/html; charset=utf-8"}, {}],
)
async def test_a_response_that_is_not_an_event_stream_is_a_content_type_error(
    headers: dict[str, str],
) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, content=b"<html>login</html>")

    with pytest.raises(ContentTypeError) as caught:
        await collect(backend_for(respond))
    assert caught.value.reason.code == "content_type"
    assert "<html>login</html>" in str(caught.value)


@HTTPX_GC_ON_TRIO
async def test_a_data_payload_that_is_not_json_is_malformed() -> None:
    body = frames(run_started("t1", "r1")) + b"data: {oops\n\n" + HELLO
    received, error = await collect_until_error(backend_for(answer(body)))
    assert isinstance(error, MalformedEventError)
    assert len(received) == 1


@HTTPX_GC_ON_TRIO
async def test_a_known_event_with_a_bad_body_is_invalid() -> None:
    body = frames(run_started("t1", "r1")) + b'data: {"type":"TOOL_CALL_ARGS","toolCallId":"c"}\n\n'
    received, error = await collect_until_error(backend_for(answer(body)))
    assert isinstance(error, InvalidEventError)
    assert error.event_type == "TOOL_CALL_ARGS" and error.field == "$.delta"
    assert len(received) == 1


async def test_an_undecodable_body_is_malformed_sse() -> None:
    headers = {**SSE, "content-encoding": "gzip"}

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, content=b"not gzip at all")

    received, error = await collect_until_error(backend_for(respond))
    assert isinstance(error, MalformedEventError)
    assert error.reason.code == "malformed_sse"


async def test_a_gzipped_event_stream_is_read() -> None:
    headers = {**SSE, "content-encoding": "gzip"}

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, content=gzip.compress(HELLO))

    assert len(await collect(backend_for(respond))) == 5


@pytest.mark.parametrize(
    ("raised", "expected", "code"),
    [
        (
            httpx.RemoteProtocolError("incomplete chunked read"),
            StreamDroppedError,
            "stream_dropped",
        ),
        (httpx.ReadError("connection reset by peer"), StreamDroppedError, "stream_dropped"),
        (httpx.ReadTimeout("timed out"), ReadTimeoutError, "read_timeout"),
    ],
)
async def test_a_failure_mid_stream_is_typed_and_keeps_what_arrived(
    raised: Exception, expected: type[Exception], code: str
) -> None:
    stream = Chunks(frames(run_started("t1", "r1"), text("partial", id="m1")), error=raised)
    received, error = await collect_until_error(backend_for(answer(stream)))
    assert isinstance(error, expected)
    assert error.__cause__ is raised
    assert isinstance(error, RemoteProtocolError) and error.reason.code == code
    assert len(received) == 4


@HTTPX_GC_ON_TRIO
async def test_an_event_larger_than_max_event_bytes_is_refused_before_decoding() -> None:
    big = frames(TextMessageContentEvent(message_id="m1", delta="é" * 600))
    body = frames(run_started("t1", "r1")) + big + HELLO
    backend = backend_for(answer(body), limits=Limits(max_event_bytes=1000))
    received, error = await collect_until_error(backend)
    assert isinstance(error, LimitExceededError)
    assert error.limit == "max_event_bytes" and error.reason.code == "max_event_bytes"
    assert len(received) == 1
    # Just under the bound (in UTF-8 bytes, not characters) passes.
    small = frames(TextMessageContentEvent(message_id="m1", delta="é" * 400))
    ok = backend_for(answer(small + HELLO), limits=Limits(max_event_bytes=1000))
    assert len(await collect(ok)) == 6


@HTTPX_GC_ON_TRIO
async def test_an_endless_event_is_refused_while_it_streams() -> None:
    stream = Endless(b"data: " + b"x" * 4096 + b"\n", head=frames(run_started("t1", "r1")))
    backend = backend_for(answer(stream), limits=Limits(max_event_bytes=10_000))
    received, error = await collect_until_error(backend)
    assert isinstance(error, LimitExceededError)
    assert stream.sent < 2 * 10_000 + 64 * 1024 + 8192
    assert len(received) == 1
    assert stream.closed


async def test_keep_alive_comments_between_events_do_not_count_toward_the_bound() -> None:
    pings = b": ping\n\n" * 10_000  # 80 KB of keep-alives, more than the block bound
    assert len(pings) > 2 * 1 + 64 * 1024
    chunks = Chunks(*[pings[i : i + 997] for i in range(0, len(pings), 997)])
    backend = backend_for(answer(chunks), limits=Limits(max_event_bytes=1))
    assert await collect(backend) == []


async def test_connection_refused_is_a_connect_error() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ConnectError) as caught:
        await collect(backend_for(respond))
    assert caught.value.reason.code == "connect_error"
    assert caught.value.reason.kind is ReasonKind.TRANSPORT_ERROR


async def test_an_unsupported_url_scheme_is_a_connect_error() -> None:
    with pytest.raises(ConnectError, match="Request URL has an unsupported protocol"):
        await collect(AguiHttpBackend("ftp://agent.test/run"))


@pytest.mark.parametrize(
    ("raised", "expected", "code"),
    [
        (SSEError("bad framing"), MalformedEventError, "malformed_sse"),
        (httpx.ConnectError("refused"), ConnectError, "connect_error"),
        (httpx.ConnectTimeout("slow"), ConnectError, "connect_error"),
        (httpx.PoolTimeout("busy"), ConnectError, "connect_error"),
        (httpx.UnsupportedProtocol("gopher"), ConnectError, "connect_error"),
        (httpx.ReadTimeout("silence"), ReadTimeoutError, "read_timeout"),
        (httpx.ReadError("reset"), StreamDroppedError, "stream_dropped"),
        (httpx.RemoteProtocolError("incomplete"), StreamDroppedError, "stream_dropped"),
        (httpx.CloseError("close"), StreamDroppedError, "stream_dropped"),
        (httpx.DecodingError("bad gzip"), MalformedEventError, "malformed_sse"),
        (httpx.WriteError("broken pipe"), TransportError, "transport_error"),
        (httpx.WriteTimeout("slow write"), TransportError, "transport_error"),
        (httpx.ProxyError("proxy"), TransportError, "transport_error"),
        (httpx.TooManyRedirects("loop"), TransportError, "transport_error"),
    ],
)
def test_map_transport_errors_translates_every_httpx_error(
    raised: Exception, expected: type[RemoteProtocolError], code: str
) -> None:
    with pytest.raises(expected) as caught, map_transport_errors():
        raise raised
    assert type(caught.value) is expected
    assert caught.value.reason.code == code
    assert caught.value.__cause__ is raised


def test_map_transport_errors_lets_everything_else_through() -> None:
    with pytest.raises(KeyError), map_transport_errors():
        raise KeyError("not ours")


# --- the engine over MockTransport: a two-party pair (h11's ConnectionPair) -----------------


def demo_agent_transport() -> httpx.MockTransport:
    """The demo agent's replies, served by MockTransport (no socket)."""

    def respond(request: httpx.Request) -> httpx.Response:
        body = bytearray()
        for item in plan_reply(decode_run_input(request.content)):
            if item is None:
                return httpx.Response(
                    200,
                    headers=SSE,
                    stream=Chunks(bytes(body), error=httpx.RemoteProtocolError("dropped")),
                )
            payload = item if isinstance(item, bytes) else encode_event(item)
            body += b"data: " + payload + b"\n\n"
        return httpx.Response(200, headers=SSE, content=bytes(body))

    return httpx.MockTransport(respond)


async def test_engine_completes_the_secret_turn_over_mock_transport() -> None:
    backend = AguiHttpBackend(URL, transport=demo_agent_transport())
    async with backend, Engine(backend, tools=DEMO_TOOLS) as engine:
        turn = await engine.run_turn("t1", "What are the secret numbers?")
    assert turn.status is RunStatus.completed
    texts = [m.text for m in turn.conversation.messages if isinstance(m, TextMessage)]
    assert texts[-1] == "Alice's secret number is 42 and Bob's secret number is 7."
    assert [c.status for c in turn.conversation.tool_calls()] == [ToolCallStatus.completed] * 2


def _failing(body: bytes, error: Exception | None = None, **headers: str) -> httpx.MockTransport:
    def respond(request: httpx.Request) -> httpx.Response:
        if error is not None and not body:
            raise error
        stream = Chunks(body, error=error)
        return httpx.Response(200, headers={**SSE, **headers}, stream=stream)

    return httpx.MockTransport(respond)


STARTED = frames(run_started("t1", "run"), text("I was saying", id="m1"))


@HTTPX_GC_ON_TRIO
@pytest.mark.parametrize(
    ("transport", "kind", "code"),
    [
        pytest.param(
            _failing(STARTED, httpx.RemoteProtocolError("cut")),
            ReasonKind.TRANSPORT_ERROR,
            "stream_dropped",
            id="dropped",
        ),
        pytest.param(
            _failing(STARTED, httpx.ReadTimeout("silence")),
            ReasonKind.TRANSPORT_ERROR,
            "read_timeout",
            id="read-timeout",
        ),
        pytest.param(
            _failing(STARTED + b"data: nope\n\n"),
            ReasonKind.PROTOCOL_ERROR,
            None,
            id="not-json",
        ),
        pytest.param(
            _failing(STARTED + b'data: {"type":"RUN_STARTED"}\n\n'),
            ReasonKind.PROTOCOL_ERROR,
            None,
            id="invalid-event",
        ),
        pytest.param(_failing(STARTED), ReasonKind.PROTOCOL_ERROR, None, id="ended-early"),
        pytest.param(
            _failing(STARTED + frames(TextMessageContentEvent(message_id="m1", delta="x" * 300))),
            ReasonKind.PROTOCOL_ERROR,
            "max_event_bytes",
            id="too-large",
        ),
    ],
)
async def test_every_wire_failure_ends_the_turn_failed_keeping_what_arrived(
    transport: httpx.MockTransport, kind: ReasonKind, code: str | None
) -> None:
    backend = AguiHttpBackend(URL, transport=transport, limits=Limits(max_event_bytes=256))
    async with backend, Engine(backend, run_id_factory=lambda: "run") as engine:
        turn = await engine.run_turn("t1", "hi")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.kind is kind
    assert turn.reason.code == code
    texts = [m for m in turn.conversation.messages if isinstance(m, TextMessage)]
    assert [t.text for t in texts] == ["I was saying"]


@pytest.mark.parametrize(
    ("respond", "code"),
    [
        pytest.param(lambda r: httpx.Response(502, text="bad gateway"), "502", id="http-status"),
        pytest.param(
            lambda r: httpx.Response(200, json={"oops": 1}), "content_type", id="content-type"
        ),
        pytest.param(
            _failing(b"", httpx.ConnectError("refused")).handler, "connect_error", id="refused"
        ),
    ],
)
async def test_a_run_that_cannot_start_ends_the_turn_failed(
    respond: Callable[[httpx.Request], httpx.Response], code: str
) -> None:
    backend = AguiHttpBackend(URL, transport=httpx.MockTransport(respond))
    async with backend, Engine(backend) as engine:
        turn = await engine.run_turn("t1", "hi")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == code
    assert turn.reason.kind is ReasonKind.TRANSPORT_ERROR
    assert isinstance(turn.conversation.messages[0], UserMessage)


async def test_a_failed_continuation_keeps_the_executed_tool_results() -> None:
    calls = 0

    def respond(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        given = decode_run_input(request.content)
        if calls == 1:
            body = frames(
                RunStartedEvent(thread_id="t1", run_id=given.run_id),
                tool_call("get_secret_number", {"name": "bob"}, id="c1"),
                RunFinishedEvent(thread_id="t1", run_id=given.run_id),
            )
            return httpx.Response(200, headers=SSE, content=body)
        assert any(isinstance(m, ToolMessage) and m.content == "7" for m in given.messages)
        return httpx.Response(500, text="boom")

    backend = AguiHttpBackend(URL, transport=httpx.MockTransport(respond))
    async with backend, Engine(backend, tools=DEMO_TOOLS) as engine:
        turn = await engine.run_turn("t1", "secret?")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == "500"
    (call,) = turn.conversation.tool_calls()
    assert call.result is not None and call.result.content == "7"


async def test_a_zero_argument_tool_called_with_no_args_events_runs() -> None:
    @tool
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    seen: list[RunAgentInput] = []

    def respond(request: httpx.Request) -> httpx.Response:
        given = decode_run_input(request.content)
        seen.append(given)
        script = [tool_call("ping", None, id="c1")] if len(seen) == 1 else [text("done", id="m2")]
        body = frames(
            RunStartedEvent(thread_id="t1", run_id=given.run_id),
            *script,
            RunFinishedEvent(thread_id="t1", run_id=given.run_id),
        )
        return httpx.Response(200, headers=SSE, content=body)

    backend = AguiHttpBackend(URL, transport=httpx.MockTransport(respond))
    async with backend, Engine(backend, tools=ToolRegistry.of(ping)) as engine:
        turn = await engine.run_turn("t1", "ping?")
    assert turn.status is RunStatus.completed
    tool_calls = [
        call
        for m in seen[1].messages
        if isinstance(m, AssistantMessage)
        for call in m.tool_calls or ()
    ]
    assert tool_calls[0].function.arguments == "{}"
