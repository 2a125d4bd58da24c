"""ScriptedAgent: the mock LLM. A deterministic agent backend for tests and demos.

Tests compose each run's events inline::

    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}),
         tool_call("get_secret_number", {"name": "bob"})],
        [text("Alice's number is 42, Bob's is 7")],
    )

The i-th run answers with the i-th script. By default a script is wrapped in
RUN_STARTED / RUN_FINISHED carrying the run's real thread and run ids (no envelope is
added where the script has its own RUN_STARTED, or ends in RUN_ERROR, a failure or
a hang). Or pass ``respond=`` a callback ``(key, run_input) -> script`` so each run
can answer from what it received.

Beside events a script may hold steps: :class:`Hang` (wait forever, until
cancelled), :class:`Raise` (fail mid-stream), :class:`Gate` (wait for an
``anyio.Event``), :class:`Sleep`. The agent records every input it received, counts
runs and allocations, can allocate run ids, fail to, or block while allocating.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import msgspec

from toolrelay._errors import RunAllocationError
from toolrelay.backends._base import EventStream, ThreadKey
from toolrelay.protocol import (
    Event,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    UnknownEvent,
)

__all__ = ("Gate", "Hang", "Raise", "ScriptedAgent", "Sleep", "Step")


class Hang:
    """A step that never ends (the stream hangs until cancelled)."""

    def __repr__(self) -> str:
        return "Hang()"


@dataclass(frozen=True, slots=True)
class Raise:
    """A step that raises ``error`` from the stream (a failure mid-stream)."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Gate:
    """A step that waits until ``event`` is set."""

    event: anyio.Event


@dataclass(frozen=True, slots=True)
class Sleep:
    """A step that waits ``seconds``."""

    seconds: float


#: One step of a script: an event to stream, or an instruction (hang, raise, wait, sleep).
Step = Event | UnknownEvent | Hang | Raise | Gate | Sleep
ScriptPart = Step | Iterable[Step]
Script = Sequence[ScriptPart]
Responder = Callable[[ThreadKey, RunAgentInput], Script]


def _flatten(script: Script) -> list[Step]:
    steps: list[Step] = []
    for part in script:
        if isinstance(part, (Hang, Raise, Gate, Sleep, msgspec.Struct)):
            steps.append(part)
        else:
            steps.extend(part)
    return steps


class _Record(msgspec.Struct, gc=False):
    """One run the agent was asked for. Not tracked by the cycle collector: the agent
    keeps one per run for its whole life (30,000 in the engine benchmark's 10,000
    two-hop turns), and neither field can lead back to it."""

    key: ThreadKey
    input: RunAgentInput


class ScriptedAgent:
    """A scripted agent backend; see the module docstring.

    Args:
        *scripts: One script per run, in order.
        respond: Called for every run instead of (or after) the scripts.
        envelope: Wrap scripts in RUN_STARTED / RUN_FINISHED with the real ids.
        allocate: Allocate run ids on "the server" (``srv-run-N``) instead of letting
            the client choose.
        fail_allocation: Allocation number (1-based) -> exception to raise, or ``None``.
        allocation_gate: Allocation waits for this event (to hold a turn mid-await).
    """

    def __init__(
        self,
        *scripts: Script,
        respond: Responder | None = None,
        envelope: bool = True,
        allocate: bool = False,
        fail_allocation: Callable[[int], BaseException | None] | None = None,
        allocation_gate: anyio.Event | None = None,
    ) -> None:
        self.scripts = scripts
        self.respond = respond
        self.envelope = envelope
        self.allocate = allocate
        self.fail_allocation = fail_allocation
        self.allocation_gate = allocation_gate
        self.records: list[_Record] = []
        self.allocation_count = 0
        self.open_streams = 0
        self.closed_streams = 0

    # -- what tests read -------------------------------------------------------------

    @property
    def run_count(self) -> int:
        """How many runs were started."""
        return len(self.records)

    @property
    def inputs(self) -> list[RunAgentInput]:
        """Every ``RunAgentInput`` received, in order."""
        return [record.input for record in self.records]

    def inputs_for(self, key: ThreadKey | str) -> list[RunAgentInput]:
        """The inputs of one thread's runs, in order."""
        thread = key if isinstance(key, ThreadKey) else ThreadKey(key)
        return [record.input for record in self.records if record.key == thread]

    # -- the backend protocol -------------------------------------------------------------

    async def allocate_run(self, key: ThreadKey) -> str | None:
        self.allocation_count += 1
        number = self.allocation_count
        if self.allocation_gate is not None:
            await self.allocation_gate.wait()
        else:
            await anyio.lowlevel.checkpoint()
        if self.fail_allocation is not None:
            error = self.fail_allocation(number)
            if error is not None:
                raise error
        return f"srv-run-{number}" if self.allocate else None

    @asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        index = len(self.records)
        self.records.append(_Record(key, run_input))
        script = self._script_for(index, key, run_input)
        self.open_streams += 1
        stream = self._play(_flatten(script), run_input)
        try:
            yield stream
        finally:
            await stream.aclose()
            self.open_streams -= 1
            self.closed_streams += 1

    def _script_for(self, index: int, key: ThreadKey, run_input: RunAgentInput) -> Script:
        if index < len(self.scripts):
            return self.scripts[index]
        if self.respond is not None:
            return self.respond(key, run_input)
        raise RunAllocationError(
            f"ScriptedAgent has {len(self.scripts)} script(s) and no responder; "
            f"run {index + 1} was not scripted"
        )

    async def _play(
        self, steps: list[Step], run_input: RunAgentInput
    ) -> AsyncGenerator[Event | UnknownEvent, None]:
        if self.envelope:
            steps = self._wrap(steps, run_input)
        for step in steps:
            if isinstance(step, Hang):
                await anyio.sleep_forever()
            elif isinstance(step, Raise):
                raise step.error
            elif isinstance(step, Gate):
                await step.event.wait()
            elif isinstance(step, Sleep):
                await anyio.sleep(step.seconds)
            else:
                await anyio.lowlevel.checkpoint()
                yield step

    @staticmethod
    def _wrap(steps: list[Step], run_input: RunAgentInput) -> list[Step]:
        events = [s for s in steps if not isinstance(s, (Hang, Raise, Gate, Sleep))]
        out = list(steps)
        if not events or not isinstance(events[0], RunStartedEvent):
            out.insert(0, RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id))
        ends_badly = any(isinstance(s, (Hang, Raise)) for s in steps)
        ended = any(isinstance(s, (RunFinishedEvent, RunErrorEvent)) for s in events)
        if not ends_badly and not ended:
            out.append(RunFinishedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id))
        return out
