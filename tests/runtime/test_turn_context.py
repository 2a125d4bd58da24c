"""A turn's own ``context`` and ``forwardedProps``: sent with every run of the turn, in
place of the engine's, and kept in the store so that a retried or recovered turn sends
them again."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from toolrelay import Engine, RunStatus, StreamDroppedError, ThreadKey, ToolRegistry, tool
from toolrelay.protocol import Context, RunAgentInput, StateSnapshotEvent
from toolrelay.store import (
    Record,
    SQLiteStore,
    ToolsStarted,
    TurnStarted,
    decode_record,
    encode_record,
    replay,
)
from toolrelay.testing import Raise, ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio

KEY = ThreadKey("t1")
ENGINE_CONTEXT = (Context(description="The application", value="a test"),)
PAGE = (Context(description="The page the user is on", value="/settings"),)
PROPS = {"model": "small", "user": {"plan": "pro"}}


async def lookup(name: str) -> int:
    """Look up a person's number."""
    return {"alice": 42}[name]


def _sent(run_input: RunAgentInput) -> tuple[list[Context], object]:
    return list(run_input.context), run_input.forwarded_props


async def test_a_turns_own_context_and_props_go_with_each_of_its_runs() -> None:
    agent = ScriptedAgent(
        [tool_call("lookup", {"name": "alice"})],
        [text("Alice is 42.")],
        [text("Hello.")],
    )
    async with Engine(
        agent,
        tools=ToolRegistry.of(lookup),
        context=ENGINE_CONTEXT,
        forwarded_props={"model": "big"},
    ) as engine:
        turn = await engine.run_turn(KEY, "Alice?", context=PAGE, forwarded_props=PROPS)
        later = await engine.run_turn(KEY, "Hi")
    assert turn.status is RunStatus.completed and later.status is RunStatus.completed
    first, continuation, other = agent.inputs
    assert _sent(first) == _sent(continuation) == (list(PAGE), PROPS)
    assert _sent(other) == (list(ENGINE_CONTEXT), {"model": "big"})  # the engine's again
    assert (tuple(turn.context), turn.forwarded_props) == (PAGE, PROPS)
    assert (tuple(later.context), later.forwarded_props) == (ENGINE_CONTEXT, {"model": "big"})


async def test_a_retry_sends_the_failed_turns_own_context_again_also_after_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    dropped = ScriptedAgent([text("half"), Raise(StreamDroppedError("reset"))], [text("fine")])
    async with Engine(dropped, context=ENGINE_CONTEXT, store=SQLiteStore(path)) as engine:
        failed = await engine.run_turn(KEY, "hello", context=PAGE, forwarded_props=PROPS)
        assert failed.status is RunStatus.failed
        again = await engine.retry(KEY)
        await again.wait_finished()
        assert again.status is RunStatus.completed
    assert _sent(dropped.inputs[1]) == (list(PAGE), PROPS)  # retried from memory

    restarted = ScriptedAgent([Raise(StreamDroppedError("reset"))])
    async with Engine(restarted, store=SQLiteStore(path)) as engine:
        failed = await engine.run_turn(KEY, "more", context=PAGE, forwarded_props=PROPS)
        assert failed.status is RunStatus.failed
    retried = ScriptedAgent([text("fine")])
    async with Engine(retried, context=ENGINE_CONTEXT, store=SQLiteStore(path)) as engine:
        again = await engine.retry(KEY)  # read from the log: the engine never held it
        await again.wait_finished()
        assert again.status is RunStatus.completed
    assert _sent(retried.inputs[0]) == (list(PAGE), PROPS)


async def test_a_turn_recovered_after_a_crash_sends_its_own_context_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    running = anyio.Event()
    release = anyio.Event()

    @tool(name="lookup", idempotent=True)
    async def held(name: str) -> int:
        """Look up a person's number (waits until released)."""
        running.set()
        await release.wait()
        return 42

    agent = ScriptedAgent([tool_call("lookup", {"name": "alice"})], [text("42.")])
    async with Engine(agent, tools=ToolRegistry.of(held), store=SQLiteStore(path)) as engine:
        turn = engine.start_turn(KEY, "Alice?", context=PAGE, forwarded_props=PROPS)
        with anyio.fail_after(5):
            await running.wait()
        store = SQLiteStore(path)
        crashed: list[Record] = [e.record for e in await store.read(KEY)]  # what a crash leaves
        await store.aclose()
        release.set()
        await turn.wait_finished()
    assert isinstance(crashed[-1], ToolsStarted)

    store = SQLiteStore(path)
    await store.delete_thread(KEY)
    await store.append(KEY, crashed)
    await store.aclose()
    recovered = ScriptedAgent([text("42.")])
    tools = ToolRegistry.of(tool(name="lookup", idempotent=True)(lookup))
    with anyio.fail_after(5):
        async with Engine(
            recovered, tools=tools, context=ENGINE_CONTEXT, store=SQLiteStore(path)
        ) as engine:
            resumed = engine.turn(KEY)
            assert resumed is not None
            await resumed.wait_finished()
            assert resumed.status is RunStatus.completed
    (continuation,) = recovered.inputs
    assert _sent(continuation) == (list(PAGE), PROPS)


async def test_a_turn_started_record_of_an_older_version_reads_as_the_engines_own(
    tmp_path: Path,
) -> None:
    mine = TurnStarted(turn_id="x", context=PAGE, forwarded_props=PROPS)
    assert decode_record(encode_record(mine)) == mine
    plain = encode_record(TurnStarted(turn_id="x"))
    assert b"context" not in plain and b"forwarded" not in plain  # as older versions wrote
    older = decode_record(plain)
    assert isinstance(older, TurnStarted)
    assert (older.context, older.forwarded_props) == (None, None)
    store = SQLiteStore(tmp_path / "t.db")
    async with Engine(ScriptedAgent([text("hi")]), store=store) as engine:
        await engine.run_turn(KEY, "hello")
    reopened = SQLiteStore(tmp_path / "t.db")
    history = replay(await reopened.read(KEY))
    await reopened.aclose()
    assert history.last_ended is not None
    assert (history.last_ended.context, history.last_ended.forwarded_props) == (None, None)
    assert msgspec.json.decode(encode_record(mine))["context"][0]["value"] == "/settings"


async def test_a_state_given_to_a_turn_replaces_the_threads_also_one_the_store_held(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    first = ScriptedAgent([StateSnapshotEvent(snapshot={"step": 1, "items": ["a"]}), text("ok")])
    async with Engine(first, store=SQLiteStore(path)) as engine:
        await engine.run_turn(KEY, "start")
    # A new engine: the thread is loaded from the store when the turn starts, and the
    # given state wins over the one the log holds.
    later = ScriptedAgent([text("noted")], [text("again")])
    async with Engine(later, store=SQLiteStore(path)) as engine:
        edited = {"step": 2, "items": ["a", "b"]}
        turn = await engine.run_turn(KEY, "I added b", state=edited)
        assert turn.status is RunStatus.completed
        assert turn.conversation.state == edited
        await engine.run_turn(KEY, "and now?")  # no state given: the thread's
    assert [i.state for i in later.inputs] == [edited, edited]
    reopened = SQLiteStore(path)
    entries = await reopened.read(KEY)
    await reopened.aclose()
    assert replay(entries).state == edited
    kinds = [type(e.record).__name__ for e in entries]
    given = kinds.index("TurnStarted", kinds.index("TurnEnded"))
    assert kinds[given : given + 3] == ["TurnStarted", "MessageSaved", "StateSaved"]


async def test_a_state_given_without_a_store_is_the_turns_and_the_threads() -> None:
    agent = ScriptedAgent([text("a")], [text("b")])
    async with Engine(agent) as engine:
        await engine.run_turn(KEY, "one", state=[1, 2])
        await engine.run_turn(KEY, "two")
    assert [i.state for i in agent.inputs] == [[1, 2], [1, 2]]
