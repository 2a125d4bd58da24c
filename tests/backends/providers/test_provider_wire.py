"""The provider backends against hostile HTTP servers on real loopback sockets: the
same bounds as the AG-UI backend (decoded bytes per event and per NDJSON line, error
bodies, buffered arguments, nesting, time), the engine's limits, retries, and API keys
that stay with their own host."""

from __future__ import annotations

import contextlib
import socket
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolrelay import (
    Engine,
    LimitExceededError,
    Limits,
    ReasonKind,
    RunAllocationError,
    RunRetrying,
    RunStatus,
    TextMessage,
    Turn,
)
from toolrelay.backends import NO_RETRY, RetryPolicy
from toolrelay.backends.providers import (
    PROVIDERS,
    CohereTranslator,
    OllamaBackend,
    OpenAIChatBackend,
    OpenAIChatTranslator,
    ProviderBackend,
)

# The shared helpers sit next to the tests (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent.parent))
from _hostile import HostileServer, Request, gzip_bomb, head, trickle

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(httpx|httpcore)\S*' was garbage collected:ResourceWarning"
    ),
]

MiB = 1024 * 1024
SMALL = Limits(max_event_bytes=64 * 1024)


@contextlib.contextmanager
def peak_memory() -> Iterator[list[int]]:
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
        peak.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def chat_sse(*chunks: str) -> bytes:
    return b"".join(b"data: " + c.encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def answer(text: str) -> bytes:
    return chat_sse(
        '{"id":"c1","choices":[{"index":0,"delta":{"content":"' + text + '"}}]}',
        '{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
    )


async def turn_on(backend: ProviderBackend, limits: Limits | None = None) -> Turn:
    async with Engine(backend, limits=limits) as engine:
        turn = await engine.run_turn("t", "hi")
    await backend.aclose()
    return turn


def texts(turn: Turn) -> list[str]:
    return [
        m.text
        for m in turn.conversation.messages
        if isinstance(m, TextMessage) and m.role == "assistant"
    ]


def chat(server: HostileServer, **options: Any) -> OpenAIChatBackend:
    return OpenAIChatBackend("m", api_key="sk-test", base_url=server.url, **options)


async def test_a_gzip_bomb_event_from_a_provider_stops_at_the_bound() -> None:
    start = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"'
    endless = gzip_bomb(start)

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(extra=["Content-Encoding: gzip"]))
        endless.send(conn, server)

    with HostileServer(scenario) as server, peak_memory() as peak:
        with anyio.fail_after(30):
            turn = await turn_on(chat(server), SMALL)
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, "max_event_bytes")
    assert peak[0] < 4 * MiB, f"peak {peak[0] / MiB:.1f} MiB"


async def test_an_endless_ndjson_line_stops_at_the_bound() -> None:
    endless = gzip_bomb(b'{"message":{"role":"assistant","content":"')

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(content_type="application/x-ndjson", extra=["Content-Encoding: gzip"]))
        endless.send(conn, server)

    with HostileServer(scenario) as server, peak_memory() as peak:
        backend = OllamaBackend("m", base_url=f"http://127.0.0.1:{server.port}")
        with anyio.fail_after(30):
            turn = await turn_on(backend, SMALL)
    assert turn.reason is not None
    assert turn.reason.code == "max_event_bytes"
    assert "a line passed" in turn.reason.message
    assert peak[0] < 4 * MiB, f"peak {peak[0] / MiB:.1f} MiB"


async def test_a_provider_error_body_is_an_excerpt_read_boundedly() -> None:
    endless = gzip_bomb(b'{"error": {"message": "')

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(
            head("500 Internal Server Error", "application/json", ["Content-Encoding: gzip"])
        )
        endless.send(conn, server)

    with HostileServer(scenario) as server, peak_memory() as peak:
        with anyio.fail_after(30):
            turn = await turn_on(chat(server))
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.AGENT_ERROR, "500")
    assert len(turn.reason.message) < 700
    assert peak[0] < 4 * MiB, f"peak {peak[0] / MiB:.1f} MiB"


async def test_a_deeply_nested_error_body_is_still_an_excerpt() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head("400 Bad Request", "application/json") + b"[" * 10_000)

    with HostileServer(scenario) as server:
        turn = await turn_on(chat(server))
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.AGENT_ERROR, "400")
    assert "[[[[" in turn.reason.message


async def test_json_nested_too_deeply_is_a_typed_malformed_input_error() -> None:
    deep = b'{"id":"c1","choices":[{"index":0,"delta":{"content":"x"}}],"x":' + b"[" * 50_000

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        first = '{"id":"c1","choices":[{"index":0,"delta":{"content":"before"}}]}'
        conn.sendall(head() + b"data: " + first.encode() + b"\n\ndata: " + deep + b"\n\n")

    with HostileServer(scenario) as server:
        turn = await turn_on(chat(server))
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, "nesting_too_deep")
    assert texts(turn) == ["before"]


async def test_a_web_page_instead_of_a_stream_says_so() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(content_type="text/html; charset=utf-8") + b"<html>Sign in</html>")

    with HostileServer(scenario) as server:
        turn = await turn_on(chat(server))
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.TRANSPORT_ERROR, "content_type")
    assert "not a stream" in turn.reason.message
    assert "<html>Sign in</html>" in turn.reason.message


async def test_the_engines_limits_govern_a_provider_backend() -> None:
    big = '{"id":"c1","choices":[{"index":0,"delta":{"content":"' + "y" * 5000 + '"}}]}'

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + chat_sse(big))

    with HostileServer(scenario) as server:
        turn = await turn_on(chat(server), Limits(max_event_bytes=1000))
    assert turn.reason is not None and turn.reason.code == "max_event_bytes"


async def test_a_provider_that_trickles_keep_alives_meets_the_run_deadline() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head())
        trickle(conn, server, b": keep-alive\n\n", 0.05)

    with HostileServer(scenario) as server:
        with anyio.fail_after(5):
            turn = await turn_on(chat(server), Limits(run_seconds=0.3))
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.DEADLINE, "run_seconds")


async def test_a_provider_429_is_retried_honouring_retry_after() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            conn.sendall(head("429 Too Many Requests", "application/json", ["Retry-After: 0.1"]))
            conn.sendall(b'{"error": {"message": "slow down"}}')
        else:
            conn.sendall(head() + answer("done"))

    with HostileServer(scenario) as server:
        backend = chat(server)
        async with Engine(backend) as engine:
            seen = engine.subscribe()
            turn = await engine.run_turn("t", "hi")
        await backend.aclose()
        with seen:
            notes = [n async for n in seen if isinstance(n, RunRetrying)]
    assert turn.status is RunStatus.completed
    assert texts(turn) == ["done"]
    assert [(n.attempt, n.delay, n.code) for n in notes] == [(1, 0.1, "429")]
    assert "slow down" in notes[0].reason


async def test_provider_retries_can_be_turned_off() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head("503 Service Unavailable", "text/plain", ["Retry-After: 0"]))

    with HostileServer(scenario) as server:
        turn = await turn_on(chat(server, retry=NO_RETRY))
        assert len(server.requests) == 1
        turn = await turn_on(chat(server, retry=RetryPolicy(attempts=1)))
        assert len(server.requests) == 3
    assert turn.reason is not None and turn.reason.code == "503"


async def test_a_missing_key_names_the_variable_before_any_network_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = OpenAIChatBackend("m")  # the provider's own host, no key
    with pytest.raises(RunAllocationError, match="set OPENAI_API_KEY") as caught:
        backend.check_api_key()
    assert caught.value.code == "missing_api_key"
    turn = await turn_on(backend)
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.BACKEND_ERROR, "missing_api_key")


async def test_the_environments_key_goes_only_to_the_providers_own_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + answer("ok"))

    with HostileServer(scenario) as server:
        backend = OpenAIChatBackend("m", base_url=server.url)
        assert backend.withheld_key_env == "OPENAI_API_KEY"
        turn = await turn_on(backend)
        explicit = OpenAIChatBackend("m", base_url=server.url, api_key="sk-local")
        await turn_on(explicit)
    assert turn.status is RunStatus.completed
    first, second = server.requests
    assert first.header("authorization") is None
    assert b"sk-secret" not in first.head + first.body
    assert second.header("authorization") == "Bearer sk-local"
    assert OpenAIChatBackend("m").auth_headers() == {"Authorization": "Bearer sk-secret"}


@pytest.mark.parametrize("backend_class", list(PROVIDERS.values()))
def test_a_backend_without_a_model_is_refused_when_it_is_made(
    backend_class: type[ProviderBackend],
) -> None:
    with pytest.raises(TypeError, match="model must be a string, not NoneType"):
        backend_class(None, api_key="k")  # type: ignore[arg-type]
    for empty in ("", "  "):
        with pytest.raises(ValueError, match="model must name a model"):
            backend_class(empty, api_key="k")


# --- argument pieces a translator holds: linear and bounded --------------------------------


def test_argument_pieces_before_the_name_are_held_linearly_and_bounded() -> None:
    translator = OpenAIChatTranslator(max_argument_bytes=1000)
    piece = {"index": 0, "function": {"arguments": "x" * 10}}
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]}
    for _ in range(100):
        assert translator.feed(chunk) == []
    with pytest.raises(LimitExceededError) as caught:
        translator.feed(chunk)
    assert caught.value.limit == "max_argument_bytes"


def test_pieces_held_before_the_name_are_all_sent_once_it_comes() -> None:
    translator = OpenAIChatTranslator()
    for n in range(5):
        piece = {"index": 0, "function": {"arguments": str(n)}}
        translator.feed({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    named = {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": "5"}}
    events = translator.feed(
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [named]}}]}
    )
    assert [getattr(e, "delta", None) for e in events[1:]] == ["0", "1", "2", "3", "4", "5"]


def test_a_cohere_call_held_until_its_end_is_bounded() -> None:
    translator = CohereTranslator(max_argument_bytes=100)
    translator.feed(
        {
            "type": "tool-call-start",
            "index": 0,
            "delta": {"message": {"tool_calls": {"id": "c", "function": {"name": "f"}}}},
        }
    )
    delta = {"message": {"tool_calls": {"function": {"arguments": "é" * 30}}}}
    translator.feed({"type": "tool-call-delta", "index": 0, "delta": delta})  # 60 bytes
    with pytest.raises(LimitExceededError):
        translator.feed({"type": "tool-call-delta", "index": 0, "delta": delta})


def test_deeply_nested_arguments_in_a_conversation_never_raise_recursion_error() -> None:
    from toolrelay.backends.providers._anthropic import _parsed_input
    from toolrelay.backends.providers._cohere import _arguments_json

    deep = "[" * 10_000 + "]" * 10_000
    assert _parsed_input(deep) == {}
    assert _arguments_json(deep) == deep
