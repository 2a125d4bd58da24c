"""toolrelay: the lifecycle of LLM tool-calling conversations as declared state machines.

An agent streams events (AG-UI over HTTP/SSE, or a provider's own stream). When a run
ends with tool calls pending, toolrelay executes the tools (concurrently, each
isolated), sends the results back in a continuation run, and repeats until the agent
answers, with a circuit breaker, cancellation, stale-run protection, concurrent
threads, and a proof that every path ends in a terminal state.

This module is the engine story: the engine, tools, turns, their views and
notifications, and every error toolrelay raises. Each public object has one public
path. The other public namespaces: ``toolrelay.protocol`` (AG-UI wire types),
``toolrelay.backends`` (where a run's events come from; ``.providers``),
``toolrelay.sansio`` (the event processor alone, for code that does its own I/O),
``toolrelay.store`` (durable threads), ``toolrelay.server`` (an AG-UI server),
``toolrelay.testing`` (scripted agents, builders, property suites),
``toolrelay.diagrams`` and ``toolrelay.verify``. Modules and packages whose name
starts with ``_`` are internal.

Importing ``toolrelay`` is cheap: each public name is imported from its layer the first
time it is read (``toolrelay.Engine``, ``from toolrelay import Engine``), so a program
that needs only part of the package, or only its version, pays for that part.
"""

from __future__ import annotations

import sys as _sys
import typing as _typing

from toolrelay._version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from toolrelay._core import (
        Activity as Activity,
        ActivityKind as ActivityKind,
        ChatMessage as ChatMessage,
        Conversation as Conversation,
        Limits as Limits,
        ProtocolViolation as ProtocolViolation,
        ReasoningRecord as ReasoningRecord,
        TextMessage as TextMessage,
        ToolCallBatch as ToolCallBatch,
        ToolCallInfo as ToolCallInfo,
        ToolContext as ToolContext,
        ToolError as ToolError,
        ToolRegistry as ToolRegistry,
        ToolResult as ToolResult,
        ToolSpec as ToolSpec,
        to_agui_messages as to_agui_messages,
        tool as tool,
    )
    from toolrelay._core._thread_key import ThreadKey as ThreadKey
    from toolrelay._errors import (
        AgentRunError as AgentRunError,
        ApprovalError as ApprovalError,
        ClosedError as ClosedError,
        ConnectError as ConnectError,
        ContentTypeError as ContentTypeError,
        ConversationError as ConversationError,
        DeadlineError as DeadlineError,
        HTTPStatusError as HTTPStatusError,
        IllegalTransition as IllegalTransition,
        InvalidEventError as InvalidEventError,
        LimitExceededError as LimitExceededError,
        LocalProtocolError as LocalProtocolError,
        MalformedEventError as MalformedEventError,
        ReadTimeoutError as ReadTimeoutError,
        RemoteProtocolError as RemoteProtocolError,
        ResumeError as ResumeError,
        RunAllocationError as RunAllocationError,
        StaleClaimError as StaleClaimError,
        StoreCorruptError as StoreCorruptError,
        StoreError as StoreError,
        StoreUnavailableError as StoreUnavailableError,
        StoreVersionError as StoreVersionError,
        StreamDroppedError as StreamDroppedError,
        StreamEndedEarlyError as StreamEndedEarlyError,
        ToolDefinitionError as ToolDefinitionError,
        ToolrelayError as ToolrelayError,
        TransportError as TransportError,
        UnknownServerError as UnknownServerError,
    )
    from toolrelay._machines import (
        RunLifecycle as RunLifecycle,
        RunStatus as RunStatus,
        ToolCallLifecycle as ToolCallLifecycle,
        ToolCallStatus as ToolCallStatus,
    )
    from toolrelay._reasons import ReasonKind as ReasonKind, TerminalReason as TerminalReason
    from toolrelay._runtime import (
        Engine as Engine,
        EngineStatistics as EngineStatistics,
        EventReceived as EventReceived,
        Notification as Notification,
        RegistryChange as RegistryChange,
        RunHandle as RunHandle,
        RunRegistered as RunRegistered,
        RunRegistry as RunRegistry,
        RunReplaced as RunReplaced,
        RunRetrying as RunRetrying,
        RunUnregistered as RunUnregistered,
        StateChanged as StateChanged,
        ToolCallFinished as ToolCallFinished,
        ToolOptions as ToolOptions,
        Turn as Turn,
        TurnSnapshot as TurnSnapshot,
        TurnStatistics as TurnStatistics,
        execute_tool as execute_tool,
    )
    from toolrelay.backends._base import AgentBackend as AgentBackend

__all__ = (
    "Activity",
    "ActivityKind",
    "AgentBackend",
    "AgentRunError",
    "ApprovalError",
    "ChatMessage",
    "ClosedError",
    "ConnectError",
    "ContentTypeError",
    "Conversation",
    "ConversationError",
    "DeadlineError",
    "Engine",
    "EngineStatistics",
    "EventReceived",
    "HTTPStatusError",
    "IllegalTransition",
    "InvalidEventError",
    "LimitExceededError",
    "Limits",
    "LocalProtocolError",
    "MalformedEventError",
    "Notification",
    "ProtocolViolation",
    "ReadTimeoutError",
    "ReasonKind",
    "ReasoningRecord",
    "RegistryChange",
    "RemoteProtocolError",
    "ResumeError",
    "RunAllocationError",
    "RunHandle",
    "RunLifecycle",
    "RunRegistered",
    "RunRegistry",
    "RunReplaced",
    "RunRetrying",
    "RunStatus",
    "RunUnregistered",
    "StaleClaimError",
    "StateChanged",
    "StoreCorruptError",
    "StoreError",
    "StoreUnavailableError",
    "StoreVersionError",
    "StreamDroppedError",
    "StreamEndedEarlyError",
    "TerminalReason",
    "TextMessage",
    "ThreadKey",
    "ToolCallBatch",
    "ToolCallFinished",
    "ToolCallInfo",
    "ToolCallLifecycle",
    "ToolCallStatus",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolOptions",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolrelayError",
    "TransportError",
    "Turn",
    "TurnSnapshot",
    "TurnStatistics",
    "UnknownServerError",
    "__version__",
    "execute_tool",
    "to_agui_messages",
    "tool",
)

#: Where each public name lives; read on first access by :func:`__getattr__`.
_LAZY: dict[str, str] = {
    "ReasonKind": "toolrelay._reasons",
    "TerminalReason": "toolrelay._reasons",
    "AgentBackend": "toolrelay.backends._base",
    "ThreadKey": "toolrelay._core._thread_key",
    "Activity": "toolrelay._core",
    "ActivityKind": "toolrelay._core",
    "ChatMessage": "toolrelay._core",
    "Conversation": "toolrelay._core",
    "Limits": "toolrelay._core",
    "ProtocolViolation": "toolrelay._core",
    "ReasoningRecord": "toolrelay._core",
    "TextMessage": "toolrelay._core",
    "ToolCallBatch": "toolrelay._core",
    "ToolCallInfo": "toolrelay._core",
    "ToolContext": "toolrelay._core",
    "ToolError": "toolrelay._core",
    "ToolRegistry": "toolrelay._core",
    "ToolResult": "toolrelay._core",
    "ToolSpec": "toolrelay._core",
    "to_agui_messages": "toolrelay._core",
    "tool": "toolrelay._core",
    "AgentRunError": "toolrelay._errors",
    "ApprovalError": "toolrelay._errors",
    "ClosedError": "toolrelay._errors",
    "ConnectError": "toolrelay._errors",
    "ContentTypeError": "toolrelay._errors",
    "ConversationError": "toolrelay._errors",
    "DeadlineError": "toolrelay._errors",
    "HTTPStatusError": "toolrelay._errors",
    "IllegalTransition": "toolrelay._errors",
    "InvalidEventError": "toolrelay._errors",
    "LimitExceededError": "toolrelay._errors",
    "LocalProtocolError": "toolrelay._errors",
    "MalformedEventError": "toolrelay._errors",
    "ReadTimeoutError": "toolrelay._errors",
    "RemoteProtocolError": "toolrelay._errors",
    "ResumeError": "toolrelay._errors",
    "RunAllocationError": "toolrelay._errors",
    "StaleClaimError": "toolrelay._errors",
    "StoreCorruptError": "toolrelay._errors",
    "StoreError": "toolrelay._errors",
    "StoreUnavailableError": "toolrelay._errors",
    "StoreVersionError": "toolrelay._errors",
    "StreamDroppedError": "toolrelay._errors",
    "StreamEndedEarlyError": "toolrelay._errors",
    "ToolDefinitionError": "toolrelay._errors",
    "ToolrelayError": "toolrelay._errors",
    "TransportError": "toolrelay._errors",
    "UnknownServerError": "toolrelay._errors",
    "RunLifecycle": "toolrelay._machines",
    "RunStatus": "toolrelay._machines",
    "ToolCallLifecycle": "toolrelay._machines",
    "ToolCallStatus": "toolrelay._machines",
    "Engine": "toolrelay._runtime",
    "EngineStatistics": "toolrelay._runtime",
    "EventReceived": "toolrelay._runtime",
    "Notification": "toolrelay._runtime",
    "RegistryChange": "toolrelay._runtime",
    "RunHandle": "toolrelay._runtime",
    "RunRegistered": "toolrelay._runtime",
    "RunRegistry": "toolrelay._runtime",
    "RunReplaced": "toolrelay._runtime",
    "RunRetrying": "toolrelay._runtime",
    "RunUnregistered": "toolrelay._runtime",
    "StateChanged": "toolrelay._runtime",
    "ToolCallFinished": "toolrelay._runtime",
    "ToolOptions": "toolrelay._runtime",
    "Turn": "toolrelay._runtime",
    "TurnSnapshot": "toolrelay._runtime",
    "TurnStatistics": "toolrelay._runtime",
    "execute_tool": "toolrelay._runtime",
}


if not _typing.TYPE_CHECKING:  # type checkers read the imports above; a typo stays an error

    def __getattr__(name: str) -> object:
        """Import a public name from its layer the first time it is read, then keep it."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        __import__(module)
        value = getattr(_sys.modules[module], name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
