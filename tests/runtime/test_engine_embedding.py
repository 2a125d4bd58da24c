"""The engine as an anyio user embeds it: the caller's scope owns ``run_turn``, the
caller's own errors come out as themselves, and a wrong backend is refused at once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolrelay._reasons import ReasonKind
from toolrelay.core import ToolRegistry
from toolrelay.machines import RunStatus
from toolrelay.runtime import Engine
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
