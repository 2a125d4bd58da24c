"""Conversation: the history a thread holds, its index, and the key it is filed under."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest

from toolrelay import IllegalTransition, ThreadKey, ToolCallStatus, ToolResult
from toolrelay._core._conversation import (
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._core._effects import Activity, ActivityKind
from toolrelay._core._processor import EventProcessor
from toolrelay._machines import ToolCallEvent
from toolrelay.protocol import (
    AssistantMessage,
    FunctionCall,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from toolrelay.testing import run_finished, run_started, text, tool_call

USER = UserMessage(id="u1", content="hi")


def _batch(batch_id: str, *call_ids: str) -> ToolCallBatch:
    calls = []
    for call_id in call_ids:
        call = ToolCallInfo(
            call_id,
            "lookup",
            parent_message_id=f"p-{call_id}",
            arguments="{}",
            status=ToolCallStatus.completed,
        )
        call.result = ToolResult.success("42")
        calls.append(call)
    return ToolCallBatch(
        id=batch_id,
        calls=tuple(calls),
        result_message_ids=tuple(f"gen-{c}" for c in call_ids),
    )


def test_a_conversation_is_a_sized_iterable_of_its_messages() -> None:
    answer = TextMessage("a1", text="hello")
    batch = _batch("b1", "c1", "c2")
    conversation = Conversation("t", [USER, answer, batch])
    assert len(conversation) == 3
    assert list(conversation) == [USER, answer, batch]
    assert [c.id for c in conversation.tool_calls()] == ["c1", "c2"]
    assert list(conversation.texts()) == [answer]
    assert repr(conversation) == "Conversation(thread_id='t', messages=3)"
    assert conversation.state == {}


def test_every_kind_of_tool_call_in_the_history_is_held() -> None:
    assistant = AssistantMessage(
        id="a1",
        tool_calls=[ToolCall(id="c-agui", function=FunctionCall(name="f", arguments="{}"))],
    )
    result = ToolMessage(id="r1", content="1", tool_call_id="c-result")
    conversation = Conversation("t", [USER, assistant, result, _batch("b1", "c-batch")])
    for call_id in ("c-agui", "c-result", "c-batch"):
        assert conversation.holds_tool_call(call_id)
    assert not conversation.holds_tool_call("c-other")
    assert {"u1", "a1", "r1", "b1", "gen-c-batch", "p-c-batch"} <= conversation.known_ids()


def test_a_history_cut_short_is_indexed_again() -> None:
    conversation = Conversation("t", [USER, _batch("b1", "c1")])
    assert conversation.holds_tool_call("c1")
    del conversation.messages[1:]
    assert not conversation.holds_tool_call("c1")
    assert "b1" not in conversation.known_ids()


def test_a_history_cut_and_grown_back_past_where_it_was_indexed_is_indexed_again() -> None:
    conversation = Conversation("t", [USER, _batch("b1", "c1")])
    assert conversation.holds_tool_call("c1")  # indexed up to the batch
    del conversation.messages[1:]
    conversation.messages += [_batch("b2", "c2"), TextMessage("a1", text="after")]
    assert conversation.holds_tool_call("c2")  # not taken for indexed already
    assert not conversation.holds_tool_call("c1")
    assert "b1" not in conversation.known_ids()
    assert {"b2", "a1"} <= conversation.known_ids()


def test_result_ids_are_adopted_where_the_batch_now_sits_after_an_edit_in_place() -> None:
    after = TextMessage("a1", text="after")
    last = TextMessage("a2", text="last")
    conversation = Conversation("t", [USER, _batch("b1", "c1"), after, last])
    assert conversation.holds_tool_call("c1")  # indexed: the batch at position 1
    messages = conversation.messages
    # Same length, same last message, the batch moved: the index does not see it.
    messages[1], messages[2] = messages[2], messages[1]
    (renamed,) = conversation.adopt_result_ids({"c1": "server-r1"})
    assert renamed.result_message_ids == ("server-r1",)
    assert messages == [USER, after, renamed, last]
    assert "server-r1" in conversation.known_ids()


def test_a_result_id_already_adopted_renames_nothing() -> None:
    conversation = Conversation("t", [USER, _batch("b1", "c1")])
    batch = conversation.messages[1]
    assert conversation.adopt_result_ids({"c1": "gen-c1", "c-unknown": "x"}) == []
    assert conversation.messages[1] is batch


def test_a_thread_key_reads_server_room_thread_leaving_out_what_is_empty() -> None:
    assert str(ThreadKey("t")) == "t"
    assert str(ThreadKey("t", room_id="room")) == "room/t"
    assert str(ThreadKey("t", room_id="room", server="s1")) == "s1/room/t"
    assert str(ThreadKey("t", server="s1")) == "s1/t"


def test_a_thread_key_reads_compares_and_copies_as_a_frozen_record_the_collector_skips() -> None:
    key = ThreadKey("t", room_id="r")
    assert repr(key) == "ThreadKey(thread_id='t', room_id='r', server='')"
    assert key == ThreadKey("t", "r") and hash(key) == hash(ThreadKey("t", "r"))
    assert sorted([ThreadKey("b"), ThreadKey("a", "z"), ThreadKey("a")]) == [
        ThreadKey("a"),
        ThreadKey("a", "z"),
        ThreadKey("b"),
    ]
    assert pickle.loads(pickle.dumps(key)) == key and copy.deepcopy(key) == key
    with pytest.raises(AttributeError):
        key.thread_id = "other"  # type: ignore[misc]
    assert not gc.is_tracked(key)


def test_every_activity_reads_as_a_ui_would_say_it() -> None:
    names = ("alpha", "beta")
    assert [str(Activity(kind, names, more=2)) for kind in ActivityKind] == [
        "",  # idle
        "Thinking...",
        "Responding...",
        "Reasoning...",
        "Calling: alpha, beta (+2 more)",
        "Executing: alpha, beta (+2 more)",
        "Awaiting approval: alpha, beta (+2 more)",
        "",  # done
    ]


def test_streamed_records_say_what_they_hold() -> None:
    call = ToolCallInfo("c1", "lookup", arguments='{"n": 1}')
    assert repr(call) == (
        "ToolCallInfo(id='c1', name='lookup', status='streaming', arguments='{\"n\": 1}')"
    )
    assert repr(TextMessage("m1", text="hi")) == "TextMessage(id='m1', role='assistant', text='hi')"
    assert repr(ReasoningRecord("r1", "hmm")) == "ReasoningRecord(id='r1', text='hmm')"


def test_a_conversation_makes_its_index_only_when_asked_and_its_view_stays_live() -> None:
    conversation = Conversation("t", [USER, _batch("b1", "c1")])
    conversation.append(TextMessage("a1", text="hello"))
    assert conversation._index is None  # most threads never ask
    known = conversation.known_ids()
    assert {"u1", "b1", "a1"} <= known
    conversation.replace_head(2, [UserMessage(id="u0", content="stored")])
    conversation.known_ids()
    assert "u0" in known and "b1" not in known  # the view held is the live one
    del conversation.messages[:]
    assert not conversation.holds_tool_call("c1") and len(known) == 0


def test_a_history_replaced_before_any_question_is_indexed_as_it_now_is() -> None:
    conversation = Conversation("t", [USER])
    conversation.replace_head(1, [_batch("b1", "c1")])
    assert conversation._index is None
    assert conversation.holds_tool_call("c1")
    assert conversation.known_ids() >= {"b1", "gen-c1"}


def test_a_call_moves_through_its_declared_machine_and_stays_put_when_refused() -> None:
    call = ToolCallInfo("c1", "lookup")
    statuses = [call.status, call.send(ToolCallEvent.finish_args)]
    with pytest.raises(IllegalTransition, match="'succeed' in state 'pending'"):
        call.send(ToolCallEvent.succeed)
    statuses.append(call.status)
    assert statuses == [ToolCallStatus.streaming, ToolCallStatus.pending, ToolCallStatus.pending]
    restored = ToolCallInfo("c2", "lookup", status=ToolCallStatus.executing)
    assert restored.send(ToolCallEvent.succeed) is ToolCallStatus.completed


def test_messages_and_calls_hold_their_text_themselves_and_stay_truthy_when_empty() -> None:
    # Their chunks are their own (no accumulator object beside them), and they take
    # none of an accumulator's meaning: an empty message or call is still true.
    call = ToolCallInfo("c1", "lookup")
    text = TextMessage("m1", complete=False)
    reasoning = ReasoningRecord("r1", complete=False)
    assert call and text and reasoning
    call.argument_adder('{"a":')
    call.append_arguments(" 1}")
    text.adder("hel")
    text.append("lo")
    reasoning.append("hmm")
    assert (call.arguments, call.argument_bytes) == ('{"a": 1}', 8)
    assert (text.text, text.byte_count, reasoning.text) == ("hello", 5, "hmm")
    for holder in (call, text, reasoning):
        assert [type(item) for item in gc.get_referents(holder) if type(item) is list] == [list]
    call.replace_arguments("{}")
    assert (call.arguments, call.argument_bytes) == ("{}", 2)


def test_text_given_whole_or_final_is_held_where_the_collector_does_not_look() -> None:
    # Chunks are a list only while deltas may come: given whole, or once the holder is
    # final, the text is a tuple of one string, which the cycle collector untracks.
    history = TextMessage("h1", text="from the store")
    call = ToolCallInfo("c1", "lookup")
    call.argument_adder('{"a": ')
    call.append_arguments("1}")
    call.send(ToolCallEvent.finish_args)
    call.append_arguments(" ")  # pending: arguments still come (args_after_end)
    call.send(ToolCallEvent.execute)
    gc.collect()
    assert not gc.is_tracked(history._chunks) and not gc.is_tracked(call._chunks)
    assert (history.text, call.arguments, call.argument_bytes) == ("from the store", '{"a": 1} ', 9)
    # Appending to sealed text opens it again: nothing is lost.
    history.append(", and more")
    assert (history.text, history.byte_count) == ("from the store, and more", 24)
    empty = ToolCallInfo("c2", "ping")
    empty.send(ToolCallEvent.finish_args)
    empty.send(ToolCallEvent.execute)
    assert (empty.arguments, empty.argument_bytes, empty._chunks) == ("", 0, ())


def test_a_processor_seals_what_it_settles() -> None:
    conversation = Conversation("t", [USER])
    processor = EventProcessor(conversation)
    processor.start_run("r1")
    events = [run_started("t", "r1"), *text("Hello", id="m1"), *tool_call("f", "{}", id="c1")]
    for event in [*events, run_finished("t", "r1")]:
        processor.receive(event)
    answer = conversation.messages[1]
    assert isinstance(answer, TextMessage) and type(answer._chunks) is tuple
    assert answer.text == "Hello"
    (call,) = processor.tool_calls
    assert type(call._chunks) is tuple and call.arguments == "{}"
