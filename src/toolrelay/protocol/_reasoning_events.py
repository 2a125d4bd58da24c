"""AG-UI reasoning events, and the ``THINKING_*`` events of ag-ui-protocol 0.1.x they
replaced (AG-UI 1.0 removed them, but real servers still send them: pydantic-ai does, for
clients below AG-UI 0.1.11).
"""

from __future__ import annotations

from ._event_base import AguiEvent

__all__ = (
    "ReasoningEncryptedValueEvent",
    "ReasoningEndEvent",
    "ReasoningMessageChunkEvent",
    "ReasoningMessageContentEvent",
    "ReasoningMessageEndEvent",
    "ReasoningMessageStartEvent",
    "ReasoningStartEvent",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
    "ThinkingTextMessageStartEvent",
)


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
