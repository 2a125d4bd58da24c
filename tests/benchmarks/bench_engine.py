"""Case 4: the engine with N concurrent two-hop turns, on asyncio and on trio.

Every turn asks the in-process :class:`ScriptedAgent` three runs: the first two end
with one tool call each (``lookup``), the third answers. So each turn makes two
continuations. Measured:

- wall time for N turns started at once, and that every one completed;
- the engine's overhead per continuation: from the moment the processor returns
  ``ToolsReady`` to the moment the backend's ``run()`` is called for the next run,
  minus the time the tool itself ran. The processor is instrumented by a subclass
  (patched into the engine module for the measurement only) and the backend by a
  wrapper. It is measured on an otherwise idle engine (turns one after another: the
  engine's own cost, the target), and under the N-turn load (which adds the time a
  continuation waits for the other turns' work: a scheduling latency, reported);
- memory per registered idle turn: N turns parked right after RUN_STARTED (their
  script hangs), traced with ``tracemalloc``, divided by N;
- the cyclic collector's share of the N-turn runs' wall time: each collection timed
  from its ``start`` to its ``stop`` callback (``gc.callbacks``) inside the run, the
  median of the runs. (It was read from one extra run with the collector off, against
  the best run with it; the two agree within the noise, see docs/performance.md, and
  the direct figure does not depend on how the machine's load moved between runs.)

The garbage collector stays on here: the engine is measured as it runs.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import anyio
import anyio.lowlevel
from bench_harness import Report, Sample, Target

from toolrelay import Engine, RunStatus, ThreadKey, ToolRegistry, Turn
from toolrelay._runtime import _factory
from toolrelay.backends import EventStream
from toolrelay.protocol import Event, RunAgentInput, ToolMessage, UnknownEvent
from toolrelay.sansio import Effect, EventProcessor, ToolsReady
from toolrelay.testing import Hang, ScriptedAgent, text, tool_call
from toolrelay.testing._scripted import Script

__all__ = ("run_engine",)

CASE = "4. engine"
HOPS = 2
BACKENDS = ("asyncio", "trio")


#: Slots per continuation window in the probe's lists: wall clock, then this thread's CPU
#: clock, for each of a turn's runs.
_CLOCKS = 2


def _slot(thread: str, hop: int) -> int:
    """Where ``(thread, hop)``'s stamps go in the probe's lists (``turn-000123``: 123)."""
    return (int(thread[5:]) * (HOPS + 1) + hop) * _CLOCKS


class Probe:
    """Timestamps of one measurement, by thread and hop: the wall clock and this thread's
    CPU clock, so that time the process was not running can be told apart.

    The stamps go into flat lists of ints made for ``turns`` turns up front: recording one
    allocates nothing the cycle collector tracks. (A dict of tuples did, about 18 objects
    a turn, and that growth alone set off a collection every 40 turns, inside the very
    windows measured: the collector runs where a turn's live objects peak.)"""

    __slots__ = ("called", "ready", "tool_end", "tool_start")

    def __init__(self, turns: int) -> None:
        size = turns * (HOPS + 1) * _CLOCKS
        self.ready = [0] * size
        self.tool_start = [0] * size
        self.tool_end = [0] * size
        self.called = [0] * size

    @staticmethod
    def stamp(into: list[int], thread: str, hop: int) -> None:
        slot = _slot(thread, hop)
        into[slot] = time.perf_counter_ns()
        into[slot + 1] = time.thread_time_ns()

    def overheads_us(self, clock: int) -> list[float]:
        """Per continuation: run() called - ToolsReady returned - tool time, in µs, by
        the wall clock (``clock=0``) or the thread's CPU clock (``clock=1``)."""
        values: list[float] = []
        ready, start, end, called = self.ready, self.tool_start, self.tool_end, self.called
        for slot in range(0, len(ready), _CLOCKS):
            if not ready[slot]:
                continue  # no continuation from this run (a turn's last)
            after = slot + _CLOCKS  # the next run of the same turn
            if not ready[slot] <= start[slot] <= end[slot] <= called[after]:
                raise AssertionError(f"continuation at slot {slot} out of order")
            at = slot + clock
            tool = end[at] - start[at]
            values.append((called[after + clock] - ready[at] - tool) / 1_000)
        return values


_probe = Probe(0)


def _hops(run_input: RunAgentInput) -> int:
    return sum(1 for message in run_input.messages if isinstance(message, ToolMessage))


class _TimedProcessor(EventProcessor):
    """The processor, stamping the moment it returns ``ToolsReady``."""

    __slots__ = ()

    def receive(self, event: Event | UnknownEvent) -> Sequence[Effect]:
        effects = super().receive(event)
        if effects:
            for effect in effects:
                if type(effect) is ToolsReady:
                    _probe.stamp(_probe.ready, self.conversation.thread_id, self.depth)
        return effects


class _TimedBackend:
    """The scripted agent, stamping the moment the engine calls ``run()``."""

    def __init__(self, agent: ScriptedAgent) -> None:
        self.agent = agent

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return await self.agent.allocate_run(key)

    def run(
        self, key: ThreadKey, run_input: RunAgentInput
    ) -> AbstractAsyncContextManager[EventStream]:
        _probe.stamp(_probe.called, key.thread_id, _hops(run_input))
        return self.agent.run(key, run_input)


async def lookup(thread: str, hop: int) -> str:
    """Look something up (the benchmark's tool: records when it ran)."""
    _probe.stamp(_probe.tool_start, thread, hop)
    _probe.stamp(_probe.tool_end, thread, hop)
    return f"result {hop} for {thread}"


TOOLS = ToolRegistry().register(lookup)


def _two_hops(key: ThreadKey, run_input: RunAgentInput) -> Script:
    hop = _hops(run_input)
    if hop < HOPS:
        return [tool_call("lookup", {"thread": key.thread_id, "hop": hop})]
    return [text("Both lookups are done.")]


class CollectorClock:
    """The cyclic collector's wall time while installed in ``gc.callbacks``: each
    collection from its ``start`` callback to its ``stop`` callback (finalizers
    included), the full ones (generation 2) apart."""

    __slots__ = ("collections", "full", "full_ns", "started", "total_ns")

    def __init__(self) -> None:
        self.started = 0
        self.total_ns = 0
        self.full_ns = 0
        self.collections = 0
        self.full = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter_ns()
        if phase == "start":
            self.started = now
            return
        took = now - self.started
        self.total_ns += took
        self.collections += 1
        if info["generation"] == 2:
            self.full_ns += took
            self.full += 1


@dataclass(frozen=True, slots=True)
class EngineRun:
    wall_s: float
    turns: int
    errors: int
    overheads_us: list[float]
    cpu_overheads_us: list[float]
    #: The collector's seconds inside ``wall_s`` (``gc.callbacks``), and how many
    #: collections, full ones apart.
    gc_s: float = 0.0
    gc_full_s: float = 0.0
    collections: int = 0
    full_collections: int = 0

    @property
    def gc_share(self) -> float:
        """The collector's share of the run's wall time, in %."""
        return self.gc_s / self.wall_s * 100


async def _turns(n: int, start: Callable[[Engine, int], Awaitable[Turn]]) -> EngineRun:
    global _probe
    _probe = Probe(n)
    agent = ScriptedAgent(respond=_two_hops)
    clock = CollectorClock()
    started = errors = 0
    with mock.patch.object(_factory, "EventProcessor", _TimedProcessor):
        async with Engine(_TimedBackend(agent), tools=TOOLS) as engine:
            gc.callbacks.append(clock)
            try:
                began = time.perf_counter_ns()
                # A turn that is over when start returns (one after another) is counted
                # and let go, as a caller that read its answer would; live ones are kept
                # and waited for.
                live: list[Turn] = []
                for i in range(n):
                    turn = await start(engine, i)
                    started += 1
                    if not turn.finished:
                        live.append(turn)
                    elif turn.status is not RunStatus.completed:
                        errors += 1
                for turn in live:
                    await turn.wait_finished()
                wall = (time.perf_counter_ns() - began) / 1e9
            finally:
                gc.callbacks.remove(clock)
    errors += sum(1 for turn in live if turn.status is not RunStatus.completed)
    errors += abs(agent.run_count - (HOPS + 1) * n) + abs(started - n)
    return EngineRun(
        wall,
        n,
        errors,
        _probe.overheads_us(0),
        _probe.overheads_us(1),
        clock.total_ns / 1e9,
        clock.full_ns / 1e9,
        clock.collections,
        clock.full,
    )


async def concurrent(n: int) -> EngineRun:
    """N turns started at once, then waited for."""

    async def start(engine: Engine, i: int) -> Turn:
        return engine.start_turn(f"turn-{i:06d}", "Look it up twice, please.")

    return await _turns(n, start)


async def sequential(n: int) -> EngineRun:
    """N turns one after another: each continuation on an otherwise idle engine."""

    async def start(engine: Engine, i: int) -> Turn:
        return await engine.run_turn(f"turn-{i:06d}", "Look it up twice, please.")

    return await _turns(n, start)


# --- Memory per idle turn ---------------------------------------------------------------


def _park(key: ThreadKey, run_input: RunAgentInput) -> Script:
    return [Hang()]  # RUN_STARTED (the envelope), then nothing until cancelled


async def _until_parked(agent: ScriptedAgent, turns: Sequence[Turn]) -> None:
    with anyio.fail_after(120):
        while agent.open_streams < len(turns) or any(
            turn._processor.server_run_id is None for turn in turns
        ):
            await anyio.lowlevel.checkpoint()


async def idle_memory(n: int) -> tuple[float, float, int]:
    """Bytes per parked turn (retained, peak) and how many were registered."""
    agent = ScriptedAgent(respond=_park)
    async with Engine(agent, tools=TOOLS) as engine:
        warm = [engine.start_turn(f"warm-{i}", "hello") for i in range(50)]
        await _until_parked(agent, warm)
        gc.collect()
        tracemalloc.start()
        try:
            turns = [engine.start_turn(f"idle-{i:06d}", "hello") for i in range(n)]
            await _until_parked(agent, [*warm, *turns])
            current, peak = tracemalloc.get_traced_memory()
            registered = len(engine.registry) - len(warm)
        finally:
            tracemalloc.stop()
        for turn in (*warm, *turns):
            turn.cancel()
    return current / n, peak / n, registered


# --- The case ---------------------------------------------------------------------------


def _run(backend: str, func: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return anyio.run(func, *args, backend=backend)


def run_engine(report: Report, *, quick: bool) -> None:
    """Case 4 on asyncio and trio."""
    sizes = (100, 1_000) if quick else (1_000, 10_000)
    repeats = 1 if quick else 3
    sequential_turns = 100 if quick else 500
    memory_turns = 1_000 if quick else 10_000
    for backend in BACKENDS:
        with report.part(f"4 {backend}: warm-up"):
            _run(backend, sequential, 20)  # warm-up: imports, first-use caches
        for n in sizes:
            with report.part(f"4 {backend}: {n:,} concurrent x {repeats}"):
                runs: list[EngineRun] = [_run(backend, concurrent, n) for _ in range(repeats)]
            errors = sum(run.errors for run in runs)
            if errors and n != sizes[-1]:
                report.errors.append(f"{backend}: {n} concurrent turns had {errors} errors")
            report.add(
                Sample(
                    CASE,
                    f"{backend}: {n:,} concurrent two-hop turns, wall time",
                    "s",
                    tuple(run.wall_s for run in runs),
                    note=f"{n * (HOPS + 1):,} runs; errors: {errors}",
                )
            )
            if n == sizes[-1]:
                # The collector's share, timed inside each run (gc.callbacks): the
                # median run's. It read within 1 to 4 points of the share a separate
                # run without the collector gave (docs/performance.md), which moved
                # with the machine between the two runs and took 4 to 7 s each.
                report.add(
                    Sample(
                        CASE,
                        f"{backend}: {n:,} concurrent two-hop turns, the collector's time",
                        "s",
                        tuple(run.gc_s for run in runs),
                        note="gc.callbacks, start to stop of each collection; full ones: "
                        + ", ".join(
                            f"{run.gc_full_s:.2f} s in {run.full_collections} of {run.collections}"
                            for run in runs
                        ),
                    )
                )
                report.target(
                    Target(
                        f"gc_share_{backend}_{n}_turns",
                        f"{backend}: cyclic collector's share of {n:,} concurrent turns' wall time",
                        statistics.median(run.gc_share for run in runs),
                        10.0,
                        "%",
                    )
                )
            loaded = [value for run in runs for value in run.overheads_us]
            report.add(
                Sample(
                    CASE,
                    f"{backend}: continuation latency under the {n:,}-turn load",
                    "µs",
                    tuple(loaded),
                    note="includes waiting for the other turns' work",
                    distribution=True,
                )
            )
            if n == sizes[-1]:
                report.target(
                    Target(
                        f"engine_{backend}_{n}_turns_ok",
                        f"{backend}: {n:,} concurrent two-hop turns, turns not completed",
                        errors,
                        0,
                        "errors",
                    )
                )
        with report.part(f"4 {backend}: {sequential_turns} sequential"):
            idle: EngineRun = _run(backend, sequential, sequential_turns)
        if idle.errors:
            report.errors.append(f"{backend}: sequential turns had {idle.errors} errors")
        overhead = report.add(
            Sample(
                CASE,
                f"{backend}: engine overhead per continuation (idle engine)",
                "µs",
                tuple(idle.overheads_us),
                note=f"{len(idle.overheads_us)} continuations, tool time excluded; wall clock",
                distribution=True,
            )
        )
        report.add(
            Sample(
                CASE,
                f"{backend}: engine CPU per continuation (idle engine)",
                "µs",
                tuple(idle.cpu_overheads_us),
                note="the same windows on this thread's CPU clock: what the engine "
                "spends, without the time the OS ran other processes",
                distribution=True,
            )
        )
        report.target(
            Target(
                f"continuation_overhead_{backend}",
                f"{backend}: engine overhead per continuation, p99",
                overhead.p99 / 1_000,
                0.2,
                "ms",
            )
        )
        with report.part(f"4 {backend}: {memory_turns:,} parked (memory)"):
            retained, peak, registered = _run(backend, idle_memory, memory_turns)
        for label, value in (("retained", retained), ("peak", peak)):
            report.add(
                Sample(
                    CASE,
                    f"{backend}: memory per registered idle turn, {label} ({registered:,} parked)",
                    "KB",
                    (value / 1_000,),
                    note="tracemalloc; includes the scripted agent's record of the run",
                )
            )
        report.target(
            Target(
                f"idle_turn_memory_{backend}",
                f"{backend}: peak memory per registered idle turn",
                peak / 1_000,
                5.0,
                "KB",
            )
        )
