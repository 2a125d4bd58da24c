"""Two ``AguiServer``s sharing one PostgreSQL store, in this process, on asyncio and
trio: a client of one follows a turn the other runs (the commit feed wakes its
stream), a thread held by one is refused by the other, and a turn whose claim was
lost is taken over by the other's takeover loop while the first stops working on it.
(The same with real processes, SIGKILL and SIGSTOP: ``test_scaleout.py``.)"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx
import psycopg
import pytest

from toolrelay import RunStatus, ThreadKey, ToolRegistry
from toolrelay.server import AguiServer
from toolrelay.store import PostgresStore, ToolFinished, TurnEnded
from toolrelay.testing import Gate, ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))

from _serving import HTTPX_GC_ON_TRIO, Sse, fold, read_events, run_input, serving

pytestmark = [pytest.mark.anyio, HTTPX_GC_ON_TRIO]


async def until(condition: Callable[[], Awaitable[bool]]) -> None:
    with anyio.fail_after(20):
        while True:
            if await condition():
                return
            await anyio.sleep(0.02)


@asynccontextmanager
async def two_servers(
    dsn: str, agents: tuple[ScriptedAgent, ScriptedAgent], tools: ToolRegistry
) -> AsyncIterator[tuple[tuple[AguiServer, str], tuple[AguiServer, str]]]:
    async with AsyncExitStack() as stack:
        served = []
        for name, agent in zip("ab", agents, strict=True):
            server = AguiServer(
                agent,
                tools=tools,
                store=PostgresStore(dsn),
                worker=name,
                lease=30,
                takeover_interval=0.1,
                heartbeat=1,
            )
            assert server.shared
            served.append((server, await stack.enter_async_context(serving(server))))
        yield served[0], served[1]


async def test_a_client_of_one_server_follows_the_turn_another_runs(postgres_dsn: str) -> None:
    gate = anyio.Event()
    key = ThreadKey("t")

    async def lookup(name: str) -> str:
        """Look a name up."""
        return name.upper()

    tools = ToolRegistry().register(lookup)
    runs = ScriptedAgent([tool_call("lookup", {"name": "x"})], [Gate(gate), text("Found X.")])
    idle = ScriptedAgent()
    async with (
        two_servers(postgres_dsn, (runs, idle), tools) as ((a, a_url), (b, b_url)),
        httpx.AsyncClient(timeout=30) as client,
    ):
        async with anyio.create_task_group() as group:
            posted: list[Sse] = []
            followed: list[Sse] = []

            async def post() -> None:
                posted.extend(
                    await read_events(client, "POST", a_url + "/", json_body=run_input("t", "go"))
                )

            group.start_soon(post)

            async def tool_round_written() -> bool:  # a's model then waits for the gate
                return any(isinstance(e.record, ToolFinished) for e in await a.store.read(key))

            await until(tool_round_written)

            async def follow() -> None:
                followed.extend(await read_events(client, "GET", b_url + "/threads/t/events"))

            group.start_soon(follow)
            busy = await client.post(b_url + "/", json=run_input("t", "me too"))
            assert busy.status_code == 409 and busy.json()["error"]["code"] == "thread_busy"
            await anyio.sleep(0.2)
            gate.set()  # a's model answers: b's client sees it through the commit feed
        assert b.engine.turn("t") is None  # b ran nothing
        assert followed[-1].type == "RUN_FINISHED" and posted[-1].type == "RUN_FINISHED"
        assert fold(followed) == fold(posted)
        seqs = [e.seq for e in followed]
        assert seqs == sorted(seqs)
        info = await b.store.thread(key)
        assert info is not None and followed[-1].seq == info.last_seq


async def test_a_turn_whose_claim_was_lost_is_taken_over_and_its_first_server_stops(
    postgres_dsn: str,
) -> None:
    entered, release = anyio.Event(), anyio.Event()
    calls: list[str] = []

    async def slow(n: int) -> int:
        """Takes its time."""
        calls.append(f"slow {n}")
        entered.set()
        await release.wait()
        return n * 2

    tools = ToolRegistry().register(slow)
    first = ScriptedAgent([tool_call("slow", {"n": 1}, id="c1")], [text("never")])
    second = ScriptedAgent([text("finished by b")])
    async with (
        two_servers(postgres_dsn, (first, second), tools) as ((a, a_url), (b, _)),
        httpx.AsyncClient(timeout=30) as client,
    ):
        async with anyio.create_task_group() as group:
            posted: list[Sse] = []

            async def post() -> None:
                posted.extend(
                    await read_events(client, "POST", a_url + "/", json_body=run_input("t", "go"))
                )

            group.start_soon(post)
            with anyio.fail_after(10):
                await entered.wait()
            # a stalls past its lease (forced here): b's takeover loop takes the turn.
            with psycopg.connect(postgres_dsn, autocommit=True) as admin:
                admin.execute("UPDATE toolrelay.claims SET expires_at = 0")

            async def taken_over() -> bool:
                return b.engine.turn("t") is not None

            await until(taken_over)
            turn = b.engine.turn("t")
            assert turn is not None
            with anyio.fail_after(20):
                await turn.wait_finished()
            assert turn.status is RunStatus.completed
            release.set()  # a's tool returns: nothing of it lands, a lets the turn go

            async def a_let_go() -> bool:
                mine = a.engine.turn("t")
                return mine is None or mine.finished

            await until(a_let_go)
        assert calls == ["slow 1"]  # not run again: not idempotent
        entries = await b.store.read(ThreadKey("t"))
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        ends = [e.record for e in entries if isinstance(e.record, TurnEnded)]
        assert [end.status for end in ends] == ["completed"]
        (finished,) = [e.record for e in entries if isinstance(e.record, ToolFinished)]
        assert "not run again" in (finished.result.error or "")
        assert posted[-1].type == "RUN_FINISHED"  # a's client got the end b wrote
