"""One user turn on one thread: what the embedding code holds of it.

A :class:`Turn` is read (its processor's state, its slice of the conversation),
cancelled, approved, denied and awaited; its task is its
:class:`~toolrelay._runtime._driver.TurnDriver`'s (``runtime/_driver.py``), which the
engine starts through :meth:`Turn.drive`.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio
import anyio.lowlevel
from msgspec import UNSET

from toolrelay._core import (
    Activity,
    ChatMessage,
    Conversation,
    EventProcessor,
    ProtocolViolation,
    ThreadKey,
    ToolCallBatch,
    ToolCallInfo,
    ToolRegistry,
)
from toolrelay._machines import RunStatus, ToolCallStatus
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay._runtime._approvals import approval_interrupts, find_awaiting
from toolrelay._runtime._driver import TurnDriver, snapshot_of
from toolrelay._runtime._durable import ThreadLog
from toolrelay._runtime._host import TurnHost
from toolrelay._runtime._views import StateChanged, TurnSnapshot, TurnStatistics
from toolrelay.backends._base import using_run_settings
from toolrelay.protocol import Context, Interrupt, ResumeEntry
from toolrelay.store import LiveTurn

__all__ = ("Spawn", "TaskFunction", "Turn")

#: What a turn's task runs: its driver's ``run``, given what it calls when it is over.
TaskFunction = Callable[[Callable[[], None]], Coroutine[Any, Any, None]]

#: How the engine starts a turn's task: ``spawn(function, over, name, context)`` runs
#: ``function(over)`` as a task named ``name`` in ``context`` (or a copy of it), and
#: returns the task on asyncio (see ``runtime/_tasks.py``).
Spawn = Callable[
    [TaskFunction, Callable[[], None], str, contextvars.Context],
    "asyncio.Task[None] | None",
]


class Turn:
    """One user turn on one thread: the user's message (or answers to the agent's
    interrupts) and every run until the answer.

    Created by :meth:`Engine.start_turn`; read it at any time, :meth:`cancel` it, and
    ``await`` :meth:`wait_finished`. Its engine-facing methods (:meth:`drive`,
    :meth:`end`, :meth:`publish_state`, :meth:`close_slice`, :meth:`shift_slice`) are
    the engine's side of their contract (``runtime/_host.py``), not for user code.
    """

    __slots__ = (
        "_done",
        "_driver",
        "_host",
        "_processor",
        "_start",
        "_stop",
        "_task_over",
        "key",
        "turn_id",
    )

    def __init__(
        self,
        host: TurnHost[Turn],
        key: ThreadKey,
        processor: EventProcessor,
        tools: ToolRegistry,
        start: int,
        *,
        turn_id: str,
        log: ThreadLog | None = None,
        recovered: LiveTurn | None = None,
        tool_context: object = None,
        state: Any = UNSET,
    ) -> None:
        self._host = host
        self.key = key
        #: The turn's id in the thread's log.
        self.turn_id = turn_id
        self._processor = processor
        # What the turn's task does, with its state (the turn reads the processor);
        # let go when the task is done (see _task_ended).
        self._driver: TurnDriver | None = TurnDriver(
            host,
            key,
            processor,
            tools,
            turn_id=turn_id,
            log=log,
            recovered=recovered,
            tool_context=tool_context,
            state=state,
        )
        # Whether the turn's task is done; the event is made by the first
        # wait_finished that has to wait (most turns are never waited for while live).
        self._task_over = False
        self._done: anyio.Event | None = None
        # This turn's slice of the thread's conversation (from its user message, if it
        # has one; the next turn on the thread closes the slice).
        self._start = start
        self._stop: int | None = None

    # -- reading -------------------------------------------------------------------

    @property
    def status(self) -> RunStatus:
        return self._processor.status

    @property
    def reason(self) -> TerminalReason | None:
        """Why the turn ended; ``None`` while it runs."""
        return self._processor.reason

    @property
    def depth(self) -> int:
        return self._processor.depth

    @property
    def activity(self) -> Activity:
        return self._processor.activity

    @property
    def run_id(self) -> str | None:
        return self._processor.run_id

    @property
    def conversation(self) -> Conversation:
        return self._processor.conversation

    @property
    def context(self) -> Sequence[Context]:
        """The ``context`` every run of the turn carries (its own, or the engine's)."""
        return self._processor.context

    @property
    def forwarded_props(self) -> Any:
        """The ``forwardedProps`` every run of the turn carries (its own, or the
        engine's; ``None``: none)."""
        return self._processor.forwarded_props

    @property
    def messages(self) -> list[ChatMessage]:
        """This turn's part of the thread's conversation: from its user message (or,
        for a turn that only answers interrupts, from what it added) up to where the
        next turn on the thread began. A copy."""
        return self._processor.conversation.messages[self._start : self._stop]

    @property
    def tool_calls(self) -> tuple[ToolCallInfo, ...]:
        """The calls of the run in flight (empty once committed, finished or aborted)."""
        return self._processor.tool_calls

    @property
    def abandoned_calls(self) -> tuple[ToolCallInfo, ...]:
        """Calls an abort or a broken run left unexecuted."""
        return tuple(self._processor.abandoned)

    @property
    def violations(self) -> tuple[ProtocolViolation, ...]:
        return tuple(self._processor.violations)

    @property
    def interrupts(self) -> tuple[Interrupt, ...]:
        """What the agent asks, once the turn ended ``interrupted`` (AG-UI ``interrupt``
        outcome); empty otherwise. Answer with ``Engine.start_turn(key, resume=[...])``,
        one ``ResumeEntry`` per interrupt, by ``Interrupt.id``."""
        return self._processor.interrupts

    @property
    def approvals(self) -> tuple[Interrupt, ...]:
        """The tool calls waiting for the embedding code's decision (tools declared
        with ``needs_approval``), as client-side interrupts: ``id`` and
        ``tool_call_id`` are the call's id, ``reason`` is ``"tool_approval"``,
        ``metadata`` holds the tool's name and arguments. Answer each with
        :meth:`approve` or :meth:`deny`; the turn waits (``executing_tools``, activity
        ``awaiting_approval``) until every one is answered, or it is cancelled."""
        return approval_interrupts(self._processor.awaiting_approval)

    def approve(self, call_id: str) -> None:
        """Approve a call that awaits approval: it runs, and the model sees its result.

        Raises:
            ApprovalError: No call of this turn awaits approval under that id
                (decided already, or the turn ended); nothing changed.
        """
        driver = self._driver
        call = find_awaiting(self._processor.awaiting_approval if driver else (), call_id)
        assert driver is not None
        driver.approve(call)

    def deny(self, call_id: str, message: str = "The user denied this tool call.") -> None:
        """Deny a call that awaits approval: it never runs, it ends ``failed`` and the
        model receives ``message`` as its error.

        Raises:
            ApprovalError: No call of this turn awaits approval under that id
                (decided already, or the turn ended); nothing changed.
        """
        driver = self._driver
        call = find_awaiting(self._processor.awaiting_approval if driver else (), call_id)
        assert driver is not None
        driver.deny(call, message)

    @property
    def resume(self) -> tuple[ResumeEntry, ...]:
        """The answers to earlier interrupts that this turn's first run carried."""
        return self._processor.resume

    @property
    def finished(self) -> bool:
        """Whether the turn reached a final state."""
        return self._processor.status.is_final

    def snapshot(self) -> TurnSnapshot:
        return snapshot_of(self.key, self._processor)

    def statistics(self) -> TurnStatistics:
        counts: dict[ToolCallStatus, int] = dict.fromkeys(ToolCallStatus, 0)
        for message in self.messages:
            if isinstance(message, ToolCallBatch):
                for call in message.calls:
                    counts[call.status] += 1
        for call in (*self._processor.tool_calls, *self._processor.abandoned):
            counts[call.status] += 1
        p = self._processor
        return TurnStatistics(
            runs=p.run_count,
            depth=p.depth,
            tool_calls=counts,
            violations=len(p.violations) + p.violations_dropped,
            status=p.status,
        )

    # -- acting ---------------------------------------------------------------------

    def cancel(self, message: str = "cancelled by the user") -> bool:
        """End the turn ``cancelled`` now and stop its work (promise 4).

        Returns:
            ``False`` when the turn had already ended (nothing changes).
        """
        return self.end(TerminalReason(kind=ReasonKind.CANCELLED, message=message))

    async def wait_finished(self) -> TerminalReason:
        """Wait until the turn's task is done; returns why the turn ended."""
        if self._task_over:
            await anyio.lowlevel.checkpoint()
        else:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()
        reason = self._processor.reason
        assert reason is not None
        return reason

    def __repr__(self) -> str:
        return f"Turn(key={self.key}, status={self.status.value}, depth={self.depth})"

    # -- what the engine asks of a turn ----------------------------------------------
    # The engine's side of the contract in runtime/_host.py: public so that the engine
    # reads no private member, not user API.

    def end(self, reason: TerminalReason) -> bool:
        """Engine-facing: end the turn from outside its task (cancel, supersede, the
        engine closing), with ``reason``.

        A turn that already ended but whose task still works (a store failure ended
        it while its tools ran) has that work stopped too; ``False`` says it had ended.
        """
        driver = self._driver
        return driver.end(reason) if driver is not None else False

    def close_slice(self, stop: int) -> None:
        """Engine-facing: the next turn on the thread begins at ``stop``, where this
        turn's messages end."""
        self._stop = stop

    def shift_slice(self, by: int) -> None:
        """Engine-facing: ``by`` messages were put before this turn's (its thread's
        history, loaded from the store)."""
        self._start += by
        if self._stop is not None:
            self._stop += by

    def publish_state(self, *, force: bool = False) -> None:
        """Engine-facing (and the driver's): tell subscribers the turn's state, unless
        it is the one they were last told (``force``: a newly focused view wants it
        again)."""
        driver = self._driver
        if driver is not None:
            driver.publish_state(force=force)
        elif force and self._host.notifications:
            # The task is done: the final state was told as it ended, and no longer
            # changes, so only a newly focused view is told it again.
            self._host.notifications.publish(StateChanged(self.snapshot()))

    def drive(self, spawn: Spawn, name: str) -> asyncio.Task[None] | None:
        """Engine-facing: start the turn's task through ``spawn`` (once); it ends with
        the turn in a final state. Returns what ``spawn`` returns (the task, on
        asyncio).

        The task runs the driver's own coroutine (no frame of the turn's stays
        suspended on it while the turn lives), in a context where the turn's run
        settings are set: a copy of this one, made here, so nothing is held to reset
        them, and the caller's context never sees them.
        """
        driver = self._driver
        assert driver is not None, "a turn's task is started once"
        context = contextvars.copy_context()
        context.run(using_run_settings(self._host.run_settings(self.key)).__enter__)
        return spawn(driver.run, self._task_ended, name, context)

    def _task_ended(self) -> None:
        """The task's last step: the engine is told, then the turn's waiters wake.

        The driver is let go (its scopes, its run handle, its tool and approval state):
        a finished turn its caller keeps holds its processor, which has every answer
        the turn gives from now on, and nothing the cycle collector would walk in vain.
        """
        driver = self._driver
        assert driver is not None
        self._host.finished(self, driver.handle)
        self._driver = None
        self._task_over = True
        done, self._done = self._done, None
        if done is not None:
            done.set()  # its waiters hold it; the turn need not (three tracked objects)
