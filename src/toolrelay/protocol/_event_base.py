"""What every AG-UI event shares: the ``type`` tag's values and the base Struct.

:class:`EventType` names every tag toolrelay knows, :class:`AguiEvent` is the tagged base
each event class of the family modules (``_lifecycle_events``, ``_text_events``,
``_tool_call_events``, ``_state_events``, ``_reasoning_events``, ``_special_events``)
derives from, and :class:`UnknownEvent` stands for a tag outside them all.

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
from typing import Any

import msgspec

__all__ = (
    "EVENT_TYPES",
    "LEGACY_EVENT_TYPES",
    "AguiEvent",
    "EventType",
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
