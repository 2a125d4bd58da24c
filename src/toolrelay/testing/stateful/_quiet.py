"""When the machine's engine counts as quiet, and when it is stuck instead (see the
package docstring: "Quiet means")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay._machines import RunStatus, ToolCallStatus
from toolrelay._runtime import Notification
from toolrelay.testing.stateful._doubles import Hold, PlanAgent, RunRecord, TurnModel
from toolrelay.testing.stateful._plans import PROBE_PREFIX, T

__all__ = ("Quiet", "Stall")


class Stall:
    """Tells a stuck engine from a busy one, without trusting the clock where it can.

    Every ready task runs once per event-loop iteration. Without clock- or thread-bound
    work (a tool waiting for its timeout, the user's tools), ``iterations`` iterations
    in which nothing observable moves (``progress``) mean nothing ever will. With such
    work it polls more slowly (leaving the CPU to worker threads) and judges by the
    clock (``timeout``), except while the user's tools run, which only the machine's
    ``quiet_timeout`` bounds.
    """

    __slots__ = (
        "_idle",
        "_iterations",
        "_last",
        "_moved",
        "_progress",
        "_timed_work",
        "_timeout",
        "_user_tools_running",
    )

    def __init__(
        self,
        progress: Callable[[], object],
        timed_work: Callable[[], bool],
        user_tools_running: Callable[[], bool],
        *,
        iterations: int,
        timeout: float,
    ) -> None:
        self._progress = progress
        self._timed_work = timed_work
        self._user_tools_running = user_tools_running
        self._iterations = iterations
        self._timeout = timeout
        self._last = progress()
        self._moved = anyio.current_time()
        self._idle = 0

    def pause(self) -> float:
        return 0.001 if self._idle > 200 and self._timed_work() else 0

    def check(self) -> bool:
        """Whether the engine stalled (call once per iteration)."""
        progress = self._progress()
        if progress != self._last:
            self._last, self._moved, self._idle = progress, anyio.current_time(), 0
            return False
        self._idle += 1
        if not self._timed_work():
            return self._idle > self._iterations
        if self._user_tools_running():
            return False
        return anyio.current_time() - self._moved > self._timeout


class Quiet:
    """Waiting until the engine is quiet, a part of
    :class:`~toolrelay.testing.stateful._host.MachineBase` (which sets the state below)."""

    quiet_timeout: ClassVar[float]
    stall_timeout: ClassVar[float]
    stall_iterations: ClassVar[int]
    agent: PlanAgent
    _models: list[TurnModel]
    _latest: dict[str, TurnModel]
    _records: dict[str, RunRecord]
    _tool_holds: dict[str, Hold]
    _stream_holds: dict[str, Hold]
    _executed: dict[str, int]
    _all_sub: ObjectReceiveStream[Notification] | None
    _live: tuple[str, ...]
    _interrupted: tuple[str, ...]
    _held: tuple[str, ...]
    _awaiting: tuple[tuple[str, str], ...]

    def _stall(self) -> Stall:
        return Stall(
            self._progress,
            self._timed_work,
            self._user_tools_running,
            iterations=self.stall_iterations,
            timeout=self.stall_timeout,
        )

    def _parked(self, model: TurnModel) -> bool:
        turn = model.turn
        assert turn is not None
        status = turn.status
        if status is RunStatus.running:
            record = self._records.get(turn.run_id or "")
            return record is not None and record.model is model and record.parked()
        if status is RunStatus.executing_tools:
            # Parked: every running call waits on a gate, every other open call waits
            # for the decide rule (approval), and something waits.
            executing = [c for c in turn.tool_calls if c.status is ToolCallStatus.executing]
            awaiting = [c for c in turn.tool_calls if c.status is ToolCallStatus.awaiting_approval]
            return bool(executing or awaiting) and all(
                c.id in self._tool_holds and self._tool_holds[c.id].parked for c in executing
            )
        return False

    def _quiet(self) -> bool:
        for model in self._models:
            assert model.turn is not None
            if model.turn.finished:
                if not model.done:
                    return False
            elif not self._parked(model):
                return False
        return True

    def _progress(self) -> tuple[object, ...]:
        """Everything observable that moves while the engine works (for stall detection)."""
        buffered = 0
        if isinstance(self._all_sub, MemoryObjectReceiveStream):
            buffered = self._all_sub.statistics().current_buffer_used
        return (
            buffered,  # every event, state change and tool result is published
            len(self._executed),
            self.agent.allocation_count,
            self.agent.run_count,
            self.agent.closed_streams,
            sum(
                hold.waiting for hold in (*self._stream_holds.values(), *self._tool_holds.values())
            ),
            tuple((m.turn.status if m.turn else None, m.done) for m in self._models),
        )

    def _timed_work(self) -> bool:
        """Whether a tool that depends on the clock or a worker thread runs: one of the
        user's tools, or ``probe_timeout`` (waiting for its timeout)."""
        return any(
            not call.status.is_final
            and (
                (call.name in ("probe_timeout", "probe_stuck") and call.id in self._executed)
                or not call.name.startswith(PROBE_PREFIX)
            )
            for model in self._models
            if model.turn is not None and model.turn.status is RunStatus.executing_tools
            for call in model.turn.tool_calls
        )

    def _user_tools_running(self) -> bool:
        return any(
            not call.status.is_final and not call.name.startswith(PROBE_PREFIX)
            for model in self._models
            if model.turn is not None
            for call in model.turn.tool_calls
        )

    def _stuck(self) -> list[str]:
        """The turns still in flight, for failure messages."""
        return [
            f"{m.label}: {m.turn!r} activity={m.turn.activity} parked={self._parked(m)} "
            f"task_done={m.done}"
            for m in self._models
            if m.turn is not None and not (m.turn.finished and m.done)
        ]

    async def _settle(self) -> None:
        """Wait until quiet: every live turn parked, every finished turn's task done.

        Polling, not synchronisation: correctness never depends on how long it sleeps.
        A stall (see :class:`Stall`) or :attr:`quiet_timeout` is a stuck turn: a failure.
        """
        stall = self._stall()
        try:
            with anyio.fail_after(self.quiet_timeout):
                while not self._quiet():
                    await anyio.sleep(stall.pause())
                    if stall.check():
                        raise AssertionError(
                            "promises 1/4: nothing moves and the engine is not quiet; "
                            f"stuck: {self._stuck()}"
                        )
        except TimeoutError:
            raise AssertionError(
                f"promises 1/4: the engine did not become quiet within {self.quiet_timeout} s; "
                f"stuck: {self._stuck()}"
            ) from None
        self._live = tuple(
            m.key for m in self._models if m.turn is not None and not m.turn.finished
        )
        self._interrupted = tuple(
            key
            for key, m in sorted(self._latest.items())
            if m.turn is not None and m.turn.status is RunStatus.interrupted
        )
        self._held = tuple(
            name
            for name, hold in sorted({**self._stream_holds, **self._tool_holds}.items())
            if hold.parked
        )
        self._awaiting = tuple(
            (m.key, approval.id)
            for m in self._models
            if m.turn is not None and not m.turn.finished
            for approval in m.turn.approvals
        )

    async def _bounded(self, func: Callable[[], Awaitable[T]], what: str) -> T:
        """Await ``func()``; if it stalls (nothing observable moves), cancel it and fail
        (promise 4: user actions return promptly)."""
        results: list[T] = []
        errors: list[Exception] = []
        stalled = False

        async def watchdog(scope: anyio.CancelScope) -> None:
            nonlocal stalled
            stall = self._stall()
            while True:
                await anyio.sleep(stall.pause())
                if stall.check():
                    break
            stalled = True
            scope.cancel()

        async with anyio.create_task_group() as group:
            with anyio.CancelScope() as scope:
                group.start_soon(watchdog, scope)
                try:
                    results.append(await func())
                except Exception as exc:
                    errors.append(exc)
            group.cancel_scope.cancel()
        if errors:
            raise errors[0]
        if stalled or not results:
            raise AssertionError(
                f"promise 4: {what} did not return and nothing moves; stuck: {self._stuck()}"
            )
        return results[0]
