"""The machines and their spellings, shared by the diagrams tests."""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Any

from statemachine import StateChart

from toolrelay import RunLifecycle, RunStatus, ToolCallLifecycle, ToolCallStatus
from toolrelay._machines import RunEvent, ToolCallEvent

__all__ = (
    "FILES",
    "MACHINE_CLASSES",
    "REPO",
    "dot_labels",
    "event_ids",
    "finals",
    "mermaid_labels",
    "state_ids",
)

REPO = Path(__file__).resolve().parents[2]
FILES = ["run_lifecycle.mmd", "run_lifecycle.dot", "tool_call.mmd", "tool_call.dot"]
MACHINE_CLASSES: list[type[StateChart[Any]]] = [RunLifecycle, ToolCallLifecycle]
#: Each machine's spellings: the enums its state ids and event ids come from.
SPELLINGS: dict[type[StateChart[Any]], tuple[type[enum.StrEnum], type[enum.StrEnum]]] = {
    RunLifecycle: (RunStatus, RunEvent),
    ToolCallLifecycle: (ToolCallStatus, ToolCallEvent),
}


def state_ids(machine: type[StateChart[Any]]) -> set[str]:
    return {member.value for member in SPELLINGS[machine][0]}


def event_ids(machine: type[StateChart[Any]]) -> set[str]:
    """The event ids, read from the enum (not from the machine's labels)."""
    return {member.value for member in SPELLINGS[machine][1]}


def mermaid_labels(mermaid: str) -> tuple[set[str], set[str]]:
    """The state labels (``state "label" as id``) and transition labels (``a --> b : label``)."""
    states = set(re.findall(r'^\s*state "([^"]*)" as ', mermaid, re.M))
    transitions = set(re.findall(r"^\s*\S+ --> \S+ : (.*)$", mermaid, re.M))
    return states, transitions


def dot_labels(dot: str) -> tuple[dict[str, str], set[str]]:
    """The node labels by node id, and the edge labels."""
    nodes = dict(re.findall(r'^    "(\w+)" \[label="([^"]*)"', dot, re.M))
    edges = set(re.findall(r'^    "\w+" -> "\w+" \[label="([^"]*)"\];$', dot, re.M))
    return nodes, edges


def finals(machine: type[StateChart[Any]]) -> list[str]:
    return [state.id for state in machine.states if state.final]
