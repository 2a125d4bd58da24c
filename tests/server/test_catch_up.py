"""Catch-up: a client that left at any sequence number and comes back reads what a
client that never left read; the client going away never cancels the turn."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import anyio
import httpx
import pytest

from toolrelay import ThreadKey, ToolRegistry
from toolrelay.server import AguiServer
from toolrelay.store import MemoryStore, SQLiteStore, TurnEnded
from toolrelay.testing import Gate, ScriptedAgent, Sleep, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import HTTPX_GC_ON_TRIO, Sse, fold, read_events, run_input, serving

pytestmark = pytest.mark.anyio


async def lookup(name: str) -> str:
    """Look a name up."""
    return name.upper()


def tools() -> ToolRegistry:
    return ToolRegistry().register(lookup)


#: What a resumed stream may send again: the beginning of a message or call that was
#: cut (the client replaces it), never anything that completes one.
_REPEATABLE = {
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "REASONING_START",
    "REASONING_MESSAGE_START",
    "REASONING_MESSAGE_CONTENT",
}


def check_resumed(everything: list[Sse], i: int, resumed: list[Sse]) -> None:
    """A client saw ``everything[: i + 1]`` and came back with the last id it saw:
    ``resumed`` is the rest of the stream (no gap), from the start of a message or
    call that was cut, if one was (so nothing complete comes twice)."""
    seen = everything[: i + 1]
    rest = rejoin(seen, resumed)[len(seen) :]
    cut = len(everything) - len(rest)
    assert everything[cut:] == rest, everything[i].id  # the rest, exactly
    assert cut <= i + 1, everything[i].id  # no gap
    again = everything[cut : i + 1]
    assert all(e.type in _REPEATABLE for e in again), (everything[i].id, again)
    assert all(e.id == everything[i].id for e in again), everything[i].id
    assert fold(seen + rest) == fold(everything), everything[i].id


def rejoin(before: list[Sse], after: list[Sse]) -> list[Sse]:
    """What a client saw over two connections: ``after`` repeats RUN_STARTED of the run
    that was open where ``before`` stopped (the resumed stream is a valid AG-UI stream
    on its own); the rest is new."""
    open_run = None
    for event in before:
        if event.type == "RUN_STARTED":
            open_run = event.data["runId"]
        elif event.type in ("RUN_FINISHED", "RUN_ERROR"):
            open_run = None
    if open_run is not None and after:
        assert after[0].type == "RUN_STARTED" and after[0].data["runId"] == open_run
        after = after[1:]
    return before + after


async def test_catch_up_from_every_sequence_number_equals_never_leaving() -> None:
    model = ScriptedAgent(
        [
            text("Looking them up."),
            tool_call("lookup", {"name": "a"}),
            tool_call("lookup", {"name": "b"}),
        ],
        [tool_call("lookup", {"name": "c"})],
        [text("A, B and C.")],
    )
    server = AguiServer(model, tools=tools(), live_text=False)  # every event from the log
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        live = await read_events(client, "POST", "/", json_body=run_input("c1", "go"))
        second = await read_events(client, "POST", "/", json_body=run_input("c1", "again"))
        assert second[-1].type in ("RUN_FINISHED", "RUN_ERROR")
        everything = await read_events(client, "GET", "/threads/c1/events")
        last = everything[-1].seq
        assert everything[: len(live)] == live  # the POST stream is the log's stream
        # After every single event a client may have seen last, by its id (as the
        # Last-Event-ID header, and as ?after=): the resumed stream is the rest.
        for i, event in enumerate(everything[:-1]):
            rest = await read_events(
                client, "GET", "/threads/c1/events", headers={"Last-Event-ID": event.id}
            )
            by_query = await read_events(client, "GET", f"/threads/c1/events?after={event.id}")
            assert rest == by_query
            check_resumed(everything, i, rest)
        # Nothing after the end: no stream at all.
        response = await client.get(f"/threads/c1/events?after={last}")
        assert response.status_code == 204


@HTTPX_GC_ON_TRIO
async def test_leaving_mid_turn_cancels_nothing_and_catch_up_has_no_gap() -> None:
    gate = anyio.Event()
    store = MemoryStore()
    model = ScriptedAgent(
        [tool_call("lookup", {"name": "a"}, id="k1")],
        [Gate(gate), text("Done: A.")],
    )
    server = AguiServer(model, tools=tools(), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        # Hang up once the tool's result arrived; the second run is held at the gate.
        before = await read_events(
            client, "POST", "/", json_body=run_input("c2", "go"), stop_after=5
        )
        assert before[-1].type == "TOOL_CALL_RESULT"
        turn = server.engine.turn("c2")
        assert turn is not None and not turn.finished
        async with anyio.create_task_group() as group:
            tail: list[Sse] = []

            async def follow() -> None:
                tail.extend(
                    await read_events(
                        client,
                        "GET",
                        "/threads/c2/events",
                        headers={"Last-Event-ID": before[-1].id},
                    )
                )

            group.start_soon(follow)
            await anyio.sleep(0.2)
            gate.set()  # the turn goes on while the client reads the live tail
        assert turn.status.value == "completed"  # final, so finished
        everything = await read_events(client, "GET", "/threads/c2/events")
    assert fold(rejoin(before, tail)) == fold(everything)
    assert tail[-1].data["result"]["stopReason"] == "end_turn"
    log = await store.read(ThreadKey("c2"))
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert isinstance(log[-1].record, TurnEnded)


async def test_the_cancel_endpoint_cancels_the_turn() -> None:
    model = ScriptedAgent(
        [tool_call("lookup", {"name": "a"})], [Gate(anyio.Event()), text("never")]
    )
    server = AguiServer(model, tools=tools())
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        async with anyio.create_task_group() as group:
            events: list[Sse] = []

            async def run() -> None:
                events.extend(
                    await read_events(client, "POST", "/", json_body=run_input("c3", "go"))
                )

            group.start_soon(run)
            with anyio.fail_after(10):
                while not any(e.type == "TOOL_CALL_RESULT" for e in events):
                    turn = server.engine.turn("c3")
                    if turn is not None and turn.depth >= 1:
                        break
                    await anyio.sleep(0.02)
            response = await client.post("/threads/c3/cancel")
            assert response.status_code == 200 and response.json()["cancelled"] is True
        assert events[-1].type == "RUN_ERROR"
        assert events[-1].data["code"] == "cancelled"
        again = await client.post("/threads/c3/cancel")
        assert again.json()["cancelled"] is False


@HTTPX_GC_ON_TRIO
@pytest.mark.parametrize("live_text", [False, True], ids=["log-only", "live-text"])
async def test_leaving_live_at_every_event_and_coming_back_loses_and_repeats_nothing(
    live_text: bool,
) -> None:
    """One thread per disconnect point: the client hangs up after its k-th event while
    the turn runs, reconnects at once with Last-Event-ID, and follows to the end."""

    def script(key: object, run_input: object) -> list[object]:
        runs = len([r for r in model.records if r.key == key])
        if runs == 1:
            return [text("Looking up a.", chunk=4), Sleep(0.02), tool_call("lookup", {"name": "a"})]
        if runs == 2:
            return [
                Sleep(0.02),
                tool_call("lookup", {"name": "b"}),
                tool_call("lookup", {"name": "c"}),
            ]
        return [Sleep(0.02), text("It is A, B and C.", chunk=3)]

    model = ScriptedAgent(respond=script)  # type: ignore[arg-type]
    server = AguiServer(model, tools=tools(), live_text=live_text)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        reference = await read_events(client, "POST", "/", json_body=run_input("ref", "go"))
        for k in range(1, len(reference)):
            thread = f"live-{k}"
            before = await read_events(
                client, "POST", "/", json_body=run_input(thread, "go"), stop_after=k
            )
            # (With live text a stream's length varies with timing: this one may have
            # ended within k events, and then there is nothing to come back for.)
            after = (
                []
                if before[-1].type == "RUN_FINISHED"
                else await read_events(
                    client,
                    "GET",
                    f"/threads/{thread}/events",
                    headers={"Last-Event-ID": before[-1].id},
                )
            )
            everything = await read_events(client, "GET", f"/threads/{thread}/events")
            if live_text:
                # A message cut mid-way comes again whole: what the client makes of the
                # two streams is what it makes of one.
                assert fold(rejoin(before, after)) == fold(everything), k
            else:
                check_resumed(everything, k - 1, after)
                assert before == everything[:k]
                assert [e.type for e in everything] == [e.type for e in reference], k
        if live_text:  # the text went out in pieces, before its record
            deltas = [e.data["delta"] for e in reference if e.type == "TEXT_MESSAGE_CONTENT"]
            assert "".join(deltas) == "Looking up a.It is A, B and C."
            assert len(deltas) > 2


@HTTPX_GC_ON_TRIO
async def test_a_store_that_fails_mid_stream_ends_the_stream_and_catch_up_resumes() -> None:
    from toolrelay import StoreUnavailableError
    from toolrelay.store import Entry

    class FlakyStore(MemoryStore):
        broken = False

        async def read(
            self,
            key: ThreadKey,
            *,
            after: int = 0,
            limit: int | None = None,
            max_bytes: int | None = None,
        ) -> list[Entry]:
            if self.broken:
                raise StoreUnavailableError("the disk went away")
            return await super().read(key, after=after, limit=limit, max_bytes=max_bytes)

    gate = anyio.Event()
    store = FlakyStore()
    model = ScriptedAgent([tool_call("lookup", {"name": "a"})], [Gate(gate), text("A.")])
    server = AguiServer(model, tools=tools(), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        before = await read_events(
            client, "POST", "/", json_body=run_input("flaky", "go"), stop_after=5
        )
        async with anyio.create_task_group() as group:
            cut: list[Sse] = []

            async def follow() -> None:
                cut.extend(
                    await read_events(
                        client,
                        "GET",
                        "/threads/flaky/events",
                        headers={"Last-Event-ID": before[-1].id},
                    )
                )

            group.start_soon(follow)
            await anyio.sleep(0.1)
            store.broken = True
            gate.set()
        turn = server.engine.turn("flaky")
        assert turn is not None
        with anyio.fail_after(10):
            await turn.wait_finished()
        assert turn.status.value == "completed"  # the turn did not depend on the stream
        assert all(e.type != "RUN_FINISHED" for e in cut)
        store.broken = False
        rest = await read_events(
            client, "GET", "/threads/flaky/events", headers={"Last-Event-ID": before[-1].id}
        )
        everything = await read_events(client, "GET", "/threads/flaky/events")
    assert fold(rejoin(before, rest)) == fold(everything)
    assert rest[-1].type == "RUN_FINISHED"


async def test_what_a_catch_up_holds_at_once_is_bounded_by_bytes_not_by_the_log(
    tmp_path: Path,
) -> None:
    # Large user messages are stored but never sent: the catch-up stream is small, and
    # what serving it holds at once must not grow with the log it reads through.
    turns, size = 16, 250_000
    store = SQLiteStore(tmp_path / "log.db")
    server = AguiServer(ScriptedAgent(respond=lambda key, ri: text("ok")), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        for n in range(turns):
            body = run_input("big", "x" * size)
            body["messages"][0]["id"] = f"u{n}"
            await read_events(client, "POST", "/", json_body=body)
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            events = await read_events(client, "GET", "/threads/big/events?after=0")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert [e.type for e in events].count("RUN_FINISHED") == turns
    # The log holds 4 MB of messages; one read holds READ_BYTES (256 KiB) or one record.
    assert peak - before < 1_500_000, f"{(peak - before) / 1e6:.1f} MB held at once"
