"""The sans-IO core: conversation model, event processor, message mapper, tool registry.

Nothing here performs I/O, imports anyio or httpx, or reads the clock.
"""

from __future__ import annotations

from toolrelay._core._arguments import TextAccumulator as TextAccumulator
from toolrelay._core._conversation import (
    AgentResult as AgentResult,
    ChatMessage as ChatMessage,
    Conversation as Conversation,
    ReasoningRecord as ReasoningRecord,
    TextMessage as TextMessage,
    ToolCallBatch as ToolCallBatch,
    ToolCallInfo as ToolCallInfo,
)
from toolrelay._core._effects import (
    NO_EFFECTS as NO_EFFECTS,
    Activity as Activity,
    ActivityChanged as ActivityChanged,
    ActivityKind as ActivityKind,
    Effect as Effect,
    MessagesSettled as MessagesSettled,
    ProtocolViolation as ProtocolViolation,
    RunEnding as RunEnding,
    ToolsReady as ToolsReady,
    TurnCompleted as TurnCompleted,
    TurnEnded as TurnEnded,
    TurnInterrupted as TurnInterrupted,
    ViolationRaised as ViolationRaised,
)
from toolrelay._core._mapper import (
    to_agui_messages as to_agui_messages,
    tool_call_to_agui as tool_call_to_agui,
)
from toolrelay._core._patch import JsonPatchError as JsonPatchError, apply_patch as apply_patch
from toolrelay._core._processor import EventProcessor as EventProcessor, Limits as Limits
from toolrelay._core._resume import check_resume as check_resume
from toolrelay._core._thread_key import ThreadKey as ThreadKey
from toolrelay._core._tool_context import ToolContext as ToolContext
from toolrelay._core._tool_decorator import tool as tool
from toolrelay._core._tool_registry import ToolRegistry as ToolRegistry
from toolrelay._core._tool_result import ToolError as ToolError, ToolResult as ToolResult
from toolrelay._core._tool_spec import ToolSpec as ToolSpec

__all__ = (
    "Activity",
    "ActivityChanged",
    "ActivityKind",
    "AgentResult",
    "ChatMessage",
    "Conversation",
    "Effect",
    "EventProcessor",
    "JsonPatchError",
    "Limits",
    "MessagesSettled",
    "NO_EFFECTS",
    "ProtocolViolation",
    "ReasoningRecord",
    "RunEnding",
    "TextAccumulator",
    "TextMessage",
    "ToolCallBatch",
    "ToolCallInfo",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolsReady",
    "TurnCompleted",
    "TurnEnded",
    "TurnInterrupted",
    "ViolationRaised",
    "apply_patch",
    "check_resume",
    "to_agui_messages",
    "tool",
    "tool_call_to_agui",
)
