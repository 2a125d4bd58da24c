"""A stream that breaks mid-run is resumed with ``Last-Event-ID``: on a raw-socket server
that says exactly what a resuming AG-UI server sends (the cut unit again under the
same id), the engine sees every event once; without ids, refused, or out of attempts,
the run fails with the drop as before."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from toolrelay import Engine, RunRetrying, RunStatus, TextMessage, ToolRegistry, Turn
from toolrelay.backends import NO_RETRY, AguiHttpBackend, RetryPolicy

sys.path.insert(0, str(Path(__file__).parent))
from _hostile import HostileServer, Request, head, reset

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(httpx|httpcore)\S*' was garbage collected:ResourceWarning"
    ),
]

FAST = RetryPolicy(base_delay=0.01)


def frame(data: dict[str, Any], event_id: str | None = None) -> bytes:
    """One SSE event, with an ``id:`` line when given."""
    lines = b"" if event_id is None else b"id: " + event_id.encode() + b"\n"
    return lines + b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def started(run_id: str = "r") -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": "t", "runId": run_id}


def finished(run_id: str = "r") -> dict[str, Any]:
    return {"type": "RUN_FINISHED", "threadId": "t", "runId": run_id}


def text_start(message: str = "m1") -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"}


def content(delta: str, message: str = "m1") -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": delta}


def text_end(message: str = "m1") -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_END", "messageId": message}


RESUMES = ["Toolrelay-Resume: last-event-id"]


def answer(*events: tuple[dict[str, Any], str]) -> bytes:
    """A response that sends ``events``, each with its id."""
    return head() + b"".join(frame(data, event_id) for data, event_id in events)


#: A run cut inside its first message, every event under id 1.
HEL = frame(started(), "1") + frame(text_start(), "1") + frame(content("Hel"), "1")


def cut(conn: socket.socket, body: bytes, declared: bool = True) -> None:
    """Send ``body`` (from a server that says it resumes, unless not ``declared``),
    give the client time to read it, then break the connection."""
    conn.sendall(head(extra=RESUMES if declared else ()) + body)
    time.sleep(0.2)  # a reset drops what the client has not read yet
    reset(conn)


async def run_on(
    url: str, tools: ToolRegistry | None = None, **options: Any
) -> tuple[Turn, list[RunRetrying]]:
    async with AguiHttpBackend(url, **options) as backend:
        async with Engine(backend, tools=tools) as engine:
            seen = engine.subscribe()
            turn = await engine.run_turn("t", "hi")
    with seen:
        retries = [n async for n in seen if isinstance(n, RunRetrying)]
    return turn, retries


def texts(turn: Turn) -> list[str]:
    return [
        m.text
        for m in turn.conversation.messages
        if isinstance(m, TextMessage) and m.role == "assistant"
    ]


async def test_a_drop_mid_message_is_resumed_and_the_text_arrives_once() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            assert request.header("last-event-id") is None
            cut(
                conn,
                frame(started(), "1")
                + frame(text_start(), "1")
                + frame(content("Hel"), "1")
                + frame(content("lo, "), "1"),
            )
        else:
            # Resumed after 1: the message again, whole, from its record (as toolrelay's
            # server sends it), then the rest.
            conn.sendall(
                answer(
                    (started(), "1"),
                    (text_start(), "1"),
                    (content("Hello, world"), "1"),
                    (text_end(), "2"),
                    (finished(), "3"),
                )
            )

    with HostileServer(scenario) as server:
        turn, retries = await run_on(server.url, reconnect=FAST)
    assert turn.status is RunStatus.completed, turn.reason
    assert texts(turn) == ["Hello, world"]
    assert [r.header("last-event-id") for r in server.requests] == [None, "1"]
    assert server.requests[1].body == server.requests[0].body  # the same POST again
    (notice,) = retries
    assert (notice.attempt, notice.resume_from, notice.code) == (1, "1", "stream_dropped")


async def test_a_call_cut_mid_arguments_runs_once_with_its_whole_arguments() -> None:
    ran: list[dict[str, Any]] = []

    async def lookup(name: str) -> str:
        """Look a person up."""
        ran.append({"name": name})
        return "found"

    call = "c1"

    def args(delta: str) -> dict[str, Any]:
        return {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": delta}

    start = {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": "lookup"}

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        body = json.loads(request.body)
        if len([m for m in body["messages"] if m["role"] == "tool"]):
            conn.sendall(
                answer(
                    (started("r2"), "10"),
                    (text_start("m2"), "10"),
                    (content("Found.", "m2"), "10"),
                    (text_end("m2"), "11"),
                    (finished("r2"), "12"),
                )
            )
        elif number == 0:
            cut(conn, frame(started(), "1") + frame(start, "1") + frame(args('{"na'), "1"))
        else:
            assert request.header("last-event-id") == "1"
            conn.sendall(
                answer(
                    (start, "1"),
                    (args('{"name":'), "1"),
                    (args('"ada"}'), "1"),
                    ({"type": "TOOL_CALL_END", "toolCallId": call}, "2"),
                    (finished(), "3"),
                )
            )

    with HostileServer(scenario) as server:
        turn, _ = await run_on(server.url, ToolRegistry().register(lookup), reconnect=FAST)
    assert turn.status is RunStatus.completed, turn.reason
    assert ran == [{"name": "ada"}]
    (executed,) = turn.conversation.tool_calls()
    assert executed.arguments == '{"name":"ada"}'
    assert texts(turn) == ["Found."]


async def test_events_past_the_resumed_id_are_all_new_even_when_equal() -> None:
    # Two identical deltas: the second, under a new id, is not a repeat.
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            cut(conn, frame(started(), "1") + frame(text_start(), "1") + frame(content("ab"), "2"))
        else:
            conn.sendall(
                answer((started(), "2"), (content("ab"), "3"), (text_end(), "4"), (finished(), "5"))
            )

    with HostileServer(scenario) as server:
        turn, _ = await run_on(server.url, reconnect=FAST)
    assert turn.status is RunStatus.completed, turn.reason
    assert texts(turn) == ["abab"]
    assert server.requests[1].header("last-event-id") == "2"


@pytest.mark.parametrize("resume", ["declared", "ids"])
async def test_a_server_that_does_not_say_it_resumes_is_not_asked_to(resume: str) -> None:
    # Sending the POST again to a server that ignores Last-Event-ID would start the run
    # again: only with resume="ids" does the backend take the ids as the promise.
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            cut(
                conn,
                HEL,
                declared=False,
            )
        else:
            conn.sendall(answer((content("Hello"), "1"), (text_end(), "2"), (finished(), "3")))

    with HostileServer(scenario) as server:
        turn, _ = await run_on(server.url, reconnect=FAST, resume=resume)
    if resume == "declared":
        assert turn.reason is not None and turn.reason.code == "stream_dropped"
        assert len(server.requests) == 1
    else:
        assert turn.status is RunStatus.completed, turn.reason
        assert texts(turn) == ["Hello"]


async def test_a_stream_without_ids_is_not_resumed() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        cut(conn, frame(started()) + frame(text_start()) + frame(content("Hel")))

    with HostileServer(scenario) as server:
        turn, retries = await run_on(server.url, reconnect=FAST)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == "stream_dropped"
    assert texts(turn) == ["Hel"]  # nothing received is lost
    assert len(server.requests) == 1 and retries == []


@pytest.mark.parametrize(
    "refusal",
    [
        head("404 Not Found", "application/json") + b'{"error":{}}',
        head("416 Range Not Satisfiable", "application/json") + b"{}",
        head("204 No Content", "text/plain"),
        head("200 OK", "application/json") + b"{}",
    ],
    ids=["404", "416", "204", "not-a-stream"],
)
async def test_a_server_that_refuses_the_resumption_fails_the_run_with_the_drop(
    refusal: bytes,
) -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            cut(conn, HEL)
        else:
            conn.sendall(refusal)

    with HostileServer(scenario) as server:
        turn, _ = await run_on(server.url, reconnect=FAST)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == "stream_dropped"
    assert texts(turn) == ["Hel"]
    assert len(server.requests) == 2


async def test_a_busy_server_is_asked_again_within_the_attempts() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            cut(conn, HEL)
        elif number == 1:
            conn.sendall(head("503 Service Unavailable", "text/plain", ["Retry-After: 0"]))
        else:
            conn.sendall(answer((content("Hello"), "1"), (text_end(), "2"), (finished(), "3")))

    with HostileServer(scenario) as server:
        turn, retries = await run_on(server.url, reconnect=FAST)
    assert turn.status is RunStatus.completed, turn.reason
    assert texts(turn) == ["Hello"]
    assert [r.attempt for r in retries] == [1, 2]
    assert [r.header("last-event-id") for r in server.requests] == [None, "1", "1"]


async def test_reconnections_are_bounded_by_the_policy() -> None:
    # A server that drops every stream at the same point: 1 + attempts requests.
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        cut(conn, HEL)

    with HostileServer(scenario) as server:
        turn, retries = await run_on(server.url, reconnect=RetryPolicy(attempts=2, base_delay=0.01))
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == "stream_dropped"
    assert len(server.requests) == 3
    assert [r.attempt for r in retries] == [1, 2]
    assert texts(turn) == ["Hel"]


async def test_a_stream_that_moves_on_gets_its_attempts_afresh() -> None:
    # Each connection delivers one new unit, then drops: progress every time, so more
    # drops than attempts still complete the run.
    pieces = ["a", "b", "c", "d"]

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            cut(conn, frame(started(), "0") + frame(text_start(), "0"))
        elif number < len(pieces):
            cut(conn, frame(content(pieces[number - 1]), str(number)))
        else:
            conn.sendall(answer((content(pieces[-1]), "9"), (text_end(), "10"), (finished(), "11")))

    with HostileServer(scenario) as server:
        turn, retries = await run_on(server.url, reconnect=RetryPolicy(attempts=1, base_delay=0.01))
    assert turn.status is RunStatus.completed, turn.reason
    assert texts(turn) == ["abcd"]
    assert [r.attempt for r in retries] == [1, 1, 1, 1]


async def test_reconnecting_can_be_turned_off() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        cut(conn, HEL)

    with HostileServer(scenario) as server:
        turn, _ = await run_on(server.url, reconnect=NO_RETRY)
    assert turn.reason is not None and turn.reason.code == "stream_dropped"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "event_id", ["x" * 257, "caf\u00e9", "a\x01b"], ids=["too-long", "not-ascii", "control"]
)
async def test_an_id_that_cannot_be_a_header_is_not_sent_back(event_id: str) -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        cut(
            conn,
            frame(started(), event_id)
            + frame(text_start(), event_id)
            + frame(content("Hel"), event_id),
        )

    with HostileServer(scenario) as server:
        turn, _ = await run_on(server.url, reconnect=FAST)
    assert turn.reason is not None and turn.reason.code == "stream_dropped"
    assert len(server.requests) == 1


async def test_a_position_with_too_much_to_reconcile_is_not_resumed() -> None:
    # More than 4,096 non-delta events under one id: the client keeps no unbounded
    # replay state, and gives the position up.
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        steps = b"".join(
            frame({"type": "STEP_STARTED", "stepName": f"s{n}"}, "1") for n in range(4200)
        )
        cut(conn, frame(started(), "1") + steps)

    with HostileServer(scenario) as server:
        turn, _ = await run_on(server.url, reconnect=FAST)
    assert turn.reason is not None and turn.reason.code == "stream_dropped"
    assert len(server.requests) == 1
