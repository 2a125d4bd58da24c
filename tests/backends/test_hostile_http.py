"""The AG-UI backend and the engine against hostile HTTP servers on real loopback
sockets: compression bombs, byte trickles, bad bytes, transient failures. Each test
asserts the typed reason, that memory stays near the bound, and that the turn ends
within its deadline."""

from __future__ import annotations

import contextlib
import socket
import sys
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolrelay import Engine, Limits, ReasonKind, RunRetrying, RunStatus, TextMessage, Turn
from toolrelay.backends import NO_RETRY, AguiHttpBackend, RetryPolicy
from toolrelay.backends._wire import ACCEPT_ENCODING

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _hostile import (
    HostileServer,
    Request,
    brotli_bomb,
    deflate_bomb,
    event,
    gzip_bomb,
    head,
    normal_run,
    reset,
    trickle,
)

pytestmark = [
    pytest.mark.anyio,
    # A response left mid-stream (the point of most tests here) leaves httpx's and
    # httpcore's nested async generators to the garbage collector (encode/httpx#3686).
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(httpx|httpcore)\S*' was garbage collected:ResourceWarning"
    ),
]

SMALL = Limits(max_event_bytes=64 * 1024)
MiB = 1024 * 1024


@contextlib.contextmanager
def peak_memory() -> Iterator[list[int]]:
    """The peak of Python allocations (every thread) inside the block, in bytes."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
        peak.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


async def run_on(
    url: str,
    *,
    limits: Limits | None = None,
    message: str = "hi",
    thread: str = "t",
    **backend_options: Any,
) -> Turn:
    async with AguiHttpBackend(url, **backend_options) as backend:
        async with Engine(backend, limits=limits) as engine:
            return await engine.run_turn(thread, message)


def texts(turn: Turn) -> list[str]:
    """The agent's texts in the turn."""
    return [
        m.text
        for m in turn.conversation.messages
        if isinstance(m, TextMessage) and m.role == "assistant"
    ]


# --- decoded size, not wire size ------------------------------------------------------------


@pytest.mark.parametrize(("encoding", "bomb"), [("gzip", gzip_bomb), ("deflate", deflate_bomb)])
async def test_a_compression_bomb_in_the_stream_stops_at_the_bound_with_memory_near_it(
    encoding: str, bomb: Any
) -> None:
    started = event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}')
    text = event('{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}')
    endless = bomb(
        started + text + b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"'
    )
    sent: list[int] = []

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(extra=[f"Content-Encoding: {encoding}"]))
        sent.append(endless.send(conn, server))

    with HostileServer(scenario) as server, peak_memory() as peak:
        with anyio.fail_after(30):
            turn = await run_on(server.url, limits=SMALL)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, "max_event_bytes")
    assert "decoded bytes" in turn.reason.message
    # The bound is 2 * 64 KiB + 64 KiB of decoded bytes; one decoding step is 64 KiB.
    # Before the fix one 64 KiB wire chunk inflated to 64 MiB at once.
    assert peak[0] < 4 * MiB, f"peak {peak[0] / MiB:.1f} MiB"


async def test_an_event_of_many_tiny_data_lines_costs_its_bytes_not_an_object_each() -> None:
    lines = b"data:ab\n" * 250_000  # 2 MB of wire, 750 kB of data

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}'))
        conn.sendall(lines + b"\n")

    limits = Limits(max_event_bytes=MiB)
    with HostileServer(scenario) as server, peak_memory() as peak:
        turn = await run_on(server.url, limits=limits)
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, None)
    assert "not a JSON object" in turn.reason.message
    # An object per line would be about 12 MB.
    assert peak[0] < 6 * MiB, f"peak {peak[0] / MiB:.1f} MiB"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "gzip, deflate", "identity"])
async def test_a_compressed_run_of_an_honest_server_reads_as_usual(encoding: str) -> None:
    body = normal_run()
    for name in [e.strip() for e in encoding.split(",")]:  # applied in order
        if name == "gzip":
            body = zlib.compress(body, wbits=zlib.MAX_WBITS | 16)
        elif name == "deflate":
            body = zlib.compress(body)
        elif name == "br":
            brotli = pytest.importorskip("brotli")
            body = brotli.compress(body)

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(extra=[f"Content-Encoding: {encoding}"]))
        for start in range(0, len(body), 7):  # in small pieces
            conn.sendall(body[start : start + 7])

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.status is RunStatus.completed, turn.reason
    assert texts(turn) == ["hello"]


async def test_a_bomb_on_one_thread_leaves_a_concurrent_sibling_untouched() -> None:
    endless = gzip_bomb(event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}') + b"data: ")

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if b"sibling" in request.body:
            conn.sendall(head())
            for piece in normal_run(text="sibling done").split(b"\n\n")[:-1]:
                conn.sendall(piece + b"\n\n")
                time.sleep(0.02)  # streams while the bomb is being read
            return
        conn.sendall(head(extra=["Content-Encoding: gzip"]))
        endless.send(conn, server)

    with HostileServer(scenario) as server:
        async with AguiHttpBackend(server.url) as backend:
            async with Engine(backend, limits=SMALL) as engine:
                bombed = engine.start_turn("bomb", "hi")
                sibling = engine.start_turn("sibling", "sibling please")
                with anyio.fail_after(30):
                    await bombed.wait_finished()
                    await sibling.wait_finished()
    assert bombed.reason is not None and bombed.reason.code == "max_event_bytes"
    assert sibling.status is RunStatus.completed
    assert texts(sibling) == ["sibling done"]


async def test_a_gzip_bomb_as_an_error_body_is_read_boundedly() -> None:
    endless = gzip_bomb(b"<html>")

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head("503 Service Unavailable", "text/html", extra=["Content-Encoding: gzip"]))
        endless.send(conn, server)

    with HostileServer(scenario) as server, peak_memory() as peak:
        with anyio.fail_after(30):
            turn = await run_on(server.url, retry=NO_RETRY)
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.TRANSPORT_ERROR, "503")
    assert turn.reason.message.startswith("HTTP 503: <html>AAAA")
    assert len(turn.reason.message) < 400
    assert peak[0] < 4 * MiB, f"peak {peak[0] / MiB:.1f} MiB"


async def test_a_brotli_bomb_stops_at_the_bound_too() -> None:
    pytest.importorskip("brotli")
    started = event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}')
    prefix = started + b'data: {"type":"CUSTOM","name":"x","value":"'
    bomb = brotli_bomb(prefix, 512)  # 512 MiB from about 100 KB

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(extra=["Content-Encoding: br"]) + bomb)

    with HostileServer(scenario) as server, peak_memory() as peak:
        with anyio.fail_after(30):
            turn = await run_on(server.url, limits=SMALL)
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, "max_event_bytes")
    assert peak[0] < 4 * MiB, f"peak {peak[0] / MiB:.1f} MiB"
    assert "br" in (server.requests[0].header("accept-encoding") or "")


async def test_an_encoding_toolrelay_does_not_decode_is_a_typed_error() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(extra=["Content-Encoding: zstd"]) + b"\x28\xb5\x2f\xfdgarbage")

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, "content_encoding")
    assert "'zstd'" in turn.reason.message
    assert server.requests[0].header("accept-encoding") == ACCEPT_ENCODING


async def test_a_corrupt_gzip_body_is_a_typed_error_keeping_what_came() -> None:
    run = normal_run()
    good = gzip_bomb(run[: run.index(b'data: {"type":"TEXT_MESSAGE_END')]).start

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(extra=["Content-Encoding: gzip"]) + good)
        time.sleep(0.1)
        conn.sendall(b"\xff" * 64)  # not gzip

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.reason is not None
    assert turn.reason.code == "content_encoding"
    assert texts(turn) == ["hello"]


# --- the wire's small print -----------------------------------------------------------------


async def test_a_leading_bom_is_stripped() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        body = b"\xef\xbb\xbf" + normal_run()
        conn.sendall(head())
        for byte in body[:4]:  # the BOM split over several reads
            conn.sendall(bytes([byte]))
            time.sleep(0.01)
        conn.sendall(body[4:])

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.status is RunStatus.completed
    assert turn.violations == ()
    assert texts(turn) == ["hello"]


async def test_invalid_utf8_is_a_typed_error_keeping_the_text_before_it() -> None:
    body = normal_run()
    cut = body.index(b'data: {"type":"TEXT_MESSAGE_END')

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        bad = b'data: {"type":"CUSTOM","name":"x","value":"\xff"}\n\n'
        conn.sendall(head() + body[:cut] + bad)

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, "invalid_utf8")
    assert texts(turn) == ["hello"]


async def test_a_lone_surrogate_from_a_split_emoji_spoils_one_character_not_the_turn() -> None:
    # What a JavaScript server sends when it cuts a string between the two halves of
    # an emoji and JSON-encodes each piece on its own.
    halves = (
        event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}'),
        event('{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}'),
        event('{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"ok \\ud83d"}'),
        event('{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"\\ude00 done"}'),
        event('{"type":"TEXT_MESSAGE_END","messageId":"m1"}'),
        event('{"type":"RUN_FINISHED","threadId":"t","runId":"r"}'),
    )

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + b"".join(halves))

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.status is RunStatus.completed
    assert texts(turn) == ["ok \ufffd\ufffd done"]


async def test_deeply_nested_json_in_an_event_is_a_protocol_error_not_a_crash() -> None:
    deep = b'data: {"type":"CUSTOM","name":"x","value":' + b"[" * 20_000 + b"]" * 20_000
    deep += b"}\n\n"

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        run = normal_run()
        conn.sendall(head() + run[: run.index(b'data: {"type":"TEXT_MESSAGE_END')] + deep)

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.PROTOCOL_ERROR, "nesting_too_deep")
    assert texts(turn) == ["hello"]


async def test_a_body_cut_inside_a_character_is_an_early_end_not_bad_utf8() -> None:
    run = normal_run()
    cut = run.index(b'data: {"type":"TEXT_MESSAGE_END')
    partial = 'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"é'.encode()

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + run[:cut] + partial[:-1])  # half of the "é"

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code != "invalid_utf8"
    assert "RUN_FINISHED" in turn.reason.message
    assert texts(turn) == ["hello"]


async def test_a_redirect_says_so() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head("307 Temporary Redirect", "text/plain", ["Location: /elsewhere"]))

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.reason is not None and turn.reason.code == "307"
    assert "redirects to '/elsewhere'" in turn.reason.message
    assert "not followed" in turn.reason.message


async def test_a_web_page_instead_of_an_event_stream_says_so() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(content_type="text/html") + b"<!doctype html><title>Login</title>")

    with HostileServer(scenario) as server:
        turn = await run_on(server.url)
    assert turn.reason is not None and turn.reason.code == "content_type"
    assert "not an event stream" in turn.reason.message
    assert "<!doctype html><title>Login</title>" in turn.reason.message


# --- time: per run and per turn -------------------------------------------------------------


def trickling(conn: socket.socket, request: Request, server: HostileServer) -> None:
    """Keep-alive comments every 50 ms for ever (a sibling thread gets a normal run)."""
    if b"sibling" in request.body:
        conn.sendall(head() + normal_run(text="sibling done"))
        return
    conn.sendall(head() + event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}'))
    trickle(conn, server, b": keep-alive\n\n", 0.05)


@pytest.mark.parametrize(
    ("limits", "code"),
    [
        (Limits(run_seconds=0.5, turn_seconds=None), "run_seconds"),
        (Limits(run_seconds=None, turn_seconds=0.5), "turn_seconds"),
    ],
)
async def test_a_server_that_only_sends_keep_alives_meets_the_deadline(
    limits: Limits, code: str
) -> None:
    server = HostileServer(lambda conn, request, n: trickling(conn, request, server))
    with server:
        started = time.monotonic()
        async with AguiHttpBackend(server.url) as backend:
            async with Engine(backend, limits=limits) as engine:
                slow = engine.start_turn("slow", "hi")
                sibling = await engine.run_turn("sibling", "sibling please")
                with anyio.fail_after(5):
                    reason = await slow.wait_finished()
        elapsed = time.monotonic() - started
    assert sibling.status is RunStatus.completed
    assert texts(sibling) == ["sibling done"]
    assert slow.status is RunStatus.failed
    assert (reason.kind, reason.code) == (ReasonKind.DEADLINE, code)
    assert 0.5 <= elapsed < 3


async def test_the_engines_limits_govern_the_backend() -> None:
    big = event('{"type":"CUSTOM","name":"x","value":"' + "y" * 5000 + '"}')

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + normal_run()[:-100] + big)

    with HostileServer(scenario) as server:
        # The backend keeps its defaults (8 MiB); the engine's bound is what counts.
        turn = await run_on(server.url, limits=Limits(max_event_bytes=1000))
        assert turn.reason is not None and turn.reason.code == "max_event_bytes"
        # An engine given no limits adopts the backend's.
        async with AguiHttpBackend(server.url, limits=Limits(max_event_bytes=1000)) as backend:
            async with Engine(backend) as engine:
                assert engine.limits.max_event_bytes == 1000
                turn = await engine.run_turn("t", "hi")
        assert turn.reason is not None and turn.reason.code == "max_event_bytes"


# --- transient failures (issue 15) ----------------------------------------------------------


async def test_503_and_429_are_retried_honouring_retry_after_and_each_retry_is_seen() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            conn.sendall(head("503 Service Unavailable", "text/plain", ["Retry-After: 0.2"]))
            conn.sendall(b"busy")
        elif number == 1:
            conn.sendall(head("429 Too Many Requests", "application/json", ["Retry-After: 0"]))
        else:
            conn.sendall(head() + normal_run())

    with HostileServer(scenario) as server:
        started = time.monotonic()
        async with AguiHttpBackend(server.url) as backend:
            async with Engine(backend) as engine:
                seen = engine.subscribe()
                turn = await engine.run_turn("t", "hi")
        with seen:  # the engine closed: what it sent is still there to read
            notes = [n async for n in seen if isinstance(n, RunRetrying)]
    assert turn.status is RunStatus.completed
    assert texts(turn) == ["hello"]
    assert len(server.requests) == 3
    assert [(n.attempt, n.delay, n.code) for n in notes] == [(1, 0.2, "503"), (2, 0.0, "429")]
    assert notes[0].reason == "HTTP 503: busy"
    assert time.monotonic() - started >= 0.2


async def test_retries_are_bounded_in_attempts() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head("503 Service Unavailable", "text/plain", ["Retry-After: 0"]))

    with HostileServer(scenario) as server:
        turn = await run_on(server.url, retry=RetryPolicy(attempts=2))
    assert turn.reason is not None and turn.reason.code == "503"
    assert len(server.requests) == 3


async def test_a_retry_after_past_the_policys_time_is_not_waited_for() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head("429 Too Many Requests", "text/plain", ["Retry-After: 3600"]))

    with HostileServer(scenario) as server:
        with anyio.fail_after(5):
            turn = await run_on(server.url)
    assert turn.reason is not None and turn.reason.code == "429"
    assert len(server.requests) == 1


async def test_a_connection_reset_before_the_answer_is_retried() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            reset(conn)
        else:
            conn.sendall(head() + normal_run())

    with HostileServer(scenario) as server:
        turn = await run_on(server.url, retry=RetryPolicy(base_delay=0.01))
    assert turn.status is RunStatus.completed
    assert len(server.requests) == 2


async def test_a_run_that_delivered_events_is_never_retried() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        run = normal_run()
        conn.sendall(head() + run[: run.index(b'data: {"type":"TEXT_MESSAGE_END')])
        time.sleep(0.3)  # read by the client before the reset (which drops unread bytes)
        reset(conn)

    with HostileServer(scenario) as server:
        turn = await run_on(server.url, retry=RetryPolicy(base_delay=0.01))
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == "stream_dropped"
    assert texts(turn) == ["hello"]
    assert len(server.requests) == 1


async def test_retries_can_be_turned_off() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head("503 Service Unavailable", "text/plain", ["Retry-After: 0"]))

    with HostileServer(scenario) as server:
        turn = await run_on(server.url, retry=NO_RETRY)
    assert turn.reason is not None and turn.reason.code == "503"
    assert len(server.requests) == 1
