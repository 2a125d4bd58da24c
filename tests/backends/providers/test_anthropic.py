"""The Anthropic adapter: the Messages API, streamed.

Streams are written from Anthropic's published streaming format (named SSE events:
message_start, content_block_start/delta/stop, message_delta, message_stop, ping,
error). Each is played through the pure translator, through the backend over
httpx.MockTransport, and, as a multi-hop tool conversation, through the Engine
against a loopback HTTP server; re-chunked at arbitrary byte boundaries
(Hypothesis), with every provider's, in ``test_providers_engine.py``. A
message cut off by max_tokens, and a call after extended thinking, go through a real
Engine over httpx.MockTransport: what runs, and what is sent after.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import anyio
import httpx
import msgspec
import pytest

from toolrelay import ConversationError, RunStatus, Turn
from toolrelay.backends.providers._anthropic import (
    ANTHROPIC_VERSION,
    AnthropicBackend,
    AnthropicTranslator,
)
from toolrelay.backends.providers._base import Capabilities
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    AssistantMessage,
    AudioPart,
    DataSource,
    DeveloperMessage,
    DocumentPart,
    Event,
    FunctionCall,
    ImagePart,
    Message,
    ReasoningEncryptedValueEvent,
    ReasoningMessage,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _oa_servers import (
    Outcome,
    collect,
    refuse,
    run_input,
    sse,
    summarize,
)
from _provider_table import run_recorded_turn
from _wire_anthropic import (
    ERROR_MID_STREAM,
    OVERLOADED,
    PING,
    json_delta,
    message_end,
    message_start,
    stop,
    text_block,
    thinking_block,
    tool_block,
    tool_start,
)

SSE_HEADERS = {"content-type": "text/event-stream"}

# --- streams, from the published event format ---


TEXT_ONLY = [
    message_start(),
    *text_block(0, "Hello", ", wörld ✓"),
    PING,
    *message_end("end_turn"),
]
ONE_CALL = [
    message_start(),
    *tool_block(0, "toolu_a", "get_secret_number", '{"na', 'me": "al', 'ice"}'),
    *message_end("tool_use"),
]
PARALLEL = [
    message_start(),
    *tool_block(0, "toolu_a", "get_secret_number", '{"name": "alice"}'),
    *tool_block(1, "toolu_b", "lookup_city", '{"person": ', '"bob"}'),
    *message_end("tool_use"),
]
ZERO_ARG = [message_start(), *tool_block(0, "toolu_z", "list_people"), *message_end("tool_use")]
TEXT_BEFORE_CALLS = [
    message_start(),
    *text_block(0, "Let me ", "check."),
    *tool_block(1, "toolu_a", "get_secret_number", '{"name"', ': "alice"}'),
    *message_end("tool_use"),
]
THINKING = [
    message_start(),
    *thinking_block(0, "They want a number.", "EqQBCgIYAhIM"),
    *text_block(1, "42."),
    *message_end("end_turn"),
]
MAX_TOKENS = [message_start(), *text_block(0, "A long ans"), *message_end("max_tokens")]
# Cut off by max_tokens in the middle of a call's input: Anthropic stops the block it was
# cut in, then says why.
MAX_TOKENS_MID_CALL = [
    message_start(),
    *text_block(0, "Let me check."),
    *tool_block(1, "toolu_a", "get_secret_number", '{"name": "al'),
    *message_end("max_tokens"),
]
# Cut off during the second call of a batch: the first looks whole, yet the batch is not.
MAX_TOKENS_MID_BATCH = [
    message_start(),
    *tool_block(0, "toolu_a", "get_secret_number", '{"name": "alice"}'),
    *tool_block(1, "toolu_b", "lookup_city", '{"person": "b'),
    *message_end("max_tokens"),
]
# Extended thinking, then a call the model meant to make: it ends, and the signature stays.
THINKING_THEN_CALL = [
    message_start(),
    *thinking_block(0, "Alice's number, then.", "EqQBCgIYAhIM"),
    *tool_block(1, "toolu_a", "get_secret_number", '{"name": ', '"alice"}'),
    *message_end("tool_use"),
]
REFUSAL = [message_start(), *text_block(0, "I can't"), *message_end("refusal")]

ALICE = ("toolu_a", "get_secret_number", '{"name": "alice"}')

CASES: dict[str, tuple[list[dict[str, Any]], Outcome]] = {
    "text-only": (
        TEXT_ONLY,
        Outcome(
            texts=["Hello, wörld ✓"],
            calls=[],
            ended=[],
            reasoning=[],
            finish={"stopReason": "end_turn"},
        ),
    ),
    "one-call": (
        ONE_CALL,
        Outcome(
            texts=[],
            calls=[ALICE],
            ended=["toolu_a"],
            reasoning=[],
            finish={"stopReason": "tool_use"},
        ),
    ),
    "parallel": (
        PARALLEL,
        Outcome(
            texts=[],
            calls=[ALICE, ("toolu_b", "lookup_city", '{"person": "bob"}')],
            ended=["toolu_a", "toolu_b"],
            reasoning=[],
            finish={"stopReason": "tool_use"},
        ),
    ),
    "zero-arg": (
        ZERO_ARG,
        Outcome(
            texts=[],
            calls=[("toolu_z", "list_people", "")],
            ended=["toolu_z"],
            reasoning=[],
            finish={"stopReason": "tool_use"},
        ),
    ),
    "text-before-calls": (
        TEXT_BEFORE_CALLS,
        Outcome(
            texts=["Let me check."],
            calls=[ALICE],
            ended=["toolu_a"],
            reasoning=[],
            finish={"stopReason": "tool_use"},
        ),
    ),
    "error-mid-stream": (
        ERROR_MID_STREAM,
        Outcome(
            texts=["Half an ans"],
            calls=[],
            ended=[],
            reasoning=[],
            error=("Overloaded", "overloaded_error"),
        ),
    ),
    "thinking": (
        THINKING,
        Outcome(
            texts=["42."],
            calls=[],
            ended=[],
            reasoning=["They want a number."],
            finish={"stopReason": "end_turn"},
        ),
    ),
    "max-tokens": (
        MAX_TOKENS,
        Outcome(
            texts=["A long ans"],
            calls=[],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens"},
        ),
    ),
    "max-tokens-mid-call": (
        MAX_TOKENS_MID_CALL,
        # A call of a cut-off message stays open: the processor never runs it.
        Outcome(
            texts=["Let me check."],
            calls=[("toolu_a", "get_secret_number", '{"name": "al')],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens"},
        ),
    ),
    "max-tokens-mid-batch": (
        MAX_TOKENS_MID_BATCH,
        Outcome(
            texts=[],
            calls=[ALICE, ("toolu_b", "lookup_city", '{"person": "b')],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens"},
        ),
    ),
    "thinking-then-call": (
        THINKING_THEN_CALL,
        Outcome(
            texts=[],
            calls=[ALICE],
            ended=["toolu_a"],
            reasoning=["Alice's number, then."],
            finish={"stopReason": "tool_use"},
        ),
    ),
    "refusal": (
        REFUSAL,
        Outcome(
            texts=["I can't"], calls=[], ended=[], reasoning=[], finish={"stopReason": "refusal"}
        ),
    ),
}


def translate(translator: AnthropicTranslator, chunks: list[dict[str, Any]]) -> list[Event]:
    events: list[Event] = []
    for item in chunks:
        events.extend(translator.feed(item, item["type"]))
    events.extend(translator.finish())
    return events


@pytest.mark.parametrize("case", list(CASES))
def test_translator_turns_each_published_stream_into_its_events(case: str) -> None:
    chunks, expected = CASES[case]
    assert summarize(translate(AnthropicTranslator(), chunks)) == expected


@pytest.mark.parametrize(
    "case", ["one-call", "parallel", "text-before-calls", "zero-arg", "thinking-then-call"]
)
def test_tool_call_end_waits_for_the_stop_reason_of_the_message(case: str) -> None:
    chunks, expected = CASES[case]
    translator = AnthropicTranslator()
    for item in chunks:
        events = translator.feed(item, item["type"])
        ends = [e.tool_call_id for e in events if isinstance(e, ToolCallEndEvent)]
        if item["type"] == "message_delta":
            # Every stopped call ends here, in the order of its block.
            assert ends == expected.ended
        else:
            # Neither arguments that already parse nor the block's stop complete a
            # call: the message may yet say it was cut off.
            assert ends == []


@pytest.mark.parametrize(
    ("stop_reason", "ended"),
    [
        ("tool_use", ["toolu_a", "toolu_b"]),
        ("end_turn", ["toolu_a", "toolu_b"]),
        # The caller's own stop, and a server-tool loop paused between blocks: the
        # model did not stop mid-call.
        ("stop_sequence", ["toolu_a", "toolu_b"]),
        ("pause_turn", ["toolu_a", "toolu_b"]),
        # A reason Anthropic adds later says nothing of a cut: the calls end as before.
        ("some_new_reason", ["toolu_a", "toolu_b"]),
        # Cut off: out of output budget or context window, or stopped by a classifier.
        ("max_tokens", []),
        ("model_context_window_exceeded", []),
        ("refusal", []),
    ],
)
def test_only_a_message_cut_off_leaves_its_calls_open(stop_reason: str, ended: list[str]) -> None:
    stream = [*PARALLEL[: -len(message_end(stop_reason))], *message_end(stop_reason)]
    outcome = summarize(translate(AnthropicTranslator(), stream))
    assert outcome.calls == [ALICE, ("toolu_b", "lookup_city", '{"person": "bob"}')]
    assert outcome.ended == ended
    assert outcome.finish == {"stopReason": stop_reason}


def test_a_cut_off_message_ends_its_text_and_thinking_blocks_where_they_stop() -> None:
    stream = [
        message_start(),
        *thinking_block(0, "Hm.", "sig"),
        *text_block(1, "Let me check."),
        *tool_block(2, "toolu_a", "get_secret_number", '{"name": "al'),
        *message_end("max_tokens"),
    ]
    translator = AnthropicTranslator()
    by_chunk = [translator.feed(item, item["type"]) for item in stream]
    assert translator.finish() == []
    names = [[type(e).__name__ for e in events] for events in by_chunk]
    # Thinking and text end at their own block's stop, the signature kept, as before.
    assert names[stream.index(stop(0))] == ["ReasoningMessageEndEvent"]
    assert names[stream.index(stop(1))] == ["TextMessageEndEvent"]
    signatures = [
        e for events in by_chunk for e in events if isinstance(e, ReasoningEncryptedValueEvent)
    ]
    assert [s.encrypted_value for s in signatures] == ["sig"]
    # The call's block stop and the stop reason end nothing; message_stop finishes the run.
    assert names[-3:] == [[], [], ["RunFinishedEvent"]]


def test_the_thinking_signature_is_kept_before_a_call_that_ends() -> None:
    events = translate(AnthropicTranslator(), THINKING_THEN_CALL)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "ReasoningMessageStartEvent",
        "ReasoningMessageContentEvent",
        "ReasoningEncryptedValueEvent",
        "ReasoningMessageEndEvent",
        "ToolCallStartEvent",
        "ToolCallArgsEvent",
        "ToolCallArgsEvent",
        "ToolCallEndEvent",
        "RunFinishedEvent",
    ]
    (signature,) = [e for e in events if isinstance(e, ReasoningEncryptedValueEvent)]
    assert signature.encrypted_value == "EqQBCgIYAhIM"


def test_a_call_block_still_open_at_a_cut_off_message_stop_is_not_ended() -> None:
    # Out of Anthropic's order (it stops every block first), yet a cut stays a cut.
    stream = [
        message_start(),
        tool_start(0, "toolu_a", "get_secret_number"),
        json_delta(0, '{"name": "al'),
        *message_end("max_tokens"),
    ]
    outcome = summarize(translate(AnthropicTranslator(), stream))
    assert (outcome.ended, outcome.finish) == ([], {"stopReason": "max_tokens"})


def test_a_call_block_stopped_after_the_stop_reason_ends_unless_cut_off() -> None:
    for stop_reason, ended in (("tool_use", ["toolu_a"]), ("max_tokens", [])):
        stream = [
            message_start(),
            tool_start(0, "toolu_a", "get_secret_number"),
            json_delta(0, '{"name": "alice"}'),
            message_end(stop_reason)[0],
            stop(0),
            message_end(stop_reason)[1],
        ]
        assert summarize(translate(AnthropicTranslator(), stream)).ended == ended


def test_a_message_stop_without_a_stop_reason_ends_its_calls_as_before() -> None:
    stream = [*ONE_CALL[: -len(message_end("tool_use"))], {"type": "message_stop"}]
    outcome = summarize(translate(AnthropicTranslator(), stream))
    assert (outcome.ended, outcome.finish) == (["toolu_a"], {"stopReason": None})


def test_calls_and_the_first_text_name_the_message() -> None:
    events = translate(AnthropicTranslator(), TEXT_BEFORE_CALLS)
    (start,) = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert start.parent_message_id == "msg_01"
    assert any(getattr(e, "message_id", None) == "msg_01" for e in events)


def test_the_thinking_signature_is_kept_as_an_encrypted_value() -> None:
    events = translate(AnthropicTranslator(), THINKING)
    (signature,) = [e for e in events if isinstance(e, ReasoningEncryptedValueEvent)]
    assert signature.encrypted_value == "EqQBCgIYAhIM"


def test_a_stream_closed_after_message_delta_still_finishes_the_run() -> None:
    outcome = summarize(translate(AnthropicTranslator(), ONE_CALL[:-1]))
    assert outcome.finish == {"stopReason": "tool_use"}
    assert outcome.ended == ["toolu_a"]


@pytest.mark.parametrize("case", ["max-tokens-mid-call", "max-tokens-mid-batch", "one-call"])
def test_a_stream_closed_after_message_delta_keeps_what_the_stop_reason_decided(
    case: str,
) -> None:
    chunks, expected = CASES[case]
    outcome = summarize(translate(AnthropicTranslator(), chunks[:-1]))
    assert (outcome.ended, outcome.finish) == (expected.ended, expected.finish)


def test_a_stream_closed_before_the_stop_reason_ends_stopped_calls_but_not_the_run() -> None:
    # As before the hold: no stop reason says the message was cut off, and with no
    # RUN_FINISHED the processor fails the turn, so nothing runs either way.
    cut = ONE_CALL.index(stop(0)) + 1
    translator = AnthropicTranslator()
    fed = [e for item in ONE_CALL[:cut] for e in translator.feed(item, item["type"])]
    assert not any(isinstance(e, ToolCallEndEvent) for e in fed)
    outcome = summarize([*fed, *translator.finish()])
    assert outcome.ended == ["toolu_a"]
    assert outcome.finish is None and outcome.error is None


def test_an_error_after_a_call_block_stopped_ends_the_call_then_fails_the_run() -> None:
    stream = [*ONE_CALL[: ONE_CALL.index(stop(0)) + 1], OVERLOADED]
    outcome = summarize(translate(AnthropicTranslator(), stream))
    assert outcome.ended == ["toolu_a"]
    assert outcome.error == ("Overloaded", "overloaded_error")


def test_a_stream_closed_mid_call_neither_ends_the_call_nor_the_run() -> None:
    cut = ONE_CALL.index(stop(0))
    outcome = summarize(translate(AnthropicTranslator(), ONE_CALL[:cut]))
    assert outcome.calls == [ALICE] and outcome.ended == []
    assert outcome.finish is None and outcome.error is None


def test_server_tool_blocks_and_redacted_thinking_are_not_client_calls() -> None:
    stream = [
        message_start(),
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {},
            },
        },
        json_delta(0, '{"query": "x"}'),
        stop(0),
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"},
        },
        stop(1),
        *text_block(2, "Done."),
        *message_end("end_turn"),
    ]
    outcome = summarize(translate(AnthropicTranslator(), stream))
    assert (outcome.calls, outcome.texts) == ([], ["Done."])


def test_nothing_is_translated_after_the_end_of_the_run() -> None:
    translator = AnthropicTranslator()
    translate(translator, TEXT_ONLY)
    assert translator.feed(message_start(), "message_start") == []
    assert translator.feed(OVERLOADED, "error") == []


def test_a_later_text_block_gets_its_own_message_id() -> None:
    stream = [
        message_start(),
        *text_block(0, "Checking."),
        *tool_block(1, "toolu_a", "get_secret_number", '{"name": "alice"}'),
        *text_block(2, "Asked."),
        *message_end("tool_use"),
    ]
    outcome = summarize(translate(AnthropicTranslator(), stream))
    assert outcome.texts == ["Checking.", "Asked."]


# --- through the backend, over httpx.MockTransport ---


class Chunks(httpx.AsyncByteStream):
    """A response body sent in the given pieces (an iterator class, not a generator)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = iter(pieces)

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._pieces)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        pass


def body_of(chunks: list[dict[str, Any]]) -> bytes:
    return sse(chunks, named=True)


class Recorder:
    """A MockTransport handler that answers with ``pieces`` and keeps each request."""

    def __init__(self, *pieces: bytes) -> None:
        self.pieces = list(pieces)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, headers=SSE_HEADERS, stream=Chunks(self.pieces))

    def json(self, index: int = 0) -> Any:
        return msgspec.json.decode(self.requests[index].content)


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(CASES))
async def test_backend_streams_each_published_stream_as_its_events(case: str) -> None:
    chunks, expected = CASES[case]
    recorder = Recorder(body_of(chunks))
    backend = AnthropicBackend(
        "claude-sonnet-4-5", api_key="sk-ant-test", transport=httpx.MockTransport(recorder)
    )
    events = await collect(backend)
    assert events[0] == RunStartedEvent(thread_id="t1", run_id="r1")
    assert summarize(events) == expected
    finished = [e for e in events if isinstance(e, RunFinishedEvent)]
    assert all((e.thread_id, e.run_id) == ("t1", "r1") for e in finished)
    (request,) = recorder.requests
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION == "2023-06-01"
    assert "authorization" not in request.headers


class ThenHang(httpx.AsyncByteStream):
    """The body, then a connection that stays open and silent."""

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.closed = False

    def __aiter__(self) -> ThenHang:
        return self

    async def __anext__(self) -> bytes:
        if self.body is not None:
            body, self.body = self.body, None
            return body
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.anyio
async def test_a_connection_held_open_after_message_stop_does_not_hold_up_the_run() -> None:
    stream = ThenHang(body_of(TEXT_ONLY))

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE_HEADERS, stream=stream)

    with anyio.fail_after(5):
        events = await collect(
            AnthropicBackend("m", transport=httpx.MockTransport(respond), api_key="sk-test")
        )
    assert summarize(events).finish == {"stopReason": "end_turn"}
    assert stream.closed


# --- the request ---


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


CONVERSATION: list[Message] = [
    SystemMessage(id="s1", content="You are terse."),
    UserMessage(id="u1", content="Secret numbers?"),
    UserMessage(id="u1b", content="Of alice and bob, please."),
    AssistantMessage(
        id="a1",
        content="Let me check.",
        tool_calls=[
            call("toolu_a", "get_secret_number", '{"name": "alice"}'),
            call("toolu_b", "get_secret_number", '{"name": "bo'),  # cut off: invalid JSON
            call("toolu_y", "get_secret_number", '["not", "an", "object"]'),
            call("toolu_z", "list_people", ""),
        ],
    ),
    ToolMessage(id="t1", content="42", tool_call_id="toolu_a"),
    ToolMessage(
        id="t2",
        content='{"error": "the arguments are not JSON"}',
        tool_call_id="toolu_b",
        error="the arguments are not JSON",
    ),
    ToolMessage(id="t2b", content="7", tool_call_id="toolu_y"),
    ToolMessage(id="t3", content='["alice","bob"]', tool_call_id="toolu_z"),
    DeveloperMessage(id="d1", content="Answer in one line."),
    AssistantMessage(id="a2", content="Alice's is 42."),
    AssistantMessage(id="a3", content=""),
    UserMessage(
        id="u2",
        content=[
            TextPart(text="And this?"),
            ImagePart(source=DataSource(value="aW1n", mime_type="image/png")),
            DocumentPart(source=UrlSource(value="https://x/doc.pdf")),
        ],
    ),
]


@pytest.mark.anyio
async def test_request_maps_system_tool_use_tool_results_and_merges_roles() -> None:
    recorder = Recorder(body_of(TEXT_ONLY))
    backend = AnthropicBackend(
        "claude-sonnet-4-5", transport=httpx.MockTransport(recorder), api_key="sk-test"
    )
    await collect(backend, run_input(CONVERSATION))
    body = recorder.json()
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 4096
    assert body["stream"] is True
    assert body["system"] == "You are terse.\n\nAnswer in one line."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Secret numbers?"},
                {"type": "text", "text": "Of alice and bob, please."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_secret_number",
                    "input": {"name": "alice"},
                },
                {"type": "tool_use", "id": "toolu_b", "name": "get_secret_number", "input": {}},
                {"type": "tool_use", "id": "toolu_y", "name": "get_secret_number", "input": {}},
                {"type": "tool_use", "id": "toolu_z", "name": "list_people", "input": {}},
            ],
        },
        {
            # All the results of the batch, in ONE user message.
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "42"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": '{"error": "the arguments are not JSON"}',
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "toolu_y", "content": "7"},
                {"type": "tool_result", "tool_use_id": "toolu_z", "content": '["alice","bob"]'},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Alice's is 42."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "aW1n"},
                },
                {"type": "document", "source": {"type": "url", "url": "https://x/doc.pdf"}},
            ],
        },
    ]
    tools = body["tools"]
    definitions = DEMO_TOOLS.definitions()
    assert [t["name"] for t in tools] == list(DEMO_TOOLS.names)
    assert tools[0] == {
        "name": definitions[0].name,
        "description": definitions[0].description,
        "input_schema": definitions[0].parameters,
    }


@pytest.mark.anyio
async def test_options_override_max_tokens_and_add_fields() -> None:
    recorder = Recorder(body_of(TEXT_ONLY))
    backend = AnthropicBackend(
        "m",
        transport=httpx.MockTransport(recorder),
        base_url="http://127.0.0.1:9/",
        options={"max_tokens": 512, "temperature": 0.2},
        headers={"anthropic-beta": "x"},
    )
    await collect(backend, run_input(tools=[]))
    body = recorder.json()
    assert (body["max_tokens"], body["temperature"]) == (512, 0.2)
    assert "tools" not in body and "system" not in body
    assert str(recorder.requests[0].url) == "http://127.0.0.1:9/v1/messages"
    assert recorder.requests[0].headers["anthropic-beta"] == "x"


# --- refused before any network call ---

BROKEN_CONVERSATIONS: dict[str, tuple[list[Message], str]] = {
    "starts-with-assistant": (
        [AssistantMessage(id="a0", content="Hello!"), UserMessage(id="u1", content="hi")],
        "must start with a user message",
    ),
    "no-user-message": ([SystemMessage(id="s1", content="Be nice.")], "no user message"),
    "call-without-result": (
        [
            UserMessage(id="u1", content="hi"),
            AssistantMessage(id="a1", tool_calls=[call("toolu_a", "get_secret_number", "{}")]),
            UserMessage(id="u2", content="well?"),
        ],
        "'toolu_a' with no tool message right after it",
    ),
    "result-without-call": (
        [UserMessage(id="u1", content="hi"), ToolMessage(id="t1", content="1", tool_call_id="x")],
        "answers tool call 'x'",
    ),
    "audio": (
        [UserMessage(id="u1", content=[AudioPart(source=UrlSource(value="https://x/a.wav"))])],
        "cannot take an audio part",
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(BROKEN_CONVERSATIONS))
async def test_a_conversation_anthropic_would_refuse_is_refused_before_sending(case: str) -> None:
    messages, message = BROKEN_CONVERSATIONS[case]
    backend = AnthropicBackend("m", transport=httpx.MockTransport(refuse))
    with pytest.raises(ConversationError, match=message):
        await collect(backend, run_input(messages))


@pytest.mark.anyio
async def test_a_provider_without_parallel_calls_refuses_them_before_sending() -> None:
    class OneCallAtATime(AnthropicBackend):
        capabilities: ClassVar[Capabilities] = Capabilities(
            streaming=True, tools=True, tool_ids=True, parallel_calls=False
        )

    messages: list[Message] = [
        UserMessage(id="u1", content="hi"),
        AssistantMessage(id="a1", tool_calls=[call("a", "x", "{}"), call("b", "x", "{}")]),
        ToolMessage(id="t1", content="1", tool_call_id="a"),
        ToolMessage(id="t2", content="2", tool_call_id="b"),
    ]
    backend = OneCallAtATime("m", transport=httpx.MockTransport(refuse))
    with pytest.raises(ConversationError, match="several tool calls"):
        await collect(backend, run_input(messages))


# --- the Engine, end to end, over httpx.MockTransport ---


class Script:
    """A MockTransport handler that answers each request with the next body (the last
    one again once they run out) and keeps each request's JSON body."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.requests: list[Any] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(msgspec.json.decode(request.content))
        body = self.bodies[min(len(self.requests), len(self.bodies)) - 1]
        return httpx.Response(200, headers=SSE_HEADERS, stream=Chunks([body]))


async def engine_turn(script: Script, ran: list[tuple[str, str]]) -> tuple[Turn, list[Any]]:
    """One turn of a real Engine over the Anthropic backend answered by ``script``: the
    turn, and the ``result`` of each RUN_FINISHED it received."""
    backend = AnthropicBackend(
        "claude-sonnet-4-5", api_key="sk-ant-test", transport=httpx.MockTransport(script)
    )
    return await run_recorded_turn(backend, ran)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stream", "abandoned"),
    [
        pytest.param(MAX_TOKENS_MID_CALL, ["toolu_a"], id="mid-call"),
        pytest.param(MAX_TOKENS_MID_BATCH, ["toolu_a", "toolu_b"], id="mid-batch"),
    ],
)
async def test_engine_runs_no_call_of_a_message_cut_off_by_max_tokens(
    stream: list[dict[str, Any]], abandoned: list[str]
) -> None:
    answer = [message_start("msg_2"), *text_block(0, "Done."), *message_end("end_turn")]
    script = Script(body_of(stream), body_of(answer))
    ran: list[tuple[str, str]] = []
    turn, finished = await engine_turn(script, ran)
    assert ran == [], "no tool runs on the calls of a cut-off message"
    # The run finished with its stop reason; nothing was pending, so the turn ends with it.
    assert finished == [{"stopReason": "max_tokens"}]
    assert turn.status is RunStatus.completed, turn.reason
    assert [c.id for c in turn.abandoned_calls] == abandoned
    assert [v.code for v in turn.violations] == ["tool_call_not_ended"] * len(abandoned)
    assert list(turn.conversation.tool_calls()) == []
    assert len(script.requests) == 1, "no continuation: there is no result to send"


@pytest.mark.anyio
async def test_engine_runs_a_call_after_thinking_and_sends_the_signature_back() -> None:
    answer = [message_start("msg_2"), *text_block(0, "It is 42."), *message_end("end_turn")]
    script = Script(body_of(THINKING_THEN_CALL), body_of(answer))
    ran: list[tuple[str, str]] = []
    turn, finished = await engine_turn(script, ran)
    assert ran == [("get_secret_number", "alice")]
    assert finished == [{"stopReason": "tool_use"}, {"stopReason": "end_turn"}]
    assert turn.status is RunStatus.completed, turn.reason
    assert list(turn.abandoned_calls) == []
    assert len(script.requests) == 2
    assert script.requests[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "Alice's number, then.",
                    "signature": "EqQBCgIYAhIM",
                },
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_secret_number",
                    "input": {"name": "alice"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "42"}],
        },
    ]


def test_a_reasoning_message_without_signature_is_left_out_of_the_request() -> None:
    backend = AnthropicBackend("m", api_key="k")
    body = backend.build_request(
        RunAgentInput(
            thread_id="t",
            run_id="r",
            messages=[
                UserMessage(id="u", content="hi"),
                ReasoningMessage(id="r1", content="unsigned thoughts"),
                ReasoningMessage(id="r2", content="signed thoughts", encrypted_value="sig"),
                AssistantMessage(id="a", content="Hello."),
            ],
        )
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "signed thoughts", "signature": "sig"},
            {"type": "text", "text": "Hello."},
        ],
    }
