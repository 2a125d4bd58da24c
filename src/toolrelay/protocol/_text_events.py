"""AG-UI text message events: a streamed assistant (or other role) message."""

from __future__ import annotations

from ._event_base import AguiEvent

__all__ = (
    "TextMessageChunkEvent",
    "TextMessageContentEvent",
    "TextMessageEndEvent",
    "TextMessageStartEvent",
)


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
