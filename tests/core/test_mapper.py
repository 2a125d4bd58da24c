"""The message mapper: a conversation -> the AG-UI messages of the next run.

The last tests send the encoded result to a real peer: the official AG-UI Python SDK
(``ag_ui.core.RunAgentInput.model_validate_json``) must accept it.
"""

from __future__ import annotations

import gc
import itertools
import json
from collections.abc import Sequence
from typing import Any

import pytest
from ag_ui.core import (
    AssistantMessage as SdkAssistantMessage,
    RunAgentInput as SdkRunAgentInput,
    ToolMessage as SdkToolMessage,
)
from hypothesis import given, strategies as st

from toolrelay import ToolCallStatus, ToolResult
from toolrelay._core._conversation import (
    ChatMessage,
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._core._mapper import (
    ConversationMapper,
    conversation_to_agui,
    to_agui_messages,
    tool_call_to_agui,
)
from toolrelay._core._processor import EventProcessor
from toolrelay._core._shared import NO_KEYS
from toolrelay._machines import ToolCallEvent
from toolrelay.protocol import (
    AssistantMessage,
    Context,
    DeveloperMessage,
    FunctionCall,
    Message,
    ReasoningMessage,
    SystemMessage,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
    encode,
)
from toolrelay.testing import run_finished, run_started, text, tool_call

USER = UserMessage(id="u1", content="hi")

_PATHS: dict[ToolCallStatus, tuple[ToolCallEvent, ...]] = {
    ToolCallStatus.streaming: (),
    ToolCallStatus.pending: (ToolCallEvent.finish_args,),
    ToolCallStatus.executing: (ToolCallEvent.finish_args, ToolCallEvent.execute),
    ToolCallStatus.completed: (
        ToolCallEvent.finish_args,
        ToolCallEvent.execute,
        ToolCallEvent.succeed,
    ),
    ToolCallStatus.failed: (ToolCallEvent.finish_args, ToolCallEvent.execute, ToolCallEvent.fail),
}


def make_call(
    call_id: str,
    *,
    name: str = "lookup",
    arguments: str = '{"q": 1}',
    status: ToolCallStatus = ToolCallStatus.completed,
    result: ToolResult | None = None,
    parent: str | None = None,
) -> ToolCallInfo:
    """A call driven through its machine to ``status``, with a result when final."""
    call = ToolCallInfo(call_id, name, arguments=arguments, parent_message_id=parent)
    for event in _PATHS[status]:
        call.send(event)
    if status is ToolCallStatus.completed:
        call.result = result or ToolResult.success(f"result of {call_id}")
    elif status is ToolCallStatus.failed:
        call.result = result or ToolResult.failure(f"{call_id} broke")
    return call


def batch(
    *calls: ToolCallInfo, id: str = "batch-1", result_ids: Sequence[str] = ()
) -> ToolCallBatch:
    ids = tuple(result_ids) or tuple(f"tool-{c.id}" for c in calls)
    return ToolCallBatch(id=id, calls=calls, result_message_ids=ids)


def assistant_text(id: str, content: str) -> TextMessage:
    message = TextMessage(id, "assistant", content)
    message.complete = True
    return message


def ids_of(messages: Sequence[Message]) -> list[str]:
    return [m.id for m in messages]


# --- tool batches -----------------------------------------------------------------------


def test_a_batch_becomes_an_assistant_message_with_tool_calls_then_one_tool_message_each() -> None:
    a = make_call("a", name="get", arguments='{"name": "alice"}', result=ToolResult.success("42"))
    b = make_call("b", name="get", arguments='{"name": "bob"}', result=ToolResult.success("7"))
    out = to_agui_messages([USER, batch(a, b)])
    assert out == [
        USER,
        AssistantMessage(
            id="batch-1",
            tool_calls=[
                ToolCall(id="a", function=FunctionCall(name="get", arguments='{"name": "alice"}')),
                ToolCall(id="b", function=FunctionCall(name="get", arguments='{"name": "bob"}')),
            ],
        ),
        ToolMessage(id="tool-a", tool_call_id="a", content="42"),
        ToolMessage(id="tool-b", tool_call_id="b", content="7"),
    ]


def test_a_failed_call_gets_a_tool_message_carrying_its_error_text() -> None:
    ok = make_call("ok")
    bad = make_call("bad", result=ToolResult.failure("TimeoutError: took too long"))
    out = to_agui_messages([batch(ok, bad)])
    assistant, tool_ok, tool_bad = out
    assert isinstance(assistant, AssistantMessage)
    assert [tc.id for tc in assistant.tool_calls or ()] == ["ok", "bad"]
    assert isinstance(tool_bad, ToolMessage)
    assert tool_bad.tool_call_id == "bad"
    assert tool_bad.error == "TimeoutError: took too long"
    assert json.loads(str(tool_bad.content)) == {"error": "TimeoutError: took too long"}
    assert isinstance(tool_ok, ToolMessage)
    assert tool_ok.error is None


def test_every_call_failing_still_sends_every_outcome() -> None:
    out = to_agui_messages(
        [
            batch(
                make_call("a", status=ToolCallStatus.failed),
                make_call("b", status=ToolCallStatus.failed),
            )
        ]
    )
    assert [type(m).__name__ for m in out] == ["AssistantMessage", "ToolMessage", "ToolMessage"]


@pytest.mark.parametrize(
    "status", [ToolCallStatus.streaming, ToolCallStatus.pending, ToolCallStatus.executing]
)
def test_calls_that_are_not_final_are_not_sent(status: ToolCallStatus) -> None:
    open_call = make_call("open", status=status)
    done = make_call("done")
    out = to_agui_messages([batch(open_call, done)])
    assert isinstance(out[0], AssistantMessage)
    assert [tc.id for tc in out[0].tool_calls or ()] == ["done"]
    assert [m.tool_call_id for m in out if isinstance(m, ToolMessage)] == ["done"]


def test_a_batch_with_no_final_call_sends_nothing() -> None:
    out = to_agui_messages([USER, batch(make_call("p", status=ToolCallStatus.pending))])
    assert out == [USER]


@pytest.mark.parametrize("arguments", ["", "   ", "\n"])
def test_empty_arguments_are_sent_as_an_empty_object(arguments: str) -> None:
    wire = tool_call_to_agui(make_call("z", arguments=arguments))
    assert wire.function.arguments == "{}"
    assert wire.type == "function"


def test_arguments_are_sent_as_received() -> None:
    raw = '{ "b": 2,  "a": [1] }'
    assert tool_call_to_agui(make_call("c", arguments=raw)).function.arguments == raw


# --- text and calls in one assistant message -----------------------------------------------


def test_text_and_calls_naming_it_as_parent_become_one_assistant_message() -> None:
    calls = batch(make_call("a", parent="m1"), make_call("b", parent="m1"))
    out = to_agui_messages([USER, assistant_text("m1", "Let me check."), calls])
    assert ids_of(out) == ["u1", "m1", "tool-a", "tool-b"]
    merged = out[1]
    assert isinstance(merged, AssistantMessage)
    assert merged.content == "Let me check."
    assert [tc.id for tc in merged.tool_calls or ()] == ["a", "b"]


def test_calls_naming_another_parent_get_their_own_assistant_message() -> None:
    out = to_agui_messages([assistant_text("m1", "hello"), batch(make_call("a", parent="m9"))])
    assert ids_of(out) == ["m1", "m9", "tool-a"]
    assert isinstance(out[0], AssistantMessage) and out[0].tool_calls is None


def test_calls_without_parent_use_the_batch_id() -> None:
    out = to_agui_messages([assistant_text("m1", "hello"), batch(make_call("a"), id="b-1")])
    assert ids_of(out) == ["m1", "b-1", "tool-a"]


def test_merging_into_a_supplied_assistant_message_keeps_its_other_fields() -> None:
    supplied = AssistantMessage(id="m1", content="hi", name="bot", metadata={"k": 1})
    out = to_agui_messages([supplied, batch(make_call("a", parent="m1"))])
    merged = out[0]
    assert isinstance(merged, AssistantMessage)
    assert (merged.id, merged.content, merged.name, merged.metadata) == (
        "m1",
        "hi",
        "bot",
        {"k": 1},
    )
    assert [tc.id for tc in merged.tool_calls or ()] == ["a"]
    assert supplied.tool_calls is None  # the supplied message itself is not changed


# --- unique ids -----------------------------------------------------------------------------------


def test_a_parent_id_naming_an_earlier_message_does_not_duplicate_its_id() -> None:
    # Text m1, then text m2, then calls whose parent is m1: m1 is not the message
    # just before the calls, so they cannot be merged, and m1 is taken.
    messages: list[ChatMessage] = [
        USER,
        assistant_text("m1", "first"),
        assistant_text("m2", "second"),
        batch(make_call("a", parent="m1")),
    ]
    out = to_agui_messages(messages)
    assert len(set(ids_of(out))) == len(out)
    assert ids_of(out)[:3] == ["u1", "m1", "m2"]
    assistant = out[3]
    assert isinstance(assistant, AssistantMessage)
    assert [tc.id for tc in assistant.tool_calls or ()] == ["a"]


def test_a_parent_id_reused_by_a_later_batch_does_not_duplicate_its_id() -> None:
    messages: list[ChatMessage] = [
        assistant_text("m1", "let me see"),
        batch(make_call("a", parent="m1"), id="b1"),
        batch(make_call("b", parent="m1"), id="b2"),  # the next run's calls, same parent
    ]
    out = to_agui_messages(messages)
    assert len(set(ids_of(out))) == len(out)
    assert [type(m).__name__ for m in out] == [
        "AssistantMessage",
        "ToolMessage",
        "AssistantMessage",
        "ToolMessage",
    ]


def test_a_parent_id_equal_to_a_supplied_message_id_is_not_reused() -> None:
    out = to_agui_messages([USER, batch(make_call("a", parent="u1"))])
    assert len(set(ids_of(out))) == len(out)
    assert out[0] is USER


def test_a_text_id_reused_by_the_agent_is_renamed_not_duplicated() -> None:
    out = to_agui_messages([USER, assistant_text("m1", "one"), assistant_text("m1", "two")])
    assert ids_of(out) == ["u1", "m1", "m1-2"]


def test_a_generated_name_never_takes_a_later_supplied_id() -> None:
    later = UserMessage(id="m1-2", content="supplied later")
    out = to_agui_messages([assistant_text("m1", "a"), assistant_text("m1", "b"), later])
    assert ids_of(out) == ["m1", "m1-3", "m1-2"]
    assert out[2] is later


def test_an_agent_reusing_one_id_for_every_message_gets_distinct_ids() -> None:
    out = to_agui_messages([assistant_text("msg", str(i)) for i in range(500)])
    assert ids_of(out) == ["msg", *(f"msg-{n}" for n in range(2, 501))]


def test_a_result_message_id_already_taken_is_renamed() -> None:
    out = to_agui_messages([USER, batch(make_call("a"), result_ids=["u1"])])
    assert len(set(ids_of(out))) == len(out)
    assert out[0] is USER


def test_a_renamed_text_still_merges_with_the_calls_that_name_it() -> None:
    messages: list[ChatMessage] = [
        assistant_text("m1", "one"),
        assistant_text("m1", "two"),
        batch(make_call("a", parent="m1")),
    ]
    out = to_agui_messages(messages)
    assert ids_of(out) == ["m1", "m1-2", "tool-a"]
    merged = out[1]
    assert isinstance(merged, AssistantMessage)
    assert merged.content == "two"
    assert [tc.id for tc in merged.tool_calls or ()] == ["a"]


_POOL = ["m1", "m2", "u1", "x"]


@st.composite
def conversations(draw: st.DrawFn) -> list[ChatMessage]:
    """Conversations whose ids are drawn from a tiny pool, so that they collide."""
    out: list[ChatMessage] = []
    counter = itertools.count()
    for kind in draw(st.lists(st.sampled_from(["user", "text", "batch", "reasoning"]), max_size=8)):
        pick = st.sampled_from(_POOL)
        if kind == "user":
            out.append(UserMessage(id=draw(pick), content="q"))
        elif kind == "text":
            out.append(assistant_text(draw(pick), "t"))
        elif kind == "reasoning":
            out.append(ReasoningRecord(draw(pick)))
        elif kind == "batch":
            n = draw(st.integers(1, 3))
            calls = tuple(
                make_call(
                    f"c{next(counter)}",
                    parent=draw(st.none() | pick),
                    status=draw(st.sampled_from([ToolCallStatus.completed, ToolCallStatus.failed])),
                )
                for _ in range(n)
            )
            # Where the agent's calls go back: before a message of the run (an id of
            # the pool, maybe none of the run's), the batch's own id, or with it.
            before = draw(st.just(()) | st.tuples(*(st.none() | pick for _ in calls)))
            out.append(
                ToolCallBatch(
                    id=draw(pick),
                    calls=calls,
                    result_message_ids=tuple(draw(pick) for _ in calls),
                    before=before,
                )
            )
    # Supplied messages are passed through unchanged: keep their own ids distinct.
    seen: set[str] = set()
    unique: list[ChatMessage] = []
    for m in out:
        if isinstance(m, UserMessage):
            if m.id in seen:
                continue
            seen.add(m.id)
        unique.append(m)
    return unique


@given(conversations(), st.booleans())
def test_no_two_mapped_messages_ever_share_an_id(
    messages: list[ChatMessage], reasoning: bool
) -> None:
    out = to_agui_messages(messages, include_reasoning=reasoning)
    assert len(set(ids_of(out))) == len(out)
    # Every tool message follows the assistant message that carries its call, at once:
    # an assistant message's calls are answered by the messages right after it, in
    # their order (what OpenAI-shaped APIs require of a history).
    announced: set[str] = set()
    for index, m in enumerate(out):
        if isinstance(m, AssistantMessage):
            announced.update(tc.id for tc in m.tool_calls or ())
            asked = [tc.id for tc in m.tool_calls or ()]
            answers = out[index + 1 : index + 1 + len(asked)]
            assert [a.tool_call_id for a in answers if isinstance(a, ToolMessage)] == asked
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id in announced
    # Each sent call is sent once.
    sent = [tc.id for m in out if isinstance(m, AssistantMessage) for tc in m.tool_calls or ()]
    assert len(sent) == len(set(sent))


# --- the incremental mapper -------------------------------------------------------------


@st.composite
def growth(draw: st.DrawFn) -> list[tuple[str, int]]:
    """Steps applied to a conversation between mappings: append what the next
    generated conversation holds, finish or grow a streaming text, cut, replace."""
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["append", "append", "append", "stream", "grow", "cut", "swap"]),
                st.integers(0, 7),
            ),
            max_size=12,
        )
    )


@given(st.lists(conversations(), min_size=1, max_size=6), growth(), st.booleans())
def test_the_incremental_mapper_always_equals_a_full_mapping(
    parts: list[list[ChatMessage]], steps: list[tuple[str, int]], reasoning: bool
) -> None:
    """Whatever happens to the list between two runs, the mapper that maps only what
    is new answers exactly what mapping everything from scratch answers."""
    mapper = ConversationMapper(include_reasoning=reasoning)
    messages: list[ChatMessage] = []
    pending = [m for part in parts for m in part]
    streaming: TextMessage | None = None
    for action, n in steps:
        if action == "append" and pending:
            messages.extend(pending[: n + 1])
            del pending[: n + 1]
        elif action == "stream":
            streaming = TextMessage(_POOL[n % len(_POOL)], "assistant", "par", complete=False)
            messages.append(streaming)
        elif action == "grow" and streaming is not None:
            streaming.append("tial")
            if n % 2:
                streaming.complete = True
                streaming = None
        elif action == "cut" and messages:
            del messages[n % len(messages) :]
        elif action == "swap" and messages:
            messages[n % len(messages)] = UserMessage(id=f"swapped-{n}", content="edited")
        assert mapper.map(messages) == to_agui_messages(messages, include_reasoning=reasoning)
    assert mapper.map(messages) == to_agui_messages(messages, include_reasoning=reasoning)


def test_a_supplied_id_taking_a_name_already_sent_makes_the_mapper_start_over() -> None:
    # "m1-2" was the name the second text went out under; once a supplied message
    # claims it, a full mapping renames that text, and so must the mapper.
    mapper = ConversationMapper()
    messages: list[ChatMessage] = [assistant_text("m1", "one"), assistant_text("m1", "two")]
    assert ids_of(mapper.map(messages)) == ["m1", "m1-2"]
    messages.append(UserMessage(id="m1-2", content="mine"))
    assert ids_of(mapper.map(messages)) == ["m1", "m1-3", "m1-2"]


def test_the_mapper_maps_each_settled_message_once() -> None:
    mapper = ConversationMapper()
    first = assistant_text("m1", "one")
    messages: list[ChatMessage] = [USER, first]
    out = mapper.map(messages)
    messages.append(assistant_text("m2", "two"))
    again = mapper.map(messages)
    # The first mapping's objects are reused, not rebuilt.
    assert again[1] is out[1]
    assert again is not out and len(again) == 3
    # A caller changing the list it got changes nothing the next call answers.
    again.clear()
    assert ids_of(mapper.map(messages)) == ["u1", "m1", "m2"]


def test_what_the_mapper_keeps_of_its_output_is_not_walked_by_the_collector() -> None:
    # AG-UI messages are not tracked by the cycle collector, so the tuple of them the
    # mapper keeps between runs is not either (a young collection untracks it).
    mapper = ConversationMapper()
    messages: list[ChatMessage] = [USER, assistant_text("m1", "one")]
    mapper.map(messages)
    gc.collect()
    assert not gc.is_tracked(mapper._out)


def test_an_id_clash_in_one_mapping_reaches_no_other_mapping() -> None:
    # The suffixes given per id start as the shared empty dict.
    clashing = ConversationMapper()
    assert ids_of(clashing.map([assistant_text("m", "a"), assistant_text("m", "b")])) == [
        "m",
        "m-2",
    ]
    fresh = ConversationMapper()
    assert ids_of(fresh.map([assistant_text("m", "c")])) == ["m"]
    assert NO_KEYS == {}


def test_a_processor_maps_a_long_thread_once_across_turns() -> None:
    conversation = Conversation("t", [USER])
    for turn in range(3):
        processor = EventProcessor(conversation)
        sent = processor.start_run(f"run-{turn}")
        assert sent.messages == to_agui_messages(conversation.messages)
        for event in [
            run_started("t", f"run-{turn}"),
            *text(f"answer {turn}", id=f"m{turn}"),
            run_finished("t", f"run-{turn}"),
        ]:
            processor.receive(event)
        conversation.append(UserMessage(id=f"u{turn + 2}", content="more"))
    mapped = conversation_to_agui(conversation)
    assert mapped == to_agui_messages(conversation.messages)
    assert mapped[1] is conversation_to_agui(conversation)[1]


# --- everything else ------------------------------------------------------------------------------


def test_reasoning_is_left_out_by_default_and_sent_on_request() -> None:
    record = ReasoningRecord("r1")
    record.append("thinking...")
    messages: list[ChatMessage] = [USER, record, assistant_text("m1", "answer")]
    assert ids_of(to_agui_messages(messages)) == ["u1", "m1"]
    out = to_agui_messages(messages, include_reasoning=True)
    assert out[1] == ReasoningMessage(id="r1", content="thinking...")


def test_a_conversation_mapped_the_other_way_is_mapped_afresh() -> None:
    # The conversation keeps one mapper: asked with the other include_reasoning, it
    # maps the thread again that way, never from what the first way kept.
    record = ReasoningRecord("r1")
    record.append("thinking...")
    conversation = Conversation("t", [USER, record, assistant_text("m1", "answer")])
    for include_reasoning in (False, True, True, False):
        mapped = conversation_to_agui(conversation, include_reasoning=include_reasoning)
        full = to_agui_messages(conversation.messages, include_reasoning=include_reasoning)
        assert mapped == full
    assert ids_of(conversation_to_agui(conversation, include_reasoning=True)) == ["u1", "r1", "m1"]


def test_supplied_agui_messages_pass_through_unchanged() -> None:
    supplied: list[Message] = [
        SystemMessage(id="s", content="be brief"),
        DeveloperMessage(id="d", content="dev"),
        USER,
        AssistantMessage(
            id="a0",
            tool_calls=[ToolCall(id="old", function=FunctionCall(name="f", arguments="{}"))],
        ),
        ToolMessage(id="t0", tool_call_id="old", content="1"),
    ]
    out = to_agui_messages(supplied)
    assert len(out) == len(supplied)
    assert all(o is s for o, s in zip(out, supplied, strict=True))


@pytest.mark.parametrize(
    ("role", "kind"),
    [
        ("assistant", AssistantMessage),
        ("user", UserMessage),
        ("system", SystemMessage),
        ("developer", DeveloperMessage),
        ("unexpected", AssistantMessage),
    ],
)
def test_streamed_text_becomes_a_message_of_its_role(role: str, kind: type[Message]) -> None:
    [out] = to_agui_messages([TextMessage("m1", role, "words")])
    assert isinstance(out, kind)
    assert out.id == "m1"
    assert getattr(out, "content", None) == "words"


def test_an_interrupted_text_is_still_sent() -> None:
    message = TextMessage("m1", "assistant", "cut sh")
    message.interrupted = True
    assert to_agui_messages([message]) == [AssistantMessage(id="m1", content="cut sh")]


def test_mapping_does_not_change_the_conversation() -> None:
    messages: list[ChatMessage] = [
        USER,
        assistant_text("m1", "x"),
        batch(make_call("a", parent="m1")),
    ]
    before = list(messages)
    to_agui_messages(messages)
    to_agui_messages(messages)
    assert messages == before


def test_mapping_accepts_any_iterable() -> None:
    assert to_agui_messages(iter([USER])) == [USER]


# --- a real peer: the official AG-UI SDK ---------------------------------------------


def _story_processor() -> EventProcessor:
    counter = itertools.count(1)
    conversation = Conversation(
        "thread-1",
        [
            SystemMessage(id="sys", content="You are helpful."),
            UserMessage(id="u1", content="Secret numbers?"),
        ],
        state={"visits": 1},
    )
    processor = EventProcessor(
        conversation,
        tools=[
            Tool(
                name="get_secret_number",
                description="The secret number of a person",
                parameters={"type": "object", "properties": {"name": {"type": "string"}}},
            ),
            Tool(name="now", description="The time"),
        ],
        context=[Context(description="tz", value="UTC")],
        forwarded_props={"mode": "test"},
        id_factory=lambda: f"gen-{next(counter)}",
    )
    processor.start_run("run-1")
    for event in [
        run_started("thread-1", "srv-1"),
        *text("Let me look.", id="m1"),
        *tool_call("get_secret_number", {"name": "alice"}, id="a", parent_message_id="m1", chunk=3),
        *tool_call("now", None, id="b", parent_message_id="m1"),
        run_finished("thread-1", "srv-1"),
    ]:
        processor.receive(event)
    for call in processor.tool_calls:
        result = ToolResult.success("42") if call.id == "a" else ToolResult.failure("clock broken")
        processor.record_result(call, result)
    return processor


def test_the_official_sdk_accepts_a_first_run_input() -> None:
    processor = EventProcessor(Conversation("thread-1", [USER]))
    payload = encode(processor.start_run("run-1"))
    parsed = SdkRunAgentInput.model_validate_json(payload)
    assert parsed.thread_id == "thread-1"
    assert parsed.parent_run_id is None
    assert b"parentRunId" not in payload


def test_the_official_sdk_accepts_a_continuation_with_results_and_reads_them_back() -> None:
    processor = _story_processor()
    payload = encode(processor.start_run("run-2"))
    parsed = SdkRunAgentInput.model_validate_json(payload)
    assert parsed.parent_run_id == "srv-1"
    assert [m.role for m in parsed.messages] == ["system", "user", "assistant", "tool", "tool"]
    assistant = parsed.messages[2]
    assert isinstance(assistant, SdkAssistantMessage)
    assert assistant.id == "m1"
    assert assistant.content == "Let me look."
    assert [
        (tc.id, tc.function.name, tc.function.arguments) for tc in assistant.tool_calls or []
    ] == [
        ("a", "get_secret_number", '{"name":"alice"}'),
        ("b", "now", "{}"),
    ]
    tools = [m for m in parsed.messages if isinstance(m, SdkToolMessage)]
    assert [(t.tool_call_id, t.content, t.error) for t in tools] == [
        ("a", "42", None),
        ("b", '{"error":"clock broken"}', "clock broken"),
    ]
    assert len({m.id for m in parsed.messages}) == len(parsed.messages)
    assert parsed.state == {"visits": 1}
    assert [t.name for t in parsed.tools or []] == ["get_secret_number", "now"]
    assert [(c.description, c.value) for c in parsed.context or []] == [("tz", "UTC")]
    assert parsed.forwarded_props == {"mode": "test"}


@given(conversations(), st.booleans())
def test_the_official_sdk_accepts_any_mapped_conversation(
    messages: list[ChatMessage], reasoning: bool
) -> None:
    from toolrelay.protocol import RunAgentInput

    run_input = RunAgentInput(
        thread_id="t", run_id="r", messages=to_agui_messages(messages, include_reasoning=reasoning)
    )
    parsed = SdkRunAgentInput.model_validate_json(encode(run_input))
    assert [m.id for m in parsed.messages] == ids_of(run_input.messages)
    wire: Any = json.loads(encode(run_input))
    assert all(m.get("toolCalls") is None or m["role"] == "assistant" for m in wire["messages"])


def test_a_text_still_streaming_is_mapped_in_full_and_not_kept() -> None:
    mapper = ConversationMapper()
    open_text = TextMessage("m1", text="so far", complete=False)
    messages: list[ChatMessage] = [USER, open_text]
    assert mapper.map(messages) == to_agui_messages(messages)
    open_text.append(" and more")
    open_text.complete = True
    # Nothing of the open text was kept: the next mapping sees its whole text.
    assert mapper.map(messages) == to_agui_messages(messages)
    assert [getattr(m, "content", None) for m in mapper.map(messages)] == ["hi", "so far and more"]
