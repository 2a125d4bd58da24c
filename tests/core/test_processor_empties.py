"""The processor's shared empty list and dict (issue 16): most per-turn and per-run
collections stay empty in most runs, so a processor starts each of them as one shared
empty list (``NO_ITEMS``) or dict (``NO_KEYS``) and makes its own at the first item.
The shared ones refuse to grow, and one turn's items never reach another turn."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from types import BuiltinMethodType

import pytest

from toolrelay import ToolResult
from toolrelay._core._conversation import Conversation
from toolrelay._core._processor import EventProcessor
from toolrelay._core._processor_state import NO_ITEMS, NO_KEYS, added, keyed
from toolrelay.protocol import (
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunErrorEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UserMessage,
)
from toolrelay.testing import run_finished, run_started, server_tool_call, text, tool_call

# The helpers sit next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _changes import change_dict, change_list


@pytest.mark.parametrize("how", ["append", "extend", "insert", "+=", "*=", "slice"])
def test_the_shared_empty_list_refuses_every_way_to_grow(how: str) -> None:
    with pytest.raises(TypeError, match="NO_ITEMS is shared"):
        change_list(NO_ITEMS, how)
    assert NO_ITEMS == [] and type(NO_ITEMS).__name__ == "_SharedEmptyList"


@pytest.mark.parametrize("how", ["[]=", "setdefault", "update", "|="])
def test_the_shared_empty_dict_refuses_every_way_to_gain_a_key(how: str) -> None:
    with pytest.raises(TypeError, match="NO_KEYS is shared"):
        change_dict(NO_KEYS, how)
    assert NO_KEYS == {} and type(NO_KEYS).__name__ == "_SharedEmptyDict"


def test_added_and_keyed_make_a_collection_of_their_own_at_the_first_item() -> None:
    first = added(NO_ITEMS, "a")
    assert first == ["a"] and first is not NO_ITEMS
    assert added(first, "b") is first and first == ["a", "b"]
    mapping = keyed(NO_KEYS, "a", 1)
    assert mapping == {"a": 1} and mapping is not NO_KEYS
    assert keyed(mapping, "b", 2) is mapping and mapping == {"a": 1, "b": 2}
    assert NO_ITEMS == [] and NO_KEYS == {}


def _processor(thread: str) -> EventProcessor:
    conversation = Conversation(thread, [UserMessage(id=f"u-{thread}", content="hi")])
    processor = EventProcessor(conversation, max_repeats=3)
    processor.start_run(f"run-{thread}")
    return processor


def test_one_turns_items_never_reach_another_turn() -> None:
    # A run that fills every lazily made collection: reasoning, text, calls (one
    # with arguments after its END), a result the agent sent itself, and a repeat
    # count; a second processor made after it starts empty, and the shared empties
    # stay empty.
    busy = _processor("busy")
    events = [
        run_started("busy", "run-busy"),
        ReasoningMessageStartEvent(message_id="r1"),
        ReasoningMessageContentEvent(message_id="r1", delta="hmm"),
        ReasoningMessageEndEvent(message_id="r1"),
        *text("Let me look.", id="m1"),
        *server_tool_call("search", {"q": "x"}, "found", id="s1", message_id="res-1"),
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"),
        ToolCallArgsEvent(tool_call_id="c1", delta='{"a": '),
        ToolCallEndEvent(tool_call_id="c1"),
        ToolCallArgsEvent(tool_call_id="c1", delta="1}"),
        *tool_call("other", "{}", id="c2"),
        run_finished("busy", "run-busy"),
    ]
    for event in events:
        busy.receive(event)
    assert [call.id for call in busy.tool_calls] == ["s1", "c1", "c2"]
    assert busy.tool_calls[1].arguments == '{"a": 1}'
    assert [v.code for v in busy.violations] == ["args_after_end"]
    fresh = _processor("fresh")
    assert fresh.tool_calls == () and fresh.violations == []
    assert NO_ITEMS == [] and NO_KEYS == {}


def test_abandoned_calls_and_violations_of_one_turn_stay_its_own() -> None:
    # Both start as the shared empty list: the turn that abandons a call and records
    # a violation gets lists of its own, and a turn made after it reads empty ones.
    busy = _processor("busy")
    busy.receive(run_started("busy", "run-busy"))
    busy.receive(ToolCallArgsEvent(tool_call_id="nope", delta="{}"))
    busy.receive(ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"))
    busy.cancel()
    assert [call.id for call in busy.abandoned] == ["c1"]
    assert [v.code for v in busy.violations] == ["args_for_unknown_call"]
    fresh = _processor("fresh")
    assert fresh.abandoned == [] and fresh.violations == []
    assert NO_ITEMS == []


def test_a_finished_run_keeps_no_adder_of_its_messages_or_calls() -> None:
    # The hot path holds the bound ``append`` of the message's (call's) chunk list
    # while deltas stream; once the run ends the turn lets go of both.
    processor = _processor("t")
    processor.receive(run_started("t", "run-t"))
    for event in (*text("Hello there", id="m1"), *tool_call("lookup", '{"q": 1}', id="c1")):
        processor.receive(event)
    processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta=""))
    processor.receive(run_finished("t", "run-t"))
    adders = [item for item in gc.get_referents(processor) if isinstance(item, BuiltinMethodType)]
    assert [adder.__self__ for adder in adders if adder.__self__] == []  # only the idle one
    assert processor.conversation.messages[1].text == "Hello there"  # type: ignore[union-attr]
    assert processor.tool_calls[0].arguments == '{"q": 1}'


def test_the_hot_path_takes_deltas_only_for_an_open_message_or_a_streaming_call() -> None:
    processor = _processor("t")
    processor.receive(run_started("t", "run-t"))
    processor.receive(ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"))
    processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta='{"a":'))
    processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta="1}"))
    processor.receive(ToolCallEndEvent(tool_call_id="c1"))
    # After END the call is pending: a late delta takes the full path (a violation).
    processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta=" "))
    processor.receive(TextMessageContentEvent(message_id="m1", delta="hi"))
    processor.receive(TextMessageContentEvent(message_id="m1", delta="!"))
    assert [v.code for v in processor.violations] == ["args_after_end", "content_without_start"]
    assert processor.tool_calls[0].arguments == '{"a":1} '
    assert processor.conversation.messages[-1].text == "hi!"  # type: ignore[union-attr]


@pytest.mark.parametrize("ending", ["completed", "cancelled", "failed"])
def test_a_finished_turn_lets_go_of_what_only_a_running_turn_reads(ending: str) -> None:
    # Its accounting of calls, texts and repeats goes; its outcome stays.
    processor = _processor("t")
    processor.receive(run_started("t", "run-t"))
    for event in (*text("Looking.", id="m1"), *server_tool_call("search", {}, "found", id="s1")):
        processor.receive(event)
    processor.receive(ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup"))
    if ending == "completed":
        processor.receive(ToolCallEndEvent(tool_call_id="c1"))
        processor.receive(run_finished("t", "run-t"))
        (ready,) = processor.record_result(processor.tool_calls[1], ToolResult.success("1"))
        processor.start_run("run-2")
        for event in (
            run_started("t", "run-2"),
            *text("Done.", id="m2"),
            run_finished("t", "run-2"),
        ):
            processor.receive(event)
    elif ending == "cancelled":
        processor.cancel()
    else:
        processor.receive(RunErrorEvent(message="boom"))
    assert processor.status.value == ending
    assert processor._turn_calls is NO_ITEMS and processor._turn_texts is NO_ITEMS
    assert processor._calling_shown is NO_ITEMS and processor._calling_waiting is None
    assert processor._requested is NO_KEYS and processor._run_reasoning is NO_KEYS
    kept = [call.id for call in processor.conversation.tool_calls()]
    assert kept == (["s1", "c1"] if ending == "completed" else ["s1"])
    assert [call.id for call in processor.abandoned] == ([] if ending == "completed" else ["c1"])


def test_while_its_tools_run_a_turn_keeps_no_list_of_calls_shown_as_calling() -> None:
    processor = _processor("t")
    processor.receive(run_started("t", "run-t"))
    for event in tool_call("lookup", "{}", id="c1"):
        processor.receive(event)
    assert [call.id for call in processor._calling_shown] == ["c1"]
    effects = processor.receive(run_finished("t", "run-t"))
    assert processor._calling_shown is NO_ITEMS and processor._calling_waiting is None
    assert processor.activity.kind.value == "executing_tools"
    assert processor.activity.tool_names == ("lookup",)
    assert any(type(effect).__name__ == "ToolsReady" for effect in effects)
