"""Retrying the start of a run after a transient failure (issue 15).

Theory of operation
-------------------
A run is retried only while it has not started: the request failed before a 2xx
response came (HTTP 429 or 503, the connection reset or closed before the answer). A
run whose response was accepted is never retried, whatever happens to its stream: its
events may already be in the conversation, and picking a run up again is the
resume/catch-up path, not a retry. So :func:`start_with_retries` wraps the *opening*
of a response, and the HTTP backends call it before they yield a single event.

Waits grow exponentially from :attr:`RetryPolicy.base_delay` (with jitter), or follow
the server's ``Retry-After`` (seconds or an HTTP date). The policy bounds both the
number of retries and the total time spent waiting; a ``Retry-After`` longer than the
time left is not waited for: the error is raised at once. Each retry is reported
through the engine's :class:`~toolrelay.backends.RunSettings` (observers receive a
:class:`~toolrelay.RunRetrying`) and logged on ``toolrelay.backends``.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

import anyio

from toolrelay._errors import (
    AgentRunError,
    HTTPStatusError,
    RemoteProtocolError,
    StreamDroppedError,
    TransportError,
)
from toolrelay.backends._base import RetryNotice, current_run_settings

__all__ = ("NO_RETRY", "RetryPolicy", "parse_retry_after", "start_with_retries")

_T = TypeVar("_T")

logger = logging.getLogger("toolrelay.backends")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the HTTP backends retry a run that could not start for a transient reason.

    Attributes:
        attempts: Retries after the first attempt (``0``: never retry).
        max_seconds: Total seconds spent waiting between attempts, at most.
        base_delay: The first wait without ``Retry-After``; each next one doubles
            (with up to 25 % random jitter), up to ``max_delay``.
        max_delay: The longest single wait, ``Retry-After`` included (a server asking
            for longer gets no retry: its error is raised).
        statuses: The HTTP statuses that are retried (the connection reset or closed
            before a response always is).
    """

    attempts: int = 3
    max_seconds: float = 30.0
    base_delay: float = 0.5
    max_delay: float = 10.0
    statuses: frozenset[int] = field(default=frozenset({429, 503}))

    def __post_init__(self) -> None:
        if self.attempts < 0 or self.max_seconds < 0 or self.base_delay < 0:
            raise ValueError("RetryPolicy: attempts and seconds must be >= 0")

    def delay(self, error: RemoteProtocolError, attempt: int, waited: float) -> float | None:
        """Seconds to wait before retrying after ``error`` on ``attempt`` (1-based),
        having waited ``waited`` seconds so far; ``None``: do not retry."""
        if attempt > self.attempts or not self.retries(error):
            return None
        retry_after = (
            error.retry_after if isinstance(error, HTTPStatusError | AgentRunError) else None
        )
        if retry_after is not None:
            delay = retry_after
        else:
            delay = self.base_delay * 2 ** (attempt - 1)
            delay = min(delay * (1 + random.random() / 4), self.max_delay)
        if delay > self.max_delay or waited + delay > self.max_seconds:
            return None
        return delay

    def retries(self, error: RemoteProtocolError) -> bool:
        """Whether ``error``, raised before a response was accepted, is transient."""
        if isinstance(error, HTTPStatusError):
            return error.status_code in self.statuses
        if isinstance(error, AgentRunError):  # a provider's HTTP error: code is the status
            return error.code is not None and error.code in {str(s) for s in self.statuses}
        # A reset or a close before the answer; a write that failed (reset while
        # sending). A refused connection is not transient enough to wait for.
        return isinstance(error, StreamDroppedError) or (
            type(error) is TransportError and error.code == "transport_error"
        )


#: A policy that never retries.
NO_RETRY: Final = RetryPolicy(attempts=0)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds from now (delta-seconds or an HTTP date); ``None``
    when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if seconds == seconds else None  # NaN is unreadable


async def start_with_retries(policy: RetryPolicy, start: Callable[[], Awaitable[_T]]) -> _T:
    """``await start()``, again after each transient failure, as ``policy`` allows.

    ``start`` must leave nothing open when it raises. Each retry is reported to the
    engine (:attr:`RunSettings.on_retry`) before the wait.

    Raises:
        RemoteProtocolError: The last error, when it is not transient or the policy's
            attempts or time are spent.
    """
    attempt = 0
    waited = 0.0
    while True:
        attempt += 1
        try:
            return await start()
        except RemoteProtocolError as exc:
            delay = policy.delay(exc, attempt, waited)
            if delay is None:
                raise
            notice = RetryNotice(attempt=attempt, delay=delay, reason=exc.message, code=exc.code)
        logger.info("run could not start (%s); retry %d in %.2f s", notice.reason, attempt, delay)
        settings = current_run_settings()
        if settings is not None and settings.on_retry is not None:
            settings.on_retry(notice)
        await anyio.sleep(delay)
        waited += delay
