"""Graph checks over a declared machine: every state reachable from the initial one,
every non-final state with a path to a final one (promise 1)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statemachine import StateChart

from toolrelay._machines._reading import flat_states, read_edges

__all__ = ("GraphReport", "check_graph")


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
    reading :func:`~toolrelay._machines.compile_machine` makes, so the report
    describes the graph the compiled tables run.

    Raises:
        TypeError: ``machine`` cannot be read as a flat table (see :func:`compile_machine`).
    """
    states = flat_states(machine)
    successors: dict[str, set[str]] = {state.id: set() for state in states}
    predecessors: dict[str, set[str]] = {state.id: set() for state in states}
    for edge in read_edges(machine, states):
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
