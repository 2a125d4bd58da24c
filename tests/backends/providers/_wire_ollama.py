"""Ollama's ``/api/chat`` stream as published: one ``ChatResponse`` per NDJSON line."""

from __future__ import annotations

from typing import Any

MODEL = "qwen3"


def line(
    content: str = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    thinking: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    if thinking is not None:
        message["thinking"] = thinking
    return {
        "model": MODEL,
        "created_at": "2025-05-27T22:54:57.641643Z",
        "message": message,
        "done": False,
    }


def done(reason: str = "stop") -> dict[str, Any]:
    return {
        "model": MODEL,
        "created_at": "2025-05-27T22:54:58.100509Z",
        "message": {"role": "assistant", "content": ""},
        "done_reason": reason,
        "done": True,
        "total_duration": 885095291,
        "prompt_eval_count": 122,
        "eval_count": 33,
    }


def tc(name: str, arguments: Any = None, *, index: int | None = 0, **extra: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if index is not None:
        function["index"] = index
    if arguments is not None:
        function["arguments"] = arguments
    return {"function": function, **extra}


TEXT_BEFORE_CALLS = [
    line("Let me look up "),
    line("both secret numbers."),
    line(
        tool_calls=[
            tc("get_secret_number", {"name": "alice"}),
            tc("get_secret_number", {"name": "bob"}),
        ]
    ),
    done(),
]


ERROR_MID_STREAM = [
    line("Let me"),
    {"error": "an error was encountered while running the model: unexpected EOF"},
]


TEXT_ONLY = [line("The sky"), line(" is blue."), done()]
ONE_CALL = [
    line(tool_calls=[tc("get_current_weather", {"format": "celsius", "location": "Toronto"})]),
    done(),
]
PARALLEL_SAME_INDEX = [
    line(
        tool_calls=[
            tc("get_secret_number", {"name": "alice"}),
            tc("get_secret_number", {"name": "bob"}),
        ]
    ),
    done(),
]
SAME_CALL_ON_TWO_LINES = [
    line(tool_calls=[tc("get_secret_number", {"name": "alice"})]),
    line(tool_calls=[tc("get_secret_number", {"name": "alice"})]),
    done(),
]
ZERO_ARG_CALLS = [
    line(tool_calls=[tc("list_people", {}), tc("list_people", index=None)]),
    done(),
]
THINKING_THEN_ANSWER = [
    line(thinking="The user asks about the sky. "),
    line(thinking="Rayleigh."),
    line("Because of Rayleigh scattering."),
    done(),
]
FIXTURES = {
    "text_only": TEXT_ONLY,
    "one_call": ONE_CALL,
    "parallel_same_index": PARALLEL_SAME_INDEX,
    "same_call_on_two_lines": SAME_CALL_ON_TWO_LINES,
    "zero_arg_calls": ZERO_ARG_CALLS,
    "text_before_calls": TEXT_BEFORE_CALLS,
    "error_mid_stream": ERROR_MID_STREAM,
    "thinking_then_answer": THINKING_THEN_ANSWER,
}
