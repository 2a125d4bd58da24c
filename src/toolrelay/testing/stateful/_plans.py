"""What the machine draws: the agent's behaviour per run (:class:`RunPlan`), per tool
call (:class:`CallPlan`) and per turn (:class:`TurnPlan`), and their strategies."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from hypothesis import strategies as st

from toolrelay._core import ToolSpec
from toolrelay._core._processor import _canonical_arguments
from toolrelay._reasons import ReasonKind
from toolrelay.testing.strategies import json_values

__all__ = (
    "CallOutcome",
    "CallPlan",
    "Malformation",
    "PROBE_PREFIX",
    "PROBE_TIMEOUT",
    "RunKind",
    "RunPlan",
    "T",
    "THREADS",
    "TurnPlan",
    "VIOLATING",
    "base_exception_of",
    "call_plans",
    "turn_plans",
)


T = TypeVar("T")

#: The threads the machine talks on.
THREADS = ("t0", "t1", "t2")

#: The prefix of the machine's own tools; user tools must not use it.
PROBE_PREFIX = "probe_"

#: The tool timeout of ``probe_timeout`` and ``probe_stuck`` (seconds).
PROBE_TIMEOUT = 0.02

#: What ``probe_exit`` raises, chosen by the call id's length.
_BASE_EXCEPTIONS = ("SystemExit", "KeyboardInterrupt", "GeneratorExit", "Cancelled")


def base_exception_of(ticket: str) -> str:
    return _BASE_EXCEPTIONS[sum(map(ord, ticket)) % len(_BASE_EXCEPTIONS)]


# ---------------------------------------------------------------------------
# Plans: what the agent does, drawn by Hypothesis


class CallOutcome(enum.StrEnum):
    """What happens when a tool call is executed."""

    #: ``probe_ok`` returns at once.
    ok = "ok"
    #: ``probe_raise`` raises.
    raises = "raises"
    #: ``probe_slow`` waits for a gate the ``release`` rules open.
    slow = "slow"
    #: ``probe_timeout`` never returns; its 20 ms tool timeout fires.
    timeout = "timeout"
    #: The agent calls a tool that does not exist.
    unknown = "unknown"
    #: ``probe_typed`` is called with arguments that do not validate.
    invalid = "invalid"
    #: One of the user's tools (see :meth:`PromisesMachine.tools`).
    user = "user"
    #: ``probe_exit`` raises a ``BaseException`` that is not an ``Exception``:
    #: ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` or a cancellation
    #: exception no scope asked for (which one depends on the call's id).
    raises_base = "raises_base"
    #: ``probe_stuck``, a blocking sync tool, never returns until the example ends;
    #: its 20 ms timeout fires and its thread is abandoned.
    stuck = "stuck"
    #: ``probe_unsendable`` returns a value that cannot be encoded (cyclic, or an
    #: object JSON has no form for).
    unsendable = "unsendable"
    #: ``probe_guarded`` needs approval (a tool policy): the call waits until the
    #: ``decide`` rule approves it (it runs) or denies it (the model sees the denial).
    approval = "approval"
    #: The agent runs the call itself and streams its result (TOOL_CALL_RESULT): it
    #: names ``probe_ok``, a tool of the client, which must not run it. A run whose
    #: calls are all the agent's ends the turn, as an answer does.
    agent = "agent"


class RunKind(enum.StrEnum):
    """How one run of the agent goes."""

    #: Text (maybe), then RUN_FINISHED: the turn completes.
    answer = "answer"
    #: Tool calls, then RUN_FINISHED: the engine executes them and continues.
    tools = "tools"
    #: RUN_ERROR: the turn fails (``agent_error``).
    run_error = "run_error"
    #: The stream raises an unexpected exception (``backend_error``).
    breaks = "breaks"
    #: The stream raises ``StreamDroppedError`` (``transport_error``).
    drops = "drops"
    #: The stream hangs until the turn is cancelled, superseded or closed.
    hangs = "hangs"
    #: Allocating the run fails (``backend_error``); the run never streams.
    alloc_fails = "alloc_fails"
    #: RUN_FINISHED with the ``interrupt`` outcome: the turn ends ``interrupted``, its
    #: calls never run; the ``answer`` rule resumes it.
    interrupts = "interrupts"
    #: RUN_FINISHED with the ``cancelled`` outcome: the turn ends ``cancelled``
    #: (``agent_cancelled``), its calls never run.
    agent_cancels = "agent_cancels"


class Malformation(enum.StrEnum):
    """A bad or out-of-order event the agent sends (promise 7)."""

    args_for_unknown_call = "args_for_unknown_call"
    duplicate_start = "duplicate_start"
    duplicate_end = "duplicate_end"
    content_without_start = "content_without_start"
    end_for_unknown_message = "end_for_unknown_message"
    unknown_event_type = "unknown_event_type"
    duplicate_run_started = "duplicate_run_started"
    result_for_unknown_call = "result_for_unknown_call"
    #: A call whose TOOL_CALL_END never comes (abandoned, never executed).
    call_without_end = "call_without_end"
    #: A text and a tool call after the run's last event (never processed).
    events_after_finish = "events_after_finish"


#: Malformations recorded as a :class:`~toolrelay.ProtocolViolation` as soon as
#: they are received.
VIOLATING = frozenset(
    {
        Malformation.args_for_unknown_call,
        Malformation.duplicate_start,
        Malformation.duplicate_end,
        Malformation.content_without_start,
        Malformation.end_for_unknown_message,
        Malformation.duplicate_run_started,
        Malformation.result_for_unknown_call,
    }
)

_FAILING_KINDS = frozenset({RunKind.run_error, RunKind.breaks, RunKind.drops, RunKind.hangs})

#: The kinds whose calls stream but never run (the run fails, or stops by its outcome).
_UNRUN_KINDS = _FAILING_KINDS | {RunKind.interrupts, RunKind.agent_cancels}


@dataclass(frozen=True, slots=True)
class CallPlan:
    """One tool call the agent makes.

    Attributes:
        outcome: What executing it does.
        chunk: Split the argument JSON into deltas of this many characters.
        tool: The user's tool called (outcome ``user``).
        arguments: The arguments sent to the user's tool.
    """

    outcome: CallOutcome
    chunk: int | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One run of the agent.

    Attributes:
        kind: How the run goes.
        text: A text message streamed first.
        text_chunk: Split the text into deltas of this many characters.
        calls: Tool calls streamed after the text (for ``tools`` and the failing kinds).
        interleaved: Stream the calls interleaved (every START, then the ARGS deltas
            round-robin, then every END) rather than one after the other.
        gated: The stream waits on a gate after the text (released by a rule).
        cut: The stream breaks mid-message (failing kinds only): the last call's
            TOOL_CALL_END, or without calls the text's TEXT_MESSAGE_END, is missing.
        malformed: Bad or out-of-order events sent after the calls.
        asks: How many interrupts an ``interrupts`` run sends.
    """

    kind: RunKind
    text: str | None = None
    text_chunk: int | None = None
    calls: tuple[CallPlan, ...] = ()
    interleaved: bool = False
    gated: bool = False
    cut: bool = False
    malformed: tuple[Malformation, ...] = ()
    asks: int = 0

    @property
    def asks_client(self) -> bool:
        """Some call is left for the client (not every one the agent's own)."""
        return any(call.outcome is not CallOutcome.agent for call in self.calls)


_FALLBACK_RUN = RunPlan(RunKind.answer, text="fallback")


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What the agent does in every run of one turn.

    Attributes:
        runs: Run ``i`` of the turn plays ``runs[i]``.
        endless: Past the end of ``runs``, keep playing the last run (a ``tools`` run):
            the agent never stops asking for tools.
        dispose_raises: Disposing this turn's run handles raises (promise 5: the error
            is logged, nothing else changes).
    """

    runs: tuple[RunPlan, ...]
    endless: bool = False
    dispose_raises: bool = False

    def run_at(self, index: int) -> RunPlan:
        if index < len(self.runs):
            return self.runs[index]
        if self.endless and self.runs:
            return self.runs[-1]
        return _FALLBACK_RUN

    def no_progress_at(self, max_depth: int, max_repeats: int | None) -> int | None:
        """The run at whose end loop detection stops the turn: the first ``tools`` run
        (within the depth bound) that brings a user's call, same tool and same
        arguments, to ``max_repeats`` requests in the turn; ``None`` if none does."""
        if max_repeats is None:
            return None
        counts: dict[tuple[str, str], int] = {}
        for index in range(max_depth + 1):
            run = self.run_at(index)
            if run.kind is not RunKind.tools or not run.asks_client:
                return None
            tripped = False
            for call in run.calls:
                if call.outcome is CallOutcome.user and call.tool is not None:
                    raw = msgspec.json.encode(dict(call.arguments or {})).decode()
                    key = (call.tool, _canonical_arguments(raw))
                    counts[key] = counts.get(key, 0) + 1
                    tripped = tripped or counts[key] >= max_repeats
            if tripped:
                return index
        return None

    def expected_end(self, max_depth: int, max_repeats: int | None = None) -> ReasonKind | None:
        """How the turn ends if nobody cancels, supersedes or closes it (``None``: it
        hangs until someone does)."""
        stops_at = self.no_progress_at(max_depth, max_repeats)
        for index in itertools.count():
            run = self.run_at(index)
            match run.kind:
                case RunKind.alloc_fails:
                    return ReasonKind.BACKEND_ERROR
                case RunKind.hangs:
                    return None
                case RunKind.run_error:
                    return ReasonKind.AGENT_ERROR
                case RunKind.breaks:
                    return ReasonKind.BACKEND_ERROR
                case RunKind.drops:
                    return ReasonKind.TRANSPORT_ERROR
                case RunKind.interrupts:
                    return ReasonKind.INTERRUPTED
                case RunKind.agent_cancels:
                    return ReasonKind.AGENT_CANCELLED
                case RunKind.tools if run.asks_client:
                    if index == stops_at:
                        return ReasonKind.NO_PROGRESS
                    if index >= max_depth:
                        return ReasonKind.MAX_DEPTH
                case _:
                    return ReasonKind.COMPLETED
        raise AssertionError("unreachable")  # pragma: no cover


def _arguments_for(spec: ToolSpec[..., Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments for a user's tool, from its JSON Schema (and some that may not fit)."""
    parameters = spec.parameters
    properties: dict[str, Any] = parameters.get("properties", {})
    required = set(parameters.get("required", ()))
    fields = {name: _value_for(schema) for name, schema in properties.items()}
    fitting = st.fixed_dictionaries(
        {name: strategy for name, strategy in fields.items() if name in required},
        optional={name: strategy for name, strategy in fields.items() if name not in required},
    )
    anything = st.dictionaries(st.text(max_size=4), json_values(), max_size=2)
    return fitting | anything


def _value_for(schema: Any) -> st.SearchStrategy[Any]:
    if not isinstance(schema, dict):
        return json_values()
    if "enum" in schema and schema["enum"]:
        return st.sampled_from(list(schema["enum"]))
    kind = schema.get("type")
    if kind == "string":
        return st.text(max_size=6)
    if kind == "integer":
        return st.integers(-10, 10)
    if kind == "number":
        return st.floats(-10, 10, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(_value_for(schema.get("items")), max_size=2)
    if kind == "null":
        return st.none()
    return json_values()


def call_plans(user_tools: Sequence[ToolSpec[..., Any]]) -> st.SearchStrategy[CallPlan]:
    chunks = st.none() | st.integers(1, 8)
    builtin = st.builds(
        CallPlan,
        outcome=st.sampled_from([o for o in CallOutcome if o is not CallOutcome.user]),
        chunk=chunks,
    )
    if not user_tools:
        return builtin
    user = st.sampled_from(list(user_tools)).flatmap(
        lambda spec: st.builds(
            CallPlan,
            outcome=st.just(CallOutcome.user),
            chunk=chunks,
            tool=st.just(spec.name),
            arguments=_arguments_for(spec),
        )
    )
    return builtin | user


#: ``True`` one time in four (shrinks to ``False``): for what blocks or breaks a turn,
#: so that most turns still get somewhere by themselves.
_rarely = st.integers(0, 3).map(lambda n: n == 3)

#: How the last run of a (not endless) turn goes; mostly an answer.
_LAST_KINDS = (
    RunKind.answer,
    RunKind.answer,
    RunKind.answer,
    RunKind.interrupts,
    RunKind.interrupts,
    RunKind.agent_cancels,
    RunKind.hangs,
    RunKind.hangs,
    RunKind.run_error,
    RunKind.breaks,
    RunKind.drops,
    RunKind.alloc_fails,
)


@st.composite
def _run_plans(draw: st.DrawFn, kind: RunKind, calls: st.SearchStrategy[CallPlan]) -> RunPlan:
    if kind is RunKind.alloc_fails:
        return RunPlan(kind)
    texts = st.none() | st.text(alphabet="abcxyz ", max_size=6)
    plan_calls: tuple[CallPlan, ...] = ()
    if kind is RunKind.tools:
        plan_calls = tuple(draw(st.lists(calls, min_size=1, max_size=3)))
    elif kind in _UNRUN_KINDS:
        plan_calls = tuple(draw(st.lists(calls, max_size=2)))
    malformations = [
        m
        for m in Malformation
        if plan_calls or m not in (Malformation.duplicate_start, Malformation.duplicate_end)
    ]
    return RunPlan(
        kind,
        text=draw(texts),
        text_chunk=draw(st.none() | st.integers(1, 4)),
        calls=plan_calls,
        interleaved=len(plan_calls) > 1 and draw(st.booleans()),
        gated=draw(_rarely),
        cut=kind in _FAILING_KINDS and draw(st.booleans()),
        malformed=tuple(
            draw(st.lists(st.sampled_from(malformations), max_size=3, unique=True))
            if draw(_rarely)
            else ()
        ),
        asks=draw(st.integers(1, 2)) if kind is RunKind.interrupts else 0,
    )


@st.composite
def turn_plans(draw: st.DrawFn, calls: st.SearchStrategy[CallPlan], max_depth: int) -> TurnPlan:
    # At most max_depth hops: more trips the breaker, which endless turns cover.
    hops = draw(st.lists(_run_plans(RunKind.tools, calls), max_size=max_depth))
    endless = draw(_rarely)
    if endless:
        last = draw(_run_plans(RunKind.tools, calls))
        runs = (*hops, last)
        # A run of the agent's own calls only ends the turn (as an answer does): with
        # one, the turn never loops.
        endless = all(run.asks_client for run in runs)
    else:
        runs = (*hops, draw(_run_plans(draw(st.sampled_from(_LAST_KINDS)), calls)))
    return TurnPlan(runs, endless=endless, dispose_raises=draw(_rarely))
