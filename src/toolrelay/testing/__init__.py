"""Test helpers for toolrelay and for the code that embeds it.

- :class:`ScriptedAgent`: the mock LLM, an agent backend that plays scripted runs.
- Event builders: a tool call, a text message, a run in one line.
- ``toolrelay.testing.strategies``: Hypothesis strategies for the wire types.
- ``toolrelay.testing.stateful``: the stateful property suite of the eight promises.
"""

from __future__ import annotations

from toolrelay.testing._builders import (
    flatten as flatten,
    run_cancelled as run_cancelled,
    run_error as run_error,
    run_finished as run_finished,
    run_interrupted as run_interrupted,
    run_started as run_started,
    server_tool_call as server_tool_call,
    split_deltas as split_deltas,
    text as text,
    tool_call as tool_call,
)
from toolrelay.testing._scripted import (
    Gate as Gate,
    Hang as Hang,
    Raise as Raise,
    ScriptedAgent as ScriptedAgent,
    Sleep as Sleep,
    Step as Step,
)

__all__ = (
    "Gate",
    "Hang",
    "Raise",
    "ScriptedAgent",
    "Sleep",
    "Step",
    "flatten",
    "run_cancelled",
    "run_error",
    "run_finished",
    "run_interrupted",
    "run_started",
    "server_tool_call",
    "split_deltas",
    "text",
    "tool_call",
)
