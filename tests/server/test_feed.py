"""LogFeed: the log read as AG-UI events, from any point, and its checkpoints."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import httpx
import pytest

from toolrelay import ThreadKey, ToolRegistry
from toolrelay.protocol import encode_event
from toolrelay.server import AguiServer, LogFeed
from toolrelay.store import Entry, MemoryStore
from toolrelay.testing import ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import read_events, run_input, serving

pytestmark = pytest.mark.anyio


async def lookup(name: str) -> str:
    """Look a name up."""
    return name.upper()


class CountingStore(MemoryStore):
    """A MemoryStore that remembers where each read started."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    async def read(
        self,
        key: ThreadKey,
        *,
        after: int = 0,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> list[Entry]:
        self.reads.append(after)
        return await super().read(key, after=after, limit=limit, max_bytes=max_bytes)


def events_of(feed: LogFeed, entries: Sequence[Entry]) -> list[bytes]:
    return [encode_event(event) for entry in entries for event in feed.feed(entry)]


async def test_a_copied_checkpoint_folds_on_like_the_feed_it_came_from() -> None:
    store = CountingStore()
    model = ScriptedAgent(
        [text("Looking."), tool_call("lookup", {"name": "a"})],
        [tool_call("lookup", {"name": "b"})],
        [text("A and B.")],
        respond=lambda key, ri: text("again"),
    )
    server = AguiServer(model, tools=ToolRegistry().register(lookup), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        await read_events(client, "POST", "/", json_body=run_input("f", "one"))
        second = run_input("f", "two")
        second["messages"][0]["id"] = "u-two"
        store.reads.clear()
        await read_events(client, "POST", "/", json_body=second)
        # The request started from the thread's checkpoint: no read from the start.
        assert 0 not in store.reads
    log = await store.read(ThreadKey("f"))
    whole = events_of(LogFeed("f", lambda turn, name: False), log)
    for n in range(len(log) + 1):
        feed = LogFeed("f", lambda turn, name: False)
        before = events_of(feed, log[:n])
        assert before + events_of(feed.copy(), log[n:]) == whole, n


async def test_streams_that_ended_leave_nothing_behind() -> None:
    store = MemoryStore()
    server = AguiServer(ScriptedAgent(respond=lambda key, ri: text("hi")), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        for n in range(5):
            await read_events(client, "POST", "/", json_body=run_input(f"gone-{n}", "hi"))
            await read_events(client, "GET", f"/threads/gone-{n}/events")
        watched = server.store
        # The server finishes a response a moment after the client read its end.
        with anyio.fail_after(5):
            while server._streams:  # noqa: ASYNC110 - nothing to wait on from outside
                await anyio.sleep(0.01)
        assert watched._waiters == {} and watched._watching == {}
        assert server._followers == {}
