"""AG-UI events: one frozen msgspec Struct per event type, tagged by ``type``.

The 31 event types of AG-UI 1.0 (``ag_ui.core.Event``) plus the five ``THINKING_*``
events of ag-ui-protocol 0.1.x, which AG-UI 1.0 removed in favour of ``REASONING_*`` but
real servers still send (pydantic-ai does, for clients below AG-UI 0.1.11). All of them
form the :data:`Event` union, which ``toolrelay.protocol._codec`` decodes in one typed
call. An event whose ``type`` is none of these decodes to :class:`UnknownEvent` instead,
which is deliberately not a member of the union.

This module holds the union; the event families live each in its own module, as the
AG-UI spec groups them: ``_lifecycle_events`` (runs, steps, subagents),
``_text_events``, ``_tool_call_events``, ``_state_events`` (state, messages and activity
snapshots and deltas), ``_reasoning_events`` (with the legacy ``THINKING_*``) and
``_special_events`` (raw and custom); the tag and the base Struct live in
``_event_base``.
"""

from __future__ import annotations

from typing import TypeAlias

from ._lifecycle_events import (
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
)
from ._reasoning_events import (
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
)
from ._special_events import CustomEvent, RawEvent
from ._state_events import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    MessagesSnapshotEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
)
from ._text_events import (
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ._tool_call_events import (
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = ("Event",)

Event: TypeAlias = (
    TextMessageStartEvent
    | TextMessageContentEvent
    | TextMessageEndEvent
    | TextMessageChunkEvent
    | ToolCallStartEvent
    | ToolCallArgsEvent
    | ToolCallEndEvent
    | ToolCallChunkEvent
    | ToolCallResultEvent
    | StateSnapshotEvent
    | StateDeltaEvent
    | MessagesSnapshotEvent
    | ActivitySnapshotEvent
    | ActivityDeltaEvent
    | RawEvent
    | CustomEvent
    | RunStartedEvent
    | RunFinishedEvent
    | RunErrorEvent
    | StepStartedEvent
    | StepFinishedEvent
    | ReasoningStartEvent
    | ReasoningMessageStartEvent
    | ReasoningMessageContentEvent
    | ReasoningMessageEndEvent
    | ReasoningMessageChunkEvent
    | ReasoningEndEvent
    | ReasoningEncryptedValueEvent
    | SubagentStartedEvent
    | SubagentFinishedEvent
    | SubagentErrorEvent
    | ThinkingStartEvent
    | ThinkingEndEvent
    | ThinkingTextMessageStartEvent
    | ThinkingTextMessageContentEvent
    | ThinkingTextMessageEndEvent
)
"""Any event toolrelay knows, discriminated by ``type`` (see :data:`EVENT_TYPES`)."""
