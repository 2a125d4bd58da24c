"""AG-UI events: one frozen msgspec Struct per event type, tagged by ``type``.

The 31 event types of AG-UI 1.0 (``ag_ui.core.Event``) plus the five ``THINKING_*``
events of ag-ui-protocol 0.1.x, which AG-UI 1.0 removed in favour of ``REASONING_*`` but
real servers still send (pydantic-ai does, for clients below AG-UI 0.1.11). All of them
form the :data:`Event` union, which ``toolrelay.protocol._codec`` decodes in one typed
call. An event whose ``type`` is none of these decodes to :class:`UnknownEvent` instead,
which is deliberately not a member of the union.

Wire-liberal choices (we are a client: be liberal in what we accept):

- Unknown fields are skipped, never rejected (no ``forbid_unknown_fields``).
- A few fields the SDK types as a closed ``Literal`` are a plain ``str`` here, because a
  server may extend them and the value does not change how we process the event; each is
  marked with a comment. Fields whose value we must act on stay closed: the
  ``RUN_FINISHED`` and ``SUBAGENT_FINISHED`` outcomes (tagged unions) and JSON Patch ``op``.
- Bounds the SDK checks (``timestamp`` within +-2**53, token counts >= 0, at least one
  interrupt, JSON Pointer syntax of patch paths) are not checked: none of them changes
  how an event is processed.
- Required fields stay required: an event without them cannot be processed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeAlias

import msgspec

from ._messages import ContentPart, Message, _WireStruct
from ._run_input import RunAgentInput

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


class EventType(StrEnum):
    """Every event ``type`` toolrelay knows: AG-UI 1.0 plus the legacy ``THINKING_*``."""

    #: Opens a streamed text message.
    TEXT_MESSAGE_START = "TEXT_MESSAGE_START"
    #: Appends a fragment to a streamed text message.
    TEXT_MESSAGE_CONTENT = "TEXT_MESSAGE_CONTENT"
    #: Closes a streamed text message.
    TEXT_MESSAGE_END = "TEXT_MESSAGE_END"
    #: Start, content and end of a text message in one shorthand event.
    TEXT_MESSAGE_CHUNK = "TEXT_MESSAGE_CHUNK"
    #: Opens a streamed tool call.
    TOOL_CALL_START = "TOOL_CALL_START"
    #: Appends a fragment of a tool call's JSON arguments.
    TOOL_CALL_ARGS = "TOOL_CALL_ARGS"
    #: Closes a streamed tool call.
    TOOL_CALL_END = "TOOL_CALL_END"
    #: Start, arguments and end of a tool call in one shorthand event.
    TOOL_CALL_CHUNK = "TOOL_CALL_CHUNK"
    #: The result of a tool call the agent executed itself.
    TOOL_CALL_RESULT = "TOOL_CALL_RESULT"
    #: The whole shared state.
    STATE_SNAPSHOT = "STATE_SNAPSHOT"
    #: A JSON Patch to the shared state.
    STATE_DELTA = "STATE_DELTA"
    #: The whole conversation.
    MESSAGES_SNAPSHOT = "MESSAGES_SNAPSHOT"
    #: The whole content of an activity message.
    ACTIVITY_SNAPSHOT = "ACTIVITY_SNAPSHOT"
    #: A JSON Patch to an activity message.
    ACTIVITY_DELTA = "ACTIVITY_DELTA"
    #: A provider-native event passed through verbatim.
    RAW = "RAW"
    #: An application-defined event.
    CUSTOM = "CUSTOM"
    #: The run began.
    RUN_STARTED = "RUN_STARTED"
    #: The run ended normally (possibly interrupted or cancelled, see its outcome).
    RUN_FINISHED = "RUN_FINISHED"
    #: The run failed.
    RUN_ERROR = "RUN_ERROR"
    #: A named step of the agent began.
    STEP_STARTED = "STEP_STARTED"
    #: A named step of the agent ended.
    STEP_FINISHED = "STEP_FINISHED"
    #: A reasoning phase began.
    REASONING_START = "REASONING_START"
    #: Opens a streamed reasoning message.
    REASONING_MESSAGE_START = "REASONING_MESSAGE_START"
    #: Appends a fragment to a streamed reasoning message.
    REASONING_MESSAGE_CONTENT = "REASONING_MESSAGE_CONTENT"
    #: Closes a streamed reasoning message.
    REASONING_MESSAGE_END = "REASONING_MESSAGE_END"
    #: Start, content and end of a reasoning message in one shorthand event.
    REASONING_MESSAGE_CHUNK = "REASONING_MESSAGE_CHUNK"
    #: A reasoning phase ended.
    REASONING_END = "REASONING_END"
    #: An encrypted reasoning artefact attached to a message or tool call.
    REASONING_ENCRYPTED_VALUE = "REASONING_ENCRYPTED_VALUE"
    #: A subagent invocation began.
    SUBAGENT_STARTED = "SUBAGENT_STARTED"
    #: A subagent invocation ended.
    SUBAGENT_FINISHED = "SUBAGENT_FINISHED"
    #: A subagent invocation failed.
    SUBAGENT_ERROR = "SUBAGENT_ERROR"
    #: Legacy (ag-ui-protocol 0.1.x): a thinking phase began; now ``REASONING_START``.
    THINKING_START = "THINKING_START"
    #: Legacy (ag-ui-protocol 0.1.x): a thinking phase ended; now ``REASONING_END``.
    THINKING_END = "THINKING_END"
    #: Legacy (ag-ui-protocol 0.1.x): now ``REASONING_MESSAGE_START``.
    THINKING_TEXT_MESSAGE_START = "THINKING_TEXT_MESSAGE_START"
    #: Legacy (ag-ui-protocol 0.1.x): now ``REASONING_MESSAGE_CONTENT``.
    THINKING_TEXT_MESSAGE_CONTENT = "THINKING_TEXT_MESSAGE_CONTENT"
    #: Legacy (ag-ui-protocol 0.1.x): now ``REASONING_MESSAGE_END``.
    THINKING_TEXT_MESSAGE_END = "THINKING_TEXT_MESSAGE_END"


#: The ``type`` of every event the :data:`Event` union decodes.
EVENT_TYPES: frozenset[str] = frozenset(member.value for member in EventType)

#: The ``THINKING_*`` types of ag-ui-protocol 0.1.x, gone from AG-UI 1.0.
LEGACY_EVENT_TYPES: frozenset[str] = frozenset(
    member.value for member in EventType if member.name.startswith("THINKING_")
)


class AguiEvent(
    msgspec.Struct,
    tag_field="type",
    rename="camel",
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    gc=False,
):
    """The fields every AG-UI event carries (AG-UI ``BaseEvent``).

    Attributes:
        timestamp: When the event was created; in practice milliseconds since the epoch.
        raw_event: The provider-native event this one was translated from (``rawEvent``).
        metadata: Extra information attached to the event.

    Event classes repeat ``frozen=True, kw_only=True``: msgspec applies ``kw_only`` only to
    the fields a class itself declares, and mypy does not see ``frozen`` inherited.

    Events are not tracked by the cycle collector (``gc=False``, inherited): an agent
    streams hundreds of thousands of them, they are frozen, and a decoded event cannot
    be part of a reference cycle. Do not put an event inside its own ``metadata``.
    """

    timestamp: int | None = None
    raw_event: Any = None
    metadata: dict[str, Any] | None = None


class UnknownEvent(msgspec.Struct, frozen=True):
    """An event whose ``type`` toolrelay does not know (a newer protocol, a vendor's own).

    Not a member of :data:`Event`: the decoder produces it when the tagged decode fails on
    an unknown tag, and ``encode_event`` writes ``raw`` back unchanged.

    Attributes:
        type: The event's ``type``.
        raw: The event's JSON, byte for byte as received.
    """

    type: str
    raw: bytes


# --- shapes nested in events -------------------------------------------------------------


class TokenUsage(_WireStruct, frozen=True, kw_only=True):
    """Tokens one model call used (AG-UI ``TokenUsage``)."""

    provider: str | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None


class Interrupt(_WireStruct, frozen=True, kw_only=True):
    """A question the agent needs answered before the run can go on."""

    id: str
    reason: str
    subagent_run_id: str | None = None
    message: str | None = None
    tool_call_id: str | None = None
    response_schema: dict[str, Any] | None = None
    expires_at: str | None = None
    metadata: dict[str, Any] | None = None


class RunFinishedSuccessOutcome(
    _WireStruct, tag_field="type", tag="success", frozen=True, kw_only=True
):
    """The run completed; ``pending_tool_call_ids`` are calls left for the client."""

    pending_tool_call_ids: list[str] | None = None


class RunFinishedInterruptOutcome(
    _WireStruct, tag_field="type", tag="interrupt", frozen=True, kw_only=True
):
    """The run paused on ``interrupts`` (the SDK requires at least one)."""

    interrupts: list[Interrupt]


class RunFinishedCancelledOutcome(
    _WireStruct, tag_field="type", tag="cancelled", frozen=True, kw_only=True
):
    """The run was cancelled."""


RunFinishedOutcome: TypeAlias = (
    RunFinishedSuccessOutcome | RunFinishedInterruptOutcome | RunFinishedCancelledOutcome
)
"""How a run ended, discriminated by ``type``."""


class SubagentFinishedSuccessOutcome(
    _WireStruct, tag_field="type", tag="success", frozen=True, kw_only=True
):
    """The subagent completed."""


class SubagentFinishedSuspendedOutcome(
    _WireStruct, tag_field="type", tag="suspended", frozen=True, kw_only=True
):
    """The subagent paused on the interrupts ``interrupt_ids``."""

    interrupt_ids: list[str] | None = None


SubagentFinishedOutcome: TypeAlias = (
    SubagentFinishedSuccessOutcome | SubagentFinishedSuspendedOutcome
)
"""How a subagent invocation ended, discriminated by ``type``."""


# JSON Patch (RFC 6902) operations, discriminated by ``op``. ``path`` and ``from`` are
# JSON Pointers (RFC 6901); their syntax is not checked here.


class AddOperation(_WireStruct, tag_field="op", tag="add", frozen=True, kw_only=True):
    """RFC 6902 ``add``."""

    path: str
    value: Any


class RemoveOperation(_WireStruct, tag_field="op", tag="remove", frozen=True, kw_only=True):
    """RFC 6902 ``remove``."""

    path: str


class ReplaceOperation(_WireStruct, tag_field="op", tag="replace", frozen=True, kw_only=True):
    """RFC 6902 ``replace``."""

    path: str
    value: Any


class MoveOperation(_WireStruct, tag_field="op", tag="move", frozen=True, kw_only=True):
    """RFC 6902 ``move`` (``from_`` is ``from`` on the wire)."""

    from_: str
    path: str


class CopyOperation(_WireStruct, tag_field="op", tag="copy", frozen=True, kw_only=True):
    """RFC 6902 ``copy`` (``from_`` is ``from`` on the wire)."""

    from_: str
    path: str


class TestOperation(_WireStruct, tag_field="op", tag="test", frozen=True, kw_only=True):
    """RFC 6902 ``test``."""

    __test__ = False  # not a pytest test class, despite the name

    path: str
    value: Any


JsonPatchOperation: TypeAlias = (
    AddOperation
    | RemoveOperation
    | ReplaceOperation
    | MoveOperation
    | CopyOperation
    | TestOperation
)
"""One RFC 6902 operation, discriminated by ``op``."""


# --- text messages -----------------------------------------------------------------------


class TextMessageStartEvent(AguiEvent, tag="TEXT_MESSAGE_START", frozen=True, kw_only=True):
    """Opens the streamed text message ``message_id``."""

    message_id: str
    # A plain str (the SDK: Literal developer/system/assistant/user): servers have sent
    # other roles, and the role does not change how the stream is assembled.
    # ``None`` means assistant.
    role: str | None = None
    name: str | None = None
    subagent_run_id: str | None = None


class TextMessageContentEvent(AguiEvent, tag="TEXT_MESSAGE_CONTENT", frozen=True, kw_only=True):
    """Appends ``delta`` (possibly empty, as a keep-alive) to message ``message_id``."""

    message_id: str
    delta: str
    subagent_run_id: str | None = None


class TextMessageEndEvent(AguiEvent, tag="TEXT_MESSAGE_END", frozen=True, kw_only=True):
    """Closes the streamed text message ``message_id``."""

    message_id: str
    subagent_run_id: str | None = None


class TextMessageChunkEvent(AguiEvent, tag="TEXT_MESSAGE_CHUNK", frozen=True, kw_only=True):
    """Shorthand for start, content and end; a continuation chunk omits what is unchanged."""

    message_id: str | None = None
    # A plain str, as on TEXT_MESSAGE_START.
    role: str | None = None
    delta: str | None = None
    name: str | None = None
    subagent_run_id: str | None = None


# --- tool calls --------------------------------------------------------------------------


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


# --- state, messages and activities ------------------------------------------------------


class StateSnapshotEvent(AguiEvent, tag="STATE_SNAPSHOT", frozen=True, kw_only=True):
    """Replaces the shared state with ``snapshot`` (any JSON value, ``null`` included)."""

    # ag-ui-protocol 0.1.x encoders wrote `exclude_none=True` and so dropped this
    # required field when its value was null. Absent decodes to UNSET (and is written
    # back absent), an explicit null to None: liberal in, faithful out.
    snapshot: Any = msgspec.UNSET
    subagent_run_id: str | None = None


class StateDeltaEvent(AguiEvent, tag="STATE_DELTA", frozen=True, kw_only=True):
    """Applies the JSON Patch ``delta`` to the shared state."""

    delta: list[JsonPatchOperation]
    subagent_run_id: str | None = None


class MessagesSnapshotEvent(AguiEvent, tag="MESSAGES_SNAPSHOT", frozen=True, kw_only=True):
    """Replaces the conversation with ``messages``."""

    messages: list[Message]


class ActivitySnapshotEvent(AguiEvent, tag="ACTIVITY_SNAPSHOT", frozen=True, kw_only=True):
    """Sets the content of activity message ``message_id``."""

    message_id: str
    activity_type: str
    content: dict[str, Any]
    replace: bool | None = None
    subagent_run_id: str | None = None


class ActivityDeltaEvent(AguiEvent, tag="ACTIVITY_DELTA", frozen=True, kw_only=True):
    """Applies the JSON Patch ``patch`` to activity message ``message_id``."""

    message_id: str
    activity_type: str
    patch: list[JsonPatchOperation]
    subagent_run_id: str | None = None


# --- pass-through ------------------------------------------------------------------------


class RawEvent(AguiEvent, tag="RAW", frozen=True, kw_only=True):
    """A provider-native ``event`` from ``source``, passed through verbatim."""

    # ag-ui-protocol 0.1.x encoders wrote `exclude_none=True` and so dropped this
    # required field when its value was null. Absent decodes to UNSET (and is written
    # back absent), an explicit null to None: liberal in, faithful out.
    event: Any = msgspec.UNSET
    source: str | None = None
    subagent_run_id: str | None = None


class CustomEvent(AguiEvent, tag="CUSTOM", frozen=True, kw_only=True):
    """An application-defined event ``name`` carrying ``value`` (``null`` is a value)."""

    name: str
    # ag-ui-protocol 0.1.x encoders wrote `exclude_none=True` and so dropped this
    # required field when its value was null. Absent decodes to UNSET (and is written
    # back absent), an explicit null to None: liberal in, faithful out.
    value: Any = msgspec.UNSET
    subagent_run_id: str | None = None


# --- run lifecycle -----------------------------------------------------------------------


class RunStartedEvent(AguiEvent, tag="RUN_STARTED", frozen=True, kw_only=True):
    """Run ``run_id`` of thread ``thread_id`` began; ``input`` echoes the request."""

    thread_id: str
    run_id: str
    protocol_version: str | None = None
    parent_run_id: str | None = None
    input: RunAgentInput | None = None


class RunFinishedEvent(AguiEvent, tag="RUN_FINISHED", frozen=True, kw_only=True):
    """Run ``run_id`` ended; ``outcome`` says how (absent means success)."""

    thread_id: str
    run_id: str
    result: Any = None
    # A closed tagged union: an outcome type we do not know is an invalid event, since
    # whether the run succeeded, paused or was cancelled decides what happens next.
    outcome: RunFinishedOutcome | None = None
    usage: list[TokenUsage] | None = None


class RunErrorEvent(AguiEvent, tag="RUN_ERROR", frozen=True, kw_only=True):
    """The run failed with ``message`` (and an open-ended ``code``)."""

    message: str
    code: str | None = None
    usage: list[TokenUsage] | None = None


class StepStartedEvent(AguiEvent, tag="STEP_STARTED", frozen=True, kw_only=True):
    """Step ``step_name`` began."""

    step_name: str
    subagent_run_id: str | None = None


class StepFinishedEvent(AguiEvent, tag="STEP_FINISHED", frozen=True, kw_only=True):
    """Step ``step_name`` ended."""

    step_name: str
    subagent_run_id: str | None = None


# --- reasoning ---------------------------------------------------------------------------


class ReasoningStartEvent(AguiEvent, tag="REASONING_START", frozen=True, kw_only=True):
    """A reasoning phase ``message_id`` began."""

    message_id: str
    subagent_run_id: str | None = None


class ReasoningMessageStartEvent(
    AguiEvent, tag="REASONING_MESSAGE_START", frozen=True, kw_only=True
):
    """Opens the streamed reasoning message ``message_id``."""

    message_id: str
    # A plain str (the SDK: Literal "reasoning"), tolerated whatever its value.
    role: str = "reasoning"
    subagent_run_id: str | None = None


class ReasoningMessageContentEvent(
    AguiEvent, tag="REASONING_MESSAGE_CONTENT", frozen=True, kw_only=True
):
    """Appends ``delta`` to reasoning message ``message_id``."""

    message_id: str
    delta: str
    subagent_run_id: str | None = None


class ReasoningMessageEndEvent(AguiEvent, tag="REASONING_MESSAGE_END", frozen=True, kw_only=True):
    """Closes the streamed reasoning message ``message_id``."""

    message_id: str
    subagent_run_id: str | None = None


class ReasoningMessageChunkEvent(
    AguiEvent, tag="REASONING_MESSAGE_CHUNK", frozen=True, kw_only=True
):
    """Shorthand for start, content and end of a reasoning message."""

    message_id: str | None = None
    delta: str | None = None
    subagent_run_id: str | None = None


class ReasoningEndEvent(AguiEvent, tag="REASONING_END", frozen=True, kw_only=True):
    """The reasoning phase ``message_id`` ended."""

    message_id: str
    subagent_run_id: str | None = None


class ReasoningEncryptedValueEvent(
    AguiEvent, tag="REASONING_ENCRYPTED_VALUE", frozen=True, kw_only=True
):
    """An encrypted reasoning artefact for the message or tool call ``entity_id``."""

    # A plain str (the SDK: Literal "tool-call" | "message"): a provider may attach
    # artefacts to other entities, and the value is stored, never interpreted.
    subtype: str
    entity_id: str
    encrypted_value: str
    subagent_run_id: str | None = None


# --- subagents ---------------------------------------------------------------------------


class SubagentStartedEvent(AguiEvent, tag="SUBAGENT_STARTED", frozen=True, kw_only=True):
    """Subagent invocation ``subagent_run_id`` of subagent ``name`` began."""

    subagent_run_id: str
    name: str
    description: str | None = None
    parent_subagent_run_id: str | None = None
    parent_tool_call_id: str | None = None
    parent_message_id: str | None = None


class SubagentFinishedEvent(AguiEvent, tag="SUBAGENT_FINISHED", frozen=True, kw_only=True):
    """Subagent invocation ``subagent_run_id`` ended; ``outcome`` says how."""

    subagent_run_id: str
    result: Any = None
    outcome: SubagentFinishedOutcome | None = None


class SubagentErrorEvent(AguiEvent, tag="SUBAGENT_ERROR", frozen=True, kw_only=True):
    """Subagent invocation ``subagent_run_id`` failed with ``message``."""

    subagent_run_id: str
    message: str
    code: str | None = None


# --- legacy (ag-ui-protocol 0.1.x; removed in AG-UI 1.0) ---------------------------------


class ThinkingStartEvent(AguiEvent, tag="THINKING_START", frozen=True, kw_only=True):
    """Legacy: a thinking phase began (AG-UI 1.0: ``REASONING_START``)."""

    title: str | None = None


class ThinkingEndEvent(AguiEvent, tag="THINKING_END", frozen=True, kw_only=True):
    """Legacy: a thinking phase ended (AG-UI 1.0: ``REASONING_END``)."""


class ThinkingTextMessageStartEvent(
    AguiEvent, tag="THINKING_TEXT_MESSAGE_START", frozen=True, kw_only=True
):
    """Legacy: opens a thinking message (AG-UI 1.0: ``REASONING_MESSAGE_START``)."""


class ThinkingTextMessageContentEvent(
    AguiEvent, tag="THINKING_TEXT_MESSAGE_CONTENT", frozen=True, kw_only=True
):
    """Legacy: appends ``delta`` to the thinking message (``REASONING_MESSAGE_CONTENT``)."""

    delta: str


class ThinkingTextMessageEndEvent(
    AguiEvent, tag="THINKING_TEXT_MESSAGE_END", frozen=True, kw_only=True
):
    """Legacy: closes the thinking message (AG-UI 1.0: ``REASONING_MESSAGE_END``)."""


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
