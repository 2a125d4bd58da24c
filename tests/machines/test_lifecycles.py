"""Both machines, the declared class and its compiled table, against their written-out
specifications: every (state, event) pair, the finals, the spelling and the help."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from statemachine import Event
from statemachine.exceptions import TransitionNotAllowed

from toolrelay import IllegalTransition

sys.path.insert(0, str(Path(__file__).parent))
from _specs import SPECS, Spec

PAIRS = [(spec, pair) for spec in SPECS for pair in spec.pairs]


def _pair_id(case: tuple[Spec, tuple[Any, Any]]) -> str:
    spec, (state, event) = case
    return f"{spec}-{state}-{event}"


by_machine = pytest.mark.parametrize("spec", SPECS, ids=str)


@pytest.mark.parametrize("case", PAIRS, ids=_pair_id)
def test_every_event_in_every_state_moves_or_raises_in_the_declared_machine(
    case: tuple[Spec, tuple[Any, Any]],
) -> None:
    spec, (state, event) = case
    machine = spec.cls(start_value=state)
    assert machine.current_state_value is state
    expected = spec.table.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            machine.send(event)
        assert (info.value.machine, info.value.state, info.value.event) == (
            spec.cls.__name__,
            state,
            event,
        )
        assert isinstance(info.value.__cause__, TransitionNotAllowed)
        assert machine.current_state_value is state
    else:
        machine.send(event)
        assert machine.current_state_value is expected


@pytest.mark.parametrize("case", PAIRS, ids=_pair_id)
def test_every_event_in_every_state_moves_or_raises_in_the_compiled_table(
    case: tuple[Spec, tuple[Any, Any]],
) -> None:
    spec, (state, event) = case
    compiled = spec.compiled
    cursor = compiled.cursor(state)
    expected = spec.table.get((state, event))
    assert compiled.can(state, event) is (expected is not None)
    assert (event in compiled.allowed(state)) is (expected is not None)
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            cursor.send(event)
        assert (info.value.machine, info.value.state, info.value.event) == (
            spec.cls.__name__,
            state,
            event,
        )
        assert cursor.state is state
        with pytest.raises(IllegalTransition):
            compiled.step(state, event)
    else:
        assert cursor.send(event) is expected
        assert cursor.state is expected
        assert compiled.step(state, event) is expected


@by_machine
def test_compiled_table_is_exactly_the_expected_table(spec: Spec) -> None:
    compiled = spec.compiled
    assert dict(compiled.table) == spec.table
    assert compiled.initial is spec.initial
    assert compiled.finals == spec.finals
    assert compiled.states == set(spec.states)
    assert compiled.events == set(spec.events)


@by_machine
def test_an_unknown_event_id_is_refused_not_ignored(spec: Spec) -> None:
    machine = spec.cls()
    with pytest.raises(IllegalTransition, match=f"'{spec.foreign_event}'"):
        machine.send(spec.foreign_event)
    cursor = spec.compiled.cursor()
    with pytest.raises(IllegalTransition, match=f"'{spec.foreign_event}'"):
        cursor.send(spec.foreign_event)
    assert cursor.state is spec.initial


@pytest.mark.parametrize(
    ("spec", "final"),
    [(spec, final) for spec in SPECS for final in sorted(spec.finals)],
    ids=lambda value: str(value),
)
def test_finals_are_final(spec: Spec, final: Any) -> None:
    assert spec.compiled.allowed(final) == frozenset()
    machine = spec.cls(start_value=final)
    assert machine.is_terminated
    for event in spec.events:
        with pytest.raises(IllegalTransition):
            machine.send(event)
    assert machine.current_state_value is final


@by_machine
def test_the_status_says_final_as_the_specification_does(spec: Spec) -> None:
    # ``is_final`` reads the finals the compiled machine read from the declaration.
    assert {s for s in spec.states if s.is_final} == spec.finals  # type: ignore[attr-defined]


@by_machine
def test_callback_errors_propagate(spec: Spec) -> None:
    class Raising:
        def after_transition(self) -> None:
            raise RuntimeError("boom")

    state, event = spec.moves
    machine = spec.cls(start_value=state, listeners=[Raising()])
    with pytest.raises(RuntimeError, match="boom"):
        machine.send(event)


@by_machine
def test_machine_is_strict_and_synchronous(spec: Spec) -> None:
    assert spec.cls.allow_event_without_transition is False
    assert spec.cls.catch_errors_as_events is False
    coroutines = [
        name for name, value in vars(spec.cls).items() if inspect.iscoroutinefunction(value)
    ]
    assert coroutines == []


@by_machine
def test_state_value_id_and_enum_are_one_spelling(spec: Spec) -> None:
    for value, state in spec.cls.states_map.items():
        assert value is spec.states(state.id)
        assert state.value is value


@by_machine
def test_every_label_is_the_id(spec: Spec) -> None:
    # The label python-statemachine draws and prints is the name, not a humanized id.
    assert {(state.id, state.name) for state in spec.cls.states} == {(v, v) for v in spec.states}
    # On the class, the metaclass's ``events`` (the declared events) shadows the
    # instance property mypy sees.
    events = cast("list[Event]", spec.cls.events)
    assert {(event.id, str(event.name)) for event in events} == {(v, v) for v in spec.events}


@by_machine
def test_help_shows_the_live_table_spelled_as_the_ids(spec: Spec) -> None:
    doc = spec.cls.__doc__ or ""
    assert "{statechart:md}" not in doc
    for row in spec.help_rows:
        assert row in doc
    for label in spec.humanized:
        assert label not in doc


@by_machine
def test_the_library_refusal_names_the_ids(spec: Spec) -> None:
    state, event, message = spec.refused
    machine = spec.cls(start_value=state)
    with pytest.raises(IllegalTransition) as info:
        machine.send(event)
    assert str(info.value.__cause__) == message
