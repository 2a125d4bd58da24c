"""Cohere's v2 chat stream as published: its named SSE events.

The builders serve the provider's own tests; ``ROW`` is its row of the engine harness
(``test_providers_engine.py``): the conversation scripted in this format, and what the
provider is sent back.
"""

from __future__ import annotations

from typing import Any

from _gc_servers import SSE, Failure, Recorded, cohere_sse
from _provider_table import (
    DAVE_ANSWER,
    QUESTION,
    Provider,
    bearer,
    dave_calls,
    dave_content,
    function_names,
)

from toolrelay import Turn
from toolrelay.backends.providers import CohereBackend

MODEL = "command-a-03-2025"


def message_start() -> dict[str, Any]:
    return {
        "type": "message-start",
        "id": "fba98ad3-e5a1-413c-a8de-84fbf9baabf7",
        "delta": {
            "message": {
                "role": "assistant",
                "content": [],
                "tool_plan": "",
                "tool_calls": [],
                "citations": [],
            }
        },
    }


def content_start(kind: str = "text") -> dict[str, Any]:
    return {
        "type": "content-start",
        "index": 0,
        "delta": {"message": {"content": {"type": kind, kind: ""}}},
    }


def content_delta(text: str, kind: str = "text") -> dict[str, Any]:
    return {"type": "content-delta", "index": 0, "delta": {"message": {"content": {kind: text}}}}


def content_end() -> dict[str, Any]:
    return {"type": "content-end", "index": 0}


def plan(text: str) -> dict[str, Any]:
    return {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": text}}}


def call_start(index: int, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {
        "type": "tool-call-start",
        "index": index,
        "delta": {
            "message": {
                "tool_calls": {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            }
        },
    }


def call_delta(index: int, piece: str) -> dict[str, Any]:
    return {
        "type": "tool-call-delta",
        "index": index,
        "delta": {"message": {"tool_calls": {"function": {"arguments": piece}}}},
    }


def call_end(index: int) -> dict[str, Any]:
    return {"type": "tool-call-end", "index": index}


def message_end(
    reason: str, error: str | None = None, error_type: str | None = None
) -> dict[str, Any]:
    delta: dict[str, Any] = {
        "finish_reason": reason,
        "usage": {
            "billed_units": {"input_tokens": 37, "output_tokens": 18},
            "tokens": {"input_tokens": 1187, "output_tokens": 71},
        },
    }
    if error is not None:
        delta["error"] = error
    if error_type is not None:
        delta["error_type"] = error_type
    return {"type": "message-end", "delta": delta}


def one_call(index: int, call_id: str, name: str, *pieces: str) -> list[dict[str, Any]]:
    return [
        call_start(index, call_id, name),
        *(call_delta(index, p) for p in pieces),
        call_end(index),
    ]


TEXT_BEFORE_CALLS = [
    message_start(),
    plan("I will look up "),
    plan("both secret numbers."),
    *one_call(0, "get_secret_number_a", "get_secret_number", '{"name":"alice"}'),
    *one_call(1, "get_secret_number_b", "get_secret_number", '{"name":"bob"}'),
    message_end("TOOL_CALL"),
]


ERROR_MID_STREAM = [
    message_start(),
    content_start(),
    content_delta("Let me"),
    message_end("ERROR", error="internal server error, this has been reported to our developers"),
]


TEXT_ONLY = [
    message_start(),
    content_start(),
    content_delta("The sky is "),
    content_delta("blue."),
    content_end(),
    message_end("COMPLETE"),
]
ONE_CALL = [
    message_start(),
    *one_call(0, "get_weather_1byjy32y4hvq", "get_weather", '{"', "location", '":"', 'Madrid"}'),
    message_end("TOOL_CALL"),
]
PARALLEL_CALLS = [
    message_start(),
    *one_call(0, "get_secret_number_a", "get_secret_number", '{"name":', '"alice"}'),
    *one_call(1, "get_secret_number_b", "get_secret_number", '{"name":', '"bob"}'),
    message_end("TOOL_CALL"),
]
ZERO_ARG_CALLS = [
    message_start(),
    *one_call(0, "list_people_1", "list_people", "nu", "ll"),
    *one_call(1, "list_people_2", "list_people"),
    *one_call(2, "list_people_3", "list_people", '"null"'),
    message_end("TOOL_CALL"),
]
INTERLEAVED_PIECES = [
    message_start(),
    call_start(0, "get_weather_m", "get_weather"),
    call_start(1, "get_weather_b", "get_weather"),
    call_delta(0, '{"location":'),
    call_delta(1, '{"location":'),
    call_delta(1, '"Brasilia"}'),
    call_delta(0, '"Madrid"}'),
    call_end(1),
    call_end(0),
    message_end("TOOL_CALL"),
]
FIXTURES = {
    "text_only": TEXT_ONLY,
    "one_call": ONE_CALL,
    "parallel_calls": PARALLEL_CALLS,
    "zero_arg_calls": ZERO_ARG_CALLS,
    "text_before_calls": TEXT_BEFORE_CALLS,
    "interleaved_pieces": INTERLEAVED_PIECES,
    "error_mid_stream": ERROR_MID_STREAM,
}


# --- the engine's scenarios in this wire format (test_providers_engine.py) ---

COHERE_HOPS = [
    TEXT_BEFORE_CALLS,
    [
        message_start(),
        *one_call(0, "list_people_z", "list_people", "nu", "ll"),
        *one_call(1, "get_secret_number_d", "get_secret_number", '{"name":', ' "dave"}'),
        message_end("TOOL_CALL"),
    ],
    [
        message_start(),
        content_start(),
        content_delta("Alice's number is 42 and Bob's is 7. "),
        content_delta("I know alice, bob and carol; nobody called Dave."),
        content_end(),
        message_end("COMPLETE"),
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
        assert request.body["model"] == MODEL and request.body["stream"] is True
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


ROW = Provider(
    id="cohere",
    env=("CO_API_KEY", "COHERE_API_KEY"),
    name="cohere",
    cls=CohereBackend,
    model=MODEL,
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
    error_stream=ERROR_MID_STREAM,
    error_reason=("internal server error, this has been reported to our developers", "error"),
    failure=Failure(401, b'{"id":"x","message":"invalid api token"}'),
    failure_message="cohere error 401: invalid api token",
    default_url="https://api.cohere.com/v2/chat",
    opening=("messages", [{"role": "user", "content": QUESTION}]),
    streams=FIXTURES,
    named=True,
)
