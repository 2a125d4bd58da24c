"""Case 3: the machines on the engine's hot path, against a plain table and the library.

Three ways to move a tool call through ``streaming -> pending -> executing ->
completed``, and a turn through ``idle -> running -> executing_tools -> running ->
executing_tools -> running -> completed``:

- the hot path: the compiled cursors, as the processor uses them (a
  :class:`ToolCallInfo` carries a ``TOOL_CALL_MACHINE`` cursor; the processor's turn
  is a ``RUN_MACHINE`` cursor), created and sent their events;
- the floor: a dict lookup over an enum table written here, by hand, with no class
  around it (what the compiled tables cost at the least);
- the library: a python-statemachine instance of the declared class, created and sent
  the same events (what the engine would pay without compiling the tables).

Checked mode (both in lockstep) is reported beside, for information.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from typing import Any

from bench_harness import Report, Target, repeat

from toolrelay import RunLifecycle, RunStatus, ToolCallInfo, ToolCallLifecycle
from toolrelay._machines import RUN_MACHINE, TOOL_CALL_MACHINE, RunEvent, ToolCallEvent

__all__ = ("run_machines",)

CASE = "3. machines"

TOOL_CALL_EVENTS = (ToolCallEvent.finish_args, ToolCallEvent.execute, ToolCallEvent.succeed)
RUN_EVENTS = (
    RunEvent.start,
    RunEvent.execute_tools,
    RunEvent.continue_run,
    RunEvent.execute_tools,
    RunEvent.continue_run,
    RunEvent.complete,
)


# The floor: the tool-call lifecycle as a hand-written enum table and a dict lookup.
# StrEnum members hash as their str value, in C; a plain ``enum.Enum`` member hashes
# through ``Enum.__hash__``, a Python method, and is measured beside for reference.
class _S(enum.StrEnum):
    streaming = "streaming"
    pending = "pending"
    executing = "executing"
    completed = "completed"


class _E(enum.StrEnum):
    finish_args = "finish_args"
    execute = "execute"
    succeed = "succeed"


class _PlainS(enum.Enum):
    streaming = 1
    pending = 2
    executing = 3
    completed = 4


class _PlainE(enum.Enum):
    finish_args = 1
    execute = 2
    succeed = 3


_TABLE = {
    (_S.streaming, _E.finish_args): _S.pending,
    (_S.pending, _E.execute): _S.executing,
    (_S.executing, _E.succeed): _S.completed,
}
_PLAIN_TABLE = {
    (_PlainS.streaming, _PlainE.finish_args): _PlainS.pending,
    (_PlainS.pending, _PlainE.execute): _PlainS.executing,
    (_PlainS.executing, _PlainE.succeed): _PlainS.completed,
}


def run_machines(report: Report, *, repeats: int, quick: bool) -> None:
    """Case 3: per tool-call lifecycle and per run transition, three ways."""
    loops = 20_000 if quick else 100_000
    slow_loops = 20 if quick else 100

    def floor_lifecycle(table: dict[Any, Any], initial: Any, events: Sequence[Any]) -> float:
        finish, execute, succeed = events
        start = time.perf_counter_ns()
        for _ in range(loops):
            state = initial
            state = table[(state, finish)]
            state = table[(state, execute)]
            state = table[(state, succeed)]
        return (time.perf_counter_ns() - start) / loops / 1_000

    def cursor_lifecycle() -> float:
        finish, execute, succeed = TOOL_CALL_EVENTS
        cursor = TOOL_CALL_MACHINE.cursor
        start = time.perf_counter_ns()
        for _ in range(loops):
            call = cursor()
            call.send(finish)
            call.send(execute)
            call.send(succeed)
        return (time.perf_counter_ns() - start) / loops / 1_000

    def tool_call_info_lifecycle() -> float:
        finish, execute, succeed = TOOL_CALL_EVENTS
        start = time.perf_counter_ns()
        for _ in range(loops):
            call = ToolCallInfo("call_0123456789", "get_weather", run_id="run_1")
            call.send(finish)
            call.send(execute)
            call.send(succeed)
        return (time.perf_counter_ns() - start) / loops / 1_000

    def library_lifecycle() -> float:
        finish, execute, succeed = (str(event) for event in TOOL_CALL_EVENTS)
        start = time.perf_counter_ns()
        for _ in range(slow_loops):
            machine = ToolCallLifecycle()
            machine.send(finish)
            machine.send(execute)
            machine.send(succeed)
        return (time.perf_counter_ns() - start) / slow_loops / 1_000

    def library_create() -> float:
        start = time.perf_counter_ns()
        for _ in range(slow_loops):
            ToolCallLifecycle()
        return (time.perf_counter_ns() - start) / slow_loops / 1_000

    def run_cursor_transition() -> float:
        events = RUN_EVENTS
        cursor = RUN_MACHINE.cursor
        start = time.perf_counter_ns()
        for _ in range(loops):
            run = cursor()
            for event in events:
                run.send(event)
        elapsed = time.perf_counter_ns() - start
        if run.state is not RunStatus.completed or run.depth != 2:
            raise AssertionError("run cursor did not complete at depth 2")
        return elapsed / (loops * len(events)) / 1_000

    def library_run_transition() -> float:
        events = [str(event) for event in RUN_EVENTS]
        total = 0
        for _ in range(slow_loops):
            machine = RunLifecycle()
            start = time.perf_counter_ns()
            for event in events:
                machine.send(event)
            total += time.perf_counter_ns() - start
        return total / (slow_loops * len(events)) / 1_000

    floor = report.add(
        repeat(
            CASE,
            "tool-call lifecycle, StrEnum table + dict lookup (floor)",
            "µs/lifecycle",
            lambda: floor_lifecycle(_TABLE, _S.streaming, tuple(_E)),
            repeats,
            note="3 lookups, written in the benchmark",
        )
    )
    report.add(
        repeat(
            CASE,
            "tool-call lifecycle, plain enum.Enum table + dict lookup",
            "µs/lifecycle",
            lambda: floor_lifecycle(_PLAIN_TABLE, _PlainS.streaming, tuple(_PlainE)),
            repeats,
            note="Enum.__hash__ is Python code",
        )
    )
    cursor = report.add(
        repeat(
            CASE,
            "tool-call lifecycle, compiled cursor (create + 3 sends)",
            "µs/lifecycle",
            cursor_lifecycle,
            repeats,
        )
    )
    info = report.add(
        repeat(
            CASE,
            "tool-call lifecycle, ToolCallInfo as the processor uses it",
            "µs/lifecycle",
            tool_call_info_lifecycle,
            repeats,
            note="cursor + argument buffer + record",
        )
    )
    library = report.add(
        repeat(
            CASE,
            "tool-call lifecycle, python-statemachine instance (create + 3 sends)",
            "µs/lifecycle",
            library_lifecycle,
            repeats,
        )
    )
    report.add(
        repeat(
            CASE,
            "python-statemachine ToolCallLifecycle() creation alone",
            "µs",
            library_create,
            repeats,
        )
    )
    run_transition = report.add(
        repeat(
            CASE,
            "run-lifecycle transition, compiled RunCursor",
            "µs/transition",
            run_cursor_transition,
            repeats,
            note="6 transitions per turn, cursor creation included",
        )
    )
    library_run = report.add(
        repeat(
            CASE,
            "run-lifecycle transition, python-statemachine RunLifecycle.send",
            "µs/transition",
            library_run_transition,
            repeats,
            note="creation not included",
        )
    )
    report.ratio(
        "compiled cursor / enum-table floor (tool call)",
        cursor,
        floor,
        "x the floor",
    )
    report.ratio(
        "python-statemachine / compiled cursor (tool call)",
        library,
        cursor,
        "x slower without the compiled tables",
    )
    report.ratio(
        "python-statemachine / RunCursor (per transition)",
        library_run,
        run_transition,
        "x slower without the compiled tables",
    )
    report.target(
        Target(
            "machine_transition",
            "run-lifecycle transition on the hot path",
            run_transition.median,
            5.0,
            "µs",
        )
    )
    report.target(
        Target(
            "tool_call_lifecycle",
            "tool-call lifecycle on the hot path (ToolCallInfo)",
            max(info.median, cursor.median),
            20.0,
            "µs",
        )
    )
