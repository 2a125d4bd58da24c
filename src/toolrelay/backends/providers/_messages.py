"""What a provider is sent of a conversation: helpers of no one provider (the provider
backends share them).

:func:`check_tool_results` validates the conversation before any network call: every
``toolCalls`` entry of an assistant message needs a ``tool`` message right after it
(the results of a batch follow their calls), and every ``tool`` message answers a
call of the assistant message just before it; otherwise :class:`ConversationError`.
Empty arguments are sent as ``"{}"`` (:func:`tool_arguments`); a failed tool result
is sent as the ``tool`` message's content, which already is ``{"error": ...}``, so the
model sees the error and can recover. :func:`sendable_messages` leaves out
``reasoning`` and ``activity`` messages (a backend that sends reasoning back, such as
Anthropic's, picks it itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from toolrelay._errors import ConversationError
from toolrelay.protocol import (
    ActivityMessage,
    AssistantMessage,
    ContentPart,
    DataSource,
    Message,
    ReasoningMessage,
    TextPart,
    Tool,
    ToolCall,
    ToolMessage,
)

__all__ = (
    "arguments_object",
    "check_tool_results",
    "data_url",
    "function_tools",
    "sendable_messages",
    "text_of",
    "tool_arguments",
    "tool_results_after",
    "unsupported_part",
)

_JSON_DECODER = msgspec.json.Decoder()

_UNSENT = (ActivityMessage, ReasoningMessage)


def tool_results_after(messages: Sequence[Message], index: int) -> list[ToolMessage]:
    """The consecutive ``tool`` messages that follow ``messages[index]``."""
    out: list[ToolMessage] = []
    for message in messages[index + 1 :]:
        if not isinstance(message, ToolMessage):
            break
        out.append(message)
    return out


def sendable_messages(messages: Sequence[Message]) -> list[Message]:
    """The messages a provider is sent: not ``activity`` (UI only) nor ``reasoning``."""
    return [m for m in messages if not isinstance(m, _UNSENT)]


def check_tool_results(messages: Sequence[Message], provider: str) -> None:
    """Refuse a conversation whose tool calls and results do not pair up.

    Every tool call of an assistant message needs a ``tool`` message among those right
    after it, and every ``tool`` message must answer a call of the assistant message
    just before it (once). Providers reject anything else, after a round trip.

    Raises:
        ConversationError: A call without its result, or a result without its call.
    """
    expected: set[str] = set()
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if call_id not in expected:
                raise ConversationError(
                    f"{provider}: tool message {message.id!r} answers tool call {call_id!r}, "
                    "which the assistant message just before it did not ask for; a tool "
                    "result must follow the assistant message that made its call"
                )
            if call_id in answered:
                raise ConversationError(
                    f"{provider}: tool call {call_id!r} has two results "
                    f"(the second is tool message {message.id!r})"
                )
            answered.add(call_id)
            continue
        expected, answered = set(), set()
        if isinstance(message, AssistantMessage) and message.tool_calls:
            ids = [call.id for call in message.tool_calls]
            if len(set(ids)) != len(ids):
                raise ConversationError(
                    f"{provider}: assistant message {message.id!r} has two tool calls with "
                    "the same id"
                )
            results = {result.tool_call_id for result in tool_results_after(messages, index)}
            missing = [call_id for call_id in ids if call_id not in results]
            if missing:
                raise ConversationError(
                    f"{provider}: assistant message {message.id!r} asks for tool call(s) "
                    f"{', '.join(map(repr, missing))} with no tool message right after it; "
                    "every tool call needs its result before the conversation goes on"
                )
            expected = set(ids)


def tool_arguments(call: ToolCall) -> str:
    """The raw argument string of a call, ``"{}"`` when it is empty."""
    arguments = call.function.arguments
    return arguments if arguments.strip() else "{}"


def arguments_object(raw: str, name: str, provider: str) -> dict[str, Any]:
    """A call's JSON arguments as an object, for providers that take an object, not
    text: ``{}`` for nothing or ``null``.

    Raises:
        ConversationError: The arguments are not JSON, or not a JSON object.
    """
    if not raw.strip():
        return {}
    try:
        value = _JSON_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ConversationError(
            f"{provider}: the arguments of a {name!r} call are not JSON: {raw[:80]!r}"
        ) from exc
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConversationError(
            f"{provider}: the arguments of a {name!r} call are not a JSON object: {raw[:80]!r}"
        )
    return value


def function_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """Tool declarations as ``{"type": "function", "function": {...}}`` entries (the
    shape OpenAI's Chat Completions, Ollama and Cohere share)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def data_url(source: DataSource) -> str:
    """A ``data:`` URL of an inline (base64) source."""
    return f"data:{source.mime_type};base64,{source.value}"


def unsupported_part(provider: str, part: ContentPart, where: str) -> ConversationError:
    """The error for a content ``part`` that ``provider`` cannot take in ``where``."""
    kind = str(type(part).__struct_config__.tag)
    source = getattr(part, "source", None)
    detail = f" from a {type(source).__struct_config__.tag} source" if source is not None else ""
    article = "an" if kind[:1] in ("a", "e", "i", "o", "u") else "a"
    return ConversationError(f"{provider} cannot take {article} {kind} part{detail} in {where}")


def text_of(content: str | list[ContentPart], provider: str, where: str) -> str:
    """The text of a message's content; only text parts can be sent as text."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        if not isinstance(part, TextPart):
            raise unsupported_part(provider, part, where)
        texts.append(part.text)
    return "".join(texts)
