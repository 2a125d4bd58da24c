"""What the engine tells a tool about the call it runs: :class:`ToolContext`.

A parameter annotated with it is the engine's to fill, never the model's (see
``_tool_schema``, which leaves it out of the JSON Schema, and ``ToolSpec.bind``,
which passes it in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ("ToolContext",)

D = TypeVar("D", covariant=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext(Generic[D]):
    """What the engine tells a tool about the call it runs; the model never sets it.

    Annotate one parameter of a tool with ``ToolContext[YourDeps]`` and the engine
    passes it in: it is left out of the JSON Schema the model sees, and a call whose
    arguments name it is refused. ``deps`` is what the embedding code gave
    (``Engine(tool_context=...)``, or ``start_turn(..., tool_context=...)`` for one
    turn): the user, a database session, permissions, without globals.

    Attributes:
        deps: The embedding code's object (``None`` when it gave none).
        thread_id: The thread of the turn.
        run_id: The run whose call this is.
        tool_call_id: The call's ``toolCallId``.
        tool_name: The tool called.
    """

    deps: D
    thread_id: str = ""
    run_id: str | None = None
    tool_call_id: str = ""
    tool_name: str = ""
