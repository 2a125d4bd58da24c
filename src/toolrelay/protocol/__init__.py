"""The AG-UI wire types and their JSON codec: ``toolrelay.protocol``.

Every AG-UI 1.0 event, message and request shape is a frozen msgspec Struct with snake_case
attributes and camelCase JSON. Decode with :func:`decode_event` (an unknown ``type``
becomes :class:`UnknownEvent`; a known type with a bad body raises
:class:`~toolrelay.InvalidEventError`), encode with :func:`encode_event` or
:func:`encode`, and dispatch with ``match``::

    match decode_event(payload):
        case ToolCallArgsEvent(tool_call_id=call_id, delta=delta):
            ...
        case UnknownEvent():
            ...

This package imports nothing from toolrelay but :mod:`toolrelay._errors`.
"""

from __future__ import annotations

from ._codec import (
    decode_event as decode_event,
    decode_message as decode_message,
    decode_messages as decode_messages,
    decode_run_input as decode_run_input,
    encode as encode,
    encode_event as encode_event,
)
from ._event_base import (
    EVENT_TYPES as EVENT_TYPES,
    LEGACY_EVENT_TYPES as LEGACY_EVENT_TYPES,
    AguiEvent as AguiEvent,
    EventType as EventType,
    UnknownEvent as UnknownEvent,
)
from ._events import Event as Event
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
from ._messages import (
    ActivityMessage as ActivityMessage,
    AssistantMessage as AssistantMessage,
    AudioPart as AudioPart,
    ContentPart as ContentPart,
    DataSource as DataSource,
    DeveloperMessage as DeveloperMessage,
    DocumentPart as DocumentPart,
    FileSource as FileSource,
    FunctionCall as FunctionCall,
    ImagePart as ImagePart,
    Message as Message,
    PartSource as PartSource,
    ReasoningMessage as ReasoningMessage,
    SystemMessage as SystemMessage,
    TextPart as TextPart,
    ToolCall as ToolCall,
    ToolMessage as ToolMessage,
    UrlSource as UrlSource,
    UserMessage as UserMessage,
    VideoPart as VideoPart,
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
from ._run_input import (
    Context as Context,
    ResumeEntry as ResumeEntry,
    RunAgentInput as RunAgentInput,
    Tool as Tool,
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
    "ActivityDeltaEvent",
    "ActivityMessage",
    "ActivitySnapshotEvent",
    "AddOperation",
    "AguiEvent",
    "AssistantMessage",
    "AudioPart",
    "ContentPart",
    "Context",
    "CopyOperation",
    "CustomEvent",
    "DataSource",
    "DeveloperMessage",
    "DocumentPart",
    "EVENT_TYPES",
    "Event",
    "EventType",
    "FileSource",
    "FunctionCall",
    "ImagePart",
    "Interrupt",
    "JsonPatchOperation",
    "LEGACY_EVENT_TYPES",
    "Message",
    "MessagesSnapshotEvent",
    "MoveOperation",
    "PartSource",
    "RawEvent",
    "ReasoningEncryptedValueEvent",
    "ReasoningEndEvent",
    "ReasoningMessage",
    "ReasoningMessageChunkEvent",
    "ReasoningMessageContentEvent",
    "ReasoningMessageEndEvent",
    "ReasoningMessageStartEvent",
    "ReasoningStartEvent",
    "RemoveOperation",
    "ReplaceOperation",
    "ResumeEntry",
    "RunAgentInput",
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
    "SystemMessage",
    "TestOperation",
    "TextMessageChunkEvent",
    "TextMessageContentEvent",
    "TextMessageEndEvent",
    "TextMessageStartEvent",
    "TextPart",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolCallArgsEvent",
    "ToolCallChunkEvent",
    "ToolCallEndEvent",
    "ToolCallResultEvent",
    "ToolCallStartEvent",
    "ToolMessage",
    "UnknownEvent",
    "UrlSource",
    "UserMessage",
    "VideoPart",
    "decode_event",
    "decode_message",
    "decode_messages",
    "decode_run_input",
    "encode",
    "encode_event",
)
