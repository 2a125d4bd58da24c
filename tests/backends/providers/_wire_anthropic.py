"""Anthropic's Messages stream as published: the named SSE events of one message.

The builders serve the provider's own tests; ``ROW`` is its row of the engine harness
(``test_providers_engine.py``): the conversation scripted in this format, and what the
provider is sent back.
"""

from __future__ import annotations

from typing import Any

from _gc_servers import SSE, Failure, Recorded
from _oa_servers import Outcome
from _provider_table import (
    QUESTION,
    ZED_ERROR,
    ZED_TEXTS,
    Provider,
    error_body,
    lettered_calls,
    named_frame,
)

from toolrelay import Turn
from toolrelay.backends.providers import AnthropicBackend
from toolrelay.protocol import SystemMessage


def message_start(message_id: str = "msg_01") -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-sonnet-4-5",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    }


PING = {"type": "ping"}


def text_block(index: int, *pieces: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": p},
            }
            for p in pieces
        ),
        {"type": "content_block_stop", "index": index},
    ]


def tool_start(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
    }


def json_delta(index: int, partial: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": partial},
    }


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def tool_block(index: int, call_id: str, name: str, *pieces: str) -> list[dict[str, Any]]:
    # Anthropic opens a tool's input with an empty partial_json.
    return [
        tool_start(index, call_id, name),
        json_delta(index, ""),
        *(json_delta(index, p) for p in pieces),
        stop(index),
    ]


def thinking_block(index: int, thinking: str, signature: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "thinking_delta", "thinking": thinking},
        },
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "signature_delta", "signature": signature},
        },
        stop(index),
    ]


def message_end(stop_reason: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 15},
        },
        {"type": "message_stop"},
    ]


OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


ERROR_MID_STREAM = [
    message_start(),
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Half an ans"},
    },
    OVERLOADED,
]


# --- the engine's scenarios in this wire format (test_providers_engine.py) ---


def anthropic_auth(key: str | None) -> dict[str, str]:
    version = {"anthropic-version": "2023-06-01"}
    return {**version, "x-api-key": key} if key else version


ANTHROPIC_HOPS = [
    [
        message_start("msg_1"),
        *text_block(0, "Let me look up ", "both secret numbers."),
        *tool_block(1, "toolu_a", "get_secret_number", '{"name": "al', 'ice"}'),
        *tool_block(2, "toolu_b", "get_secret_number", '{"name": "bob"}'),
        *message_end("tool_use"),
    ],
    [
        message_start("msg_2"),
        *thinking_block(0, "Now the city, and zed.", "sig2"),
        *tool_block(1, "toolu_c", "lookup_city", '{"person": "alice"}'),
        *tool_block(2, "toolu_d", "get_secret_number", '{"name": "zed"}'),
        *tool_block(3, "toolu_e", "list_people"),
        *message_end("tool_use"),
    ],
    [
        message_start("msg_3"),
        *text_block(0, "Alice: 42, Bob: 7. ", "Alice lives in Paris."),
        *message_end("end_turn"),
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


ROW = Provider(
    id="anthropic",
    env=("ANTHROPIC_API_KEY",),
    name="anthropic",
    cls=AnthropicBackend,
    model="claude-sonnet-4-5",
    base_path="",
    frame=named_frame,
    media_type=SSE,
    hops=ANTHROPIC_HOPS,
    texts=ZED_TEXTS,
    calls=lettered_calls("toolu_"),
    path="/v1/messages",
    auth=anthropic_auth,
    tool_names=lambda body: [t["name"] for t in body["tools"]],
    wire=anthropic_wire,
    error_stream=ERROR_MID_STREAM,
    error_reason=("Overloaded", "overloaded_error"),
    failure=Failure(529, error_body(OVERLOADED)),
    failure_message="anthropic error 529: Overloaded",
    default_url="https://api.anthropic.com/v1/messages",
    opening=("messages", [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]),
    streams={
        "rechunk": [
            message_start(),
            PING,
            *thinking_block(0, "Größe ✓", "sig"),
            *text_block(1, "Let me ", "check 日本語."),
            *tool_block(2, "toolu_a", "get_secret_number", '{"na', 'me": "ålice"}'),
            *tool_block(3, "toolu_z", "list_people"),
            *message_end("tool_use"),
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
)
