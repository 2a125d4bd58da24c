"""OpenAI's streams as published: Chat Completions chunks and Responses API events.

The builders serve the provider's own tests; ``CHAT`` and ``RESPONSES`` are its rows of
the engine harness (``test_providers_engine.py``): the conversation scripted in these
formats, and what the provider is sent back.
"""

from __future__ import annotations

from typing import Any

from _gc_servers import SSE, Failure, Recorded
from _oa_servers import Outcome, sse
from _provider_table import (
    QUESTION,
    ZED_ERROR,
    ZED_TEXTS,
    Provider,
    bearer,
    error_body,
    function_names,
    lettered_calls,
    named_frame,
)

from toolrelay import Turn
from toolrelay.backends.providers import OpenAIChatBackend, OpenAIResponsesBackend


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, id: str = "chatcmpl-1"
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
    }


def head(index: int, call_id: str | None, name: str) -> dict[str, Any]:
    """The first piece of a call: id, type and name, empty arguments."""
    piece: dict[str, Any] = {
        "index": index,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    if call_id is not None:
        piece["id"] = call_id
    return piece


def piece(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


def calls(*pieces: dict[str, Any]) -> dict[str, Any]:
    return chunk({"tool_calls": list(pieces)})


ROLE = chunk({"role": "assistant", "content": None})


CHAT_ERROR_MID_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Half an ans"}),
    {
        "error": {
            "message": "The server had an error while processing your request.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    },
]


def created(response_id: str = "resp_1") -> dict[str, Any]:
    return {
        "type": "response.created",
        "sequence_number": 0,
        "response": {
            "id": response_id,
            "object": "response",
            "status": "in_progress",
            "output": [],
        },
    }


def message_added(index: int, item_id: str) -> dict[str, Any]:
    return {
        "type": "response.output_item.added",
        "output_index": index,
        "item": {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        },
    }


def text_delta(index: int, item_id: str, delta: str) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": index,
        "content_index": 0,
        "delta": delta,
    }


def message_done(index: int, item_id: str, text: str) -> list[dict[str, Any]]:
    part = {"type": "output_text", "text": text, "annotations": []}
    return [
        {
            "type": "response.output_text.done",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.content_part.done",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "part": part,
        },
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": {
                "id": item_id,
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            },
        },
    ]


def call_added(index: int, item_id: str, call_id: str, name: str) -> dict[str, Any]:
    return {
        "type": "response.output_item.added",
        "output_index": index,
        "item": {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": name,
        },
    }


def args_delta(index: int, item_id: str, delta: str) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "item_id": item_id,
        "output_index": index,
        "delta": delta,
    }


def reasoning_item(index: int, item_id: str, *, done: bool = False) -> dict[str, Any]:
    return {
        "type": f"response.output_item.{'done' if done else 'added'}",
        "output_index": index,
        "item": {"id": item_id, "type": "reasoning", "summary": [], "content": []},
    }


def summary_delta(item_id: str, summary_index: int, delta: str) -> dict[str, Any]:
    return {
        "type": "response.reasoning_summary_text.delta",
        "item_id": item_id,
        "output_index": 0,
        "summary_index": summary_index,
        "delta": delta,
    }


def reasoning_text_delta(item_id: str, content_index: int, delta: str) -> dict[str, Any]:
    return {
        "type": "response.reasoning_text.delta",
        "item_id": item_id,
        "output_index": 0,
        "content_index": content_index,
        "delta": delta,
    }


def call_done(
    index: int, item_id: str, call_id: str, name: str, arguments: str
) -> list[dict[str, Any]]:
    return [
        {
            "type": "response.function_call_arguments.done",
            "item_id": item_id,
            "output_index": index,
            "arguments": arguments,
        },
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": {
                "id": item_id,
                "type": "function_call",
                "status": "completed",
                "arguments": arguments,
                "call_id": call_id,
                "name": name,
            },
        },
    ]


def completed(response_id: str = "resp_1") -> dict[str, Any]:
    return {
        "type": "response.completed",
        "response": {"id": response_id, "object": "response", "status": "completed"},
    }


def incomplete(reason: str, response_id: str = "resp_1") -> dict[str, Any]:
    """The end of a response cut off (``max_output_tokens``, ``content_filter``)."""
    return {
        "type": "response.incomplete",
        "response": {
            "id": response_id,
            "object": "response",
            "status": "incomplete",
            "incomplete_details": {"reason": reason},
        },
    }


RESP_ERROR_MID_STREAM = [
    created(),
    message_added(0, "msg_1"),
    text_delta(0, "msg_1", "Half an ans"),
    {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error",
        "param": None,
        "sequence_number": 4,
    },
]


CHAT_INTERLEAVED = [
    ROLE,
    calls(head(0, "call_a", "get_secret_number")),
    calls(head(1, "call_b", "lookup_city")),
    calls(piece(0, '{"name"')),
    calls(piece(1, '{"person"')),
    calls(piece(0, ': "alice"}'), piece(1, ': "bob"}')),
    chunk({}, "tool_calls"),
]
RESP_TEXT_BEFORE_CALLS = [
    created(),
    message_added(0, "msg_1"),
    text_delta(0, "msg_1", "Let me check."),
    *message_done(0, "msg_1", "Let me check."),
    call_added(1, "fc_1", "call_a", "get_secret_number"),
    args_delta(1, "fc_1", '{"name": "alice"}'),
    *call_done(1, "fc_1", "call_a", "get_secret_number", '{"name": "alice"}'),
    completed(),
]


# --- the engine's scenarios in this wire format (test_providers_engine.py) ---

DONE = "[DONE]"


def chat_frame(chunk: Any) -> bytes:
    return b"data: [DONE]\n\n" if chunk == DONE else sse([chunk])


def chat(chunks: list[Any], reply: str) -> list[Any]:
    return [chunk(delta, finish, id=reply) for delta, finish in chunks] + [DONE]


CHAT_HOPS = [
    # Run 1: text, then two calls whose arguments interleave.
    chat(
        [
            ({"role": "assistant", "content": ""}, None),
            ({"content": "Let me look up "}, None),
            ({"content": "both secret numbers."}, None),
            ({"tool_calls": [head(0, "call_a", "get_secret_number")]}, None),
            ({"tool_calls": [head(1, "call_b", "get_secret_number")]}, None),
            ({"tool_calls": [piece(0, '{"name": "al')]}, None),
            ({"tool_calls": [piece(1, '{"name": "bob"}')]}, None),
            ({"tool_calls": [piece(0, 'ice"}')]}, None),
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
                        head(0, "call_c", "lookup_city"),
                        piece(0, '{"person": "alice"}'),
                    ]
                },
                None,
            ),
            (
                {
                    "tool_calls": [
                        head(1, "call_d", "get_secret_number"),
                        piece(1, '{"name": "zed"}'),
                    ]
                },
                None,
            ),
            ({"tool_calls": [head(2, "call_e", "list_people")]}, None),
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
        created("resp_1"),
        message_added(0, "msg_1"),
        text_delta(0, "msg_1", "Let me look up both secret numbers."),
        *message_done(0, "msg_1", "Let me look up both secret numbers."),
        call_added(1, "fc_a", "call_a", "get_secret_number"),
        call_added(2, "fc_b", "call_b", "get_secret_number"),
        args_delta(1, "fc_a", '{"name": "al'),
        args_delta(2, "fc_b", '{"name": "bob"}'),
        args_delta(1, "fc_a", 'ice"}'),
        *call_done(1, "fc_a", "call_a", "get_secret_number", '{"name": "alice"}'),
        *call_done(2, "fc_b", "call_b", "get_secret_number", '{"name": "bob"}'),
        completed("resp_1"),
    ],
    [
        created("resp_2"),
        call_added(0, "fc_c", "call_c", "lookup_city"),
        args_delta(0, "fc_c", '{"person": "alice"}'),
        *call_done(0, "fc_c", "call_c", "lookup_city", '{"person": "alice"}'),
        call_added(1, "fc_d", "call_d", "get_secret_number"),
        args_delta(1, "fc_d", '{"name": "zed"}'),
        *call_done(1, "fc_d", "call_d", "get_secret_number", '{"name": "zed"}'),
        call_added(2, "fc_e", "call_e", "list_people"),
        *call_done(2, "fc_e", "call_e", "list_people", ""),
        completed("resp_2"),
    ],
    [
        created("resp_3"),
        message_added(0, "msg_3"),
        text_delta(0, "msg_3", "Alice: 42, Bob: 7. "),
        text_delta(0, "msg_3", "Alice lives in Paris."),
        *message_done(0, "msg_3", "Alice: 42, Bob: 7. Alice lives in Paris."),
        completed("resp_3"),
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


CHAT = Provider(
    id="openai-chat",
    env=("OPENAI_API_KEY",),
    name="openai",
    cls=OpenAIChatBackend,
    model="gpt-4o-mini",
    base_path="/v1",
    frame=chat_frame,
    media_type=SSE,
    hops=CHAT_HOPS,
    texts=ZED_TEXTS,
    calls=lettered_calls("call_"),
    path="/v1/chat/completions",
    auth=bearer,
    tool_names=function_names,
    wire=chat_wire,
    error_stream=[*CHAT_ERROR_MID_STREAM, DONE],
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
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Größe: ✓ "}),
            chunk({"content": "日本語"}),
            *CHAT_INTERLEAVED[1:-1],
            calls(head(2, "call_z", "list_people")),
            chunk({}, "tool_calls"),
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
            finish={"stopReason": "tool_use", "providerStopReason": "tool_calls"},
        )
    },
)


RESPONSES = Provider(
    id="openai-responses",
    env=("OPENAI_API_KEY",),
    name="openai-responses",
    cls=OpenAIResponsesBackend,
    model="gpt-4.1",
    base_path="/v1",
    frame=named_frame,
    media_type=SSE,
    hops=RESPONSES_HOPS,
    texts=ZED_TEXTS,
    calls=lettered_calls("call_"),
    path="/v1/responses",
    auth=bearer,
    tool_names=lambda body: [t["name"] for t in body["tools"]],
    wire=responses_wire,
    error_stream=RESP_ERROR_MID_STREAM,
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
            *RESP_TEXT_BEFORE_CALLS[:-1],
            call_added(2, "fc_2", "call_b", "lookup_city"),
            args_delta(2, "fc_2", '{"person": "bøb ✓"}'),
            *call_done(2, "fc_2", "call_b", "lookup_city", '{"person": "bøb ✓"}'),
            completed(),
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
            finish={"stopReason": "tool_use", "providerStopReason": "completed"},
        )
    },
)
