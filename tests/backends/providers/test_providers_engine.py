"""What every provider backend owes the engine, checked once over a table of providers.

Each row of :data:`PROVIDERS` says how to build one backend against a loopback server
and how that server speaks the provider's wire format: a three-hop tool conversation
(text and two calls, then three calls of which one fails, then the answer), an error in
the middle of a stream, and a non-2xx answer with the provider's error body. The tests
below run every row through a real uvicorn server on 127.0.0.1, on asyncio and trio,
and check the same behaviour for each; the row's ``wire`` checks the bodies sent back
to the provider, which are its own. Each provider's translator quirks and request
mapping stay in its own ``test_<provider>.py``, whose stream builders the rows use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from toolrelay.backends.providers import (
    AnthropicBackend,
    CohereBackend,
    GoogleBackend,
    OllamaBackend,
    OpenAIChatBackend,
    OpenAIResponsesBackend,
    ProviderBackend,
)
from toolrelay.core import TextMessage, ToolCallMessage
from toolrelay.demo import DEMO_TOOLS
from toolrelay.errors import AgentRunError
from toolrelay.machines import RunStatus, ToolCallStatus
from toolrelay.protocol import Event, RunFinishedEvent, RunStartedEvent, SystemMessage
from toolrelay.runtime import Engine, Turn

# The shared helpers and the providers' stream builders sit next to this file
# (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
import _wire_anthropic as anthropic
import _wire_cohere as cohere
import _wire_google as google
import _wire_ollama as ollama
import _wire_openai as openai
from _gc_servers import (
    NDJSON,
    SSE,
    Failure,
    LoopbackServer,
    Recorded,
    ScriptedProvider,
    cohere_sse,
    collect,
    cut,
    gemini_sse,
    mock_backend_transport,
    ndjson,
    run_input,
    summarize as calls_of,
)
from _oa_servers import Outcome, collect as collect_closed, sse, summarize

Call = tuple[str | None, str, str, ToolCallStatus]  # id (None: made up here), name, args


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider as the harness drives it.

    Attributes:
        id: The test id.
        cls: The backend class.
        model: The model the backend asks for.
        base_path: What follows the server's URL in ``base_url``.
        frame: One scripted chunk as the provider puts it on the wire.
        media_type: The stream's ``Content-Type``.
        hops: The three answers of the tool conversation.
        texts: The assistant's texts the conversation ends with.
        calls: The two batches of calls, as the turn records them.
        path: The path every request goes to.
        name: The provider's name (``toolrelay run --provider``).
        env: The environment variables that may hold the key, in the order tried.
        auth: The backend's ``auth_headers()`` for a key (``None``: no key).
        tool_names: The tool names a request body declares.
        wire: Checks the three request bodies of the conversation (the provider's own).
        error_stream: A stream broken by the provider's error event.
        error_reason: The run's ``(message, code)`` for ``error_stream``.
        failure: A non-2xx answer with the provider's error body.
        failure_message: The :class:`AgentRunError` message for ``failure``.
        default_url: The URL a request goes to without ``base_url``.
        opening: The body field holding the conversation, and its value in the first
            request (the question alone).
        streams: Published streams the backend must play as its translator does,
            however the bytes are cut.
        named: Whether the translator is fed each chunk's SSE event name (its ``type``).
        expected: What some of ``streams`` amount to, written out.
        history: What precedes the question in the conversation.
    """

    id: str
    cls: type[ProviderBackend]
    model: str
    base_path: str
    frame: Callable[[Any], bytes]
    media_type: str
    hops: Sequence[list[Any]]
    texts: list[str]
    calls: list[list[Call]]
    path: str
    name: str
    env: tuple[str, ...]
    auth: Callable[[str | None], dict[str, str]]
    tool_names: Callable[[Any], list[str]]
    wire: Callable[[Recorded, Recorded, Recorded, Turn], None]
    error_stream: list[Any]
    error_reason: tuple[str, str | None]
    failure: Failure
    failure_message: str
    default_url: str
    opening: tuple[str, Any]
    streams: dict[str, list[Any]]
    named: bool = False
    expected: dict[str, Outcome] = field(default_factory=dict)
    history: list[Any] = field(default_factory=list)


def error_body(value: Any) -> bytes:
    return msgspec.json.encode(value)


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def anthropic_auth(key: str | None) -> dict[str, str]:
    version = {"anthropic-version": "2023-06-01"}
    return {**version, "x-api-key": key} if key else version


def google_auth(key: str | None) -> dict[str, str]:
    return {"x-goog-api-key": key} if key else {}


def function_names(body: Any) -> list[str]:
    return [t["function"]["name"] for t in body["tools"]]


QUESTION = "What are the secret numbers of alice and bob, where does alice live, who is there?"
ZED_ERROR = msgspec.json.encode({"error": "nobody called 'zed' has a secret number"}).decode()

# --- OpenAI Chat Completions and Responses -------------------------------------------------

DONE = "[DONE]"


def chat_frame(chunk: Any) -> bytes:
    return b"data: [DONE]\n\n" if chunk == DONE else sse([chunk])


def named_frame(chunk: Any) -> bytes:
    return sse([chunk], named=True)


def chat(chunks: list[Any], reply: str) -> list[Any]:
    return [openai.chunk(delta, finish, id=reply) for delta, finish in chunks] + [DONE]


CHAT_HOPS = [
    # Run 1: text, then two calls whose arguments interleave.
    chat(
        [
            ({"role": "assistant", "content": ""}, None),
            ({"content": "Let me look up "}, None),
            ({"content": "both secret numbers."}, None),
            ({"tool_calls": [openai.head(0, "call_a", "get_secret_number")]}, None),
            ({"tool_calls": [openai.head(1, "call_b", "get_secret_number")]}, None),
            ({"tool_calls": [openai.piece(0, '{"name": "al')]}, None),
            ({"tool_calls": [openai.piece(1, '{"name": "bob"}')]}, None),
            ({"tool_calls": [openai.piece(0, 'ice"}')]}, None),
            ({}, "tool_calls"),
        ],
        "chatcmpl-1",
    ),
    # Run 2: three calls, one of which fails, one without arguments; "stop" with calls.
    chat(
        [
            ({"role": "assistant", "content": None}, None),
            (
                {
                    "tool_calls": [
                        openai.head(0, "call_c", "lookup_city"),
                        openai.piece(0, '{"person": "alice"}'),
                    ]
                },
                None,
            ),
            (
                {
                    "tool_calls": [
                        openai.head(1, "call_d", "get_secret_number"),
                        openai.piece(1, '{"name": "zed"}'),
                    ]
                },
                None,
            ),
            ({"tool_calls": [openai.head(2, "call_e", "list_people")]}, None),
            ({}, "stop"),
        ],
        "chatcmpl-2",
    ),
    # Run 3: the answer.
    chat(
        [
            ({"role": "assistant", "content": "Alice: 42, Bob: 7. "}, None),
            ({"content": "Alice lives in Paris."}, None),
            ({}, "stop"),
        ],
        "chatcmpl-3",
    ),
]

RESPONSES_HOPS = [
    [
        openai.created("resp_1"),
        openai.message_added(0, "msg_1"),
        openai.text_delta(0, "msg_1", "Let me look up both secret numbers."),
        *openai.message_done(0, "msg_1", "Let me look up both secret numbers."),
        openai.call_added(1, "fc_a", "call_a", "get_secret_number"),
        openai.call_added(2, "fc_b", "call_b", "get_secret_number"),
        openai.args_delta(1, "fc_a", '{"name": "al'),
        openai.args_delta(2, "fc_b", '{"name": "bob"}'),
        openai.args_delta(1, "fc_a", 'ice"}'),
        *openai.call_done(1, "fc_a", "call_a", "get_secret_number", '{"name": "alice"}'),
        *openai.call_done(2, "fc_b", "call_b", "get_secret_number", '{"name": "bob"}'),
        openai.completed("resp_1"),
    ],
    [
        openai.created("resp_2"),
        openai.call_added(0, "fc_c", "call_c", "lookup_city"),
        openai.args_delta(0, "fc_c", '{"person": "alice"}'),
        *openai.call_done(0, "fc_c", "call_c", "lookup_city", '{"person": "alice"}'),
        openai.call_added(1, "fc_d", "call_d", "get_secret_number"),
        openai.args_delta(1, "fc_d", '{"name": "zed"}'),
        *openai.call_done(1, "fc_d", "call_d", "get_secret_number", '{"name": "zed"}'),
        openai.call_added(2, "fc_e", "call_e", "list_people"),
        *openai.call_done(2, "fc_e", "call_e", "list_people", ""),
        openai.completed("resp_2"),
    ],
    [
        openai.created("resp_3"),
        openai.message_added(0, "msg_3"),
        openai.text_delta(0, "msg_3", "Alice: 42, Bob: 7. "),
        openai.text_delta(0, "msg_3", "Alice lives in Paris."),
        *openai.message_done(0, "msg_3", "Alice: 42, Bob: 7. Alice lives in Paris."),
        openai.completed("resp_3"),
    ],
]

OPENAI_TEXTS = ["Let me look up both secret numbers.", "Alice: 42, Bob: 7. Alice lives in Paris."]


def lettered_calls(prefix: str) -> list[list[Call]]:
    """The calls of the OpenAI and Anthropic conversations, ids ``<prefix>a`` to ``e``."""
    return [
        [
            (f"{prefix}a", "get_secret_number", '{"name": "alice"}', ToolCallStatus.completed),
            (f"{prefix}b", "get_secret_number", '{"name": "bob"}', ToolCallStatus.completed),
        ],
        [
            (f"{prefix}c", "lookup_city", '{"person": "alice"}', ToolCallStatus.completed),
            (f"{prefix}d", "get_secret_number", '{"name": "zed"}', ToolCallStatus.failed),
            (f"{prefix}e", "list_people", "", ToolCallStatus.completed),
        ],
    ]


def chat_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    assert all(
        r.body["stream"] is True and r.body["model"] == "gpt-4o-mini"
        for r in (first, second, third)
    )
    # Run 2 carries the text and both calls as ONE assistant message, then the results.
    assert second.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Let me look up both secret numbers.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_secret_number", "arguments": '{"name": "alice"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_secret_number", "arguments": '{"name": "bob"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "42"},
        {"role": "tool", "tool_call_id": "call_b", "content": "7"},
    ]
    # Run 3 adds the second batch: the failed call's error reaches the model as its result.
    assert third.body["messages"][:4] == second.body["messages"]
    assistant, *results = third.body["messages"][4:]
    assert assistant["role"] == "assistant" and not assistant["content"]
    assert [(c["id"], c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        ("call_c", '{"person": "alice"}'),
        ("call_d", '{"name": "zed"}'),
        ("call_e", "{}"),
    ]
    assert results == [
        {"role": "tool", "tool_call_id": "call_c", "content": "Paris"},
        {"role": "tool", "tool_call_id": "call_d", "content": ZED_ERROR},
        {"role": "tool", "tool_call_id": "call_e", "content": '["alice","bob","carol"]'},
    ]


def responses_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}

    def output(call_id: str, text: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call_id, "output": text}

    assert all(r.body["stream"] is True for r in (first, second, third))
    assert second.body["input"][1:] == [
        {"type": "message", "role": "assistant", "content": "Let me look up both secret numbers."},
        call("call_a", "get_secret_number", '{"name": "alice"}'),
        call("call_b", "get_secret_number", '{"name": "bob"}'),
        output("call_a", "42"),
        output("call_b", "7"),
    ]
    assert third.body["input"][:6] == second.body["input"]
    assert third.body["input"][6:] == [
        call("call_c", "lookup_city", '{"person": "alice"}'),
        call("call_d", "get_secret_number", '{"name": "zed"}'),
        call("call_e", "list_people", "{}"),
        output("call_c", "Paris"),
        output("call_d", ZED_ERROR),
        output("call_e", '["alice","bob","carol"]'),
    ]


# --- Anthropic -------------------------------------------------------------------------------

ANTHROPIC_HOPS = [
    [
        anthropic.message_start("msg_1"),
        *anthropic.text_block(0, "Let me look up ", "both secret numbers."),
        *anthropic.tool_block(1, "toolu_a", "get_secret_number", '{"name": "al', 'ice"}'),
        *anthropic.tool_block(2, "toolu_b", "get_secret_number", '{"name": "bob"}'),
        *anthropic.message_end("tool_use"),
    ],
    [
        anthropic.message_start("msg_2"),
        *anthropic.thinking_block(0, "Now the city, and zed.", "sig2"),
        *anthropic.tool_block(1, "toolu_c", "lookup_city", '{"person": "alice"}'),
        *anthropic.tool_block(2, "toolu_d", "get_secret_number", '{"name": "zed"}'),
        *anthropic.tool_block(3, "toolu_e", "list_people"),
        *anthropic.message_end("tool_use"),
    ],
    [
        anthropic.message_start("msg_3"),
        *anthropic.text_block(0, "Alice: 42, Bob: 7. ", "Alice lives in Paris."),
        *anthropic.message_end("end_turn"),
    ],
]


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def anthropic_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    for request in (first, second, third):
        assert request.headers["anthropic-version"] == "2023-06-01"
        body = request.body
        assert body["stream"] is True and body["system"] == "Be brief."
        roles = [m["role"] for m in body["messages"]]
        # Alternation, starting with the user.
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)
        assert roles[-1] == "user"
    assert second.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look up both secret numbers."},
                tool_use("toolu_a", "get_secret_number", {"name": "alice"}),
                tool_use("toolu_b", "get_secret_number", {"name": "bob"}),
            ],
        },
        {
            "role": "user",
            "content": [tool_result("toolu_a", "42"), tool_result("toolu_b", "7")],
        },
    ]
    assert third.body["messages"][:3] == second.body["messages"]
    # Extended thinking with tool use: the run's signed thinking block goes back first
    # in its assistant message, signature and all (REASONING_ENCRYPTED_VALUE kept).
    assert third.body["messages"][3:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Now the city, and zed.", "signature": "sig2"},
                tool_use("toolu_c", "lookup_city", {"person": "alice"}),
                tool_use("toolu_d", "get_secret_number", {"name": "zed"}),
                tool_use("toolu_e", "list_people", {}),
            ],
        },
        {
            "role": "user",
            "content": [
                tool_result("toolu_c", "Paris"),
                {**tool_result("toolu_d", ZED_ERROR), "is_error": True},
                tool_result("toolu_e", '["alice","bob","carol"]'),
            ],
        },
    ]


# --- Gemini, Cohere, Ollama: the same questions, their own dialects --------------------------

DAVE_ANSWER = (
    "Alice's number is 42 and Bob's is 7. I know alice, bob and carol; nobody called Dave."
)


def dave_calls(ids: Sequence[str | None], compact: bool = True) -> list[list[Call]]:
    """The calls of the Gemini, Cohere and Ollama conversations."""
    dave = '{"name":"dave"}' if compact else '{"name": "dave"}'
    a, b, z, d = ids
    return [
        [
            (a, "get_secret_number", '{"name":"alice"}', ToolCallStatus.completed),
            (b, "get_secret_number", '{"name":"bob"}', ToolCallStatus.completed),
        ],
        [
            (z, "list_people", "{}", ToolCallStatus.completed),
            (d, "get_secret_number", dave, ToolCallStatus.failed),
        ],
    ]


def dave_error(turn: Turn) -> str:
    (error,) = [
        c.result.error for c in turn.conversation.tool_calls() if c.result and c.result.error
    ]
    return error


def dave_content(turn: Turn) -> str:
    (content,) = [
        c.result.content for c in turn.conversation.tool_calls() if c.result and c.result.error
    ]
    return content


GOOGLE_HOPS = [
    google.TEXT_BEFORE_CALLS,
    [
        google.chunk(
            google.call("list_people"),
            google.call("get_secret_number", {"name": "dave"}),
            finish="STOP",
        )
    ],
    [
        google.chunk(google.text("Alice's number is 42 and Bob's is 7. ")),
        google.chunk(
            google.text("I know alice, bob and carol; nobody called Dave."), finish="STOP"
        ),
    ],
]


def google_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    def called(function: str, **args: Any) -> dict[str, Any]:
        return {"functionCall": {"name": function, "args": args}}

    def answered(name: str, response: dict[str, Any]) -> dict[str, Any]:
        return {"functionResponse": {"name": name, "response": response}}

    assert all(r.query == "alt=sse" for r in (first, second, third))
    question = first.body["contents"][0]
    hop_one = [
        {
            "role": "model",
            "parts": [
                {"text": "Let me look up both secret numbers."},
                called("get_secret_number", name="alice"),
                called("get_secret_number", name="bob"),
            ],
        },
        {
            "role": "user",
            "parts": [
                answered("get_secret_number", {"result": 42}),
                answered("get_secret_number", {"result": 7}),
            ],
        },
    ]
    assert second.body["contents"] == [question, *hop_one]
    assert third.body["contents"] == [
        question,
        *hop_one,
        {
            "role": "model",
            "parts": [called("list_people"), called("get_secret_number", name="dave")],
        },
        {
            "role": "user",
            "parts": [
                answered("list_people", {"result": ["alice", "bob", "carol"]}),
                answered("get_secret_number", {"error": dave_error(turn)}),
            ],
        },
    ]


COHERE_HOPS = [
    cohere.TEXT_BEFORE_CALLS,
    [
        cohere.message_start(),
        *cohere.one_call(0, "list_people_z", "list_people", "nu", "ll"),
        *cohere.one_call(1, "get_secret_number_d", "get_secret_number", '{"name":', ' "dave"}'),
        cohere.message_end("TOOL_CALL"),
    ],
    [
        cohere.message_start(),
        cohere.content_start(),
        cohere.content_delta("Alice's number is 42 and Bob's is 7. "),
        cohere.content_delta("I know alice, bob and carol; nobody called Dave."),
        cohere.content_end(),
        cohere.message_end("COMPLETE"),
    ],
]


def cohere_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    def assistant(plan: str | None, *calls: tuple[str, str, str]) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "role": "assistant",
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in calls
            ],
        }
        if plan is not None:
            entry["tool_plan"] = plan
        return entry

    def result(call_id: str, data: str) -> dict[str, Any]:
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "content": [{"type": "document", "document": {"data": data}}],
        }

    for request in (first, second, third):
        assert request.body["model"] == cohere.MODEL and request.body["stream"] is True
    question = first.body["messages"][0]
    hop_one = [
        assistant(
            "I will look up both secret numbers.",
            ("get_secret_number_a", "get_secret_number", '{"name":"alice"}'),
            ("get_secret_number_b", "get_secret_number", '{"name":"bob"}'),
        ),
        result("get_secret_number_a", "42"),
        result("get_secret_number_b", "7"),
    ]
    assert second.body["messages"] == [question, *hop_one]
    assert third.body["messages"] == [
        question,
        *hop_one,
        assistant(
            None,
            ("list_people_z", "list_people", "{}"),
            ("get_secret_number_d", "get_secret_number", '{"name": "dave"}'),
        ),
        result("list_people_z", '["alice","bob","carol"]'),
        result("get_secret_number_d", dave_content(turn)),
    ]


OLLAMA_HOPS = [
    ollama.TEXT_BEFORE_CALLS,
    [
        ollama.line(
            tool_calls=[
                ollama.tc("list_people", {}),
                ollama.tc("get_secret_number", {"name": "dave"}),
            ]
        ),
        ollama.done(),
    ],
    [
        ollama.line("Alice's number is 42 and Bob's is 7. "),
        ollama.line("I know alice, bob and carol; nobody called Dave."),
        ollama.done(),
    ],
]


def ollama_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    def called(index: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"index": index, "name": name, "arguments": arguments},
        }

    for request in (first, second, third):
        assert request.body["model"] == ollama.MODEL and request.body["stream"] is True
    question = first.body["messages"][0]
    hop_one = [
        {
            "role": "assistant",
            "content": "Let me look up both secret numbers.",
            "tool_calls": [
                called(0, "get_secret_number", {"name": "alice"}),
                called(1, "get_secret_number", {"name": "bob"}),
            ],
        },
        {"role": "tool", "tool_name": "get_secret_number", "content": "42"},
        {"role": "tool", "tool_name": "get_secret_number", "content": "7"},
    ]
    assert second.body["messages"] == [question, *hop_one]
    assert third.body["messages"] == [
        question,
        *hop_one,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                called(0, "list_people", {}),
                called(1, "get_secret_number", {"name": "dave"}),
            ],
        },
        {"role": "tool", "tool_name": "list_people", "content": '["alice","bob","carol"]'},
        {"role": "tool", "tool_name": "get_secret_number", "content": dave_content(turn)},
    ]


# --- the table -------------------------------------------------------------------------------

PROVIDERS = [
    Provider(
        id="openai-chat",
        env=("OPENAI_API_KEY",),
        name="openai",
        cls=OpenAIChatBackend,
        model="gpt-4o-mini",
        base_path="/v1",
        frame=chat_frame,
        media_type=SSE,
        hops=CHAT_HOPS,
        texts=OPENAI_TEXTS,
        calls=lettered_calls("call_"),
        path="/v1/chat/completions",
        auth=bearer,
        tool_names=function_names,
        wire=chat_wire,
        error_stream=[*openai.CHAT_ERROR_MID_STREAM, DONE],
        error_reason=("The server had an error while processing your request.", "server_error"),
        failure=Failure(
            401,
            error_body(
                {
                    "error": {
                        "message": "Incorrect API key provided: sk-bad.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                }
            ),
        ),
        failure_message="openai error 401: Incorrect API key provided: sk-bad.",
        default_url="https://api.openai.com/v1/chat/completions",
        opening=("messages", [{"role": "user", "content": QUESTION}]),
        streams={
            "rechunk": [
                openai.chunk({"role": "assistant", "content": ""}),
                openai.chunk({"content": "Größe: ✓ "}),
                openai.chunk({"content": "日本語"}),
                *openai.CHAT_INTERLEAVED[1:-1],
                openai.calls(openai.head(2, "call_z", "list_people")),
                openai.chunk({}, "tool_calls"),
                DONE,
            ]
        },
        expected={
            "rechunk": Outcome(
                texts=["Größe: ✓ 日本語"],
                calls=[
                    ("call_a", "get_secret_number", '{"name": "alice"}'),
                    ("call_b", "lookup_city", '{"person": "bob"}'),
                    ("call_z", "list_people", ""),
                ],
                ended=["call_a", "call_b", "call_z"],
                reasoning=[],
                finish={"stopReason": "tool_calls"},
            )
        },
    ),
    Provider(
        id="openai-responses",
        env=("OPENAI_API_KEY",),
        name="openai-responses",
        cls=OpenAIResponsesBackend,
        model="gpt-4.1",
        base_path="/v1",
        frame=named_frame,
        media_type=SSE,
        hops=RESPONSES_HOPS,
        texts=OPENAI_TEXTS,
        calls=lettered_calls("call_"),
        path="/v1/responses",
        auth=bearer,
        tool_names=lambda body: [t["name"] for t in body["tools"]],
        wire=responses_wire,
        error_stream=openai.RESP_ERROR_MID_STREAM,
        error_reason=("The server had an error", "server_error"),
        failure=Failure(
            400,
            error_body({"error": {"message": "Unknown parameter: 'inputs'.", "type": "invalid"}}),
        ),
        failure_message="openai-responses error 400: Unknown parameter: 'inputs'.",
        default_url="https://api.openai.com/v1/responses",
        opening=("input", [{"type": "message", "role": "user", "content": QUESTION}]),
        streams={
            "rechunk": [
                *openai.RESP_TEXT_BEFORE_CALLS[:-1],
                openai.call_added(2, "fc_2", "call_b", "lookup_city"),
                openai.args_delta(2, "fc_2", '{"person": "bøb ✓"}'),
                *openai.call_done(2, "fc_2", "call_b", "lookup_city", '{"person": "bøb ✓"}'),
                openai.completed(),
            ]
        },
        named=True,
        expected={
            "rechunk": Outcome(
                texts=["Let me check."],
                calls=[
                    ("call_a", "get_secret_number", '{"name": "alice"}'),
                    ("call_b", "lookup_city", '{"person": "bøb ✓"}'),
                ],
                ended=["call_a", "call_b"],
                reasoning=[],
                finish={"stopReason": "tool_calls"},
            )
        },
    ),
    Provider(
        id="anthropic",
        env=("ANTHROPIC_API_KEY",),
        name="anthropic",
        cls=AnthropicBackend,
        model="claude-sonnet-4-5",
        base_path="",
        frame=named_frame,
        media_type=SSE,
        hops=ANTHROPIC_HOPS,
        texts=OPENAI_TEXTS,
        calls=lettered_calls("toolu_"),
        path="/v1/messages",
        auth=anthropic_auth,
        tool_names=lambda body: [t["name"] for t in body["tools"]],
        wire=anthropic_wire,
        error_stream=anthropic.ERROR_MID_STREAM,
        error_reason=("Overloaded", "overloaded_error"),
        failure=Failure(529, error_body(anthropic.OVERLOADED)),
        failure_message="anthropic error 529: Overloaded",
        default_url="https://api.anthropic.com/v1/messages",
        opening=("messages", [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]),
        streams={
            "rechunk": [
                anthropic.message_start(),
                anthropic.PING,
                *anthropic.thinking_block(0, "Größe ✓", "sig"),
                *anthropic.text_block(1, "Let me ", "check 日本語."),
                *anthropic.tool_block(2, "toolu_a", "get_secret_number", '{"na', 'me": "ålice"}'),
                *anthropic.tool_block(3, "toolu_z", "list_people"),
                *anthropic.message_end("tool_use"),
            ]
        },
        named=True,
        expected={
            "rechunk": Outcome(
                texts=["Let me check 日本語."],
                calls=[
                    ("toolu_a", "get_secret_number", '{"name": "ålice"}'),
                    ("toolu_z", "list_people", ""),
                ],
                ended=["toolu_a", "toolu_z"],
                reasoning=["Größe ✓"],
                finish={"stopReason": "tool_use"},
            )
        },
        history=[SystemMessage(id="sys", content="Be brief.")],
    ),
    Provider(
        id="google",
        env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        name="google",
        cls=GoogleBackend,
        model=google.MODEL,
        base_path="/v1beta",
        frame=gemini_sse,
        media_type=SSE,
        hops=GOOGLE_HOPS,
        texts=["Let me look up both secret numbers.", DAVE_ANSWER],
        calls=dave_calls([None] * 4),
        path=f"/v1beta/models/{google.MODEL}:streamGenerateContent",
        auth=google_auth,
        tool_names=lambda body: [d["name"] for d in body["tools"][0]["functionDeclarations"]],
        wire=google_wire,
        error_stream=google.ERROR_MID_STREAM,
        error_reason=("The model is overloaded.", "UNAVAILABLE"),
        failure=Failure(
            400,
            b'{"error": {"code": 400, "message": "API key not valid. Please pass a valid API'
            b' key.", "status": "INVALID_ARGUMENT"}}',
        ),
        failure_message="google error 400: API key not valid. Please pass a valid API key.",
        default_url=(
            "https://generativelanguage.googleapis.com/v1beta/models/"
            f"{google.MODEL}:streamGenerateContent?alt=sse"
        ),
        opening=("contents", [{"role": "user", "parts": [{"text": QUESTION}]}]),
        streams=google.FIXTURES,
    ),
    Provider(
        id="cohere",
        env=("CO_API_KEY", "COHERE_API_KEY"),
        name="cohere",
        cls=CohereBackend,
        model=cohere.MODEL,
        base_path="",
        frame=cohere_sse,
        media_type=SSE,
        hops=COHERE_HOPS,
        texts=["I will look up both secret numbers.", DAVE_ANSWER],
        calls=dave_calls(
            ["get_secret_number_a", "get_secret_number_b", "list_people_z", "get_secret_number_d"],
            compact=False,
        ),
        path="/v2/chat",
        auth=bearer,
        tool_names=function_names,
        wire=cohere_wire,
        error_stream=cohere.ERROR_MID_STREAM,
        error_reason=("internal server error, this has been reported to our developers", "error"),
        failure=Failure(401, b'{"id":"x","message":"invalid api token"}'),
        failure_message="cohere error 401: invalid api token",
        default_url="https://api.cohere.com/v2/chat",
        opening=("messages", [{"role": "user", "content": QUESTION}]),
        streams=cohere.FIXTURES,
        named=True,
    ),
    Provider(
        id="ollama",
        env=(),
        name="ollama",
        # Ollama takes no key: one given (for a proxy in front of it) goes as a bearer.
        cls=OllamaBackend,
        model=ollama.MODEL,
        base_path="",
        frame=ndjson,
        media_type=NDJSON,
        hops=OLLAMA_HOPS,
        texts=["Let me look up both secret numbers.", DAVE_ANSWER],
        calls=dave_calls([None] * 4),
        path="/api/chat",
        auth=bearer,
        tool_names=function_names,
        wire=ollama_wire,
        error_stream=ollama.ERROR_MID_STREAM,
        error_reason=(
            "an error was encountered while running the model: unexpected EOF",
            "ollama_error",
        ),
        failure=Failure(404, b'{"error":"model \\"qwen9\\" not found, try pulling it first"}'),
        failure_message='ollama error 404: model "qwen9" not found, try pulling it first',
        default_url="http://localhost:11434/api/chat",
        opening=("messages", [{"role": "user", "content": QUESTION}]),
        streams=ollama.FIXTURES,
    ),
]
BY_ID = {p.id: p for p in PROVIDERS}

each_provider = pytest.mark.parametrize("provider", PROVIDERS, ids=[p.id for p in PROVIDERS])


@pytest.fixture
def server(provider: Provider) -> Iterator[LoopbackServer]:
    with LoopbackServer(ScriptedProvider(provider.frame, provider.media_type, [])) as running:
        yield running


def has_headers(sent: Any, expected: dict[str, str]) -> bool:
    """Whether the request's headers (any case) carry every expected one."""
    return all(sent.get(name.lower()) == value for name, value in expected.items())


def loopback_backend(provider: Provider, server: LoopbackServer, key: str) -> ProviderBackend:
    return provider.cls(provider.model, api_key=key, base_url=server.url + provider.base_path)


async def run_turn(
    provider: Provider, server: LoopbackServer, *, key: str = "loop-key", **options: Any
) -> Turn:
    backend = loopback_backend(provider, server, key)
    try:
        async with Engine(backend, tools=DEMO_TOOLS, **options) as engine:
            return await engine.run_turn("thread-1", QUESTION, history=provider.history)
    finally:
        await backend.aclose()


# --- the engine, end to end ----------------------------------------------------------------


@pytest.mark.anyio
@each_provider
async def test_engine_runs_a_multi_hop_conversation_over_loopback_http(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = list(provider.hops)
    turn = await run_turn(provider, server)

    assert turn.status is RunStatus.completed, turn.reason
    assert turn.statistics().runs == 3
    assert [
        m.text
        for m in turn.conversation.messages
        if isinstance(m, TextMessage) and m.role == "assistant"
    ] == provider.texts
    batches = [m for m in turn.conversation.messages if isinstance(m, ToolCallMessage)]
    got = [[(c.id, c.name, c.arguments, c.status) for c in b.calls] for b in batches]
    # An id the provider did not give is made up here: only its uniqueness is checked.
    assert [
        [(call_id if want[0] else None, *rest) for (call_id, *rest), want in zip(b, w, strict=True)]
        for b, w in zip(got, provider.calls, strict=True)
    ] == provider.calls
    calls = list(turn.conversation.tool_calls())
    assert len({c.id for c in calls}) == len(calls), "ids never repeat across the conversation"

    first, second, third = server.app.requests
    for request in (first, second, third):
        assert request.path == provider.path
        assert has_headers(request.headers, provider.auth("loop-key"))
        assert provider.tool_names(request.body) == list(DEMO_TOOLS.names)
    key, opening = provider.opening
    assert first.body[key] == opening
    provider.wire(first, second, third, turn)


@pytest.mark.anyio
@each_provider
async def test_engine_fails_the_turn_with_the_providers_error_mid_stream(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = [provider.error_stream]
    turn = await run_turn(provider, server)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.message, turn.reason.code) == provider.error_reason
    (request,) = server.app.requests
    assert request.path == provider.path


@pytest.mark.anyio
@each_provider
async def test_engine_fails_the_turn_on_a_non_2xx_answer(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = [provider.failure]
    turn = await run_turn(provider, server)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.code == str(provider.failure.status)
    assert turn.reason.message == provider.failure_message
    assert len(server.app.requests) == 1, "an answer that is not worth retrying is not retried"


@pytest.mark.anyio
@each_provider
async def test_a_non_2xx_answer_is_an_agent_run_error_with_the_providers_message(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = [provider.failure]
    backend = loopback_backend(provider, server, "sk-bad")
    try:
        with pytest.raises(AgentRunError) as caught:
            await collect(backend, run_input())
    finally:
        await backend.aclose()
    assert caught.value.code == str(provider.failure.status)
    assert caught.value.message == provider.failure_message


# --- where the request goes, with which key ---------------------------------------------------


@pytest.mark.anyio
@each_provider
async def test_the_request_goes_to_the_providers_endpoint_with_the_key_header(
    provider: Provider,
) -> None:
    requests: list[httpx.Request] = []
    backend = mock_backend(provider, [body_of(provider, provider.hops[-1])], requests)
    try:
        await collect(backend, run_input())
    finally:
        await backend.aclose()
    (request,) = requests
    assert str(request.url) == provider.default_url
    assert has_headers(request.headers, provider.auth("test-key"))
    if provider.media_type == SSE:
        assert request.headers["accept"] == "text/event-stream"
    if not provider.env:  # a provider that needs no key sends none unless given one
        keyless = mock_backend(provider, [body_of(provider, provider.hops[-1])], requests, key=None)
        try:
            await collect(keyless, run_input())
        finally:
            await keyless.aclose()
        assert "authorization" not in requests[-1].headers


@each_provider
def test_the_api_key_comes_from_the_environment_in_order_and_is_never_shown(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = provider.cls
    assert (cls.name, cls.api_key_env) == (provider.name, provider.env)
    for variable in cls.api_key_env:
        monkeypatch.delenv(variable, raising=False)
    assert cls("m").auth_headers() == provider.auth(None)
    # The variables are tried in order: set from the last to the first, each one wins.
    for variable in reversed(cls.api_key_env):
        monkeypatch.setenv(variable, f"key-from-{variable}")
        backend = cls("m")
        assert backend.auth_headers() == provider.auth(f"key-from-{variable}")
        assert f"key-from-{variable}" not in repr(backend)
    assert cls("m", api_key="explicit").auth_headers() == provider.auth("explicit")


@pytest.mark.anyio
async def test_unsigned_reasoning_is_not_sent_and_an_engine_may_refuse_reasoning() -> None:
    # Anthropic's own (it takes reasoning back): include_reasoning=False overrides the
    # backend's takes_reasoning, so the third request carries no thinking block.
    provider = BY_ID["anthropic"]
    with LoopbackServer(ScriptedProvider(provider.frame, provider.media_type, [])) as server:
        server.app.script = list(provider.hops)
        turn = await run_turn(provider, server, include_reasoning=False)
        third = server.app.requests[2]
    assert turn.status is RunStatus.completed, turn.reason
    blocks = [b["type"] for m in third.body["messages"] for b in m["content"]]
    assert "thinking" not in blocks


# --- the stream through the backend, however the bytes are cut -------------------------------


def mock_backend(
    provider: Provider,
    pieces: list[bytes],
    requests: list[httpx.Request] | None = None,
    *,
    key: str | None = "test-key",
) -> ProviderBackend:
    """The provider's backend at its default URL, answered by ``pieces`` over
    httpx.MockTransport (the real httpx and httpx-sse code runs)."""
    transport = mock_backend_transport(pieces, provider.media_type, requests)
    return provider.cls(provider.model, api_key=key, transport=transport)


def body_of(provider: Provider, chunks: list[Any]) -> bytes:
    return b"".join(provider.frame(chunk) for chunk in chunks)


Played = tuple[Outcome, tuple[Any, ...]]


def outcome(events: Sequence[Any]) -> Played:
    """The events' :class:`Outcome` (checked for AG-UI order on the way), and their calls
    with whether each names a parent message."""
    return summarize(events), calls_of(events).shape()


def translated(provider: Provider, backend: ProviderBackend, chunks: list[Any]) -> Played:
    """What a translator of ``backend`` (a fresh one: a backend numbers the calls it makes
    ids for across its runs) makes of ``chunks``, fed one by one."""
    translator = backend.new_translator()
    events: list[Event] = []
    for chunk in chunks:
        if chunk != DONE:  # the end of a Chat Completions stream is the backend's
            events.extend(translator.feed(chunk, chunk.get("type") if provider.named else None))
    events.extend(translator.finish())
    return outcome(events)


def played(provider: Provider, pieces: list[bytes], backend_name: str) -> Played:
    async def main() -> Played:
        return outcome(await collect_closed(mock_backend(provider, pieces)))

    return anyio.run(main, backend=backend_name)


STREAMS = [
    pytest.param(provider, name, id=f"{provider.id}-{name}")
    for provider in PROVIDERS
    for name in provider.streams
]


@pytest.mark.anyio
@pytest.mark.parametrize(("provider", "name"), STREAMS)
async def test_the_backend_plays_each_published_stream_as_its_translator_does(
    provider: Provider, name: str
) -> None:
    chunks = provider.streams[name]
    fresh = mock_backend(provider, [])
    expected = translated(provider, fresh, chunks)
    await fresh.aclose()
    events = await collect_closed(mock_backend(provider, [body_of(provider, chunks)]))
    assert events[0] == RunStartedEvent(thread_id="t1", run_id="r1")
    got = outcome(events)
    assert got == expected
    if name in provider.expected:
        assert got[0] == provider.expected[name]
    finished = [e for e in events if isinstance(e, RunFinishedEvent)]
    assert all((e.thread_id, e.run_id) == ("t1", "r1") for e in finished)


@pytest.mark.parametrize("backend_name", ["asyncio", "trio"])
@each_provider
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_rechunking_of_the_bytes_yields_the_same_calls_and_text(
    backend_name: str, provider: Provider, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(provider.streams)), label="stream")
    body = body_of(provider, provider.streams[name])
    cuts = data.draw(st.lists(st.integers(1, len(body) - 1), max_size=40), label="cuts")
    whole = played(provider, [body], backend_name)
    assert played(provider, cut(body, cuts), backend_name) == whole


@each_provider
def test_one_byte_at_a_time_yields_the_same_calls_and_text(provider: Provider) -> None:
    for chunks in provider.streams.values():
        body = body_of(provider, chunks)
        bytewise = [body[i : i + 1] for i in range(len(body))]
        assert played(provider, bytewise, "trio") == played(provider, [body], "asyncio")
