"""Why a turn ended: the terminal reason every run lifecycle carries at its end.

This module has no dependencies so that every layer (errors, machines, core,
runtime) can name a reason without importing another layer.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ("ReasonKind", "TerminalReason")


class ReasonKind(enum.StrEnum):
    """The kind of ending a turn reached; the run lifecycle's final state follows from it."""

    #: The agent answered: the last run finished with no tool call pending.
    COMPLETED = "completed"
    #: The agent paused the turn to ask for something from outside (AG-UI
    #: ``RUN_FINISHED`` with the ``interrupt`` outcome); the next turn on the thread
    #: answers with resume entries. The turn ends ``interrupted``.
    INTERRUPTED = "interrupted"
    #: The agent reported an error (AG-UI ``RUN_ERROR``, a provider error).
    AGENT_ERROR = "agent_error"
    #: The wire misbehaved: malformed SSE or JSON, a bad event, a limit exceeded,
    #: the stream ending without ``RUN_FINISHED``.
    PROTOCOL_ERROR = "protocol_error"
    #: The transport failed: connection refused or dropped, timeout, HTTP error status.
    TRANSPORT_ERROR = "transport_error"
    #: The backend could not allocate or start a run.
    BACKEND_ERROR = "backend_error"
    #: The continuation depth bound was reached (the circuit breaker, promise 3).
    MAX_DEPTH = "max_depth"
    #: The agent asked for the same tool with the same arguments too many times in
    #: one turn (no-progress loop detection, checked before the depth bound).
    NO_PROGRESS = "no_progress"
    #: A time bound was reached: the run's (``code="run_seconds"``: a server that
    #: trickles bytes or keep-alives past ``Limits.run_seconds``) or the turn's
    #: (``code="turn_seconds"``). The turn ends ``failed``.
    DEADLINE = "deadline"
    #: The embedding code cancelled the turn (promise 4).
    CANCELLED = "cancelled"
    #: The agent reported that it stopped the run because it was told to (AG-UI
    #: ``RUN_FINISHED`` with the ``cancelled`` outcome). The turn ends ``cancelled``.
    AGENT_CANCELLED = "agent_cancelled"
    #: A newer turn on the same thread took it over (promise 5).
    SUPERSEDED = "superseded"
    #: The engine was closed while the turn was in flight.
    CLOSED = "closed"
    #: The durable store could not write or read what the turn needs (locked, full,
    #: read-only, corrupt, from a newer version). What was committed before stays.
    STORE_ERROR = "store_error"
    #: An unexpected error inside toolrelay or the embedding code (the catch-all).
    INTERNAL_ERROR = "internal_error"


class TerminalReason(msgspec.Struct, frozen=True, kw_only=True):
    """Why a turn ended, in words a person can act on.

    Attributes:
        kind: The kind of ending.
        message: A one-line explanation.
        code: A machine-readable code when the agent or transport gave one
            (``RUN_ERROR.code``, an HTTP status, a provider error type).
    """

    kind: ReasonKind
    message: str
    code: str | None = None

    def __str__(self) -> str:
        suffix = f" [{self.code}]" if self.code else ""
        return f"{self.kind.value}: {self.message}{suffix}"
