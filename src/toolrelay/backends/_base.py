"""The backend seam: where a run's events come from.

An :class:`AgentBackend` starts a run for a thread with a ``RunAgentInput`` and
yields its events as an async iterator inside an async context manager, so that the
stream is always closed (the engine leaves the ``async with`` on RUN_FINISHED, on
cancellation and on error alike). A backend may also allocate runs on the server
first (the reference design's ``createRun(room, thread)``); AG-UI servers that do
not allocate runs return ``None`` and the client chooses the run id.

Backends raise :class:`~toolrelay.errors.RemoteProtocolError` subclasses for
everything the agent or the wire does wrong; the engine turns them into the
terminal reason of the turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from toolrelay.core import ThreadKey
from toolrelay.protocol import Event, RunAgentInput, UnknownEvent

__all__ = ("AgentBackend", "EventStream", "ThreadKey")


EventStream = AsyncIterator[Event | UnknownEvent]
"""The decoded events of one run, in order."""


@runtime_checkable
class AgentBackend(Protocol):
    """Something that runs an agent: an AG-UI server, a provider, a scripted agent."""

    async def allocate_run(self, key: ThreadKey) -> str | None:
        """Ask the server for a run id before starting a run.

        Returns:
            The server's run id, or ``None`` when the server does not allocate runs
            (the engine then generates one).

        Raises:
            RunAllocationError: The server refused or failed.
        """
        ...

    def run(
        self, key: ThreadKey, run_input: RunAgentInput
    ) -> AbstractAsyncContextManager[EventStream]:
        """Start the run and give its event stream; leaving the context closes it."""
        ...
