"""The tool-round limit of the server loop (reference 004's ``max_tool_rounds``).

A *tool round* is one batch of tool calls executed (server tools and client tools
alike). :class:`RoundLimit` wraps the model's backend: before each run it counts the
rounds the turn already made, from the run's input (every assistant message with
tool calls after the turn's user message is one), and when the limit is reached it
does not call the model: it answers with an empty run, so the engine ends the turn
``completed``, and it tells the server why (``max_tool_rounds``, or ``tool_use``
when continuation is switched off), which the store then writes on the turn's end.

Counting from the input, not in memory, keeps the limit right for a turn resumed
after a restart.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio

from toolrelay._core import ThreadKey
from toolrelay.backends import EventStream
from toolrelay.backends._base import AgentBackend
from toolrelay.protocol import (
    AssistantMessage,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    UserMessage,
)
from toolrelay.server._feed import StopReason

__all__ = (
    "DEFAULT_MAX_TOOL_ROUNDS",
    "MAX_TOOL_ROUNDS_ENV",
    "RoundLimit",
    "max_tool_rounds_from_env",
    "rounds_in",
)

#: The environment variable that sets ``max_tool_rounds`` when it is not given.
MAX_TOOL_ROUNDS_ENV = "TOOLRELAY_MAX_TOOL_ROUNDS"
#: The default tool-round limit (reference 004).
DEFAULT_MAX_TOOL_ROUNDS = 5


def max_tool_rounds_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``TOOLRELAY_MAX_TOOL_ROUNDS``, or the default (5).

    Raises:
        ValueError: The variable is set to something other than a positive integer.
    """
    value = (os.environ if environ is None else environ).get(MAX_TOOL_ROUNDS_ENV)
    if value is None or not value.strip():
        return DEFAULT_MAX_TOOL_ROUNDS
    try:
        rounds = int(value)
    except ValueError:
        raise ValueError(f"{MAX_TOOL_ROUNDS_ENV}={value!r}: expected a positive integer") from None
    if rounds < 1:
        raise ValueError(f"{MAX_TOOL_ROUNDS_ENV}={value!r}: expected a positive integer")
    return rounds


def rounds_in(run_input: RunAgentInput) -> int:
    """Tool rounds the turn has made: assistant messages with tool calls after the
    last user message."""
    rounds = 0
    for message in reversed(run_input.messages):
        if isinstance(message, UserMessage):
            break
        if isinstance(message, AssistantMessage) and message.tool_calls:
            rounds += 1
    return rounds


class RoundLimit:
    """An :class:`~toolrelay.backends.AgentBackend` that stops the loop at the limit.

    Args:
        backend: The model.
        max_tool_rounds: Rounds a turn may make; the model is not called after them.
        continuation: ``False``: stop after the first round (stop reason ``tool_use``).
        on_stop: Called with the thread, the stop reason and a sentence, when a turn is
            stopped.
    """

    def __init__(
        self,
        backend: AgentBackend,
        *,
        max_tool_rounds: int,
        continuation: bool,
        on_stop: Callable[[ThreadKey, str, str], None],
    ) -> None:
        self.backend = backend
        self.max_tool_rounds = max_tool_rounds
        self.continuation = continuation
        self._on_stop = on_stop
        # The engine asks a backend whether it wants reasoning sent back.
        self.takes_reasoning = getattr(backend, "takes_reasoning", False) is True

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return await self.backend.allocate_run(key)

    def run(
        self, key: ThreadKey, run_input: RunAgentInput
    ) -> AbstractAsyncContextManager[EventStream]:
        rounds = rounds_in(run_input)
        if not self.continuation and rounds >= 1:
            self._on_stop(key, StopReason.TOOL_USE, "continuation is switched off")
            return _stopped(run_input)
        if rounds >= self.max_tool_rounds:
            self._on_stop(
                key,
                StopReason.MAX_TOOL_ROUNDS,
                f"the turn reached max_tool_rounds ({self.max_tool_rounds} tool rounds)",
            )
            return _stopped(run_input)
        return self.backend.run(key, run_input)

    def __repr__(self) -> str:
        return f"RoundLimit({self.backend!r}, max_tool_rounds={self.max_tool_rounds})"


@asynccontextmanager
async def _stopped(run_input: RunAgentInput) -> AsyncIterator[EventStream]:
    async def events() -> EventStream:
        await anyio.lowlevel.checkpoint()
        yield RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)
        yield RunFinishedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)

    stream = events()
    try:
        yield stream
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
