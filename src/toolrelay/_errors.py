"""Every exception toolrelay raises, in one module.

The hierarchy, split by culprit (as h11 and wsproto do)::

    ToolrelayError                      (root; never raised itself)
    ├── LocalProtocolError              the embedding code misused the API
    │   ├── IllegalTransition           a machine was sent an event its state does not allow
    │   ├── ClosedError                 a closed registry or engine was used
    │   ├── ToolDefinitionError         a tool cannot be declared (bad signature, duplicate)
    │   ├── ConversationError           a turn cannot be built from the given conversation
    │   ├── ResumeError                 resume entries that do not answer the open interrupts
    │   │                               (also a ``ValueError``)
    │   └── ApprovalError               a decision for a call that does not await approval
    │                                   (also a ``ValueError``)
    └── RemoteProtocolError             the agent or the wire misbehaved (carries a `reason`)
        ├── MalformedEventError         an event payload that is not JSON
        ├── InvalidEventError           a known event type with a bad body
        ├── LimitExceededError          a payload, argument or event-count limit was passed
        ├── StreamEndedEarlyError       the stream closed before RUN_FINISHED / RUN_ERROR
        ├── AgentRunError               the agent reported RUN_ERROR (or a provider error)
        ├── RunAllocationError          the backend could not allocate or start a run
        ├── DeadlineError               a run outlived Limits.run_seconds
        └── TransportError              the connection failed
            ├── ConnectError            the server could not be reached
            ├── ReadTimeoutError        no bytes arrived within the read timeout
            ├── StreamDroppedError      the connection broke mid-stream
            ├── HTTPStatusError         a non-2xx response (with an excerpt of its body)
            └── ContentTypeError        a response that is not ``text/event-stream``
    └── StoreError                      the durable store failed (carries a `reason`)
        ├── StoreUnavailableError       locked, full, read-only, or the I/O failed
        ├── StoreCorruptError           not a toolrelay store, or damaged
        ├── StoreVersionError           written by a newer toolrelay (a newer schema)
        └── StaleClaimError             a write under a claim another worker has taken over

Remote errors carry a hint, as h11's ``error_status_hint`` does: :attr:`reason`, the
:class:`~toolrelay.TerminalReason` the turn ends with when the error reaches the engine.
Third-party exceptions (httpx, httpx-sse, msgspec) are translated at the boundary
where they occur and chained with ``raise ... from exc``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from toolrelay._reasons import ReasonKind, TerminalReason

__all__ = (
    "AgentRunError",
    "ApprovalError",
    "ClosedError",
    "ConnectError",
    "ContentTypeError",
    "ConversationError",
    "DeadlineError",
    "HTTPStatusError",
    "IllegalTransition",
    "InvalidEventError",
    "LimitExceededError",
    "LocalProtocolError",
    "MalformedEventError",
    "ReadTimeoutError",
    "RemoteProtocolError",
    "ResumeError",
    "RunAllocationError",
    "StaleClaimError",
    "StoreCorruptError",
    "StoreError",
    "StoreUnavailableError",
    "StoreVersionError",
    "StreamDroppedError",
    "StreamEndedEarlyError",
    "ToolDefinitionError",
    "ToolrelayError",
    "TransportError",
    "UnknownServerError",
)


class ToolrelayError(Exception):
    """Root of every toolrelay exception. Catch it; never raise it directly."""

    def __new__(cls, *args: Any, **kwargs: Any) -> ToolrelayError:
        if cls is ToolrelayError or cls is LocalProtocolError or cls is RemoteProtocolError:
            raise TypeError(f"{cls.__name__} is abstract: raise one of its subclasses")
        return super().__new__(cls, *args)


class LocalProtocolError(ToolrelayError):
    """The embedding code used toolrelay in a way it does not allow."""


class IllegalTransition(LocalProtocolError):
    """A declared machine was sent an event that its current state does not accept.

    Attributes:
        machine: The machine's name (``"RunLifecycle"``, ``"ToolCallLifecycle"``).
        state: The state the machine was in.
        event: The event that was refused.
    """

    def __init__(self, machine: str, state: str, event: str) -> None:
        self.machine = machine
        self.state = state
        self.event = event
        super().__init__(f"{machine} cannot handle event {event!r} in state {state!r}")


class ClosedError(LocalProtocolError):
    """A run registry or engine was used after it was closed."""


class ToolDefinitionError(LocalProtocolError):
    """A tool cannot be declared: its signature has no JSON Schema, or its name is taken."""


class ConversationError(LocalProtocolError):
    """A request cannot be built from the conversation (for example a provider's
    alternation rule is broken, or the provider cannot serve what is asked)."""


class ApprovalError(LocalProtocolError, ValueError):
    """``Turn.approve`` or ``Turn.deny`` named a call that does not await approval
    (an unknown id, one decided already, or a turn that ended). Nothing changed."""


class ResumeError(LocalProtocolError, ValueError):
    """Resume entries that do not answer the interrupts a thread has open.

    AG-UI 1.0 answers an interrupted run with a new run whose ``RunAgentInput.resume``
    holds one entry per interrupt, matched by ``interruptId``. Raised by
    ``Engine.start_turn`` (through :func:`toolrelay.sansio.check_resume`) before anything
    is sent or changed. It is a ``ValueError`` too: the arguments are wrong.

    Attributes:
        unknown: Entry ids that name no open interrupt.
        duplicated: Interrupt ids answered more than once.
        unanswered: Open interrupt ids no entry answers.
    """

    def __init__(
        self,
        message: str,
        *,
        unknown: tuple[str, ...] = (),
        duplicated: tuple[str, ...] = (),
        unanswered: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.unknown = unknown
        self.duplicated = duplicated
        self.unanswered = unanswered


class RemoteProtocolError(ToolrelayError):
    """The agent or the wire misbehaved.

    Attributes:
        reason: The terminal reason a turn ends with when this error reaches the engine.
    """

    reason_kind: ClassVar[ReasonKind] = ReasonKind.PROTOCOL_ERROR

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    @property
    def reason(self) -> TerminalReason:
        return TerminalReason(kind=self.reason_kind, message=self.message, code=self.code)


class MalformedEventError(RemoteProtocolError):
    """An event payload that is not a JSON object with a string ``type``."""


class InvalidEventError(RemoteProtocolError):
    """A known event type whose body does not match the protocol.

    Attributes:
        event_type: The event's ``type`` (``"TOOL_CALL_ARGS"``).
        field: The JSON path of the offending field (``"$.delta"``), or ``None``.
        detail: What is wrong with it.
    """

    def __init__(self, event_type: str, field: str | None, detail: str) -> None:
        self.event_type = event_type
        self.field = field
        self.detail = detail
        where = f" at {field}" if field else ""
        super().__init__(f"invalid {event_type} event{where}: {detail}")


class LimitExceededError(RemoteProtocolError):
    """A configured limit was passed (bytes per event, argument bytes, events per run).

    Attributes:
        limit: The limit's name (``"max_event_bytes"``).
        bound: The configured bound.
    """

    def __init__(self, limit: str, bound: int, detail: str = "") -> None:
        self.limit = limit
        self.bound = bound
        extra = f": {detail}" if detail else ""
        super().__init__(f"limit {limit}={bound} exceeded{extra}", code=limit)


class StreamEndedEarlyError(RemoteProtocolError):
    """The event stream closed before the run finished (no RUN_FINISHED or RUN_ERROR)."""


class AgentRunError(RemoteProtocolError):
    """The agent reported that the run failed (AG-UI ``RUN_ERROR``, a provider error).

    Attributes:
        retry_after: For a provider's HTTP error, its ``Retry-After`` in seconds.
    """

    reason_kind = ReasonKind.AGENT_ERROR

    def __init__(
        self, message: str, *, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class RunAllocationError(RemoteProtocolError):
    """The backend could not allocate or start a run."""

    reason_kind = ReasonKind.BACKEND_ERROR


class UnknownServerError(RunAllocationError):
    """A thread names an agent server the routing backend has no backend for
    (``code="unknown_server"``); raised before any request is made.

    Attributes:
        server: The ``ThreadKey.server`` asked for (``""``: the thread named none).
        known: The servers the routing backend knows, sorted.
    """

    def __init__(self, server: str, known: tuple[str, ...]) -> None:
        self.server = server
        self.known = known
        asked = f"unknown agent server {server!r}" if server else "the thread names no server"
        super().__init__(
            f"{asked}; the servers routed to are {', '.join(map(repr, known))}",
            code="unknown_server",
        )


class DeadlineError(RemoteProtocolError):
    """A run's stream outlived its wall-clock bound (``Limits.run_seconds``).

    The read timeout bounds silence only; a server that sends a byte a second, or
    keep-alive comments alone, is stopped by this bound.
    """

    reason_kind = ReasonKind.DEADLINE

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(
            f"the run did not end within run_seconds={seconds:g} s", code="run_seconds"
        )


class TransportError(RemoteProtocolError):
    """The connection to the agent failed."""

    reason_kind = ReasonKind.TRANSPORT_ERROR


class ConnectError(TransportError):
    """The agent's server could not be reached."""


class ReadTimeoutError(TransportError):
    """No bytes arrived within the read timeout."""


class StreamDroppedError(TransportError):
    """The connection broke in the middle of the event stream."""


class HTTPStatusError(TransportError):
    """The server answered with a non-2xx status.

    Attributes:
        status_code: The HTTP status.
        body_excerpt: The start of the response body, decoded leniently.
        retry_after: The server's ``Retry-After``, in seconds, when it gave one.
    """

    def __init__(
        self, status_code: int, body_excerpt: str, *, retry_after: float | None = None
    ) -> None:
        self.status_code = status_code
        self.body_excerpt = body_excerpt
        self.retry_after = retry_after
        excerpt = f": {body_excerpt}" if body_excerpt else ""
        super().__init__(f"HTTP {status_code}{excerpt}", code=str(status_code))


class ContentTypeError(TransportError):
    """The response is not an event stream (``Content-Type`` is not ``text/event-stream``)."""


class StoreError(ToolrelayError):
    """The durable store failed; a turn that meets it ends ``failed`` with :attr:`reason`
    (``store_error``). Whatever the store had committed before stays committed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reason = TerminalReason(kind=ReasonKind.STORE_ERROR, message=message)


class StoreUnavailableError(StoreError):
    """The store cannot take the write or read now: locked past its timeout, the disk
    full, the file read-only, or the I/O failed."""


class StoreCorruptError(StoreError):
    """The file is not a toolrelay store (another application's database, not a
    database at all) or it is damaged."""


class StoreVersionError(StoreError):
    """The store was written by a newer toolrelay: its schema version is higher than
    this one knows, so it is not touched."""


class StaleClaimError(StoreError):
    """A write carried a claim (its fencing token) that is no longer the turn's: another
    worker took the turn over. The writer must stop working on that turn."""
