"""Reading a declared machine class: its states and its transitions, refusing what a
``(state, event) -> target`` table cannot represent.

The compiled tables (:mod:`toolrelay._machines._compiled`) and the graph checks
(:mod:`toolrelay._machines._graph`) both stand on this one reading, so the graph
``toolrelay verify`` reports on is exactly the graph the cursors run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, cast

from statemachine import Event, State, StateChart

__all__ = ("Edge", "check_spelling", "class_events", "flat_states", "read_edges")


def flat_states(machine: type[StateChart[Any]]) -> list[State]:
    """The machine's states, refusing anything a flat table cannot represent."""
    states = list(machine.states_map.values())
    for state in states:
        if state.states or state.history or state.parallel or state.parent is not None:
            raise TypeError(
                f"{machine.__name__}: state {state.id!r} is compound, parallel or nested; "
                "only flat machines compile to a table"
            )
    return states


def _explicit(groups: Any) -> list[str]:
    """Names of the explicitly declared callbacks in ``groups`` (``on=``, ``cond=``...)."""
    return [spec.attr_name for group in groups for spec in group if not spec.is_convention]


def _convention_names(machine: type[StateChart[Any]], states: list[State]) -> list[str]:
    """The naming-convention callbacks (``on_enter_<state>``, ``on_<event>``...) the class defines.

    They run without showing at the declaration site; toolrelay declares every action
    with ``on=``/``enter=`` instead, and the compiled tables could not see them.
    """
    groups: list[Any] = [machine.prepare]
    for state in states:
        groups += [state.enter, state.exit, state.invoke]
        for transition in state.transitions:
            groups += [
                transition.validators,
                transition.before,
                transition.on,
                transition.after,
                transition.cond,
            ]
    return sorted(
        {
            spec.attr_name
            for group in groups
            for spec in group
            if spec.is_convention and hasattr(machine, spec.attr_name)
        }
    )


@dataclass(frozen=True, slots=True)
class Edge:
    source: State
    event: str
    target: State
    actions: tuple[str, ...]


def read_edges(machine: type[StateChart[Any]], states: list[State]) -> list[Edge]:
    """Every ``(source, event, target)`` of the class, one per event id.

    Refuses what a ``(state, event) -> target`` table cannot represent: guards and
    validators (the table cannot evaluate them), eventless or multi-target
    transitions, event ids that the library matches by prefix or wildcard, and two
    transitions for one ``(state, event)``.
    """
    name = machine.__name__
    edges: list[Edge] = []
    seen: set[tuple[str, str]] = set()
    for state in states:
        for transition in state.transitions:
            guards = _explicit([transition.cond, transition.validators])
            if guards:
                raise TypeError(
                    f"{name}: a transition from {state.id!r} has guards or validators "
                    f"{guards}; a compiled table cannot evaluate them"
                )
            targets: list[State] = list(transition.targets)
            if len(targets) != 1:
                raise TypeError(
                    f"{name}: a transition from {state.id!r} has {len(targets)} targets; "
                    "a compiled table needs exactly one"
                )
            event_ids = [str(event) for event in transition.events]
            if not event_ids:
                raise TypeError(f"{name}: an eventless transition from {state.id!r}")
            actions = tuple(_explicit([transition.before, transition.on, transition.after]))
            for event_id in event_ids:
                if "." in event_id or "*" in event_id:
                    raise TypeError(
                        f"{name}: event {event_id!r} would match by prefix or wildcard; "
                        "a compiled table needs exact event ids"
                    )
                if (state.id, event_id) in seen:
                    raise TypeError(
                        f"{name}: two transitions for event {event_id!r} in {state.id!r}"
                    )
                seen.add((state.id, event_id))
                edges.append(Edge(state, event_id, targets[0], actions))
    return edges


def class_events(machine: type[StateChart[Any]]) -> list[str]:
    # On the class, the metaclass's ``events`` property (the declared events) shadows
    # the instance property that mypy sees.
    return [str(event) for event in cast("list[Event]", machine.events)]


def check_spelling(
    machine: type[StateChart[Any]],
    declared: list[State],
    states: type[enum.StrEnum],
    events: type[enum.StrEnum],
) -> None:
    """Check that the enums and the machine name the same states and events, one spelling."""
    name = machine.__name__
    state_ids = {state.id for state in declared}
    enum_states = {member.value for member in states}
    if state_ids != enum_states:
        raise TypeError(
            f"{name} and {states.__name__} name different states: only in the "
            f"machine: {_spelling(state_ids - enum_states)}; only in the enum: "
            f"{_spelling(enum_states - state_ids)}"
        )
    for state in declared:
        if state.value is not states(state.id):
            raise TypeError(
                f"{name}: state {state.id!r} has value {state.value!r}, not "
                f"{states.__name__}.{state.id}; declare the states with "
                f"States.from_enum({states.__name__}, ..., use_enum_instance=True) so "
                "that the value and the id are one spelling"
            )
    event_ids = set(class_events(machine))
    enum_ids = {event.value for event in events}
    if event_ids != enum_ids:
        raise TypeError(
            f"{name} and {events.__name__} name different events: only in the "
            f"machine: {_spelling(event_ids - enum_ids)}; only in the enum: "
            f"{_spelling(enum_ids - event_ids)}"
        )
    conventions = _convention_names(machine, declared)
    if conventions:
        raise TypeError(
            f"{name} defines naming-convention callbacks {conventions}; declare "
            "actions at the transition or state (on=, enter=) instead"
        )


def _spelling(values: Any) -> str:
    return ", ".join(sorted(str(value) for value in values)) or "nothing"
