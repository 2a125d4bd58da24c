"""RunLifecycle: the declared machine and its compiled table, pair by pair, with depth."""

from __future__ import annotations

import inspect
import itertools
from typing import cast

import pytest
from statemachine import Event
from statemachine.exceptions import TransitionNotAllowed

from toolrelay.errors import IllegalTransition
from toolrelay.machines import (
    RUN_MACHINE,
    RunCursor,
    RunEvent as E,
    RunLifecycle,
    RunStatus as S,
)

NON_FINAL = (S.idle, S.running, S.executing_tools)

# The specification, written out by hand on purpose: the tests compare the declared
# class and the compiled table against it. (Only here: the library has no such copy.)
EXPECTED: dict[tuple[S, E], S] = {
    (S.idle, E.start): S.running,
    (S.running, E.execute_tools): S.executing_tools,
    (S.executing_tools, E.continue_run): S.running,
    (S.running, E.complete): S.completed,
    (S.running, E.interrupt): S.interrupted,
    **{(state, E.fail): S.failed for state in NON_FINAL},
    **{(state, E.cancel): S.cancelled for state in NON_FINAL},
    **{(state, E.supersede): S.superseded for state in NON_FINAL},
}
ALL_PAIRS = list(itertools.product(S, E))


def _ids(pair: tuple[S, E]) -> str:
    return f"{pair[0]}-{pair[1]}"


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


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_ids)
def test_every_event_in_every_state_moves_or_raises_in_the_declared_machine(
    pair: tuple[S, E],
) -> None:
    state, event = pair
    machine = RunLifecycle(start_value=state, depth=3)
    assert machine.current_state_value is state
    expected = EXPECTED.get(pair)
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            machine.send(event)
        assert (info.value.machine, info.value.state, info.value.event) == (
            "RunLifecycle",
            state,
            event,
        )
        assert isinstance(info.value.__cause__, TransitionNotAllowed)
        assert machine.current_state_value is state
        assert machine.depth == 3
    else:
        machine.send(event)
        assert machine.current_state_value is expected
        assert machine.depth == (4 if event is E.continue_run else 3)


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_ids)
def test_every_event_in_every_state_moves_or_raises_in_the_compiled_table(
    pair: tuple[S, E],
) -> None:
    state, event = pair
    cursor = RUN_MACHINE.cursor(state, depth=3)
    expected = EXPECTED.get(pair)
    assert RUN_MACHINE.can(state, event) is (expected is not None)
    assert (event in RUN_MACHINE.allowed(state)) is (expected is not None)
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            cursor.send(event)
        assert (info.value.machine, info.value.state, info.value.event) == (
            "RunLifecycle",
            state,
            event,
        )
        assert (cursor.state, cursor.depth) == (state, 3)
        with pytest.raises(IllegalTransition):
            RUN_MACHINE.step(state, event)
    else:
        assert cursor.send(event) is expected
        assert cursor.state is expected
        assert cursor.depth == (4 if event is E.continue_run else 3)
        assert RUN_MACHINE.step(state, event) is expected


def test_compiled_table_is_exactly_the_expected_table() -> None:
    assert dict(RUN_MACHINE.table) == EXPECTED
    assert RUN_MACHINE.initial is S.idle
    assert RUN_MACHINE.finals == {
        S.completed,
        S.interrupted,
        S.failed,
        S.cancelled,
        S.superseded,
    }
    assert RUN_MACHINE.states == set(S)
    assert RUN_MACHINE.events == set(E)


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


def test_an_unknown_event_id_is_refused_not_ignored() -> None:
    machine = RunLifecycle()
    with pytest.raises(IllegalTransition, match="'run_started'"):
        machine.send("run_started")
    cursor = RUN_MACHINE.cursor()
    with pytest.raises(IllegalTransition, match="'run_started'"):
        cursor.send("run_started")  # type: ignore[arg-type]
    assert (cursor.state, cursor.depth) == (S.idle, 0)


@pytest.mark.parametrize("final", [S.completed, S.interrupted, S.failed, S.cancelled, S.superseded])
def test_finals_are_final(final: S) -> None:
    assert RUN_MACHINE.allowed(final) == frozenset()
    machine = RunLifecycle(start_value=final)
    assert machine.is_terminated
    for event in E:
        with pytest.raises(IllegalTransition):
            machine.send(event)
    assert machine.current_state_value is final


def test_status_helpers_agree_with_the_machine() -> None:
    assert {s for s in S if s.is_final} == RUN_MACHINE.finals
    # No flash of idle between Run N and Run N+1: executing_tools is running too.
    assert {s for s in S if s.is_running} == {S.running, S.executing_tools}


def test_every_non_final_state_can_fail_cancel_and_be_superseded() -> None:
    # Promises 1, 4, 5: at any moment a turn can be ended.
    for event in (E.fail, E.cancel, E.supersede):
        assert {s for s in S if RUN_MACHINE.can(s, event)} == set(NON_FINAL)


def test_only_a_streaming_run_can_be_interrupted() -> None:
    # RUN_FINISHED is read only while a run streams: an interrupt cannot come while
    # tools execute, before the first run, or after the end.
    assert {s for s in S if RUN_MACHINE.can(s, E.interrupt)} == {S.running}
    assert S.interrupted.is_final and not S.interrupted.is_running


def test_callback_errors_propagate() -> None:
    class Raising:
        def after_transition(self) -> None:
            raise RuntimeError("boom")

    machine = RunLifecycle(start_value=S.executing_tools, listeners=[Raising()])
    with pytest.raises(RuntimeError, match="boom"):
        machine.send(E.continue_run)


def test_machine_is_strict_and_synchronous() -> None:
    assert RunLifecycle.allow_event_without_transition is False
    assert RunLifecycle.catch_errors_as_events is False
    coroutines = [
        name for name, value in vars(RunLifecycle).items() if inspect.iscoroutinefunction(value)
    ]
    assert coroutines == []


def test_state_value_id_and_enum_are_one_spelling() -> None:
    for value, state in RunLifecycle.states_map.items():
        assert value is S(state.id)
        assert state.value is value


def test_every_label_is_the_id() -> None:
    # The label python-statemachine draws and prints is the name, not a humanized id.
    assert {(state.id, state.name) for state in RunLifecycle.states} == {(v, v) for v in S}
    # On the class, the metaclass's ``events`` (the declared events) shadows the
    # instance property mypy sees.
    events = cast("list[Event]", RunLifecycle.events)
    assert {(event.id, str(event.name)) for event in events} == {(v, v) for v in E}


def test_help_shows_the_live_table_spelled_as_the_ids() -> None:
    doc = RunLifecycle.__doc__ or ""
    assert "{statechart:md}" not in doc
    assert "| executing_tools | continue_run  |       | running         |" in doc
    assert "| idle            | supersede     |       | superseded      |" in doc
    assert "Executing tools" not in doc and "Continue run" not in doc


def test_the_library_refusal_names_the_ids() -> None:
    machine = RunLifecycle()
    with pytest.raises(IllegalTransition) as info:
        machine.send(E.continue_run)
    assert str(info.value.__cause__) == "Can't continue_run when in idle."
