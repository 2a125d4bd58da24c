"""Cohere's v2 chat stream as published: its named SSE events."""

from __future__ import annotations

from typing import Any

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


def message_end(reason: str, error: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {
        "finish_reason": reason,
        "usage": {
            "billed_units": {"input_tokens": 37, "output_tokens": 18},
            "tokens": {"input_tokens": 1187, "output_tokens": 71},
        },
    }
    if error is not None:
        delta["error"] = error
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
