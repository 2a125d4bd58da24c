"""Who may do what: bearer tokens, threads owned by their creator, bounded bodies,
malformed input: each a clear HTTP error, and nothing written."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from toolrelay import ThreadKey, ToolRegistry
from toolrelay.server import AguiServer, BearerTokens, Request
from toolrelay.store import MemoryStore, SQLiteStore
from toolrelay.testing import ScriptedAgent, text

sys.path.insert(0, str(Path(__file__).parent))
from _serving import HTTPX_GC_ON_TRIO, read_events, run_input, serving

pytestmark = pytest.mark.anyio

ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


async def lookup(name: str) -> str:
    """Look a name up."""
    return name


def make_server(store: MemoryStore | SQLiteStore, **options: object) -> AguiServer:
    agent = ScriptedAgent(respond=lambda key, ri: text("hello"))
    agent = options.pop("agent", agent)  # type: ignore[assignment]
    return AguiServer(
        agent,
        tools=ToolRegistry().register(lookup),
        store=store,
        authenticator=BearerTokens({"alice-token": "alice", "bob-token": "bob"}),
        **options,  # type: ignore[arg-type]
    )


async def nothing_written(store: MemoryStore) -> None:
    assert await store.threads() == []


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic YWxpY2U6eA=="}],
    ids=["no-token", "wrong-token", "other-scheme"],
)
async def test_a_request_without_a_valid_token_is_401(headers: dict[str, str]) -> None:
    store = MemoryStore()
    async with serving(make_server(store)) as url, httpx.AsyncClient(base_url=url) as client:
        for method, path in [
            ("POST", "/"),
            ("GET", "/threads/t/events"),
            ("POST", "/threads/t/cancel"),
            ("GET", "/metrics"),
        ]:
            response = await client.request(
                method, path, json=run_input("t", "hi"), headers=headers
            )
            assert response.status_code == 401, (method, path)
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["error"]["code"] == "unauthorized"
        assert (await client.get("/healthz")).status_code == 200
    await nothing_written(store)


async def test_another_principals_thread_is_not_there() -> None:
    store = MemoryStore()
    async with serving(make_server(store)) as url, httpx.AsyncClient(base_url=url) as client:
        events = await read_events(
            client, "POST", "/", json_body=run_input("mine", "hi"), headers=ALICE
        )
        assert events[-1].type == "RUN_FINISHED"
        before = await store.read(ThreadKey("mine"))
        for method, path, body in [
            ("POST", "/", run_input("mine", "let me in")),
            ("GET", "/threads/mine/events", None),
            ("GET", "/threads/mine/events?after=0", None),
            ("POST", "/threads/mine/cancel", None),
        ]:
            response = await client.request(method, path, json=body, headers=BOB)
            assert response.status_code == 404, (method, path)
            assert "data:" not in response.text  # never its events
        # The same answer as for a thread that does not exist at all.
        missing = await client.get("/threads/nobody/events", headers=BOB)
        assert missing.status_code == 404
        assert (await store.read(ThreadKey("mine"))) == before  # nothing written
        info = await store.thread(ThreadKey("mine"))
        assert info is not None and info.owner == "alice"
        # Alice still reads her own thread.
        assert (await read_events(client, "GET", "/threads/mine/events", headers=ALICE))[
            -1
        ].type == "RUN_FINISHED"


async def test_an_oversize_body_is_413_and_nothing_is_written() -> None:
    store = MemoryStore()
    server = make_server(store, max_body_bytes=2_000)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        big = run_input("big", "x" * 5_000)
        response = await client.post("/", json=big, headers=ALICE)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "body_too_large"

        # No Content-Length: the bound holds as the body arrives.
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b"[" * 500

        response = await client.post("/", content=chunks(), headers=ALICE)
        assert response.status_code == 413
    await nothing_written(store)


@pytest.mark.parametrize("field", ["state", "forwardedProps"])
async def test_a_state_or_props_nested_past_max_json_depth_is_422_and_nothing_written(
    field: str,
) -> None:
    from toolrelay import Limits

    store = MemoryStore()
    server = make_server(store, engine_options={"limits": Limits(max_json_depth=16)})
    deep: object = "bottom"
    for _ in range(17):
        deep = {"down": deep}
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/", json=run_input("d", "hi", **{field: deep}), headers=ALICE)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "invalid_run_input"
        assert "max_json_depth" in response.json()["error"]["message"]
        shallow: object = "bottom"
        for _ in range(15):
            shallow = {"down": shallow}
        ok = await client.post("/", json=run_input("d", "hi", **{field: shallow}), headers=ALICE)
        assert ok.status_code == 200 and "RUN_FINISHED" in ok.text
    log = await store.read(ThreadKey("d"))
    assert [type(e.record).__name__ for e in log].count("TurnStarted") == 1  # the second only


async def test_a_body_that_trickles_in_is_408_and_its_connection_closed() -> None:
    # A client that sends its headers and then a byte now and then would hold its
    # connection (and its buffer) for as long as it liked.
    store = MemoryStore()
    server = make_server(store, body_timeout=0.3)
    async with serving(server) as url:
        host, port = httpx.URL(url).host, httpx.URL(url).port
        assert port is not None
        async with await anyio.connect_tcp(host, port) as stream:
            await stream.send(
                b"POST / HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer alice-token\r\nContent-Length: 100\r\n\r\n{"
            )
            answer = b""
            with anyio.fail_after(10):
                while b"\r\n\r\n" not in answer or b"body_timeout" not in answer:
                    answer += await stream.receive()
        assert answer.startswith(b"HTTP/1.1 408"), answer
        async with httpx.AsyncClient(base_url=url) as client:  # the server carries on
            assert (await client.get("/healthz")).status_code == 200
    await nothing_written(store)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "invalid_run_input"),
        (b'{"threadId": "t"}', "invalid_run_input"),
        (b'{"threadId": 5, "runId": "r", "messages": []}', "invalid_run_input"),
        (b'{"threadId": "", "runId": "r", "messages": []}', "invalid_run_input"),
        (b'{"threadId": "t", "runId": "r", "messages": []}', "invalid_run_input"),
        (
            b'{"threadId": "t", "runId": "r", "messages":'
            b' [{"id": "a", "role": "assistant", "content": "hi"}]}',
            "invalid_run_input",
        ),
        (
            b'{"threadId": "t", "runId": "r", "messages":'
            b' [{"id": "u", "role": "user", "content": "hi"}],'
            b' "tools": [{"name": "lookup", "description": "shadows a server tool"}]}',
            "tool_conflict",
        ),
        (
            b'{"threadId": "t", "runId": "r", "messages":'
            b' [{"id": "u", "role": "user", "content": "hi"}],'
            b' "tools": [{"name": "bad name!", "description": "x"}]}',
            "invalid_tool",
        ),
        (
            b'{"threadId": "t", "runId": "r", "messages":'
            b' [{"id": "u", "role": "user", "content": "hi"},'
            b' {"id": "r1", "role": "tool", "toolCallId": "nope", "content": "1"}]}',
            "no_pending_call",
        ),
    ],
    ids=[
        "not-json",
        "missing-fields",
        "wrong-type",
        "empty-thread",
        "no-message",
        "no-user-message",
        "tool-conflict",
        "invalid-tool-name",
        "unknown-call",
    ],
)
async def test_a_malformed_run_input_is_a_clear_error(body: bytes, code: str) -> None:
    store = MemoryStore()
    async with serving(make_server(store)) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.post(
            "/", content=body, headers={**ALICE, "Content-Type": "application/json"}
        )
    assert 400 <= response.status_code < 500
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    await nothing_written(store)


async def test_a_pluggable_authenticator_decides_the_principal() -> None:
    class HeaderAuth:
        async def authenticate(self, request: Request) -> str | None:
            return request.headers.get("x-user")

    store = MemoryStore()
    agent = ScriptedAgent(respond=lambda key, ri: text("hi"))
    server = AguiServer(agent, store=store, authenticator=HeaderAuth())
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/", json=run_input("x", "hi"))).status_code == 401
        events = await read_events(
            client, "POST", "/", json_body=run_input("x", "hi"), headers={"X-User": "carol"}
        )
        assert events[-1].type == "RUN_FINISHED"
    info = await store.thread(ThreadKey("x"))
    assert info is not None and info.owner == "carol"


async def test_a_token_and_an_authenticator_are_not_both_given() -> None:
    with pytest.raises(ValueError, match="not both"):
        AguiServer(ScriptedAgent(), token="t", authenticator=BearerTokens({"a": "b"}))
    with pytest.raises(ValueError):
        BearerTokens({})


async def test_live_turns_are_bounded_and_a_run_past_the_bound_is_429() -> None:
    import anyio

    from toolrelay.testing import Gate

    gate = anyio.Event()
    store = MemoryStore()
    agent = ScriptedAgent(respond=lambda key, ri: [Gate(gate), text("done")])
    server = make_server(store, max_live_turns=2, agent=agent)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        async with anyio.create_task_group() as group:

            async def start(thread: str) -> None:
                body = run_input(thread, "hi")
                await read_events(client, "POST", "/", json_body=body, headers=ALICE)

            group.start_soon(start, "b1")
            group.start_soon(start, "b2")
            with anyio.fail_after(10):
                while len(await store.threads(live=True)) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            refused = await client.post("/", json=run_input("b3", "hi"), headers=ALICE)
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "too_many_turns"
            assert await store.thread(ThreadKey("b3")) is None  # nothing written
            gate.set()
        done = await read_events(
            client, "POST", "/", json_body=run_input("b3", "hi"), headers=ALICE
        )
        assert done[-1].type == "RUN_FINISHED"


@pytest.mark.parametrize(
    ("position", "status"), [("x", 400), ("-1", 400), ("3:-1", 400), ("99", 416), ("99:0", 416)]
)
async def test_a_bad_catch_up_position_is_a_clear_error(position: str, status: int) -> None:
    store = MemoryStore()
    async with serving(make_server(store)) as url, httpx.AsyncClient(base_url=url) as client:
        await read_events(client, "POST", "/", json_body=run_input("p", "hi"), headers=ALICE)
        response = await client.get(
            "/threads/p/events", headers={**ALICE, "Last-Event-ID": position}
        )
        assert response.status_code == status
        assert response.json()["error"]["code"] == "bad_position"


@pytest.mark.parametrize("seq", [2**63 + 1, 10**23])
async def test_a_position_past_the_stores_numbers_is_416_not_a_crash(
    seq: int, tmp_path: Path
) -> None:
    # SQLite's integers stop at 2**63 - 1: a position past them is one no thread has.
    store = SQLiteStore(tmp_path / "log.db")
    async with serving(make_server(store)) as url, httpx.AsyncClient(base_url=url) as client:
        body = run_input("p", "hi")
        await read_events(client, "POST", "/", json_body=body, headers=ALICE)
        for position in (f"{seq}:0", f"{seq}"):
            asked = [
                await client.get(f"/threads/p/events?after={position}", headers=ALICE),
                await client.get("/threads/p/events", headers={**ALICE, "Last-Event-ID": position}),
                await client.post("/", json=body, headers={**ALICE, "Last-Event-ID": position}),
            ]
            for response in asked:
                assert response.status_code == 416, (position, response.text)
                assert response.json()["error"]["code"] == "bad_position"


@HTTPX_GC_ON_TRIO
async def test_open_streams_are_bounded_and_one_more_is_429() -> None:
    import anyio

    from toolrelay.testing import Gate

    gate = anyio.Event()
    store = MemoryStore()
    agent = ScriptedAgent(respond=lambda key, ri: [Gate(gate), text("done")])
    server = make_server(store, max_streams=2, agent=agent)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        async with anyio.create_task_group() as group:

            async def start(thread: str) -> None:
                body = run_input(thread, "hi")
                await read_events(client, "POST", "/", json_body=body, headers=ALICE)

            group.start_soon(start, "s1")
            group.start_soon(start, "s2")
            with anyio.fail_after(10):
                while len(await store.threads(live=True)) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            for method, path in [("POST", "/"), ("GET", "/threads/s1/events")]:
                refused = await client.request(
                    method, path, json=run_input("s3", "hi"), headers=ALICE
                )
                assert refused.status_code == 429, path
                assert refused.json()["error"]["code"] == "too_many_streams"
            assert await store.thread(ThreadKey("s3")) is None  # nothing written
            gate.set()
        # The streams ended: there is room again.
        done = await read_events(client, "GET", "/threads/s1/events", headers=ALICE)
        assert done[-1].type == "RUN_FINISHED"
