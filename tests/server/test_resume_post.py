"""toolrelay's engine against toolrelay's server through a proxy that breaks the first
response after N bytes: the client reconnects with ``Last-Event-ID`` (the same POST),
the server resumes that run from the log, and the turn the client ends with equals the
turn of a client whose connection never broke, wherever the break fell."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from toolrelay import Engine, RunRetrying, TextMessage, ThreadKey, ToolRegistry, Turn
from toolrelay.backends import AguiHttpBackend, RetryPolicy
from toolrelay.server import AguiServer
from toolrelay.store import MemoryStore, TurnStarted
from toolrelay.testing import ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import HTTPX_GC_ON_TRIO, fold, read_events, run_input, serving

pytestmark = [pytest.mark.anyio, HTTPX_GC_ON_TRIO]


class CuttingProxy:
    """Forwards loopback TCP to ``upstream``; the first connection's response is cut
    (a clean close of both sides) after ``cut`` bytes, or never when ``cut`` is None.
    Records every request head and the first response's bytes."""

    def __init__(self, upstream: str, cut: int | None) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(port))
        self._cut = cut
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests: list[bytes] = []
        self.first_response = bytearray()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    def __enter__(self) -> CuttingProxy:
        self._start(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in (self._listener, *self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on it
            sock.close()
        for thread in self._threads:
            thread.join(5)

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        number = 0
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._sockets += [client, server]
            self._start(self._up, client, server)
            self._start(self._down, server, client, number == 0)
            number += 1

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if data.startswith(b"POST"):
                    self.requests.append(data.partition(b"\r\n\r\n")[0])
                server.sendall(data)

    def _down(self, server: socket.socket, client: socket.socket, first: bool) -> None:
        sent = 0
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if first and self._cut is not None and sent + len(data) >= self._cut:
                    client.sendall(data[: self._cut - sent])
                    self.first_response += data[: self._cut - sent]
                    break
                client.sendall(data)
                sent += len(data)
                if first:
                    self.first_response += data
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def last_event_ids(self) -> list[str | None]:
        out: list[str | None] = []
        for head in self.requests:
            found = None
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"last-event-id":
                    found = value.strip().decode()
            out.append(found)
        return out


def model() -> ScriptedAgent:
    return ScriptedAgent(
        [
            text("Let me look both numbers up, one moment please.", chunk=4),
            tool_call("get_secret_number", {"name": "alice"}, id="a", chunk=3),
            tool_call("get_secret_number", {"name": "bob"}, id="b", chunk=3),
        ],
        [text("Alice has 42 and Bob has 7; shall I add them?", chunk=5)],
    )


def tools(ran: list[str]) -> ToolRegistry:
    async def get_secret_number(name: str) -> int:
        """A person's secret number."""
        ran.append(name)
        return {"alice": 42, "bob": 7}[name]

    return ToolRegistry().register(get_secret_number)


def outcome(turn: Turn) -> list[tuple[Any, ...]]:
    """What the client ended with: its messages' texts, and each call with its result."""
    out: list[tuple[Any, ...]] = [
        (message.role, message.text)
        for message in turn.conversation.messages
        if isinstance(message, TextMessage)
    ]
    for call in turn.conversation.tool_calls():
        result = call.result.content if call.result is not None else None
        out.append((call.id, call.name, call.arguments, call.status.value, result))
    return out


async def turn_through(
    cut: int | None,
) -> tuple[Turn, CuttingProxy, list[str], list[Any], list[RunRetrying]]:
    ran: list[str] = []
    store = MemoryStore()
    server = AguiServer(model(), tools=tools(ran), store=store, live_text=True)
    async with serving(server) as url:
        with CuttingProxy(url, cut) as proxy:
            backend = AguiHttpBackend(proxy.url + "/", reconnect=RetryPolicy(base_delay=0.01))
            async with backend, Engine(backend) as engine:
                seen = engine.subscribe()
                turn = await engine.run_turn("t", "What are the secret numbers?")
            with seen:
                retries = [n async for n in seen if isinstance(n, RunRetrying)]
        log = [entry.seq for entry in await store.read(ThreadKey("t"))]
    return turn, proxy, ran, log, retries


@pytest.fixture(scope="module")
def whole() -> dict[str, Any]:
    """The turn and the response of an unbroken connection (the first test to need it
    fills it)."""
    return {}


async def unbroken(whole: dict[str, Any]) -> dict[str, Any]:
    if not whole:
        turn, proxy, ran, log, retries = await turn_through(None)
        assert turn.status.value == "completed", turn.reason
        assert sorted(ran) == ["alice", "bob"]
        assert log == list(range(1, len(log) + 1))
        assert retries == [] and proxy.last_event_ids() == [None]
        whole["outcome"] = outcome(turn)
        whole["length"] = len(proxy.first_response)
        whole["body_start"] = bytes(proxy.first_response).index(b"\r\n\r\n") + 4
    return whole


async def test_an_unbroken_turn_needs_no_reconnection(whole: dict[str, Any]) -> None:
    reference = await unbroken(whole)
    assert ("assistant", "Alice has 42 and Bob has 7; shall I add them?") in reference["outcome"]


@pytest.mark.parametrize("fraction", [n / 12 for n in range(1, 12)])
async def test_a_break_anywhere_is_resumed_and_ends_as_if_it_never_happened(
    whole: dict[str, Any], fraction: float
) -> None:
    whole = await unbroken(whole)
    # Past the head and the first event (a break before any id is not resumable).
    first_event_end = whole["body_start"] + 120
    cut = first_event_end + int((whole["length"] - first_event_end) * fraction)
    turn, proxy, ran, log, retries = await turn_through(cut)
    assert turn.status.value == "completed", turn.reason
    assert outcome(turn) == whole["outcome"]
    assert sorted(ran) == ["alice", "bob"]  # the server ran each call once
    assert log == list(range(1, len(log) + 1))
    ids = proxy.last_event_ids()
    if len(ids) == 1:
        # The break fell after the run's last byte the client needed.
        assert retries == []
    else:
        first, resumed = ids
        assert first is None and resumed is not None and resumed
        assert [r.resume_from for r in retries] == [resumed]


async def test_a_reconnection_starts_nothing_and_answers_plainly_where_it_cannot_resume() -> None:
    ran: list[str] = []
    store = MemoryStore()
    server = AguiServer(model(), tools=tools(ran), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        body = run_input("t", "What are the secret numbers?")
        # No such thread: 404, and nothing is written.
        missing = await client.post("/", json=body, headers={"Last-Event-ID": "3"})
        assert missing.status_code == 404
        assert await store.read(ThreadKey("t")) == []
        events = await read_events(client, "POST", "/", json_body=body)
        assert events[-1].type == "RUN_FINISHED"
        end = events[-1].id
        # At the run's end there is no run to go on with: 204.
        done = await client.post("/", json=body, headers={"Last-Event-ID": end})
        assert done.status_code == 204
        # A position the thread does not have: 416.
        beyond = await client.post("/", json=body, headers={"Last-Event-ID": "999"})
        assert beyond.status_code == 416
        # From inside the run: the rest of it, the same events the first stream sent.
        cut = len(events) // 2
        rest = await read_events(
            client, "POST", "/", json_body=body, headers={"Last-Event-ID": events[cut].id}
        )
        assert rest[-1].data == events[-1].data
        assert fold(events[: cut + 1] + rest) == fold(events)
    assert sorted(ran) == ["alice", "bob"]  # the reconnections ran nothing again
    assert sum(isinstance(e.record, TurnStarted) for e in await store.read(ThreadKey("t"))) == 1


@pytest.mark.parametrize("ending", ["server_stop", "client_tools"])
async def test_a_reconnection_inside_the_record_that_ends_the_run_ends_with_it(
    ending: str,
) -> None:
    # The run's end comes in a record whose earlier events carry ids of their own
    # (N:i): the CUSTOM event of a stop the server decided, the calls handed over to
    # the client. A reconnection from one of them gets the rest of the record and
    # ends with the run, as the broken stream would have.
    declared: list[dict[str, Any]] = []
    if ending == "server_stop":
        agent = ScriptedAgent([tool_call("get_secret_number", {"name": "alice"}, id="a")])
        server = AguiServer(agent, tools=tools([]), continuation=False)
    else:
        agent = ScriptedAgent(
            [tool_call("confirm", {}, id="c1"), tool_call("confirm", {}, id="c2")]
        )
        server = AguiServer(agent)
        declared = [{"name": "confirm", "description": "Ask.", "parameters": {"type": "object"}}]
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        body = run_input("t", "go", tools=declared)
        await read_events(client, "POST", "/", json_body=body)
        events = await read_events(client, "GET", "/threads/t/events")  # the log's ids
        assert events[-1].type == "RUN_FINISHED"
        # The ids inside the record that ends the run (each first carried by the event
        # that completes a unit; the events of an open unit after it repeat it).
        inside = [e.id for e in events if e.seq == events[-1].seq and ":" in e.id]
        assert inside
        for position in dict.fromkeys(inside):
            after = next(i for i, e in enumerate(events) if e.id == position) + 1
            with anyio.fail_after(5):
                rest = await read_events(
                    client, "POST", "/", json_body=body, headers={"Last-Event-ID": position}
                )
            assert rest[0].type == "RUN_STARTED"
            assert rest[1:] == events[after:]  # the rest of the run, and its end
