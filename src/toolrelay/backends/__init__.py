"""Where a run's events come from: the backend seam and its implementations."""

from __future__ import annotations

from toolrelay.backends._base import (
    AgentBackend as AgentBackend,
    EventStream as EventStream,
    ThreadKey as ThreadKey,
)

__all__ = ("AgentBackend", "EventStream", "ThreadKey")
