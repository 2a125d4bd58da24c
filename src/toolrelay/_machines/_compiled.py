"""The declared machines compiled, once, into immutable transition tables: the hot path.

A python-statemachine instance costs about 140 µs to create and 80 µs per ``send``;
the core moves a tool call or a turn on every few events, so it cannot drive one
instance per call. This module reads each declared class (``RunLifecycle``,
``ToolCallLifecycle``) at import and turns it into a table ``(state, event) ->
target``. A :class:`Cursor` then moves with one dict lookup and one attribute store.

The rule of ``_run.py`` and ``_tool_call.py`` still holds: every transition lives in
the declared class; nothing beside it. Nothing in this module names a transition:
the tables are *read* from the classes (:mod:`toolrelay._machines._reading`), and
reading refuses anything a table cannot represent.

Strategy
--------

* **Compile once, validate at import.** :func:`compile_machine` checks that the
  states enum and the machine's states are the same set and spelled the same
  (state id == enum value), that the events enum and the machine's events are the
  same set, and that the machine is flat, deterministic, unguarded and has no
  naming-convention callbacks. A drift raises :class:`TypeError` when
  ``toolrelay._machines`` is imported, not in production traffic.
* **The finals are read too, and only here.** Which states are final is what the
  declarations say (``final=``); :data:`RUN_MACHINE` and :data:`TOOL_CALL_MACHINE`
  hand their :attr:`~CompiledMachine.finals` to the status enums, whose ``is_final``
  reads them: no list of final states is written anywhere else.
* **The continuation depth is read too.** ``RunLifecycle`` counts continuations in
  the ``on=`` action ``count_continuation`` of a transition. :data:`RUN_MACHINE`
  finds the transitions that carry it and :class:`RunCursor` adds one to its
  ``depth`` on exactly those, in the same lookup as the target.
* **One proof that the tables are the machines.** The machines have no guards (the
  reading refuses them), so sending every event in every state to the declared class
  and comparing with the table is a complete proof:
  :func:`~toolrelay._machines.compare_with_declared` does it, ``toolrelay verify``
  and the tests run it.

A cursor raises :class:`~toolrelay.IllegalTransition` for an event the state
does not accept; after it, the cursor is in the state it was in.

Promises served: 1 and 3 at the speed promise 8 needs (constant cost per event).
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from statemachine import StateChart

from toolrelay._errors import IllegalTransition
from toolrelay._machines._reading import check_spelling, flat_states, read_edges
from toolrelay._machines._run import RunLifecycle
from toolrelay._machines._status import FINALS, RunEvent, RunStatus, ToolCallEvent, ToolCallStatus
from toolrelay._machines._tool_call import ToolCallLifecycle

__all__ = (
    "CompiledMachine",
    "CompiledRunMachine",
    "Cursor",
    "RUN_MACHINE",
    "RunCursor",
    "TOOL_CALL_MACHINE",
    "compile_machine",
)

S = TypeVar("S", bound=enum.StrEnum)
E = TypeVar("E", bound=enum.StrEnum)


@dataclass(frozen=True, slots=True, init=False, repr=False, eq=False)
class CompiledMachine(Generic[S, E]):
    """A declared machine read into an immutable transition table, for the hot path.

    Build one with :func:`compile_machine`; toolrelay's own are :data:`RUN_MACHINE`
    and :data:`TOOL_CALL_MACHINE`. Instances are immutable.

    Attributes:
        name: The machine class's name (``"ToolCallLifecycle"``); errors carry it.
        machine: The declared ``StateChart`` class the table was read from.
        initial: The initial state.
        finals: The final states.
        states: Every state.
        events: Every event.
        table: ``(state, event) -> target`` for every transition, read-only.
        actions: ``(state, event) -> names`` of the explicit ``before=``/``on=``/
            ``after=`` actions the transition runs, read-only (every pair of
            :attr:`table` is a key).
    """

    name: str
    machine: type[StateChart[Any]]
    initial: S
    finals: frozenset[S]
    states: frozenset[S]
    events: frozenset[E]
    table: Mapping[tuple[S, E], S]
    actions: Mapping[tuple[S, E], tuple[str, ...]]
    _table: dict[tuple[S, E], S]
    _allowed: dict[S, frozenset[E]]

    def __init__(self, machine: type[StateChart[Any]], states: type[S], events: type[E]) -> None:
        """Read ``machine`` into a table; see :func:`compile_machine`."""
        name = machine.__name__
        declared = flat_states(machine)
        check_spelling(machine, declared, states, events)
        finals = frozenset(cast("S", state.value) for state in declared if state.final)

        table: dict[tuple[S, E], S] = {}
        actions: dict[tuple[S, E], tuple[str, ...]] = {}
        for edge in read_edges(machine, declared):
            key = (cast("S", edge.source.value), events(edge.event))
            table[key] = cast("S", edge.target.value)
            actions[key] = edge.actions
        allowed = {
            state: frozenset(event for (source, event) in table if source is state)
            for state in states
        }
        initial_state = machine.initial_state
        assert initial_state is not None  # a class with states has an initial state

        setattr_ = object.__setattr__
        setattr_(self, "name", name)
        setattr_(self, "machine", machine)
        setattr_(self, "initial", cast("S", initial_state.value))
        setattr_(self, "finals", finals)
        setattr_(self, "states", frozenset(states))
        setattr_(self, "events", frozenset(events))
        setattr_(self, "_table", table)
        setattr_(self, "table", types.MappingProxyType(table))
        setattr_(self, "actions", types.MappingProxyType(actions))
        setattr_(self, "_allowed", allowed)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}: {len(self._table)} transitions>"

    def step(self, state: S, event: E) -> S:
        """The state ``event`` moves ``state`` to.

        Raises:
            IllegalTransition: ``state`` does not accept ``event``.
        """
        try:
            return self._table[(state, event)]
        except KeyError:
            raise IllegalTransition(self.name, str(state), str(event)) from None

    def allowed(self, state: S) -> frozenset[E]:
        """The events ``state`` accepts (empty for a final state)."""
        return self._allowed[state]

    def can(self, state: S, event: E) -> bool:
        """Whether ``state`` accepts ``event``."""
        return (state, event) in self._table

    def accepting(self, event: E) -> frozenset[S]:
        """The states that accept ``event`` (empty when none does)."""
        return frozenset(state for (state, accepted) in self._table if accepted == event)

    def cursor(self, state: S | None = None) -> Cursor[S, E]:
        """A new cursor at ``state`` (default: :attr:`initial`)."""
        return Cursor(self, self.initial if state is None else state)


class Cursor(Generic[S, E]):
    """Where one tool call (or any compiled machine's instance) stands; moves by table.

    Get one from :meth:`CompiledMachine.cursor`. Read :attr:`state`; move with
    :meth:`send`. Do not assign :attr:`state`: a cursor only moves by events.

    Attributes:
        machine: The compiled machine the cursor follows.
        state: The current state.
    """

    __slots__ = ("_name", "_table", "machine", "state")

    def __init__(self, machine: CompiledMachine[S, E], state: S) -> None:
        self.machine = machine
        self.state = state
        self._table = machine._table
        self._name = machine.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name} state={str(self.state)!r}>"

    def send(self, event: E) -> S:
        """Move by ``event`` and return the new state.

        Raises:
            IllegalTransition: The current state does not accept ``event``; the
                cursor stays where it was.
        """
        try:
            state = self._table[(self.state, event)]
        except KeyError:
            raise IllegalTransition(self._name, str(self.state), str(event)) from None
        self.state = state
        return state


class RunCursor(Cursor[RunStatus, RunEvent]):
    """Where one turn stands, and how many continuation runs it has started.

    Get one from :meth:`CompiledRunMachine.cursor` (``RUN_MACHINE.cursor()``).

    Attributes:
        depth: The continuation depth: how many ``continue_run`` transitions the
            turn has taken (promise 3). The runtime compares it with its bound.
    """

    __slots__ = ("depth",)

    machine: CompiledRunMachine

    def __init__(self, machine: CompiledRunMachine, state: RunStatus, depth: int) -> None:
        super().__init__(machine, state)
        self.depth = depth

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name} state={str(self.state)!r} depth={self.depth}>"

    def send(self, event: RunEvent) -> RunStatus:
        """Move by ``event``, count a continuation if the transition does, return the state.

        Raises:
            IllegalTransition: The current state does not accept ``event``; the
                cursor (state and depth) stays where it was.
        """
        state, counted = self.machine.advance(self.state, event)
        self.state = state
        self.depth += counted
        return state


#: The explicit action of ``RunLifecycle`` that counts a continuation.
_COUNT_CONTINUATION = RunLifecycle.count_continuation.__name__


@dataclass(frozen=True, slots=True, init=False, repr=False, eq=False)
class CompiledRunMachine(CompiledMachine[RunStatus, RunEvent]):
    """The compiled ``RunLifecycle``: its cursors also count the continuation depth.

    The transitions that count are those whose declaration carries the action
    ``count_continuation`` (``on=``); they are read from the class like the table.
    """

    counting: frozenset[tuple[RunStatus, RunEvent]]
    _steps: dict[tuple[RunStatus, RunEvent], tuple[RunStatus, int]]
    _run_machine: type[RunLifecycle]

    def __init__(self, machine: type[RunLifecycle] = RunLifecycle) -> None:
        """Read ``machine`` (``RunLifecycle`` or a subclass) into a table."""
        # Not super(): a slotted dataclass is a new class, which zero-argument super()
        # does not know (fixed only in later Pythons).
        CompiledMachine.__init__(self, machine, RunStatus, RunEvent)
        counting = frozenset(
            key for key, names in self.actions.items() if _COUNT_CONTINUATION in names
        )
        if not counting:
            raise TypeError(
                f"{self.name}: no transition carries on={_COUNT_CONTINUATION}; the "
                "continuation depth would never grow (promise 3)"
            )
        steps = {key: (target, int(key in counting)) for key, target in self._table.items()}
        object.__setattr__(self, "counting", counting)
        object.__setattr__(self, "_steps", steps)
        object.__setattr__(self, "_run_machine", machine)

    def advance(self, state: RunStatus, event: RunEvent) -> tuple[RunStatus, int]:
        """The state ``event`` moves ``state`` to, and whether the transition counts a
        continuation (1) or not (0), in one lookup.

        Raises:
            IllegalTransition: ``state`` does not accept ``event``.
        """
        try:
            return self._steps[(state, event)]
        except KeyError:
            raise IllegalTransition(self.name, str(state), str(event)) from None

    def cursor(self, state: RunStatus | None = None, *, depth: int = 0) -> RunCursor:
        """A new cursor at ``state`` (default: ``idle``) with continuation depth ``depth``."""
        return RunCursor(self, self.initial if state is None else state, depth)


def compile_machine(
    machine: type[StateChart[Any]], states: type[S], events: type[E]
) -> CompiledMachine[S, E]:
    """Read a declared machine into a :class:`CompiledMachine`.

    Args:
        machine: A flat ``StateChart`` class whose states come from ``states`` via
            ``States.from_enum(states, ..., use_enum_instance=True)``.
        states: The enum of its states.
        events: The enum of its events (values are the event ids).

    Raises:
        TypeError: The enums and the machine drifted apart (a state or event in one
            and not the other, a state id that is not its value), or the machine
            has what a table cannot represent (compound states, guards, validators,
            eventless or multi-target transitions, wildcard event ids, two
            transitions for one pair, naming-convention callbacks).
    """
    return CompiledMachine(machine, states, events)


#: The compiled ``RunLifecycle``; ``RUN_MACHINE.cursor()`` starts a turn.
RUN_MACHINE: CompiledRunMachine = CompiledRunMachine(RunLifecycle)
#: The compiled ``ToolCallLifecycle``; ``TOOL_CALL_MACHINE.cursor()`` starts a tool call.
TOOL_CALL_MACHINE: CompiledMachine[ToolCallStatus, ToolCallEvent] = compile_machine(
    ToolCallLifecycle, ToolCallStatus, ToolCallEvent
)

# The status enums' ``is_final`` (and ``is_open``) read what the declarations say.
FINALS[RunStatus] = RUN_MACHINE.finals
FINALS[ToolCallStatus] = TOOL_CALL_MACHINE.finals
