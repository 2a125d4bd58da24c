"""What the event processor answers with: effects the runtime must act on.

The processor never performs I/O. Fed an event, it updates the conversation and
returns a (usually empty) tuple of effects, the way h11's ``next_event`` returns
events. Most events (text and argument deltas) return the shared empty tuple
:data:`NO_EFFECTS`, so the hot path allocates nothing.

Effects and activities are not tracked by the cycle collector (``gc=False``): they
point at calls, messages and reasons, and nothing they point at points back, so they
can never be part of a cycle; a live turn keeps its latest activity and, between runs,
its ``ToolsReady``, which the collector would otherwise walk at every full collection.
"""

from __future__ import annotations

import enum

import msgspec

from toolrelay._core._conversation import ChatMessage, ToolCallInfo
from toolrelay._reasons import TerminalReason
from toolrelay.protocol import Interrupt

__all__ = (
    "MAX_ACTIVITY_NAMES",
    "NO_EFFECTS",
    "Activity",
    "ActivityChanged",
    "ActivityKind",
    "Effect",
    "MessagesSettled",
    "ProtocolViolation",
    "RunEnding",
    "TurnCompleted",
    "TurnEnded",
    "TurnInterrupted",
    "ToolsReady",
    "ViolationRaised",
)


class ActivityKind(enum.StrEnum):
    """What a UI shows for a turn right now."""

    #: Not started yet.
    IDLE = "idle"
    #: A run is open and nothing has streamed yet.
    AWAITING = "awaiting"
    #: Assistant text is streaming.
    STREAMING_TEXT = "streaming_text"
    #: The agent is thinking (reasoning events).
    REASONING = "reasoning"
    #: Tool calls are streaming ("Calling: a, b").
    CALLING_TOOLS = "calling_tools"
    #: The client is running tools between two runs ("Executing: a, b").
    EXECUTING_TOOLS = "executing_tools"
    #: Tools wait for the embedding code's approval ("Awaiting approval: a, b").
    AWAITING_APPROVAL = "awaiting_approval"
    #: The turn is over.
    DONE = "done"


MAX_ACTIVITY_NAMES = 8
"""How many tool names an :class:`Activity` lists; the rest are counted."""


class Activity(msgspec.Struct, frozen=True, gc=False):
    """What is happening in a turn, as a UI would say it.

    Attributes:
        kind: The kind of activity.
        tool_names: The tools being called or executed, in order: the first
            :data:`MAX_ACTIVITY_NAMES` of them, so that an activity costs the same to
            build and to print however many calls a run makes.
        more: How many calls there are beyond ``tool_names``.
    """

    kind: ActivityKind
    tool_names: tuple[str, ...] = ()
    more: int = 0

    def __str__(self) -> str:
        more = f" (+{self.more} more)" if self.more else ""
        match self.kind:
            case ActivityKind.CALLING_TOOLS:
                return "Calling: " + ", ".join(self.tool_names) + more
            case ActivityKind.EXECUTING_TOOLS:
                return "Executing: " + ", ".join(self.tool_names) + more
            case ActivityKind.AWAITING_APPROVAL:
                return "Awaiting approval: " + ", ".join(self.tool_names) + more
            case ActivityKind.AWAITING:
                return "Thinking..."
            case ActivityKind.STREAMING_TEXT:
                return "Responding..."
            case ActivityKind.REASONING:
                return "Reasoning..."
            case _:
                return ""


class ProtocolViolation(msgspec.Struct, frozen=True, gc=False):
    """An event the processor tolerated but the protocol does not allow.

    Attributes:
        code: A stable identifier (``"args_for_unknown_call"``).
        event_type: The AG-UI ``type`` of the offending event.
        message: What was wrong and what toolrelay did about it.
    """

    code: str
    event_type: str
    message: str


class ActivityChanged(msgspec.Struct, frozen=True, gc=False):
    """The turn's activity changed (for observers)."""

    activity: Activity


class ViolationRaised(msgspec.Struct, frozen=True, gc=False):
    """A protocol violation was tolerated (logged as a warning, event dropped or repaired)."""

    violation: ProtocolViolation


class ToolsReady(msgspec.Struct, frozen=True, gc=False):
    """The run's stream ended with tool calls pending: execute them, then continue.

    The ``calls`` are already ``executing`` and the run lifecycle is
    ``executing_tools``. The ``awaiting`` calls are ``awaiting_approval`` (their tool
    needs approval): each runs once approved, or ends ``failed`` once denied.
    """

    calls: tuple[ToolCallInfo, ...]
    awaiting: tuple[ToolCallInfo, ...] = ()


class MessagesSettled(msgspec.Struct, frozen=True, gc=False):
    """Messages of the conversation reached their final form: a text or reasoning
    message closed, a batch of tool calls was committed with its results.

    What a durable store writes, one block each, the moment it exists. A message may
    settle again when something it holds changes after it closed (a signature that
    arrives late, a tool result renamed to the id a server stored it under): the later
    one replaces the earlier, by id.
    """

    messages: tuple[ChatMessage, ...]


class TurnCompleted(msgspec.Struct, frozen=True, gc=False):
    """The run finished and no tool call is pending: the turn is ``completed``."""

    reason: TerminalReason


class TurnInterrupted(msgspec.Struct, frozen=True, gc=False):
    """The run finished with the AG-UI ``interrupt`` outcome: the turn is ``interrupted``.

    The agent waits for answers; the next turn on the thread sends them as
    ``RunAgentInput.resume`` entries, one per interrupt (by ``Interrupt.id``). Tool
    calls still pending were abandoned, not executed.

    Attributes:
        reason: ``ReasonKind.INTERRUPTED``, with the interrupts summed up in words.
        interrupts: What the agent asks, in the order it sent them (empty only when
            the agent broke the protocol and sent none: see the processor's
            tolerance table).
    """

    reason: TerminalReason
    interrupts: tuple[Interrupt, ...]


class TurnEnded(msgspec.Struct, frozen=True, gc=False):
    """The turn ended otherwise (``failed``, ``cancelled`` or ``superseded``); it is in
    that final state already, and ``reason`` says why."""

    reason: TerminalReason


Effect = (
    ActivityChanged
    | ViolationRaised
    | MessagesSettled
    | ToolsReady
    | TurnCompleted
    | TurnInterrupted
    | TurnEnded
)
"""Everything the processor can answer with."""

RunEnding = ToolsReady | TurnCompleted | TurnInterrupted | TurnEnded
"""The effects that end a run: the turn goes on with tools, or it is over (the last
effect of an answer that has one)."""

NO_EFFECTS: tuple[Effect, ...] = ()
"""The shared empty answer of most events."""
