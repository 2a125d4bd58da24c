"""The Gemini adapter: its translator on published stream shapes, the same streams through
the backend (real httpx + httpx-sse over MockTransport; re-chunked by Hypothesis in
``test_providers_engine.py``), the requests it builds and refuses, and the engine
against a loopback Gemini."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from toolrelay import ConversationError, Engine, InvalidEventError, MalformedEventError, RunStatus
from toolrelay.backends.providers._base import Capabilities
from toolrelay.backends.providers._google import (
    GoogleBackend,
    GoogleTranslator,
    _check_turns,
    _Turn,
)
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    AssistantMessage,
    DataSource,
    DeveloperMessage,
    FunctionCall,
    ImagePart,
    Message,
    ReasoningMessageContentEvent,
    ReasoningStartEvent,
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
    LoopbackServer,
    ScriptedProvider,
    collect,
    gemini_sse,
    mock_backend_transport,
    run_input,
    summarize,
    translate,
)
from _wire_google import (
    ERROR_MID_STREAM,
    MODEL,
    NESTED_ARGS,
    ONE_CALL,
    PARALLEL_CALLS,
    SAME_CALL_TWICE_ACROSS_CHUNKS,
    TEXT_BEFORE_CALLS,
    TEXT_ONLY,
    ZERO_ARG_CALLS,
    call,
    chunk,
    text,
)


def ids(prefix: str) -> Any:
    numbers = iter(range(1, 1000))
    return lambda: f"{prefix}{next(numbers)}"


def translator() -> GoogleTranslator:
    return GoogleTranslator(message_ids=ids("msg_"))


# --- published stream shapes (GenerateContentResponse per SSE data) ---------------------


# --- the translator -------------------------------------------------------------------


def test_text_only_streams_one_message_and_finishes_end_turn() -> None:
    events = translate(translator(), TEXT_ONLY)
    summary = summarize(events)
    assert summary.text == "The sky is blue because of Rayleigh scattering."
    assert summary.calls == ()
    assert summary.finished == {"stopReason": "end_turn", "providerStopReason": "STOP"}
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
    assert (usage.provider, usage.model, usage.input_tokens, usage.output_tokens) == (
        "google",
        MODEL,
        12,
        7,
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
        ("call_1", "get_weather", '{"city":"Paris"}', True)
    ]
    assert summary.finished == {"stopReason": "tool_use", "providerStopReason": "STOP"}


def test_parallel_calls_with_one_name_stay_distinct() -> None:
    summary = summarize(translate(translator(), PARALLEL_CALLS))
    assert [(c.id, c.name, c.arguments) for c in summary.calls] == [
        ("call_1", "get_secret_number", '{"name":"alice"}'),
        ("call_2", "get_secret_number", '{"name":"bob"}'),
        ("call_3", "lookup_city", '{"person":"alice"}'),
    ]
    assert all(c.ended for c in summary.calls)


def test_identical_calls_in_two_chunks_are_two_calls() -> None:
    summary = summarize(translate(translator(), SAME_CALL_TWICE_ACROSS_CHUNKS))
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
    assert summary.finished == {"stopReason": "tool_use", "providerStopReason": "STOP"}


def test_an_error_mid_stream_closes_the_text_and_is_a_run_error() -> None:
    events = translate(translator(), ERROR_MID_STREAM)
    summary = summarize(events)
    assert summary.text == "Let me think"
    assert summary.error == ("The model is overloaded.", "UNAVAILABLE")
    assert summary.finished is None
    assert [type(e).__name__ for e in events][-2:] == ["TextMessageEndEvent", "RunErrorEvent"]


def test_arguments_keep_their_json_exactly() -> None:
    (only,) = summarize(translate(translator(), NESTED_ARGS)).calls
    assert only.arguments == '{"steps":[{"n":1,"tags":["a","b"]}],"note":"é ✓","ok":true}'


@pytest.mark.parametrize(
    ("reason", "stop_reason"),
    [
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("OTHER", "other"),
    ],
)
def test_finish_reasons_complete_the_run_with_a_stop_reason(reason: str, stop_reason: str) -> None:
    summary = summarize(translate(translator(), [chunk(text("Partial"), finish=reason)]))
    assert summary.finished == {"stopReason": stop_reason, "providerStopReason": reason}


def test_max_tokens_after_a_call_keeps_max_tokens() -> None:
    events = translate(translator(), [chunk(call("list_people"), finish="MAX_TOKENS")])
    assert summarize(events).finished == {
        "stopReason": "max_tokens",
        "providerStopReason": "MAX_TOKENS",
    }


def test_a_malformed_function_call_fails_the_run() -> None:
    bad = chunk(finish="MALFORMED_FUNCTION_CALL")
    bad["candidates"][0]["finishMessage"] = "Malformed function call: print(x"
    summary = summarize(translate(translator(), [bad]))
    assert summary.error == ("Malformed function call: print(x", "malformed_function_call")
    assert summary.finished is None


def test_a_blocked_prompt_finishes_content_filter() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": MODEL}
    summary = summarize(translate(translator(), [blocked]))
    assert summary.finished == {"stopReason": "content_filter", "providerStopReason": "SAFETY"}


def test_thought_parts_are_reasoning_not_text() -> None:
    events = translate(
        translator(),
        [
            chunk({"text": "The user wants numbers.", "thought": True}),
            chunk(text("Here they are."), finish="STOP"),
        ],
    )
    assert isinstance(events[0], ReasoningStartEvent)
    reasoning = [e.delta for e in events if isinstance(e, ReasoningMessageContentEvent)]
    assert reasoning == ["The user wants numbers."]
    assert summarize(events).text == "Here they are."
    names = [type(e).__name__ for e in events]
    assert names.index("ReasoningEndEvent") < names.index("TextMessageStartEvent")


def test_chunks_after_the_end_are_ignored() -> None:
    t = translator()
    t.feed(chunk(text("Done."), finish="STOP"))
    assert t.ended
    assert t.feed(chunk(call("list_people"), finish="STOP")) == []
    assert t.finish() == []


def test_a_stream_that_stops_without_finish_reason_leaves_the_run_open() -> None:
    events = translate(translator(), [chunk(text("Half a thou"))])
    assert summarize(events).finished is None
    assert isinstance(events[-1], TextMessageEndEvent)


def test_a_chunk_that_is_not_an_object_is_malformed() -> None:
    with pytest.raises(MalformedEventError):
        translator().feed([1, 2])


def test_a_chunk_of_the_wrong_shape_is_invalid() -> None:
    with pytest.raises(InvalidEventError, match="GenerateContentResponse"):
        translator().feed({"candidates": "none"})


# --- through the backend: real httpx and httpx-sse ----------------------------------------


def sse_bytes(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(gemini_sse(c) for c in chunks)


def backend_for(pieces: list[bytes], requests: list[httpx.Request] | None = None) -> GoogleBackend:
    return GoogleBackend(
        MODEL, api_key="test-key", transport=mock_backend_transport(pieces, SSE, requests)
    )


# --- requests -----------------------------------------------------------------------------


def secret_conversation() -> list[Message]:
    return [
        SystemMessage(id="s1", content="You are terse."),
        UserMessage(id="u1", content="What are the secret numbers?"),
        AssistantMessage(
            id="a1",
            content="Let me look.",
            tool_calls=[
                ToolCall(
                    id="call_1",
                    function=FunctionCall(name="get_secret_number", arguments='{"name":"alice"}'),
                ),
                ToolCall(
                    id="call_2",
                    function=FunctionCall(name="get_secret_number", arguments='{"name":"bob"}'),
                ),
                ToolCall(id="call_3", function=FunctionCall(name="list_people", arguments="")),
            ],
        ),
        # Out of order on purpose: Gemini matches results by position.
        ToolMessage(id="t2", tool_call_id="call_2", content="7"),
        ToolMessage(id="t3", tool_call_id="call_3", content='["alice","bob"]'),
        ToolMessage(
            id="t1",
            tool_call_id="call_1",
            content='{"error":"boom"}',
            error="boom",
        ),
    ]


def test_results_become_function_responses_in_the_calls_order() -> None:
    backend = GoogleBackend(MODEL, api_key="k")
    body = backend.build_request(run_input(secret_conversation(), DEMO_TOOLS.definitions()))
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "What are the secret numbers?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Let me look."},
                {"functionCall": {"name": "get_secret_number", "args": {"name": "alice"}}},
                {"functionCall": {"name": "get_secret_number", "args": {"name": "bob"}}},
                {"functionCall": {"name": "list_people", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_secret_number", "response": {"error": "boom"}}},
                {"functionResponse": {"name": "get_secret_number", "response": {"result": 7}}},
                {
                    "functionResponse": {
                        "name": "list_people",
                        "response": {"result": ["alice", "bob"]},
                    }
                },
            ],
        },
    ]
    (tools,) = body["tools"]
    declared = {d["name"]: d for d in tools["functionDeclarations"]}
    assert set(declared) == set(DEMO_TOOLS.names)
    assert declared["get_secret_number"]["parametersJsonSchema"]["required"] == ["name"]


def test_object_results_are_sent_as_they_are_and_text_is_wrapped() -> None:
    messages: list[Message] = [
        UserMessage(id="u1", content="Weather?"),
        AssistantMessage(
            id="a1",
            tool_calls=[
                ToolCall(
                    id="c1", function=FunctionCall(name="get_weather", arguments='{"city":"Paris"}')
                ),
                ToolCall(id="c2", function=FunctionCall(name="note", arguments="{}")),
            ],
        ),
        ToolMessage(id="t1", tool_call_id="c1", content='{"forecast":"sunny"}'),
        ToolMessage(id="t2", tool_call_id="c2", content=[TextPart(text="plain words")]),
    ]
    body = GoogleBackend(MODEL, api_key="k").build_request(run_input(messages))
    responses = [p["functionResponse"]["response"] for p in body["contents"][2]["parts"]]
    assert responses == [{"forecast": "sunny"}, {"result": "plain words"}]


def test_adjacent_messages_of_one_side_form_one_turn() -> None:
    messages: list[Message] = [
        DeveloperMessage(id="d1", content="Be brief."),
        UserMessage(id="u1", content="Hello"),
        UserMessage(
            id="u2",
            content=[
                TextPart(text="and this picture"),
                ImagePart(source=DataSource(value="aGk=", mime_type="image/png")),
                ImagePart(source=UrlSource(value="gs://b/cat.jpg", mime_type="image/jpeg")),
            ],
        ),
        AssistantMessage(id="a1", content="Hi."),
        AssistantMessage(id="a2", content="Nice cat."),
        AssistantMessage(id="a3"),  # nothing to say: left out
        UserMessage(id="u3", content="Thanks"),
    ]
    body = GoogleBackend(MODEL, api_key="k").build_request(run_input(messages))
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "Hello"},
                {"text": "and this picture"},
                {"inlineData": {"mimeType": "image/png", "data": "aGk="}},
                {"fileData": {"fileUri": "gs://b/cat.jpg", "mimeType": "image/jpeg"}},
            ],
        },
        {"role": "model", "parts": [{"text": "Hi."}, {"text": "Nice cat."}]},
        {"role": "user", "parts": [{"text": "Thanks"}]},
    ]


def test_options_are_merged_into_the_body() -> None:
    backend = GoogleBackend(MODEL, api_key="k", options={"generationConfig": {"temperature": 0}})
    assert backend.build_request(run_input())["generationConfig"] == {"temperature": 0}
    assert "tools" not in backend.build_request(run_input())


def calls_message(*names: str) -> AssistantMessage:
    return AssistantMessage(
        id="a1",
        tool_calls=[
            ToolCall(id=f"c{i}", function=FunctionCall(name=name, arguments="{}"))
            for i, name in enumerate(names, 1)
        ],
    )


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        (
            [AssistantMessage(id="a0", content="Hi!"), UserMessage(id="u1", content="Hey")],
            "begin with a user turn",
        ),
        (
            [UserMessage(id="u1", content="Go"), calls_message("list_people")],
            "asked for 1 function call",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                calls_message("list_people", "list_people"),
                ToolMessage(id="t1", tool_call_id="c1", content="[]"),
            ],
            "asked for 2 function call",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                calls_message("list_people"),
                UserMessage(id="u2", content="Never mind"),
                ToolMessage(id="t1", tool_call_id="c1", content="[]"),
            ],
            "not a call of the model turn just before it",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                ToolMessage(id="t1", tool_call_id="c9", content="1"),
            ],
            "not a call of the model turn just before it",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                AssistantMessage(
                    id="a1",
                    tool_calls=[
                        ToolCall(id="c1", function=FunctionCall(name="f", arguments="[1]"))
                    ],
                ),
                ToolMessage(id="t1", tool_call_id="c1", content="1"),
            ],
            "not a JSON object",
        ),
        (
            [
                UserMessage(id="u1", content="Go"),
                AssistantMessage(
                    id="a1",
                    tool_calls=[
                        ToolCall(id="c1", function=FunctionCall(name="f", arguments="{oops"))
                    ],
                ),
                ToolMessage(id="t1", tool_call_id="c1", content="1"),
            ],
            "not JSON",
        ),
        ([SystemMessage(id="s1", content="Only a system prompt")], "nothing to send"),
    ],
)
def test_conversations_gemini_refuses_are_refused_before_sending(
    messages: list[Message], match: str
) -> None:
    with pytest.raises(ConversationError, match=match):
        GoogleBackend(MODEL, api_key="k").build_request(run_input(messages))


def test_the_turn_check_refuses_two_turns_of_one_role_and_orphan_responses() -> None:
    with pytest.raises(ConversationError, match="must alternate"):
        _check_turns([_Turn("user"), _Turn("user")])
    orphan = _Turn("user", responses=[("c1", {"functionResponse": {}})])
    with pytest.raises(ConversationError, match="asked for no function call"):
        _check_turns([_Turn("user"), _Turn("model"), orphan])


@pytest.mark.anyio
async def test_refusals_happen_before_any_network_call() -> None:
    requests: list[httpx.Request] = []

    class NoTools(GoogleBackend):
        capabilities = Capabilities(
            streaming=True, tools=False, tool_ids=False, parallel_calls=True
        )

    backend = NoTools(MODEL, api_key="k", transport=mock_backend_transport([b""], SSE, requests))
    with pytest.raises(ConversationError, match="does not support tools"):
        await collect(backend, run_input(tools=DEMO_TOOLS.definitions()))
    plain = backend_for([b""], requests)
    with pytest.raises(ConversationError, match="begin with a user turn"):
        await collect(plain, run_input([AssistantMessage(id="a", content="Hi")]))
    await backend.aclose()
    await plain.aclose()
    assert requests == []


@pytest.mark.anyio
async def test_thought_signatures_go_back_on_their_calls() -> None:
    signed = chunk(
        {**call("get_secret_number", {"name": "alice"}), "thoughtSignature": "c2lnLTE="},
        call("get_secret_number", {"name": "bob"}),
        finish="STOP",
    )
    backend = backend_for([sse_bytes([signed])])
    try:
        events = await collect(backend, run_input())
    finally:
        await backend.aclose()
    first, second = summarize(events).calls
    messages: list[Message] = [
        UserMessage(id="u1", content="Numbers?"),
        AssistantMessage(
            id="a1",
            tool_calls=[
                ToolCall(
                    id=first.id, function=FunctionCall(name=first.name, arguments=first.arguments)
                ),
                ToolCall(
                    id=second.id,
                    function=FunctionCall(name=second.name, arguments=second.arguments),
                ),
            ],
        ),
        ToolMessage(id="t1", tool_call_id=first.id, content="42"),
        ToolMessage(id="t2", tool_call_id=second.id, content="7"),
    ]
    parts = backend.build_request(run_input(messages))["contents"][1]["parts"]
    assert parts[0]["thoughtSignature"] == "c2lnLTE="
    assert "thoughtSignature" not in parts[1]


def test_capabilities_follow_the_matrix() -> None:
    caps = GoogleBackend.capabilities
    # Gemini 3 and later give call ids (functionCall.id); earlier models' calls get one.
    assert (caps.streaming, caps.tools, caps.tool_ids, caps.parallel_calls) == (
        True,
        True,
        True,
        True,
    )
    assert (
        GoogleBackend("models/gemini-2.0-flash", api_key="k")
        .endpoint()
        .endswith("/models/gemini-2.0-flash:streamGenerateContent?alt=sse")
    )


# --- end to end: the engine against a loopback Gemini ----------------------------------------


# --- Gemini 3: the provider's call ids ------------------------------------------------------


def call_with_id(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    """A Gemini 3 ``functionCall`` part: it carries the provider's ``id``."""
    return {"functionCall": {"name": name, "args": args, "id": call_id}}


def test_the_providers_call_id_is_kept_and_one_is_made_only_when_absent() -> None:
    events = translate(
        GoogleTranslator(),
        [
            chunk(
                call_with_id("get_secret_number", {"name": "alice"}, "k3x9a1"),
                call("get_secret_number", {"name": "bob"}),
                # A repeated id would merge two calls: the second gets one of its own.
                call_with_id("get_secret_number", {"name": "carol"}, "k3x9a1"),
                finish="STOP",
            )
        ],
    )
    calls = summarize(events).calls
    assert [(c.id, c.arguments) for c in calls] == [
        ("k3x9a1", '{"name":"alice"}'),
        ("call_1", '{"name":"bob"}'),
        ("call_2", '{"name":"carol"}'),
    ]


@pytest.fixture
def gemini_3_server() -> Iterator[LoopbackServer]:
    script: list[list[Any]] = [
        [
            chunk(
                {
                    **call_with_id("get_secret_number", {"name": "alice"}, "p1q2r3"),
                    "thoughtSignature": "c2lnLWE=",
                },
            ),
            chunk(call_with_id("get_secret_number", {"name": "bob"}, "s4t5u6")),
            chunk(text(""), finish="STOP"),
        ],
        [chunk(text("42 and 7."), finish="STOP")],
    ]
    with LoopbackServer(ScriptedProvider(gemini_sse, SSE, script)) as server:
        yield server


@pytest.mark.anyio
async def test_gemini_3_call_ids_go_back_on_the_calls_and_their_responses(
    gemini_3_server: LoopbackServer,
) -> None:
    # Two parallel calls of one function: only the ids pair each response with its call.
    backend = GoogleBackend(MODEL, api_key="k", base_url=f"{gemini_3_server.url}/v1beta")
    try:
        async with Engine(backend, tools=DEMO_TOOLS) as engine:
            turn = await engine.run_turn("thread-g3", "What are the secret numbers?")
    finally:
        await backend.aclose()
    assert turn.status is RunStatus.completed, turn.reason
    assert [c.id for c in turn.conversation.tool_calls()] == ["p1q2r3", "s4t5u6"]
    _, second = gemini_3_server.app.requests
    model_turn, results_turn = second.body["contents"][1:]
    assert [p["functionCall"] for p in model_turn["parts"]] == [
        {"name": "get_secret_number", "args": {"name": "alice"}, "id": "p1q2r3"},
        {"name": "get_secret_number", "args": {"name": "bob"}, "id": "s4t5u6"},
    ]
    assert model_turn["parts"][0]["thoughtSignature"] == "c2lnLWE="
    assert [
        (p["functionResponse"]["id"], p["functionResponse"]["response"])
        for p in results_turn["parts"]
    ] == [
        ("p1q2r3", {"result": 42}),
        ("s4t5u6", {"result": 7}),
    ]


def test_calls_whose_ids_gemini_did_not_give_go_back_without_one() -> None:
    # Gemini 2.x: no ids on the wire, so none are invented on the way back.
    backend = GoogleBackend(MODEL, api_key="k")
    body = backend.build_request(run_input(secret_conversation()))
    for content in body["contents"]:
        for part in content["parts"]:
            assert "id" not in part.get("functionCall", {})
            assert "id" not in part.get("functionResponse", {})
