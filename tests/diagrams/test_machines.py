"""toolrelay.diagrams: the machines drawn (Mermaid, DOT) and their labels."""

from __future__ import annotations

import enum
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from statemachine import State, StateChart
from statemachine.states import States

from toolrelay import RunLifecycle, ToolCallLifecycle, diagrams
from toolrelay.diagrams import (
    MACHINES,
    render,
)

sys.path.insert(0, str(Path(__file__).parent))
from _shared import MACHINE_CLASSES, dot_labels, event_ids, finals, mermaid_labels, state_ids

# --- machine diagrams ----------------------------------------------------------------


def test_machines_are_the_run_lifecycle_and_the_tool_call() -> None:
    assert dict(MACHINES) == {"run_lifecycle": RunLifecycle, "tool_call": ToolCallLifecycle}


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_mermaid_names_every_state_and_event_and_marks_initial_and_finals(
    machine: type[StateChart[Any]],
) -> None:
    mermaid = render(machine, "mermaid")
    lines = mermaid.splitlines()
    assert lines[0] == "stateDiagram-v2"
    for state_id in state_ids(machine):
        assert any(re.search(rf"(^| ){state_id}( |$)", line) for line in lines), state_id
    for event_id in event_ids(machine):
        assert any(line.endswith(f" : {event_id}") for line in lines), event_id
    initial = machine.initial_state
    assert initial is not None
    assert f"    [*] --> {initial.id}" in lines
    final_ids = finals(machine)
    assert final_ids
    for state in machine.states:
        assert (f"    {state.id} --> [*]" in lines) is state.final


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_dot_names_every_state_and_event_and_marks_initial_and_finals(
    machine: type[StateChart[Any]],
) -> None:
    dot = render(machine, "dot")
    lines = dot.splitlines()
    assert lines[0] == f'digraph "{machine.__name__}" {{'
    assert lines[-1] == "}"
    for state in machine.states:
        node = next(line for line in lines if line.startswith(f'    "{state.id}" [label='))
        assert ('peripheries="2"' in node) is state.final
        assert (f'    "{state.id}" -> "__final__";' in lines) is state.final
    for event_id in event_ids(machine):
        assert any(line.endswith(f'[label="{event_id}"];') for line in lines), event_id
    initial = machine.initial_state
    assert initial is not None
    assert f'    "__initial__" -> "{initial.id}";' in lines


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_mermaid_labels_are_the_ids_never_humanized(machine: type[StateChart[Any]]) -> None:
    states, transitions = mermaid_labels(render(machine, "mermaid"))
    # A label equal to its id needs no `state "..." as id` line; any such line is a
    # label that differs from the id ("Executing tools").
    assert states == set()
    assert transitions == event_ids(machine)


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_dot_labels_are_the_ids_never_humanized(machine: type[StateChart[Any]]) -> None:
    nodes, edges = dot_labels(render(machine, "dot"))
    assert nodes == {state_id: state_id for state_id in state_ids(machine)} | {
        "__initial__": "",
        "__final__": "",
    }
    assert edges == event_ids(machine)


def test_label_checks_catch_the_library_humanized_labels() -> None:
    # A graph declared without labels: python-statemachine humanizes them,
    # and the parsers above see it (so the label tests can fail).
    class Spot(enum.StrEnum):
        idle = "idle"
        executing_tools = "executing_tools"
        completed = "completed"

    class Humanized(StateChart[object]):
        s = States.from_enum(Spot, initial=Spot.idle, final=Spot.completed)
        continue_run = s.idle.to(s.executing_tools)
        execute_tools = s.executing_tools.to(s.completed)

    states, transitions = mermaid_labels(render(Humanized, "mermaid"))
    assert {"Idle", "Executing tools", "Completed"} <= states
    assert transitions == {"Continue run", "Execute tools"}
    nodes, edges = dot_labels(render(Humanized, "dot"))
    assert nodes["executing_tools"] == "Executing tools"
    assert edges == {"Continue run", "Execute tools"}


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_every_transition_of_the_class_is_drawn_once(machine: type[StateChart[Any]]) -> None:
    dot = render(machine, "dot")
    mermaid = render(machine, "mermaid")
    count = 0
    for state in machine.states:
        for transition in state.transitions:
            for target in transition.targets:
                label = " ".join(event.id for event in transition.events)
                assert f'"{state.id}" -> "{target.id}" [label="{label}"];' in dot
                assert f"{state.id} --> {target.id} : {label}" in mermaid
                count += 1
    assert dot.count(" -> ") == count + 1 + len(finals(machine))  # + initial + final arrows


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_rendering_is_deterministic_in_one_process(fmt: diagrams.TextFormat) -> None:
    for machine in MACHINE_CLASSES:
        assert render(machine, fmt) == render(machine, fmt)


def test_rendering_is_byte_identical_across_processes() -> None:
    code = (
        "import sys\n"
        "from toolrelay.diagrams import MACHINES, render\n"
        "sys.stdout.buffer.write(b''.join(render(m, f).encode() "
        "for m in MACHINES.values() for f in ('mermaid', 'dot')))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("0", "1", "12345")
    }
    assert len(outputs) == 1
    here = b"".join(render(m, f).encode() for m in MACHINES.values() for f in ("mermaid", "dot"))
    assert outputs == {here}


def test_unknown_text_format_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="svg"):
        render(RunLifecycle, "svg")  # type: ignore[arg-type]


def test_final_states_the_library_leaves_unmarked_are_marked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    library = format(ToolCallLifecycle, "mermaid")
    stripped = "".join(line for line in library.splitlines(True) if "--> [*]" not in line[4:])
    assert "completed --> [*]" not in stripped
    # render() looks `format` up in its module: shadow the builtin there.
    monkeypatch.setattr(
        "toolrelay.diagrams._render.format", lambda cls, fmt: stripped, raising=False
    )
    marked = render(ToolCallLifecycle, "mermaid").splitlines()
    assert "    completed --> [*]" in marked
    assert "    failed --> [*]" in marked
    assert "    streaming --> [*]" not in marked


class Nested(StateChart[object]):
    class outer(State.Compound):
        inner = State(initial=True)
        inner_done = State(final=True)
        go = inner.to(inner_done)

    done = State(final=True)
    leave = outer.to(done)


def test_dot_refuses_a_machine_that_is_not_flat() -> None:
    assert 'state "Outer" as outer {' in render(Nested, "mermaid")
    with pytest.raises(ValueError, match="flat machines only"):
        render(Nested, "dot")


def test_the_public_surface_is_a_sorted_tuple_of_existing_names() -> None:
    exported = diagrams.__all__
    assert isinstance(exported, tuple)
    assert list(exported) == sorted(exported)
    assert all(hasattr(diagrams, name) for name in exported)
    public = {name for name in vars(diagrams) if not name.startswith("_")} - {"annotations"}
    assert set(exported) == {
        name for name in public if not isinstance(getattr(diagrams, name), types.ModuleType)
    }
