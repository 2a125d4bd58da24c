"""The compiled tables: derived from the classes, in lockstep with them, checked on demand."""

from __future__ import annotations

import dataclasses
import enum
import os
import subprocess
import sys
from typing import Any, cast

import pytest
from hypothesis import given, strategies as st
from statemachine import State, StateChart
from statemachine.states import States

from toolrelay.errors import IllegalTransition, ToolrelayError
from toolrelay.machines import (
    RUN_MACHINE,
    TOOL_CALL_MACHINE,
    CompiledMachine,
    CompiledRunMachine,
    Cursor,
    MachineDivergenceError,
    RunCursor,
    RunEvent,
    RunLifecycle,
    RunStatus,
    ToolCallEvent,
    ToolCallStatus,
    checked_mode,
    compile_machine,
    is_checked_mode,
    set_checked_mode,
)

# --- Lockstep with the declared machines -------------------------------------------------


@given(
    start=st.sampled_from(RunStatus),
    depth=st.integers(min_value=0, max_value=20),
    events=st.lists(st.sampled_from(RunEvent), max_size=25),
)
def test_run_cursor_agrees_with_a_real_run_lifecycle_on_every_step(
    start: RunStatus, depth: int, events: list[RunEvent]
) -> None:
    real = RunLifecycle(start_value=start, depth=depth)
    cursor = RUN_MACHINE.cursor(start, depth=depth)
    for event in events:
        try:
            real.send(event)
        except IllegalTransition:
            real_refused = True
        else:
            real_refused = False
        try:
            cursor.send(event)
        except IllegalTransition:
            cursor_refused = True
        else:
            cursor_refused = False
        assert cursor_refused is real_refused
        assert cursor.state is real.current_state_value
        assert cursor.depth == real.depth


@given(
    start=st.sampled_from(ToolCallStatus),
    events=st.lists(st.sampled_from(ToolCallEvent), max_size=25),
)
def test_tool_call_cursor_agrees_with_a_real_tool_call_lifecycle_on_every_step(
    start: ToolCallStatus, events: list[ToolCallEvent]
) -> None:
    real = TOOL_CALL_MACHINE.machine(start_value=start)
    cursor = TOOL_CALL_MACHINE.cursor(start)
    for event in events:
        try:
            real.send(event)
        except IllegalTransition:
            real_refused = True
        else:
            real_refused = False
        try:
            cursor.send(event)
        except IllegalTransition:
            cursor_refused = True
        else:
            cursor_refused = False
        assert cursor_refused is real_refused
        assert cursor.state is real.current_state_value


@given(
    start=st.sampled_from(RunStatus),
    events=st.lists(st.sampled_from(RunEvent), max_size=15),
)
def test_checked_run_cursor_finds_no_divergence(start: RunStatus, events: list[RunEvent]) -> None:
    with checked_mode():
        cursor = RUN_MACHINE.cursor(start)
    expected = RUN_MACHINE.cursor(start)
    for event in events:
        try:
            expected.send(event)
        except IllegalTransition:
            with pytest.raises(IllegalTransition):
                cursor.send(event)
        else:
            cursor.send(event)
        assert (cursor.state, cursor.depth) == (expected.state, expected.depth)


@given(
    start=st.sampled_from(ToolCallStatus),
    events=st.lists(st.sampled_from(ToolCallEvent), max_size=15),
)
def test_checked_tool_call_cursor_finds_no_divergence(
    start: ToolCallStatus, events: list[ToolCallEvent]
) -> None:
    with checked_mode():
        cursor = TOOL_CALL_MACHINE.cursor(start)
    for event in events:
        allowed = TOOL_CALL_MACHINE.can(cursor.state, event)
        if allowed:
            cursor.send(event)
        else:
            with pytest.raises(IllegalTransition):
                cursor.send(event)


# --- Checked mode ----------------------------------------------------------------------


def test_checked_mode_context_manager_switches_and_restores() -> None:
    before = is_checked_mode()
    with checked_mode(False):
        assert is_checked_mode() is False
        assert type(TOOL_CALL_MACHINE.cursor()) is Cursor
        assert type(RUN_MACHINE.cursor()) is RunCursor
        with checked_mode():
            assert is_checked_mode() is True
            assert type(TOOL_CALL_MACHINE.cursor()) is not Cursor
            assert type(RUN_MACHINE.cursor()) is not RunCursor
            assert isinstance(RUN_MACHINE.cursor(), RunCursor)
        assert is_checked_mode() is False
    assert is_checked_mode() is before


def test_set_checked_mode_switches_process_wide() -> None:
    before = is_checked_mode()
    try:
        set_checked_mode(not before)
        assert is_checked_mode() is (not before)
        set_checked_mode(before)
        assert is_checked_mode() is before
    finally:
        set_checked_mode(before)


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "False"), ("1", "True"), ("0", "False"), ("", "False")]
)
def test_checked_mode_is_off_by_default_and_on_with_the_environment_variable(
    value: str | None, expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TOOLRELAY_CHECKED_MACHINES"}
    if value is not None:
        env["TOOLRELAY_CHECKED_MACHINES"] = value
    code = "import toolrelay.machines as m; print(m.is_checked_mode())"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == expected


def test_checked_mode_detects_a_table_that_moves_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with checked_mode():
        cursor = TOOL_CALL_MACHINE.cursor()
    tampered = {
        **TOOL_CALL_MACHINE.table,
        (ToolCallStatus.streaming, ToolCallEvent.finish_args): ToolCallStatus.executing,
    }
    monkeypatch.setattr(cursor, "_table", tampered)
    with pytest.raises(MachineDivergenceError, match="'executing', the machine to 'pending'"):
        cursor.send(ToolCallEvent.finish_args)
    assert cursor.state is ToolCallStatus.streaming


def test_checked_mode_detects_a_table_that_accepts_what_the_machine_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with checked_mode():
        cursor = TOOL_CALL_MACHINE.cursor()
    tampered = {
        **TOOL_CALL_MACHINE.table,
        (ToolCallStatus.streaming, ToolCallEvent.succeed): ToolCallStatus.completed,
    }
    monkeypatch.setattr(cursor, "_table", tampered)
    with pytest.raises(MachineDivergenceError, match="the machine refuses") as info:
        cursor.send(ToolCallEvent.succeed)
    assert isinstance(info.value.__cause__, IllegalTransition)


def test_checked_mode_detects_a_table_that_refuses_what_the_machine_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with checked_mode():
        cursor = RUN_MACHINE.cursor()
    assert isinstance(cursor, RunCursor)
    tampered = dict(RUN_MACHINE._steps)
    del tampered[(RunStatus.idle, RunEvent.start)]
    monkeypatch.setattr(cursor, "_steps", tampered)
    with pytest.raises(MachineDivergenceError, match="the table refuses"):
        cursor.send(RunEvent.start)


def test_checked_mode_detects_a_depth_disagreement(monkeypatch: pytest.MonkeyPatch) -> None:
    with checked_mode():
        cursor = RUN_MACHINE.cursor(RunStatus.executing_tools)
    key = (RunStatus.executing_tools, RunEvent.continue_run)
    tampered = {**RUN_MACHINE._steps, key: (RunStatus.running, 2)}
    monkeypatch.setattr(cursor, "_steps", tampered)
    with pytest.raises(MachineDivergenceError, match="depth 2, the machine 1"):
        cursor.send(RunEvent.continue_run)
    assert cursor.depth == 0


def test_checked_cursor_raises_illegal_transition_chained_from_the_library() -> None:
    with checked_mode():
        cursor = RUN_MACHINE.cursor()
    with pytest.raises(IllegalTransition) as info:
        cursor.send(RunEvent.complete)
    assert (info.value.machine, info.value.state, info.value.event) == (
        "RunLifecycle",
        "idle",
        "complete",
    )
    assert type(info.value.__cause__).__name__ == "TransitionNotAllowed"


def test_divergence_is_an_assertion_not_a_toolrelay_error() -> None:
    error = MachineDivergenceError("M", "a", "go", "detail")
    assert isinstance(error, AssertionError)
    assert not isinstance(error, ToolrelayError)
    assert (error.machine, error.state, error.event, error.detail) == ("M", "a", "go", "detail")


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


def test_toolrelay_tables_hold_every_transition_of_their_classes() -> None:
    for compiled in (RUN_MACHINE, TOOL_CALL_MACHINE):
        machine = cast("CompiledMachine[Any, Any]", compiled)
        declared = {
            (state.value, str(event), transition.target.value)
            for state in machine.machine.states
            for transition in state.transitions
            for event in transition.events
        }
        compiled_rows = {(s, str(e), t) for (s, e), t in machine.table.items()}
        assert compiled_rows == declared


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


def test_is_final_that_disagrees_with_the_machine_is_drift() -> None:
    class Lamp(enum.StrEnum):
        off = "off"
        on = "on"
        broken = "broken"

        @property
        def is_final(self) -> bool:
            return self is Lamp.off

    class LampMachine(StateChart[object]):
        s = States.from_enum(Lamp, initial=Lamp.off, final=Lamp.broken)
        switch_on = s.off.to(s.on)
        switch_off = s.on.to(s.off)
        smash = s.off.to(s.broken)

    with pytest.raises(TypeError, match="is_final"):
        compile_machine(LampMachine, Lamp, Flip)


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


def test_step_can_and_allowed_read_the_table() -> None:
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


def test_cursors_are_independent_and_slotted() -> None:
    first = TOOL_CALL_MACHINE.cursor()
    second = TOOL_CALL_MACHINE.cursor(ToolCallStatus.pending)
    first.send(ToolCallEvent.finish_args)
    first.send(ToolCallEvent.execute)
    assert (first.state, second.state) == (ToolCallStatus.executing, ToolCallStatus.pending)
    assert not hasattr(first, "__dict__")
    assert not hasattr(RUN_MACHINE.cursor(), "__dict__")
    with checked_mode(False):
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
    with checked_mode(False):
        assert repr(machine.cursor()) == "<Cursor LightMachine state='off'>"


def test_a_checked_cursor_of_any_machine_turns_the_library_refusal_into_illegal_transition() -> (
    None
):
    # A machine that is not toolrelay's raises the library's TransitionNotAllowed.
    machine = compile_machine(_light_machine(extra=False), Light, Flip)
    with checked_mode():
        cursor = machine.cursor()
    with pytest.raises(IllegalTransition) as info:
        cursor.send(Flip.switch_off)
    assert (info.value.machine, info.value.state, info.value.event) == (
        "LightMachine",
        "off",
        "switch_off",
    )
    assert type(info.value.__cause__).__name__ == "TransitionNotAllowed"
    assert cursor.state is Light.off


def test_checked_cursors_step_in_lockstep_through_a_whole_lifecycle() -> None:
    with checked_mode():
        call = TOOL_CALL_MACHINE.cursor()
        run = RUN_MACHINE.cursor()
    for call_event in (ToolCallEvent.finish_args, ToolCallEvent.execute, ToolCallEvent.succeed):
        call.send(call_event)
    assert call.state is ToolCallStatus.completed
    for event in (
        RunEvent.start,
        RunEvent.execute_tools,
        RunEvent.continue_run,
        RunEvent.complete,
    ):
        run.send(event)
    assert (run.state, run.depth) == (RunStatus.completed, 1)
