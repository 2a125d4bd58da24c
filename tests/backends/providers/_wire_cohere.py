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
