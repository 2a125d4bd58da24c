"""Cost per event is flat in the size of the run and of the conversation (promises 8, 11).

No clock: the cost of one event is the number of Python bytecode instructions the
processor executes for it (counted with an opcode tracer), measured once after a
small prelude and once after a large one, in the same test. An event whose handler
walks the run's calls or the conversation's messages costs about n times more after
the large prelude; one that does not costs the same.

Each row is a path that was once quadratic over a run (each of n events walking what
the n before it left) or is cheap only by design: many TOOL_CALL_STARTs, many
REASONING_ENCRYPTED_VALUEs for unknown ids, results recorded one by one, snapshots
against a long history, state deltas against a large state, and the rest.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from toolrelay import ToolResult
from toolrelay._core._conversation import Conversation, TextMessage
from toolrelay._core._effects import ToolsReady
from toolrelay._core._processor import EventProcessor
from toolrelay.protocol import (
    AddOperation,
    AssistantMessage,
    MessagesSnapshotEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReplaceOperation,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from toolrelay.testing import run_finished, run_started

THREAD = "thread-cost"
SMALL, LARGE = 20, 800
#: How much more the event may cost after the large prelude (a walk costs ~50x).
SLACK = 1.5


def running(history: int = 0) -> EventProcessor:
    counter = itertools.count(1)
    messages: list[Any] = [UserMessage(id=f"u{i}", content="hi") for i in range(history)]
    messages.append(UserMessage(id="user", content="go"))
    processor = EventProcessor(
        Conversation(THREAD, messages), id_factory=lambda: f"gen-{next(counter)}"
    )
    processor.start_run("run-1")
    processor.receive(run_started(THREAD, "server-run-1"))
    return processor


def opcodes(action: Callable[[], object]) -> int:
    """Bytecode instructions executed by ``action()`` (and everything it calls)."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        action()
    finally:
        sys.settrace(previous)
    return count


def _noop() -> None:
    return None


# CPython 3.12.1 reports no opcode event in the first tracing session of a process (the
# sessions after it count as on 3.11 and 3.13): one session that counts nothing first.
opcodes(_noop)
if opcodes(_noop) == 0:
    raise RuntimeError("this Python reports no opcode events to sys.settrace")


# --- the rows: a prelude of size n, then the one event measured ---------------------------


def calls(p: EventProcessor, n: int, *, ended: bool = True) -> None:
    for i in range(n):
        p.receive(ToolCallStartEvent(tool_call_id=f"c{i}", tool_call_name=f"tool{i}"))
        p.receive(ToolCallArgsEvent(tool_call_id=f"c{i}", delta="{}"))
        if ended:
            p.receive(ToolCallEndEvent(tool_call_id=f"c{i}"))


def reasoning(p: EventProcessor, n: int) -> None:
    for i in range(n):
        p.receive(ReasoningMessageStartEvent(message_id=f"r{i}"))
        p.receive(ReasoningMessageContentEvent(message_id=f"r{i}", delta="hmm"))
        p.receive(ReasoningMessageEndEvent(message_id=f"r{i}"))


def calls_then_text(p: EventProcessor, n: int) -> None:
    calls(p, n)
    p.receive(TextMessageStartEvent(message_id="t"))


def texts(p: EventProcessor, n: int) -> None:
    for i in range(n):
        p.receive(TextMessageStartEvent(message_id=f"m{i}"))
        p.receive(TextMessageContentEvent(message_id=f"m{i}", delta="word"))
        p.receive(TextMessageEndEvent(message_id=f"m{i}"))


Row = tuple[Callable[[EventProcessor, int], object], Callable[[EventProcessor], object]]

ROWS: dict[str, Row] = {
    "TOOL_CALL_START after n calls": (
        calls,
        lambda p: p.receive(ToolCallStartEvent(tool_call_id="new", tool_call_name="late")),
    ),
    "TOOL_CALL_START after n streaming calls": (
        lambda p, n: calls(p, n, ended=False),
        lambda p: p.receive(ToolCallStartEvent(tool_call_id="new", tool_call_name="late")),
    ),
    "TOOL_CALL_ARGS for an unknown id after n calls": (
        calls,
        lambda p: p.receive(ToolCallArgsEvent(tool_call_id="ghost", delta="x")),
    ),
    "TOOL_CALL_END for an unknown id after n calls": (
        calls,
        lambda p: p.receive(ToolCallEndEvent(tool_call_id="ghost")),
    ),
    "TOOL_CALL_RESULT for an unknown id after n calls": (
        calls,
        lambda p: p.receive(
            ToolCallResultEvent(message_id="res", tool_call_id="ghost", content="x")
        ),
    ),
    "TOOL_CALL_RESULT for the last of n calls": (
        calls,
        lambda p: p.receive(
            ToolCallResultEvent(
                message_id="res", tool_call_id=f"c{len(p.tool_calls) - 1}", content="x"
            )
        ),
    ),
    "TEXT_MESSAGE_END after n calls": (
        calls_then_text,
        lambda p: p.receive(TextMessageEndEvent(message_id="t")),
    ),
    "REASONING_END after n calls": (
        calls,
        lambda p: p.receive(ReasoningEndEvent(message_id="r")),
    ),
    "REASONING_ENCRYPTED_VALUE for an unknown id after n reasoning messages": (
        reasoning,
        lambda p: p.receive(
            ReasoningEncryptedValueEvent(subtype="message", entity_id="ghost", encrypted_value="s")
        ),
    ),
    "REASONING_ENCRYPTED_VALUE for the first of n reasoning messages": (
        reasoning,
        lambda p: p.receive(
            ReasoningEncryptedValueEvent(subtype="message", entity_id="r0", encrypted_value="s")
        ),
    ),
    "TEXT_MESSAGE_START after n text messages": (
        texts,
        lambda p: p.receive(TextMessageStartEvent(message_id="new")),
    ),
    "MESSAGES_SNAPSHOT of one message after n text messages": (
        texts,
        lambda p: p.receive(
            MessagesSnapshotEvent(messages=[AssistantMessage(id="m0", content="word")])
        ),
    ),
    "MESSAGES_SNAPSHOT with one tool result after n calls": (
        calls,
        lambda p: p.receive(
            MessagesSnapshotEvent(messages=[ToolMessage(id="t", tool_call_id="c0", content="x")])
        ),
    ),
    "STATE_DELTA of one key on a state of n keys": (
        lambda p, n: (
            p.receive(StateSnapshotEvent(snapshot={f"k{i}": [i, {"v": i}] for i in range(n)})),
            p.receive(StateDeltaEvent(delta=[AddOperation(path="/first", value=1)])),
        ),
        lambda p: p.receive(StateDeltaEvent(delta=[ReplaceOperation(path="/k0/1/v", value=2)])),
    ),
}


@pytest.mark.parametrize("row", list(ROWS), ids=list(ROWS))
def test_an_events_cost_does_not_grow_with_the_run(row: str) -> None:
    prelude, event = ROWS[row]
    costs = []
    for n in (SMALL, LARGE):
        processor = running()
        prelude(processor, n)
        costs.append(opcodes(lambda p=processor: event(p)))  # type: ignore[misc]
    small, large = costs
    assert large <= small * SLACK, f"{row}: {small} opcodes after {SMALL}, {large} after {LARGE}"


def test_recording_each_result_of_a_batch_costs_the_same() -> None:
    # The runtime hands results in one by one; the last commits the batch (O(n) once).
    processor = running()
    calls(processor, LARGE)
    effects = processor.receive(run_finished(THREAD, "server-run-1"))
    (ready,) = [e for e in effects if isinstance(e, ToolsReady)]
    costs = [
        opcodes(lambda c=c: processor.record_result(c, ToolResult.success("ok")))  # type: ignore[misc]
        for c in ready.calls[:-1]
    ]
    assert max(costs[-10:]) <= costs[0] * SLACK


def test_a_snapshot_costs_its_own_size_not_the_historys() -> None:
    # A run that streamed nothing looks for its answer in the snapshot: against the
    # conversation's index, not by a walk of every message the thread holds.
    costs = []
    for n in (SMALL, LARGE):
        processor = running(history=n)
        # The index is built as messages arrive, each once (amortised O(1)): here the
        # history came in at once, so it is indexed before the measure.
        processor.conversation.known_ids()
        snapshot = MessagesSnapshotEvent(messages=[AssistantMessage(id="answer", content="x")])
        costs.append(opcodes(lambda p=processor, s=snapshot: p.receive(s)))  # type: ignore[misc]
        assert [m.text for m in processor.conversation.messages if isinstance(m, TextMessage)] == [
            "x"
        ]
    assert costs[1] <= costs[0] * SLACK


def test_the_opcode_counter_sees_a_walk() -> None:
    # The yardstick itself: a handler that walks n items costs ~n times more.
    def walk(n: int) -> int:
        return sum(1 for _ in range(n))

    assert opcodes(lambda: walk(LARGE)) > opcodes(lambda: walk(SMALL)) * 10
