"""The turns' tasks (``runtime/_tasks.py``): each is the event loop's own task running
its driver (no anyio task handle around it), held by the engine while it lives,
waited for when the engine closes, and an error that escapes one still comes out of
the engine, as a task group's did."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolrelay import Engine, RunStatus, ThreadKey
from toolrelay._reasons import ReasonKind
from toolrelay._runtime import _tasks
from toolrelay.protocol import RunAgentInput
from toolrelay.testing import Hang, ScriptedAgent, text

pytestmark = pytest.mark.anyio


class Boom(BaseException):
    """Not an ``Exception``: no turn catches it, so it escapes the turn's task."""


class BoomOn(ScriptedAgent):
    """A scripted agent whose ``run`` raises :class:`Boom` for one thread."""

    def __init__(self, thread: str, *scripts: Any) -> None:
        super().__init__(*scripts)
        self.thread = thread

    def run(self, key: ThreadKey, run_input: RunAgentInput) -> Any:
        if key.thread_id == self.thread:
            raise Boom("escaped")
        return super().run(key, run_input)


def _task_functions(engine: Engine) -> list[str]:
    """What each live turn's task runs, by the qualified name of its coroutine."""
    live = engine._tasks._live
    if engine._tasks._nursery is not None:  # trio: the nursery's tasks
        tasks = engine._tasks._nursery.child_tasks
        return [t.coro.__qualname__ for t in tasks if t.name != "toolrelay turn deadlines"]
    return [getattr(t.get_coro(), "__qualname__", "") for t in live.values() if t is not None]


async def test_a_turns_task_runs_its_driver_with_nothing_around_it() -> None:
    agent = ScriptedAgent([Hang()], [Hang()], [Hang()])
    async with Engine(agent) as engine:
        turns = [engine.start_turn(f"t{i}", "go") for i in range(3)]
        with anyio.fail_after(5):
            while agent.open_streams < 3:
                await anyio.lowlevel.checkpoint()
        assert _task_functions(engine) == ["TurnDriver.run"] * 3
        for turn in turns:
            turn.cancel()
        with anyio.fail_after(5):
            for turn in turns:
                await turn.wait_finished()
        assert _task_functions(engine) == []
        assert engine.statistics().turns[RunStatus.cancelled] == 3


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_engine_holds_a_parked_turns_task() -> None:
    # asyncio keeps only weak references to tasks: a task that awaits a future no one
    # else holds would be collected mid-turn if the engine did not hold it.
    opened: list[str] = []
    closed: list[str] = []

    class Orphan(ScriptedAgent):
        async def allocate_run(self, key: ThreadKey) -> str | None:
            opened.append(key.thread_id)
            try:
                await asyncio.get_running_loop().create_future()  # held by this frame
            finally:
                closed.append(key.thread_id)
            return None

    async with Engine(Orphan([text("never")])) as engine:
        engine.start_turn("t1", "go")
        with anyio.fail_after(5):
            while not opened:
                await anyio.lowlevel.checkpoint()
        gc.collect()
        await anyio.sleep(0.01)
        assert closed == []
        turn = engine.turn("t1")
        assert turn is not None and not turn.finished
    assert closed == ["t1"]
    assert turn.status is RunStatus.cancelled
    assert turn.reason is not None and turn.reason.kind is ReasonKind.CLOSED


async def test_an_error_that_escapes_a_turns_task_ends_the_others_and_leaves_the_engine() -> None:
    agent = BoomOn("boom", [Hang()], [Hang()])
    with pytest.raises(BaseExceptionGroup) as raised:
        async with Engine(agent) as engine:
            waiting = engine.start_turn("waiting", "go")
            with anyio.fail_after(5):
                while agent.open_streams < 1:
                    await anyio.lowlevel.checkpoint()
            failing = engine.start_turn("boom", "go")
            await anyio.sleep_forever()  # the failure ends the engine's body too
    leaves = list(raised.value.exceptions)
    while len(leaves) == 1 and isinstance(leaves[0], BaseExceptionGroup):
        leaves = list(leaves[0].exceptions)
    assert [type(leaf) for leaf in leaves] == [Boom]
    assert failing.finished and waiting.finished
    assert waiting.status is RunStatus.cancelled
    assert agent.open_streams == 0


async def test_an_engine_left_by_an_outer_cancellation_ends_its_turns_and_waits_for_them(
    anyio_backend: str,
) -> None:
    agent = ScriptedAgent([Hang()], [Hang()])
    with anyio.move_on_after(0.1) as outer:
        async with Engine(agent) as engine:
            turns = [engine.start_turn(f"t{i}", "go") for i in range(2)]
            await anyio.sleep_forever()
    assert outer.cancelled_caught
    # As under anyio's task group: on asyncio the engine's exit ends the turns first;
    # on trio the nursery, inside the cancelled scope, may cancel their tasks before.
    expected = {ReasonKind.CLOSED}
    if anyio_backend == "trio":
        expected.add(ReasonKind.CANCELLED)
    for turn in turns:
        assert turn.status is RunStatus.cancelled
        assert turn.reason is not None and turn.reason.kind in expected
    assert agent.open_streams == 0  # every stream closed before the engine was left
    assert _task_functions(engine) == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_turns_start_through_the_loops_task_factory_unless_it_is_eager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=loop, **options)

    loop.set_task_factory(factory)
    try:
        async with Engine(ScriptedAgent([text("one")], [text("two")])) as engine:
            first = await engine.run_turn("t1", "go")
            assert made.count("TurnDriver.run") == 1  # an instrumenting factory sees it
            # Told apart as asyncio's eager factory (3.12+), it is passed by: a turn
            # must not run its first steps inside start_turn.
            monkeypatch.setattr(_tasks, "_EAGER_CODE", factory.__code__)
            second = engine.start_turn("t2", "go")
            assert second.status is RunStatus.idle and second.run_id is None
            with anyio.fail_after(5):
                await second.wait_finished()
            assert made.count("TurnDriver.run") == 1
    finally:
        loop.set_task_factory(None)
    assert (first.status, second.status) == (RunStatus.completed, RunStatus.completed)
