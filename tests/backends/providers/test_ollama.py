"""The Ollama adapter: its translator on published ``/api/chat`` NDJSON shapes, the same
streams through the backend (real httpx line reading over MockTransport; re-chunked by
Hypothesis in ``test_providers_engine.py``), the requests it builds and refuses, and
the engine against a loopback Ollama."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from toolrelay import ConversationError, InvalidEventError, MalformedEventError
from toolrelay.backends.providers._base import Capabilities
from toolrelay.backends.providers._ollama import OllamaBackend, OllamaTranslator
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    AssistantMessage,
    AudioPart,
    DataSource,
    DeveloperMessage,
    FunctionCall,
    ImagePart,
    Message,
    ReasoningMessage,
    ReasoningMessageContentEvent,
    RunFinishedEvent,
    SystemMessage,
    TextMessageEndEvent,
    TextPart,
    ToolCall,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

sys.path.insert(0, str(Path(__file__).parent))
from _gc_servers import (
    NDJSON,
    collect,
    mock_backend_transport,
    ndjson,
    run_input,
    summarize,
    translate,
)
from _wire_ollama import (
    ERROR_MID_STREAM,
    MODEL,
    ONE_CALL,
    PARALLEL_SAME_INDEX,
    SAME_CALL_ON_TWO_LINES,
    TEXT_BEFORE_CALLS,
    TEXT_ONLY,
    THINKING_THEN_ANSWER,
    ZERO_ARG_CALLS,
    done,
    line,
    tc,
)


def ids(prefix: str) -> Any:
    numbers = iter(range(1, 1000))
    return lambda: f"{prefix}{next(numbers)}"


def translator() -> OllamaTranslator:
    return OllamaTranslator(message_ids=ids("msg_"))


# --- published stream shapes (one ChatResponse per line) ----------------------------------


# Ollama often gives every call of a response the same index, and no id.


# --- the translator -------------------------------------------------------------------


def test_text_only_streams_one_message_and_finishes_end_turn() -> None:
    events = translate(translator(), TEXT_ONLY)
    summary = summarize(events)
    assert summary.text == "The sky is blue."
    assert summary.finished == {"stopReason": "end_turn", "providerStopReason": "stop"}
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.usage is not None
    (usage,) = finished.usage
    assert (usage.provider, usage.model, usage.input_tokens, usage.output_tokens) == (
        "ollama",
        MODEL,
        122,
        33,
    )


def test_one_call_is_started_given_its_arguments_and_ended_at_once() -> None:
    events = translate(translator(), ONE_CALL)
    assert [type(e).__name__ for e in events] == [
        "ToolCallStartEvent",
        "ToolCallArgsEvent",
        "ToolCallEndEvent",
        "RunFinishedEvent",
    ]
    summary = summarize(events)
    assert [(c.id, c.name, c.arguments, c.ended) for c in summary.calls] == [
        ("call_1", "get_current_weather", '{"format":"celsius","location":"Toronto"}', True)
    ]
    assert summary.finished == {"stopReason": "tool_use", "providerStopReason": "stop"}


def test_calls_sharing_an_index_are_never_merged() -> None:
    summary = summarize(translate(translator(), PARALLEL_SAME_INDEX))
    assert [(c.id, c.arguments, c.ended) for c in summary.calls] == [
        ("call_1", '{"name":"alice"}', True),
        ("call_2", '{"name":"bob"}', True),
    ]


def test_identical_calls_on_two_lines_are_two_calls() -> None:
    summary = summarize(translate(translator(), SAME_CALL_ON_TWO_LINES))
    assert [(c.id, c.arguments) for c in summary.calls] == [
        ("call_1", '{"name":"alice"}'),
        ("call_2", '{"name":"alice"}'),
    ]


def test_a_call_without_arguments_gets_an_empty_object() -> None:
    summary = summarize(translate(translator(), ZERO_ARG_CALLS))
    assert [(c.name, c.arguments, c.ended) for c in summary.calls] == [
        ("list_people", "{}", True),
        ("list_people", "{}", True),
    ]


def test_text_before_calls_is_closed_and_named_as_their_parent() -> None:
    events = translate(translator(), TEXT_BEFORE_CALLS)
    summary = summarize(events)
    assert summary.text == "Let me look up both secret numbers."
    assert [c.parent for c in summary.calls] == ["msg_1", "msg_1"]
    end = next(i for i, e in enumerate(events) if isinstance(e, TextMessageEndEvent))
    first_call = next(i for i, e in enumerate(events) if isinstance(e, ToolCallStartEvent))
    assert end < first_call


def test_an_error_line_mid_stream_is_a_run_error() -> None:
    events = translate(translator(), ERROR_MID_STREAM)
    summary = summarize(events)
    assert summary.text == "Let me"
    assert summary.error == (
        "an error was encountered while running the model: unexpected EOF",
        "ollama_error",
    )
    assert summary.finished is None
    assert [type(e).__name__ for e in events][-2:] == ["TextMessageEndEvent", "RunErrorEvent"]


def test_thinking_is_reasoning_not_text() -> None:
    events = translate(translator(), THINKING_THEN_ANSWER)
    reasoning = [e.delta for e in events if isinstance(e, ReasoningMessageContentEvent)]
    assert reasoning == ["The user asks about the sky. ", "Rayleigh."]
    assert summarize(events).text == "Because of Rayleigh scattering."
    names = [type(e).__name__ for e in events]
    assert names.index("ReasoningEndEvent") < names.index("TextMessageStartEvent")


def test_ids_ollama_gives_are_kept_unless_repeated() -> None:
    stream = [
        line(
            tool_calls=[
                tc("a", {}, id="call_x1"),
                tc("b", {}, id="call_x1"),  # a repeat: gets its own id
                tc("c", {}),
            ]
        ),
        done(),
    ]
    assert [c.id for c in summarize(translate(translator(), stream)).calls] == [
        "call_x1",
        "call_1",
        "call_2",
    ]


def test_string_arguments_are_passed_on_as_raw_json() -> None:
    stream = [
        line(tool_calls=[tc("f", '{"a": 1}'), tc("g", "null"), tc("h", " ")]),
        done(),
    ]
    calls = summarize(translate(translator(), stream)).calls
    assert [c.arguments for c in calls] == ['{"a": 1}', "{}", "{}"]


def test_length_finishes_max_tokens() -> None:
    summary = summarize(translate(translator(), [line("Once upon"), done("length")]))
    assert summary.finished == {"stopReason": "max_tokens", "providerStopReason": "length"}


def test_lines_after_done_are_ignored_and_an_unfinished_stream_stays_open() -> None:
    t = translator()
    t.feed(done())
    assert t.ended
    assert t.feed(line("late")) == []
    assert t.finish() == []
    events = translate(translator(), [line("cut sh")])
    assert summarize(events).finished is None
    assert isinstance(events[-1], TextMessageEndEvent)


def test_lines_that_are_not_chat_responses_are_refused() -> None:
    with pytest.raises(MalformedEventError):
        translator().feed("done")
    with pytest.raises(InvalidEventError, match="ChatResponse"):
        translator().feed({"message": {"tool_calls": [{"function": {"arguments": {}}}]}})


# --- through the backend: real httpx NDJSON line reading ---------------------------------


def ndjson_bytes(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(ndjson(each) for each in lines)


def backend_for(pieces: list[bytes], requests: list[httpx.Request] | None = None) -> OllamaBackend:
    return OllamaBackend(MODEL, transport=mock_backend_transport(pieces, NDJSON, requests))


# --- requests -----------------------------------------------------------------------------


def test_the_conversation_becomes_ollama_messages() -> None:
    messages: list[Message] = [
        SystemMessage(id="s1", content="You are terse."),
        DeveloperMessage(id="d1", content="Use tools."),
        UserMessage(
            id="u1",
            content=[
                TextPart(text="What is this?"),
                ImagePart(source=DataSource(value="aGk=", mime_type="image/png")),
            ],
        ),
        AssistantMessage(
            id="a1",
            content="Let me look.",
            tool_calls=[
                ToolCall(
                    id="call_1",
                    function=FunctionCall(name="get_secret_number", arguments='{"name":"alice"}'),
                ),
                ToolCall(id="call_2", function=FunctionCall(name="list_people", arguments="")),
            ],
        ),
        ToolMessage(id="t1", tool_call_id="call_1", content="42"),
        ToolMessage(id="t2", tool_call_id="call_2", content='{"error":"boom"}', error="boom"),
        ReasoningMessage(id="r1", content="kept local"),
        AssistantMessage(id="a2"),  # empty: left out
        AssistantMessage(id="a3", content="Done."),
    ]
    backend = OllamaBackend(MODEL, options={"options": {"temperature": 0}, "think": True})
    body = backend.build_request(run_input(messages, DEMO_TOOLS.definitions()))
    assert body["model"] == MODEL
    assert body["stream"] is True
    assert body["options"] == {"temperature": 0}
    assert body["think"] is True
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What is this?", "images": ["aGk="]},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "index": 0,
                        "name": "get_secret_number",
                        "arguments": {"name": "alice"},
                    },
                },
                {
                    "type": "function",
                    "function": {"index": 1, "name": "list_people", "arguments": {}},
                },
            ],
        },
        {"role": "tool", "tool_name": "get_secret_number", "content": "42"},
        {"role": "tool", "tool_name": "list_people", "content": '{"error":"boom"}'},
        {"role": "assistant", "content": "Done."},
    ]
    tools = {t["function"]["name"]: t for t in body["tools"]}
    assert set(tools) == set(DEMO_TOOLS.names)
    assert tools["get_weather"]["type"] == "function"
    assert tools["get_weather"]["function"]["parameters"]["required"] == ["city"]


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        (
            [
                UserMessage(id="u1", content="Go"),
                ToolMessage(id="t1", tool_call_id="c9", content="1"),
            ],
            "which no assistant message asked for",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                AssistantMessage(
                    id="a1",
                    tool_calls=[ToolCall(id="c1", function=FunctionCall(name="f", arguments="7"))],
                ),
            ],
            "not a JSON object",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                AssistantMessage(
                    id="a1",
                    tool_calls=[ToolCall(id="c1", function=FunctionCall(name="f", arguments="{"))],
                ),
            ],
            "not JSON",
        ),
        (
            [
                UserMessage(
                    id="u1",
                    content=[AudioPart(source=DataSource(value="AAA", mime_type="audio/wav"))],
                )
            ],
            "text and inline",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                AssistantMessage(
                    id="a1",
                    tool_calls=[ToolCall(id="c1", function=FunctionCall(name="f", arguments="{}"))],
                ),
                ToolMessage(
                    id="t1",
                    tool_call_id="c1",
                    content=[
                        TextPart(text="the chart:"),
                        ImagePart(source=DataSource(value="aGk=", mime_type="image/png")),
                    ],
                ),
            ],
            "ollama cannot take an image part from a data source in a tool message",
        ),
    ],
)
def test_conversations_ollama_cannot_take_are_refused_before_sending(
    messages: list[Message], match: str
) -> None:
    with pytest.raises(ConversationError, match=match):
        OllamaBackend(MODEL).build_request(run_input(messages))


@pytest.mark.anyio
async def test_refusals_happen_before_any_network_call() -> None:
    requests: list[httpx.Request] = []

    class NoTools(OllamaBackend):
        capabilities = Capabilities(
            streaming=True, tools=False, tool_ids=False, parallel_calls=True
        )

    class OneCallAtATime(OllamaBackend):
        capabilities = Capabilities(
            streaming=True, tools=True, tool_ids=False, parallel_calls=False
        )

    no_tools = NoTools(MODEL, transport=mock_backend_transport([b""], NDJSON, requests))
    with pytest.raises(ConversationError, match="does not support tools"):
        await collect(no_tools, run_input(tools=DEMO_TOOLS.definitions()))
    serial = OneCallAtATime(MODEL, transport=mock_backend_transport([b""], NDJSON, requests))
    two_calls = AssistantMessage(
        id="a1",
        tool_calls=[
            ToolCall(id="c1", function=FunctionCall(name="list_people", arguments="{}")),
            ToolCall(id="c2", function=FunctionCall(name="list_people", arguments="{}")),
        ],
    )
    with pytest.raises(ConversationError, match="several tool calls"):
        await collect(serial, run_input([UserMessage(id="u", content="Go"), two_calls]))
    await no_tools.aclose()
    await serial.aclose()
    assert requests == []


def test_capabilities_follow_the_matrix() -> None:
    caps = OllamaBackend.capabilities
    assert (caps.streaming, caps.tools, caps.tool_ids, caps.parallel_calls) == (
        True,
        True,
        False,
        True,
    )
    assert OllamaBackend.stream_format == "ndjson"


# --- end to end: the engine against a loopback Ollama -----------------------------------------
