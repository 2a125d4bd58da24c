"""ToolCallLifecycle: the declared machine and its compiled table, pair by pair."""

from __future__ import annotations

import inspect
import itertools
from typing import cast

import pytest
from statemachine import Event
from statemachine.exceptions import TransitionNotAllowed

from toolrelay.errors import IllegalTransition
from toolrelay.machines import (
    TOOL_CALL_MACHINE,
    ToolCallEvent as E,
    ToolCallLifecycle,
    ToolCallStatus as S,
)

# The specification, written out by hand on purpose: the tests compare the declared
# class and the compiled table against it. (Only here: the library has no such copy.)
EXPECTED: dict[tuple[S, E], S] = {
    (S.streaming, E.finish_args): S.pending,
    (S.streaming, E.receive_result): S.completed,
    (S.streaming, E.abandon): S.failed,
    (S.pending, E.execute): S.executing,
    (S.pending, E.receive_result): S.completed,
    (S.pending, E.abandon): S.failed,
    (S.pending, E.request_approval): S.awaiting_approval,
    (S.awaiting_approval, E.approve): S.executing,
    (S.awaiting_approval, E.deny): S.failed,
    (S.awaiting_approval, E.abandon): S.failed,
    (S.executing, E.succeed): S.completed,
    (S.executing, E.fail): S.failed,
    (S.executing, E.abandon): S.failed,
}
ALL_PAIRS = list(itertools.product(S, E))


def _ids(pair: tuple[S, E]) -> str:
    return f"{pair[0]}-{pair[1]}"


@pytest.mark.parametrize(
    ("events", "final"),
    [
        ([E.finish_args, E.execute, E.succeed], S.completed),
        ([E.finish_args, E.execute, E.fail], S.failed),
        ([E.receive_result], S.completed),
        ([E.finish_args, E.receive_result], S.completed),
        ([E.abandon], S.failed),
        ([E.finish_args, E.abandon], S.failed),
        ([E.finish_args, E.execute, E.abandon], S.failed),
        ([E.finish_args, E.request_approval, E.approve, E.succeed], S.completed),
        ([E.finish_args, E.request_approval, E.deny], S.failed),
        ([E.finish_args, E.request_approval, E.abandon], S.failed),
    ],
)
def test_happy_paths_end_final_in_machine_and_cursor(events: list[E], final: S) -> None:
    machine = ToolCallLifecycle()
    cursor = TOOL_CALL_MACHINE.cursor()
    for event in events:
        machine.send(event)
        cursor.send(event)
        assert cursor.state is machine.current_state_value
    assert cursor.state is final
    assert machine.is_terminated


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_ids)
def test_every_event_in_every_state_moves_or_raises_in_the_declared_machine(
    pair: tuple[S, E],
) -> None:
    state, event = pair
    machine = ToolCallLifecycle(start_value=state)
    assert machine.current_state_value is state
    expected = EXPECTED.get(pair)
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            machine.send(event)
        assert (info.value.machine, info.value.state, info.value.event) == (
            "ToolCallLifecycle",
            state,
            event,
        )
        assert isinstance(info.value.__cause__, TransitionNotAllowed)
        assert machine.current_state_value is state
    else:
        machine.send(event)
        assert machine.current_state_value is expected


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_ids)
def test_every_event_in_every_state_moves_or_raises_in_the_compiled_table(
    pair: tuple[S, E],
) -> None:
    state, event = pair
    cursor = TOOL_CALL_MACHINE.cursor(state)
    expected = EXPECTED.get(pair)
    assert TOOL_CALL_MACHINE.can(state, event) is (expected is not None)
    assert (event in TOOL_CALL_MACHINE.allowed(state)) is (expected is not None)
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            cursor.send(event)
        assert (info.value.machine, info.value.state, info.value.event) == (
            "ToolCallLifecycle",
            state,
            event,
        )
        assert cursor.state is state
        with pytest.raises(IllegalTransition):
            TOOL_CALL_MACHINE.step(state, event)
    else:
        assert cursor.send(event) is expected
        assert cursor.state is expected
        assert TOOL_CALL_MACHINE.step(state, event) is expected


def test_compiled_table_is_exactly_the_expected_table() -> None:
    assert dict(TOOL_CALL_MACHINE.table) == EXPECTED
    assert TOOL_CALL_MACHINE.initial is S.streaming
    assert TOOL_CALL_MACHINE.finals == {S.completed, S.failed}
    assert TOOL_CALL_MACHINE.states == set(S)
    assert TOOL_CALL_MACHINE.events == set(E)


def test_an_unknown_event_id_is_refused_not_ignored() -> None:
    machine = ToolCallLifecycle()
    with pytest.raises(IllegalTransition, match="'tool_call_args'"):
        machine.send("tool_call_args")
    cursor = TOOL_CALL_MACHINE.cursor()
    with pytest.raises(IllegalTransition, match="'tool_call_args'"):
        cursor.send("tool_call_args")  # type: ignore[arg-type]
    assert cursor.state is S.streaming


@pytest.mark.parametrize("final", [S.completed, S.failed])
def test_finals_are_final(final: S) -> None:
    assert TOOL_CALL_MACHINE.allowed(final) == frozenset()
    machine = ToolCallLifecycle(start_value=final)
    assert machine.is_terminated
    for event in E:
        with pytest.raises(IllegalTransition):
            machine.send(event)
    assert machine.current_state_value is final


def test_status_helpers_agree_with_the_machine() -> None:
    assert {s for s in S if s.is_final} == TOOL_CALL_MACHINE.finals
    assert {s for s in S if s.is_open} == {
        S.streaming,
        S.pending,
        S.awaiting_approval,
        S.executing,
    }
    assert all(s.is_open is not s.is_final for s in S)


def test_every_open_call_can_be_abandoned() -> None:
    # Promise 1: a broken run leaves no call open.
    assert {s for s in S if s.is_open} == {s for s in S if TOOL_CALL_MACHINE.can(s, E.abandon)}


def test_callback_errors_propagate() -> None:
    class Raising:
        def after_transition(self) -> None:
            raise RuntimeError("boom")

    machine = ToolCallLifecycle(listeners=[Raising()])
    with pytest.raises(RuntimeError, match="boom"):
        machine.send(E.finish_args)


def test_machine_is_strict_and_synchronous() -> None:
    assert ToolCallLifecycle.allow_event_without_transition is False
    assert ToolCallLifecycle.catch_errors_as_events is False
    coroutines = [
        name
        for name, value in vars(ToolCallLifecycle).items()
        if inspect.iscoroutinefunction(value)
    ]
    assert coroutines == []


def test_state_value_id_and_enum_are_one_spelling() -> None:
    for value, state in ToolCallLifecycle.states_map.items():
        assert value is S(state.id)
        assert state.value is value


def test_every_label_is_the_id() -> None:
    # The label python-statemachine draws and prints is the name, not a humanized id.
    assert {(state.id, state.name) for state in ToolCallLifecycle.states} == {(v, v) for v in S}
    # On the class, the metaclass's ``events`` (the declared events) shadows the
    # instance property mypy sees.
    events = cast("list[Event]", ToolCallLifecycle.events)
    assert {(event.id, str(event.name)) for event in events} == {(v, v) for v in E}


def test_help_shows_the_live_table_spelled_as_the_ids() -> None:
    doc = ToolCallLifecycle.__doc__ or ""
    assert "{statechart:md}" not in doc
    assert "| streaming         | finish_args      |       | pending           |" in doc
    assert "| awaiting_approval | deny             |       | failed            |" in doc
    assert "| executing         | abandon          |       | failed            |" in doc
    assert "Finish args" not in doc and "Receive result" not in doc


def test_the_library_refusal_names_the_ids() -> None:
    machine = ToolCallLifecycle()
    machine.send(E.receive_result)
    with pytest.raises(IllegalTransition) as info:
        machine.send(E.finish_args)
    assert str(info.value.__cause__) == "Can't finish_args when in completed."
