"""The bounds a turn's processor keeps (see :class:`Limits`)."""

from __future__ import annotations

import msgspec

__all__ = ("Limits",)


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on what one agent may send; passing one is a typed error, not memory growth.

    The defaults are far above what a real agent sends; with them, no sequence of
    events, each legal on its own, makes a turn hold memory without bound. Passing a
    bound ends the turn ``failed`` with reason ``protocol_error`` and the limit's name
    as its code (:class:`~toolrelay.LimitExceededError`); what was received
    before is kept. ``max_violations`` alone is not an error: past it, violations
    are counted, not kept.

    Attributes:
        max_event_bytes: Size of one encoded event (checked by the transports, on
            decoded bytes: an SSE event, an NDJSON line).
        max_argument_bytes: UTF-8 size of one tool call's arguments (the processor;
            the provider backends for the pieces they buffer).
        max_events_per_run: Events in one run's stream.
        max_turn_argument_bytes: UTF-8 size of the arguments of every call of a turn.
        max_text_bytes: UTF-8 size of the text a turn streams (messages, and tool
            results the agent reports itself).
        max_reasoning_bytes: UTF-8 size of a turn's reasoning (and its signatures).
        max_messages_per_turn: Text and reasoning messages a turn opens.
        max_tool_calls_per_run: Tool calls one run starts.
        max_tool_calls_per_turn: Tool calls a turn starts, over all its runs.
        max_state_bytes: Estimated encoded size of the agent's state.
        max_json_depth: Nesting of the JSON the processor holds or walks (the state,
            a tool result the agent reports, an interrupt, a snapshot's arguments).
        max_violations: Protocol violations kept (and reported) per turn.
        run_seconds: Wall-clock bound on one run's stream, however lively (a server
            trickling a byte a second passes every read timeout): the HTTP backends
            end the run with reason ``deadline`` (``code="run_seconds"``). ``None``:
            no bound.
        turn_seconds: Wall-clock bound on a whole turn, tools and continuations
            included: the engine ends it ``failed``, reason ``deadline``
            (``code="turn_seconds"``). ``None``: no bound.

    docs/limits.md lists every bound, its default and what hitting it looks like.
    """

    max_event_bytes: int = 8 * 1024 * 1024
    max_argument_bytes: int = 4 * 1024 * 1024
    max_events_per_run: int = 1_000_000
    max_turn_argument_bytes: int = 64 * 1024 * 1024
    max_text_bytes: int = 64 * 1024 * 1024
    max_reasoning_bytes: int = 64 * 1024 * 1024
    max_messages_per_turn: int = 100_000
    max_tool_calls_per_run: int = 1_000
    max_tool_calls_per_turn: int = 10_000
    max_state_bytes: int = 64 * 1024 * 1024
    max_json_depth: int = 128
    max_violations: int = 1_000
    run_seconds: float | None = 30 * 60.0
    turn_seconds: float | None = 2 * 60 * 60.0
