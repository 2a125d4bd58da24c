"""What observers read of turns: snapshots, statistics and notifications.

Plain frozen values, built by the turn and the engine and handed out; reading one
never touches a live turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolrelay._core import Activity, ToolResult
from toolrelay._machines import RunStatus, ToolCallStatus
from toolrelay._reasons import TerminalReason
from toolrelay.backends._base import ThreadKey
from toolrelay.protocol import Event, Interrupt, UnknownEvent

__all__ = (
    "EngineStatistics",
    "EventReceived",
    "Notification",
    "RunRetrying",
    "StateChanged",
    "ToolCallFinished",
    "TurnSnapshot",
    "TurnStatistics",
)


@dataclass(frozen=True, slots=True)
class TurnSnapshot:
    """What a UI shows of a turn at one moment (cheap: no conversation copy).

    Attributes:
        key: The thread.
        status: The run lifecycle state.
        activity: "Calling: a, b", "Executing: a, b", streaming text, ...
        depth: Continuations started so far.
        run_id: The current run's id.
        run_count: Runs started so far.
        reason: Why the turn ended, once final.
        interrupts: What the agent asks, once the turn ended ``interrupted`` (answer
            with ``Engine.start_turn(key, resume=...)``); empty otherwise.
    """

    key: ThreadKey
    status: RunStatus
    activity: Activity
    depth: int
    run_id: str | None
    run_count: int
    reason: TerminalReason | None
    interrupts: tuple[Interrupt, ...] = ()

    @property
    def is_running(self) -> bool:
        return self.status.is_running


@dataclass(frozen=True, slots=True)
class TurnStatistics:
    """Counts over a turn: runs, depth, tool calls by state, violations.

    Attributes:
        runs: Runs the turn started.
        depth: Tool rounds so far.
        tool_calls: Its tool calls by state (every state is a key).
        violations: Protocol violations the agent committed in the turn: those kept
            in :attr:`Turn.violations <toolrelay.Turn.violations>` and those past
            ``Limits.max_violations``, counted and not kept.
        status: The turn's state.
    """

    runs: int
    depth: int
    tool_calls: dict[ToolCallStatus, int]
    violations: int
    status: RunStatus


@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """Counts over the engine: turns by state, registered runs, threads.

    Attributes:
        turns: Every turn started on the engine over its lifetime, by state: a live
            turn by its current state, a finished one by its final state (earlier
            turns of a thread are counted too, not only its latest). Every
            :class:`~toolrelay.RunStatus` is a key; the values add up to the
            number of turns started.
        registered_runs: Runs in the registry now (0 once it is closed).
        threads: Threads the engine holds a conversation for.
        stuck_tool_threads: Worker threads still running a blocking tool the engine
            gave up on (timed out or cancelled); they hold their slot of
            ``ToolOptions.max_threads`` until the tool returns.
    """

    turns: dict[RunStatus, int]
    registered_runs: int
    threads: int
    stuck_tool_threads: int = 0


@dataclass(frozen=True, slots=True)
class StateChanged:
    """A turn's status or activity changed."""

    snapshot: TurnSnapshot

    @property
    def key(self) -> ThreadKey:
        return self.snapshot.key


@dataclass(frozen=True, slots=True)
class EventReceived:
    """An event of a turn's run arrived (only to subscribers that asked for events)."""

    key: ThreadKey
    event: Event | UnknownEvent


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A tool of a batch finished (completed or failed)."""

    key: ThreadKey
    call_id: str
    name: str
    result: ToolResult


@dataclass(frozen=True, slots=True)
class RunRetrying:
    """A run of the turn could not start for a transient reason (HTTP 429 or 503, the
    connection reset before the answer) and the backend tries again after ``delay``
    seconds (see :class:`~toolrelay.backends.RetryPolicy`).

    Attributes:
        key: The thread.
        attempt: The attempt that failed (1 for the first).
        delay: Seconds until the next attempt.
        reason: What happened, for a person.
        code: The HTTP status or the transport error's code.
        resume_from: Set when the run's stream broke mid-run and the backend
            reconnects to resume it after this SSE event id (``Last-Event-ID``, see
            docs/agui-http.md), rather than starting it again.
    """

    key: ThreadKey
    attempt: int
    delay: float
    reason: str
    code: str | None = None
    resume_from: str | None = None


#: What :meth:`Engine.subscribe <toolrelay.Engine.subscribe>` streams: one thing a turn did.
Notification = StateChanged | EventReceived | ToolCallFinished | RunRetrying
