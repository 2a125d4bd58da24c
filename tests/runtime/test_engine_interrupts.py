"""Interrupts and resume through the engine (AG-UI 1.0), against the mock LLM.

A run that ends with RUN_FINISHED's ``interrupt`` outcome ends its turn ``interrupted``
(never ``completed``), exposes what the agent asks, and runs none of its pending calls.
The answer is a new turn, ``start_turn(key, resume=[...])``: its first run carries the
resume entries, its continuations do not. The ``cancelled`` outcome ends the turn
``cancelled`` with reason ``agent_cancelled``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from toolrelay import (
    Engine,
    ResumeError,
    RunStatus,
    RunUnregistered,
    StateChanged,
    ToolCallBatch,
    ToolCallStatus,
    ToolRegistry,
    Turn,
)
from toolrelay._core import ChatMessage
from toolrelay._reasons import ReasonKind
from toolrelay.protocol import (
    AssistantMessage,
    Interrupt,
    ResumeEntry,
    ToolMessage,
    UserMessage,
)
from toolrelay.testing import (
    Gate,
    ScriptedAgent,
    run_cancelled,
    run_error,
    run_interrupted,
    text,
    tool_call,
)
from toolrelay.testing._scripted import Script

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _streams import drain

pytestmark = pytest.mark.anyio

SECRETS = {"alice": 42, "bob": 7}
EXECUTED: list[str] = []


async def get_secret_number(name: str) -> int:
    """Look up a person's secret number.

    Args:
        name: Whose number.
    """
    EXECUTED.append(name)
    return SECRETS[name]


TOOLS = ToolRegistry.of(get_secret_number)

MAY_I = Interrupt(
    id="approve-1",
    reason="approval",
    message="May I look up Bob's number?",
    tool_call_id="call-bob",
    response_schema={"type": "boolean"},
)

YES = ResumeEntry(interrupt_id="approve-1", status="resolved", payload=True)


@pytest.fixture(autouse=True)
def clear_executed() -> Iterator[None]:
    EXECUTED.clear()
    yield
    EXECUTED.clear()


def status_of(turn: Turn) -> RunStatus:
    """``turn.status``, read through a call so that type checkers do not narrow it."""
    return turn.status


def asking_run() -> Script:
    """Run 1: some text, a call the agent wants approved first, then the interrupt."""
    return [
        text("I need your approval first.", id="ask"),
        tool_call("get_secret_number", {"name": "bob"}, id="call-bob"),
        run_interrupted("t1", "srv-1", MAY_I),
    ]


async def test_an_interrupted_turn_then_a_resumed_turn_that_completes() -> None:
    agent = ScriptedAgent(
        asking_run(),
        # The resumed turn: the agent goes on, calls the tool, then answers.
        [tool_call("get_secret_number", {"name": "bob"}, id="call-bob-2")],
        [text("Bob's number is 7.", id="answer")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            with engine.subscribe() as updates, engine.registry.subscribe() as runs:
                first = await engine.run_turn("t1", "What is Bob's number?")

                assert first.status is RunStatus.interrupted
                assert first.finished and not first.status.is_running
                assert first.reason is not None
                assert first.reason.kind is ReasonKind.INTERRUPTED
                assert "May I look up Bob's number?" in first.reason.message
                assert first.interrupts == (MAY_I,)
                assert first.snapshot().interrupts == (MAY_I,)
                assert engine.state("t1") == first.snapshot()
                assert engine.open_interrupts("t1") == (MAY_I,)
                # The call the agent wanted approved was not run (abandoned, not pending).
                assert EXECUTED == []
                assert [(c.id, c.status) for c in first.abandoned_calls] == [
                    ("call-bob", ToolCallStatus.failed)
                ]
                assert first.tool_calls == ()
                shown = [n.snapshot for n in drain(updates) if isinstance(n, StateChanged)]
                assert shown[-1].status is RunStatus.interrupted
                assert shown[-1].interrupts == (MAY_I,)
                [ended] = [e for e in drain(runs) if isinstance(e, RunUnregistered)]
                assert ended.status == "interrupted"

                second = await engine.run_turn("t1", resume=[YES])

    assert second.status is RunStatus.completed, second.reason
    assert second.interrupts == ()
    assert second.resume == (YES,)
    assert first.status is RunStatus.interrupted  # the answer is a new turn
    assert EXECUTED == ["bob"]
    assert engine.open_interrupts("t1") == ()
    assert engine.statistics().turns[RunStatus.interrupted] == 1
    assert engine.statistics().turns[RunStatus.completed] == 1

    asked, resumed, continued = agent.inputs
    assert asked.resume is msgspec.UNSET
    # The resumed turn's first run carries the answer, and no new user message...
    assert resumed.resume == [YES]
    assert resumed.parent_run_id is msgspec.UNSET  # a new turn, not a continuation
    assert [m.id for m in resumed.messages if isinstance(m, UserMessage)] == [
        m.id for m in asked.messages if isinstance(m, UserMessage)
    ]
    assert [m.id for m in resumed.messages][-1] == "ask"  # what the agent said before
    # ...and its continuation carries the tool result, not the answer again.
    assert continued.resume is msgspec.UNSET
    assert continued.parent_run_id == resumed.run_id
    assert [m.tool_call_id for m in continued.messages if isinstance(m, ToolMessage)] == [
        "call-bob-2"
    ]
    wire = msgspec.json.decode(msgspec.json.encode(resumed))
    assert wire["resume"] == [{"interruptId": "approve-1", "status": "resolved", "payload": True}]
    assert "resume" not in msgspec.json.decode(msgspec.json.encode(continued))
    # The resumed turn's slice of the conversation: the tool batch and the answer.
    assert second.statistics().tool_calls[ToolCallStatus.completed] == 1
    assert [type(m).__name__ for m in second.conversation.messages] == [
        "UserMessage",
        "TextMessage",
        "ToolCallBatch",
        "TextMessage",
    ]


async def test_a_resume_turn_may_carry_a_message_too() -> None:
    agent = ScriptedAgent(asking_run(), [text("Fine.")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            await engine.run_turn("t1", "What is Bob's number?")
            turn = await engine.run_turn("t1", "yes, go ahead", resume=[YES])
    assert turn.status is RunStatus.completed
    resumed = agent.inputs[1]
    assert resumed.resume == [YES]
    last = resumed.messages[-1]
    assert isinstance(last, UserMessage) and last.content == "yes, go ahead"


@pytest.mark.parametrize(
    ("entries", "field", "ids"),
    [
        pytest.param(
            [ResumeEntry(interrupt_id="nope", status="resolved")],
            "unknown",
            ("nope",),
            id="unknown id",
        ),
        pytest.param([YES, YES], "duplicated", ("approve-1",), id="answered twice"),
    ],
)
async def test_a_resume_that_does_not_answer_the_open_interrupts_is_refused(
    entries: list[ResumeEntry], field: str, ids: tuple[str, ...]
) -> None:
    agent = ScriptedAgent(asking_run())
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            interrupted = await engine.run_turn("t1", "What is Bob's number?")
            before = engine.statistics()
            with pytest.raises(ResumeError) as caught:
                engine.start_turn("t1", resume=entries)
            # Nothing changed: no turn started, nothing sent, the question still open.
            assert engine.turn("t1") is interrupted
            assert engine.statistics() == before
            assert agent.run_count == 1
            assert engine.open_interrupts("t1") == (MAY_I,)
    assert getattr(caught.value, field) == ids
    assert isinstance(caught.value, ValueError)


async def test_every_open_interrupt_needs_an_answer() -> None:
    which = Interrupt(id="choose-1", reason="choice", message="Which one?")
    agent = ScriptedAgent([run_interrupted("t1", "srv-1", MAY_I, which)], [text("Done.")])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            await engine.run_turn("t1", "go")
            with pytest.raises(ResumeError) as caught:
                engine.start_turn("t1", resume=[YES])
            assert caught.value.unanswered == ("choose-1",)
            declined = ResumeEntry(interrupt_id="choose-1", status="cancelled")
            turn = await engine.run_turn("t1", resume=[declined, YES])
    assert turn.status is RunStatus.completed
    assert agent.inputs[1].resume == [declined, YES]


async def test_a_turn_needs_a_message_or_resume_entries() -> None:
    agent = ScriptedAgent()
    async with Engine(agent) as engine:
        with pytest.raises(ValueError, match="a message, resume entries, or both") as caught:
            engine.start_turn("t1")
        assert not isinstance(caught.value, ResumeError)
        assert engine.turn("t1") is None
        with pytest.raises(ValueError, match="a message, resume entries, or both"):
            engine.start_turn("t1", resume=[])
    assert agent.run_count == 0


async def test_a_resume_on_a_thread_whose_interrupts_are_not_known_is_sent_as_given() -> None:
    # The interrupted turn ran elsewhere (another process): the engine cannot check.
    agent = ScriptedAgent([text("Looked it up.")])
    history: list[ChatMessage] = [
        UserMessage(id="u0", content="What is Bob's number?"),
        AssistantMessage(id="a0", content="I need your approval first."),
    ]
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            assert engine.open_interrupts("t1") is None
            turn = await engine.run_turn("t1", resume=[YES], history=history)
    assert turn.status is RunStatus.completed
    assert agent.inputs[0].resume == [YES]
    assert agent.inputs[0].messages == history


async def test_a_resume_turn_that_fails_leaves_the_interrupts_open_to_answer_again() -> None:
    agent = ScriptedAgent(asking_run(), [run_error("overloaded")], [text("Bob's is 7.")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            await engine.run_turn("t1", "What is Bob's number?")
            failed = await engine.run_turn("t1", resume=[YES])
            assert failed.status is RunStatus.failed
            assert engine.open_interrupts("t1") == (MAY_I,)
            again = await engine.run_turn("t1", resume=[YES])
            assert engine.open_interrupts("t1") == ()
            # Answered: the same answer again is refused now.
            with pytest.raises(ResumeError, match="the thread has no open interrupt"):
                engine.start_turn("t1", resume=[YES])
    assert again.status is RunStatus.completed
    assert [i.resume for i in agent.inputs] == [msgspec.UNSET, [YES], [YES]]


async def test_a_message_after_an_interrupt_is_sent_and_a_new_interrupt_replaces_it() -> None:
    other = Interrupt(id="approve-2", reason="approval", message="And Alice's?")
    agent = ScriptedAgent(asking_run(), [run_interrupted("t1", "srv-2", other)], [text("Alright.")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            await engine.run_turn("t1", "What is Bob's number?")
            # A plain message does not answer the interrupt, but it may be sent.
            second = await engine.run_turn("t1", "actually, Alice's")
            assert second.interrupts == (other,)
            assert engine.open_interrupts("t1") == (other,)
            with pytest.raises(ResumeError):
                engine.start_turn("t1", resume=[YES])  # the old question is gone
            third = await engine.run_turn(
                "t1", resume=[ResumeEntry(interrupt_id="approve-2", status="cancelled")]
            )
    assert third.status is RunStatus.completed
    assert agent.inputs[1].resume is msgspec.UNSET


async def test_a_superseded_resume_turn_leaves_the_question_open() -> None:
    gate = anyio.Event()
    agent = ScriptedAgent(asking_run(), [Gate(gate), text("late")], [text("Now done.")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            await engine.run_turn("t1", "What is Bob's number?")
            resuming = engine.start_turn("t1", resume=[YES])
            await anyio.sleep(0.01)
            assert status_of(resuming) is RunStatus.running
            newer = engine.start_turn("t1", resume=[YES])  # still open: allowed
            assert status_of(resuming) is RunStatus.superseded
            await newer.wait_finished()
            gate.set()
    assert newer.status is RunStatus.completed
    assert agent.inputs[2].resume == [YES]


async def test_an_agent_cancelled_run_ends_the_turn_cancelled_saying_so() -> None:
    agent = ScriptedAgent(
        [
            text("Stopping here."),
            tool_call("get_secret_number", {"name": "alice"}, id="c1"),
            run_cancelled("t1", "srv-1"),
        ]
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            turn = await engine.run_turn("t1", "What is Alice's number?")
    assert turn.status is RunStatus.cancelled
    assert turn.reason is not None
    assert turn.reason.kind is ReasonKind.AGENT_CANCELLED
    assert turn.reason.message == "the agent reported its run cancelled"
    assert turn.interrupts == ()
    assert EXECUTED == []
    assert [c.status for c in turn.abandoned_calls] == [ToolCallStatus.failed]
    assert engine.open_interrupts("t1") is None  # nothing learned either way


async def test_an_interrupt_after_tools_ran_keeps_their_results() -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [run_interrupted("t1", "srv-2", MAY_I)],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS) as engine:
            turn = await engine.run_turn("t1", "numbers?")
    assert turn.status is RunStatus.interrupted
    assert turn.depth == 1
    assert EXECUTED == ["alice"]
    [batch] = [m for m in turn.conversation.messages if isinstance(m, ToolCallBatch)]
    assert batch.calls[0].status is ToolCallStatus.completed
