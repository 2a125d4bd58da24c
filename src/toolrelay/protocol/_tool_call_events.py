"""AG-UI tool call events: a streamed tool call, and the result of one the agent ran."""

from __future__ import annotations

from ._event_base import AguiEvent
from ._messages import ContentPart

__all__ = (
    "ToolCallArgsEvent",
    "ToolCallChunkEvent",
    "ToolCallEndEvent",
    "ToolCallResultEvent",
    "ToolCallStartEvent",
)


class ToolCallStartEvent(AguiEvent, tag="TOOL_CALL_START", frozen=True, kw_only=True):
    """Opens tool call ``tool_call_id`` of tool ``tool_call_name``."""

    tool_call_id: str
    tool_call_name: str
    parent_message_id: str | None = None
    subagent_run_id: str | None = None


class ToolCallArgsEvent(AguiEvent, tag="TOOL_CALL_ARGS", frozen=True, kw_only=True):
    """Appends ``delta`` to the JSON arguments of tool call ``tool_call_id``."""

    tool_call_id: str
    delta: str
    subagent_run_id: str | None = None


class ToolCallEndEvent(AguiEvent, tag="TOOL_CALL_END", frozen=True, kw_only=True):
    """Closes tool call ``tool_call_id``: its arguments are complete."""

    tool_call_id: str
    subagent_run_id: str | None = None


class ToolCallChunkEvent(AguiEvent, tag="TOOL_CALL_CHUNK", frozen=True, kw_only=True):
    """Shorthand for start, arguments and end of a tool call."""

    tool_call_id: str | None = None
    tool_call_name: str | None = None
    parent_message_id: str | None = None
    delta: str | None = None
    subagent_run_id: str | None = None


class ToolCallResultEvent(AguiEvent, tag="TOOL_CALL_RESULT", frozen=True, kw_only=True):
    """The result of tool call ``tool_call_id``, as tool message ``message_id``."""

    message_id: str
    tool_call_id: str
    content: str | list[ContentPart]
    # A plain str (the SDK: Literal "tool"): the event is a tool result whatever it says.
    role: str | None = None
    subagent_run_id: str | None = None
