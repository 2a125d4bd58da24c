"""The one proof that a compiled table is its declared machine.

The machines have no guards (reading a class refuses them), so where a declared
machine goes on an event depends on its state alone: sending every event in every
state to a real instance of the class, and comparing with the table, is a complete
proof. :func:`compare_with_declared` does exactly that, once; ``toolrelay verify``
reports it and the tests run it. Nothing else compares the two.
"""

from __future__ import annotations

import itertools
from typing import Any

from statemachine import StateChart
from statemachine.exceptions import TransitionNotAllowed

from toolrelay._errors import IllegalTransition
from toolrelay._machines._compiled import CompiledMachine, CompiledRunMachine

__all__ = ("compare_with_declared",)


def compare_with_declared(compiled: CompiledMachine[Any, Any]) -> tuple[str, ...]:
    """Compare ``compiled`` with the class it was read from, on every ``(state, event)``.

    In each state, a real instance of ``compiled.machine`` started there must be
    final exactly when the table says so, and each event must move it to the
    table's target or be refused (``IllegalTransition``) where the table has none:
    never accepted silently (STYLE point 3). For a :class:`CompiledRunMachine`, a
    transition must also count a continuation exactly when the table does
    (promise 3). The initial states must agree.

    Returns:
        What differs, one line each (``state --event-->: ...``); empty when the
        table is the machine.

    Raises:
        Exception: Whatever creating an instance of the class raises.
    """
    machine = compiled.machine
    problems: list[str] = []
    initial = machine().current_state_value
    if initial != compiled.initial:
        problems.append(f"initial state: declared {initial}, compiled {compiled.initial}")
    states = sorted(compiled.states, key=str)
    for state in states:
        declared_final = machine(start_value=state).is_terminated
        if declared_final != (state in compiled.finals):
            problems.append(
                f"{state}: declared {_final(declared_final)}, "
                f"compiled {_final(state in compiled.finals)}"
            )
    for state, event in itertools.product(states, sorted(compiled.events, key=str)):
        problem = _compare_pair(compiled, state, event)
        if problem is not None:
            problems.append(f"{state} --{event}-->: {problem}")
    return tuple(problems)


def _compare_pair(compiled: CompiledMachine[Any, Any], state: Any, event: Any) -> str | None:
    """What differs when ``event`` is sent in ``state``; None when nothing does."""
    target = compiled.table.get((state, event))
    instance = compiled.machine(start_value=state)
    before = _depth(instance)
    try:
        instance.send(str(event))
    except (IllegalTransition, TransitionNotAllowed):
        moved = False
    except Exception as exc:
        return f"raised {type(exc).__name__}: {exc}"
    else:
        moved = True
    reached = instance.current_state_value
    if not moved:
        if target is not None:
            return f"refused; the table moves to {target}"
        if reached != state:
            return f"refused but left the state ({reached})"
        return None
    if target is None:
        what = "did nothing" if reached == state else f"moved to {reached}"
        return (
            f"silently accepted ({what}); the table refuses it "
            "(is allow_event_without_transition still False?)"
        )
    if reached != target:
        return f"moved to {reached}; the table says {target}"
    if isinstance(compiled, CompiledRunMachine):
        counted = _depth(instance) - before
        expected = int((state, event) in compiled.counting)
        if counted != expected:
            return (
                f"the declared machine counts depth +{counted}, the table +{expected} (to {target})"
            )
    return None


def _depth(instance: StateChart[Any]) -> int:
    return int(getattr(instance, "depth", 0))


def _final(final: bool) -> str:
    return "final" if final else "not final"
