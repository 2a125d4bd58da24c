"""Conversation -> AG-UI messages for the next run's ``RunAgentInput.messages``.

Strict in what we send (AG-UI "Conventions of the wire"):

- A :class:`ToolCallMessage` becomes one ``assistant`` message carrying ``toolCalls``
  followed by one ``tool`` message per call, in the order the agent streamed them.
  Completed and failed calls alike get a ``tool`` message (a failed call's content
  is the error text, so the model sees it; promise 2).
- Empty arguments are sent as ``"{}"`` (a zero-argument tool streams no ARGS).
- When the calls name, as ``parentMessageId``, the assistant text message just
  before them, the text and the calls are sent as ONE assistant message (content
  and ``toolCalls``), as OpenAI-shaped servers expect; two messages with the same id
  are never sent.
- Streamed text becomes a message of its role. Reasoning is kept locally and not
  sent back unless asked (servers on AG-UI < 1.0 reject the ``reasoning`` role).
- Messages the embedding code supplied as AG-UI messages pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from toolrelay.core._conversation import (
    ChatMessage,
    ReasoningRecord,
    TextMessage,
    ToolCallInfo,
    ToolCallMessage,
)
from toolrelay.machines import ToolCallStatus
from toolrelay.protocol import (
    AssistantMessage,
    DeveloperMessage,
    FunctionCall,
    Message,
    ReasoningMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ("to_agui_messages", "tool_call_to_agui")


def tool_call_to_agui(call: ToolCallInfo) -> ToolCall:
    """The wire ``ToolCall`` of ``call``, with empty arguments sent as ``"{}"``."""
    arguments = call.arguments
    if not arguments.strip():
        arguments = "{}"
    return ToolCall(id=call.id, function=FunctionCall(name=call.name, arguments=arguments))


def _text_to_agui(message: TextMessage) -> Message:
    text = message.text
    match message.role:
        case "user":
            return UserMessage(id=message.id, content=text)
        case "system":
            return SystemMessage(id=message.id, content=text)
        case "developer":
            return DeveloperMessage(id=message.id, content=text)
        case _:
            return AssistantMessage(id=message.id, content=text)


def to_agui_messages(
    messages: Iterable[ChatMessage], *, include_reasoning: bool = False
) -> list[Message]:
    """Map a conversation to the AG-UI messages a continuation run sends.

    Args:
        messages: The conversation's messages, oldest first.
        include_reasoning: Send reasoning records as ``reasoning`` messages.

    Returns:
        A new list; the conversation is not changed.
    """
    out: list[Message] = []
    for message in messages:
        if isinstance(message, TextMessage):
            out.append(_text_to_agui(message))
        elif isinstance(message, ToolCallMessage):
            _append_tool_batch(out, message)
        elif isinstance(message, ReasoningRecord):
            if include_reasoning:
                out.append(ReasoningMessage(id=message.id, content=message.text))
        else:
            out.append(message)
    return out


def _append_tool_batch(out: list[Message], batch: ToolCallMessage) -> None:
    sent = [
        (call, result_id)
        for call, result_id in zip(batch.calls, batch.result_message_ids, strict=True)
        if call.status in (ToolCallStatus.completed, ToolCallStatus.failed)
        and call.result is not None
    ]
    if not sent:
        return
    tool_calls = [tool_call_to_agui(call) for call, _ in sent]
    parent = sent[0][0].parent_message_id
    previous = out[-1] if out else None
    if (
        parent is not None
        and isinstance(previous, AssistantMessage)
        and previous.id == parent
        and not previous.tool_calls
    ):
        out[-1] = AssistantMessage(
            id=previous.id,
            content=previous.content,
            tool_calls=tool_calls,
            name=previous.name,
        )
    else:
        out.append(AssistantMessage(id=parent or batch.id, tool_calls=tool_calls))
    for call, result_id in sent:
        result = call.result
        assert result is not None
        out.append(
            ToolMessage(
                id=result_id,
                tool_call_id=call.id,
                content=result.content,
                error=result.error,
            )
        )
