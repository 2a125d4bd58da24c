"""Graphviz DOT source for a flat machine, written without pydot.

python-statemachine's own DOT renderer (``format(cls, "dot")``) builds a ``pydot``
graph: it needs ``pydot``, which is not a toolrelay dependency, and it names its
initial node and clusters after ``id()`` of Python objects, so its output changes from
one process to the next. A committed, drift-checked file needs bytes that do not.

Strategy: read the machine with the library's own ``extract()`` (the intermediate
representation its mermaid and dot renderers share: states, names, finals,
transitions, event labels) and print DOT from it in declaration order. Nothing here
names a state or a transition of toolrelay's machines; everything is read.

Final states are marked twice, as in UML and as the mermaid output does: a double
border (``peripheries=2``) and an arrow to the end pseudostate (a bullseye).
"""

from __future__ import annotations

from typing import Any

from statemachine import StateChart
from statemachine.contrib.diagram.extract import extract
from statemachine.contrib.diagram.model import StateType

__all__ = ("render_dot",)

#: The pseudostates' node ids; state ids are Python identifiers, so they cannot clash.
INITIAL_NODE = "__initial__"
FINAL_NODE = "__final__"

_FONT = "Helvetica"


def _quote(text: str) -> str:
    """A DOT double-quoted string (backslashes, quotes and line breaks escaped)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")
    return f'"{escaped}"'


def _attrs(**attrs: str) -> str:
    return ", ".join(f"{key}={_quote(value)}" for key, value in attrs.items())


def render_dot(machine: type[StateChart[Any]]) -> str:
    """The DOT source of a flat machine class, deterministic byte for byte.

    Raises:
        ValueError: The machine has compound, parallel or pseudo states (toolrelay's
            machines are flat; the compiled tables refuse anything else too).
    """
    graph = extract(machine)
    for state in graph.states:
        if state.children or state.type not in (StateType.REGULAR, StateType.FINAL):
            raise ValueError(
                f"{graph.name}: state {state.id!r} is compound, parallel or a pseudostate "
                f"({state.type.value}); toolrelay draws flat machines only"
            )
    lines = [
        f"digraph {_quote(graph.name)} {{",
        f"    graph [{_attrs(label=graph.name, labelloc='t', rankdir='LR', fontname=_FONT)}];",
        "    node ["
        + _attrs(
            shape="rectangle",
            style="rounded,filled",
            fillcolor="white",
            penwidth="2",
            fontname=_FONT,
            fontsize="11",
        )
        + "];",
        f"    edge [{_attrs(fontname=_FONT, fontsize='10')}];",
        f"    {_quote(INITIAL_NODE)} ["
        + _attrs(
            label="",
            shape="circle",
            style="filled",
            fillcolor="black",
            width="0.15",
            fixedsize="true",
        )
        + "];",
    ]
    finals = [state for state in graph.states if state.type is StateType.FINAL]
    if finals:
        lines.append(
            f"    {_quote(FINAL_NODE)} ["
            + _attrs(
                label="",
                shape="doublecircle",
                style="filled",
                fillcolor="black",
                width="0.12",
                fixedsize="true",
            )
            + "];"
        )
    for state in graph.states:
        if state.type is StateType.FINAL:
            lines.append(f"    {_quote(state.id)} [{_attrs(label=state.name, peripheries='2')}];")
        else:
            lines.append(f"    {_quote(state.id)} [{_attrs(label=state.name)}];")
    lines.extend(
        f"    {_quote(INITIAL_NODE)} -> {_quote(state.id)};"
        for state in graph.states
        if state.is_initial
    )
    for transition in graph.transitions:
        if transition.is_initial:
            continue
        targets = transition.targets or [transition.source]
        label = transition.event
        if transition.guards:
            label = f"{label} [{', '.join(transition.guards)}]"
        lines.extend(
            f"    {_quote(transition.source)} -> {_quote(target)} [{_attrs(label=label)}];"
            for target in targets
        )
    lines.extend(f"    {_quote(state.id)} -> {_quote(FINAL_NODE)};" for state in finals)
    lines.append("}")
    return "\n".join(lines) + "\n"
