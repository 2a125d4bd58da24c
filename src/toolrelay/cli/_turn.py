"""One turn run with an engine, printed live, and cancelled by Ctrl-C (``run`` and
``demo``)."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.abc

from toolrelay._core import Limits, ThreadKey, ToolRegistry
from toolrelay._runtime import StateChanged, Turn
from toolrelay.backends._base import AgentBackend
from toolrelay.cli._live import LivePrinter

__all__ = ("TurnOutcome", "run_turn")


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """A finished turn, how long it took, and whether Ctrl-C (SIGINT) cancelled it."""

    turn: Turn
    seconds: float
    ctrl_c: bool = False


#: What the model is told when the CLI denies a call that needs approval.
_CLI_DENIAL = (
    "This tool needs a person's approval, and the toolrelay command line cannot ask "
    "for it: the call was denied."
)


async def run_turn(
    backend: AgentBackend,
    tools: ToolRegistry,
    message: str,
    *,
    thread_id: str,
    max_depth: int,
    out: TextIO | None,
    forwarded_props: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    ctrl_c: bool = False,
) -> TurnOutcome:
    """Run one turn with an :class:`~toolrelay.Engine`; print it live to ``out``.

    With ``ctrl_c`` (the main thread only), the first SIGINT cancels the turn, which
    ends ``cancelled`` and is returned (``TurnOutcome.ctrl_c``) for its summary; a
    second one interrupts as Python does (the handler is restored after the first).
    """
    from toolrelay._runtime import Engine

    key = ThreadKey(thread_id)
    printer = LivePrinter(out) if out is not None else None
    started = time.perf_counter()
    async with Engine(
        backend,
        tools=tools,
        max_depth=max_depth,
        forwarded_props=dict(forwarded_props or {}),
        limits=limits,
    ) as engine:
        notifications = engine.subscribe(key=key, events=printer is not None)
        turn = engine.start_turn(key, message)
        async with notifications, _cancelled_by_ctrl_c(turn, ctrl_c) as pressed:
            async for notification in notifications:
                if printer is not None:
                    printer.handle(notification)
                if isinstance(notification, StateChanged) and notification.snapshot.status.is_final:
                    break
                for asked in turn.approvals:
                    # No one to ask in a command-line run: a tool that needs approval is
                    # denied (the model is told why), never left waiting.
                    turn.deny(asked.id, _CLI_DENIAL)
        await turn.wait_finished()
    if printer is not None:
        printer.finish()
    return TurnOutcome(turn, time.perf_counter() - started, bool(pressed))


@contextlib.asynccontextmanager
async def _cancelled_by_ctrl_c(turn: Turn, enabled: bool) -> AsyncIterator[list[bool]]:
    """Within it (when ``enabled``), the first SIGINT cancels ``turn``; yields a list
    that holds ``True`` once it did. An error of the body comes out as itself, not in
    an exception group."""
    pressed: list[bool] = []
    if not enabled or sys.platform == "win32":  # no signal receiver there: Ctrl-C
        yield pressed  # raises KeyboardInterrupt, and the command exits 130 all the same
        return

    async def watch(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                if turn.cancel("cancelled by Ctrl-C (SIGINT)"):
                    pressed.append(True)
                return  # the default handler is back: a second Ctrl-C interrupts

    try:
        async with anyio.create_task_group() as watchers:
            await watchers.start(watch)
            yield pressed
            watchers.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
