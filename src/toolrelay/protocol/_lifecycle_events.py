"""AG-UI lifecycle events: a run, its steps and its subagent invocations begin and end.

Also the shapes they carry: token usage, interrupts, and the tagged outcomes of
``RUN_FINISHED`` and ``SUBAGENT_FINISHED``.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from ._event_base import AguiEvent
from ._messages import _WireStruct
from ._run_input import RunAgentInput

__all__ = (
    "Interrupt",
    "RunErrorEvent",
    "RunFinishedCancelledOutcome",
    "RunFinishedEvent",
    "RunFinishedInterruptOutcome",
    "RunFinishedOutcome",
    "RunFinishedSuccessOutcome",
    "RunStartedEvent",
    "StepFinishedEvent",
    "StepStartedEvent",
    "SubagentErrorEvent",
    "SubagentFinishedEvent",
    "SubagentFinishedOutcome",
    "SubagentFinishedSuccessOutcome",
    "SubagentFinishedSuspendedOutcome",
    "SubagentStartedEvent",
    "TokenUsage",
)


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
