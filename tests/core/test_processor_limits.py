"""Hostile input to the processor, bounded: totals per turn, state, nesting (promise 11),
and the argument streams real servers send (late arguments, a snapshot's record).

Every bound ends the turn ``failed`` with ``protocol_error`` and the limit's name as
its code, and what arrived before is kept (promise 7). Violations past their bound
are counted, not kept.
"""

from __future__ import annotations

import itertools
import tracemalloc
from typing import Any

import msgspec
import pytest

from toolrelay import ReasonKind, RunStatus, ToolCallStatus, ToolResult
from toolrelay._core import _processor
from toolrelay._core._conversation import (
    ChatMessage,
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._core._effects import (
    Activity,
    ActivityChanged,
    ActivityKind,
    Effect,
    ToolsReady,
    TurnEnded,
    ViolationRaised,
)
from toolrelay._core._processor import EventProcessor, Limits
from toolrelay.protocol import (
    AddOperation,
    AssistantMessage,
    ContentPart,
    CopyOperation,
    CustomEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    MoveOperation,
    ReasoningMessageContentEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    TestOperation,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
    decode_event,
)
from toolrelay.testing import run_finished, run_interrupted, run_started

THREAD = "thread-limits"


def running(**limits: int) -> EventProcessor:
    counter = itertools.count(1)
    processor = EventProcessor(
        Conversation(THREAD, [UserMessage(id="u", content="go")]),
        limits=Limits(**limits),
        id_factory=lambda: f"gen-{next(counter)}",
    )
    processor.start_run("run-1")
    processor.receive(run_started(THREAD, "server-run-1"))
    return processor


def feed(processor: EventProcessor, *events: Any) -> list[Effect]:
    effects: list[Effect] = []
    for event in events:
        effects.extend(processor.receive(event))
    return effects


def ended_by(effects: list[Effect], limit: str) -> None:
    (ended,) = [e for e in effects if isinstance(e, TurnEnded)]
    assert ended.reason.kind is ReasonKind.PROTOCOL_ERROR
    assert ended.reason.code == limit


def texts(processor: EventProcessor) -> list[str]:
    return [m.text for m in processor.conversation.messages if isinstance(m, TextMessage)]


def start(call_id: str, name: str = "lookup") -> ToolCallStartEvent:
    return ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name)


def args(call_id: str, delta: str) -> ToolCallArgsEvent:
    return ToolCallArgsEvent(tool_call_id=call_id, delta=delta)


def end(call_id: str) -> ToolCallEndEvent:
    return ToolCallEndEvent(tool_call_id=call_id)


# --- totals per turn ---------------------------------------------------------------------


def test_calls_past_max_tool_calls_per_run_end_the_turn_and_keep_the_text() -> None:
    processor = running(max_tool_calls_per_run=3)
    effects = feed(
        processor,
        TextMessageStartEvent(message_id="m"),
        TextMessageContentEvent(message_id="m", delta="calling"),
        *[start(f"c{i}") for i in range(4)],
    )
    ended_by(effects, "max_tool_calls_per_run")
    assert processor.status is RunStatus.failed
    assert texts(processor) == ["calling"]
    assert {c.id for c in processor.abandoned} == {"c0", "c1", "c2"}


def test_calls_past_max_tool_calls_per_turn_count_every_run() -> None:
    processor = running(max_tool_calls_per_turn=3)
    feed(processor, start("c0"), end("c0"), start("c1"), end("c1"))
    (ready,) = [
        e
        for e in processor.receive(run_finished(THREAD, "server-run-1"))
        if isinstance(e, ToolsReady)
    ]
    for c in ready.calls:
        processor.record_result(c, ToolResult.success("ok"))
    processor.start_run("run-2")
    feed(processor, run_started(THREAD, "server-run-2"), start("c2"))
    ended_by(feed(processor, start("c3")), "max_tool_calls_per_turn")
    # The first run's results stay in the conversation.
    assert [c.id for c in processor.conversation.tool_calls()] == ["c0", "c1"]


def test_text_past_max_text_bytes_is_counted_in_utf8_bytes_on_the_fast_path() -> None:
    # 50 two-byte characters fit a 100-byte bound exactly; one more byte does not.
    processor = running(max_text_bytes=100)
    feed(processor, TextMessageStartEvent(message_id="m"))
    for _ in range(10):
        assert processor.receive(TextMessageContentEvent(message_id="m", delta="ééééé")) == ()
    assert processor.status is RunStatus.running
    ended_by(feed(processor, TextMessageContentEvent(message_id="m", delta="x")), "max_text_bytes")
    assert texts(processor) == ["é" * 50 + "x"]  # kept, cut by nothing


def test_text_of_every_message_and_run_counts_toward_max_text_bytes() -> None:
    processor = running(max_text_bytes=40)
    for i in range(3):
        feed(
            processor,
            TextMessageStartEvent(message_id=f"m{i}"),
            TextMessageContentEvent(message_id=f"m{i}", delta="0123456789"),
            TextMessageEndEvent(message_id=f"m{i}"),
        )
    effects = feed(
        processor,
        TextMessageStartEvent(message_id="m3"),
        TextMessageContentEvent(message_id="m3", delta="0123456789"),
        TextMessageContentEvent(message_id="m3", delta="!"),
    )
    ended_by(effects, "max_text_bytes")


def test_results_the_agent_reports_count_as_text() -> None:
    processor = running(max_text_bytes=10)
    feed(processor, start("c0"), end("c0"))
    effects = feed(
        processor, ToolCallResultEvent(message_id="r", tool_call_id="c0", content="x" * 11)
    )
    ended_by(effects, "max_text_bytes")


def result_snapshot(call_id: str, content: str | list[ContentPart]) -> MessagesSnapshotEvent:
    """A MESSAGES_SNAPSHOT holding the agent's result for ``call_id`` (LlamaIndex sends a
    server tool's result only there)."""
    return MessagesSnapshotEvent(
        messages=[ToolMessage(id="r", tool_call_id=call_id, content=content)]
    )


def test_results_the_snapshot_holds_count_as_text() -> None:
    # The same bound as TOOL_CALL_RESULT's: a result is the agent's text.
    processor = running(max_text_bytes=10)
    feed(processor, start("c0"), end("c0"))
    ended_by(feed(processor, result_snapshot("c0", "x" * 11)), "max_text_bytes")


@pytest.mark.parametrize("depth", [200, 50_000])
def test_a_deep_result_in_the_snapshot_is_a_typed_error(depth: int) -> None:
    # A part's metadata is any JSON: its nesting is bounded as a result's is.
    processor = running()
    feed(processor, start("c0"), end("c0"))
    effects = feed(processor, result_snapshot("c0", [TextPart(text="x", metadata=nested(depth))]))
    ended_by(effects, "max_json_depth")
    # The agent's deep result is not kept: the call is abandoned with the limit.
    [(call_id, result)] = [(c.id, c.result) for c in processor.abandoned]
    assert call_id == "c0"
    assert result is not None and result.error is not None
    assert "max_json_depth" in result.error


def test_a_result_of_parts_in_the_snapshot_is_kept_as_its_json_within_the_bounds() -> None:
    processor = running(max_text_bytes=100)
    feed(processor, start("c0"), end("c0"))
    feed(processor, result_snapshot("c0", [TextPart(text="four", metadata=nested(3))]))
    (done,) = [c for c in processor.tool_calls if c.id == "c0"]
    assert done.status is ToolCallStatus.completed
    assert done.result is not None
    assert msgspec.json.decode(done.result.content) == [
        {"type": "text", "text": "four", "metadata": [[["leaf"]]]}
    ]


def test_reasoning_past_max_reasoning_bytes_ends_the_turn_and_keeps_what_came() -> None:
    processor = running(max_reasoning_bytes=8)
    feed(processor, ReasoningMessageContentEvent(message_id="r", delta="hmm,"))
    effects = feed(processor, ReasoningMessageContentEvent(message_id="r", delta="hmm, hmm"))
    ended_by(effects, "max_reasoning_bytes")
    (record,) = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert record.text == "hmm,hmm, hmm"


def test_arguments_of_all_calls_count_toward_max_turn_argument_bytes() -> None:
    # Each call is far below max_argument_bytes; together they pass the turn's bound.
    processor = running(max_argument_bytes=1000, max_turn_argument_bytes=100)
    for i in range(3):
        feed(processor, start(f"c{i}"), args(f"c{i}", "x" * 30), end(f"c{i}"))
    assert processor.status is RunStatus.running
    ended_by(feed(processor, start("c3"), args("c3", "x" * 11)), "max_turn_argument_bytes")


def test_messages_past_max_messages_per_turn_end_the_turn() -> None:
    processor = running(max_messages_per_turn=5)
    effects = feed(
        processor,
        *[TextMessageStartEvent(message_id=f"m{i}") for i in range(6)],
    )
    ended_by(effects, "max_messages_per_turn")
    assert len(texts(processor)) == 5


def test_violations_past_max_violations_are_counted_not_kept_and_the_turn_goes_on() -> None:
    processor = running(max_violations=3)
    effects = feed(processor, *[end(f"ghost{i}") for i in range(10)])
    assert len(processor.violations) == 3
    assert processor.violations_dropped == 7
    assert len([e for e in effects if isinstance(e, ViolationRaised)]) == 3
    assert processor.status is RunStatus.running


# --- the activity stays small ---------------------------------------------------------


def test_the_activity_names_a_few_calls_and_counts_the_rest() -> None:
    processor = running()
    effects = feed(processor, *[start(f"c{i}", f"tool{i}") for i in range(12)])
    last = [e.activity for e in effects if isinstance(e, ActivityChanged)][-1]
    assert last == Activity(ActivityKind.CALLING_TOOLS, tuple(f"tool{i}" for i in range(8)), more=4)
    assert str(last).endswith("tool7 (+4 more)")
    # The agent resolves tool1 itself: the next call waiting takes its place.
    feed(processor, end("c1"))
    effects = feed(processor, ToolCallResultEvent(message_id="r", tool_call_id="c1", content="x"))
    (changed,) = [e.activity for e in effects if isinstance(e, ActivityChanged)]
    assert changed.tool_names == ("tool0", *(f"tool{i}" for i in range(2, 9)))
    assert changed.more == 3


# --- state ----------------------------------------------------------------------------


def test_a_copy_that_doubles_the_state_stops_at_max_state_bytes() -> None:
    processor = running(max_state_bytes=50_000)
    feed(processor, StateSnapshotEvent(snapshot={"a": ["x" * 100] * 10}))
    effects: list[Effect] = []
    for i in range(40):
        effects = feed(
            processor,
            # Each copy of the whole state into itself doubles it.
            StateDeltaEvent(delta=[CopyOperation(from_="", path=f"/s{i}")]),
        )
        if processor.status is not RunStatus.running:
            break
    ended_by(effects, "max_state_bytes")
    assert len(msgspec.json.encode(processor.conversation.state)) < 60_000


def test_a_delta_patches_the_state_in_place_without_copying_it() -> None:
    processor = running()
    feed(processor, StateSnapshotEvent(snapshot={"big": {"items": list(range(1000))}, "n": 0}))
    big = processor.conversation.state["big"]  # type: ignore[index]
    feed(processor, StateDeltaEvent(delta=[AddOperation(path="/n", value=1)]))
    feed(processor, StateDeltaEvent(delta=[AddOperation(path="/n", value=2)]))
    state: Any = processor.conversation.state
    assert state["n"] == 2
    assert state["big"] is big  # untouched parts are the same objects: never copied


def test_a_failing_patch_rolls_back_what_it_did() -> None:
    processor = running()
    feed(processor, StateSnapshotEvent(snapshot={"a": [1, 2], "b": {"c": 1}}))
    effects = feed(
        processor,
        StateDeltaEvent(
            delta=[
                AddOperation(path="/a/0", value=0),
                AddOperation(path="/b/d", value=2),
                TestOperation(path="/b/c", value=99),
            ]
        ),
    )
    assert [e.violation.code for e in effects if isinstance(e, ViolationRaised)] == [
        "state_delta_failed"
    ]
    assert processor.conversation.state == {"a": [1, 2], "b": {"c": 1}}


def test_the_state_a_run_was_sent_is_not_changed_by_later_deltas() -> None:
    processor = running()
    feed(processor, StateSnapshotEvent(snapshot={"n": 1}))
    feed(processor, start("c0"), end("c0"))
    (ready,) = [
        e
        for e in processor.receive(run_finished(THREAD, "server-run-1"))
        if isinstance(e, ToolsReady)
    ]
    processor.record_result(ready.calls[0], ToolResult.success("ok"))
    sent = processor.start_run("run-2")
    feed(processor, StateDeltaEvent(delta=[AddOperation(path="/n", value=2)]))
    assert sent.state == {"n": 1}
    assert processor.conversation.state == {"n": 2}


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [200, 50_000])
def test_deep_state_is_a_typed_error_never_a_recursion_error(depth: int) -> None:
    processor = running()
    effects = feed(processor, StateSnapshotEvent(snapshot={"deep": nested(depth)}))
    ended_by(effects, "max_json_depth")


@pytest.mark.parametrize("depth", [200, 50_000])
def test_a_delta_that_nests_the_state_too_deep_is_a_typed_error(depth: int) -> None:
    processor = running()
    feed(processor, StateSnapshotEvent(snapshot={"a": nested(100)}))
    effects = feed(processor, StateDeltaEvent(delta=[AddOperation(path="/b", value=nested(depth))]))
    ended_by(effects, "max_json_depth")


def test_moving_a_deep_value_deeper_is_a_typed_error() -> None:
    processor = running(max_json_depth=10)
    feed(processor, StateSnapshotEvent(snapshot={"a": nested(8), "b": [[[]]]}))
    effects = feed(
        processor,
        StateDeltaEvent(delta=[MoveOperation(from_="/a", path="/b/0/0/0")]),
    )
    ended_by(effects, "max_json_depth")


@pytest.mark.parametrize("depth", [200, 900])
def test_a_deep_tool_result_from_the_wire_is_a_typed_error(depth: int) -> None:
    # On the wire a result is a string or content parts, whose metadata is any JSON
    # (deeper than the decoder takes is the decoder's own error).
    processor = running()
    feed(processor, start("c0"), end("c0"))
    payload = (
        b'{"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "c0", "content": '
        b'[{"type": "text", "text": "x", "metadata": ' + b"[" * depth + b"1" + b"]" * depth + b"}]}"
    )
    ended_by(feed(processor, decode_event(payload)), "max_json_depth")
    # The agent's deep result is not kept: the call is abandoned with the limit.
    [(call_id, result)] = [(c.id, c.result) for c in processor.abandoned]
    assert call_id == "c0"
    assert result is not None and result.error is not None
    assert "max_json_depth" in result.error


@pytest.mark.parametrize("depth", [200, 50_000])
def test_a_deep_tool_result_is_a_typed_error(depth: int) -> None:
    processor = running()
    feed(processor, start("c0"), end("c0"))
    effects = feed(
        processor, ToolCallResultEvent(message_id="r", tool_call_id="c0", content=nested(depth))
    )
    ended_by(effects, "max_json_depth")


@pytest.mark.parametrize("depth", [200, 900])
def test_a_deep_interrupt_is_a_typed_error(depth: int) -> None:
    # What the agent asks is kept (and written to a store): its metadata is any JSON.
    processor = running()
    feed(processor, start("c0"), end("c0"))
    asked = Interrupt(id="i1", reason="approval", metadata={"deep": nested(depth)})
    effects = feed(processor, run_interrupted(THREAD, "server-run-1", asked))
    ended_by(effects, "max_json_depth")
    assert processor.status is RunStatus.failed
    assert processor.interrupts == ()
    assert [c.id for c in processor.abandoned] == ["c0"]


def test_an_interrupt_within_max_json_depth_is_kept() -> None:
    # Counted from the list of interrupts: the list, an interrupt, its schema and the
    # seven lists inside make ten levels; one more is refused.
    processor = running(max_json_depth=10)
    asked = Interrupt(id="i1", reason="approval", response_schema={"a": nested(7)})
    feed(processor, run_interrupted(THREAD, "server-run-1", asked))
    assert processor.status is RunStatus.interrupted
    assert processor.interrupts == (asked,)
    processor = running(max_json_depth=10)
    deeper = Interrupt(id="i1", reason="approval", response_schema={"a": nested(8)})
    ended_by(feed(processor, run_interrupted(THREAD, "server-run-1", deeper)), "max_json_depth")


# --- arguments that real servers send late or wrong -----------------------------------


def finish_run(processor: EventProcessor) -> ToolsReady:
    (ready,) = [
        e
        for e in processor.receive(run_finished(THREAD, "server-run-1"))
        if isinstance(e, ToolsReady)
    ]
    return ready


def test_arguments_after_end_and_before_the_run_ends_belong_to_the_call() -> None:
    # pydantic-ai, two calls interleaved: END of the first comes when the second starts.
    processor = running()
    effects = feed(
        processor,
        start("a", "get_secret_number"),
        args("a", '{"name":'),
        end("a"),
        start("b", "get_secret_number"),
        args("b", '{"name": "bob"}'),
        args("a", ' "ali'),
        args("a", 'ce"}'),
        end("b"),
    )
    assert [e.violation.code for e in effects if isinstance(e, ViolationRaised)] == [
        "args_after_end"
    ]
    ready = finish_run(processor)
    assert {c.id: c.arguments for c in ready.calls} == {
        "a": '{"name": "alice"}',
        "b": '{"name": "bob"}',
    }


def test_arguments_after_the_agents_result_are_dropped() -> None:
    processor = running()
    feed(
        processor,
        start("a"),
        args("a", "{}"),
        end("a"),
        ToolCallResultEvent(message_id="r", tool_call_id="a", content="done"),
    )
    effects = feed(processor, args("a", "garbage"))
    assert [e.violation.code for e in effects if isinstance(e, ViolationRaised)] == [
        "args_after_result"
    ]


def snapshot_with(*calls: tuple[str, str]) -> MessagesSnapshotEvent:
    return MessagesSnapshotEvent(
        messages=[
            UserMessage(id="u", content="go"),
            AssistantMessage(
                id="asst",
                tool_calls=[
                    ToolCall(
                        id=call_id, function=FunctionCall(name="get_secret_number", arguments=a)
                    )
                    for call_id, a in calls
                ],
            ),
        ]
    )


def test_a_snapshot_that_disagrees_with_the_streamed_arguments_wins() -> None:
    # LangGraph, two calls interleaved: the deltas went to the wrong call ids.
    processor = running()
    feed(
        processor,
        start("a", "get_secret_number"),
        args("a", '{"name":'),
        args("a", '{"name": "bob"}'),
        end("a"),
        start("b", "get_secret_number"),
        args("b", ' "alice"}'),
        end("b"),
    )
    effects = feed(processor, snapshot_with(("a", '{"name": "alice"}'), ("b", '{"name": "bob"}')))
    assert [e.violation.code for e in effects if isinstance(e, ViolationRaised)] == [
        "arguments_from_snapshot",
        "arguments_from_snapshot",
    ]
    ready = finish_run(processor)
    assert {c.id: c.arguments for c in ready.calls} == {
        "a": '{"name": "alice"}',
        "b": '{"name": "bob"}',
    }


def test_a_snapshot_that_agrees_up_to_spacing_changes_nothing() -> None:
    processor = running()
    feed(processor, start("a", "get_secret_number"), args("a", '{"name":"alice"}'), end("a"))
    effects = feed(processor, snapshot_with(("a", '{ "name" : "alice" }')))
    assert not [e for e in effects if isinstance(e, ViolationRaised)]
    assert finish_run(processor).calls[0].arguments == '{"name":"alice"}'


def test_a_snapshot_does_not_touch_a_call_with_a_result_or_arguments_that_are_not_json() -> None:
    processor = running()
    feed(
        processor,
        start("a"),
        args("a", '{"x": 1}'),
        end("a"),
        ToolCallResultEvent(message_id="r", tool_call_id="a", content="done"),
        start("b"),
        args("b", '{"y": 1}'),
        end("b"),
    )
    effects = feed(processor, snapshot_with(("a", '{"x": 2}'), ("b", "not json")))
    assert not [e for e in effects if isinstance(e, ViolationRaised)]
    calls = {c.id: c for c in processor.tool_calls}
    assert calls["a"].arguments == '{"x": 1}'
    assert calls["b"].arguments == '{"y": 1}'
    assert calls["a"].status is ToolCallStatus.completed


def test_a_recursion_error_while_processing_is_a_typed_error_not_an_internal_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The net under every handler: nesting some walk could not take (a library's
    # recursive encoder, say) is the agent's malformed input, not a bug here.
    def too_deep(processor: EventProcessor, event: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    handlers: dict[type[Any], Any] = _processor._HANDLERS
    key: type[Any] = CustomEvent
    monkeypatch.setitem(handlers, key, too_deep)
    processor = running()
    feed(processor, TextMessageStartEvent(message_id="m"))
    feed(processor, TextMessageContentEvent(message_id="m", delta="kept"))
    effects = feed(processor, CustomEvent(name="deep", value=None))
    ended_by(effects, "max_json_depth")
    assert processor.status is RunStatus.failed
    assert texts(processor) == ["kept"]


# --- a restored turn and a restored history keep the counts and the index right --------------


def test_a_restored_batch_commits_once_its_last_executing_call_has_its_result() -> None:
    processor = EventProcessor(Conversation(THREAD, [UserMessage(id="u", content="go")]))
    done = ToolCallInfo("c0", "lookup", status=ToolCallStatus.completed)
    done.result = ToolResult.success("by the agent")
    executing = [ToolCallInfo(f"c{i}", "lookup", status=ToolCallStatus.executing) for i in (1, 2)]
    (ready,) = [
        e
        for e in processor.restore(run_id="run-1", depth=0, runs=1, calls=[done, *executing])
        if isinstance(e, ToolsReady)
    ]
    assert [c.id for c in ready.calls] == ["c1", "c2"]
    assert processor.record_result(executing[0], ToolResult.success("one")) == ()
    assert list(processor.conversation.tool_calls()) == []  # not committed yet
    processor.record_result(executing[1], ToolResult.success("two"))
    assert [c.id for c in processor.conversation.tool_calls()] == ["c0", "c1", "c2"]


def test_a_history_put_in_from_a_store_is_indexed_afresh() -> None:
    conversation = Conversation(THREAD, [UserMessage(id="u", content="go")])
    old = ToolCallInfo("c-old", "lookup", status=ToolCallStatus.completed)
    old.result = ToolResult.success("x")
    conversation.append(ToolCallBatch(id="b-old", calls=(old,), result_message_ids=("r-old",)))
    assert conversation.holds_tool_call("c-old")
    call = ToolCallInfo("c-new", "lookup", status=ToolCallStatus.completed)
    call.result = ToolResult.success("y")
    stored: list[ChatMessage] = [
        UserMessage(id="u0", content="earlier"),
        UserMessage(id="u1", content="earlier still"),
        ToolCallBatch(id="b-new", calls=(call,), result_message_ids=("r-new",)),
    ]
    conversation.replace_head(2, stored)
    assert not conversation.holds_tool_call("c-old")
    assert "b-old" not in conversation.known_ids()
    (renamed,) = conversation.adopt_result_ids({"c-new": "server-id"})
    assert renamed.result_message_ids == ("server-id",)
    assert conversation.messages[2] is renamed


def test_arguments_after_a_snapshot_gave_the_call_its_arguments_are_dropped() -> None:
    processor = running()
    feed(processor, start("a", "get_secret_number"), args("a", '{"name":'), end("a"))
    feed(processor, snapshot_with(("a", '{"name": "alice"}')))
    effects = feed(processor, args("a", ' "alice"}'))
    assert [e.violation.code for e in effects if isinstance(e, ViolationRaised)] == [
        "args_after_snapshot"
    ]
    assert finish_run(processor).calls[0].arguments == '{"name": "alice"}'


# --- memory stays near the bounds, measured ----------------------------------------------------


def peak_while(action: Any) -> int:
    """The peak of memory traced while ``action()`` runs, in bytes."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_stream_of_legal_text_deltas_holds_memory_near_max_text_bytes() -> None:
    bound = 1024 * 1024
    processor = running(max_text_bytes=bound)
    processor.receive(TextMessageStartEvent(message_id="m"))

    def flood() -> None:
        for i in range(20_000):  # 20 MB of text, each event legal on its own
            delta = f"{i:08d}" + "x" * 992  # a string of its own, as decoded ones are
            processor.receive(TextMessageContentEvent(message_id="m", delta=delta))
            if processor.status is not RunStatus.running:
                return

    assert peak_while(flood) < 3 * bound
    assert processor.reason is not None and processor.reason.code == "max_text_bytes"


def test_copies_that_double_the_state_hold_memory_near_max_state_bytes() -> None:
    bound = 1024 * 1024
    processor = running(max_state_bytes=bound)
    feed(processor, StateSnapshotEvent(snapshot={"seed": ["x" * 100] * 100}))

    def double() -> None:
        for i in range(64):  # unbounded, 64 doublings would be 2**64 times the seed
            processor.receive(StateDeltaEvent(delta=[CopyOperation(from_="", path=f"/c{i}")]))
            if processor.status is not RunStatus.running:
                return

    assert peak_while(double) < 2 * bound
    assert processor.reason is not None and processor.reason.code == "max_state_bytes"


def test_a_supplied_state_already_past_max_state_bytes_fails_the_first_delta() -> None:
    # The embedding code handed over the state: a delta must copy it within the bound.
    big = {"big": "x" * 200}
    processor = EventProcessor(
        Conversation(THREAD, [UserMessage(id="u", content="go")], state=big),
        limits=Limits(max_state_bytes=100),
    )
    processor.start_run("run-1")
    effects = feed(
        processor,
        run_started(THREAD, "server-run-1"),
        StateDeltaEvent(delta=[AddOperation(path="/n", value=1)]),
    )
    ended_by(effects, "max_state_bytes")
    assert processor.conversation.state is big
    assert big == {"big": "x" * 200}


def test_a_snapshot_recording_arguments_past_max_argument_bytes_keeps_the_streamed_ones() -> None:
    processor = running(max_argument_bytes=20)
    feed(processor, start("a", "get_secret_number"), args("a", '{"n": 1}'), end("a"))
    effects = feed(processor, snapshot_with(("a", '{"n": "' + "9" * 40 + '"}')))
    assert not [e for e in effects if isinstance(e, ViolationRaised)]
    assert finish_run(processor).calls[0].arguments == '{"n": 1}'
