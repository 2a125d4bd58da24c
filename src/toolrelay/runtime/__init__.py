"""The async runtime (anyio): run registry, engine, tool execution, observers."""

from __future__ import annotations

from toolrelay.runtime._engine import (
    Engine as Engine,
    EngineStatistics as EngineStatistics,
    EventReceived as EventReceived,
    Notification as Notification,
    StateChanged as StateChanged,
    ToolCallFinished as ToolCallFinished,
    Turn as Turn,
    TurnSnapshot as TurnSnapshot,
    TurnStatistics as TurnStatistics,
)
from toolrelay.runtime._executor import execute_batch as execute_batch
from toolrelay.runtime._registry import (
    LifecycleEvent as LifecycleEvent,
    RunCompleted as RunCompleted,
    RunContinued as RunContinued,
    RunHandle as RunHandle,
    RunRegistry as RunRegistry,
    RunStarted as RunStarted,
)

__all__ = (
    "Engine",
    "EngineStatistics",
    "EventReceived",
    "LifecycleEvent",
    "Notification",
    "RunCompleted",
    "RunContinued",
    "RunHandle",
    "RunRegistry",
    "RunStarted",
    "StateChanged",
    "ToolCallFinished",
    "Turn",
    "TurnSnapshot",
    "TurnStatistics",
    "execute_batch",
)
