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
