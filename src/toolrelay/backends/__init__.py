"""Where a run's events come from: the backend seam and its implementations."""

from __future__ import annotations

from toolrelay.backends._agui_http import (
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
    AguiHttpBackend as AguiHttpBackend,
    AuthHook as AuthHook,
    RunAllocator as RunAllocator,
)
from toolrelay.backends._base import (
    EventStream as EventStream,
    RetryNotice as RetryNotice,
    RunSettings as RunSettings,
    current_run_settings as current_run_settings,
    effective_limits as effective_limits,
    using_run_settings as using_run_settings,
)
from toolrelay.backends._retry import (
    NO_RETRY as NO_RETRY,
    RetryPolicy as RetryPolicy,
)
from toolrelay.backends._routing import RoutingBackend as RoutingBackend
from toolrelay.backends._transport import map_transport_errors as map_transport_errors

__all__ = (
    "AguiHttpBackend",
    "AuthHook",
    "DEFAULT_TIMEOUT",
    "EventStream",
    "NO_RETRY",
    "RetryNotice",
    "RetryPolicy",
    "RoutingBackend",
    "RunAllocator",
    "RunSettings",
    "current_run_settings",
    "effective_limits",
    "map_transport_errors",
    "using_run_settings",
)
