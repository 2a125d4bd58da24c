"""The processor's state: one slotted object holding everything a turn tracks, its
per-run reset, and the read-only views of it; the constants the parts share.

Every field is declared here once (``__slots__``), given its first value in
``__init__`` and, for the per-run ones, its value at each run's start in
``_reset_run``. The parts of the processor (lifecycle, limits, the hot path, the
event handlers) are mixins over :class:`ProcessorState` that only read and write it.
"""

from __future__ import annotations

import functools
import itertools
import uuid
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Any

from toolrelay._core._conversation import (
    AgentResult,
    ChatMessage,
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallInfo,
)
from toolrelay._core._effects import (
    Activity,
    ActivityKind,
    ProtocolViolation,
)
from toolrelay._core._limits import Limits
from toolrelay._core._patch import BoundedState
from toolrelay._core._shared import (
    NO_ITEMS,
    NO_KEYS,
    NO_WIRE_KEYS,
    added,
    keyed,
    wire_list,
)
from toolrelay._machines import (
    RUN_MACHINE,
    TOOL_CALL_MACHINE,
    RunEvent,
    RunStatus,
    ToolCallEvent,
    ToolCallStatus,
)
from toolrelay._reasons import TerminalReason
from toolrelay.protocol import (
    Context,
    Interrupt,
    ResumeEntry,
    Tool,
)

__all__ = ("NO_ITEMS", "NO_KEYS", "ProcessorState", "added", "keyed")

# A call still open: any state its declared machine does not call final.
_OPEN_CALL = TOOL_CALL_MACHINE.states - TOOL_CALL_MACHINE.finals
_AWAITING_APPROVAL = ToolCallStatus.awaiting_approval
_EXECUTING = ToolCallStatus.executing
# The calls the agent still holds (streaming, pending): those its TOOL_CALL_RESULT is
# taken for, as the declared machine says, and those the activity shows as calling.
_CALLING = TOOL_CALL_MACHINE.accepting(ToolCallEvent.receive_result)

# Members read at every run boundary, bound once: on Python 3.11 reading an enum
# member from its class costs a metaclass lookup each time.
_STREAMING = ToolCallStatus.streaming
_PENDING = ToolCallStatus.pending
_FAILED = ToolCallStatus.failed
_EXECUTING_TOOLS = RunStatus.executing_tools

# The activities without tool names, built once (they are immutable).
_IDLE = Activity(ActivityKind.IDLE)
_AWAITING = Activity(ActivityKind.AWAITING)
_STREAMING_TEXT = Activity(ActivityKind.STREAMING_TEXT)
_REASONING = Activity(ActivityKind.REASONING)
_DONE = Activity(ActivityKind.DONE)

# The hot path's adder while no message or call is hot: never called (the id it goes
# with is None, which no delta's id equals).
_NEVER_ADDED: list[str] = []
_NO_ADDER: Callable[[str], None] = _NEVER_ADDED.append


_DEFAULT_LIMITS = Limits()


@functools.lru_cache(maxsize=16)
def _hot_budgets(limits: Limits) -> tuple[int, int]:
    """The hot path's first character budgets under ``limits``: for arguments (a
    quarter of the smaller argument bound) and for text (a quarter of the text
    bound). Made once per ``Limits``, not per turn: ints this large are objects."""
    return (
        min(limits.max_argument_bytes, limits.max_turn_argument_bytes) // 4,
        limits.max_text_bytes // 4,
    )


_ID_PREFIX = uuid.uuid4().hex[:16]
_ID_COUNTER = itertools.count(1)


def _new_id() -> str:
    # Unique per process by the counter and across processes by the random prefix,
    # at a fraction of a uuid4's cost (one is made for every message and tool result).
    return f"{_ID_PREFIX}-{next(_ID_COUNTER)}"


class ProcessorState:
    """The processor's state; see :class:`~toolrelay.sansio.EventProcessor`."""

    __slots__ = (
        "_activity",
        "_arg_char_safe",
        "_arg_chars",
        "_arg_exact",
        "_calling_count",
        "_calling_shown",
        "_calling_waiting",
        "_executing_left",
        "_late_args",
        "_message_count",
        "_reasoning_bytes",
        "_run_call_count",
        "_run_reasoning",
        "_run_texts",
        "_from_snapshot",
        "_snapshot_checked",
        "_state",
        "_text_exact",
        "_text_full_bytes",
        "_text_hot_budget",
        "_text_hot_chars",
        "_text_results",
        "_turn_calls",
        "_turn_texts",
        "violations_dropped",
        "_exact_arg_bytes",
        "_hot_call_id",
        "_hot_call_add",
        "_hot_text_id",
        "_hot_text_add",
        "_call_at",
        "_calls",
        "_chunk_call",
        "_chunk_reasoning",
        "_chunk_text",
        "_context",
        "_ended",
        "_left",
        "_forwarded_props",
        "_id_factory",
        "_include_reasoning",
        "_limits",
        "_open_reasoning",
        "_open_texts",
        "_opened_to",
        "_result_ids",
        "_resume",
        "_run_first_message",
        "_run_state",
        "_depth",
        "_run_started_seen",
        "_settled",
        "_thinking",
        "_tools",
        "_wire_ended",
        "abandoned",
        "conversation",
        "interrupts",
        "max_depth",
        "max_repeats",
        "_approval_tools",
        "_requested",
        "reason",
        "run_count",
        "run_id",
        "server_run_id",
        "violations",
    )

    def __init__(
        self,
        conversation: Conversation,
        *,
        tools: Sequence[Tool] = (),
        max_depth: int = 10,
        limits: Limits | None = None,
        context: Sequence[Context] = (),
        forwarded_props: Any = None,
        id_factory: Callable[[], str] = _new_id,
        include_reasoning: bool = False,
        resume: Sequence[ResumeEntry] = (),
        max_repeats: int | None = None,
        approval_tools: Collection[str] = (),
    ) -> None:
        if max_depth < 0:
            raise ValueError("max_depth must be >= 0")
        if max_repeats is not None and max_repeats < 1:
            raise ValueError("max_repeats must be >= 1 (None turns loop detection off)")
        self.conversation = conversation
        self.max_depth = max_depth
        self.max_repeats = max_repeats
        self._approval_tools = frozenset(approval_tools)
        # Per (tool name, canonical arguments), how many times this turn asked for it.
        self._requested: dict[tuple[str, str], int] = NO_KEYS
        # Shared by every turn given the same tuples, as the engine's are (see wire_list).
        self._tools = wire_list(tools)
        self._limits = limits = _DEFAULT_LIMITS if limits is None else limits
        self._context = wire_list(context)
        self._forwarded_props: Any = NO_WIRE_KEYS if forwarded_props is None else forwarded_props
        self._id_factory = id_factory
        self._include_reasoning = include_reasoning
        self._resume = tuple(resume)
        # Where the turn stands in the run lifecycle, and its continuation depth.
        self._run_state = RUN_MACHINE.initial
        self._depth = 0
        #: Why the turn ended (``None`` while it runs).
        self.reason: TerminalReason | None = None
        #: The run id the client chose for the current run.
        self.run_id: str | None = None
        #: The run id the server reported in RUN_STARTED (some servers choose their own).
        self.server_run_id: str | None = None
        #: How many runs were started (1 + continuations).
        self.run_count = 0
        #: Every protocol violation tolerated during the turn, in order. (The shared
        #: empty list until the first: most turns have none.)
        self.violations: list[ProtocolViolation] = NO_ITEMS
        #: Tool calls that were open when the turn was aborted (cleared from the run).
        self.abandoned: list[ToolCallInfo] = NO_ITEMS
        #: What the agent asks, once the turn ended ``interrupted`` (the AG-UI
        #: ``interrupt`` outcome, one id each); empty otherwise.
        self.interrupts: tuple[Interrupt, ...] = ()
        self._activity = _IDLE
        # Messages that reached their final form since the last effects were returned
        # (reported once, as MessagesSettled, by _with_settled).
        self._settled: list[ChatMessage] = NO_ITEMS
        # Argument characters of the whole turn. No call's UTF-8 arguments, nor the
        # turn's, can pass their byte limit while these (4 bytes at most each) stay
        # under a quarter of the smaller one; past that, bytes are counted exactly.
        self._arg_chars = 0
        self._arg_exact: int | None = None
        self._arg_char_safe, self._text_hot_budget = _hot_budgets(limits)
        self._turn_calls: list[ToolCallInfo] = NO_ITEMS
        # The turn's text, counted the same way: the hot path counts characters
        # within a budget that keeps 4 bytes each plus the full path's exact bytes
        # under the bound; past it, the whole turn's text is counted exactly, once,
        # and then delta by delta (the hot path is closed: budget -1).
        self._turn_texts: list[TextMessage] = NO_ITEMS
        self._text_hot_chars = 0
        self._text_full_bytes = 0
        self._text_exact: int | None = None
        self._text_results = 0
        self._reasoning_bytes = 0
        self._message_count = 0
        #: Violations past ``Limits.max_violations``: counted, not kept.
        self.violations_dropped = 0
        self._reset_run()

    def _send_run(self, event: RunEvent) -> None:
        """Move the turn by ``event`` through the compiled ``RunLifecycle``, counting a
        continuation where the declaration does (promise 3).

        Raises:
            IllegalTransition: The turn's state does not accept ``event``; the state
                and the depth are unchanged.
        """
        self._run_state, counted = RUN_MACHINE.advance(self._run_state, event)
        self._depth += counted

    def _forget_hot(self) -> None:
        """Close the hot path: the next delta asks _hot_text / _hot_call again. The
        adders go too: each is a bound method of a message's or call's chunk list,
        which the turn would otherwise keep after the message or call closed."""
        self._hot_text_id: str | None = None
        self._hot_call_id: str | None = None
        self._hot_text_add: Callable[[str], None] = _NO_ADDER
        self._hot_call_add: Callable[[str], None] = _NO_ADDER

    @property
    def status(self) -> RunStatus:
        """The turn's state in the run lifecycle."""
        return self._run_state

    @property
    def depth(self) -> int:
        """Continuations started so far."""
        return self._depth

    @property
    def activity(self) -> Activity:
        """What a UI shows for the turn now."""
        return self._activity

    @property
    def tool_calls(self) -> tuple[ToolCallInfo, ...]:
        """The tool calls of the run in flight (cleared once committed or aborted)."""
        return tuple(self._calls.values())

    @property
    def agent_results(self) -> tuple[AgentResult, ...]:
        """The calls of the run in flight that the agent ran itself, with their result's
        message id and where they started: what :meth:`restore` takes back, read when
        the run ended with calls to execute (empty once the batch is committed)."""
        ids = self._result_ids
        if not ids:
            return ()
        end = len(self.conversation.messages)
        return tuple(
            AgentResult(call_id, ids[call_id], end - self._call_at[call_id])
            for call_id in self._calls
            if call_id in ids
        )

    @property
    def context(self) -> Sequence[Context]:
        """The ``context`` every run of the turn carries (``RunAgentInput.context``)."""
        return self._context

    @property
    def forwarded_props(self) -> Any:
        """The ``forwardedProps`` every run of the turn carries (``None``: none)."""
        props = self._forwarded_props
        return None if props is NO_WIRE_KEYS else props

    @property
    def resume(self) -> tuple[ResumeEntry, ...]:
        """The answers to earlier interrupts this turn's first run carries (often none)."""
        return self._resume

    @property
    def run_ended(self) -> bool:
        """True once the current run's stream said RUN_FINISHED or RUN_ERROR, or the
        turn is over: nothing more from that stream is processed."""
        return self._ended

    def _reset_run(self) -> None:
        """Give every per-run field its value at a run's start (the first one's too)."""
        # Where the current run's own messages start in the conversation.
        self._run_first_message = len(self.conversation.messages)
        self._calls: dict[str, ToolCallInfo] = NO_KEYS
        self._open_texts: dict[str, TextMessage] = NO_KEYS
        self._open_reasoning: dict[str, ReasoningRecord] = NO_KEYS
        self._result_ids: dict[str, str] = NO_KEYS
        # Where each call of the run started: the conversation's length at its START.
        self._call_at: dict[str, int] = NO_KEYS
        # The conversation's length after the last text or reasoning the agent opened
        # in this run (a content delta for a message never started opens none).
        self._opened_to = 0
        self._chunk_call: ToolCallInfo | None = None
        self._chunk_text: TextMessage | None = None
        self._chunk_reasoning: ReasoningRecord | None = None
        self._thinking: ReasoningRecord | None = None
        # Events this run may still take before max_events_per_run (the hot path and
        # the full path count down the same number).
        self._left = self._limits.max_events_per_run
        self._ended = False
        self._wire_ended = False
        self._run_started_seen = False
        # Exact argument bytes of the calls past the character bound.
        self._exact_arg_bytes: dict[str, int] = NO_KEYS
        # The hot path's message and call (see receive): an id is None when there is
        # none (no delta's id compares equal), and its adder is then let go.
        self._forget_hot()
        self._run_call_count = 0
        # Calls still calling (streaming or pending), for the activity: the first
        # MAX_ACTIVITY_NAMES shown, the rest waiting in order (amortised O(1) each).
        self._calling_count = 0
        self._calling_shown: list[ToolCallInfo] = NO_ITEMS
        # Made when a call has to wait (past MAX_ACTIVITY_NAMES calling at once).
        self._calling_waiting: deque[ToolCallInfo] | None = None
        # Calls of the batch still executing (record_result commits at 0).
        self._executing_left = 0
        # Reasoning records of the run by id (open or closed), for signatures.
        self._run_reasoning: dict[str, ReasoningRecord] = NO_KEYS
        self._run_texts = False
        # Call ids, as dicts (id -> True) rather than sets: a dict of strings is not
        # tracked by the cycle collector and an empty one is a quarter of an empty set.
        self._late_args: dict[str, bool] = NO_KEYS
        self._snapshot_checked: dict[str, bool] = NO_KEYS
        self._from_snapshot: dict[str, bool] = NO_KEYS
        # The agent's state, patched in place within its bounds; built at the first
        # delta of a run (a copy: the RunAgentInput sent holds the previous one).
        self._state: BoundedState | None = None

    def _let_go(self) -> None:
        """The turn is over: drop what only a running turn reads (its accounting of
        calls, texts, repeats and exact bytes, the calls shown as calling, the run's
        reasoning by id), so that a finished turn its caller keeps holds its outcome
        and little else."""
        self._turn_calls = self._calling_shown = NO_ITEMS
        self._turn_texts = NO_ITEMS
        self._calling_waiting = None
        self._requested = NO_KEYS
        self._exact_arg_bytes = NO_KEYS
        self._run_reasoning = NO_KEYS
