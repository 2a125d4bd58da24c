"""The backend seam: where a run's events come from.

An :class:`AgentBackend` starts a run for a thread with a ``RunAgentInput`` and
yields its events as an async iterator inside an async context manager, so that the
stream is always closed (the engine leaves the ``async with`` on RUN_FINISHED, on
cancellation and on error alike). A backend may also allocate runs on the server
first (the reference design's ``createRun(room, thread)``); AG-UI servers that do
not allocate runs return ``None`` and the client chooses the run id.

Backends raise :class:`~toolrelay.RemoteProtocolError` subclasses for
everything the agent or the wire does wrong; the engine turns them into the
terminal reason of the turn.

One configuration: the engine that drives a run tells the backend its
:class:`RunSettings` (its :class:`~toolrelay.Limits`, where to report a retry)
for the duration of the run. The protocol stays two methods: the settings travel in a
context variable that the engine sets in each turn's task, and a backend reads them
with :func:`current_run_settings` inside :meth:`AgentBackend.run` (and
:func:`effective_limits` for the common case). A context variable rather than an
attribute set on the backend, because one backend (one connection pool) may serve
several engines with different limits, each run getting its own engine's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from toolrelay._core import Limits, ThreadKey
from toolrelay.protocol import Event, RunAgentInput, UnknownEvent

__all__ = (
    "AgentBackend",
    "ClosedOnExit",
    "EventBatches",
    "EventStream",
    "RetryNotice",
    "RunSettings",
    "ThreadKey",
    "current_run_settings",
    "effective_limits",
    "using_run_settings",
)


EventStream = AsyncIterator[Event | UnknownEvent]
"""The decoded events of one run, in order."""


@runtime_checkable
class EventBatches(Protocol):
    """An event stream that can also give each read's events at once (the HTTP
    backend's does): the engine then hands a read to the processor in one call."""

    def batches(self) -> AsyncIterator[Sequence[Event | UnknownEvent]]:
        """Each read's decoded events, in order, in one sequence (never an empty one)."""
        ...


@runtime_checkable
class AgentBackend(Protocol):
    """Something that runs an agent: an AG-UI server, a provider, a scripted agent."""

    async def allocate_run(self, key: ThreadKey) -> str | None:
        """Ask the server for a run id before starting a run.

        Returns:
            The server's run id, or ``None`` when the server does not allocate runs
            (the engine then generates one).

        Raises:
            RunAllocationError: The server refused or failed.
        """
        ...

    def run(
        self, key: ThreadKey, run_input: RunAgentInput
    ) -> AbstractAsyncContextManager[EventStream]:
        """Start the run and give its event stream; leaving the context closes it."""
        ...


class ClosedOnExit(ABC):
    """Used as ``async with``: entering gives the object (a backend, the server),
    leaving is :meth:`aclose`."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the object holds. Idempotent."""


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """A backend failed to start a run for a transient reason and will try again.

    Attributes:
        attempt: The attempt that failed (1 for the first).
        delay: Seconds the backend waits before the next attempt (``Retry-After``
            when the server gave one, within the policy's bounds).
        reason: What happened, for a person (``"HTTP 503: ..."``, ``"connection
            reset"``).
        code: The HTTP status or the transport error's code.
        resume_from: For a stream that broke mid-run and is resumed (not restarted):
            the last SSE event id received, sent as ``Last-Event-ID``.
    """

    attempt: int
    delay: float
    reason: str
    code: str | None = None
    resume_from: str | None = None


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What the engine driving a run asks of its backend (see the module docstring).

    Attributes:
        limits: The engine's bounds: a backend checks its wire bounds
            (``max_event_bytes``, ``run_seconds``, the argument pieces it buffers)
            against these rather than its own defaults.
        on_retry: Called (synchronously, from the run's task) before each retry, so
            that the engine can tell its observers.
        include_reasoning: The engine's ``include_reasoning`` as its caller gave it:
            ``None`` when the engine was left to ask the backend (``takes_reasoning``),
            so that a backend in front of several (a
            :class:`~toolrelay.backends.RoutingBackend`) can decide per run.
    """

    limits: Limits
    on_retry: Callable[[RetryNotice], None] | None = None
    include_reasoning: bool | None = None


_RUN_SETTINGS: ContextVar[RunSettings | None] = ContextVar("toolrelay_run_settings", default=None)


def current_run_settings() -> RunSettings | None:
    """The settings of the engine driving the current task's run; ``None`` when the
    backend is used without an engine (a test, a script)."""
    return _RUN_SETTINGS.get()


def effective_limits(own: Limits) -> Limits:
    """The limits a backend applies to the current run: the driving engine's, else
    ``own`` (the backend's constructor argument)."""
    settings = _RUN_SETTINGS.get()
    return settings.limits if settings is not None else own


def using_run_settings(settings: RunSettings) -> AbstractContextManager[None]:
    """Make ``settings`` the current run settings within the block (the engine does,
    in each turn's task; backends tested alone can do it too)."""
    return _UsingRunSettings(settings)


class _UsingRunSettings:
    """The block of :func:`using_run_settings`: one slotted object (a generator-based
    context manager would be two more, held by every live turn)."""

    __slots__ = ("_settings", "_token")

    def __init__(self, settings: RunSettings) -> None:
        self._settings = settings
        self._token: Token[RunSettings | None] | None = None

    def __enter__(self) -> None:
        self._token = _RUN_SETTINGS.set(self._settings)

    def __exit__(self, *exc_info: object) -> None:
        token = self._token
        if token is not None:
            self._token = None
            _RUN_SETTINGS.reset(token)
