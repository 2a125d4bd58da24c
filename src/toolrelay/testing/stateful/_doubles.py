"""The machine's stand-ins: gates it holds streams and tools on, the agent that plays
the drawn plans, a run registry that can fail on purpose, and the stall clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay._reasons import ReasonKind
from toolrelay.backends._base import ThreadKey
from toolrelay.errors import RunAllocationError
from toolrelay.protocol import (
    Interrupt,
    ResumeEntry,
)
from toolrelay.runtime import (
    RunHandle,
    RunRegistry,
    Turn,
)
from toolrelay.testing._scripted import Gate, ScriptedAgent

if TYPE_CHECKING:
    from toolrelay.testing.stateful._host import MachineBase

from toolrelay.testing.stateful._plans import CallPlan, RunPlan, T, TurnPlan

__all__ = (
    "Abort",
    "PlanAgent",
    "Hold",
    "Mark",
    "FlakyRegistry",
    "RunRecord",
    "Stall",
    "TurnModel",
    "drain",
    "gate_of",
)


# ---------------------------------------------------------------------------
# Gates and marks the scripts wait on (duck-typed ``anyio.Event`` for ``Gate``)


class Hold:
    """A gate the machine opens; counts who waits on it (a parked stream or tool)."""

    __slots__ = ("_event", "name", "released", "waiting")

    def __init__(self, name: str) -> None:
        self.name = name
        self.released = False
        self.waiting = 0
        self._event: anyio.Event | None = None

    async def wait(self) -> None:
        if self.released:
            return
        if self._event is None:
            self._event = anyio.Event()
        self.waiting += 1
        try:
            await self._event.wait()
        finally:
            self.waiting -= 1

    @property
    def parked(self) -> bool:
        """Someone waits and the gate is shut (once opened, the waiter moves on soon)."""
        return self.waiting > 0 and not self.released

    def set(self) -> None:
        self.released = True
        if self._event is not None:
            self._event.set()

    def __repr__(self) -> str:
        return f"Hold({self.name!r}, released={self.released}, waiting={self.waiting})"


class Mark:
    """A step that never waits: it records that the stream got there, which means the
    engine processed every event before it."""

    __slots__ = ("reached",)

    def __init__(self) -> None:
        self.reached = False

    async def wait(self) -> None:
        self.reached = True


def gate_of(waitable: Hold | Mark) -> Gate:
    return Gate(cast("anyio.Event", waitable))


# ---------------------------------------------------------------------------
# What the machine knows about each turn and run


@dataclass(eq=False)
class TurnModel:
    ordinal: int
    key: str
    plan: TurnPlan
    expected: ReasonKind | None
    turn: Turn | None = None
    #: How the turn was ended from outside (cancel, supersede, close), if it was.
    external: ReasonKind | None = None
    done: bool = False
    reported: bool = False
    runs_started: int = 0
    allocations: int = 0
    runs: list[RunRecord] = field(default_factory=list)
    #: The resume entries the turn was started with (the ``answer`` rule).
    resume: tuple[ResumeEntry, ...] = ()

    @property
    def label(self) -> str:
        return f"turn #{self.ordinal} on {self.key}"


@dataclass(eq=False)
class RunRecord:
    model: TurnModel
    index: int
    run_id: str
    parent_run_id: str | None
    plan: RunPlan
    #: Calls the engine must execute (a ``tools`` run under the depth bound).
    calls: dict[str, CallPlan] = field(default_factory=dict)
    #: Calls streamed that must never execute (abandoned, broken run, breaker, late).
    never_run: set[str] = field(default_factory=set)
    texts: list[tuple[str, str, Mark]] = field(default_factory=list)
    stream_hold: Hold | None = None
    hang_mark: Mark | None = None
    malformed_mark: Mark | None = None
    expects_violation: bool = False
    late_text_id: str | None = None
    #: The interrupts an ``interrupts`` run sent, in order.
    interrupts: tuple[Interrupt, ...] = ()

    def parked(self) -> bool:
        if self.stream_hold is not None and self.stream_hold.parked:
            return True
        return self.hang_mark is not None and self.hang_mark.reached


class PlanAgent(ScriptedAgent):
    """The ScriptedAgent whose allocations fail when the turn's plan says so."""

    def __init__(self, machine: MachineBase) -> None:
        super().__init__(respond=machine._respond)
        self._machine = machine

    async def allocate_run(self, key: ThreadKey) -> str | None:
        fails = self._machine._allocation_fails(key)
        run_id = await super().allocate_run(key)
        if fails:
            raise RunAllocationError("scripted allocation failure")
        return run_id


class FlakyRegistry(RunRegistry):
    """A run registry that checks every handle is disposed only once unregistered, and
    whose handles raise on dispose when the turn's plan says so (promise 5)."""

    def __init__(self, machine: MachineBase) -> None:
        super().__init__()
        self._machine = machine

    def _watch(self, handle: RunHandle) -> None:
        raises = self._machine._dispose_raises(handle.key)

        def on_dispose() -> None:
            if self.is_registered(handle):
                self._machine._problems.append(
                    f"promise 5: run {handle.run_id} on {handle.key} was disposed "
                    "while still registered"
                )
            if raises:
                raise RuntimeError(f"scripted dispose failure of {handle.run_id}")

        handle.on_dispose(on_dispose)

    def register_run(self, handle: RunHandle) -> None:
        self._watch(handle)
        super().register_run(handle)

    def replace_run(self, old: RunHandle, new: RunHandle) -> bool:
        self._watch(new)
        return super().replace_run(old, new)


def drain(stream: ObjectReceiveStream[T] | None) -> list[T]:
    items: list[T] = []
    if stream is None:
        return items
    assert isinstance(stream, MemoryObjectReceiveStream), stream
    while True:
        try:
            items.append(stream.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return items


class Abort(Exception):
    """Leaves the engine's ``async with`` by an error, so that its tasks are cancelled."""


class Stall:
    """Tells a stuck engine from a busy one, without trusting the clock where it can.

    Every ready task runs once per event-loop iteration. Without clock- or thread-bound
    work (a tool waiting for its timeout, the user's tools), ``stall_iterations``
    iterations in which nothing observable moves mean nothing ever will. With such
    work it polls more slowly (leaving the CPU to worker threads) and judges by the
    clock (``stall_timeout``), except while the user's tools run, which only
    ``quiet_timeout`` bounds.
    """

    __slots__ = ("_idle", "_machine", "_moved", "_progress")

    def __init__(self, machine: MachineBase) -> None:
        self._machine = machine
        self._progress = machine._progress()
        self._moved = anyio.current_time()
        self._idle = 0

    def pause(self) -> float:
        return 0.001 if self._idle > 200 and self._machine._timed_work() else 0

    def check(self) -> bool:
        """Whether the engine stalled (call once per iteration)."""
        machine = self._machine
        progress = machine._progress()
        if progress != self._progress:
            self._progress, self._moved, self._idle = progress, anyio.current_time(), 0
            return False
        self._idle += 1
        if not machine._timed_work():
            return self._idle > machine.stall_iterations
        if machine._user_tools_running():
            return False
        return anyio.current_time() - self._moved > machine.stall_timeout
