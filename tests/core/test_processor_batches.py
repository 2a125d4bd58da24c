"""``EventProcessor.receive_many``: a read's events at once, with exactly what
``receive`` does event after event (the property tests in
``test_processor_properties.py`` hold it over any split of any stream; these written
examples take every branch of its loop, so that the coverage gate does not depend on a
random example).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from toolrelay import RunStatus
from toolrelay._core._conversation import Conversation, TextMessage
from toolrelay._core._effects import Effect, ToolsReady, TurnEnded
from toolrelay._core._processor import EventProcessor, Limits
from toolrelay.protocol import (
    Event,
    RunFinishedEvent,
    RunStartedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UnknownEvent,
    UserMessage,
)

THREAD = "thread-batches"


def running(**limits: int) -> EventProcessor:
    counter = itertools.count(1)
    processor = EventProcessor(
        Conversation(THREAD, [UserMessage(id="u", content="go")]),
        limits=Limits(**limits),
        id_factory=lambda: f"gen-{next(counter)}",
    )
    processor.start_run("run-1")
    return processor


def text(message_id: str, delta: str) -> TextMessageContentEvent:
    return TextMessageContentEvent(message_id=message_id, delta=delta)


def args(call_id: str, delta: str) -> ToolCallArgsEvent:
    return ToolCallArgsEvent(tool_call_id=call_id, delta=delta)


def drain(
    processor: EventProcessor, events: Sequence[Event | UnknownEvent]
) -> list[tuple[Sequence[Effect], int]]:
    """Every (effects, index) ``receive_many`` returns over ``events``, to the end."""
    answers = []
    position = 0
    while position < len(events):
        effects, position = processor.receive_many(events, position)
        answers.append((effects, position))
    return answers


def texts(processor: EventProcessor) -> list[str]:
    return [m.text for m in processor.conversation.messages if isinstance(m, TextMessage)]


def test_a_run_of_deltas_to_the_end_of_the_batch_has_no_effects() -> None:
    processor = running()
    opened = processor.receive_many(
        [RunStartedEvent(thread_id=THREAD, run_id="srv"), TextMessageStartEvent(message_id="m")]
    )
    assert opened[1] == 2  # TEXT_MESSAGE_START shows streaming text: it stops there
    events = [text("m", "a"), text("m", ""), text("m", "b"), text("m", "c")]
    assert processor.receive_many([*events[:1], *events], 1) == ((), 5)
    # An empty delta is counted as an event and appends nothing.
    assert texts(processor) == ["abc"]
    assert processor._left == Limits().max_events_per_run - 6
    # Nothing but empty deltas: counted, nothing kept.
    assert processor.receive_many([text("m", ""), text("m", "")]) == ((), 2)
    processor.receive(ToolCallStartEvent(tool_call_id="a", tool_call_name="f"))
    assert processor.receive_many([args("a", ""), args("a", "")]) == ((), 2)
    assert texts(processor) == ["abc"]
    assert processor.tool_calls[0].arguments == ""
    assert processor._left == Limits().max_events_per_run - 11


def _two_messages_two_calls() -> EventProcessor:
    """A running processor with messages ``m1``, ``m2`` and calls ``a``, ``b`` open."""
    processor = running()
    processor.receive(RunStartedEvent(thread_id=THREAD, run_id="srv"))
    processor.receive(TextMessageStartEvent(message_id="m1"))
    processor.receive(TextMessageStartEvent(message_id="m2"))
    processor.receive(ToolCallStartEvent(tool_call_id="a", tool_call_name="f"))
    processor.receive(ToolCallStartEvent(tool_call_id="b", tool_call_name="f"))
    return processor


def test_runs_of_deltas_end_at_another_id_and_another_type() -> None:
    processor = _two_messages_two_calls()
    events: list[Event | UnknownEvent] = [
        text("m1", "x"),
        text("m1", "y"),
        text("m2", "z"),  # another message
        args("a", '{"q":'),
        args("a", ""),
        args("b", "{}"),  # another call
        args("a", "1}"),
        text("m1", "!"),  # another type
        args("b", ""),
    ]
    assert drain(processor, events) == [((), len(events))]
    assert texts(processor) == ["xy!", "z"]
    assert [call.arguments for call in processor.tool_calls] == ['{"q":1}', "{}"]


def test_a_run_of_deltas_ends_at_the_first_intruder_even_when_more_deltas_follow() -> None:
    # A long run's rest is taken at once, its end guessed by bisection as if the run
    # were one block; here it is not: deltas for the same message (or call) come back
    # after another event, and the run still ends at that event, which goes its own way.
    events: list[Event | UnknownEvent] = [
        *(text("m1", "a") for _ in range(20)),
        text("m2", "1"),  # another message, inside the bisected span
        *(text("m1", "b") for _ in range(50)),
        *(args("a", "[") for _ in range(20)),
        args("b", "{"),  # another call
        *(args("a", "1") for _ in range(120)),  # a clean long run: several stretches
        UnknownEvent(type="CUSTOM_THING", raw=b"{}"),  # another type, with no id at all
        *(args("a", "]") for _ in range(30)),
        StepStartedEvent(step_name="s"),
        *(text("m2", "2") for _ in range(40)),  # ends the batch
    ]
    processor = _two_messages_two_calls()
    assert drain(processor, events) == [((), len(events))]
    assert texts(processor) == ["a" * 20 + "b" * 50, "1" + "2" * 40]
    assert [call.arguments for call in processor.tool_calls] == [
        "[" * 20 + "1" * 120 + "]" * 30,
        "{",
    ]
    assert processor._left == Limits().max_events_per_run - 5 - len(events)
    # The same, event by event.
    alone = _two_messages_two_calls()
    for event in events:
        assert alone.receive(event) == ()
    assert texts(alone) == texts(processor)
    assert [c.arguments for c in alone.tool_calls] == [c.arguments for c in processor.tool_calls]


def test_a_delta_the_hot_path_cannot_take_goes_the_full_path() -> None:
    # TEXT_MESSAGE_CONTENT without START: the full path starts the message.
    processor = running()
    processor.receive(RunStartedEvent(thread_id=THREAD, run_id="srv"))
    effects, position = processor.receive_many([text("new", "hi"), text("new", "!")])
    assert position == 1 and effects  # the implicit start shows streaming text
    assert processor.violations[0].code == "content_without_start"
    assert processor.receive_many([text("new", "hi"), text("new", "!")], 1) == ((), 2)
    assert texts(processor) == ["hi!"]
    # TOOL_CALL_ARGS for a call never started: dropped by the full path.
    effects, position = processor.receive_many([args("ghost", "{}"), text("new", "?")])
    assert position == 1 and effects
    assert processor.violations[-1].code == "args_for_unknown_call"
    assert processor.receive_many([args("ghost", "{}"), text("new", "?")], 1) == ((), 2)
    assert texts(processor) == ["hi!?"]


def test_the_event_limit_trips_inside_a_run_of_text_deltas() -> None:
    processor = running(max_events_per_run=4)
    processor.receive(TextMessageStartEvent(message_id="m"))
    events = [text("m", "a"), text("m", ""), text("m", "c"), text("m", "d"), text("m", "e")]
    effects, position = processor.receive_many(events)
    assert position == 4  # the fourth delta passed the bound
    (ended,) = [e for e in effects if isinstance(e, TurnEnded)]
    assert ended.reason.code == "max_events_per_run"
    assert processor.status is RunStatus.failed
    assert texts(processor) == ["ac"]  # what arrived before is kept
    assert processor.receive_many(events, position) == ((), 5)  # dropped silently


def test_the_text_limit_trips_inside_a_run_of_text_deltas() -> None:
    processor = running(max_text_bytes=8)
    processor.receive(TextMessageStartEvent(message_id="m"))
    effects, position = processor.receive_many([text("m", "abc")] * 5)
    assert position == 3  # 9 bytes
    (ended,) = [e for e in effects if isinstance(e, TurnEnded)]
    assert ended.reason.code == "max_text_bytes"


def test_the_argument_limits_trip_inside_a_run_of_argument_deltas() -> None:
    processor = running(max_events_per_run=4)
    processor.receive(ToolCallStartEvent(tool_call_id="a", tool_call_name="f"))
    effects, position = processor.receive_many(
        [args("a", "{"), args("a", "")] + [args("a", "{")] * 4
    )
    assert position == 4
    assert [e.reason.code for e in effects if isinstance(e, TurnEnded)] == ["max_events_per_run"]
    assert processor.abandoned[0].arguments == "{{"

    processor = running(max_argument_bytes=8)
    processor.receive(ToolCallStartEvent(tool_call_id="a", tool_call_name="f"))
    effects, position = processor.receive_many([args("a", "abc")] * 5)
    assert position == 3
    assert [e.reason.code for e in effects if isinstance(e, TurnEnded)] == ["max_argument_bytes"]


def test_it_stops_after_each_event_with_effects_and_goes_on_from_there() -> None:
    processor = running()
    events: list[Event | UnknownEvent] = [
        RunStartedEvent(thread_id=THREAD, run_id="srv"),
        TextMessageStartEvent(message_id="m"),
        text("m", "look"),
        text("m", "ing"),
        TextMessageEndEvent(message_id="m"),
        ToolCallStartEvent(tool_call_id="a", tool_call_name="f"),
        args("a", "{}"),
        ToolCallEndEvent(tool_call_id="a"),
        RunFinishedEvent(thread_id=THREAD, run_id="srv"),
    ]
    answers = drain(processor, events)
    # Each answer is what receive gave for the event before its index (effects compare
    # by their reprs: calls compare by identity, and these are two processors' calls).
    replay = running()
    expected = [
        (repr(list(effects)), index + 1)
        for index, event in enumerate(events)
        if (effects := replay.receive(event))
    ]
    assert [(repr(list(effects)), index) for effects, index in answers] == expected
    assert len(expected) == 4 and expected[-1][1] == len(events)
    assert any(isinstance(effect, ToolsReady) for effect in answers[-1][0])
    assert processor.status is RunStatus.executing_tools
