"""The compiled tables: read from the classes, validated when compiled, moved by cursors."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, cast

import pytest
from statemachine import State, StateChart
from statemachine.states import States

from toolrelay import IllegalTransition, RunLifecycle, RunStatus, ToolCallStatus
from toolrelay._machines import (
    RUN_MACHINE,
    TOOL_CALL_MACHINE,
    CompiledRunMachine,
    RunEvent,
    ToolCallEvent,
    compile_machine,
)

# --- Derived from the class, validated at compile time -----------------------------------


class Light(enum.StrEnum):
    off = "off"
    on = "on"
    broken = "broken"


class Flip(enum.StrEnum):
    switch_on = "switch_on"
    switch_off = "switch_off"
    smash = "smash"


def _light_machine(*, extra: bool) -> type[StateChart[Any]]:
    """A fresh test machine; ``extra`` adds ``smash`` from ``on`` as well as from ``off``."""

    class LightMachine(StateChart[object]):
        allow_event_without_transition = False
        catch_errors_as_events = False
        s = States.from_enum(Light, initial=Light.off, final=Light.broken)
        switch_on = s.off.to(s.on)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken) | s.on.to(s.broken) if extra else s.off.to(s.broken)

    return LightMachine


def test_the_table_is_read_from_the_class() -> None:
    plain = compile_machine(_light_machine(extra=False), Light, Flip)
    extended = compile_machine(_light_machine(extra=True), Light, Flip)
    base = {
        (Light.off, Flip.switch_on): Light.on,
        (Light.on, Flip.switch_off): Light.off,
        (Light.off, Flip.smash): Light.broken,
    }
    assert dict(plain.table) == base
    assert dict(extended.table) == {**base, (Light.on, Flip.smash): Light.broken}
    assert extended.allowed(Light.on) == {Flip.switch_off, Flip.smash}
    assert plain.allowed(Light.on) == {Flip.switch_off}


def test_a_compiled_machine_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TOOL_CALL_MACHINE.initial = ToolCallStatus.pending  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del RUN_MACHINE.table
    with pytest.raises(TypeError):
        TOOL_CALL_MACHINE.table[(ToolCallStatus.pending, ToolCallEvent.fail)] = (  # type: ignore[index]
            ToolCallStatus.failed
        )


def test_an_extra_state_in_the_enum_is_drift() -> None:
    class MoreLight(enum.StrEnum):
        off = "off"
        on = "on"
        broken = "broken"
        dimmed = "dimmed"

    with pytest.raises(TypeError, match="only in the enum: dimmed"):
        compile_machine(_light_machine(extra=False), MoreLight, Flip)


def test_a_missing_event_in_the_enum_is_drift() -> None:
    class FewerFlips(enum.StrEnum):
        switch_on = "switch_on"
        switch_off = "switch_off"

    with pytest.raises(TypeError, match="only in the machine: smash"):
        compile_machine(_light_machine(extra=False), Light, FewerFlips)


def test_states_not_from_the_enum_instances_are_refused() -> None:
    class Raw(StateChart[object]):
        s = States.from_enum(Light, initial=Light.off, final=Light.broken, use_enum_instance=False)
        switch_on = s.off.to(s.on)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken)

    with pytest.raises(TypeError, match="use_enum_instance=True"):
        compile_machine(Raw, Light, Flip)


def test_guards_are_refused() -> None:
    class Guarded(StateChart[object]):
        s = States.from_enum(Light, initial=Light.off, final=Light.broken)
        switch_on = s.off.to(s.on, cond="has_power")
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken)

        def has_power(self) -> bool:
            return True

    with pytest.raises(TypeError, match="guards"):
        compile_machine(Guarded, Light, Flip)


def test_two_transitions_for_one_pair_are_refused() -> None:
    class Ambiguous(StateChart[object]):
        validate_disconnected_states = False
        s = States.from_enum(Light, initial=Light.off, final=Light.broken)
        switch_on = s.off.to(s.on, s.broken)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken)

    with pytest.raises(TypeError, match="two transitions"):
        compile_machine(Ambiguous, Light, Flip)


def test_naming_convention_callbacks_are_refused() -> None:
    class Conventional(StateChart[object]):
        s = States.from_enum(Light, initial=Light.off, final=Light.broken)
        switch_on = s.off.to(s.on)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken)

        def on_enter_on(self) -> None:
            pass

    with pytest.raises(TypeError, match="on_enter_on"):
        compile_machine(Conventional, Light, Flip)


def test_compound_states_are_refused() -> None:
    class Nested(StateChart[object]):
        class outer(State.Compound):
            inner = State(initial=True)
            done = State(final=True)
            finish = inner.to(done)

        end = State(final=True)
        leave = outer.to(end)

    class Ids(enum.StrEnum):
        outer = "outer"

    class Events(enum.StrEnum):
        finish = "finish"
        leave = "leave"

    with pytest.raises(TypeError, match="compound"):
        compile_machine(Nested, Ids, Events)


def test_a_run_machine_whose_continuation_does_not_count_is_refused() -> None:
    class Uncounted(StateChart[object]):
        s = States.from_enum(
            RunStatus,
            initial=RunStatus.idle,
            final=[
                RunStatus.completed,
                RunStatus.interrupted,
                RunStatus.failed,
                RunStatus.cancelled,
                RunStatus.superseded,
            ],
        )
        start = s.idle.to(s.running)
        execute_tools = s.running.to(s.executing_tools)
        continue_run = s.executing_tools.to(s.running)
        complete = s.running.to(s.completed)
        interrupt = s.running.to(s.interrupted)
        fail = s.failed.from_.any()
        cancel = s.cancelled.from_.any()
        supersede = s.superseded.from_.any()

    compile_machine(Uncounted, RunStatus, RunEvent)  # a valid table...
    with pytest.raises(TypeError, match="count_continuation"):
        CompiledRunMachine(cast("type[RunLifecycle]", Uncounted))  # ...but no depth


def test_step_can_allowed_and_accepting_read_the_table() -> None:
    assert TOOL_CALL_MACHINE.step(ToolCallStatus.pending, ToolCallEvent.execute) is (
        ToolCallStatus.executing
    )
    assert TOOL_CALL_MACHINE.can(ToolCallStatus.pending, ToolCallEvent.execute)
    assert not TOOL_CALL_MACHINE.can(ToolCallStatus.pending, ToolCallEvent.succeed)
    assert TOOL_CALL_MACHINE.allowed(ToolCallStatus.pending) == {
        ToolCallEvent.execute,
        ToolCallEvent.request_approval,
        ToolCallEvent.receive_result,
        ToolCallEvent.abandon,
    }
    with pytest.raises(IllegalTransition, match="'succeed' in state 'pending'"):
        TOOL_CALL_MACHINE.step(ToolCallStatus.pending, ToolCallEvent.succeed)
    assert TOOL_CALL_MACHINE.accepting(ToolCallEvent.receive_result) == {
        ToolCallStatus.streaming,
        ToolCallStatus.pending,
    }
    assert TOOL_CALL_MACHINE.accepting(ToolCallEvent.succeed) == {ToolCallStatus.executing}
    assert RUN_MACHINE.accepting(RunEvent.continue_run) == {RunStatus.executing_tools}


def test_advance_reads_the_target_and_whether_the_step_counts_a_continuation() -> None:
    # What the event processor moves a turn with (it keeps the state and the depth
    # itself): one lookup answers both, and a refused event raises.
    for (state, event), target in RUN_MACHINE.table.items():
        counted = int((state, event) in RUN_MACHINE.counting)
        assert RUN_MACHINE.advance(state, event) == (target, counted)
    assert RUN_MACHINE.advance(RunStatus.executing_tools, RunEvent.continue_run) == (
        RunStatus.running,
        1,
    )
    with pytest.raises(IllegalTransition, match="'continue_run' in state 'idle'"):
        RUN_MACHINE.advance(RunStatus.idle, RunEvent.continue_run)
    cursor = RUN_MACHINE.cursor(RunStatus.completed, depth=3)
    with pytest.raises(IllegalTransition):
        cursor.send(RunEvent.start)
    assert (cursor.state, cursor.depth) == (RunStatus.completed, 3)


def test_cursors_are_independent_and_slotted() -> None:
    first = TOOL_CALL_MACHINE.cursor()
    second = TOOL_CALL_MACHINE.cursor(ToolCallStatus.pending)
    first.send(ToolCallEvent.finish_args)
    first.send(ToolCallEvent.execute)
    assert (first.state, second.state) == (ToolCallStatus.executing, ToolCallStatus.pending)
    assert not hasattr(first, "__dict__")
    assert not hasattr(RUN_MACHINE.cursor(), "__dict__")
    assert repr(RUN_MACHINE.cursor(depth=2)) == "<RunCursor RunLifecycle state='idle' depth=2>"


def test_a_targetless_transition_is_refused() -> None:
    class Targetless(StateChart[object]):
        s = States.from_enum(Light, initial=Light.off, final=Light.broken)
        switch_on = s.off.to(s.on)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken) | s.on.to(None)

    with pytest.raises(TypeError, match="from 'on' has 0 targets"):
        compile_machine(Targetless, Light, Flip)


def test_an_eventless_transition_is_refused() -> None:
    class Eventless(StateChart[object]):
        s = States.from_enum(Light, initial=Light.off, final=Light.broken)
        switch_on = s.off.to(s.on)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken)
        s.on.to(s.broken)  # taken as soon as `on` is entered, on no event

    with pytest.raises(TypeError, match="an eventless transition from 'on'"):
        compile_machine(Eventless, Light, Flip)


def test_an_event_that_matches_by_wildcard_is_refused() -> None:
    class Flips(enum.StrEnum):
        switch_on = "switch_on"
        switch_off = "switch_off"
        smash = "smash"
        any_smash = "smash.*"

    class Wildcard(StateChart[object]):
        s = States.from_enum(Light, initial=Light.off, final=Light.broken)
        switch_on = s.off.to(s.on)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken)
        s.on.to(s.broken, event="smash.*")

    with pytest.raises(TypeError, match=r"event 'smash\.\*' would match by prefix or wildcard"):
        compile_machine(Wildcard, Light, Flips)


def test_machines_and_cursors_say_what_they_are() -> None:
    machine = compile_machine(_light_machine(extra=False), Light, Flip)
    assert repr(machine) == "<CompiledMachine LightMachine: 3 transitions>"
    assert repr(machine.cursor()) == "<Cursor LightMachine state='off'>"
