"""The contract between the engine and its turns, both ways, in one place.

A :class:`~toolrelay.Turn` never reads its engine's private members, and the
engine never reads a turn's: each side asks the other through a small named
interface that is not user API.

- **What a turn asks of its engine** is a :class:`TurnHost`: the engine builds one
  and hands it to every turn. It carries what the engine's turns share (the engine's
  settings as :class:`EngineSettings`, where notifications go, how tools run, where
  spans go) and the two things only the engine can do for a turn (load its thread
  from the store; count it and release its run when its task ends). This module
  imports neither the engine nor the turn: both import it.
- **What the engine asks of a turn** is the turn's engine-facing section
  (:meth:`Turn.drive`, :meth:`Turn.end`, :meth:`Turn.publish_state`,
  :meth:`Turn.close_slice`, :meth:`Turn.shift_slice`). Those methods are public so
  the engine can call them, and documented as the engine's; user code calls
  :meth:`Turn.cancel` and reads the turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import anyio

from toolrelay._core import Limits, ThreadKey
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay._runtime._deadlines import Deadlines
from toolrelay._runtime._durable import ThreadLog
from toolrelay._runtime._executor import ToolOptions, ToolThreads
from toolrelay._runtime._fanout import Fanout
from toolrelay._runtime._registry import RunHandle, RunRegistry
from toolrelay._runtime._views import Notification, RunRetrying
from toolrelay.backends._base import AgentBackend, RetryNotice, RunSettings

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ("EngineSettings", "TurnHost")

#: The turns a host serves.
TurnT = TypeVar("TurnT")


class EngineSettings(Protocol):
    """The public settings of an :class:`Engine <toolrelay.Engine>` that its
    turns read, each where it is used (so a change reaches the next use)."""

    @property
    def backend(self) -> AgentBackend: ...
    @property
    def registry(self) -> RunRegistry: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def tool_timeout(self) -> float | None: ...


class _RetryReporter:
    """A turn's ``RunSettings.on_retry``: tells the engine's observers of a retry on
    ``key``. One slotted object rather than a closure (a function, its cells and their
    tuple), since every turn holds one while it lives."""

    __slots__ = ("_key", "_notifications")

    def __init__(self, notifications: Fanout[Notification], key: ThreadKey) -> None:
        self._notifications = notifications
        self._key = key

    def __call__(self, notice: RetryNotice) -> None:
        self._notifications.publish(
            RunRetrying(
                self._key,
                notice.attempt,
                notice.delay,
                notice.reason,
                notice.code,
                notice.resume_from,
            )
        )


@dataclass(frozen=True, eq=False, slots=True)
class TurnHost(Generic[TurnT]):
    """What every turn of one engine shares, and how a turn reaches back to its engine.

    Attributes:
        engine: The engine's public settings (``backend``, ``registry``, ``limits``,
            ``tool_timeout``), read where they are used.
        notifications: Where observers are told (state, events, tool results).
        tool_limiter: Bound on tools running at once across all turns (``None``: none).
        tool_threads: The worker threads of blocking tools.
        tool_options: How tools run (result size, what the model sees of an error).
        tracer_provider: Where spans go (``None``: the global provider).
        include_reasoning: The engine's ``include_reasoning`` as its caller gave it
            (told to the backend, see :class:`~toolrelay.backends.RunSettings`).
        new_run_id: Makes a client-side run id when the backend allocates none.
        deadlines: Where a turn's deadline (``turn_seconds``) is kept while it runs.
        reach_turns: Whether a cancellation from outside a turn can reach its task once
            the turn has left its own scope (then its last write is shielded).
        load: Puts what the store has of a thread in front of its conversation, once
            (with a store only); when its last argument is true, what the thread's log
            holds is written in the same round trip where the store can.
        finished: Called as a turn's task ends, before its waiters wake: the turn's
            run leaves the registry and the turn is counted.
    """

    engine: EngineSettings
    notifications: Fanout[Notification]
    tool_limiter: anyio.CapacityLimiter | None
    tool_threads: ToolThreads
    tool_options: ToolOptions
    tracer_provider: TracerProvider | None
    include_reasoning: bool | None
    new_run_id: Callable[[], str]
    deadlines: Deadlines
    reach_turns: Callable[[], bool]
    load: Callable[[ThreadKey, ThreadLog, bool], Awaitable[None]]
    finished: Callable[[TurnT, RunHandle | None], None]

    def run_settings(self, key: ThreadKey) -> RunSettings:
        """What the backend is told for the runs of a turn on ``key`` (the engine's
        limits, and where a retry is reported)."""

        return RunSettings(
            limits=self.engine.limits,
            on_retry=_RetryReporter(self.notifications, key),
            include_reasoning=self.include_reasoning,
        )

    def deadline_reason(self) -> TerminalReason:
        """Why a turn that outlived ``limits.turn_seconds`` ended."""
        return TerminalReason(
            kind=ReasonKind.DEADLINE,
            message=(
                f"the turn did not end within turn_seconds={self.engine.limits.turn_seconds:g} s"
            ),
            code="turn_seconds",
        )
