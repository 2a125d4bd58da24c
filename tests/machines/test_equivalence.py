"""The one proof that a compiled table is its declared machine, and what it catches."""

from __future__ import annotations

import enum
import types
from typing import Any

import pytest
from statemachine import StateChart
from statemachine.states import States

from toolrelay import IllegalTransition, RunLifecycle, RunStatus
from toolrelay._machines import (
    RUN_MACHINE,
    TOOL_CALL_MACHINE,
    CompiledMachine,
    CompiledRunMachine,
    RunEvent,
    compare_with_declared,
    compile_machine,
)


class Light(enum.StrEnum):
    off = "off"
    on = "on"
    broken = "broken"


class Flip(enum.StrEnum):
    switch_on = "switch_on"
    switch_off = "switch_off"
    smash = "smash"


class LightMachine(StateChart[object]):
    allow_event_without_transition = False
    catch_errors_as_events = False
    s = States.from_enum(Light, initial=Light.off, final=Light.broken)
    switch_on = s.off.to(s.on)
    switch_off = s.on.to(s.off)
    smash = s.off.to(s.broken)


class LenientLight(LightMachine):
    """Ignores an event it has no transition for (the library's default)."""

    allow_event_without_transition = True


class SlipperyLight(LightMachine):
    """Refuses ``switch_off`` in ``off``, but only after switching on."""

    def send(self, event: str, *args: Any, **kwargs: Any) -> Any:
        if event == Flip.switch_off and self.current_state_value is Light.off:
            super().send(Flip.switch_on)
            raise IllegalTransition("SlipperyLight", "off", event)
        return super().send(event, *args, **kwargs)


class FaultyLight(LightMachine):
    """Breaks down on ``smash`` with an error of its own."""

    def send(self, event: str, *args: Any, **kwargs: Any) -> Any:
        if event == Flip.smash:
            raise RuntimeError("fuse blown")
        return super().send(event, *args, **kwargs)


def _light() -> CompiledMachine[Light, Flip]:
    return compile_machine(LightMachine, Light, Flip)


def _tampered(compiled: CompiledMachine[Any, Any], **fields: Any) -> CompiledMachine[Any, Any]:
    for name, value in fields.items():
        object.__setattr__(compiled, name, value)
    return compiled


def _with_table(compiled: CompiledMachine[Any, Any], table: dict[Any, Any]) -> Any:
    return _tampered(compiled, table=types.MappingProxyType(table))


@pytest.mark.parametrize("compiled", [RUN_MACHINE, TOOL_CALL_MACHINE], ids=lambda m: m.name)
def test_toolrelay_tables_are_their_declared_machines(compiled: CompiledMachine[Any, Any]) -> None:
    assert compare_with_declared(compiled) == ()


def test_a_sound_table_of_any_machine_shows_no_difference() -> None:
    assert compare_with_declared(_light()) == ()


def test_a_table_that_moves_elsewhere_is_caught() -> None:
    compiled = _light()
    table = {**compiled.table, (Light.off, Flip.switch_on): Light.broken}
    assert compare_with_declared(_with_table(compiled, table)) == (
        "off --switch_on-->: moved to on; the table says broken",
    )


def test_a_table_that_accepts_what_the_machine_refuses_is_caught() -> None:
    compiled = _light()
    table = {**compiled.table, (Light.on, Flip.smash): Light.broken}
    assert compare_with_declared(_with_table(compiled, table)) == (
        "on --smash-->: refused; the table moves to broken",
    )


def test_a_table_that_refuses_what_the_machine_accepts_is_caught() -> None:
    compiled = _light()
    table = dict(compiled.table)
    del table[(Light.on, Flip.switch_off)]
    assert compare_with_declared(_with_table(compiled, table)) == (
        "on --switch_off-->: silently accepted (moved to off); the table refuses it "
        "(is allow_event_without_transition still False?)",
    )


def test_a_machine_that_ignores_events_is_caught() -> None:
    problems = compare_with_declared(compile_machine(LenientLight, Light, Flip))
    assert (
        "off --switch_off-->: silently accepted (did nothing); the table refuses it "
        "(is allow_event_without_transition still False?)"
    ) in problems
    # Every pair the table refuses: 1 in `off`, 2 in `on`, 3 in the final `broken`.
    assert len(problems) == 6


def test_a_refusal_that_still_moves_is_caught() -> None:
    problems = compare_with_declared(compile_machine(SlipperyLight, Light, Flip))
    assert problems == ("off --switch_off-->: refused but left the state (on)",)


def test_a_machine_that_raises_its_own_error_is_caught() -> None:
    problems = compare_with_declared(compile_machine(FaultyLight, Light, Flip))
    assert problems == (
        "broken --smash-->: raised RuntimeError: fuse blown",
        "off --smash-->: raised RuntimeError: fuse blown",
        "on --smash-->: raised RuntimeError: fuse blown",
    )


def test_finals_and_initial_that_disagree_are_caught() -> None:
    compiled = _tampered(_light(), finals=frozenset({Light.off}), initial=Light.on)
    assert compare_with_declared(compiled) == (
        "initial state: declared off, compiled on",
        "broken: declared final, compiled not final",
        "off: declared not final, compiled final",
    )


def test_a_run_table_that_miscounts_the_depth_is_caught() -> None:
    compiled = _tampered(CompiledRunMachine(RunLifecycle), counting=frozenset())
    assert compare_with_declared(compiled) == (
        "executing_tools --continue_run-->: the declared machine counts depth +1, "
        "the table +0 (to running)",
    )
    key = (RunStatus.running, RunEvent.complete)
    also = _tampered(CompiledRunMachine(RunLifecycle), counting=RUN_MACHINE.counting | {key})
    assert compare_with_declared(also) == (
        "running --complete-->: the declared machine counts depth +0, the table +1 (to completed)",
    )
