"""AG-UI conversation messages and the content parts they carry.

A :data:`Message` is one of seven Structs discriminated by ``role`` (AG-UI 1.0
``Message``); user and tool messages may carry a list of :data:`ContentPart`, discriminated
by ``type``, whose media parts point at their bytes through a :data:`PartSource`.

Every Struct here shares one configuration (:class:`_WireStruct`): camelCase on the wire,
frozen, keyword-only, and optional fields left out of the JSON when they hold their
default. :class:`ToolCall` is the exception: its ``type`` must reach the wire even though
it holds its default (see the class).
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

__all__ = (
    "ActivityMessage",
    "AssistantMessage",
    "AudioPart",
    "ContentPart",
    "DataSource",
    "DeveloperMessage",
    "DocumentPart",
    "FileSource",
    "FunctionCall",
    "ImagePart",
    "Message",
    "PartSource",
    "ReasoningMessage",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolMessage",
    "UrlSource",
    "UserMessage",
)


class _WireStruct(
    msgspec.Struct, rename="camel", frozen=True, kw_only=True, omit_defaults=True, gc=False
):
    """The configuration every nested AG-UI shape shares (events have :class:`AguiEvent`).

    Unknown fields are skipped on decode (no ``forbid_unknown_fields``): a peer on a newer
    protocol version may add fields, and AG-UI's own SDK keeps them rather than failing.
    Subclasses repeat ``frozen=True, kw_only=True``: msgspec applies ``kw_only`` only to
    the fields a class itself declares, and mypy does not see ``frozen`` inherited.

    Like events, these are not tracked by the cycle collector (``gc=False``, inherited):
    a conversation holds every message, and each run's ``RunAgentInput`` all of them,
    for as long as its turn lives; they are frozen, and a decoded one cannot be part of
    a reference cycle. Do not put a message, or a run's input, inside one of its own
    fields (``state``, ``metadata``, a part's ``payload``).
    """


# --- content part sources (AG-UI 1.0 ``PartSource``, discriminated by ``type``) ---------


class DataSource(_WireStruct, tag_field="type", tag="data", frozen=True, kw_only=True):
    """Inline media: base64 ``value`` with its MIME type."""

    value: str
    mime_type: str


class UrlSource(_WireStruct, tag_field="type", tag="url", frozen=True, kw_only=True):
    """Media the receiver fetches from ``value`` (a URL)."""

    value: str
    mime_type: str | None = None


class FileSource(_WireStruct, tag_field="type", tag="file", frozen=True, kw_only=True):
    """Media already uploaded to a provider; ``value`` is the provider's file handle."""

    value: str
    provider: str | None = None
    mime_type: str | None = None


PartSource: TypeAlias = DataSource | UrlSource | FileSource
"""Where a media part's bytes are (AG-UI ``PartSource``)."""


# --- content parts (AG-UI 1.0 ``ContentPart``, discriminated by ``type``) ---------------


class TextPart(_WireStruct, tag_field="type", tag="text", frozen=True, kw_only=True):
    """A text part of a multi-part message content."""

    text: str
    id: str | None = None
    # The SDK types part metadata as ``Any`` (not the ``dict`` of messages and events).
    metadata: Any = None


class ImagePart(_WireStruct, tag_field="type", tag="image", frozen=True, kw_only=True):
    """An image part."""

    source: PartSource
    id: str | None = None
    metadata: Any = None


class AudioPart(_WireStruct, tag_field="type", tag="audio", frozen=True, kw_only=True):
    """An audio part."""

    source: PartSource
    id: str | None = None
    metadata: Any = None


class VideoPart(_WireStruct, tag_field="type", tag="video", frozen=True, kw_only=True):
    """A video part."""

    source: PartSource
    id: str | None = None
    metadata: Any = None


class DocumentPart(_WireStruct, tag_field="type", tag="document", frozen=True, kw_only=True):
    """A document part (PDF and the like)."""

    source: PartSource
    id: str | None = None
    metadata: Any = None


# The 0.x ``{"type": "binary"}`` part is not accepted: AG-UI 1.0 removed it and its own
# SDK rejects it too.
ContentPart: TypeAlias = TextPart | ImagePart | AudioPart | VideoPart | DocumentPart
"""One part of a user or tool message's content (AG-UI ``ContentPart``)."""


# --- tool calls --------------------------------------------------------------------------


class FunctionCall(_WireStruct, frozen=True, kw_only=True):
    """The function a tool call invokes: its ``name`` and JSON-encoded ``arguments``."""

    name: str
    arguments: str


class ToolCall(_WireStruct, omit_defaults=False, frozen=True, kw_only=True):
    """One tool call of an assistant message, in the OpenAI shape.

    ``type`` is written on the wire even though it holds its default ``"function"``:
    ag-ui-protocol 0.1.x servers, TypeScript peers (zod ``z.literal("function")``) and
    OpenAI-shaped servers require it. So this Struct turns ``omit_defaults`` off, and its
    optional fields default to :data:`msgspec.UNSET` (never encoded) rather than ``None``
    (which would be encoded as ``null``, and zod's ``.optional()`` rejects ``null``).
    An explicit ``None`` read from the wire is kept and written back as ``null``.

    ``type`` is a plain ``str``, not ``Literal["function"]``: providers have started adding
    other kinds of tool call (OpenAI's ``"custom"``), and a relay should pass them on.
    """

    id: str
    type: str = "function"
    function: FunctionCall
    encrypted_value: str | None | UnsetType = UNSET
    metadata: dict[str, Any] | None | UnsetType = UNSET


# --- messages (AG-UI 1.0 ``Message``, discriminated by ``role``) ------------------------


class DeveloperMessage(_WireStruct, tag_field="role", tag="developer", frozen=True, kw_only=True):
    """Instructions from the developer (the newer spelling of a system prompt)."""

    id: str
    content: str
    name: str | None = None
    subagent_run_id: str | None = None
    encrypted_value: str | None = None
    metadata: dict[str, Any] | None = None


class SystemMessage(_WireStruct, tag_field="role", tag="system", frozen=True, kw_only=True):
    """A system prompt."""

    id: str
    content: str
    name: str | None = None
    subagent_run_id: str | None = None
    encrypted_value: str | None = None
    metadata: dict[str, Any] | None = None


class AssistantMessage(_WireStruct, tag_field="role", tag="assistant", frozen=True, kw_only=True):
    """What the model said: text ``content``, ``tool_calls``, or both.

    ``tool_calls`` defaults to ``None`` (left out); any list, even an empty one, is
    written as ``toolCalls``.
    """

    id: str
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None
    subagent_run_id: str | None = None
    encrypted_value: str | None = None
    metadata: dict[str, Any] | None = None


class UserMessage(_WireStruct, tag_field="role", tag="user", frozen=True, kw_only=True):
    """What the user said: a string or a list of content parts."""

    id: str
    content: str | list[ContentPart]
    name: str | None = None
    subagent_run_id: str | None = None
    encrypted_value: str | None = None
    metadata: dict[str, Any] | None = None


class ToolMessage(_WireStruct, tag_field="role", tag="tool", frozen=True, kw_only=True):
    """The result of the tool call ``tool_call_id``; ``error`` is set when it failed."""

    id: str
    content: str | list[ContentPart]
    tool_call_id: str
    error: str | None = None
    subagent_run_id: str | None = None
    encrypted_value: str | None = None
    metadata: dict[str, Any] | None = None


class ActivityMessage(_WireStruct, tag_field="role", tag="activity", frozen=True, kw_only=True):
    """A structured activity (a plan, a progress card) shown in the conversation."""

    id: str
    activity_type: str
    content: dict[str, Any]
    subagent_run_id: str | None = None
    metadata: dict[str, Any] | None = None


class ReasoningMessage(_WireStruct, tag_field="role", tag="reasoning", frozen=True, kw_only=True):
    """The model's visible reasoning, or its encrypted form in ``encrypted_value``."""

    id: str
    content: str
    subagent_run_id: str | None = None
    encrypted_value: str | None = None
    metadata: dict[str, Any] | None = None


Message: TypeAlias = (
    DeveloperMessage
    | SystemMessage
    | AssistantMessage
    | UserMessage
    | ToolMessage
    | ActivityMessage
    | ReasoningMessage
)
"""Any AG-UI message, discriminated by ``role``."""
