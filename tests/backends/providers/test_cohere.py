"""The Cohere adapter: its translator on published v2 chat stream events, the same streams
through the backend (real httpx + httpx-sse over MockTransport; re-chunked by
Hypothesis in ``test_providers_engine.py``), the requests it builds and refuses, and
the engine against a loopback Cohere."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from toolrelay import ConversationError, InvalidEventError, MalformedEventError
from toolrelay.backends.providers._base import Capabilities
from toolrelay.backends.providers._cohere import CohereBackend, CohereTranslator
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    AssistantMessage,
    AudioPart,
    DataSource,
    DeveloperMessage,
    FunctionCall,
    ImagePart,
    Message,
    ReasoningMessageContentEvent,
    RunFinishedEvent,
    SystemMessage,
    TextMessageEndEvent,
    TextPart,
    ToolCall,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)

sys.path.insert(0, str(Path(__file__).parent))
from _gc_servers import (
    SSE,
    cohere_sse,
    collect,
    mock_backend_transport,
    run_input,
    summarize,
    translate,
)
from _wire_cohere import (
    ERROR_MID_STREAM,
    INTERLEAVED_PIECES,
    MODEL,
    ONE_CALL,
    PARALLEL_CALLS,
    TEXT_BEFORE_CALLS,
    TEXT_ONLY,
    ZERO_ARG_CALLS,
    call_delta,
    call_end,
    call_start,
    content_delta,
    content_end,
    content_start,
    message_end,
    message_start,
    one_call,
)


def ids(prefix: str) -> Any:
    numbers = iter(range(1, 1000))
    return lambda: f"{prefix}{next(numbers)}"


def translator() -> CohereTranslator:
    return CohereTranslator(message_ids=ids("msg_"))


# --- published stream events (v2 chat, stream: true) ---------------------------------------


# --- the translator -------------------------------------------------------------------


def test_text_only_streams_one_message_and_finishes_end_turn() -> None:
    events = translate(translator(), TEXT_ONLY)
    summary = summarize(events)
    assert summary.text == "The sky is blue."
    assert summary.finished == {"stopReason": "end_turn", "providerStopReason": "COMPLETE"}
    assert [type(e).__name__ for e in events] == [
        "TextMessageStartEvent",
        "TextMessageContentEvent",
        "TextMessageContentEvent",
        "TextMessageEndEvent",
        "RunFinishedEvent",
    ]
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.usage is not None
    (usage,) = finished.usage
    assert (usage.provider, usage.input_tokens, usage.output_tokens) == ("cohere", 1187, 71)


def test_one_call_ends_with_its_whole_arguments_at_tool_call_end() -> None:
    events = translate(translator(), ONE_CALL)
    assert [type(e).__name__ for e in events] == [
        "ToolCallStartEvent",
        "ToolCallArgsEvent",
        "ToolCallEndEvent",
        "RunFinishedEvent",
    ]
    summary = summarize(events)
    assert [(c.id, c.name, c.arguments, c.ended) for c in summary.calls] == [
        ("get_weather_1byjy32y4hvq", "get_weather", '{"location":"Madrid"}', True)
    ]
    assert summary.finished == {"stopReason": "tool_use", "providerStopReason": "TOOL_CALL"}


def test_the_start_is_said_as_soon_as_cohere_says_it() -> None:
    t = translator()
    events = t.feed(call_start(0, "get_weather_x", "get_weather"))
    assert [type(e).__name__ for e in events] == ["ToolCallStartEvent"]
    assert t.feed(call_delta(0, '{"location":"Oslo"}')) == []


def test_parallel_calls_keep_their_ids() -> None:
    summary = summarize(translate(translator(), PARALLEL_CALLS))
    assert [(c.id, c.arguments) for c in summary.calls] == [
        ("get_secret_number_a", '{"name":"alice"}'),
        ("get_secret_number_b", '{"name":"bob"}'),
    ]


def test_null_or_missing_arguments_become_an_empty_object() -> None:
    summary = summarize(translate(translator(), ZERO_ARG_CALLS))
    assert [(c.name, c.arguments, c.ended) for c in summary.calls] == [
        ("list_people", "{}", True),
        ("list_people", "{}", True),
        ("list_people", "{}", True),
    ]


def test_interleaved_argument_pieces_go_to_their_own_calls() -> None:
    summary = summarize(translate(translator(), INTERLEAVED_PIECES))
    assert [(c.id, c.arguments, c.ended) for c in summary.calls] == [
        ("get_weather_m", '{"location":"Madrid"}', True),
        ("get_weather_b", '{"location":"Brasilia"}', True),
    ]


def test_the_tool_plan_is_text_closed_before_the_calls_and_their_parent() -> None:
    events = translate(translator(), TEXT_BEFORE_CALLS)
    summary = summarize(events)
    assert summary.text == "I will look up both secret numbers."
    assert [c.parent for c in summary.calls] == ["msg_1", "msg_1"]
    end = next(i for i, e in enumerate(events) if isinstance(e, TextMessageEndEvent))
    first_call = next(i for i, e in enumerate(events) if isinstance(e, ToolCallStartEvent))
    assert end < first_call


def test_an_error_finish_mid_stream_is_a_run_error() -> None:
    events = translate(translator(), ERROR_MID_STREAM)
    summary = summarize(events)
    assert summary.text == "Let me"
    assert summary.error == (
        "internal server error, this has been reported to our developers",
        "error",
    )
    assert summary.finished is None
    assert [type(e).__name__ for e in events][-2:] == ["TextMessageEndEvent", "RunErrorEvent"]


def test_an_error_type_is_the_run_error_code() -> None:
    stream = [
        message_start(),
        message_end("ERROR", error="invalid tool generation", error_type="INVALID_TOOL_GENERATION"),
    ]
    summary = summarize(translate(translator(), stream))
    assert summary.error == ("invalid tool generation", "INVALID_TOOL_GENERATION")


@pytest.mark.parametrize(
    ("reason", "stop_reason"),
    [
        ("MAX_TOKENS", "max_tokens"),
        ("STOP_SEQUENCE", "stop_sequence"),
        ("ERROR_TOXIC", "content_filter"),
        ("SOMETHING_NEW", "other"),
    ],
)
def test_finish_reasons_complete_the_run_with_a_stop_reason(reason: str, stop_reason: str) -> None:
    summary = summarize(translate(translator(), [message_end(reason)]))
    assert summary.finished == {"stopReason": stop_reason, "providerStopReason": reason}


@pytest.mark.parametrize("reason", ["ERROR_LIMIT", "TIMEOUT"])
def test_failing_finish_reasons_are_run_errors(reason: str) -> None:
    summary = summarize(translate(translator(), [message_end(reason)]))
    assert summary.error == (f"Cohere stopped: {reason}", reason.lower())


def test_a_call_cohere_never_ended_is_not_ended_here() -> None:
    stream = [
        message_start(),
        call_start(0, "f_1", "f"),
        call_delta(0, '{"a":'),
        message_end("MAX_TOKENS"),
    ]
    summary = summarize(translate(translator(), stream))
    assert [(c.id, c.ended) for c in summary.calls] == [("f_1", False)]
    assert summary.finished == {"stopReason": "max_tokens", "providerStopReason": "MAX_TOKENS"}


def test_double_encoded_arguments_are_unwrapped_and_broken_ones_passed_on() -> None:
    stream = [
        *one_call(0, "a_1", "a", '"{\\"x\\": 1}"'),
        *one_call(1, "b_1", "b", '{"x": 1'),
        *one_call(2, "c_1", "c", '"just words"'),
        message_end("TOOL_CALL"),
    ]
    calls = summarize(translate(translator(), stream)).calls
    assert [c.arguments for c in calls] == ['{"x": 1}', '{"x": 1', '"just words"']


def test_thinking_content_is_reasoning_not_text() -> None:
    stream = [
        message_start(),
        content_start("thinking"),
        content_delta("Need both numbers.", "thinking"),
        content_end(),
        content_start(),
        content_delta("Done."),
        content_end(),
        message_end("COMPLETE"),
    ]
    events = translate(translator(), stream)
    reasoning = [e.delta for e in events if isinstance(e, ReasoningMessageContentEvent)]
    assert reasoning == ["Need both numbers."]
    assert summarize(events).text == "Done."


def test_the_sse_event_name_is_used_when_the_type_is_missing() -> None:
    t = translator()
    events = t.feed(
        {"index": 0, "delta": {"message": {"content": {"text": "hi"}}}}, "content-delta"
    )
    assert summarize(events).text == "hi"


def test_unknown_events_are_ignored_and_an_error_object_fails_the_run() -> None:
    assert translator().feed({"type": "citation-start", "index": 0}) == []
    summary = summarize(translator().feed({"message": "invalid request: model not found"}))
    assert summary.error == ("invalid request: model not found", "cohere_error")


def test_events_after_the_end_are_ignored() -> None:
    t = translator()
    t.feed(message_end("COMPLETE"))
    assert t.ended
    assert t.feed(content_delta("late")) == []
    assert t.finish() == []


def test_events_that_break_the_format_are_refused() -> None:
    with pytest.raises(MalformedEventError):
        translator().feed(["tool-call-start"])
    with pytest.raises(InvalidEventError, match="no open tool call 3"):
        translator().feed(call_delta(3, "{}"))
    with pytest.raises(InvalidEventError, match="no open tool call 0"):
        translator().feed(call_end(0))
    nameless = call_start(0, "x", "")
    with pytest.raises(InvalidEventError, match="no name"):
        translator().feed(nameless)
    with pytest.raises(InvalidEventError, match="content-delta"):
        translator().feed({"type": "content-delta", "delta": {"message": {"content": 5}}})


# --- through the backend: real httpx and httpx-sse ----------------------------------------


def sse_bytes(events: list[dict[str, Any]]) -> bytes:
    return b"".join(cohere_sse(e) for e in events)


def backend_for(pieces: list[bytes], requests: list[httpx.Request] | None = None) -> CohereBackend:
    return CohereBackend(
        MODEL, api_key="test-key", transport=mock_backend_transport(pieces, SSE, requests)
    )


# --- requests -----------------------------------------------------------------------------


def test_the_conversation_becomes_cohere_messages() -> None:
    messages: list[Message] = [
        SystemMessage(id="s1", content="You are terse."),
        DeveloperMessage(id="d1", content="Use tools."),
        UserMessage(
            id="u1",
            content=[
                TextPart(text="What is this?"),
                ImagePart(source=DataSource(value="aGk=", mime_type="image/png")),
                ImagePart(source=UrlSource(value="https://x.test/cat.png")),
            ],
        ),
        AssistantMessage(id="a0", content="I will look."),
        AssistantMessage(
            id="a1",
            tool_calls=[
                ToolCall(
                    id="gsn_1",
                    function=FunctionCall(name="get_secret_number", arguments='{"name":"alice"}'),
                ),
                ToolCall(id="lp_1", function=FunctionCall(name="list_people", arguments="")),
            ],
        ),
        ToolMessage(id="t1", tool_call_id="gsn_1", content="42"),
        ToolMessage(
            id="t2", tool_call_id="lp_1", content=[TextPart(text='{"error":"boom"}')], error="boom"
        ),
        AssistantMessage(id="a2", content="Alice has 42."),
        AssistantMessage(id="a3", content="Bye."),
        AssistantMessage(id="a4"),  # empty: left out
    ]
    body = CohereBackend(MODEL, api_key="k", options={"temperature": 0.3}).build_request(
        run_input(messages, DEMO_TOOLS.definitions())
    )
    assert (body["model"], body["stream"], body["temperature"]) == (MODEL, True, 0.3)
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "system", "content": "Use tools."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
                {"type": "image_url", "image_url": {"url": "https://x.test/cat.png"}},
            ],
        },
        {
            "role": "assistant",
            "tool_plan": "I will look.",
            "tool_calls": [
                {
                    "id": "gsn_1",
                    "type": "function",
                    "function": {"name": "get_secret_number", "arguments": '{"name":"alice"}'},
                },
                {
                    "id": "lp_1",
                    "type": "function",
                    "function": {"name": "list_people", "arguments": "{}"},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "gsn_1",
            "content": [{"type": "document", "document": {"data": "42"}}],
        },
        {
            "role": "tool",
            "tool_call_id": "lp_1",
            "content": [{"type": "document", "document": {"data": '{"error":"boom"}'}}],
        },
        {"role": "assistant", "content": "Alice has 42.\n\nBye."},
    ]
    tools = {t["function"]["name"]: t for t in body["tools"]}
    assert set(tools) == set(DEMO_TOOLS.names)
    assert tools["lookup_city"]["type"] == "function"
    assert tools["lookup_city"]["function"]["parameters"]["required"] == ["person"]


def calls_message(*call_ids: str) -> AssistantMessage:
    return AssistantMessage(
        id="a1",
        tool_calls=[
            ToolCall(id=call_id, function=FunctionCall(name="list_people", arguments="{}"))
            for call_id in call_ids
        ],
    )


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        (
            [
                UserMessage(id="u1", content="Go"),
                ToolMessage(id="t", tool_call_id="c9", content="1"),
            ],
            "does not follow the assistant message",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                calls_message("c1", "c2"),
                ToolMessage(id="t1", tool_call_id="c1", content="1"),
                UserMessage(id="u2", content="And?"),
            ],
            r"list_people \(c2\) got no tool result",
        ),
        (
            [UserMessage(id="u1", content="Go"), calls_message("c1")],
            "got no tool result",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                calls_message("c1"),
                ToolMessage(id="t1", tool_call_id="c1", content="1"),
                ToolMessage(id="t2", tool_call_id="c1", content="1"),
            ],
            "answers it twice",
        ),
        (
            [
                UserMessage(
                    id="u1",
                    content=[AudioPart(source=UrlSource(value="https://x.test/a.wav"))],
                )
            ],
            "text and images",
        ),
    ],
)
def test_conversations_cohere_refuses_are_refused_before_sending(
    messages: list[Message], match: str
) -> None:
    with pytest.raises(ConversationError, match=match):
        CohereBackend(MODEL, api_key="k").build_request(run_input(messages))


@pytest.mark.anyio
async def test_refusals_happen_before_any_network_call() -> None:
    requests: list[httpx.Request] = []

    class NoStreaming(CohereBackend):
        capabilities = Capabilities(streaming=False, tools=True, tool_ids=True, parallel_calls=True)

    quiet = NoStreaming(MODEL, api_key="k", transport=mock_backend_transport([b""], SSE, requests))
    with pytest.raises(ConversationError, match="cannot stream"):
        await collect(quiet, run_input())
    plain = backend_for([b""], requests)
    with pytest.raises(ConversationError, match="got no tool result"):
        await collect(plain, run_input([UserMessage(id="u1", content="Go"), calls_message("c1")]))
    await quiet.aclose()
    await plain.aclose()
    assert requests == []


def test_capabilities_follow_the_matrix() -> None:
    caps = CohereBackend.capabilities
    assert (caps.streaming, caps.tools, caps.tool_ids, caps.parallel_calls) == (
        True,
        True,
        True,
        True,
    )


# --- end to end: the engine against a loopback Cohere -----------------------------------------
