"""What turns leave to Python's cycle collector (issue 16): nothing.

Every object a turn makes is freed by its reference count as soon as the turn lets go
of it, so with thousands of live turns the collector only walks them; it never has
finished turns to collect. A cycle through a turn's objects (a closure holding the
turn, an exception kept with its traceback, a scope holding its task) would make every
finished turn wait for a full collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from types import (
    AsyncGeneratorType,
    CodeType,
    CoroutineType,
    FrameType,
    FunctionType,
    GeneratorType,
    MethodType,
)

import anyio
import pytest

import toolrelay
from toolrelay import (
    ApprovalError,
    Engine,
    RunStatus,
    StateChanged,
    ThreadKey,
    ToolRegistry,
    Turn,
)
from toolrelay._runtime._driver import TurnDriver
from toolrelay.protocol import RunAgentInput, ToolMessage
from toolrelay.testing import Hang, ScriptedAgent, text, tool_call
from toolrelay.testing._scripted import Script

pytestmark = pytest.mark.anyio


async def lookup(hop: int) -> str:
    """Look something up."""
    return f"result {hop}"


def _two_hops(key: ThreadKey, run_input: RunAgentInput) -> Script:
    hop = sum(1 for m in run_input.messages if isinstance(m, ToolMessage))
    if hop < 2:
        return [tool_call("lookup", {"hop": hop})]
    return [text("Both lookups are done.")]


_PACKAGE = str(Path(toolrelay.__file__).parent)


def _code_of(o: object) -> CodeType | None:
    if isinstance(o, FrameType):
        return o.f_code
    if isinstance(o, CoroutineType):
        return o.cr_code
    if isinstance(o, GeneratorType):
        return o.gi_code
    if isinstance(o, AsyncGeneratorType):
        return o.ag_code
    if isinstance(o, FunctionType):
        return o.__code__
    return None


def _ours(o: object) -> bool:
    """Made by toolrelay: one of its types, or a frame, coroutine, generator or function
    of its code, or a method bound to one of its objects."""
    if isinstance(o, MethodType):
        o = o.__self__
    if type(o).__module__.startswith("toolrelay"):
        return True
    code = _code_of(o)
    return code is not None and code.co_filename.startswith(_PACKAGE)


def _names(garbage: list[object]) -> list[str]:
    return sorted(repr(o)[:80] for o in garbage if _ours(o))


class _SaveAll:
    """The collector off, and what it finds kept in ``gc.garbage`` instead of freed."""

    def __enter__(self) -> _SaveAll:
        gc.collect()
        self._enabled = gc.isenabled()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        return self

    def collect(self) -> list[str]:
        gc.collect()
        return _names(gc.garbage)

    def __exit__(self, *exc_info: object) -> None:
        gc.set_debug(0)
        gc.garbage.clear()
        if self._enabled:
            gc.enable()


@pytest.fixture
def save_all() -> Iterator[_SaveAll]:
    with _SaveAll() as saving:
        yield saving


async def test_finished_two_hop_turns_leave_no_cyclic_garbage(save_all: _SaveAll) -> None:
    tools = ToolRegistry().register(lookup)
    async with Engine(ScriptedAgent(respond=_two_hops), tools=tools) as engine:
        turns = [engine.start_turn(f"t{i}", "Look it up twice.") for i in range(20)]
        for turn in turns:
            await turn.wait_finished()
        statuses = {turn.status for turn in turns}
        del turns, turn
        left = save_all.collect()
    assert statuses == {RunStatus.completed}
    assert left == []


async def test_cancelled_and_superseded_turns_leave_no_cyclic_garbage(save_all: _SaveAll) -> None:
    async with Engine(ScriptedAgent(respond=lambda key, run_input: [Hang()])) as engine:
        cancelled = [engine.start_turn(f"c{i}", "hello") for i in range(10)]
        superseded = [engine.start_turn(f"s{i}", "hello") for i in range(10)]
        await anyio.sleep(0.05)  # every turn streaming, its script hanging
        for turn in cancelled:
            turn.cancel()
        newer = [engine.start_turn(f"s{i}", "again") for i in range(10)]
        for turn in (*cancelled, *superseded):
            await turn.wait_finished()
        ended = {turn.status for turn in (*cancelled, *superseded)}
        for turn in newer:
            turn.cancel()
            await turn.wait_finished()
        del cancelled, superseded, newer, turn
        left = save_all.collect()
    assert ended == {RunStatus.cancelled, RunStatus.superseded}
    assert left == []


def _driver_of(turn: Turn) -> TurnDriver | None:
    """``turn._driver``, read through a call so that type checkers do not narrow it."""
    return turn._driver


async def test_a_finished_turn_lets_go_of_its_task_and_still_answers() -> None:
    # What a caller keeps of a finished turn is its state (the processor): the task's
    # driver, with its cancel scope, run handle and tool state, goes when the task
    # ends, and the collector has that much less to walk per finished turn kept.
    tools = ToolRegistry().register(lookup)
    async with Engine(ScriptedAgent(respond=_two_hops), tools=tools) as engine:
        turn = engine.start_turn("t1", "Look it up twice.")
        assert _driver_of(turn) is not None
        await turn.wait_finished()
        assert _driver_of(turn) is None
        snapshot = turn.snapshot()
        assert (snapshot.status, snapshot.run_count, snapshot.depth) == (
            RunStatus.completed,
            3,
            2,
        )
        assert engine.state("t1") == snapshot
        assert turn.cancel() is False
        assert turn.status is RunStatus.completed
        with pytest.raises(ApprovalError):
            turn.approve("anything")
        with pytest.raises(ApprovalError):
            turn.deny("anything")
        with engine.subscribe() as updates:
            turn.publish_state()  # nothing changed since it was told
            assert engine.focus("t1") == snapshot
            told = updates.receive_nowait()
            with pytest.raises(anyio.WouldBlock):
                updates.receive_nowait()
    assert isinstance(told, StateChanged) and told.snapshot == snapshot


def _live(*types: type) -> int:
    """How many objects of ``types`` are alive (the collector off: none was collected)."""
    return sum(1 for o in gc.get_objects() if type(o) in types)


@pytest.mark.parametrize("with_store", [False, True], ids=["no store", "store"])
async def test_a_forgotten_thread_is_freed_by_reference_counting(
    save_all: _SaveAll, with_store: bool
) -> None:
    # A finished turn the caller drops, on a thread the engine forgets, is freed the
    # moment the last reference goes: the turn, its processor, its conversation and its
    # mapping, and with a store the thread's log. Nothing waits for a collection.
    from toolrelay._core import Conversation, EventProcessor
    from toolrelay._core._mapper import ConversationMapper
    from toolrelay._runtime._durable import ThreadLog
    from toolrelay.store import MemoryStore

    kinds = (Turn, EventProcessor, Conversation, ConversationMapper, ThreadLog)
    tools = ToolRegistry().register(lookup)
    store = MemoryStore() if with_store else None
    async with Engine(ScriptedAgent(respond=_two_hops), tools=tools, store=store) as engine:
        await engine.run_turn("warm", "Look it up twice.")
        assert engine.forget("warm")
        before = _live(*kinds)
        turns = [await engine.run_turn(f"t{i}", "Look it up twice.") for i in range(5)]
        held = _live(*kinds)
        statuses = {turn.status for turn in turns}
        del turns
        forgotten = [engine.forget(f"t{i}") for i in range(5)]
        after = _live(*kinds)
        left = save_all.collect()
    assert statuses == {RunStatus.completed}
    assert forgotten == [True] * 5
    assert held - before == 5 * (5 if with_store else 4)
    assert after == before
    assert left == []
