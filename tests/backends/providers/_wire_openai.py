"""OpenAI's streams as published: Chat Completions chunks and Responses API events."""

from __future__ import annotations

from typing import Any


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
