"""The engine as an anyio user embeds it: the caller's scope owns ``run_turn``, the
caller's own errors come out as themselves, and a wrong backend is refused at once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolrelay import Engine, RunStatus, ThreadKey, ToolDefinitionError, ToolRegistry
from toolrelay._reasons import ReasonKind
from toolrelay.testing import Hang, ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio


async def test_cancelling_the_scope_awaiting_run_turn_cancels_the_turn() -> None:
    agent = ScriptedAgent([text("thinking..."), Hang()])
    async with Engine(agent) as engine:
        with anyio.move_on_after(0.2) as scope:
            await engine.run_turn("t1", "go")
        assert scope.cancelled_caught
        turn = engine.turn("t1")
        assert turn is not None
        assert turn.status is RunStatus.cancelled  # at once, not when the engine closes
        assert turn.reason is not None and turn.reason.kind is ReasonKind.CANCELLED
        with anyio.fail_after(2):
            await turn.wait_finished()
        assert agent.open_streams == 0
        assert engine.registry.get_handle(turn.key) is None


async def test_a_turn_started_detached_outlives_the_scope_that_started_it() -> None:
    agent = ScriptedAgent([tool_call("slow", id="c1")], [text("done")])

    async def slow() -> str:
        await anyio.sleep(0.3)
        return "ok"

    async with Engine(agent, tools=ToolRegistry.of(slow)) as engine:
        with anyio.move_on_after(0.05):
            turn = engine.start_turn("t1", "go")
            await turn.wait_finished()
        assert not turn.finished
        with anyio.fail_after(5):
            await turn.wait_finished()
        assert turn.status is RunStatus.completed


async def test_the_callers_own_error_comes_out_of_the_engine_as_itself() -> None:
    class Mine(Exception):
        pass

    with pytest.raises(Mine, match="the caller's bug"):  # not an ExceptionGroup
        async with Engine(ScriptedAgent([text("hi")])) as engine:
            engine.start_turn("t1", "go")
            raise Mine("the caller's bug")


async def test_a_turn_running_when_the_callers_error_leaves_the_engine_is_closed() -> None:
    agent = ScriptedAgent([Hang()])
    with pytest.raises(LookupError):
        async with Engine(agent) as engine:
            turn = engine.start_turn("t1", "go")
            await anyio.sleep(0.01)
            raise LookupError("caller")
    assert turn.status is RunStatus.cancelled
    assert turn.reason is not None and turn.reason.kind is ReasonKind.CLOSED
    assert agent.open_streams == 0


@pytest.mark.parametrize("wrong", ["http://127.0.0.1:8000/agent", None, object(), 42])
def test_anything_but_a_backend_is_refused_at_construction(wrong: Any) -> None:
    with pytest.raises(TypeError, match="expected an AgentBackend") as caught:
        Engine(wrong)
    if isinstance(wrong, str):
        assert "AguiHttpBackend(url)" in str(caught.value)


# -- threads kept in memory ----------------------------------------------------------------


async def test_forget_drops_an_idle_thread_and_keeps_a_live_one() -> None:
    agent = ScriptedAgent([text("one")], [Hang()])
    async with Engine(agent) as engine:
        await engine.run_turn("done", "hi")
        live = engine.start_turn("live", "hi")
        await anyio.sleep(0.01)
        assert engine.forget("live") is False
        assert engine.forget("done") is True
        assert engine.forget("done") is False  # nothing left to drop
        assert engine.threads == (ThreadKey("live"),)
        assert engine.turn("done") is None and engine.conversation("done") is None
        assert engine.statistics().threads == 1
        live.cancel()
    assert live.status is RunStatus.cancelled


async def test_a_forgotten_thread_starts_afresh_without_a_store() -> None:
    agent = ScriptedAgent([text("first answer")], [text("second answer")])
    async with Engine(agent) as engine:
        await engine.run_turn("t1", "hello")
        engine.forget("t1")
        turn = await engine.run_turn("t1", "again")
    assert [m.content for m in agent.inputs[1].messages] == ["again"]
    assert turn.status is RunStatus.completed


async def test_max_threads_bounds_the_threads_held_in_memory() -> None:
    turns = 300
    agent = ScriptedAgent(*([text("ok")] for _ in range(turns)))
    async with Engine(agent, max_threads=20) as engine:
        engine.focus("thread-0")
        for i in range(turns):
            await engine.run_turn(f"thread-{i}", "hi")
            assert len(engine.threads) <= 20
        stats = engine.statistics()
    assert stats.threads == 20
    assert stats.turns[RunStatus.completed] == turns
    # The focused thread is never evicted; the rest are the most recent ones.
    assert ThreadKey("thread-0") in engine.threads
    assert engine.threads[-1] == ThreadKey(f"thread-{turns - 1}")
    assert ThreadKey("thread-1") not in engine.threads


def test_a_negative_thread_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_threads"):
        Engine(ScriptedAgent(), max_threads=-1)


async def test_a_registry_a_turn_uses_is_frozen_so_no_turn_sees_its_tools_change() -> None:
    async def first() -> str:
        return "1"

    async def second() -> str:
        return "2"

    tools = ToolRegistry()
    tools.register(first)  # the plain call registers
    async with Engine(ScriptedAgent([text("hi")]), tools=tools) as engine:
        await engine.run_turn("t1", "go")
    with pytest.raises(ToolDefinitionError, match="frozen"):
        tools.register(second)
    assert tools.names == ("first",)
