"""RunLifecycle beyond what both machines share (tests/machines/test_lifecycles.py):
its paths, the continuation depth, who may end a turn, and when."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolrelay import IllegalTransition, RunLifecycle, RunStatus as S
from toolrelay._machines import RUN_MACHINE, RunCursor, RunEvent as E

sys.path.insert(0, str(Path(__file__).parent))
from _specs import RUN

NON_FINAL = (S.idle, S.running, S.executing_tools)


@pytest.mark.parametrize(
    ("events", "final", "depth"),
    [
        ([E.start, E.complete], S.completed, 0),
        ([E.start, E.interrupt], S.interrupted, 0),
        ([E.start, E.execute_tools, E.continue_run, E.interrupt], S.interrupted, 1),
        ([E.start, E.execute_tools, E.continue_run, E.complete], S.completed, 1),
        (
            [E.start, E.execute_tools, E.continue_run, E.execute_tools, E.continue_run, E.fail],
            S.failed,
            2,
        ),
        ([E.cancel], S.cancelled, 0),
        ([E.start, E.execute_tools, E.cancel], S.cancelled, 0),
        ([E.start, E.execute_tools, E.supersede], S.superseded, 0),
        ([E.start, E.fail], S.failed, 0),
    ],
)
def test_happy_paths_end_final_in_machine_and_cursor(events: list[E], final: S, depth: int) -> None:
    machine = RunLifecycle()
    cursor = RUN_MACHINE.cursor()
    for event in events:
        machine.send(event)
        cursor.send(event)
        assert cursor.state is machine.current_state_value
        assert cursor.depth == machine.depth
    assert cursor.state is final
    assert cursor.depth == depth
    assert machine.is_terminated


def test_only_continue_run_counts_depth() -> None:
    assert RUN_MACHINE.counting == {(S.executing_tools, E.continue_run)}
    assert RUN_MACHINE.actions[(S.executing_tools, E.continue_run)] == ("count_continuation",)
    assert all(
        names == () for key, names in RUN_MACHINE.actions.items() if key not in RUN_MACHINE.counting
    )


def test_depth_counts_every_continuation() -> None:
    machine = RunLifecycle()
    cursor = RUN_MACHINE.cursor()
    machine.send(E.start)
    cursor.send(E.start)
    for depth in range(1, 12):
        for event in (E.execute_tools, E.continue_run):
            machine.send(event)
            cursor.send(event)
        assert machine.depth == cursor.depth == depth
    assert isinstance(cursor, RunCursor)


def test_every_non_final_state_can_fail_cancel_and_be_superseded() -> None:
    # Promises 1, 4, 5: at any moment a turn can be ended.
    for event in (E.fail, E.cancel, E.supersede):
        assert {s for s in S if RUN_MACHINE.can(s, event)} == set(NON_FINAL)


def test_only_a_streaming_run_can_be_interrupted() -> None:
    # RUN_FINISHED is read only while a run streams: an interrupt cannot come while
    # tools execute, before the first run, or after the end.
    assert {s for s in S if RUN_MACHINE.can(s, E.interrupt)} == {S.running}
    assert S.interrupted.is_final and not S.interrupted.is_running


@pytest.mark.parametrize("pair", RUN.pairs, ids=lambda pair: f"{pair[0]}-{pair[1]}")
def test_only_a_continuation_moves_the_depth_and_a_refusal_keeps_it(pair: tuple[S, E]) -> None:
    state, event = pair
    cursor = RUN_MACHINE.cursor(state, depth=3)
    if (state, event) in RUN.table:
        cursor.send(event)
        assert cursor.depth == (4 if event is E.continue_run else 3)
    else:
        with pytest.raises(IllegalTransition):
            cursor.send(event)
        assert (cursor.state, cursor.depth) == (state, 3)


def test_no_flash_of_idle_between_runs() -> None:
    # executing_tools is running too: a view never sees the turn idle between runs.
    assert {s for s in S if s.is_running} == {S.running, S.executing_tools}
