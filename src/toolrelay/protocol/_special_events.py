"""AG-UI special events: a provider-native event passed through, an application's own."""

from __future__ import annotations

from typing import Any

import msgspec

from ._event_base import AguiEvent

__all__ = (
    "CustomEvent",
    "RawEvent",
)


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
