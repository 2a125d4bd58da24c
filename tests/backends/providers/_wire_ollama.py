"""Ollama's ``/api/chat`` stream as published: one ``ChatResponse`` per NDJSON line.

The builders serve the provider's own tests; ``ROW`` is its row of the engine harness
(``test_providers_engine.py``): the conversation scripted in this format, and what the
provider is sent back.
"""

from __future__ import annotations

from typing import Any

from _gc_servers import NDJSON, Failure, Recorded, ndjson
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
from toolrelay.backends.providers import OllamaBackend

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


# --- the engine's scenarios in this wire format (test_providers_engine.py) ---

OLLAMA_HOPS = [
    TEXT_BEFORE_CALLS,
    [
        line(
            tool_calls=[
                tc("list_people", {}),
                tc("get_secret_number", {"name": "dave"}),
            ]
        ),
        done(),
    ],
    [
        line("Alice's number is 42 and Bob's is 7. "),
        line("I know alice, bob and carol; nobody called Dave."),
        done(),
    ],
]


def ollama_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    def called(index: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"index": index, "name": name, "arguments": arguments},
        }

    for request in (first, second, third):
        assert request.body["model"] == MODEL and request.body["stream"] is True
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


ROW = Provider(
    id="ollama",
    env=(),
    name="ollama",
    # Ollama takes no key: one given (for a proxy in front of it) goes as a bearer.
    cls=OllamaBackend,
    model=MODEL,
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
    error_stream=ERROR_MID_STREAM,
    error_reason=(
        "an error was encountered while running the model: unexpected EOF",
        "ollama_error",
    ),
    failure=Failure(404, b'{"error":"model \\"qwen9\\" not found, try pulling it first"}'),
    failure_message='ollama error 404: model "qwen9" not found, try pulling it first',
    default_url="http://localhost:11434/api/chat",
    opening=("messages", [{"role": "user", "content": QUESTION}]),
    streams=FIXTURES,
)
