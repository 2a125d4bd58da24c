"""The hot path: the declared machines compiled, once, into immutable transition tables.

A python-statemachine instance costs about 140 µs to create and 80 µs per ``send``;
the core moves a tool call or a turn on every few events, so it cannot drive one
instance per call. This module reads each declared class (``RunLifecycle``,
``ToolCallLifecycle``) at import and turns it into a table ``(state, event) ->
target``. A :class:`Cursor` then moves with one dict lookup and one attribute store.

The rule of ``_run.py`` and ``_tool_call.py`` still holds: every transition lives in
the declared class; nothing beside it. Nothing in this module names a transition:
the tables are *read* from the classes (their states, transitions, events and
explicit ``on=`` actions), and reading refuses anything a table cannot represent.

Strategy
--------

* **Compile once, validate at import.** :func:`compile_machine` checks that the
  states enum and the machine's states are the same set and spelled the same
  (state id == enum value), that the events enum and the machine's events are the
  same set, that the machine is flat, deterministic, unguarded and has no
  naming-convention callbacks, and that an enum's ``is_final`` agrees with the
  machine's finals. A drift raises :class:`TypeError` when ``toolrelay.machines``
  is imported, not in production traffic.
* **The continuation depth is read too.** ``RunLifecycle`` counts continuations in
  the ``on=`` action ``count_continuation`` of a transition. :data:`RUN_MACHINE`
  finds the transitions that carry it and :class:`RunCursor` adds one to its
  ``depth`` on exactly those, in the same lookup as the target.
* **Checked mode proves the tables.** With :func:`set_checked_mode` (or
  ``TOOLRELAY_CHECKED_MACHINES=1`` in the environment), ``cursor()`` returns a
  cursor that also drives a real python-statemachine instance in lockstep and
  raises :class:`MachineDivergenceError` when the two disagree. It costs a real
  instance per cursor; it is for tests and debugging, not production.
* **Graph checks read the same graph.** :func:`check_graph` runs a breadth-first
  search over the transitions as this module reads them (not over
  ``statemachine.graph``, which is not part of the library's documented API and
  walks hierarchies our flat tables refuse), so ``toolrelay verify`` reports on
  exactly the graph the cursors run. The tests check it agrees with the library.

Both modes raise :class:`~toolrelay.errors.IllegalTransition` for an event the
state does not accept; after it, the cursor is in the state it was in.

Promises served: 1 and 3 at the speed promise 8 needs (constant cost per event).
"""

from __future__ import annotations

import enum
import os
import types
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from statemachine import Event, State, StateChart
from statemachine.exceptions import TransitionNotAllowed

from toolrelay.errors import IllegalTransition
from toolrelay.machines._run import RunLifecycle
from toolrelay.machines._status import RunEvent, RunStatus, ToolCallEvent, ToolCallStatus
from toolrelay.machines._tool_call import ToolCallLifecycle

__all__ = (
    "CompiledMachine",
    "CompiledRunMachine",
    "Cursor",
    "GraphReport",
    "MachineDivergenceError",
    "RUN_MACHINE",
    "RunCursor",
    "TOOL_CALL_MACHINE",
    "check_graph",
    "checked_mode",
    "compile_machine",
    "is_checked_mode",
    "set_checked_mode",
)

S = TypeVar("S", bound=enum.StrEnum)
E = TypeVar("E", bound=enum.StrEnum)

#: The environment variable that turns checked mode on at import (value ``1``).
CHECKED_MACHINES_ENV = "TOOLRELAY_CHECKED_MACHINES"

_checked: bool = os.environ.get(CHECKED_MACHINES_ENV, "") == "1"


class MachineDivergenceError(AssertionError):
    """A compiled table and its declared machine disagreed (checked mode only).

    Raised by a checked cursor's ``send`` when the real python-statemachine instance
    driven in lockstep reached another state, accepted an event the table refused
    (or the reverse), or counted another depth. It is an :class:`AssertionError`,
    not a :class:`~toolrelay.errors.ToolrelayError`: it reports a bug in toolrelay,
    never a misuse or a bad wire. After it the cursor has not moved, but the
    real instance may have; discard both.

    Attributes:
        machine: The machine's name.
        state: The state both were in before the event.
        event: The event sent.
        detail: What differed.
    """

    def __init__(self, machine: str, state: str, event: str, detail: str) -> None:
        self.machine = machine
        self.state = state
        self.event = event
        self.detail = detail
        super().__init__(
            f"{machine}: compiled table and declared machine diverge on event {event!r} "
            f"in state {state!r}: {detail}"
        )


# --- Reading a declared class ----------------------------------------------------------


def _flat_states(machine: type[StateChart[Any]]) -> list[State]:
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
class _Edge:
    source: State
    event: str
    target: State
    actions: tuple[str, ...]


def _edges(machine: type[StateChart[Any]], states: list[State]) -> list[_Edge]:
    """Every ``(source, event, target)`` of the class, one per event id.

    Refuses what a ``(state, event) -> target`` table cannot represent: guards and
    validators (the table cannot evaluate them), eventless or multi-target
    transitions, event ids that the library matches by prefix or wildcard, and two
    transitions for one ``(state, event)``.
    """
    name = machine.__name__
    edges: list[_Edge] = []
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
                edges.append(_Edge(state, event_id, targets[0], actions))
    return edges


def _class_events(machine: type[StateChart[Any]]) -> list[str]:
    # On the class, the metaclass's ``events`` property (the declared events) shadows
    # the instance property that mypy sees.
    return [str(event) for event in cast("list[Event]", machine.events)]


def _check_spelling(
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
    event_ids = set(_class_events(machine))
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


def _check_finals(
    machine: type[StateChart[Any]], states: type[enum.StrEnum], finals: frozenset[Any]
) -> None:
    """Check that an enum's ``is_final`` helper, if it has one, agrees with the machine."""
    for member in states:
        says_final = getattr(member, "is_final", None)
        if isinstance(says_final, bool) and says_final != (member in finals):
            raise TypeError(
                f"{states.__name__}.{member.name}.is_final is {says_final} but "
                f"{machine.__name__} declares it {'final' if member in finals else 'not final'}"
            )


def _spelling(values: Any) -> str:
    return ", ".join(sorted(str(value) for value in values)) or "nothing"


# --- The compiled machine --------------------------------------------------------------


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
        declared = _flat_states(machine)
        _check_spelling(machine, declared, states, events)
        finals = frozenset(cast("S", state.value) for state in declared if state.final)
        _check_finals(machine, states, finals)

        table: dict[tuple[S, E], S] = {}
        actions: dict[tuple[S, E], tuple[str, ...]] = {}
        for edge in _edges(machine, declared):
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

    def cursor(self, state: S | None = None) -> Cursor[S, E]:
        """A new cursor at ``state`` (default: :attr:`initial`).

        In checked mode (:func:`set_checked_mode`) the cursor also drives a real
        instance of :attr:`machine` in lockstep and checks every step.
        """
        start = self.initial if state is None else state
        if _checked:
            return _CheckedCursor(self, start, self._instance(start))
        return Cursor(self, start)

    def _instance(self, state: S) -> StateChart[Any]:
        """A real instance of :attr:`machine` in ``state`` (checked mode)."""
        return self.machine(start_value=state)


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
            MachineDivergenceError: Checked mode only: the declared machine disagreed.
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

    __slots__ = ("_steps", "depth")

    def __init__(self, machine: CompiledRunMachine, state: RunStatus, depth: int) -> None:
        super().__init__(machine, state)
        self.depth = depth
        self._steps = machine._steps

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name} state={str(self.state)!r} depth={self.depth}>"

    def send(self, event: RunEvent) -> RunStatus:
        """Move by ``event``, count a continuation if the transition does, return the state.

        Raises:
            IllegalTransition: The current state does not accept ``event``; the
                cursor (state and depth) stays where it was.
            MachineDivergenceError: Checked mode only: the declared machine disagreed.
        """
        try:
            state, counted = self._steps[(self.state, event)]
        except KeyError:
            raise IllegalTransition(self._name, str(self.state), str(event)) from None
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

    def cursor(self, state: RunStatus | None = None, *, depth: int = 0) -> RunCursor:
        """A new cursor at ``state`` (default: ``idle``) with continuation depth ``depth``.

        In checked mode (:func:`set_checked_mode`) the cursor also drives a real
        ``RunLifecycle`` in lockstep and checks every step, depth included.
        """
        start = self.initial if state is None else state
        if _checked:
            return _CheckedRunCursor(
                self, start, depth, self._run_machine(start_value=start, depth=depth)
            )
        return RunCursor(self, start, depth)


# --- Checked mode ----------------------------------------------------------------------


def _send_declared(
    name: str, real: StateChart[Any], before: str, event: str, target: str | None
) -> None:
    """Send ``event`` to the real instance and compare with the table's ``target``.

    Raises:
        IllegalTransition: Both refused (chained from the library's refusal).
        MachineDivergenceError: They disagreed on whether, or where, to move.
    """
    try:
        real.send(event)
    except (IllegalTransition, TransitionNotAllowed) as exc:
        if target is not None:
            raise MachineDivergenceError(
                name, before, event, f"the table moves to {str(target)!r}, the machine refuses"
            ) from exc
        if isinstance(exc, IllegalTransition):
            raise  # the declared class already wrapped TransitionNotAllowed
        raise IllegalTransition(name, before, event) from exc
    reached = real.current_state_value
    if target is None:
        raise MachineDivergenceError(
            name, before, event, f"the machine moves to {str(reached)!r}, the table refuses"
        )
    if reached != target:
        raise MachineDivergenceError(
            name,
            before,
            event,
            f"the table moves to {str(target)!r}, the machine to {str(reached)!r}",
        )


class _CheckedCursor(Cursor[S, E]):
    """A :class:`Cursor` that drives a real instance in lockstep (checked mode)."""

    __slots__ = ("_real",)

    def __init__(self, machine: CompiledMachine[S, E], state: S, real: StateChart[Any]) -> None:
        super().__init__(machine, state)
        self._real = real

    def send(self, event: E) -> S:
        target = self._table.get((self.state, event))
        _send_declared(self._name, self._real, str(self.state), str(event), target)
        assert target is not None  # _send_declared raised otherwise
        self.state = target
        return target


class _CheckedRunCursor(RunCursor):
    """A :class:`RunCursor` that drives a real ``RunLifecycle`` in lockstep (checked mode)."""

    __slots__ = ("_real",)

    def __init__(
        self, machine: CompiledRunMachine, state: RunStatus, depth: int, real: RunLifecycle
    ) -> None:
        super().__init__(machine, state, depth)
        self._real = real

    def send(self, event: RunEvent) -> RunStatus:
        step = self._steps.get((self.state, event))
        before = str(self.state)
        target = None if step is None else step[0]
        _send_declared(self._name, self._real, before, str(event), target)
        assert step is not None  # _send_declared raised otherwise
        target, counted = step
        if self._real.depth != self.depth + counted:
            raise MachineDivergenceError(
                self._name,
                before,
                str(event),
                f"the table counts depth {self.depth + counted}, the machine {self._real.depth}",
            )
        self.state = target
        self.depth += counted
        return target


def set_checked_mode(enabled: bool) -> None:
    """Turn checked mode on or off for cursors created from now on, process-wide.

    In checked mode every cursor also drives a real python-statemachine instance
    and raises :class:`MachineDivergenceError` when the two disagree. The default
    is off, or on when ``TOOLRELAY_CHECKED_MACHINES=1`` at import. Cursors already
    created keep their mode.
    """
    global _checked
    _checked = enabled


def is_checked_mode() -> bool:
    """Whether cursors created now are checked."""
    return _checked


@contextmanager
def checked_mode(enabled: bool = True) -> Iterator[None]:
    """Turn checked mode on (or off) inside the block, then restore the previous mode.

    Process-wide, like :func:`set_checked_mode`: meant for tests and debugging.
    """
    previous = _checked
    set_checked_mode(enabled)
    try:
        yield
    finally:
        set_checked_mode(previous)


# --- Graph checks ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GraphReport:
    """What is wrong with a machine's graph, by state id (``toolrelay verify`` prints it).

    Attributes:
        unreachable: States no path from the initial state reaches.
        trapped: Non-final states with no path to a final state (promise 1).
        ok: Neither kind exists.
    """

    unreachable: frozenset[str]
    trapped: frozenset[str]

    @property
    def ok(self) -> bool:
        return not self.unreachable and not self.trapped


def check_graph(machine: type[StateChart[Any]]) -> GraphReport:
    """Check that every state of ``machine`` is reachable and can reach a final state.

    A breadth-first search over the transitions read from the class, the same
    reading :func:`compile_machine` makes, so the report describes the graph the
    compiled tables run.

    Raises:
        TypeError: ``machine`` cannot be read as a flat table (see :func:`compile_machine`).
    """
    states = _flat_states(machine)
    successors: dict[str, set[str]] = {state.id: set() for state in states}
    predecessors: dict[str, set[str]] = {state.id: set() for state in states}
    for edge in _edges(machine, states):
        successors[edge.source.id].add(edge.target.id)
        predecessors[edge.target.id].add(edge.source.id)
    initial = machine.initial_state
    assert initial is not None  # a class with states has an initial state
    reachable = _closure({initial.id}, successors)
    reaches_final = _closure({state.id for state in states if state.final}, predecessors)
    return GraphReport(
        unreachable=frozenset(successors.keys() - reachable),
        trapped=frozenset(
            state.id for state in states if not state.final and state.id not in reaches_final
        ),
    )


def _closure(start: set[str], edges: Mapping[str, set[str]]) -> set[str]:
    """Every node reachable from ``start`` along ``edges`` (``start`` included)."""
    seen = set(start)
    queue = deque(start)
    while queue:
        for node in edges[queue.popleft()]:
            if node not in seen:
                seen.add(node)
                queue.append(node)
    return seen


# --- Compiling ---------------------------------------------------------------------------


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
            and not the other, a state id that is not its value, an ``is_final``
            that disagrees), or the machine has what a table cannot represent
            (compound states, guards, validators, eventless or multi-target
            transitions, wildcard event ids, two transitions for one pair,
            naming-convention callbacks).
    """
    return CompiledMachine(machine, states, events)


#: The compiled ``RunLifecycle``; ``RUN_MACHINE.cursor()`` starts a turn.
RUN_MACHINE: CompiledRunMachine = CompiledRunMachine(RunLifecycle)
#: The compiled ``ToolCallLifecycle``; ``TOOL_CALL_MACHINE.cursor()`` starts a tool call.
TOOL_CALL_MACHINE: CompiledMachine[ToolCallStatus, ToolCallEvent] = compile_machine(
    ToolCallLifecycle, ToolCallStatus, ToolCallEvent
)
