"""AG-UI events: one frozen msgspec Struct per event type, tagged by ``type``.

The 31 event types of AG-UI 1.0 (``ag_ui.core.Event``) plus the five ``THINKING_*``
events of ag-ui-protocol 0.1.x, which AG-UI 1.0 removed in favour of ``REASONING_*`` but
real servers still send (pydantic-ai does, for clients below AG-UI 0.1.11). All of them
form the :data:`Event` union, which ``toolrelay.protocol._codec`` decodes in one typed
call. An event whose ``type`` is none of these decodes to :class:`UnknownEvent` instead,
which is deliberately not a member of the union.

This module holds the union and gathers the event families, each in its own module as
the AG-UI spec groups them: ``_lifecycle_events`` (runs, steps, subagents),
``_text_events``, ``_tool_call_events``, ``_state_events`` (state, messages and activity
snapshots and deltas), ``_reasoning_events`` (with the legacy ``THINKING_*``) and
``_special_events`` (raw and custom); the tag and the base Struct live in
``_event_base``.
"""

from __future__ import annotations

from typing import TypeAlias

from ._event_base import (
    EVENT_TYPES as EVENT_TYPES,
    LEGACY_EVENT_TYPES as LEGACY_EVENT_TYPES,
    AguiEvent as AguiEvent,
    EventType as EventType,
    UnknownEvent as UnknownEvent,
)
from ._lifecycle_events import (
    Interrupt as Interrupt,
    RunErrorEvent as RunErrorEvent,
    RunFinishedCancelledOutcome as RunFinishedCancelledOutcome,
    RunFinishedEvent as RunFinishedEvent,
    RunFinishedInterruptOutcome as RunFinishedInterruptOutcome,
    RunFinishedOutcome as RunFinishedOutcome,
    RunFinishedSuccessOutcome as RunFinishedSuccessOutcome,
    RunStartedEvent as RunStartedEvent,
    StepFinishedEvent as StepFinishedEvent,
    StepStartedEvent as StepStartedEvent,
    SubagentErrorEvent as SubagentErrorEvent,
    SubagentFinishedEvent as SubagentFinishedEvent,
    SubagentFinishedOutcome as SubagentFinishedOutcome,
    SubagentFinishedSuccessOutcome as SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome as SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent as SubagentStartedEvent,
    TokenUsage as TokenUsage,
)
from ._reasoning_events import (
    ReasoningEncryptedValueEvent as ReasoningEncryptedValueEvent,
    ReasoningEndEvent as ReasoningEndEvent,
    ReasoningMessageChunkEvent as ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent as ReasoningMessageContentEvent,
    ReasoningMessageEndEvent as ReasoningMessageEndEvent,
    ReasoningMessageStartEvent as ReasoningMessageStartEvent,
    ReasoningStartEvent as ReasoningStartEvent,
    ThinkingEndEvent as ThinkingEndEvent,
    ThinkingStartEvent as ThinkingStartEvent,
    ThinkingTextMessageContentEvent as ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent as ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent as ThinkingTextMessageStartEvent,
)
from ._special_events import (
    CustomEvent as CustomEvent,
    RawEvent as RawEvent,
)
from ._state_events import (
    ActivityDeltaEvent as ActivityDeltaEvent,
    ActivitySnapshotEvent as ActivitySnapshotEvent,
    AddOperation as AddOperation,
    CopyOperation as CopyOperation,
    JsonPatchOperation as JsonPatchOperation,
    MessagesSnapshotEvent as MessagesSnapshotEvent,
    MoveOperation as MoveOperation,
    RemoveOperation as RemoveOperation,
    ReplaceOperation as ReplaceOperation,
    StateDeltaEvent as StateDeltaEvent,
    StateSnapshotEvent as StateSnapshotEvent,
    TestOperation as TestOperation,
)
from ._text_events import (
    TextMessageChunkEvent as TextMessageChunkEvent,
    TextMessageContentEvent as TextMessageContentEvent,
    TextMessageEndEvent as TextMessageEndEvent,
    TextMessageStartEvent as TextMessageStartEvent,
)
from ._tool_call_events import (
    ToolCallArgsEvent as ToolCallArgsEvent,
    ToolCallChunkEvent as ToolCallChunkEvent,
    ToolCallEndEvent as ToolCallEndEvent,
    ToolCallResultEvent as ToolCallResultEvent,
    ToolCallStartEvent as ToolCallStartEvent,
)

__all__ = (
    "EVENT_TYPES",
    "LEGACY_EVENT_TYPES",
    "ActivityDeltaEvent",
    "ActivitySnapshotEvent",
    "AddOperation",
    "AguiEvent",
    "CopyOperation",
    "CustomEvent",
    "Event",
    "EventType",
    "Interrupt",
    "JsonPatchOperation",
    "MessagesSnapshotEvent",
    "MoveOperation",
    "RawEvent",
    "ReasoningEncryptedValueEvent",
    "ReasoningEndEvent",
    "ReasoningMessageChunkEvent",
    "ReasoningMessageContentEvent",
    "ReasoningMessageEndEvent",
    "ReasoningMessageStartEvent",
    "ReasoningStartEvent",
    "RemoveOperation",
    "ReplaceOperation",
    "RunErrorEvent",
    "RunFinishedCancelledOutcome",
    "RunFinishedEvent",
    "RunFinishedInterruptOutcome",
    "RunFinishedOutcome",
    "RunFinishedSuccessOutcome",
    "RunStartedEvent",
    "StateDeltaEvent",
    "StateSnapshotEvent",
    "StepFinishedEvent",
    "StepStartedEvent",
    "SubagentErrorEvent",
    "SubagentFinishedEvent",
    "SubagentFinishedOutcome",
    "SubagentFinishedSuccessOutcome",
    "SubagentFinishedSuspendedOutcome",
    "SubagentStartedEvent",
    "TestOperation",
    "TextMessageChunkEvent",
    "TextMessageContentEvent",
    "TextMessageEndEvent",
    "TextMessageStartEvent",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "TokenUsage",
    "ToolCallArgsEvent",
    "ToolCallChunkEvent",
    "ToolCallEndEvent",
    "ToolCallResultEvent",
    "ToolCallStartEvent",
    "UnknownEvent",
)


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
