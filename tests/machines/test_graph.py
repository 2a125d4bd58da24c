"""Graph checks: every state reachable, every non-final state able to end."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest
from statemachine import StateChart
from statemachine.graph import disconnected_states, states_without_path_to_final_states
from statemachine.states import States

from toolrelay import RunLifecycle, ToolCallLifecycle
from toolrelay._machines import GraphReport, check_graph


class Spot(enum.StrEnum):
    start = "start"
    middle = "middle"
    trap = "trap"
    loop_a = "loop_a"
    loop_b = "loop_b"
    island = "island"
    done = "done"


class Broken(StateChart[object]):
    """A machine the library would refuse; its checks are turned off to declare it."""

    validate_disconnected_states = False
    validate_trap_states = False
    validate_final_reachability = False

    s = States.from_enum(Spot, initial=Spot.start, final=Spot.done)
    go = s.start.to(s.middle)
    finish = s.middle.to(s.done)
    fall = s.start.to(s.trap)  # trap: no transition out
    spin = s.middle.to(s.loop_a)  # loop_a <-> loop_b: moves, never ends
    spin_back = s.loop_a.to(s.loop_b)
    spin_again = s.loop_b.to(s.loop_a)
    swim = s.island.to(s.done)  # island: nothing leads here


@pytest.mark.parametrize("machine", [RunLifecycle, ToolCallLifecycle])
def test_toolrelay_machines_have_no_unreachable_or_trapped_state(
    machine: type[StateChart[Any]],
) -> None:
    report = check_graph(machine)
    assert report == GraphReport(unreachable=frozenset(), trapped=frozenset())
    assert report.ok


def test_a_broken_machine_is_reported() -> None:
    report = check_graph(Broken)
    assert report.unreachable == {"island"}
    assert report.trapped == {"trap", "loop_a", "loop_b"}
    assert not report.ok


def test_one_kind_of_fault_is_enough_to_fail() -> None:
    assert not GraphReport(unreachable=frozenset({"x"}), trapped=frozenset()).ok
    assert not GraphReport(unreachable=frozenset(), trapped=frozenset({"x"})).ok


@pytest.mark.parametrize("machine", [RunLifecycle, ToolCallLifecycle, Broken])
def test_report_agrees_with_the_library_own_graph_helpers(
    machine: type[StateChart[Any]],
) -> None:
    initial = machine.initial_state
    assert initial is not None
    unreachable = disconnected_states(initial, set(machine.states_map.values()))
    trapped = states_without_path_to_final_states(machine.states)
    report = check_graph(machine)
    assert report.unreachable == {state.id for state in unreachable}
    assert report.trapped == {state.id for state in trapped}


def test_a_report_is_frozen() -> None:
    report = check_graph(RunLifecycle)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.trapped = frozenset({"x"})  # type: ignore[misc]
