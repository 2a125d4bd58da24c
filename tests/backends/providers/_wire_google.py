"""Gemini's stream as published: one ``GenerateContentResponse`` per SSE event."""

from __future__ import annotations

from typing import Any

MODEL = "gemini-2.5-flash"


def chunk(
    *parts: dict[str, Any],
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": MODEL,
        "responseId": "resp-1",
    }
    if usage is not None:
        out["usageMetadata"] = usage
    return out


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def call(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if args is not None:
        function["args"] = args
    return {"functionCall": function}


USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}


TEXT_BEFORE_CALLS = [
    chunk(text("Let me look up ")),
    chunk(text("both secret numbers.")),
    chunk(
        call("get_secret_number", {"name": "alice"}),
        call("get_secret_number", {"name": "bob"}),
        finish="STOP",
        usage=USAGE,
    ),
]


ERROR_MID_STREAM = [
    chunk(text("Let me think")),
    {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
]


TEXT_ONLY = [
    chunk(text("The sky is ")),
    chunk(text("blue because of Rayleigh scattering.")),
    chunk(text(""), finish="STOP", usage=USAGE),
]
ONE_CALL = [chunk(call("get_weather", {"city": "Paris"}), finish="STOP", usage=USAGE)]
PARALLEL_CALLS = [
    chunk(
        call("get_secret_number", {"name": "alice"}),
        call("get_secret_number", {"name": "bob"}),
        call("lookup_city", {"person": "alice"}),
        finish="STOP",
    )
]
SAME_CALL_TWICE_ACROSS_CHUNKS = [
    chunk(call("get_secret_number", {"name": "alice"})),
    chunk(call("get_secret_number", {"name": "alice"}), finish="STOP"),
]
ZERO_ARG_CALLS = [chunk(call("list_people"), call("list_people", {}), finish="STOP")]
NESTED_ARGS = [
    chunk(
        call("plan", {"steps": [{"n": 1, "tags": ["a", "b"]}], "note": "é ✓", "ok": True}),
        finish="STOP",
    )
]
FIXTURES = {
    "text_only": TEXT_ONLY,
    "one_call": ONE_CALL,
    "parallel_calls": PARALLEL_CALLS,
    "same_call_twice": SAME_CALL_TWICE_ACROSS_CHUNKS,
    "zero_arg_calls": ZERO_ARG_CALLS,
    "text_before_calls": TEXT_BEFORE_CALLS,
    "error_mid_stream": ERROR_MID_STREAM,
    "nested_args": NESTED_ARGS,
}
