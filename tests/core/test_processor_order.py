"""The continuation keeps the stream's order: the calls an agent ran itself go back
where it made them, the client's calls last; and a call the agent ran but gave no
result for is not executed here.

Each stream below is the shape a real AG-UI server sent (CrewAI, AG2, Mastra,
pydantic-ai: see docs/quirks.md), replayed through the processor. What a stateless
server shows its model is the history the client sends back, so the order is what the
model believes it did.
"""

from __future__ import annotations

import itertools
from typing import Any

from toolrelay import RunStatus, ToolCallStatus, ToolResult
from toolrelay._core._conversation import AgentResult, Conversation, ToolCallBatch
from toolrelay._core._effects import ToolsReady, TurnCompleted, ViolationRaised
from toolrelay._core._mapper import conversation_to_agui, to_agui_messages
from toolrelay._core._processor import EventProcessor
from toolrelay.protocol import (
    AssistantMessage,
    Message,
    ReasoningMessageContentEvent,
    TextMessageContentEvent,
    Tool,
    ToolCallChunkEvent,
    ToolMessage,
    UserMessage,
)
from toolrelay.store._records import (
    call_from_record,
    call_to_record,
    message_from_record,
    message_to_record,
)
from toolrelay.testing import run_finished, run_started, server_tool_call, text, tool_call

THREAD = "thread-order"
USER = UserMessage(id="user-1", content="Roll a die, then tell me Alice's number.")
SECRET = Tool(name="get_secret_number", description="A person's number.", parameters={})


def running(**kwargs: Any) -> EventProcessor:
    counter = itertools.count(1)
    processor = EventProcessor(
        Conversation(THREAD, [USER]),
        tools=[SECRET],
        id_factory=lambda: f"gen-{next(counter)}",
        **kwargs,
    )
    processor.start_run("run-1")
    processor.receive(run_started(THREAD, "server-run-1"))
    return processor


def feed(processor: EventProcessor, *parts: list[Any]) -> list[Any]:
    effects: list[Any] = []
    for part in parts:
        for event in part:
            effects.extend(processor.receive(event))
    return effects


def finish(processor: EventProcessor) -> list[Any]:
    return list(processor.receive(run_finished(THREAD, "server-run-1")))


def answer(processor: EventProcessor, effects: list[Any]) -> list[Message]:
    """Run the client's calls (their result: their id), then the next run's messages."""
    (ready,) = [e for e in effects if isinstance(e, ToolsReady)]
    for call in ready.calls:
        processor.record_result(call, ToolResult.success(f"result of {call.id}"))
    return list(processor.start_run("run-2").messages)


def shape(messages: list[Message]) -> list[tuple[str, object]]:
    """Each message as (its id, its calls' ids) for an assistant message with calls,
    (its id, its text) for one without, (its id, the call it answers) for a result."""
    out: list[tuple[str, object]] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            calls = [tc.id for tc in m.tool_calls or ()]
            out.append((m.id, calls if calls else m.content))
        elif isinstance(m, ToolMessage):
            out.append((m.id, m.tool_call_id))
        else:
            out.append((m.id, type(m).__name__))
    return out


def test_calls_of_two_assistant_messages_go_back_as_two_with_the_agents_result_between() -> None:
    # CrewAI: the model called the server's roll_die (message P1), got its result, then
    # called the client's get_secret_number (message P2). Merged into one message, the
    # model would be told it asked for both at once, before it saw the die.
    processor = running()
    effects = feed(
        processor,
        server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1", parent_message_id="P1"),
        tool_call("get_secret_number", {"name": "alice"}, id="c1", parent_message_id="P2"),
    )
    effects += finish(processor)
    assert shape(answer(processor, effects)) == [
        ("user-1", "UserMessage"),
        ("P1", ["s1"]),
        ("r-s1", "s1"),
        ("P2", ["c1"]),
        ("gen-1", "c1"),
    ]


def test_calls_that_name_no_message_are_each_a_message_of_their_own() -> None:
    # AG2 names no parent: the server's call, its result, then the client's call (as
    # TOOL_CALL_CHUNK) go back as two messages, as the official client builds them.
    processor = running()
    effects = feed(
        processor,
        server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1"),
        [ToolCallChunkEvent(tool_call_id="c1", tool_call_name="get_secret_number", delta="{}")],
    )
    effects += finish(processor)
    assert shape(answer(processor, effects)) == [
        ("user-1", "UserMessage"),
        ("gen-2", ["s1"]),
        ("r-s1", "s1"),
        ("gen-2-2", ["c1"]),
        ("gen-1", "c1"),
    ]


def test_an_agents_call_goes_back_before_the_text_that_followed_it() -> None:
    # AG2: a server tool, its result, then the answer. The next turn's history must end
    # on the answer, not on the tool's result with the answer moved before the call.
    processor = running()
    effects = feed(
        processor,
        server_tool_call(
            "explode", "{}", "boom", id="s1", message_id="r-s1", parent_message_id="P1"
        ),
        text("The server tool said: boom.", id="T"),
    )
    effects += finish(processor)
    assert [e for e in effects if isinstance(e, TurnCompleted)]
    assert shape(conversation_to_agui(processor.conversation)) == [
        ("user-1", "UserMessage"),
        ("P1", ["s1"]),
        ("r-s1", "s1"),
        ("T", "The server tool said: boom."),
    ]


def test_the_agents_calls_of_one_message_go_back_as_one_then_their_results() -> None:
    processor = running()
    effects = feed(
        processor,
        server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1", parent_message_id="P1"),
        server_tool_call("roll_die", "{}", "6", id="s2", message_id="r-s2", parent_message_id="P1"),
        text("4 and 6.", id="T"),
    )
    effects += finish(processor)
    assert [e for e in effects if isinstance(e, TurnCompleted)]
    assert shape(conversation_to_agui(processor.conversation)) == [
        ("user-1", "UserMessage"),
        ("P1", ["s1", "s2"]),
        ("r-s1", "s1"),
        ("r-s2", "s2"),
        ("T", "4 and 6."),
    ]


def test_each_call_joins_the_text_it_names_where_the_stream_had_it() -> None:
    # pydantic-ai: every response that calls tools opens with a text message, which the
    # calls name. The server's call and result, then the client's call after more text.
    processor = running()
    effects = feed(
        processor,
        text("", id="E"),
        server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1", parent_message_id="E"),
        text("You rolled 4. Now Alice.", id="T2"),
        tool_call("get_secret_number", {"name": "alice"}, id="c1", parent_message_id="T2"),
    )
    effects += finish(processor)
    sent = answer(processor, effects)
    assert shape(sent) == [
        ("user-1", "UserMessage"),
        ("E", ["s1"]),
        ("r-s1", "s1"),
        ("T2", ["c1"]),
        ("gen-1", "c1"),
    ]
    joined = sent[3]
    assert isinstance(joined, AssistantMessage) and joined.content == "You rolled 4. Now Alice."


def test_an_agents_call_in_the_message_of_a_client_call_stays_with_it() -> None:
    # Mastra names one message for both: the calls go back as that one message, both
    # results after it (a message's calls are answered right after it).
    processor = running()
    effects = feed(
        processor,
        server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1", parent_message_id="P"),
        text("Rolled.", id="T"),
        tool_call("get_secret_number", {"name": "alice"}, id="c1", parent_message_id="P"),
    )
    effects += finish(processor)
    assert shape(answer(processor, effects)) == [
        ("user-1", "UserMessage"),
        ("T", "Rolled."),
        ("P", ["s1", "c1"]),
        ("r-s1", "s1"),
        ("gen-1", "c1"),
    ]


def test_the_client_calls_go_last_whatever_came_after_them() -> None:
    # Text after a client call (rare): the call and its result stay the last messages,
    # as the official client sends them and as providers need (a call's result right
    # after it).
    processor = running()
    effects = feed(
        processor,
        tool_call("get_secret_number", {"name": "alice"}, id="c1", parent_message_id="P"),
        text("Let me look that up.", id="T"),
    )
    effects += finish(processor)
    assert shape(answer(processor, effects)) == [
        ("user-1", "UserMessage"),
        ("T", "Let me look that up."),
        ("P", ["c1"]),
        ("gen-1", "c1"),
    ]


def test_an_undeclared_call_the_agent_streamed_past_ran_on_its_side() -> None:
    # Mastra: a server tool that raised gets no result, and the agent answers anyway.
    # It is not a call for this client: not executed (no "Unknown tool" error, no extra
    # run), it goes back where it was made, with an error saying no result came.
    processor = running()
    effects = feed(
        processor,
        tool_call("explode", "{}", id="s1", parent_message_id="P1"),
        text("The server tool failed.", id="T"),
    )
    effects += finish(processor)
    assert not [e for e in effects if isinstance(e, ToolsReady)]
    assert [e for e in effects if isinstance(e, TurnCompleted)]
    assert [e.violation.code for e in effects if isinstance(e, ViolationRaised)] == [
        "agent_call_without_result"
    ]
    assert processor.status is RunStatus.completed
    sent = conversation_to_agui(processor.conversation)
    assert shape(sent) == [
        ("user-1", "UserMessage"),
        ("P1", ["s1"]),
        ("gen-1", "s1"),
        ("T", "The server tool failed."),
    ]
    result = sent[2]
    assert isinstance(result, ToolMessage) and result.error is not None
    assert "sent no result" in result.error


def test_a_call_the_agent_stopped_for_is_the_clients_to_run_even_if_undeclared() -> None:
    # Nothing after it: the agent waits for the client, which answers "Unknown tool"
    # (the runtime's answer) so the model can correct itself.
    processor = running()
    effects = feed(processor, text("Calling.", id="T"), tool_call("explode", "{}", id="x1"))
    effects += finish(processor)
    (ready,) = [e for e in effects if isinstance(e, ToolsReady)]
    assert [c.id for c in ready.calls] == ["x1"]


def test_content_for_a_message_never_started_is_no_sign_the_agent_went_on() -> None:
    # The text is kept (started implicitly, a violation), but a malformed delta does not
    # decide who runs the call: it stays the client's.
    processor = running()
    effects = feed(
        processor,
        tool_call("explode", "{}", id="x1"),
        [TextMessageContentEvent(message_id="stray", delta="noise")],
    )
    effects += finish(processor)
    (ready,) = [e for e in effects if isinstance(e, ToolsReady)]
    assert [c.id for c in ready.calls] == ["x1"]


def test_reasoning_after_an_undeclared_call_is_the_agent_going_on() -> None:
    processor = running()
    effects = feed(
        processor,
        tool_call("explode", "{}", id="s1"),
        [ReasoningMessageContentEvent(message_id="think", delta="It failed; answer anyway.")],
    )
    effects += finish(processor)
    assert not [e for e in effects if isinstance(e, ToolsReady)]
    assert processor.status is RunStatus.completed


def test_a_declared_call_with_text_after_it_is_run_here() -> None:
    processor = running()
    effects = feed(
        processor,
        tool_call("get_secret_number", {"name": "alice"}, id="c1"),
        text("Looking it up.", id="T"),
    )
    effects += finish(processor)
    (ready,) = [e for e in effects if isinstance(e, ToolsReady)]
    assert [c.status for c in ready.calls] == [ToolCallStatus.executing]


def test_the_order_survives_the_store_and_a_mapping_made_while_the_tools_ran() -> None:
    processor = running()
    effects = feed(
        processor,
        server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1", parent_message_id="P1"),
        text("Now Alice.", id="T"),
        tool_call("get_secret_number", {"name": "alice"}, id="c1", parent_message_id="P2"),
    )
    effects += finish(processor)
    # A view of the conversation while the client's tool runs: the text is mapped
    # (and kept by the incremental mapper) before the agent's call is placed before it.
    assert shape(conversation_to_agui(processor.conversation)) == [
        ("user-1", "UserMessage"),
        ("T", "Now Alice."),
    ]
    sent = answer(processor, effects)
    expected = [
        ("user-1", "UserMessage"),
        ("P1", ["s1"]),
        ("r-s1", "s1"),
        ("T", "Now Alice."),
        ("P2", ["c1"]),
        ("gen-1", "c1"),
    ]
    assert shape(sent) == expected
    reloaded = [
        message_from_record(message_to_record(m)) for m in processor.conversation.messages[1:]
    ]
    assert shape(to_agui_messages([USER, *reloaded])) == expected


def test_a_batch_restored_after_a_crash_is_committed_as_the_run_would_have() -> None:
    # What a store keeps when the run ends (its conversation, its calls, the agent's
    # results), put back in a new processor, as after a crash while the client's tool ran.
    processor = running()
    effects = feed(
        processor,
        server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1", parent_message_id="P1"),
        text("Now Alice.", id="T"),
        tool_call("get_secret_number", {"name": "alice"}, id="c1", parent_message_id="P2"),
    )
    effects += finish(processor)
    assert processor.agent_results == (AgentResult("s1", "r-s1", 1),)
    counter = itertools.count(1)
    restored = EventProcessor(
        Conversation(
            THREAD,
            [message_from_record(message_to_record(m)) for m in processor.conversation.messages],
        ),
        tools=[SECRET],
        id_factory=lambda: f"gen-{next(counter)}",
    )
    calls = [call_from_record(call_to_record(c)) for c in processor.tool_calls]
    resumed = list(
        restored.restore(
            run_id="run-1",
            depth=0,
            runs=1,
            calls=calls,
            agent_results=processor.agent_results,
        )
    )
    sent = answer(restored, resumed)
    assert shape(sent) == shape(answer(processor, effects))
    assert shape(sent) == [
        ("user-1", "UserMessage"),
        ("P1", ["s1"]),
        ("r-s1", "s1"),
        ("T", "Now Alice."),
        ("P2", ["c1"]),
        ("gen-1", "c1"),
    ]
    batch, again = restored.conversation.messages[-1], processor.conversation.messages[-1]
    assert isinstance(batch, ToolCallBatch) and isinstance(again, ToolCallBatch)
    assert (batch.id, batch.result_message_ids, batch.before) == (
        again.id,
        again.result_message_ids,
        again.before,
    )
    assert batch.before == ("T", None)
    assert processor.agent_results == restored.agent_results == ()  # committed
