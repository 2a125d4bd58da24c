"""Tool policy: approval. A call of a tool declared ``needs_approval`` waits
(``awaiting_approval``) until the embedding code approves it (it runs) or denies it
(``failed``, the denial is what the model sees)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay import (
    ActivityKind,
    ApprovalError,
    Engine,
    Notification,
    RunStatus,
    StateChanged,
    ThreadKey,
    ToolCallBatch,
    ToolCallFinished,
    ToolCallInfo,
    ToolCallStatus,
    ToolRegistry,
    Turn,
    tool,
)
from toolrelay._reasons import ReasonKind
from toolrelay.protocol import RunAgentInput, ToolMessage
from toolrelay.store import MemoryStore, SQLiteStore, Store, ToolsStarted
from toolrelay.testing import ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio

ran: list[str] = []


@tool(needs_approval=True)
async def delete_file(path: str) -> str:
    """Delete a file (dangerous: a person approves each call)."""
    ran.append(path)
    return f"deleted {path}"


async def read_file(path: str) -> str:
    """Read a file (safe)."""
    ran.append(f"read {path}")
    return "contents"


def sent(run_input: RunAgentInput) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in run_input.messages if isinstance(m, ToolMessage)}


def calls_of(turn: Turn) -> list[ToolCallInfo]:
    return [c for m in turn.conversation.messages if isinstance(m, ToolCallBatch) for c in m.calls]


async def until_awaiting_approval(notes: MemoryObjectReceiveStream[Notification]) -> None:
    async for note in notes:
        if (
            isinstance(note, StateChanged)
            and note.snapshot.activity.kind is ActivityKind.AWAITING_APPROVAL
        ):
            return


def agent_deleting() -> ScriptedAgent:
    return ScriptedAgent(
        [
            tool_call("delete_file", {"path": "/tmp/a"}, id="danger"),
            tool_call("read_file", {"path": "/tmp/b"}, id="safe"),
        ],
        [text("done")],
    )


async def test_an_approved_call_runs_after_the_approval() -> None:
    ran.clear()
    agent = agent_deleting()
    tools = ToolRegistry.of(delete_file, read_file)
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools) as engine:
            notes = engine.subscribe(key="t1")
            turn = engine.start_turn("t1", "clean up")
            await until_awaiting_approval(notes)
            assert turn.snapshot().status is RunStatus.executing_tools
            [asked] = turn.approvals
            assert (asked.id, asked.reason, asked.tool_call_id) == (
                "danger",
                "tool_approval",
                "danger",
            )
            assert asked.metadata == {"tool": "delete_file", "arguments": '{"path":"/tmp/a"}'}
            [waiting] = [c for c in turn.tool_calls if c.id == "danger"]
            assert waiting.status is ToolCallStatus.awaiting_approval
            assert "/tmp/a" not in ran  # not before the approval
            async for note in notes:  # the safe call runs meanwhile; the turn still waits
                if isinstance(note, ToolCallFinished) and note.call_id == "safe":
                    break
            assert ran == ["read /tmp/b"]
            assert turn.snapshot().status is RunStatus.executing_tools
            assert [a.id for a in turn.approvals] == ["danger"]
            turn.approve("danger")
            await turn.wait_finished()
            notes.close()
    assert turn.status is RunStatus.completed
    assert ran == ["read /tmp/b", "/tmp/a"]
    assert sent(agent.inputs[1])["danger"].content == "deleted /tmp/a"
    assert turn.approvals == ()


async def test_a_denied_call_never_runs_and_the_model_sees_the_denial() -> None:
    ran.clear()
    agent = agent_deleting()
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(delete_file, read_file)) as engine:
            notes = engine.subscribe(key="t1")
            turn = engine.start_turn("t1", "clean up")
            await until_awaiting_approval(notes)
            turn.deny("danger", "Not that file: ask for /tmp/c instead.")
            await turn.wait_finished()
            notes.close()
    assert turn.status is RunStatus.completed
    assert ran == ["read /tmp/b"]
    danger = sent(agent.inputs[1])["danger"]
    assert danger.error == "Not that file: ask for /tmp/c instead."
    [denied] = [c for c in calls_of(turn) if c.id == "danger"]
    assert denied.status is ToolCallStatus.failed


async def test_waiting_for_approval_is_not_the_tools_running_time() -> None:
    ran.clear()
    agent = ScriptedAgent([tool_call("delete_file", {"path": "/x"}, id="c1")], [text("ok")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(delete_file), tool_timeout=0.05) as e:
            notes = e.subscribe(key="t1")
            turn = e.start_turn("t1", "go")
            await until_awaiting_approval(notes)
            await anyio.sleep(0.2)  # four times the tool timeout
            turn.approve("c1")
            await turn.wait_finished()
            notes.close()
    assert sent(agent.inputs[1])["c1"].content == "deleted /x"


async def test_cancelling_a_turn_that_awaits_approval_abandons_the_call() -> None:
    ran.clear()
    agent = ScriptedAgent([tool_call("delete_file", {"path": "/x"}, id="c1")], [text("never")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(delete_file)) as engine:
            notes = engine.subscribe(key="t1")
            turn = engine.start_turn("t1", "go")
            await until_awaiting_approval(notes)
            turn.cancel()
            await turn.wait_finished()
            notes.close()
            with pytest.raises(ApprovalError, match="no call of this turn awaits"):
                turn.approve("c1")
    assert turn.status is RunStatus.cancelled
    assert turn.reason is not None and turn.reason.kind is ReasonKind.CANCELLED
    assert ran == [] and agent.run_count == 1
    assert all(c.status is ToolCallStatus.failed for c in turn.abandoned_calls)
    assert turn.statistics().tool_calls[ToolCallStatus.awaiting_approval] == 0


async def test_deciding_twice_or_an_unknown_call_is_refused() -> None:
    ran.clear()
    agent = ScriptedAgent(
        [
            tool_call("delete_file", {"path": "/1"}, id="c1"),
            tool_call("delete_file", {"path": "/2"}, id="c2"),
        ],
        [text("ok")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(delete_file)) as engine:
            notes = engine.subscribe(key="t1")
            turn = engine.start_turn("t1", "go")
            await until_awaiting_approval(notes)
            assert [a.id for a in turn.approvals] == ["c1", "c2"]
            turn.approve("c1")
            with pytest.raises(ApprovalError, match=r"awaiting: 'c2'"):
                turn.deny("c1")
            with pytest.raises(ApprovalError, match="'nope'"):
                turn.approve("nope")
            turn.deny("c2")
            await turn.wait_finished()
            notes.close()
    assert ran == ["/1"]
    results = sent(agent.inputs[1])
    assert results["c1"].content == "deleted /1"
    assert results["c2"].error == "The user denied this tool call."


def test_the_policy_is_declared_on_the_tool() -> None:
    assert delete_file.needs_approval
    assert not tool(read_file).needs_approval
    assert ToolRegistry.of(delete_file, read_file).needing_approval == frozenset({"delete_file"})


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "t.db")


async def test_a_recovered_turn_waits_again_for_its_undecided_approvals(store: Store) -> None:
    # What a crash leaves: the batch written (its call awaiting approval), no decision.
    ran.clear()
    key = ThreadKey("t1")
    first = ScriptedAgent([tool_call("delete_file", {"path": "/x"}, id="c1")], [text("ok")])
    tools = ToolRegistry.of(delete_file)
    async with Engine(first, tools=tools, store=store, recover=False) as engine:
        notes = engine.subscribe(key=key)
        turn = engine.start_turn(key, "go")
        await until_awaiting_approval(notes)
        notes.close()
        turn.approve("c1")
        await turn.wait_finished()
    records = [e.record for e in await store.read(key)]
    batch = next(i for i, r in enumerate(records) if isinstance(r, ToolsStarted))
    await store.delete_thread(key)
    await store.append(key, records[: batch + 1])
    ran.clear()
    agent = ScriptedAgent([text("deleted, as approved")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools, store=store) as engine:  # recovers on enter
            notes = engine.subscribe(key=key)  # before the recovered turn's task runs
            recovered = engine.turn(key)
            assert recovered is not None
            await until_awaiting_approval(notes)
            notes.close()
            assert [a.id for a in recovered.approvals] == ["c1"]
            assert ran == []
            recovered.approve("c1")
            await recovered.wait_finished()
    assert recovered.status is RunStatus.completed
    assert ran == ["/x"]
    assert sent(agent.inputs[0])["c1"].content == "deleted /x"
