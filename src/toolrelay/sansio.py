"""The event processor alone: sans-IO, for code that does its own I/O.

:class:`EventProcessor` is fed decoded AG-UI events (:mod:`toolrelay.protocol`) and
answers each with a tuple of *effects*, data saying what should happen next, in the
way h11's ``next_event`` answers with events. It performs no I/O, never awaits and
never reads a clock: the engine (:class:`toolrelay.Engine`) is one driver of it, and
code with its own transport can be another. Most events answer :data:`NO_EFFECTS`.

The conversation it builds, its limits and its states are the engine story's
(:class:`toolrelay.Conversation`, :class:`toolrelay.Limits`,
:class:`toolrelay.RunStatus`); this module holds what only a driver of the
processor needs.
"""

from __future__ import annotations

from toolrelay._core import (
    NO_EFFECTS as NO_EFFECTS,
    ActivityChanged as ActivityChanged,
    AgentResult as AgentResult,
    Effect as Effect,
    EventProcessor as EventProcessor,
    MessagesSettled as MessagesSettled,
    ToolsReady as ToolsReady,
    TurnCompleted as TurnCompleted,
    TurnEnded as TurnEnded,
    TurnInterrupted as TurnInterrupted,
    ViolationRaised as ViolationRaised,
    check_resume as check_resume,
)

__all__ = (
    "ActivityChanged",
    "AgentResult",
    "Effect",
    "EventProcessor",
    "MessagesSettled",
    "NO_EFFECTS",
    "ToolsReady",
    "TurnCompleted",
    "TurnEnded",
    "TurnInterrupted",
    "ViolationRaised",
    "check_resume",
)
