"""Token usage from the backends whose providers stream it in a shape of their own:
OpenAI Chat Completions (with the finish reason, in a chunk of its own after it, or under
Groq's ``x_groq``), the Responses API (on the response's end) and Anthropic
(``message_start``, then ``message_delta``). It lands on RUN_FINISHED.usage, which the
engine's spans read. (Gemini's, Ollama's and Cohere's are tested in their own files.)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from toolrelay.backends.providers import (
    AnthropicBackend,
    AnthropicTranslator,
    OpenAIChatBackend,
    OpenAIChatTranslator,
    OpenAIResponsesTranslator,
    TrailingUsage,
)
from toolrelay.protocol import Event, RunFinishedEvent, TokenUsage, UnknownEvent

# The shared helpers sit next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _oa_servers import collect, sse
from _wire_anthropic import message_end, message_start, text_block
from _wire_openai import chunk, completed, created, incomplete, message_added, text_delta

SSE_HEADERS = {"content-type": "text/event-stream"}

CHAT_USAGE = {
    "prompt_tokens": 75,
    "completion_tokens": 53,
    "total_tokens": 128,
    "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": 0},
}
CHAT_COUNTED = TokenUsage(
    provider="openai",
    model="gpt-4o-mini",
    input_tokens=75,
    output_tokens=53,
    total_tokens=128,
    reasoning_tokens=12,
    cached_input_tokens=64,
)


def usage_chunk(usage: Any) -> dict[str, Any]:
    """OpenAI's last chunk when the request asks for usage: no choices, the usage."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": usage,
    }


def finish(events: list[Event] | list[Event | UnknownEvent]) -> RunFinishedEvent:
    (finished,) = [event for event in events if isinstance(event, RunFinishedEvent)]
    return finished


class Body:
    """A MockTransport handler answering every request with ``body``, keeping them."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests: list[Any] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(msgspec.json.decode(request.content))
        return httpx.Response(200, headers=SSE_HEADERS, content=self.body)


# --- OpenAI Chat Completions ---


@pytest.mark.anyio
async def test_chat_usage_sent_after_the_finish_reason_reaches_run_finished() -> None:
    # OpenAI's order with stream_options.include_usage: the finish reason, then a chunk
    # with no choices and the usage, then [DONE]. RUN_FINISHED waits for the usage.
    body = Body(
        sse(
            [chunk({"content": "Hi"}), chunk({}, "stop"), usage_chunk(CHAT_USAGE)],
            done=True,
        )
    )
    backend = OpenAIChatBackend(
        "gpt-4o-mini", api_key="sk-test", transport=httpx.MockTransport(body)
    )
    finished = finish(await collect(backend))
    assert finished.usage == [CHAT_COUNTED]
    assert finished.result == {"stopReason": "end_turn", "providerStopReason": "stop"}


def test_chat_usage_given_with_the_finish_reason_is_on_run_finished() -> None:
    # Groq (and other servers) put the usage on the chunk that carries the finish reason.
    translator = OpenAIChatTranslator()
    translator.feed(chunk({"content": "Hi"}))
    last = chunk({}, "stop") | {"usage": CHAT_USAGE}
    assert finish(translator.feed(last)).usage == [CHAT_COUNTED]


def test_chat_usage_under_x_groq_is_read() -> None:
    translator = OpenAIChatTranslator()
    last = chunk({}, "stop") | {"x_groq": {"id": "req_1", "usage": CHAT_USAGE}}
    assert finish(translator.feed(last)).usage == [CHAT_COUNTED]


def test_chat_usage_after_the_end_is_kept_for_the_backend_and_emits_nothing() -> None:
    translator = OpenAIChatTranslator()
    assert isinstance(translator, TrailingUsage)
    assert finish(translator.feed(chunk({}, "stop"))).usage is None
    assert translator.feed(usage_chunk(CHAT_USAGE)) == []
    assert translator.trailing_usage == [CHAT_COUNTED]
    assert translator.finish() == []


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        pytest.param(
            {"prompt_tokens": 7, "completion_tokens": 3},
            TokenUsage(provider="openai", model="gpt-4o-mini", input_tokens=7, output_tokens=3),
            id="no-total-no-details",
        ),
        pytest.param(
            {"prompt_tokens": 7, "completion_tokens": True, "total_tokens": "10"},
            TokenUsage(provider="openai", model="gpt-4o-mini", input_tokens=7),
            id="a-bool-and-a-string-are-not-counts",
        ),
        pytest.param({"prompt_tokens": -1, "completion_tokens": None}, None, id="no-count"),
        pytest.param(["prompt_tokens", 7], None, id="not-an-object"),
    ],
)
def test_chat_usage_keeps_only_what_are_counts(usage: Any, expected: TokenUsage | None) -> None:
    translator = OpenAIChatTranslator()
    translator.feed(chunk({}, "stop"))
    translator.feed(usage_chunk(usage))
    assert translator.trailing_usage == (None if expected is None else [expected])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("base_url", "options", "expected"),
    [
        pytest.param(None, {}, {"include_usage": True}, id="openai-asked-for-usage"),
        pytest.param("http://127.0.0.1:8000/v1", {}, None, id="a-compatible-server-not"),
        pytest.param(
            None,
            {"stream_options": {"include_usage": False}},
            {"include_usage": False},
            id="options-decide",
        ),
        pytest.param(
            "http://127.0.0.1:8000/v1",
            {"stream_options": {"include_usage": True}},
            {"include_usage": True},
            id="a-compatible-server-through-options",
        ),
    ],
)
async def test_chat_request_asks_openai_for_usage_and_other_servers_only_through_options(
    base_url: str | None, options: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    body = Body(sse([chunk({}, "stop")], done=True))
    backend = OpenAIChatBackend(
        "gpt-4o-mini",
        api_key="sk-test",
        base_url=base_url,
        options=options,
        transport=httpx.MockTransport(body),
    )
    await collect(backend)
    (request,) = body.requests
    assert request.get("stream_options") == expected


# --- the Responses API ---


def responses_end(end: dict[str, Any], usage: Any) -> dict[str, Any]:
    response = {**end["response"], "model": "gpt-5-mini", "usage": usage}
    return {**end, "response": response}


RESPONSES_USAGE = {
    "input_tokens": 278,
    "input_tokens_details": {"cached_tokens": 256},
    "output_tokens": 90,
    "output_tokens_details": {"reasoning_tokens": 64},
    "total_tokens": 368,
}
RESPONSES_COUNTED = TokenUsage(
    provider="openai",
    model="gpt-5-mini",
    input_tokens=278,
    output_tokens=90,
    total_tokens=368,
    reasoning_tokens=64,
    cached_input_tokens=256,
)


@pytest.mark.parametrize(
    ("end", "result"),
    [
        pytest.param(
            completed(),
            {"stopReason": "end_turn", "providerStopReason": "completed"},
            id="completed",
        ),
        pytest.param(
            incomplete("max_output_tokens"),
            {"stopReason": "max_tokens", "providerStopReason": "max_output_tokens"},
            id="incomplete",
        ),
    ],
)
def test_responses_usage_of_the_response_is_on_run_finished(
    end: dict[str, Any], result: dict[str, str]
) -> None:
    translator = OpenAIResponsesTranslator()
    for item in (created(), message_added(0, "msg_1"), text_delta(0, "msg_1", "Paris.")):
        translator.feed(item)
    finished = finish(translator.feed(responses_end(end, RESPONSES_USAGE)))
    assert finished.usage == [RESPONSES_COUNTED]
    assert finished.result == result


def test_responses_without_usage_finishes_without_it() -> None:
    translator = OpenAIResponsesTranslator()
    assert finish(translator.feed(completed())).usage is None
    assert finish(OpenAIResponsesTranslator().feed(responses_end(completed(), None))).usage is None


# --- Anthropic ---


def with_usage(event: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    if event["type"] == "message_start":
        return {**event, "message": {**event["message"], "usage": usage}}
    return {**event, "usage": usage}


def test_anthropic_usage_takes_the_cache_into_the_input_and_gives_it_apart() -> None:
    # Anthropic's input_tokens leave out what was read from or written to the prompt
    # cache; AG-UI's (and OpenTelemetry's gen_ai.usage.input_tokens) count it in.
    start = with_usage(
        message_start(),
        {
            "input_tokens": 14,
            "cache_read_input_tokens": 2048,
            "cache_creation_input_tokens": 512,
            "output_tokens": 1,
        },
    )
    delta, stop = message_end("end_turn")
    translator = AnthropicTranslator()
    events = [
        event
        for item in [start, *text_block(0, "Paris."), delta, stop]
        for event in translator.feed(item)
    ]
    assert finish(events).usage == [
        TokenUsage(
            provider="anthropic",
            model="claude-sonnet-4-5",
            input_tokens=14 + 2048 + 512,
            output_tokens=15,  # message_delta's count: the message's, whole
            total_tokens=14 + 2048 + 512 + 15,
            cached_input_tokens=2048,
            cache_write_input_tokens=512,
        )
    ]


def test_anthropic_counts_message_delta_gives_again_replace_message_start_s() -> None:
    start = with_usage(message_start(), {"input_tokens": 10, "output_tokens": 1})
    delta, stop = message_end("end_turn")
    delta = with_usage(delta, {"input_tokens": 12, "output_tokens": 30})
    translator = AnthropicTranslator()
    events = [event for item in [start, delta, stop] for event in translator.feed(item)]
    assert finish(events).usage == [
        TokenUsage(
            provider="anthropic",
            model="claude-sonnet-4-5",
            input_tokens=12,
            output_tokens=30,
            total_tokens=42,
        )
    ]


def test_anthropic_a_stream_closed_before_message_stop_keeps_the_usage() -> None:
    delta, _ = message_end("end_turn")
    translator = AnthropicTranslator()
    for item in [message_start(), *text_block(0, "Hi"), delta]:
        translator.feed(item)
    assert finish(translator.finish()).usage == [
        TokenUsage(
            provider="anthropic",
            model="claude-sonnet-4-5",
            input_tokens=25,
            output_tokens=15,
            total_tokens=40,
        )
    ]


@pytest.mark.anyio
async def test_anthropic_backend_hands_the_usage_over() -> None:
    body = Body(sse([message_start(), *text_block(0, "Hi"), *message_end("end_turn")], named=True))
    backend = AnthropicBackend(
        "claude-sonnet-4-5", api_key="sk-ant-test", transport=httpx.MockTransport(body)
    )
    usage = finish(await collect(backend)).usage
    assert usage is not None
    assert (usage[0].input_tokens, usage[0].output_tokens) == (25, 15)


@pytest.mark.anyio
async def test_what_follows_the_end_is_dropped_by_a_translator_without_trailing_usage() -> None:
    # Anthropic's translator reads no usage after message_stop: what the server still
    # sends (a ping here) is read to the end of the body and dropped, as before.
    stream = [message_start(), *text_block(0, "Hi"), *message_end("end_turn"), {"type": "ping"}]
    body = Body(sse(stream, named=True))
    backend = AnthropicBackend(
        "claude-sonnet-4-5", api_key="sk-ant-test", transport=httpx.MockTransport(body)
    )
    assert not isinstance(AnthropicTranslator(), TrailingUsage)
    events = await collect(backend)
    assert isinstance(events[-1], RunFinishedEvent)
    assert events[-1].usage is not None
