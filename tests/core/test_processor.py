"""EventProcessor: one user turn fed decoded AG-UI events, answering with effects.

Laid out as the processor's docstring is: the Slice 1 acceptance list (arguments,
END -> pending, zero-argument calls), the end of a run (ToolsReady / TurnCompleted /
TurnEnded), the tolerance table row by row, chunks, server-run tools, activity,
depth, the run input, state, limits, ending a turn, results, internal errors,
reasoning and unknown events; then how a run ended (RUN_FINISHED.outcome: success,
interrupt, cancelled) and the resume entries that answer an interrupt.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import msgspec
import pytest

from toolrelay import (
    IllegalTransition,
    LocalProtocolError,
    ReasonKind,
    ResumeError,
    RunStatus,
    TerminalReason,
    ToolCallStatus,
    ToolResult,
)
from toolrelay._core import _processor
from toolrelay._core._conversation import (
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._core._effects import (
    NO_EFFECTS,
    Activity,
    ActivityChanged,
    ActivityKind,
    Effect,
    MessagesSettled,
    ToolsReady,
    TurnCompleted,
    TurnEnded,
    TurnInterrupted,
    ViolationRaised,
)
from toolrelay._core._processor import EventProcessor, Limits
from toolrelay._core._resume import check_resume
from toolrelay.protocol import (
    AddOperation,
    AssistantMessage,
    Context,
    CustomEvent,
    Event,
    FunctionCall,
    Interrupt,
    Message,
    MessagesSnapshotEvent,
    MoveOperation,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessage,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RemoveOperation,
    ReplaceOperation,
    ResumeEntry,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TestOperation,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    Tool,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UnknownEvent,
    UserMessage,
    decode_event,
    encode,
)
from toolrelay.testing import (
    run_cancelled,
    run_error,
    run_finished,
    run_interrupted,
    run_started,
    server_tool_call,
    text,
    tool_call,
)

THREAD = "thread-1"
USER = UserMessage(id="user-1", content="What are the secret numbers?")
LOGGER = "toolrelay.core"

F = TypeVar("F", bound=Effect)


# --- helpers -------------------------------------------------------------------------


def new_processor(*messages: Any, **kwargs: Any) -> EventProcessor:
    """A processor on a fresh conversation (the user's message first), idle."""
    counter = itertools.count(1)
    kwargs.setdefault("id_factory", lambda: f"gen-{next(counter)}")
    conversation = Conversation(THREAD, messages or (USER,))
    return EventProcessor(conversation, **kwargs)


def running(*messages: Any, run_id: str = "run-1", **kwargs: Any) -> EventProcessor:
    """A processor whose first run started and whose server said RUN_STARTED."""
    processor = new_processor(*messages, **kwargs)
    processor.start_run(run_id)
    processor.receive(run_started(THREAD, f"server-{run_id}"))
    return processor


def feed(processor: EventProcessor, *parts: Event | UnknownEvent | Iterable[Event]) -> list[Effect]:
    """Feed events (and lists of events) in order; return every effect."""
    effects: list[Effect] = []
    for part in parts:
        events: Iterable[Event | UnknownEvent] = (
            [part] if isinstance(part, (msgspec.Struct, UnknownEvent)) else part
        )
        for event in events:
            effects.extend(processor.receive(event))
    return effects


def finish(processor: EventProcessor) -> list[Effect]:
    return feed(processor, run_finished(THREAD, processor.server_run_id or "server-run"))


def only(effects: Sequence[Effect], kind: type[F]) -> F:
    found = [e for e in effects if isinstance(e, kind)]
    assert len(found) == 1, effects
    return found[0]


def codes(effects: Sequence[Effect]) -> list[str]:
    return [e.violation.code for e in effects if isinstance(e, ViolationRaised)]


def status_of(processor: EventProcessor, *, activity: bool = False) -> Any:
    """The turn's status (or activity kind), read through a call so that mypy does not
    narrow it between two steps of a test."""
    return processor.activity.kind if activity else processor.status


def call(processor: EventProcessor, call_id: str) -> ToolCallInfo:
    return next(c for c in processor.tool_calls if c.id == call_id)


def batches(processor: EventProcessor) -> list[ToolCallBatch]:
    return [m for m in processor.conversation.messages if isinstance(m, ToolCallBatch)]


def snapshot(processor: EventProcessor) -> Any:
    """What an ignored event must not change: calls, texts, the conversation, state."""
    return (
        [(c.id, c.name, c.status, c.arguments) for c in processor.tool_calls],
        [
            (type(m).__name__, getattr(m, "id", None), getattr(m, "text", None))
            for m in processor.conversation.messages
        ],
        processor.status,
        msgspec.json.encode(processor.conversation.state),
    )


def warnings_with(caplog: pytest.LogCaptureFixture, code: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and code in r.getMessage()
    ]


def execute_all(processor: EventProcessor, results: dict[str, ToolResult] | None = None) -> None:
    """Record a result for every executing call (the runtime's job)."""
    for c in processor.tool_calls:
        if c.status is ToolCallStatus.executing:
            result = (results or {}).get(c.id, ToolResult.success(f"result of {c.id}"))
            processor.record_result(c, result)


# --- Slice 1 acceptance ------------------------------------------------------------------


def test_tool_call_start_creates_a_streaming_call_with_empty_arguments() -> None:
    processor = running()
    effects = feed(processor, ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"))
    c = call(processor, "c1")
    assert c.status is ToolCallStatus.streaming
    assert c.name == "lookup"
    assert c.arguments == ""
    assert c.run_id == "run-1"
    assert only(effects, ActivityChanged).activity == Activity(
        ActivityKind.CALLING_TOOLS, ("lookup",)
    )


def test_tool_call_args_accumulate_across_deltas() -> None:
    processor = running()
    feed(processor, ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"))
    for delta in ['{"na', 'me": ', '"ali', 'ce"}']:
        assert processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta=delta)) == ()
    c = call(processor, "c1")
    assert c.arguments == '{"name": "alice"}'
    assert c.status is ToolCallStatus.streaming


def test_tool_call_end_moves_the_call_to_pending_and_keeps_it() -> None:
    processor = running()
    feed(processor, tool_call("lookup", {"name": "alice"}, id="c1"))
    c = call(processor, "c1")
    assert c.status is ToolCallStatus.pending
    assert json.loads(c.arguments) == {"name": "alice"}
    assert status_of(processor) is RunStatus.running  # END is never the trigger


def test_tool_call_end_does_not_start_execution() -> None:
    processor = running()
    effects = feed(processor, tool_call("lookup", "{}", id="c1"))
    assert not any(isinstance(e, ToolsReady) for e in effects)


def test_a_zero_argument_call_ends_pending_with_empty_arguments() -> None:
    processor = running()
    feed(processor, tool_call("now", None, id="c1"))
    c = call(processor, "c1")
    assert c.status is ToolCallStatus.pending
    assert c.arguments == ""
    ready = only(finish(processor), ToolsReady)
    assert ready.calls[0].arguments == ""


def test_several_calls_in_sequence_are_all_pending_in_their_order() -> None:
    processor = running()
    feed(
        processor,
        tool_call("get_secret_number", {"name": "alice"}, id="a", chunk=3),
        tool_call("get_secret_number", {"name": "bob"}, id="b", chunk=5),
        tool_call("now", None, id="c"),
    )
    assert [c.id for c in processor.tool_calls] == ["a", "b", "c"]
    assert all(c.status is ToolCallStatus.pending for c in processor.tool_calls)
    assert json.loads(call(processor, "b").arguments) == {"name": "bob"}


def test_interleaved_calls_accumulate_their_own_arguments() -> None:
    processor = running()
    feed(
        processor,
        ToolCallStartEvent(tool_call_id="a", tool_call_name="first"),
        ToolCallStartEvent(tool_call_id="b", tool_call_name="second"),
        ToolCallArgsEvent(tool_call_id="a", delta='{"x"'),
        ToolCallArgsEvent(tool_call_id="b", delta='{"y"'),
        ToolCallArgsEvent(tool_call_id="b", delta=": 2}"),
        ToolCallEndEvent(tool_call_id="b"),
        ToolCallArgsEvent(tool_call_id="a", delta=": 1}"),
    )
    assert call(processor, "b").status is ToolCallStatus.pending
    assert call(processor, "a").status is ToolCallStatus.streaming
    feed(processor, ToolCallEndEvent(tool_call_id="a"))
    assert json.loads(call(processor, "a").arguments) == {"x": 1}
    assert json.loads(call(processor, "b").arguments) == {"y": 2}
    ready = only(finish(processor), ToolsReady)
    assert [c.id for c in ready.calls] == ["a", "b"]  # the order they started in


def test_text_and_tool_calls_in_one_run_coexist() -> None:
    processor = running()
    feed(
        processor,
        text("Let me check that.", id="m1", chunk=4),
        tool_call("lookup", {"q": 1}, id="c1", parent_message_id="m1"),
    )
    only(finish(processor), ToolsReady)
    texts = list(processor.conversation.texts())
    assert [(t.id, t.text, t.complete) for t in texts] == [("m1", "Let me check that.", True)]
    execute_all(processor)
    run_input = processor.start_run("run-2")
    assistant = run_input.messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.id == "m1"
    assert assistant.content == "Let me check that."
    assert [tc.id for tc in assistant.tool_calls or ()] == ["c1"]
    assert isinstance(run_input.messages[2], ToolMessage)


# --- the end of a run ------------------------------------------------------------------


def test_run_finished_with_pending_calls_gives_tools_ready_with_executing_calls() -> None:
    processor = running()
    feed(processor, tool_call("a", "{}", id="c1"), tool_call("b", "{}", id="c2"))
    effects = finish(processor)
    ready = only(effects, ToolsReady)
    assert [c.id for c in ready.calls] == ["c1", "c2"]
    assert all(c.status is ToolCallStatus.executing for c in ready.calls)
    assert status_of(processor) is RunStatus.executing_tools
    assert processor.status.is_running
    assert processor.run_ended
    assert processor.reason is None
    assert not any(isinstance(e, (TurnCompleted, TurnEnded)) for e in effects)


def test_run_finished_without_calls_completes_the_turn() -> None:
    processor = running()
    feed(processor, text("Hello!", id="m1"))
    effects = finish(processor)
    completed = only(effects, TurnCompleted)
    assert completed.reason.kind is ReasonKind.COMPLETED
    assert status_of(processor) is RunStatus.completed
    assert processor.reason == completed.reason
    assert status_of(processor, activity=True) is ActivityKind.DONE
    assert not any(isinstance(e, ToolsReady) for e in effects)


def test_run_error_ends_the_turn_failed_with_the_agents_message_and_code() -> None:
    processor = running()
    feed(
        processor,
        tool_call("a", "{}", id="pending"),
        ToolCallStartEvent(tool_call_id="streaming", tool_call_name="b"),
    )
    effects = feed(processor, run_error("model overloaded", code="overloaded"))
    ended = only(effects, TurnEnded)
    assert ended.reason.kind is ReasonKind.AGENT_ERROR
    assert ended.reason.message == "model overloaded"
    assert ended.reason.code == "overloaded"
    assert status_of(processor) is RunStatus.failed
    assert processor.tool_calls == ()  # in-flight cleared
    assert [c.id for c in processor.abandoned] == ["pending", "streaming"]
    for c in processor.abandoned:
        assert c.status is ToolCallStatus.failed  # never left pending
        assert c.result is not None
        assert c.result.error is not None
        assert "abandoned" in c.result.error
    assert batches(processor) == []  # abandoned calls are not committed


def test_run_error_keeps_the_text_already_received_marked_interrupted() -> None:
    processor = running()
    feed(
        processor,
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="The answer is"),
        run_error("boom"),
    )
    [t] = processor.conversation.texts()
    assert t.text == "The answer is"
    assert t.complete
    assert t.interrupted


def test_run_error_keeps_a_result_the_agent_already_sent() -> None:
    processor = running()
    feed(
        processor,
        server_tool_call("search", {"q": "x"}, "found it", id="s1", message_id="r1"),
        tool_call("local", "{}", id="c1"),
        run_error("boom"),
    )
    [batch] = batches(processor)
    assert [c.id for c in batch.calls] == ["s1"]
    assert batch.result_message_ids == ("r1",)
    assert [c.id for c in processor.abandoned] == ["c1"]


# --- the tolerance table, row by row --------------------------------------------------

START_C1 = ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup")
ARGS_C1 = ToolCallArgsEvent(tool_call_id="c1", delta='{"a": 1}')
END_C1 = ToolCallEndEvent(tool_call_id="c1")

DROPPED_ROWS: list[Any] = [
    pytest.param(
        [],
        ToolCallArgsEvent(tool_call_id="ghost", delta="{}"),
        "args_for_unknown_call",
        id="TOOL_CALL_ARGS unknown id",
    ),
    pytest.param(
        [],
        ToolCallEndEvent(tool_call_id="ghost"),
        "end_for_unknown_call",
        id="TOOL_CALL_END unknown id",
    ),
    pytest.param(
        [
            START_C1,
            ARGS_C1,
            END_C1,
            ToolCallResultEvent(message_id="r1", tool_call_id="c1", content="done"),
        ],
        ToolCallArgsEvent(tool_call_id="c1", delta="garbage"),
        "args_after_result",
        id="TOOL_CALL_ARGS after the agent's result",
    ),
    pytest.param(
        [START_C1, ARGS_C1],
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="other"),
        "duplicate_tool_call_start",
        id="TOOL_CALL_START id already seen",
    ),
    pytest.param(
        [START_C1, ARGS_C1, END_C1],
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="other"),
        "duplicate_tool_call_start",
        id="TOOL_CALL_START id already ended",
    ),
    pytest.param(
        [START_C1, ARGS_C1, END_C1], END_C1, "duplicate_tool_call_end", id="TOOL_CALL_END twice"
    ),
    pytest.param(
        [],
        ToolCallResultEvent(message_id="r1", tool_call_id="ghost", content="x"),
        "result_for_unknown_call",
        id="TOOL_CALL_RESULT unknown id",
    ),
    pytest.param(
        [
            TextMessageStartEvent(message_id="m1"),
            TextMessageContentEvent(message_id="m1", delta="hi"),
        ],
        TextMessageStartEvent(message_id="m1"),
        "duplicate_text_message_start",
        id="TEXT_MESSAGE_START id open",
    ),
    pytest.param(
        [],
        TextMessageEndEvent(message_id="ghost"),
        "end_for_unknown_message",
        id="TEXT_MESSAGE_END id not open",
    ),
    pytest.param(
        [*text("done", id="m1")],
        TextMessageEndEvent(message_id="m1"),
        "end_for_unknown_message",
        id="TEXT_MESSAGE_END twice",
    ),
    pytest.param(
        [],
        RunStartedEvent(thread_id=THREAD, run_id="another"),
        "duplicate_run_started",
        id="RUN_STARTED twice",
    ),
    pytest.param(
        [StateSnapshotEvent(snapshot={"count": 1})],
        StateDeltaEvent(delta=[RemoveOperation(path="/missing")]),
        "state_delta_failed",
        id="STATE_DELTA that does not apply",
    ),
]


@pytest.mark.parametrize(("before", "offending", "code"), DROPPED_ROWS)
def test_a_tolerated_violation_is_recorded_logged_and_the_event_dropped(
    before: list[Event], offending: Event, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    processor = running()
    feed(processor, before)
    state_before = snapshot(processor)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    effects = processor.receive(offending)
    assert codes(effects) == [code]
    assert [v.code for v in processor.violations] == [code]
    assert processor.violations[0].event_type == str(offending.__struct_config__.tag)
    assert len(warnings_with(caplog, code)) == 1
    assert snapshot(processor) == state_before  # dropped: nothing changed
    assert status_of(processor) is RunStatus.running  # and the turn goes on


def test_a_result_for_a_call_the_conversation_already_holds_is_ignored_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Run 1 asks for c1; run 2 (the continuation) echoes c1's result back.
    processor = running()
    feed(processor, tool_call("lookup", "{}", id="c1"))
    finish(processor)
    execute_all(processor)
    processor.start_run("run-2")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    echo = ToolCallResultEvent(message_id="r9", tool_call_id="c1", content="result of c1")
    assert processor.receive(echo) == ()
    assert processor.violations == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_result_for_a_call_in_a_supplied_assistant_message_is_ignored_silently() -> None:
    history = [
        USER,
        AssistantMessage(
            id="a0",
            tool_calls=[ToolCall(id="old", function=FunctionCall(name="f", arguments="{}"))],
        ),
        ToolMessage(id="t0", tool_call_id="old", content="42"),
        UserMessage(id="user-2", content="and now?"),
    ]
    processor = running(*history)
    echo = ToolCallResultEvent(message_id="r9", tool_call_id="old", content="42")
    assert processor.receive(echo) == ()
    assert processor.violations == []


def test_text_content_without_start_starts_the_message_implicitly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    processor = running()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    effects = feed(
        processor,
        TextMessageContentEvent(message_id="m1", delta="Hel"),
        TextMessageContentEvent(message_id="m1", delta="lo"),
        TextMessageEndEvent(message_id="m1"),
    )
    assert codes(effects) == ["content_without_start"]
    assert len(warnings_with(caplog, "content_without_start")) == 1
    [t] = processor.conversation.texts()
    assert (t.id, t.role, t.text, t.complete) == ("m1", "assistant", "Hello", True)


@pytest.mark.parametrize(
    "end",
    [
        pytest.param(
            lambda: run_finished(THREAD, "server-run-1"), id="RUN_FINISHED then turn completed"
        ),
        pytest.param(lambda: run_error("boom"), id="RUN_ERROR"),
    ],
)
def test_any_event_after_the_run_ended_is_dropped(
    end: Any, caplog: pytest.LogCaptureFixture
) -> None:
    processor = running()
    feed(processor, end())
    state_before = snapshot(processor)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    effects = feed(processor, text("late", id="late"), tool_call("late", "{}", id="late"))
    assert set(codes(effects)) == {"event_after_run_end"}
    assert len(warnings_with(caplog, "event_after_run_end")) == len(effects) == 6
    assert snapshot(processor) == state_before


def test_an_event_after_run_finished_while_executing_tools_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    processor = running()
    feed(processor, tool_call("lookup", "{}", id="c1"))
    finish(processor)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    effects = feed(processor, ToolCallArgsEvent(tool_call_id="c1", delta="x"))
    assert codes(effects) == ["event_after_run_end"]
    assert call(processor, "c1").arguments == "{}"
    assert call(processor, "c1").status is ToolCallStatus.executing
    assert len(warnings_with(caplog, "event_after_run_end")) == 1


def test_events_after_the_turn_was_ended_from_this_side_are_dropped_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    processor = running()
    processor.cancel()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert feed(processor, text("late"), run_finished(THREAD, "x")) == []
    assert processor.violations == []
    assert caplog.records == []
    assert status_of(processor) is RunStatus.cancelled


def test_run_finished_closes_a_text_message_left_open(caplog: pytest.LogCaptureFixture) -> None:
    processor = running()
    feed(
        processor,
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta="All done"),
    )
    caplog.set_level(logging.WARNING, logger=LOGGER)
    effects = finish(processor)
    assert codes(effects) == ["text_message_not_ended"]
    assert len(warnings_with(caplog, "text_message_not_ended")) == 1
    only(effects, TurnCompleted)
    [t] = processor.conversation.texts()
    assert (t.text, t.complete, t.interrupted) == ("All done", True, False)


def test_run_finished_abandons_a_call_still_streaming_and_runs_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    processor = running()
    feed(
        processor,
        tool_call("complete", {"a": 1}, id="done"),
        ToolCallStartEvent(tool_call_id="cut", tool_call_name="cut_short"),
        ToolCallArgsEvent(tool_call_id="cut", delta='{"a": '),
    )
    caplog.set_level(logging.WARNING, logger=LOGGER)
    effects = finish(processor)
    assert codes(effects) == ["tool_call_not_ended"]
    assert len(warnings_with(caplog, "tool_call_not_ended")) == 1
    ready = only(effects, ToolsReady)
    assert [c.id for c in ready.calls] == ["done"]  # never executed on partial arguments
    [cut] = processor.abandoned
    assert cut.id == "cut"
    assert cut.status is ToolCallStatus.failed
    assert cut.id not in [c.id for c in processor.tool_calls]


def test_run_finished_with_only_an_unfinished_call_completes_the_turn() -> None:
    processor = running()
    feed(processor, ToolCallStartEvent(tool_call_id="cut", tool_call_name="f"))
    effects = finish(processor)
    assert codes(effects) == ["tool_call_not_ended"]
    only(effects, TurnCompleted)
    assert [c.status for c in processor.abandoned] == [ToolCallStatus.failed]


def test_a_second_run_started_does_not_change_the_server_run_id() -> None:
    processor = running()
    feed(processor, RunStartedEvent(thread_id=THREAD, run_id="impostor"))
    assert processor.server_run_id == "server-run-1"


def test_run_started_for_another_thread_is_a_violation(caplog: pytest.LogCaptureFixture) -> None:
    processor = new_processor()
    processor.start_run("run-1")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    effects = feed(processor, run_started("other-thread", "srv"))
    assert codes(effects) == ["thread_id_mismatch"]
    assert len(warnings_with(caplog, "thread_id_mismatch")) == 1


def test_a_failed_state_delta_leaves_the_state_unchanged() -> None:
    processor = running()
    feed(processor, StateSnapshotEvent(snapshot={"count": 1, "items": ["a"]}))
    effects = feed(
        processor,
        StateDeltaEvent(
            delta=[
                ReplaceOperation(path="/count", value=2),  # applies...
                TestOperation(path="/items/0", value="b"),  # ...but the patch fails here
            ]
        ),
    )
    assert codes(effects) == ["state_delta_failed"]
    assert processor.conversation.state == {"count": 1, "items": ["a"]}


def test_an_unknown_event_type_is_ignored_and_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    processor = running()
    feed(processor, ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"))
    state_before = snapshot(processor)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    unknown = decode_event(b'{"type": "HOLOGRAM_PROJECTED", "beam": 3}')
    assert isinstance(unknown, UnknownEvent)
    assert processor.receive(unknown) == ()
    assert snapshot(processor) == state_before
    assert processor.violations == []
    [record] = caplog.records
    assert record.levelno == logging.DEBUG
    assert "HOLOGRAM_PROJECTED" in record.getMessage()


@pytest.mark.parametrize(
    "event",
    [
        StepStartedEvent(step_name="plan"),
        StepFinishedEvent(step_name="plan"),
        CustomEvent(name="x", value={"a": 1}),
        RawEvent(event={"anything": True}),
    ],
    ids=lambda e: str(e.__struct_config__.tag),
)
def test_known_events_without_meaning_for_a_turn_change_nothing(event: Event) -> None:
    processor = running()
    feed(processor, ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"))
    state_before = snapshot(processor)
    assert processor.receive(event) == ()
    assert snapshot(processor) == state_before
    assert processor.violations == []


def test_the_turn_completes_normally_after_tolerated_violations() -> None:
    processor = running()
    feed(
        processor,
        ToolCallArgsEvent(tool_call_id="ghost", delta="{}"),
        ToolCallEndEvent(tool_call_id="ghost"),
        TextMessageEndEvent(message_id="ghost"),
        text("fine", id="m1"),
    )
    only(finish(processor), TurnCompleted)
    assert len(processor.violations) == 3


# --- chunks (implicit start and end, as the AG-UI JS client reads them) -----------------


def test_text_chunks_build_one_message_closed_by_the_next_other_event() -> None:
    processor = running()
    effects = feed(
        processor,
        TextMessageChunkEvent(message_id="m1", role="assistant", delta="Hel"),
        TextMessageChunkEvent(delta="lo"),
        TextMessageChunkEvent(message_id="m1", delta="!"),
    )
    assert codes(effects) == []
    [t] = processor.conversation.texts()
    assert (t.text, t.complete) == ("Hello!", False)
    feed(processor, StepStartedEvent(step_name="x"))
    assert (t.complete, t.interrupted) == (True, False)


def test_a_text_chunk_with_a_new_id_closes_the_previous_message() -> None:
    processor = running()
    feed(
        processor,
        TextMessageChunkEvent(message_id="m1", delta="one"),
        TextMessageChunkEvent(message_id="m2", delta="two"),
    )
    first, second = processor.conversation.texts()
    assert (first.id, first.text, first.complete) == ("m1", "one", True)
    assert (second.id, second.text, second.complete) == ("m2", "two", False)


def test_text_chunks_then_run_finished_complete_the_turn_without_violation() -> None:
    processor = running()
    feed(processor, TextMessageChunkEvent(message_id="m1", delta="hi"))
    effects = finish(processor)
    assert codes(effects) == []
    only(effects, TurnCompleted)
    [t] = processor.conversation.texts()
    assert t.complete


def test_a_first_text_chunk_without_message_id_is_dropped() -> None:
    processor = running()
    effects = feed(processor, TextMessageChunkEvent(delta="orphan"))
    assert codes(effects) == ["chunk_without_message_id"]
    assert list(processor.conversation.texts()) == []


def test_tool_call_chunks_build_one_call_closed_by_the_next_other_event() -> None:
    processor = running()
    feed(
        processor,
        ToolCallChunkEvent(tool_call_id="c1", tool_call_name="lookup", delta='{"q"'),
        ToolCallChunkEvent(delta=': "x"'),
        ToolCallChunkEvent(tool_call_id="c1", delta="}"),
    )
    c = call(processor, "c1")
    assert c.status is ToolCallStatus.streaming
    assert str(processor.activity) == "Calling: lookup"
    effects = finish(processor)
    assert codes(effects) == []  # the chunk was closed before RUN_FINISHED: not abandoned
    ready = only(effects, ToolsReady)
    assert [(x.id, x.arguments) for x in ready.calls] == [("c1", '{"q": "x"}')]


def test_a_tool_call_chunk_with_a_new_id_starts_the_next_call() -> None:
    processor = running()
    feed(
        processor,
        ToolCallChunkEvent(tool_call_id="a", tool_call_name="first", delta="{}"),
        ToolCallChunkEvent(tool_call_id="b", tool_call_name="second"),
    )
    assert call(processor, "a").status is ToolCallStatus.pending
    assert call(processor, "b").status is ToolCallStatus.streaming
    assert call(processor, "b").arguments == ""


def test_a_first_tool_call_chunk_needs_an_id_and_a_name() -> None:
    processor = running()
    effects = feed(
        processor,
        ToolCallChunkEvent(tool_call_id="c1", delta="{}"),
        ToolCallChunkEvent(tool_call_name="f", delta="{}"),
    )
    assert codes(effects) == ["chunk_without_call_id", "chunk_without_call_id"]
    assert processor.tool_calls == ()


def test_a_tool_call_chunk_for_a_closed_call_is_a_duplicate_start() -> None:
    processor = running()
    effects = feed(
        processor,
        ToolCallChunkEvent(tool_call_id="c1", tool_call_name="f", delta="{}"),
        StepStartedEvent(step_name="s"),
        ToolCallChunkEvent(tool_call_id="c1", tool_call_name="f", delta="more"),
    )
    assert codes(effects) == ["duplicate_tool_call_start"]
    assert call(processor, "c1").arguments == "{}"


def test_a_text_chunk_closes_a_tool_call_chunk_and_the_reverse() -> None:
    processor = running()
    feed(
        processor,
        ToolCallChunkEvent(tool_call_id="c1", tool_call_name="f", delta="{}"),
        TextMessageChunkEvent(message_id="m1", delta="text"),
    )
    assert call(processor, "c1").status is ToolCallStatus.pending
    feed(processor, ToolCallChunkEvent(tool_call_id="c2", tool_call_name="g"))
    [t] = processor.conversation.texts()
    assert t.complete


# --- tools the agent ran itself (TOOL_CALL_RESULT) ---------------------------------------


def test_a_server_run_tool_is_completed_not_executed_and_committed_with_its_message_id() -> None:
    processor = running()
    feed(processor, server_tool_call("search", {"q": "x"}, "3 hits", id="s1", message_id="r1"))
    s1 = call(processor, "s1")
    assert s1.status is ToolCallStatus.completed
    assert s1.result == ToolResult.success("3 hits")
    effects = finish(processor)
    assert not any(isinstance(e, ToolsReady) for e in effects)
    only(effects, TurnCompleted)
    [batch] = batches(processor)
    assert [c.id for c in batch.calls] == ["s1"]
    assert batch.result_message_ids == ("r1",)


def server_result_snapshot(name: str, message_id: str, content: str) -> MessagesSnapshotEvent:
    """A MESSAGES_SNAPSHOT of the user's message, the agent's call ``srv-1`` of ``name``
    and its result (stored as ``message_id``)."""
    return MessagesSnapshotEvent(
        messages=[
            USER,
            AssistantMessage(
                id="ai-1",
                tool_calls=[ToolCall(id="srv-1", function=FunctionCall(name=name, arguments="{}"))],
            ),
            ToolMessage(id=message_id, tool_call_id="srv-1", content=content),
        ]
    )


def test_a_call_whose_result_only_the_snapshot_holds_ran_on_the_agent() -> None:
    # LlamaIndex's adapter runs a server tool and sends its result only in the
    # MESSAGES_SNAPSHOT, never as TOOL_CALL_RESULT. The call is the agent's: it is not
    # executed here (it ran; a client tool of that name would run it twice), and its
    # result goes back as the snapshot holds it, under the snapshot's message id.
    processor = running()
    feed(
        processor,
        tool_call("roll_die", "{}", id="srv-1"),
        tool_call("local", "{}", id="cli-1"),
        server_result_snapshot("roll_die", "be5b711d", "4"),
    )
    srv = call(processor, "srv-1")
    assert srv.status is ToolCallStatus.completed
    assert srv.result == ToolResult.success("4")
    ready = only(finish(processor), ToolsReady)
    assert [c.id for c in ready.calls if c.status is ToolCallStatus.executing] == ["cli-1"]
    execute_all(processor)
    sent = processor.start_run("run-2")
    [(srv_id, srv_call), (_, cli_call)] = _tool_messages(sent)
    assert (srv_id, srv_call, cli_call) == ("be5b711d", "srv-1", "cli-1")
    [srv_result] = [m for m in sent.messages if isinstance(m, ToolMessage) and m.id == "be5b711d"]
    assert srv_result.content == "4"


def test_a_run_whose_only_call_the_snapshot_answered_completes_the_turn() -> None:
    processor = running()
    feed(
        processor,
        tool_call("roll_die", "{}", id="srv-1"),
        MessagesSnapshotEvent(
            messages=[
                ToolMessage(
                    id="r1", tool_call_id="srv-1", content="the die fell off", error="no die"
                )
            ]
        ),
    )
    assert call(processor, "srv-1").result == ToolResult("the die fell off", error="no die")
    effects = finish(processor)
    assert not any(isinstance(e, ToolsReady) for e in effects)
    only(effects, TurnCompleted)


def test_a_snapshot_result_for_a_call_that_has_one_or_of_another_run_changes_nothing() -> None:
    processor = running()
    feed(
        processor,
        server_tool_call("search", "{}", "hits", id="s1", message_id="r1"),
        MessagesSnapshotEvent(
            messages=[
                ToolMessage(id="r1", tool_call_id="s1", content="other text"),
                ToolMessage(id="r9", tool_call_id="earlier", content="an older run's"),
            ]
        ),
    )
    assert call(processor, "s1").result == ToolResult.success("hits")
    only(finish(processor), TurnCompleted)


def test_a_result_for_a_streaming_call_completes_it() -> None:
    processor = running()
    feed(
        processor,
        ToolCallStartEvent(tool_call_id="s1", tool_call_name="search"),
        ToolCallResultEvent(message_id="r1", tool_call_id="s1", content="done"),
    )
    assert call(processor, "s1").status is ToolCallStatus.completed


def test_server_and_client_calls_in_one_run_only_the_client_call_is_executed() -> None:
    processor = running()
    feed(
        processor,
        server_tool_call("search", "{}", "hits", id="s1", message_id="r1"),
        tool_call("local", "{}", id="c1"),
    )
    ready = only(finish(processor), ToolsReady)
    assert [c.id for c in ready.calls] == ["c1"]
    execute_all(processor)
    processor.start_run("run-2")
    [batch] = batches(processor)
    assert [c.id for c in batch.calls] == ["s1", "c1"]
    assert batch.result_message_ids[0] == "r1"
    assert batch.result_message_ids[1].startswith("gen-")


def test_a_result_with_content_parts_is_kept_as_json_text() -> None:
    processor = running()
    feed(
        processor,
        tool_call("f", "{}", id="s1"),
        ToolCallResultEvent(message_id="r1", tool_call_id="s1", content=[TextPart(text="hi")]),
    )
    result = call(processor, "s1").result
    assert result is not None
    assert json.loads(result.content) == [{"type": "text", "text": "hi"}]


def test_a_second_result_for_a_call_is_dropped() -> None:
    processor = running()
    feed(processor, server_tool_call("f", "{}", "first", id="s1", message_id="r1"))
    effects = feed(processor, ToolCallResultEvent(message_id="r2", tool_call_id="s1", content="2"))
    assert codes(effects) == ["duplicate_tool_call_result"]
    assert call(processor, "s1").result == ToolResult.success("first")


# --- activity ---------------------------------------------------------------------------


def test_activity_says_calling_while_streaming_and_executing_after_the_run() -> None:
    processor = new_processor()
    assert status_of(processor, activity=True) is ActivityKind.IDLE
    processor.start_run("run-1")
    assert str(processor.activity) == "Thinking..."
    feed(processor, ToolCallStartEvent(tool_call_id="a", tool_call_name="alpha"))
    assert str(processor.activity) == "Calling: alpha"
    effects = feed(processor, tool_call("beta", "{}", id="b"))
    assert only(effects, ActivityChanged).activity == Activity(
        ActivityKind.CALLING_TOOLS, ("alpha", "beta")
    )
    assert str(processor.activity) == "Calling: alpha, beta"
    feed(processor, ToolCallEndEvent(tool_call_id="a"))
    assert str(processor.activity) == "Calling: alpha, beta"
    effects = finish(processor)
    assert only(effects, ActivityChanged).activity == Activity(
        ActivityKind.EXECUTING_TOOLS, ("alpha", "beta")
    )
    assert str(processor.activity) == "Executing: alpha, beta"
    execute_all(processor)
    processor.start_run("run-2")
    assert status_of(processor, activity=True) is ActivityKind.AWAITING
    feed(processor, text("Done.", id="m2"))
    finish(processor)
    assert status_of(processor, activity=True) is ActivityKind.DONE
    assert str(processor.activity) == ""


def test_activity_follows_text_then_returns_to_calling() -> None:
    processor = running()
    feed(processor, ToolCallStartEvent(tool_call_id="a", tool_call_name="alpha"))
    feed(processor, TextMessageStartEvent(message_id="m1"))
    assert str(processor.activity) == "Responding..."
    feed(processor, TextMessageEndEvent(message_id="m1"))
    assert str(processor.activity) == "Calling: alpha"


def test_an_unchanged_activity_is_not_announced_again() -> None:
    processor = running()
    feed(processor, TextMessageStartEvent(message_id="m1"))
    assert feed(processor, TextMessageContentEvent(message_id="m1", delta="x")) == []


# --- the depth bound (promise 3) ---------------------------------------------------------


def test_max_depth_zero_fails_the_first_run_that_asks_for_tools() -> None:
    processor = running(max_depth=0)
    feed(processor, tool_call("f", "{}", id="c1"))
    effects = finish(processor)
    ended = only(effects, TurnEnded)
    assert ended.reason.kind is ReasonKind.MAX_DEPTH
    assert not any(isinstance(e, ToolsReady) for e in effects)
    assert status_of(processor) is RunStatus.failed
    assert [(c.id, c.status) for c in processor.abandoned] == [("c1", ToolCallStatus.failed)]


def test_max_depth_zero_still_completes_a_turn_without_tools() -> None:
    processor = running(max_depth=0)
    feed(processor, text("hi"))
    only(finish(processor), TurnCompleted)


def test_max_depth_two_allows_two_continuations_and_fails_the_third_request() -> None:
    processor = running(max_depth=2)
    for n in (2, 3):
        feed(processor, tool_call("f", "{}", id=f"c{n}"))
        only(finish(processor), ToolsReady)
        execute_all(processor)
        processor.start_run(f"run-{n}")
        processor.receive(run_started(THREAD, f"server-run-{n}"))
        assert processor.depth == n - 1
    feed(processor, tool_call("f", "{}", id="c-last"))
    ended = only(finish(processor), TurnEnded)
    assert ended.reason.kind is ReasonKind.MAX_DEPTH
    assert "2" in ended.reason.message
    assert processor.depth == 2
    assert processor.run_count == 3


def test_a_negative_max_depth_is_refused() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        new_processor(max_depth=-1)


# --- start_run and the RunAgentInput -----------------------------------------------------


def test_start_run_builds_the_run_input_from_the_conversation_and_the_settings() -> None:
    tools = [Tool(name="lookup", description="Look something up")]
    context = [Context(description="locale", value="fr-FR")]
    processor = new_processor(tools=tools, context=context, forwarded_props={"temperature": 0})
    processor.conversation.state = {"step": 1}
    run_input = processor.start_run("run-1")
    assert status_of(processor) is RunStatus.running
    assert processor.run_id == "run-1"
    assert processor.run_count == 1
    assert run_input.thread_id == THREAD
    assert run_input.run_id == "run-1"
    assert run_input.messages == [USER]
    assert run_input.tools == tools
    assert run_input.context == context
    assert run_input.state == {"step": 1}
    assert run_input.forwarded_props == {"temperature": 0}
    wire = json.loads(encode(run_input))
    assert "parentRunId" not in wire  # left out, never null, on a first run
    assert wire["forwardedProps"] == {"temperature": 0}


def test_run_input_defaults_are_empty_not_null() -> None:
    wire = json.loads(encode(new_processor().start_run("run-1")))
    assert wire["state"] == {}
    assert wire["tools"] == []
    assert wire["context"] == []
    assert wire["forwardedProps"] == {}


def test_a_continuation_carries_the_results_and_the_previous_server_run_id() -> None:
    processor = running()
    feed(
        processor,
        tool_call("get_secret_number", {"name": "alice"}, id="a"),
        tool_call("get_secret_number", {"name": "bob"}, id="b"),
    )
    finish(processor)
    execute_all(processor, {"a": ToolResult.success("42"), "b": ToolResult.failure("no bob")})
    run_input = processor.start_run("run-2")
    assert status_of(processor) is RunStatus.running
    assert processor.depth == 1
    assert run_input.parent_run_id == "server-run-1"
    assert run_input.run_id == "run-2"
    user, assistant, tool_a, tool_b = run_input.messages
    assert user == USER
    assert isinstance(assistant, AssistantMessage)
    assert [(tc.id, tc.function.arguments) for tc in assistant.tool_calls or ()] == [
        ("a", '{"name":"alice"}'),
        ("b", '{"name":"bob"}'),
    ]
    assert isinstance(tool_a, ToolMessage)
    assert isinstance(tool_b, ToolMessage)
    assert (tool_a.tool_call_id, tool_a.content, tool_a.error) == ("a", "42", None)
    assert (tool_b.tool_call_id, tool_b.error) == ("b", "no bob")


def test_a_continuation_uses_the_client_run_id_when_the_server_sent_no_run_started() -> None:
    processor = new_processor()
    processor.start_run("run-1")
    feed(processor, tool_call("f", "{}"))
    finish(processor)
    execute_all(processor)
    assert processor.start_run("run-2").parent_run_id == "run-1"


def test_start_run_is_refused_while_a_run_is_streaming() -> None:
    processor = running()
    with pytest.raises(IllegalTransition):
        processor.start_run("run-2")
    assert processor.run_id == "run-1"
    assert status_of(processor) is RunStatus.running


def test_start_run_is_refused_while_a_call_of_the_batch_has_no_result() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}", id="a"), tool_call("g", "{}", id="b"))
    finish(processor)
    processor.record_result(call(processor, "a"), ToolResult.success("ok"))
    with pytest.raises(IllegalTransition):
        processor.start_run("run-2")
    assert status_of(processor) is RunStatus.executing_tools
    assert processor.depth == 0
    assert batches(processor) == []
    assert [c.id for c in processor.tool_calls] == ["a", "b"]


def test_start_run_is_refused_on_a_finished_turn() -> None:
    processor = running()
    finish(processor)
    with pytest.raises(IllegalTransition):
        processor.start_run("run-2")


def test_build_run_input_does_not_change_the_conversation() -> None:
    processor = running()
    feed(processor, text("hi", id="m1"))
    before = list(processor.conversation.messages)
    processor.build_run_input("preview", parent_run_id="p")
    assert processor.conversation.messages == before


# --- state and messages snapshots ----------------------------------------------------------


def test_state_snapshot_and_delta_update_the_state_sent_with_the_next_run() -> None:
    processor = running()
    feed(
        processor,
        StateSnapshotEvent(snapshot={"todo": ["a"], "done": []}),
        StateDeltaEvent(
            delta=[
                AddOperation(path="/todo/-", value="b"),
                MoveOperation(from_="/todo/0", path="/done/0"),
                AddOperation(path="/count", value=1),
            ]
        ),
        tool_call("f", "{}"),
    )
    assert processor.conversation.state == {"todo": ["b"], "done": ["a"], "count": 1}
    finish(processor)
    execute_all(processor)
    assert processor.start_run("run-2").state == {"todo": ["b"], "done": ["a"], "count": 1}


def test_a_state_delta_does_not_change_the_state_already_sent() -> None:
    processor = new_processor()
    processor.conversation.state = {"n": 1}
    sent = processor.start_run("run-1")
    feed(processor, StateDeltaEvent(delta=[ReplaceOperation(path="/n", value=2)]))
    assert sent.state == {"n": 1}
    assert processor.conversation.state == {"n": 2}


def test_messages_snapshot_is_stored_and_the_history_is_not_rewritten() -> None:
    processor = running()
    feed(processor, text("hi", id="m1"))
    snapshot_messages: list[Message] = [UserMessage(id="x", content="rewritten")]
    feed(processor, MessagesSnapshotEvent(messages=snapshot_messages))
    assert processor.conversation.last_snapshot == tuple(snapshot_messages)
    assert [getattr(m, "id", None) for m in processor.conversation.messages] == ["user-1", "m1"]


def _tool_messages(run_input: Any) -> list[tuple[str, str]]:
    return [(m.id, m.tool_call_id) for m in run_input.messages if isinstance(m, ToolMessage)]


def test_a_server_tool_result_goes_back_under_the_id_the_snapshot_stored_it_under() -> None:
    # LangGraph's adapter: TOOL_CALL_RESULT names the result by the call id, the
    # checkpoint (and so MESSAGES_SNAPSHOT) by a fresh id; it merges requests by id.
    processor = running()
    feed(
        processor,
        server_tool_call("search", "{}", "hits", id="srv-1", message_id="srv-1"),
        tool_call("local", "{}", id="cli-1"),
        server_result_snapshot("search", "stored-9", "hits"),
    )
    only(finish(processor), ToolsReady)
    execute_all(processor)
    sent = processor.start_run("run-2")
    [(server_id, _), (client_id, client_call)] = _tool_messages(sent)
    assert server_id == "stored-9"
    assert client_call == "cli-1" and client_id.startswith("gen-")
    assert "srv-1" not in [m.id for m in sent.messages]


def test_a_later_snapshot_renames_a_result_committed_by_an_earlier_run() -> None:
    processor = running()
    feed(processor, server_tool_call("search", "{}", "hits", id="srv-1", message_id="srv-1"))
    feed(processor, tool_call("local", "{}", id="cli-1"))
    finish(processor)
    execute_all(processor)
    processor.start_run("run-2")
    assert _tool_messages(processor.build_run_input("x"))[0] == ("srv-1", "srv-1")
    feed(
        processor,
        run_started(THREAD, "server-run-2"),
        MessagesSnapshotEvent(
            messages=[ToolMessage(id="stored-9", tool_call_id="srv-1", content="hits")]
        ),
    )
    assert processor.conversation.adopt_result_ids({}) == []
    tool_messages = _tool_messages(processor.build_run_input("x"))
    assert tool_messages[0] == ("stored-9", "srv-1")
    assert tool_messages[1][1] == "cli-1" and tool_messages[1][0] != "stored-9"


def test_a_snapshot_without_tool_messages_renames_nothing() -> None:
    processor = running()
    feed(processor, server_tool_call("search", "{}", "hits", id="srv-1", message_id="r1"))
    feed(processor, MessagesSnapshotEvent(messages=[USER]))
    finish(processor)
    assert _tool_messages(processor.build_run_input("x")) == [("r1", "srv-1")]


def test_an_answer_only_in_the_snapshot_is_kept_when_the_run_streamed_nothing() -> None:
    processor = running()
    effects = feed(
        processor,
        MessagesSnapshotEvent(
            messages=[
                AssistantMessage(id="old", content="from another client"),
                USER,
                AssistantMessage(id="a1", content="Hello."),
                AssistantMessage(
                    id="a2",
                    tool_calls=[ToolCall(id="c9", function=FunctionCall(name="f", arguments="{}"))],
                ),
            ]
        ),
    )
    assert codes(effects) == ["snapshot_only_message", "snapshot_only_tool_calls"]
    # Only what follows the last message the conversation knows; never a call.
    assert [t.text for t in processor.conversation.texts()] == ["Hello."]
    only(finish(processor), TurnCompleted)
    assert processor.tool_calls == ()
    sent = processor.build_run_input("run-2")
    assert [m.id for m in sent.messages] == ["user-1", "a1"]


def test_a_snapshot_after_streamed_text_adds_nothing_even_under_other_ids() -> None:
    processor = running()
    feed(processor, text("Hello.", id="m1"))
    effects = feed(
        processor,
        MessagesSnapshotEvent(messages=[USER, AssistantMessage(id="srv-9", content="Hello.")]),
    )
    assert effects == []
    assert [t.text for t in processor.conversation.texts()] == ["Hello."]


# --- limits ------------------------------------------------------------------------------


def test_arguments_over_max_argument_bytes_end_the_turn_keeping_what_was_received() -> None:
    processor = running(limits=Limits(max_argument_bytes=10))
    feed(
        processor,
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta="Working on"),
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"),
        ToolCallArgsEvent(tool_call_id="c1", delta='{"a": "'),  # 7 bytes
    )
    assert status_of(processor) is RunStatus.running
    effects = feed(processor, ToolCallArgsEvent(tool_call_id="c1", delta="éé"))  # 11 bytes
    ended = only(effects, TurnEnded)
    assert ended.reason.kind is ReasonKind.PROTOCOL_ERROR
    assert ended.reason.code == "max_argument_bytes"
    assert status_of(processor) is RunStatus.failed
    [t] = processor.conversation.texts()
    assert (t.text, t.complete, t.interrupted) == ("Working on", True, True)
    assert [(c.id, c.status) for c in processor.abandoned] == [("c1", ToolCallStatus.failed)]
    assert processor.tool_calls == ()


def test_arguments_exactly_at_max_argument_bytes_are_accepted() -> None:
    processor = running(limits=Limits(max_argument_bytes=4))
    feed(processor, tool_call("f", "éé", id="c1"))  # 4 bytes
    assert call(processor, "c1").status is ToolCallStatus.pending


def test_max_argument_bytes_applies_to_tool_call_chunks() -> None:
    processor = running(limits=Limits(max_argument_bytes=3))
    effects = feed(
        processor, ToolCallChunkEvent(tool_call_id="c1", tool_call_name="f", delta="1234")
    )
    assert only(effects, TurnEnded).reason.code == "max_argument_bytes"


def test_events_over_max_events_per_run_end_the_turn_without_processing_the_event() -> None:
    processor = new_processor(limits=Limits(max_events_per_run=3))
    processor.start_run("run-1")
    feed(
        processor,
        run_started(THREAD, "s1"),
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta="kept"),
    )
    effects = feed(processor, TextMessageContentEvent(message_id="m1", delta=" dropped"))
    ended = only(effects, TurnEnded)
    assert ended.reason.kind is ReasonKind.PROTOCOL_ERROR
    assert ended.reason.code == "max_events_per_run"
    [t] = processor.conversation.texts()
    assert (t.text, t.interrupted) == ("kept", True)


def test_max_events_per_run_counts_each_run_separately() -> None:
    processor = new_processor(limits=Limits(max_events_per_run=4))
    processor.start_run("run-1")
    feed(processor, run_started(THREAD, "s1"), tool_call("f", "{}"))  # 4 events
    assert status_of(processor) is RunStatus.running
    finish(processor)  # would be the 5th... of a run that already had 4
    assert status_of(processor) is RunStatus.failed
    processor2 = new_processor(limits=Limits(max_events_per_run=4))
    processor2.start_run("run-1")
    feed(processor2, tool_call("f", "{}"))  # 3 events
    only(finish(processor2), ToolsReady)  # the 4th
    execute_all(processor2)
    processor2.start_run("run-2")
    feed(processor2, text("again and again", id="m2"))  # 3 events in the new run
    only(finish(processor2), TurnCompleted)


# --- the end of the stream and ending a turn ----------------------------------------------


def test_end_stream_without_run_finished_fails_the_turn_with_a_protocol_error() -> None:
    processor = running()
    feed(
        processor,
        tool_call("f", "{}", id="c1"),
        TextMessageChunkEvent(message_id="m1", delta="cut"),
    )
    effects = processor.end_stream()
    ended = only(effects, TurnEnded)
    assert ended.reason.kind is ReasonKind.PROTOCOL_ERROR
    assert status_of(processor) is RunStatus.failed
    assert [(c.id, c.status) for c in processor.abandoned] == [("c1", ToolCallStatus.failed)]
    [t] = processor.conversation.texts()
    assert (t.text, t.interrupted) == ("cut", True)


def test_end_stream_after_run_finished_changes_nothing() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}"))
    finish(processor)
    assert processor.end_stream() == ()
    assert status_of(processor) is RunStatus.executing_tools


@pytest.mark.parametrize(
    ("end", "status", "kind"),
    [
        (lambda p: p.cancel("user pressed stop"), RunStatus.cancelled, ReasonKind.CANCELLED),
        (
            lambda p: p.cancel("engine closed", kind=ReasonKind.CLOSED),
            RunStatus.cancelled,
            ReasonKind.CLOSED,
        ),
        (lambda p: p.supersede(), RunStatus.superseded, ReasonKind.SUPERSEDED),
        (
            lambda p: p.fail(TerminalReason(kind=ReasonKind.TRANSPORT_ERROR, message="x")),
            RunStatus.failed,
            ReasonKind.TRANSPORT_ERROR,
        ),
    ],
    ids=["cancel", "cancel-closed", "supersede", "fail"],
)
def test_ending_a_turn_while_streaming_abandons_its_open_calls(
    end: Any, status: RunStatus, kind: ReasonKind
) -> None:
    processor = running()
    feed(
        processor,
        tool_call("f", "{}", id="c1"),
        ToolCallStartEvent(tool_call_id="c2", tool_call_name="g"),
    )
    effects = end(processor)
    assert only(effects, TurnEnded).reason.kind is kind
    assert status_of(processor) is status
    assert processor.reason is not None and processor.reason.kind is kind
    assert processor.tool_calls == ()
    assert all(c.status is ToolCallStatus.failed for c in processor.abandoned)
    assert status_of(processor, activity=True) is ActivityKind.DONE


def test_cancel_while_executing_tools_keeps_the_results_already_recorded() -> None:
    processor = running()
    feed(processor, tool_call("fast", "{}", id="a"), tool_call("slow", "{}", id="b"))
    finish(processor)
    processor.record_result(call(processor, "a"), ToolResult.success("done"))
    only(processor.cancel(), TurnEnded)
    assert status_of(processor) is RunStatus.cancelled
    assert [(c.id, c.status) for c in processor.abandoned] == [("b", ToolCallStatus.failed)]
    [batch] = batches(processor)
    assert [(c.id, c.status) for c in batch.calls] == [("a", ToolCallStatus.completed)]


def test_cancel_before_the_first_run_ends_the_turn() -> None:
    processor = new_processor()
    only(processor.cancel(), TurnEnded)
    assert status_of(processor) is RunStatus.cancelled


@pytest.mark.parametrize("finished_by", ["completed", "failed", "cancelled"])
@pytest.mark.parametrize("method", ["cancel", "supersede", "fail"])
def test_cancel_supersede_and_fail_are_no_ops_on_a_finished_turn(
    finished_by: str, method: str
) -> None:
    processor = running()
    if finished_by == "completed":
        finish(processor)
    elif finished_by == "failed":
        feed(processor, run_error("boom"))
    else:
        processor.cancel()
    status, reason = processor.status, processor.reason
    if method == "fail":
        effects = processor.fail(TerminalReason(kind=ReasonKind.BACKEND_ERROR, message="late"))
    else:
        effects = getattr(processor, method)()
    assert effects == ()
    assert status_of(processor) is status
    assert processor.reason is reason


# --- results ---------------------------------------------------------------------------------


def test_record_result_completes_or_fails_an_executing_call() -> None:
    processor = running()
    feed(processor, tool_call("ok", "{}", id="a"), tool_call("bad", "{}", id="b"))
    finish(processor)
    a, b = call(processor, "a"), call(processor, "b")
    assert processor.record_result(a, ToolResult.success("fine")) == ()
    assert a.status is ToolCallStatus.completed
    assert processor.tool_calls == (a, b)  # the batch waits for its last result
    processor.record_result(b, ToolResult.failure("ValueError: nope"))
    assert b.status is ToolCallStatus.failed
    assert b.result == ToolResult.failure("ValueError: nope")
    assert status_of(processor) is RunStatus.executing_tools  # the runtime continues


def test_record_result_on_a_call_that_is_not_executing_is_refused_and_changes_nothing() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}", id="a"))
    pending = call(processor, "a")
    with pytest.raises(IllegalTransition):
        processor.record_result(pending, ToolResult.success("too early"))
    assert (pending.status, pending.result) == (ToolCallStatus.pending, None)
    finish(processor)
    processor.record_result(pending, ToolResult.success("first"))
    with pytest.raises(IllegalTransition):
        processor.record_result(pending, ToolResult.failure("second"))
    assert (pending.status, pending.result) == (
        ToolCallStatus.completed,
        ToolResult.success("first"),
    )


def test_the_last_result_commits_the_batch_once_as_one_settled_message() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}", id="a"), tool_call("g", "{}", id="b"))
    finish(processor)
    a, b = processor.tool_calls
    assert processor.record_result(a, ToolResult.success("1")) == ()
    assert batches(processor) == []
    effects = processor.record_result(b, ToolResult.success("2"))
    [message] = batches(processor)
    assert effects == (MessagesSettled((message,)),)
    assert [c.id for c in message.calls] == ["a", "b"]
    assert message.result_message_ids == ("gen-1", "gen-2")
    assert message.id == "gen-3"
    assert processor.conversation.messages[-1] is message
    assert processor.tool_calls == ()
    assert status_of(processor) is RunStatus.executing_tools
    processor.start_run("run-2")  # the continuation does not commit again
    assert batches(processor) == [message]


def test_a_continuation_before_every_result_is_refused() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}", id="a"), tool_call("g", "{}", id="b"))
    finish(processor)
    processor.record_result(call(processor, "a"), ToolResult.success("1"))
    with pytest.raises(IllegalTransition):
        processor.start_run("run-2")
    assert batches(processor) == []
    assert call(processor, "b").status is ToolCallStatus.executing
    assert status_of(processor) is RunStatus.executing_tools


def test_a_result_after_the_turn_ended_is_not_taken() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}", id="a"))
    finish(processor)
    a = call(processor, "a")
    processor.cancel("stop")
    assert processor.record_result(a, ToolResult.success("late")) == ()
    assert a.status is ToolCallStatus.failed
    assert batches(processor) == []


# --- an error inside the processor (STYLE point 7) ------------------------------------------


def test_an_internal_error_fails_the_turn_and_is_re_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(processor: EventProcessor, event: Any) -> Sequence[Effect]:
        raise RuntimeError("handler bug")

    processor = running()
    feed(
        processor,
        tool_call("f", "{}", id="a"),
        ToolCallStartEvent(tool_call_id="b", tool_call_name="g"),
    )
    handlers: dict[Any, Any] = _processor._HANDLERS
    # A delta for an open call takes the hot path; a bug in a handler shows on the
    # events that go through one, such as TOOL_CALL_END.
    monkeypatch.setitem(handlers, ToolCallEndEvent, broken)
    with pytest.raises(RuntimeError, match="handler bug"):
        processor.receive(ToolCallEndEvent(tool_call_id="b"))
    assert status_of(processor) is RunStatus.failed
    assert processor.reason is not None
    assert processor.reason.kind is ReasonKind.INTERNAL_ERROR
    assert "TOOL_CALL_END" in processor.reason.message
    assert processor.tool_calls == ()
    assert {c.id: c.status for c in processor.abandoned} == {
        "a": ToolCallStatus.failed,
        "b": ToolCallStatus.failed,
    }
    assert processor.receive(ToolCallArgsEvent(tool_call_id="b", delta="{}")) == ()


def test_an_illegal_transition_from_misuse_is_raised_after_failing_the_turn() -> None:
    processor = new_processor()  # no start_run: RUN_FINISHED cannot complete an idle turn
    with pytest.raises(IllegalTransition):
        processor.receive(run_finished(THREAD, "r"))
    assert status_of(processor) is RunStatus.failed
    assert processor.reason is not None
    assert processor.reason.kind is ReasonKind.INTERNAL_ERROR


# --- reasoning ---------------------------------------------------------------------------------


def test_reasoning_events_are_recorded_as_a_reasoning_record() -> None:
    processor = running()
    feed(processor, ReasoningStartEvent(message_id="r1"))
    assert status_of(processor, activity=True) is ActivityKind.REASONING
    feed(
        processor,
        ReasoningMessageStartEvent(message_id="r1"),
        ReasoningMessageContentEvent(message_id="r1", delta="Let me "),
        ReasoningMessageContentEvent(message_id="r1", delta="think."),
        ReasoningMessageEndEvent(message_id="r1"),
        ReasoningEndEvent(message_id="r1"),
    )
    [record] = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert (record.id, record.text, record.complete) == ("r1", "Let me think.", True)
    assert processor.violations == []


def test_reasoning_chunks_build_one_record_closed_by_the_next_other_event() -> None:
    processor = running()
    feed(
        processor,
        ReasoningMessageChunkEvent(message_id="r1", delta="Let me "),
        ReasoningMessageChunkEvent(delta="think"),  # no id: continues r1
        ReasoningMessageChunkEvent(message_id="r1", delta="."),
        ReasoningMessageChunkEvent(message_id="r2", delta="Next."),  # closes r1
    )
    first, second = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert (first.id, first.text, first.complete) == ("r1", "Let me think.", True)
    assert (second.id, second.text, second.complete) == ("r2", "Next.", False)
    feed(processor, text("answer", id="m1"))
    assert second.complete
    assert processor.violations == []


def test_a_first_reasoning_chunk_without_message_id_is_dropped() -> None:
    processor = running()
    effects = feed(processor, ReasoningMessageChunkEvent(delta="orphan"))
    assert codes(effects) == ["chunk_without_message_id"]
    assert not [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]


def test_legacy_thinking_events_are_recorded_as_a_reasoning_record() -> None:
    processor = running()
    feed(
        processor,
        ThinkingStartEvent(title="plan"),
        ThinkingTextMessageStartEvent(),
        ThinkingTextMessageContentEvent(delta="first, "),
        ThinkingTextMessageContentEvent(delta="then"),
        ThinkingTextMessageEndEvent(),
        ThinkingTextMessageContentEvent(delta="again"),  # no START: a new record
        ThinkingEndEvent(),
    )
    records = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert [(r.text, r.complete) for r in records] == [("first, then", True), ("again", False)]
    assert records[0].id != records[1].id
    finish(processor)
    assert all(r.complete for r in records)


def test_reasoning_left_open_is_closed_when_the_turn_ends() -> None:
    processor = running()
    feed(processor, ReasoningMessageContentEvent(message_id="r1", delta="hmm"))
    processor.end_stream()
    [record] = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert record.complete


def test_reasoning_is_not_sent_back_unless_asked() -> None:
    for include in (False, True):
        processor = running(include_reasoning=include)
        feed(
            processor,
            ReasoningMessageContentEvent(message_id="r1", delta="hmm"),
            tool_call("f", "{}"),
        )
        finish(processor)
        execute_all(processor)
        roles = [type(m).__name__ for m in processor.start_run("run-2").messages]
        assert ("ReasoningMessage" in roles) is include


@pytest.mark.parametrize("after_end", [False, True])
def test_a_reasoning_signature_is_kept_and_sent_back_with_its_reasoning(after_end: bool) -> None:
    processor = running(include_reasoning=True)
    signature = ReasoningEncryptedValueEvent(
        subtype="message", entity_id="r1", encrypted_value="sig-1"
    )
    feed(
        processor,
        ReasoningMessageStartEvent(message_id="r1"),
        ReasoningMessageContentEvent(message_id="r1", delta="thinking..."),
    )
    if after_end:
        # Mapped once while closed, then signed: the next request must still carry it.
        feed(processor, ReasoningMessageEndEvent(message_id="r1"))
        processor.build_run_input("peek")
        feed(processor, signature)
    else:
        feed(processor, signature, ReasoningMessageEndEvent(message_id="r1"))
    feed(processor, tool_call("f", "{}", id="c1"))
    finish(processor)
    execute_all(processor)
    [reasoning] = [
        m for m in processor.start_run("run-2").messages if isinstance(m, ReasoningMessage)
    ]
    assert (reasoning.content, reasoning.encrypted_value) == ("thinking...", "sig-1")


def test_a_tool_call_artefact_is_kept_and_sent_back_with_its_call() -> None:
    processor = running()
    feed(
        processor,
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"),
        ReasoningEncryptedValueEvent(subtype="tool-call", entity_id="c1", encrypted_value="ts"),
        ReasoningEncryptedValueEvent(subtype="tool-call", entity_id="ghost", encrypted_value="x"),
        ToolCallEndEvent(tool_call_id="c1"),
    )
    finish(processor)
    execute_all(processor)
    [assistant] = [
        m for m in processor.start_run("run-2").messages if isinstance(m, AssistantMessage)
    ]
    assert assistant.tool_calls is not None
    assert [c.encrypted_value for c in assistant.tool_calls] == ["ts"]


# --- the hot path returns the shared empty answer -----------------------------------------------


def test_deltas_answer_with_the_shared_empty_tuple() -> None:
    processor = running()
    feed(
        processor,
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"),
        TextMessageStartEvent(message_id="m1"),
    )
    assert processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta="{")) is NO_EFFECTS
    assert processor.receive(TextMessageContentEvent(message_id="m1", delta="x")) is NO_EFFECTS


def test_the_secret_number_story_end_to_end() -> None:
    processor = running()
    effects = feed(
        processor,
        text("Let me look those up.", id="m1"),
        tool_call("get_secret_number", {"name": "alice"}, id="a", parent_message_id="m1", chunk=4),
        tool_call("get_secret_number", {"name": "bob"}, id="b", parent_message_id="m1", chunk=4),
        run_finished(THREAD, "server-run-1"),
    )
    ready = only(effects, ToolsReady)
    answers = {"alice": "42", "bob": "7"}
    for c in ready.calls:
        processor.record_result(c, ToolResult.success(answers[json.loads(c.arguments)["name"]]))
    run_input = processor.start_run("run-2")
    assert [type(m).__name__ for m in run_input.messages] == [
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
        "ToolMessage",
    ]
    feed(
        processor, run_started(THREAD, "server-run-2"), text("Alice's is 42, Bob's is 7.", id="m2")
    )
    only(finish(processor), TurnCompleted)
    assert status_of(processor) is RunStatus.completed
    [batch] = batches(processor)
    assert all(c.status is ToolCallStatus.completed for c in batch.calls)
    assert [t.text for t in processor.conversation.texts()][-1] == "Alice's is 42, Bob's is 7."
    assert isinstance(processor.conversation.messages[-1], TextMessage)


def test_a_state_snapshot_an_old_encoder_left_empty_sets_the_state_to_null() -> None:
    processor = running()
    processor.receive(decode_event(b'{"type":"STATE_SNAPSHOT","snapshot":{"counter":1}}'))
    assert processor.conversation.state == {"counter": 1}
    processor.receive(decode_event(b'{"type":"STATE_SNAPSHOT"}'))
    state: object = getattr(processor.conversation, "state")  # noqa: B009 - read afresh
    assert state is None
    assert processor.violations == []


# --- how the run ended: RUN_FINISHED.outcome ---------------------------------------------

MAY_I = Interrupt(id="i1", reason="approval", message="May I delete the file?", tool_call_id="c1")
WHICH = Interrupt(id="i2", reason="choice", message="Which folder?")


def interrupt_with(processor: EventProcessor, *interrupts: Interrupt) -> list[Effect]:
    return feed(processor, run_interrupted(THREAD, processor.server_run_id or "srv", *interrupts))


def test_a_success_outcome_is_a_normal_end_whatever_pending_ids_it_names() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}", id="c1"))
    outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=["c1", "not-ours"])
    effects = feed(processor, RunFinishedEvent(thread_id=THREAD, run_id="srv", outcome=outcome))
    assert [c.id for c in only(effects, ToolsReady).calls] == ["c1"]
    execute_all(processor)
    processor.start_run("run-2")
    effects = feed(
        processor,
        RunFinishedEvent(thread_id=THREAD, run_id="srv", outcome=RunFinishedSuccessOutcome()),
    )
    only(effects, TurnCompleted)
    assert processor.violations == []


def test_an_interrupt_outcome_ends_the_turn_interrupted_with_its_interrupts() -> None:
    processor = running()
    feed(processor, text("I need to ask first.", id="m1"))
    effects = interrupt_with(processor, MAY_I, WHICH)
    interrupted = only(effects, TurnInterrupted)
    assert interrupted.interrupts == (MAY_I, WHICH)
    assert processor.interrupts == (MAY_I, WHICH)
    assert status_of(processor) is RunStatus.interrupted
    assert processor.status.is_final and not processor.status.is_running
    reason = interrupted.reason
    assert reason.kind is ReasonKind.INTERRUPTED
    assert reason.message == "the agent waits for 2 answers: May I delete the file?; Which folder?"
    assert processor.reason == reason
    assert status_of(processor, activity=True) is ActivityKind.DONE
    assert not any(isinstance(e, (TurnCompleted, TurnEnded, ToolsReady)) for e in effects)
    # The text said before the question is kept, whole.
    [t] = processor.conversation.texts()
    assert (t.text, t.complete, t.interrupted) == ("I need to ask first.", True, False)
    assert processor.violations == []


def test_an_interrupt_without_a_message_is_summed_up_by_its_reason() -> None:
    processor = running()
    effects = interrupt_with(processor, Interrupt(id="x", reason="langgraph:interrupt"))
    assert only(effects, TurnInterrupted).reason.message == (
        "the agent waits for an answer: langgraph:interrupt"
    )


def test_an_interrupt_abandons_pending_calls_and_keeps_the_agents_own_results() -> None:
    processor = running()
    feed(
        processor,
        server_tool_call("search", {"q": "x"}, "found", id="s1", message_id="r1"),
        tool_call("delete_file", {"path": "/tmp/x"}, id="c1"),
        ToolCallStartEvent(tool_call_id="c2", tool_call_name="half"),
    )
    effects = interrupt_with(processor, MAY_I)
    only(effects, TurnInterrupted)
    assert codes(effects) == ["tool_call_not_ended"]  # the half-streamed one, as ever
    assert processor.tool_calls == ()
    assert [c.id for c in processor.abandoned] == ["c2", "c1"]
    for c in processor.abandoned:
        assert c.status is ToolCallStatus.failed  # never left pending (promise 1)
        assert c.result is not None and c.result.error is not None
        assert c.result.error.startswith("abandoned: ")
    [batch] = batches(processor)  # the agent's own result is committed, not dropped
    assert [c.id for c in batch.calls] == ["s1"]


def test_an_interrupt_at_the_depth_bound_is_an_interrupt_not_a_breaker_trip() -> None:
    processor = running(max_depth=0)
    feed(processor, tool_call("f", "{}", id="c1"))
    effects = interrupt_with(processor, MAY_I)
    only(effects, TurnInterrupted)
    assert status_of(processor) is RunStatus.interrupted
    assert processor.reason is not None and processor.reason.kind is ReasonKind.INTERRUPTED


def test_an_interrupt_after_a_continuation_ends_the_turn_at_that_depth() -> None:
    processor = running()
    feed(processor, tool_call("f", "{}", id="c1"))
    finish(processor)
    execute_all(processor)
    processor.start_run("run-2")
    only(interrupt_with(processor, MAY_I), TurnInterrupted)
    assert (processor.status, processor.depth, processor.run_count) == (
        RunStatus.interrupted,
        1,
        2,
    )
    [batch] = batches(processor)  # the first run's results stay in the conversation
    assert [c.id for c in batch.calls] == ["c1"]


def test_an_interrupt_outcome_naming_no_interrupt_is_tolerated_as_an_interrupt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    processor = running()
    feed(processor, tool_call("f", "{}", id="c1"))
    effects = interrupt_with(processor)
    assert codes(effects) == ["interrupt_without_interrupts"]
    assert warnings_with(caplog, "interrupt_without_interrupts")
    interrupted = only(effects, TurnInterrupted)
    assert interrupted.interrupts == () == processor.interrupts
    assert interrupted.reason.message == (
        "the agent paused the run without saying what it waits for"
    )
    # Not completed, and the pending call is not run: the agent said it did not succeed.
    assert status_of(processor) is RunStatus.interrupted
    assert [c.id for c in processor.abandoned] == ["c1"]


def test_an_interrupt_id_used_twice_keeps_the_first(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    processor = running()
    again = Interrupt(id="i1", reason="other", message="Again?")
    effects = interrupt_with(processor, MAY_I, again, WHICH)
    assert codes(effects) == ["duplicate_interrupt_id"]
    assert warnings_with(caplog, "duplicate_interrupt_id")
    assert only(effects, TurnInterrupted).interrupts == (MAY_I, WHICH)
    assert processor.interrupts == (MAY_I, WHICH)


def test_events_after_an_interrupt_are_dropped() -> None:
    processor = running()
    interrupt_with(processor, MAY_I)
    effects = feed(processor, text("too late", id="late"), tool_call("f", "{}", id="c9"))
    assert set(codes(effects)) == {"event_after_run_end"}
    assert list(processor.conversation.texts()) == []
    assert processor.tool_calls == ()
    assert status_of(processor) is RunStatus.interrupted


def test_an_interrupt_decoded_from_the_wire_ends_the_turn_interrupted() -> None:
    processor = running()
    event = decode_event(
        b'{"type":"RUN_FINISHED","threadId":"thread-1","runId":"srv","outcome":'
        b'{"type":"interrupt","interrupts":[{"id":"i1","reason":"approval",'
        b'"message":"May I?","toolCallId":"c1","responseSchema":{"type":"boolean"}}]}}'
    )
    [asked] = only(feed(processor, event), TurnInterrupted).interrupts
    assert (asked.id, asked.message, asked.tool_call_id) == ("i1", "May I?", "c1")
    assert asked.response_schema == {"type": "boolean"}


def test_a_cancelled_outcome_ends_the_turn_cancelled_saying_the_agent_reported_it() -> None:
    processor = running()
    feed(processor, text("Stopping.", id="m1"), tool_call("f", "{}", id="c1"))
    effects = feed(processor, run_cancelled(THREAD, "srv"))
    ended = only(effects, TurnEnded)
    assert ended.reason.kind is ReasonKind.AGENT_CANCELLED
    assert ended.reason.message == "the agent reported its run cancelled"
    assert status_of(processor) is RunStatus.cancelled
    assert processor.interrupts == ()
    assert [c.id for c in processor.abandoned] == ["c1"]
    assert processor.abandoned[0].status is ToolCallStatus.failed
    assert [t.text for t in processor.conversation.texts()] == ["Stopping."]
    assert not any(isinstance(e, (TurnCompleted, TurnInterrupted, ToolsReady)) for e in effects)


def test_an_interrupted_turn_cannot_start_another_run() -> None:
    processor = running()
    interrupt_with(processor, MAY_I)
    with pytest.raises(IllegalTransition):
        processor.start_run("run-2")
    assert processor.cancel() == NO_EFFECTS  # already final: nothing changes
    assert status_of(processor) is RunStatus.interrupted


# --- answering: resume entries on the first run only -------------------------------------

YES = ResumeEntry(interrupt_id="i1", status="resolved", payload={"approved": True})
NO_CHOICE = ResumeEntry(interrupt_id="i2", status="cancelled")


def test_resume_entries_go_with_the_first_run_and_not_with_continuations() -> None:
    processor = new_processor(resume=[YES, NO_CHOICE])
    assert processor.resume == (YES, NO_CHOICE)
    first = processor.start_run("run-1")
    assert first.resume == [YES, NO_CHOICE]
    wire = json.loads(encode(first))
    assert wire["resume"] == [
        {"interruptId": "i1", "status": "resolved", "payload": {"approved": True}},
        {"interruptId": "i2", "status": "cancelled"},
    ]
    feed(processor, run_started(THREAD, "server-run-1"), tool_call("f", "{}", id="c1"))
    finish(processor)
    execute_all(processor)
    continuation = processor.start_run("run-2")
    assert continuation.resume is msgspec.UNSET
    assert "resume" not in json.loads(encode(continuation))


def test_a_resume_only_turn_sends_the_conversation_as_it_is() -> None:
    history = [USER, AssistantMessage(id="a1", content="May I?")]
    processor = new_processor(*history, resume=[YES])
    run_input = processor.start_run("run-1")
    assert run_input.messages == history
    assert run_input.resume == [YES]


def test_without_resume_entries_the_field_is_left_out() -> None:
    processor = new_processor()
    run_input = processor.start_run("run-1")
    assert run_input.resume is msgspec.UNSET
    assert "resume" not in json.loads(encode(run_input))
    preview = processor.build_run_input("preview", resume=[YES])
    assert preview.resume == [YES]


def test_check_resume_accepts_one_entry_per_open_interrupt_in_any_order() -> None:
    assert check_resume((MAY_I, WHICH), [NO_CHOICE, YES]) == (NO_CHOICE, YES)
    assert check_resume((), []) == ()


@pytest.mark.parametrize(
    ("open_interrupts", "entries", "unknown", "duplicated", "unanswered"),
    [
        pytest.param((MAY_I,), [YES, NO_CHOICE], ("i2",), (), (), id="unknown id"),
        pytest.param((MAY_I, WHICH), [YES, YES, NO_CHOICE], (), ("i1",), (), id="twice"),
        pytest.param((MAY_I, WHICH), [YES], (), (), ("i2",), id="left unanswered"),
        pytest.param((), [YES], ("i1",), (), (), id="nothing open"),
        pytest.param(None, [YES, YES], (), ("i1",), (), id="not known, twice"),
    ],
)
def test_check_resume_refuses_what_does_not_answer_the_open_interrupts(
    open_interrupts: tuple[Interrupt, ...] | None,
    entries: list[ResumeEntry],
    unknown: tuple[str, ...],
    duplicated: tuple[str, ...],
    unanswered: tuple[str, ...],
) -> None:
    with pytest.raises(ResumeError) as caught:
        check_resume(open_interrupts, entries)
    error = caught.value
    assert (error.unknown, error.duplicated, error.unanswered) == (unknown, duplicated, unanswered)
    assert isinstance(error, ValueError) and isinstance(error, LocalProtocolError)
    for interrupt_id in (*unknown, *duplicated, *unanswered):
        assert repr(interrupt_id) in str(error)


def test_check_resume_without_known_interrupts_lets_any_distinct_entries_through() -> None:
    assert check_resume(None, [YES, NO_CHOICE]) == (YES, NO_CHOICE)


# --- tool policies: approval and no-progress loop detection (sans-IO) ---


def test_calls_of_approval_tools_await_approval_and_the_others_execute() -> None:
    processor = running(approval_tools={"danger"})
    feed(processor, tool_call("danger", "{}", id="c1"), tool_call("safe", "{}", id="c2"))
    effects = finish(processor)
    ready = only(effects, ToolsReady)
    assert [c.id for c in ready.calls] == ["c2"]
    assert [c.id for c in ready.awaiting] == ["c1"]
    assert ready.awaiting[0].status is ToolCallStatus.awaiting_approval
    assert processor.activity == Activity(ActivityKind.AWAITING_APPROVAL, ("danger",))
    assert processor.awaiting_approval == ready.awaiting
    processor.record_result(call(processor, "c2"), ToolResult.success("ok"))
    assert batches(processor) == []  # the batch waits for the decision
    effects = list(processor.approve(call(processor, "c1")))
    assert call(processor, "c1").status is ToolCallStatus.executing
    assert processor.activity == Activity(ActivityKind.EXECUTING_TOOLS, ("danger",))
    settled = processor.record_result(call(processor, "c1"), ToolResult.success("done"))
    assert any(isinstance(e, MessagesSettled) for e in settled)
    [batch] = batches(processor)
    assert [c.status for c in batch.calls] == [ToolCallStatus.completed] * 2


def test_a_denied_call_fails_with_the_denial_and_commits_the_batch() -> None:
    processor = running(approval_tools={"danger"})
    feed(processor, tool_call("danger", "{}", id="c1"))
    finish(processor)
    denied = call(processor, "c1")
    effects = processor.deny(denied, "no")
    assert any(isinstance(e, MessagesSettled) for e in effects)
    assert denied.status is ToolCallStatus.failed
    assert denied.result == ToolResult.failure("no")
    with pytest.raises(IllegalTransition):
        processor.approve(denied)


def test_decisions_on_an_ended_turn_change_nothing() -> None:
    processor = running(approval_tools={"danger"})
    feed(processor, tool_call("danger", "{}", id="c1"))
    finish(processor)
    waiting = call(processor, "c1")
    processor.cancel()
    assert waiting.status is ToolCallStatus.failed  # abandoned
    assert processor.approve(waiting) == ()
    assert processor.deny(waiting, "late") == ()


def test_loop_detection_compares_arguments_as_json_values() -> None:
    processor = running(max_repeats=2)
    feed(processor, tool_call("look", '{"a": 1, "b": [2]}', id="c1"))
    finish(processor)
    execute_all(processor)
    processor.start_run("run-2")
    processor.receive(run_started(THREAD, "server-run-2"))
    feed(processor, tool_call("look", '{"b":[2],"a":1}', id="c2"))
    effects = finish(processor)
    assert processor.reason is not None and processor.reason.kind is ReasonKind.NO_PROGRESS
    assert not any(isinstance(e, ToolsReady) for e in effects)


@pytest.mark.parametrize(
    ("first", "second"),
    [("", "null"), ("not json", "not json "), ("[1,", "[1,")],
)
def test_loop_detection_treats_empty_and_broken_arguments_by_their_text(
    first: str, second: str
) -> None:
    processor = running(max_repeats=2)
    feed(processor, tool_call("look", first or None, id="c1"), tool_call("look", second, id="c2"))
    finish(processor)
    assert processor.reason is not None and processor.reason.kind is ReasonKind.NO_PROGRESS


def test_a_restored_batch_waits_again_for_its_undecided_approvals() -> None:
    # After a crash, a call that awaited approval awaits it again (it never ran).
    processor = new_processor(approval_tools={"danger"})
    waiting = ToolCallInfo("c1", "danger", arguments="{}", status=ToolCallStatus.awaiting_approval)
    done = ToolCallInfo("c2", "safe", arguments="{}", status=ToolCallStatus.completed)
    done.result = ToolResult.success("ok")
    effects = processor.restore(run_id="run-1", depth=0, runs=1, calls=[waiting, done])
    ready = only(effects, ToolsReady)
    assert ready.calls == () and ready.awaiting == (waiting,)
    assert processor.activity == Activity(ActivityKind.AWAITING_APPROVAL, ("danger",))
    settled = processor.deny(waiting, "no")
    assert any(isinstance(e, MessagesSettled) for e in settled)
    [batch] = batches(processor)
    assert [c.id for c in batch.calls] == ["c1", "c2"]


# --- edges of the state and snapshot handlers ---------------------------------------------


def test_a_state_delta_built_with_no_list_of_operations_is_a_violation_not_a_crash() -> None:
    # Events built in code are not validated as decoded ones are.
    processor = running()
    feed(processor, StateSnapshotEvent(snapshot={"n": 1}))
    effects = feed(processor, StateDeltaEvent(delta=None))  # type: ignore[arg-type]
    assert codes(effects) == ["state_delta_failed"]
    effects = feed(processor, StateDeltaEvent(delta=["add"]))  # type: ignore[list-item]
    assert codes(effects) == ["state_delta_failed"]
    assert processor.conversation.state == {"n": 1}
    assert status_of(processor) is RunStatus.running


def test_only_assistant_messages_of_a_snapshot_only_answer_are_kept() -> None:
    processor = running()
    effects = feed(
        processor,
        MessagesSnapshotEvent(
            messages=[
                USER,
                UserMessage(id="u2", content="and another question"),
                AssistantMessage(id="a1", content="Hello."),
            ]
        ),
    )
    assert codes(effects) == ["snapshot_only_message"]
    assert [t.text for t in processor.conversation.texts()] == ["Hello."]
    assert [getattr(m, "id", None) for m in processor.conversation.messages] == ["user-1", "a1"]


# --- edges of the processor's base: settings, decisions, restore, activity, depth ---------


def test_max_repeats_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_repeats must be >= 1"):
        new_processor(max_repeats=0)


def test_a_denial_that_is_not_the_last_outcome_leaves_the_batch_open() -> None:
    processor = running(approval_tools={"danger"})
    feed(processor, tool_call("danger", "{}", id="c1"), tool_call("danger", "{}", id="c2"))
    finish(processor)
    effects = processor.deny(call(processor, "c1"), "no")
    assert not any(isinstance(e, MessagesSettled) for e in effects)
    assert batches(processor) == []
    assert processor.activity == Activity(ActivityKind.AWAITING_APPROVAL, ("danger",))
    processor.deny(call(processor, "c2"), "no")
    [batch] = batches(processor)
    assert [c.id for c in batch.calls] == ["c1", "c2"]


def test_restore_is_refused_once_a_run_started() -> None:
    processor = running()
    with pytest.raises(IllegalTransition):
        processor.restore(run_id="run-1", depth=0, runs=1)


def test_a_restored_batch_of_final_calls_commits_at_once_leaving_out_those_lacking_a_result() -> (
    None
):
    processor = new_processor()
    done = ToolCallInfo("c1", "lookup", arguments="{}", status=ToolCallStatus.completed)
    done.result = ToolResult.success("42")
    unknown = ToolCallInfo("c2", "lookup", arguments="{}", status=ToolCallStatus.completed)
    effects = processor.restore(run_id="run-1", depth=0, runs=1, calls=[done, unknown])
    assert not any(isinstance(e, ToolsReady) for e in effects)
    [batch] = batches(processor)
    assert batch.calls == (done,)
    assert only(effects, MessagesSettled).messages == (batch,)


def test_a_restored_batch_whose_calls_all_lack_a_result_commits_nothing() -> None:
    processor = new_processor()
    unknown = ToolCallInfo("c1", "lookup", arguments="{}", status=ToolCallStatus.failed)
    assert processor.restore(run_id="run-1", depth=0, runs=1, calls=[unknown]) == ()
    assert batches(processor) == []


def test_a_turn_ended_while_a_call_with_its_result_executes_keeps_that_result() -> None:
    # The store saved the result before the crash; the restored turn is then cancelled.
    processor = new_processor()
    executing = ToolCallInfo("c1", "lookup", arguments="{}", status=ToolCallStatus.executing)
    executing.result = ToolResult.success("42")
    only(processor.restore(run_id="run-1", depth=0, runs=1, calls=[executing]), ToolsReady)
    processor.cancel()
    assert executing.status is ToolCallStatus.failed
    assert executing.result == ToolResult.success("42")
    assert processor.abandoned == [executing]


def test_calling_activity_shows_waiting_calls_as_shown_ones_get_their_results() -> None:
    processor = running()
    names = [f"t{i}" for i in range(10)]
    feed(processor, [ToolCallStartEvent(tool_call_id=n, tool_call_name=n) for n in names])
    assert processor.activity == Activity(ActivityKind.CALLING_TOOLS, tuple(names[:8]), more=2)

    def resolve(call_id: str) -> None:
        feed(
            processor,
            ToolCallResultEvent(message_id=f"r-{call_id}", tool_call_id=call_id, content="x"),
        )

    resolve("t8")  # a waiting call: the names shown stay
    assert processor.activity == Activity(ActivityKind.CALLING_TOOLS, tuple(names[:8]), more=1)
    resolve("t0")  # a shown call: the next waiting one still calling takes its place
    assert processor.activity == Activity(ActivityKind.CALLING_TOOLS, (*names[1:8], "t9"), more=0)


def test_empty_thinking_deltas_count_nothing_toward_max_reasoning_bytes() -> None:
    processor = running(limits=Limits(max_reasoning_bytes=3))
    feed(
        processor,
        ThinkingTextMessageStartEvent(),
        ThinkingTextMessageContentEvent(delta=""),
        ThinkingTextMessageContentEvent(delta="abc"),
        ThinkingTextMessageContentEvent(delta=""),
        ThinkingTextMessageEndEvent(),
    )
    assert status_of(processor) is RunStatus.running
    [record] = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert record.text == "abc"


def test_a_structured_tool_result_is_kept_as_its_json_within_max_json_depth() -> None:
    processor = running(limits=Limits(max_json_depth=3))
    feed(
        processor,
        tool_call("lookup", "{}", id="c1"),
        ToolCallResultEvent(message_id="r1", tool_call_id="c1", content=[TextPart(text="42")]),
    )
    assert call(processor, "c1").result == ToolResult.success('[{"type":"text","text":"42"}]')
    # Content built in code is not validated as decoded content is: a mapping is
    # walked for its depth too.
    deep: Any = {"a": {"b": {"c": {}}}}
    feed(
        processor,
        tool_call("lookup", "{}", id="c2"),
        ToolCallResultEvent(message_id="r2", tool_call_id="c2", content=deep),
    )
    assert processor.reason is not None and processor.reason.code == "max_json_depth"


@pytest.mark.parametrize("recorded", ["  ", "[" * 30 + "]" * 30])
def test_a_snapshot_recording_blank_or_too_deep_arguments_keeps_the_streamed_ones(
    recorded: str,
) -> None:
    processor = running(limits=Limits(max_json_depth=10))
    feed(processor, tool_call("lookup", '{"n": 1}', id="c1"))
    snapshot = MessagesSnapshotEvent(
        messages=[
            USER,
            AssistantMessage(
                id="a1",
                tool_calls=[
                    ToolCall(id="c1", function=FunctionCall(name="lookup", arguments=recorded))
                ],
            ),
        ]
    )
    assert codes(feed(processor, snapshot)) == []
    assert call(processor, "c1").arguments == '{"n": 1}'


def test_a_repeated_thinking_start_continues_the_open_thinking_record() -> None:
    processor = running()
    feed(
        processor,
        ThinkingTextMessageStartEvent(),
        ThinkingTextMessageContentEvent(delta="one "),
        ThinkingTextMessageStartEvent(),
        ThinkingTextMessageContentEvent(delta="two"),
        ThinkingTextMessageEndEvent(),
    )
    records = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert [(r.text, r.complete) for r in records] == [("one two", True)]


# --- empty deltas, stray ends, unknown events: each changes nothing --------------------


def test_empty_deltas_on_the_hot_path_add_nothing() -> None:
    processor = running()
    feed(
        processor,
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta=""),
        TextMessageContentEvent(message_id="m1", delta="hi"),
        TextMessageContentEvent(message_id="m1", delta=""),
        TextMessageEndEvent(message_id="m1"),
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"),
        ToolCallArgsEvent(tool_call_id="c1", delta=""),
        ToolCallArgsEvent(tool_call_id="c1", delta="{}"),
        ToolCallArgsEvent(tool_call_id="c1", delta=""),
        ToolCallEndEvent(tool_call_id="c1"),
    )
    assert [t.text for t in processor.conversation.texts()] == ["hi"]
    assert call(processor, "c1").arguments == "{}"


def test_empty_deltas_on_the_full_path_add_nothing() -> None:
    processor = running()
    effects = feed(
        processor,
        TextMessageChunkEvent(message_id="m1", delta=""),
        TextMessageChunkEvent(delta="hi"),
        ReasoningMessageChunkEvent(message_id="r1", delta=""),
        ReasoningMessageChunkEvent(delta="hmm"),
        ReasoningMessageContentEvent(message_id="r1", delta=""),
        tool_call("lookup", "{}", id="c1"),
        ToolCallArgsEvent(tool_call_id="c1", delta=""),  # after END: kept, but empty
        ToolCallResultEvent(message_id="t1", tool_call_id="c1", content=""),
    )
    assert codes(effects) == ["args_after_end"]
    assert [t.text for t in processor.conversation.texts()] == ["hi"]
    records = [m for m in processor.conversation.messages if isinstance(m, ReasoningRecord)]
    assert [r.text for r in records] == ["hmm"]
    assert call(processor, "c1").arguments == "{}"
    assert call(processor, "c1").result == ToolResult.success("")


def test_ends_and_signatures_for_nothing_open_change_nothing() -> None:
    processor = running()
    before = snapshot(processor)
    effects = feed(
        processor,
        ReasoningMessageEndEvent(message_id="never-started"),
        ThinkingTextMessageEndEvent(),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="ghost", encrypted_value="x"),
    )
    assert codes(effects) == []
    assert snapshot(processor) == before


def test_reasoning_that_ends_while_a_call_streams_leaves_the_calling_activity_as_it_is() -> None:
    processor = running()
    feed(processor, ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"))
    effects = feed(processor, ReasoningEndEvent(message_id="r0"))
    assert not any(isinstance(e, ActivityChanged) for e in effects)
    assert processor.activity == Activity(ActivityKind.CALLING_TOOLS, ("lookup",))


def test_an_unknown_event_after_the_run_ended_is_named_by_its_type() -> None:
    processor = running()
    finish(processor)
    effects = feed(processor, UnknownEvent(type="VENDOR_PING", raw=b"{}"))
    [violation] = [e.violation for e in effects if isinstance(e, ViolationRaised)]
    assert (violation.code, violation.event_type) == ("event_after_run_end", "VENDOR_PING")
