"""The request a client sends to start an AG-UI run: :class:`RunAgentInput`.

Portability rule: AG-UI 1.0 makes everything but ``threadId``, ``runId`` and ``messages``
optional, but older servers are stricter. ag-ui-protocol 0.1.10 requires ``state``,
``tools``, ``context`` and ``forwardedProps`` (and ``Tool.parameters``); 0.1.22 still
requires ``tools``, ``context`` and ``forwardedProps``. So :class:`RunAgentInput` and
:class:`Tool` always write those fields, empty when they are empty, while the optional
fields newer versions added (``parentRunId``, ``protocolVersion``, ``resume``,
``Tool.metadata``) default to :data:`msgspec.UNSET` and are left out. Decoding accepts
input where any of them is absent.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from ._messages import Message, _WireStruct

__all__ = ("Context", "ResumeEntry", "RunAgentInput", "Tool")


def _no_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class Tool(_WireStruct, omit_defaults=False, frozen=True, kw_only=True):
    """A tool the client offers the agent.

    ``parameters`` is the JSON Schema of the tool's arguments. It is always written:
    ag-ui-protocol 0.1.10 requires it. A tool built without one takes no arguments,
    spelled the portable way, ``{"type": "object", "properties": {}}`` (Anthropic, for
    one, requires an object schema).
    """

    name: str
    description: str
    parameters: Any = msgspec.field(default_factory=_no_parameters)
    metadata: dict[str, Any] | None | UnsetType = UNSET


class Context(_WireStruct, frozen=True, kw_only=True):
    """A piece of context the client hands the agent."""

    description: str
    value: str


class ResumeEntry(_WireStruct, frozen=True, kw_only=True):
    """The client's answer to one interrupt of the previous run (AG-UI ``ResumeEntry``).

    ``status`` stays a closed ``Literal``: the agent must act on it, and a status it does
    not know cannot be acted on.
    """

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None
    metadata: dict[str, Any] | None = None


class RunAgentInput(_WireStruct, omit_defaults=False, frozen=True, kw_only=True):
    """The body of the request that starts a run.

    ``state``, ``tools``, ``context`` and ``forwarded_props`` are always encoded (``{}``,
    ``[]``, ``[]``, ``{}`` when empty) and default to those values when absent on decode.
    ``parent_run_id``, ``protocol_version`` and ``resume`` default to
    :data:`msgspec.UNSET` and are then left out; an explicit ``None`` read from the wire is
    kept and written back as ``null``.
    """

    thread_id: str
    run_id: str
    protocol_version: str | None | UnsetType = UNSET
    parent_run_id: str | None | UnsetType = UNSET
    state: Any = msgspec.field(default_factory=dict)
    messages: list[Message]
    tools: list[Tool] = msgspec.field(default_factory=list)
    context: list[Context] = msgspec.field(default_factory=list)
    forwarded_props: Any = msgspec.field(default_factory=dict)
    resume: list[ResumeEntry] | None | UnsetType = UNSET
