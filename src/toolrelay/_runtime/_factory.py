"""How the engine makes a turn: its place in the thread, its first records, its processor.

A new turn on a thread supersedes the thread's running turn, takes the thread's
conversation (the engine's, or ``history`` for a thread it does not hold), appends the
user's message and, with a store, adds the turn's first records to the thread's log. A
turn a crash left live is made again from what the store has of it (promise 9). Either
way its :class:`~toolrelay.sansio.EventProcessor` is set up from the engine's settings
as they are at that moment. Starting the turn's task is the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from msgspec import UNSET

from toolrelay._core import (
    ChatMessage,
    Conversation,
    EventProcessor,
    Limits,
    ThreadKey,
    ToolRegistry,
)
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay._runtime._durable import ThreadLog
from toolrelay._runtime._host import TurnHost
from toolrelay._runtime._threads import ThreadTable
from toolrelay._runtime._turn import Turn
from toolrelay.protocol import Context, ResumeEntry, UserMessage
from toolrelay.store import LiveTurn, MessageSaved, TurnStarted, message_to_record

__all__ = ("TurnFactory", "TurnSettings")


class TurnSettings(Protocol):
    """The public settings of an :class:`Engine <toolrelay.Engine>` a new turn
    is made with, read as each turn is made (so a change reaches the next turn)."""

    @property
    def tools(self) -> ToolRegistry: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def max_repeated_calls(self) -> int | None: ...
    @property
    def limits(self) -> Limits: ...


class TurnFactory:
    """Makes the turns of one engine (see the module docstring).

    Args:
        settings: The engine, for the settings it lets its user change.
        threads: What the engine holds of its threads.
        host: What the engine's turns share.
        context: ``RunAgentInput.context`` for every run.
        forwarded_props: ``RunAgentInput.forwardedProps`` for every run.
        id_factory: Makes message and turn ids.
        include_reasoning: Whether continuation runs carry the agent's reasoning.
        tool_context: The ``deps`` of a tool context when the turn gives none.
    """

    __slots__ = (
        "_context",
        "_forwarded_props",
        "_host",
        "_id_factory",
        "_include_reasoning",
        "_settings",
        "_threads",
        "_tool_context",
    )

    def __init__(
        self,
        settings: TurnSettings,
        threads: ThreadTable[Turn],
        host: TurnHost[Turn],
        *,
        context: tuple[Context, ...],
        forwarded_props: Any,
        id_factory: Callable[[], str],
        include_reasoning: bool,
        tool_context: Any,
    ) -> None:
        self._settings = settings
        self._threads = threads
        self._host = host
        self._context = context
        self._forwarded_props = forwarded_props
        self._id_factory = id_factory
        self._include_reasoning = include_reasoning
        self._tool_context = tool_context

    def new(
        self,
        key: ThreadKey,
        message: str | UserMessage | None,
        *,
        resume: tuple[ResumeEntry, ...] = (),
        history: Sequence[ChatMessage] | None = None,
        tools: ToolRegistry | None = None,
        owner: str | None = None,
        retry_of: str | None = None,
        tool_context: Any = None,
        context: tuple[Context, ...] | None = None,
        forwarded_props: Any = None,
        state: Any = UNSET,
    ) -> Turn:
        """A new turn on ``key``, whose arguments were checked (see
        :meth:`Engine.start_turn <toolrelay.Engine.start_turn>`); the thread's
        running turn, if any, is superseded. ``context`` and ``forwarded_props`` are
        the turn's own, in place of the engine's (``None``: the engine's)."""
        threads = self._threads
        previous = threads.turns.get(key)
        open_interrupts = threads.open_interrupts(key)
        if open_interrupts is not None:
            threads.interrupts[key] = open_interrupts
        if previous is not None:
            previous.end(
                TerminalReason(
                    kind=ReasonKind.SUPERSEDED, message="a newer turn on the thread took over"
                ),
            )
        conversation, log = threads.use(key, history, owner)
        start = len(conversation.messages)
        if previous is not None:
            previous.close_slice(start)
        if isinstance(message, str):
            message = UserMessage(id=self._id_factory(), content=message)
        if message is not None:
            conversation.append(message)
        turn_id = self._id_factory()
        if log is not None:
            log.add(
                TurnStarted(
                    turn_id=turn_id,
                    resume=resume,
                    retry_of=retry_of,
                    context=context,
                    forwarded_props=forwarded_props,
                )
            )
            if message is not None:
                log.add(MessageSaved(turn_id=turn_id, message=message_to_record(message)))
        registry = (tools if tools is not None else self._settings.tools).freeze()
        turn = Turn(
            self._host,
            key,
            self._processor(conversation, registry, resume, context, forwarded_props),
            registry,
            start,
            turn_id=turn_id,
            log=log,
            tool_context=self._tool_context if tool_context is None else tool_context,
            state=state,
        )
        if log is not None and not log.loaded:
            log.waiting.append(turn)
        return turn

    def resumed(
        self, key: ThreadKey, conversation: Conversation, log: ThreadLog, live: LiveTurn
    ) -> Turn:
        """The turn ``live`` again, on the ``conversation`` and ``log`` the store gave
        back: it resumes where its log says."""
        registry = self._settings.tools.freeze()
        return Turn(
            self._host,
            key,
            self._processor(
                conversation,
                registry,
                live.resume if live.tools is None else (),
                live.context,
                live.forwarded_props,
            ),
            registry,
            live.first_message,
            turn_id=live.turn_id,
            log=log,
            recovered=live,
            tool_context=self._tool_context,
        )

    def _processor(
        self,
        conversation: Conversation,
        registry: ToolRegistry,
        resume: Sequence[ResumeEntry],
        context: tuple[Context, ...] | None,
        forwarded_props: Any,
    ) -> EventProcessor:
        settings = self._settings
        return EventProcessor(
            conversation,
            tools=registry.definitions(),
            max_depth=settings.max_depth,
            max_repeats=settings.max_repeated_calls,
            approval_tools=registry.needing_approval,
            limits=settings.limits,
            context=self._context if context is None else context,
            forwarded_props=self._forwarded_props if forwarded_props is None else forwarded_props,
            id_factory=self._id_factory,
            include_reasoning=self._include_reasoning,
            resume=resume,
        )
