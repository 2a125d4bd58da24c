"""toolrelay: the lifecycle of LLM tool-calling conversations as declared state machines.

An agent streams events (AG-UI over HTTP/SSE, or a provider's own stream). When a run
ends with tool calls pending, toolrelay executes the tools (concurrently, each
isolated), sends the results back in a continuation run, and repeats until the agent
answers, with a circuit breaker, cancellation, stale-run protection, concurrent
threads, and a proof that every path ends in a terminal state.

Public namespaces: ``toolrelay`` (this module), ``toolrelay.protocol`` (wire types),
``toolrelay.machines``, ``toolrelay.testing``, ``toolrelay.diagrams``.
"""

from __future__ import annotations

from toolrelay._reasons import ReasonKind as ReasonKind, TerminalReason as TerminalReason
from toolrelay._version import __version__ as __version__
from toolrelay.backends import AgentBackend as AgentBackend, ThreadKey as ThreadKey
from toolrelay.core import (
    Activity as Activity,
    ActivityKind as ActivityKind,
    Conversation as Conversation,
    EventProcessor as EventProcessor,
    Limits as Limits,
    ProtocolViolation as ProtocolViolation,
    TextMessage as TextMessage,
    ToolCallInfo as ToolCallInfo,
    ToolCallMessage as ToolCallMessage,
    ToolContext as ToolContext,
    ToolError as ToolError,
    ToolRegistry as ToolRegistry,
    ToolResult as ToolResult,
    ToolSpec as ToolSpec,
    to_agui_messages as to_agui_messages,
    tool as tool,
)
from toolrelay.errors import (
    ClosedError as ClosedError,
    IllegalTransition as IllegalTransition,
    LocalProtocolError as LocalProtocolError,
    RemoteProtocolError as RemoteProtocolError,
    ToolrelayError as ToolrelayError,
)
from toolrelay.machines import (
    RunLifecycle as RunLifecycle,
    RunStatus as RunStatus,
    ToolCallLifecycle as ToolCallLifecycle,
    ToolCallStatus as ToolCallStatus,
)
from toolrelay.runtime import (
    Engine as Engine,
    EngineStatistics as EngineStatistics,
    EventReceived as EventReceived,
    Notification as Notification,
    RunCompleted as RunCompleted,
    RunContinued as RunContinued,
    RunHandle as RunHandle,
    RunRegistry as RunRegistry,
    RunRetrying as RunRetrying,
    RunStarted as RunStarted,
    StateChanged as StateChanged,
    ToolCallFinished as ToolCallFinished,
    ToolOptions as ToolOptions,
    Turn as Turn,
    TurnSnapshot as TurnSnapshot,
    TurnStatistics as TurnStatistics,
    execute_tool as execute_tool,
)

__all__ = (
    "Activity",
    "ActivityKind",
    "AgentBackend",
    "ClosedError",
    "Conversation",
    "Engine",
    "EngineStatistics",
    "EventProcessor",
    "EventReceived",
    "IllegalTransition",
    "Limits",
    "LocalProtocolError",
    "Notification",
    "ProtocolViolation",
    "ReasonKind",
    "RemoteProtocolError",
    "RunCompleted",
    "RunContinued",
    "RunHandle",
    "RunLifecycle",
    "RunRegistry",
    "RunRetrying",
    "RunStarted",
    "RunStatus",
    "StateChanged",
    "TerminalReason",
    "TextMessage",
    "ThreadKey",
    "ToolCallFinished",
    "ToolCallInfo",
    "ToolCallLifecycle",
    "ToolCallMessage",
    "ToolCallStatus",
    "ToolContext",
    "ToolError",
    "ToolOptions",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolrelayError",
    "Turn",
    "TurnSnapshot",
    "TurnStatistics",
    "__version__",
    "execute_tool",
    "to_agui_messages",
    "tool",
)
