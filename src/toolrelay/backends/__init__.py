"""Where a run's events come from: the backend seam and its implementations."""

from __future__ import annotations

from toolrelay.backends._agui_http import (
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
    AguiHttpBackend as AguiHttpBackend,
    AuthHook as AuthHook,
    RunAllocator as RunAllocator,
    map_transport_errors as map_transport_errors,
)
from toolrelay.backends._base import (
    AgentBackend as AgentBackend,
    EventStream as EventStream,
    ThreadKey as ThreadKey,
)

__all__ = (
    "AgentBackend",
    "AguiHttpBackend",
    "AuthHook",
    "DEFAULT_TIMEOUT",
    "EventStream",
    "RunAllocator",
    "ThreadKey",
    "map_transport_errors",
)
