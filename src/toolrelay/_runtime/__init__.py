"""The async runtime (anyio): run registry, engine, tool execution, observers."""

from __future__ import annotations

from toolrelay._runtime._engine import Engine as Engine
from toolrelay._runtime._executor import (
    RunSync as RunSync,
    ToolOptions as ToolOptions,
    ToolThreads as ToolThreads,
    execute_batch as execute_batch,
    execute_tool as execute_tool,
    running_call as running_call,
)
from toolrelay._runtime._recovery import INTERRUPTED as INTERRUPTED
from toolrelay._runtime._registry import (
    RegistryChange as RegistryChange,
    RunHandle as RunHandle,
    RunRegistered as RunRegistered,
    RunRegistry as RunRegistry,
    RunReplaced as RunReplaced,
    RunUnregistered as RunUnregistered,
)
from toolrelay._runtime._turn import Turn as Turn
from toolrelay._runtime._views import (
    EngineStatistics as EngineStatistics,
    EventReceived as EventReceived,
    Notification as Notification,
    RunRetrying as RunRetrying,
    StateChanged as StateChanged,
    ToolCallFinished as ToolCallFinished,
    TurnSnapshot as TurnSnapshot,
    TurnStatistics as TurnStatistics,
)

__all__ = (
    "Engine",
    "EngineStatistics",
    "EventReceived",
    "INTERRUPTED",
    "Notification",
    "RegistryChange",
    "RunHandle",
    "RunRegistered",
    "RunRegistry",
    "RunReplaced",
    "RunRetrying",
    "RunSync",
    "RunUnregistered",
    "StateChanged",
    "ToolCallFinished",
    "ToolOptions",
    "ToolThreads",
    "Turn",
    "TurnSnapshot",
    "TurnStatistics",
    "execute_batch",
    "execute_tool",
    "running_call",
)
