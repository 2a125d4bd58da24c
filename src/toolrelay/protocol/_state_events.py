"""AG-UI state events: snapshots and JSON Patch deltas of the shared state, the
conversation and activity messages, with the RFC 6902 operations the deltas carry.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from ._event_base import AguiEvent
from ._messages import Message, _WireStruct

__all__ = (
    "ActivityDeltaEvent",
    "ActivitySnapshotEvent",
    "AddOperation",
    "CopyOperation",
    "JsonPatchOperation",
    "MessagesSnapshotEvent",
    "MoveOperation",
    "RemoveOperation",
    "ReplaceOperation",
    "StateDeltaEvent",
    "StateSnapshotEvent",
    "TestOperation",
)


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
