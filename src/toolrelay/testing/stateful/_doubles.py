"""The machine's stand-ins: gates it holds streams and tools on, the agent that plays
the drawn plans, and a run registry that can fail on purpose."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay._errors import RunAllocationError
from toolrelay._reasons import ReasonKind
from toolrelay._runtime import (
    RunHandle,
    RunRegistry,
    Turn,
)
from toolrelay.backends._base import ThreadKey
from toolrelay.protocol import Interrupt, ResumeEntry, RunAgentInput
from toolrelay.testing._scripted import Gate, ScriptedAgent, Step
from toolrelay.testing.stateful._plans import CallPlan, RunPlan, T, TurnPlan

__all__ = (
    "Abort",
    "PlanAgent",
    "Hold",
    "Mark",
    "FlakyRegistry",
    "RunRecord",
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
    """The ScriptedAgent whose allocations fail when ``allocation_fails`` (asked once per
    allocation, as the turn's plan says) is true."""

    def __init__(
        self,
        respond: Callable[[ThreadKey, RunAgentInput], list[Step]],
        allocation_fails: Callable[[ThreadKey], bool],
    ) -> None:
        super().__init__(respond=respond)
        self._allocation_fails = allocation_fails

    async def allocate_run(self, key: ThreadKey) -> str | None:
        fails = self._allocation_fails(key)
        run_id = await super().allocate_run(key)
        if fails:
            raise RunAllocationError("scripted allocation failure")
        return run_id


class FlakyRegistry(RunRegistry):
    """A run registry that checks every handle is disposed only once unregistered, and
    whose handles raise on dispose when ``dispose_raises`` says so (promise 5); what
    goes wrong is given to ``report``."""

    def __init__(
        self, dispose_raises: Callable[[ThreadKey], bool], report: Callable[[str], None]
    ) -> None:
        super().__init__()
        self._dispose_raises = dispose_raises
        self._report = report

    def _watch(self, handle: RunHandle) -> None:
        raises = self._dispose_raises(handle.key)

        def on_dispose() -> None:
            if self.is_registered(handle):
                self._report(
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
