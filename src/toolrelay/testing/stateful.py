"""The stateful property suite of toolrelay's eight promises, shipped for users.

:class:`PromisesMachine` is a Hypothesis ``RuleBasedStateMachine`` that drives a real
:class:`~toolrelay.runtime.Engine` with a :class:`~toolrelay.testing.ScriptedAgent`
(whose ``respond`` callback plays the behaviour drawn for each run). Its rules are what
users do; its invariants are the promises of ``ARCHITECTURE.md``, checked once the
engine is quiet after every step.

Rules (user actions):

- ``first_turns`` (once, first): a turn on ``t0`` and one on ``t1``.
- ``send``: start a turn on one of three threads; the agent's behaviour for every run
  of the turn is drawn as a :class:`TurnPlan`. ``resend`` sends on a thread whose
  turn is live: the newer turn supersedes it (promise 5).
- ``answer``: answer the interrupts of a thread whose turn ended ``interrupted``: a
  new turn whose first run carries one resume entry per interrupt (with or without a
  message of its own), or a wrong answer (an unknown id, one answered twice, one left
  out), which must be refused with :class:`~toolrelay.errors.ResumeError` and change
  nothing.
- ``cancel``: cancel a thread's turn, live or not (``cancel`` says which).
- ``focus``: show a thread, or none; optionally through a view subscribed just before.
- ``release_one`` / ``release_all``: open gates that a stream or a slow tool waits on.
- ``decide``: approve or deny one tool call that awaits approval (``probe_guarded``).
- ``close``: close the engine with its turns in flight; after it only
  ``send_after_close`` (which must raise :class:`~toolrelay.errors.ClosedError`),
  ``cancel`` and ``focus`` run.

Agent behaviours (one :class:`RunPlan` per run, :class:`RunKind`): a text answer; one
or several tool calls, sequential or interleaved, with split argument deltas;
multi-hop (tools, then tools, then text); an endless tool loop (the circuit breaker
trips); a run that ends with the AG-UI ``interrupt`` outcome (the agent asks
something) or the ``cancelled`` outcome; malformed and out-of-order events
(:class:`Malformation`); ``RUN_ERROR``; a
stream that breaks, drops the connection or hangs, maybe mid-message; a stream held on
a gate; a run whose allocation fails; run handles whose disposal raises. Tool outcomes
(:class:`CallOutcome`): ok, raises, slow (waits for a gate), times out, unknown tool,
invalid arguments, and calls to *your* tools; and hostile tools (promise 11): one
raising ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` or a cancellation
exception no scope asked for, a blocking tool that never returns (its thread stuck
until the example ends), one returning a value that cannot be sent (cyclic, or an
object JSON has no form for).

Quiet means: every live turn is parked (its stream on a shut gate or a hang, or its
tools on shut gates) and every finished turn's task has returned. After each step the
machine polls the engine's public state until it is quiet; if nothing observable moves
meanwhile, or a user action does not return, some turn is stuck: a failure.

Invariants:

1. Every finished turn is final, with a reason, its task done and no open tool call;
   committed calls are final; abandoned calls failed; a live turn is parked, never
   stuck (promise 1). An interrupted turn is final too, and its pending calls never
   run.
2. Every continuation's ``RunAgentInput`` carries a ``tool`` message for every call of
   the run before it, with that call's outcome (result, error, timeout, unknown tool,
   invalid arguments, the hostile tools' failures); the calls of a batch run
   concurrently; no call runs twice; abandoned calls, calls past the depth bound and
   late calls never run (promises 2 and 11).
3. Depth never exceeds ``max_depth``; a breaker trip is ``failed`` with reason
   ``max_depth`` at exactly ``max_depth``; an endless tool loop trips it (promise 3),
   unless loop detection stops it first: a turn whose agent asks for one of the
   user's tools with the same arguments ``max_repeated_calls`` times ends ``failed``
   with reason ``no_progress`` at exactly that run, and that run's calls never run.
4. A cancelled turn is ``cancelled`` (with the user's message) the moment ``cancel``
   returns and its task ends promptly; closing ends every live turn ``cancelled``
   with reason ``closed`` (promise 4).
5. The registry holds exactly the live turns' current runs, one per thread, at the
   turn's depth; a handle is never disposed while registered; a dispose error changes
   nothing; first runs are announced as ``RunStarted``, continuations as
   ``RunContinued`` naming their predecessor; a re-sent thread's older turn is
   ``superseded`` at once (promise 5).
6. Only the ``focus`` rule moves the focus; focused-only subscribers hear only the
   focused thread; focusing shows the thread's current state; per thread,
   notifications follow the turns in order (no stale notification of an older turn,
   no final state followed by a running one) (promise 6).
7. Text already received is kept whatever happens next (malformed events, errors,
   cancellation, a stream cut mid-message); malformed events are recorded as
   violations; events after ``RUN_FINISHED``/``RUN_ERROR`` are not processed
   (promise 7).

Beside those, the model: every turn ends exactly as its plan (or the user) says, and
never with ``internal_error``; an interrupted turn exposes exactly the interrupts the
agent sent (on the turn and its snapshot); the engine's open interrupts per thread
follow the turns; resume entries reach the first run of the turn that answers, and no
other run. Promise 8 (constant cost per event) is the benchmarks'.

Run it against your own tools::

    from toolrelay.core import ToolRegistry
    from toolrelay.testing.stateful import PromisesMachine

    class MyToolsPromises(PromisesMachine):
        max_depth = 4

        def tools(self) -> ToolRegistry:
            return ToolRegistry.of(search, get_weather)

    # Collected by pytest or unittest; tune it as any Hypothesis state machine test.
    TestMyToolsPromises = MyToolsPromises.TestCase
    TestMyToolsPromises.settings = settings(max_examples=200, stateful_step_count=30)

or from code, as ``toolrelay verify`` does::

    run_promises(tools=ToolRegistry.of(search, get_weather), examples=200, seed=1)

The agent calls your tools with arguments drawn from their JSON Schemas (and
sometimes with arguments that do not validate); their results are not checked, only
that the model sees one. Your tools must finish (each runs under
:attr:`PromisesMachine.tool_timeout`) and should answer the same way for the same
arguments, or Hypothesis cannot replay a failure. Their names must not start with
``probe_``: those are the machine's own tools.

Determinism: the machine never sleeps to synchronise. It waits on gates it controls,
on the turns' ``wait_finished`` and by polling the engine's public state between
event-loop iterations; the clock only bounds waiting, and times ``probe_timeout``
(20 ms). Each example runs in its own event loop, in a thread
(``anyio.from_thread.start_blocking_portal``), on asyncio or trio.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, cast

import anyio
import hypothesis
import msgspec
from anyio.abc import ObjectReceiveStream, TaskGroup, TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream
from hypothesis import HealthCheck, Phase, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from toolrelay._reasons import ReasonKind
from toolrelay.backends._base import ThreadKey
from toolrelay.core import ToolRegistry, ToolSpec, tool
from toolrelay.core._processor import _canonical_arguments
from toolrelay.errors import ClosedError, ResumeError, RunAllocationError, StreamDroppedError
from toolrelay.machines import RunStatus, ToolCallStatus
from toolrelay.protocol import (
    Event,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UnknownEvent,
    UserMessage,
)
from toolrelay.runtime import (
    Engine,
    EventReceived,
    LifecycleEvent,
    Notification,
    RunCompleted,
    RunContinued,
    RunHandle,
    RunRegistry,
    RunStarted,
    StateChanged,
    ToolCallFinished,
    Turn,
)
from toolrelay.testing._builders import run_cancelled, run_interrupted, text, tool_call
from toolrelay.testing._scripted import Gate, Hang, Raise, ScriptedAgent, Step
from toolrelay.testing.strategies import json_values

__all__ = (
    "CallOutcome",
    "CallPlan",
    "Malformation",
    "PromisesMachine",
    "RunKind",
    "RunPlan",
    "TestPromises",
    "TurnPlan",
    "run_promises",
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


def _base_exception_of(ticket: str) -> str:
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


#: Malformations recorded as a :class:`~toolrelay.core.ProtocolViolation` as soon as
#: they are received.
_VIOLATING = frozenset(
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
            if run.kind is not RunKind.tools or not run.calls:
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
                case RunKind.tools if run.calls:
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


def _call_plans(user_tools: Sequence[ToolSpec[..., Any]]) -> st.SearchStrategy[CallPlan]:
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
def _turn_plans(draw: st.DrawFn, calls: st.SearchStrategy[CallPlan], max_depth: int) -> TurnPlan:
    # At most max_depth hops: more trips the breaker, which endless turns cover.
    hops = draw(st.lists(_run_plans(RunKind.tools, calls), max_size=max_depth))
    endless = draw(_rarely)
    if endless:
        runs = (*hops, draw(_run_plans(RunKind.tools, calls)))
    else:
        runs = (*hops, draw(_run_plans(draw(st.sampled_from(_LAST_KINDS)), calls)))
    return TurnPlan(runs, endless=endless, dispose_raises=draw(_rarely))


# ---------------------------------------------------------------------------
# Gates and marks the scripts wait on (duck-typed ``anyio.Event`` for ``Gate``)


class _Hold:
    """A gate the machine opens; counts who waits on it (a parked stream or tool)."""

    __slots__ = ("_event", "name", "released", "waiting")

    def __init__(self, name: str) -> None:
        self.name = name
        self.released = False
        self.waiting = 0
        self._event: anyio.Event | None = None

    async def wait(self) -> None:
        if self.released:
            return
        if self._event is None:
            self._event = anyio.Event()
        self.waiting += 1
        try:
            await self._event.wait()
        finally:
            self.waiting -= 1

    @property
    def parked(self) -> bool:
        """Someone waits and the gate is shut (once opened, the waiter moves on soon)."""
        return self.waiting > 0 and not self.released

    def set(self) -> None:
        self.released = True
        if self._event is not None:
            self._event.set()

    def __repr__(self) -> str:
        return f"_Hold({self.name!r}, released={self.released}, waiting={self.waiting})"


class _Mark:
    """A step that never waits: it records that the stream got there, which means the
    engine processed every event before it."""

    __slots__ = ("reached",)

    def __init__(self) -> None:
        self.reached = False

    async def wait(self) -> None:
        self.reached = True


def _gate(waitable: _Hold | _Mark) -> Gate:
    return Gate(cast("anyio.Event", waitable))


# ---------------------------------------------------------------------------
# What the machine knows about each turn and run


@dataclass(eq=False)
class _TurnModel:
    ordinal: int
    key: str
    plan: TurnPlan
    expected: ReasonKind | None
    turn: Turn | None = None
    #: How the turn was ended from outside (cancel, supersede, close), if it was.
    external: ReasonKind | None = None
    done: bool = False
    reported: bool = False
    runs_started: int = 0
    allocations: int = 0
    runs: list[_RunRecord] = field(default_factory=list)
    #: The resume entries the turn was started with (the ``answer`` rule).
    resume: tuple[ResumeEntry, ...] = ()

    @property
    def label(self) -> str:
        return f"turn #{self.ordinal} on {self.key}"


@dataclass(eq=False)
class _RunRecord:
    model: _TurnModel
    index: int
    run_id: str
    parent_run_id: str | None
    plan: RunPlan
    #: Calls the engine must execute (a ``tools`` run under the depth bound).
    calls: dict[str, CallPlan] = field(default_factory=dict)
    #: Calls streamed that must never execute (abandoned, broken run, breaker, late).
    never_run: set[str] = field(default_factory=set)
    texts: list[tuple[str, str, _Mark]] = field(default_factory=list)
    stream_hold: _Hold | None = None
    hang_mark: _Mark | None = None
    malformed_mark: _Mark | None = None
    expects_violation: bool = False
    late_text_id: str | None = None
    #: The interrupts an ``interrupts`` run sent, in order.
    interrupts: tuple[Interrupt, ...] = ()

    def parked(self) -> bool:
        if self.stream_hold is not None and self.stream_hold.parked:
            return True
        return self.hang_mark is not None and self.hang_mark.reached


class _Agent(ScriptedAgent):
    """The ScriptedAgent whose allocations fail when the turn's plan says so."""

    def __init__(self, machine: PromisesMachine) -> None:
        super().__init__(respond=machine._respond)
        self._machine = machine

    async def allocate_run(self, key: ThreadKey) -> str | None:
        fails = self._machine._allocation_fails(key)
        run_id = await super().allocate_run(key)
        if fails:
            raise RunAllocationError("scripted allocation failure")
        return run_id


class _Registry(RunRegistry):
    """A run registry that checks every handle is disposed only once unregistered, and
    whose handles raise on dispose when the turn's plan says so (promise 5)."""

    def __init__(self, machine: PromisesMachine) -> None:
        super().__init__()
        self._machine = machine

    def _watch(self, handle: RunHandle) -> None:
        raises = self._machine._dispose_raises(handle.key)

        def on_dispose() -> None:
            if self.is_registered(handle):
                self._machine._problems.append(
                    f"promise 5: run {handle.run_id} on {handle.key} was disposed "
                    "while still registered"
                )
            if raises:
                raise RuntimeError(f"scripted dispose failure of {handle.run_id}")

        handle.on_dispose(on_dispose)

    def register_run(self, handle: RunHandle) -> None:
        self._watch(handle)
        super().register_run(handle)

    def replace_run(self, old: RunHandle, new: RunHandle) -> bool:
        self._watch(new)
        return super().replace_run(old, new)


def _drain(stream: ObjectReceiveStream[T] | None) -> list[T]:
    items: list[T] = []
    if stream is None:
        return items
    assert isinstance(stream, MemoryObjectReceiveStream), stream
    while True:
        try:
            items.append(stream.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return items


class _Abort(Exception):
    """Leaves the engine's ``async with`` by an error, so that its tasks are cancelled."""


class _Stall:
    """Tells a stuck engine from a busy one, without trusting the clock where it can.

    Every ready task runs once per event-loop iteration. Without clock- or thread-bound
    work (a tool waiting for its timeout, the user's tools), ``stall_iterations``
    iterations in which nothing observable moves mean nothing ever will. With such
    work it polls more slowly (leaving the CPU to worker threads) and judges by the
    clock (``stall_timeout``), except while the user's tools run, which only
    ``quiet_timeout`` bounds.
    """

    __slots__ = ("_idle", "_machine", "_moved", "_progress")

    def __init__(self, machine: PromisesMachine) -> None:
        self._machine = machine
        self._progress = machine._progress()
        self._moved = anyio.current_time()
        self._idle = 0

    def pause(self) -> float:
        return 0.001 if self._idle > 200 and self._machine._timed_work() else 0

    def check(self) -> bool:
        """Whether the engine stalled (call once per iteration)."""
        machine = self._machine
        progress = machine._progress()
        if progress != self._progress:
            self._progress, self._moved, self._idle = progress, anyio.current_time(), 0
            return False
        self._idle += 1
        if not machine._timed_work():
            return self._idle > machine.stall_iterations
        if machine._user_tools_running():
            return False
        return anyio.current_time() - self._moved > machine.stall_timeout


# ---------------------------------------------------------------------------
# The machine


class PromisesMachine(RuleBasedStateMachine):
    """The eight promises as a Hypothesis state machine; see the module docstring.

    Override the class attributes, or :meth:`tools`, in a subclass; then run the
    subclass's ``TestCase`` (or :func:`run_promises`).
    """

    #: The anyio backend the engine runs on ("asyncio" or "trio").
    backend: ClassVar[str] = "asyncio"
    #: The engine's continuation bound (promise 3).
    max_depth: ClassVar[int] = 3
    #: The engine's no-progress loop detection (``Engine(max_repeated_calls=...)``):
    #: a user's tool called with the same arguments this often ends the turn.
    max_repeated_calls: ClassVar[int | None] = 3
    #: The engine's default tool timeout, which bounds the user's tools (seconds).
    tool_timeout: ClassVar[float] = 5.0
    #: How long the engine may take to become quiet after a step (seconds); longer is
    #: a stuck turn, reported as a failure.
    quiet_timeout: ClassVar[float] = 30.0
    #: How long nothing observable may move, while a clock-bound probe tool runs,
    #: before a turn that is not parked counts as stuck (seconds). Also bounds every
    #: user action (``cancel``, ``close``...) and leaving the engine: they must
    #: return promptly (promise 4).
    stall_timeout: ClassVar[float] = 1.0
    #: How many event-loop iterations in which nothing observable moves, while no
    #: clock- or thread-bound tool runs, make a turn that is not parked stuck.
    stall_iterations: ClassVar[int] = 2000

    def tools(self) -> ToolRegistry:
        """The user's tools the agent may call, beside the machine's ``probe_*`` tools."""
        return ToolRegistry()

    # -- setup and teardown ---------------------------------------------------------

    def __init__(self) -> None:
        super().__init__()
        user_tools = self.tools()
        for spec in user_tools:
            if spec.name.startswith(PROBE_PREFIX):
                raise ValueError(
                    f"tool {spec.name!r}: names starting with {PROBE_PREFIX!r} are the "
                    "promise machine's own"
                )
        self._user_tools = tuple(user_tools)
        registry = user_tools.copy()  # the user's registry stays as it was given
        for probe in self._probe_tools():
            registry.register(probe)
        self._registry = registry
        self._plans = _turn_plans(_call_plans(self._user_tools), self.max_depth)
        self._ids = itertools.count(1)
        self._models: list[_TurnModel] = []
        self._latest: dict[str, _TurnModel] = {}
        self._records: dict[str, _RunRecord] = {}
        self._tool_holds: dict[str, _Hold] = {}
        self._stream_holds: dict[str, _Hold] = {}
        self._executed: dict[str, int] = {}
        # Opened when the example ends: probe_stuck's threads may return then.
        self._unstick = threading.Event()
        self._problems: list[str] = []
        self._focus: str | None = None
        self._closed = False
        self._failed = False
        self._held: tuple[str, ...] = ()
        # Calls awaiting approval, (thread, call id), and the decisions taken.
        self._awaiting: tuple[tuple[str, str], ...] = ()
        self._decisions: dict[str, bool] = {}
        self._live: tuple[str, ...] = ()
        self._interrupted: tuple[str, ...] = ()
        self._inputs_checked = 0
        self._lifecycle_seen: dict[str, str] = {}
        self._views: dict[str, list[tuple[int | None, RunStatus]]] = {}
        self.agent = _Agent(self)
        self.engine: Engine | None = None
        self._group: TaskGroup | None = None
        self._stop: anyio.Event | None = None
        self._focused_sub: ObjectReceiveStream[Notification] | None = None
        self._all_sub: ObjectReceiveStream[Notification] | None = None
        self._lifecycle_sub: ObjectReceiveStream[LifecycleEvent] | None = None
        self._exit = ExitStack()
        try:
            self._portal: BlockingPortal = self._exit.enter_context(
                start_blocking_portal(self.backend)
            )
            self._host: Future[None]
            self._host, _ = self._portal.start_task(self._run_host, name="promises host")
        except BaseException:
            self._exit.close()
            raise

    async def _run_host(self, *, task_status: TaskStatus[None]) -> None:
        engine = Engine(
            self.agent,
            tools=self._registry,
            max_depth=self.max_depth,
            max_repeated_calls=self.max_repeated_calls,
            tool_timeout=self.tool_timeout,
            registry=_Registry(self),
            run_id_factory=lambda: f"run-{next(self._ids)}",
            id_factory=lambda: f"id-{next(self._ids)}",
        )
        self._stop = anyio.Event()
        stuck: list[AssertionError] = []
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                async with engine:
                    self.engine = engine
                    self._focused_sub = engine.subscribe(focused_only=True)
                    self._all_sub = engine.subscribe(events=True)
                    self._lifecycle_sub = engine.registry.subscribe()
                    task_status.started()
                    await self._stop.wait()
                    # Leaving the engine closes it: every turn must end promptly.
                    try:
                        await self._bounded(engine.aclose, "closing the engine at teardown")
                    except AssertionError as exc:
                        stuck.append(exc)
                        raise _Abort from None  # cancels the stuck turns' tasks
        except* _Abort:
            pass
        finally:
            for stream in (self._focused_sub, self._all_sub, self._lifecycle_sub):
                if stream is not None:
                    await stream.aclose()
        if stuck:
            raise stuck[0]

    def teardown(self) -> None:
        self._unstick.set()
        try:
            if self._stop is not None:
                self._portal.call(self._stop.set)
            self._host.result(timeout=self.quiet_timeout)
        except BaseException as exc:
            self._exit.__exit__(type(exc), exc, exc.__traceback__)
            if not self._failed:  # else the step's failure is the one to report
                raise
            return
        self._exit.close()

    # -- the machine's own tools ------------------------------------------------------

    def _ran(self, ticket: str) -> None:
        self._executed[ticket] = self._executed.get(ticket, 0) + 1

    def _probe_tools(self) -> list[ToolSpec[..., Any]]:
        async def probe_ok(ticket: str) -> str:
            """Return at once."""
            self._ran(ticket)
            return f"ok {ticket}"

        async def probe_raise(ticket: str) -> str:
            """Raise."""
            self._ran(ticket)
            raise RuntimeError(f"boom {ticket}")

        async def probe_slow(ticket: str) -> str:
            """Wait for the machine to open a gate."""
            self._ran(ticket)
            hold = self._tool_holds.get(ticket)
            if hold is not None:
                await hold.wait()
            return f"slow {ticket}"

        async def probe_timeout(ticket: str) -> str:
            """Never return (the tool timeout fires)."""
            self._ran(ticket)
            await anyio.sleep_forever()
            return "unreachable"

        def probe_typed(ticket: str, n: int) -> str:
            """Take a number (the agent sends a string)."""
            self._ran(ticket)
            return f"typed {ticket} {n}"

        async def probe_exit(ticket: str) -> str:
            """Raise a BaseException that is not an Exception."""
            self._ran(ticket)
            match _base_exception_of(ticket):
                case "SystemExit":
                    raise SystemExit(f"exit {ticket}")
                case "KeyboardInterrupt":
                    raise KeyboardInterrupt(f"interrupt {ticket}")
                case "GeneratorExit":
                    raise GeneratorExit(f"closed {ticket}")
            cancelled = anyio.get_cancelled_exc_class()
            if cancelled is asyncio.CancelledError:
                raise asyncio.CancelledError(f"stray {ticket}")
            raise cast("Any", cancelled)._create()  # trio's Cancelled: no public constructor

        def probe_stuck(ticket: str) -> str:
            """Block the worker thread until the example ends."""
            self._ran(ticket)
            self._unstick.wait()
            return "too late"

        async def probe_guarded(ticket: str) -> str:
            """Run only once approved."""
            self._ran(ticket)
            return f"guarded {ticket}"

        async def probe_unsendable(ticket: str) -> object:
            """Return what cannot be sent to the model."""
            self._ran(ticket)
            if sum(map(ord, ticket)) % 2:
                cyclic: list[object] = []
                cyclic.append(cyclic)
                return cyclic
            return {"value": object()}

        return [
            tool(probe_ok),
            tool(probe_raise),
            tool(probe_slow),
            tool(probe_timeout, timeout=PROBE_TIMEOUT),
            tool(probe_typed, blocking=False),
            tool(probe_exit),
            tool(probe_stuck, timeout=PROBE_TIMEOUT),
            tool(probe_unsendable),
            tool(probe_guarded, needs_approval=True),
        ]

    # -- the agent's side ---------------------------------------------------------------

    def _allocation_fails(self, key: ThreadKey) -> bool:
        model = self._latest.get(key.thread_id)
        if model is None:
            return False
        index = model.allocations
        model.allocations += 1
        return model.plan.run_at(index).kind is RunKind.alloc_fails

    def _dispose_raises(self, key: ThreadKey) -> bool:
        model = self._latest.get(key.thread_id)
        return model is not None and model.plan.dispose_raises

    def _respond(self, key: ThreadKey, run_input: RunAgentInput) -> list[Step]:
        try:
            return self._script(key, run_input)
        except Exception as exc:  # a bug of the machine itself: make it loud
            self._problems.append(f"the machine's responder failed: {exc!r}")
            raise

    def _model_of(self, run_input: RunAgentInput) -> _TurnModel:
        """The turn a run belongs to: a continuation's by its parent run; a first run's
        by its resume entries (their payload names the turn) or its last user message."""
        parent = run_input.parent_run_id
        if isinstance(parent, str):
            return self._records[parent].model
        resume = run_input.resume
        if isinstance(resume, list) and resume:
            return self._models[int(resume[0].payload["turn"]) - 1]
        users = [m for m in run_input.messages if isinstance(m, UserMessage)]
        return next(m for m in self._models if users and f"user-{m.ordinal}" == users[-1].id)

    def _script(self, key: ThreadKey, run_input: RunAgentInput) -> list[Step]:
        model = self._model_of(run_input)
        index = model.runs_started
        model.runs_started += 1
        plan = model.plan.run_at(index)
        parent = run_input.parent_run_id
        record = _RunRecord(
            model,
            index,
            run_input.run_id,
            parent if isinstance(parent, str) else None,
            plan,
        )
        model.runs.append(record)
        self._records[run_input.run_id] = record
        prefix = f"T{model.ordinal}R{index}"
        thread_id, run_id = run_input.thread_id, run_input.run_id
        # Our own RUN_STARTED, so that the envelope never adds one (a duplicate below
        # is then always a second one).
        steps: list[Step] = [RunStartedEvent(thread_id=thread_id, run_id=run_id)]

        text_id: str | None = None
        if plan.text is not None:
            text_id = f"{prefix}M"
            mark = _Mark()
            text_events = text(plan.text, id=text_id, chunk=plan.text_chunk)
            if plan.cut and not plan.calls:
                text_events.pop()  # the stream breaks mid-message: no TEXT_MESSAGE_END
            steps.extend(text_events)
            steps.append(_gate(mark))
            record.texts.append((text_id, plan.text, mark))
        if plan.gated:
            hold = record.stream_hold = _Hold(f"{prefix}G")
            self._stream_holds[hold.name] = hold
            steps.append(_gate(hold))

        executes = (
            plan.kind is RunKind.tools
            and index < self.max_depth
            and index != model.plan.no_progress_at(self.max_depth, self.max_repeated_calls)
        )
        call_ids: list[str] = []
        per_call: list[list[Event]] = []
        for number, call in enumerate(plan.calls):
            call_id = f"{prefix}C{number}"
            call_ids.append(call_id)
            name, arguments = self._call_target(call, call_id)
            per_call.append(
                tool_call(name, arguments, id=call_id, parent_message_id=text_id, chunk=call.chunk)
            )
            if executes:
                record.calls[call_id] = call
                if call.outcome is CallOutcome.slow:
                    self._tool_holds[call_id] = _Hold(call_id)
            else:
                record.never_run.add(call_id)
        if plan.interleaved:
            starts = [events[0] for events in per_call]
            ends = [events[-1] for events in per_call]
            middles = [events[1:-1] for events in per_call]
            interleaved = [e for group in itertools.zip_longest(*middles) for e in group if e]
            call_events: list[Event] = [*starts, *interleaved, *ends]
        else:
            call_events = [e for events in per_call for e in events]
        cut_call: str | None = None
        last = call_events[-1] if call_events else None
        if plan.cut and isinstance(last, ToolCallEndEvent):
            call_events.pop()
            cut_call = last.tool_call_id
        steps.extend(call_events)

        if plan.malformed:
            steps.extend(self._malformed(record, prefix, call_ids, thread_id, run_id))
            record.malformed_mark = _Mark()
            steps.append(_gate(record.malformed_mark))
            violating = _VIOLATING.intersection(plan.malformed)
            if cut_call is not None and cut_call == call_ids[0]:
                # The cut took the first call's END away, so the "duplicate" END sent
                # for it is its only one: nothing wrong with it.
                violating -= {Malformation.duplicate_end}
            record.expects_violation = bool(violating)

        late: list[Step] = []
        if Malformation.events_after_finish in plan.malformed:
            record.late_text_id = f"{prefix}L"
            late_call = f"{prefix}LC"
            record.never_run.add(late_call)
            late = [
                *text("too late", id=record.late_text_id),
                *tool_call("probe_ok", {"ticket": late_call}, id=late_call),
            ]
        match plan.kind:
            case RunKind.answer | RunKind.tools:
                steps.append(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
                steps.extend(late)
            case RunKind.interrupts:
                record.interrupts = tuple(
                    Interrupt(
                        id=f"{prefix}I{number}",
                        reason="probe_approval",
                        message=f"May I? ({prefix}, {number})",
                        tool_call_id=call_ids[0] if call_ids and number == 0 else None,
                    )
                    for number in range(plan.asks)
                )
                steps.append(run_interrupted(thread_id, run_id, *record.interrupts))
                steps.extend(late)
            case RunKind.agent_cancels:
                steps.append(run_cancelled(thread_id, run_id))
                steps.extend(late)
            case RunKind.run_error:
                steps.append(RunErrorEvent(message="scripted run error", code="scripted"))
                steps.extend(late)
            case RunKind.breaks:
                steps.append(Raise(RuntimeError("the scripted stream broke")))
            case RunKind.drops:
                steps.append(Raise(StreamDroppedError("the scripted connection dropped")))
            case RunKind.hangs:
                record.hang_mark = _Mark()
                steps.extend([_gate(record.hang_mark), Hang()])
            case RunKind.alloc_fails:  # pragma: no cover - allocation failed before
                self._problems.append(f"{model.label}: a run whose allocation fails streamed")
        return steps

    def _call_target(self, call: CallPlan, call_id: str) -> tuple[str, dict[str, Any]]:
        match call.outcome:
            case CallOutcome.ok:
                return "probe_ok", {"ticket": call_id}
            case CallOutcome.raises:
                return "probe_raise", {"ticket": call_id}
            case CallOutcome.slow:
                return "probe_slow", {"ticket": call_id}
            case CallOutcome.timeout:
                return "probe_timeout", {"ticket": call_id}
            case CallOutcome.unknown:
                return "probe_missing", {"ticket": call_id}
            case CallOutcome.invalid:
                return "probe_typed", {"ticket": call_id, "n": "not a number"}
            case CallOutcome.raises_base:
                return "probe_exit", {"ticket": call_id}
            case CallOutcome.stuck:
                return "probe_stuck", {"ticket": call_id}
            case CallOutcome.unsendable:
                return "probe_unsendable", {"ticket": call_id}
            case CallOutcome.approval:
                return "probe_guarded", {"ticket": call_id}
            case CallOutcome.user:
                assert call.tool is not None
                return call.tool, dict(call.arguments or {})
        raise AssertionError(call.outcome)  # pragma: no cover

    def _malformed(
        self,
        record: _RunRecord,
        prefix: str,
        call_ids: list[str],
        thread_id: str,
        run_id: str,
    ) -> list[Step]:
        steps: list[Step] = []
        for number, malformation in enumerate(record.plan.malformed):
            fresh = f"{prefix}X{number}"
            match malformation:
                case Malformation.args_for_unknown_call:
                    steps.append(ToolCallArgsEvent(tool_call_id=fresh, delta="{}"))
                case Malformation.duplicate_start:
                    call = record.plan.calls[0]
                    name, _ = self._call_target(call, call_ids[0])
                    steps.append(ToolCallStartEvent(tool_call_id=call_ids[0], tool_call_name=name))
                case Malformation.duplicate_end:
                    steps.append(ToolCallEndEvent(tool_call_id=call_ids[0]))
                case Malformation.content_without_start:
                    mark = _Mark()
                    steps.append(TextMessageContentEvent(message_id=fresh, delta="orphan"))
                    steps.append(_gate(mark))
                    record.texts.append((fresh, "orphan", mark))
                case Malformation.end_for_unknown_message:
                    steps.append(TextMessageEndEvent(message_id=fresh))
                case Malformation.unknown_event_type:
                    raw = b'{"type":"X_VENDOR_EVENT","value":1}'
                    steps.append(UnknownEvent(type="X_VENDOR_EVENT", raw=raw))
                case Malformation.duplicate_run_started:
                    steps.append(RunStartedEvent(thread_id=thread_id, run_id=run_id))
                case Malformation.result_for_unknown_call:
                    steps.append(
                        ToolCallResultEvent(message_id=f"{fresh}R", tool_call_id=fresh, content="?")
                    )
                case Malformation.call_without_end:
                    record.never_run.add(fresh)
                    steps.extend(tool_call("probe_ok", {"ticket": fresh}, id=fresh)[:-1])
                case Malformation.events_after_finish:
                    pass  # added after the run's last event
        return steps

    # -- running steps in the portal --------------------------------------------------

    def _call(self, func: Callable[[], Awaitable[T]]) -> T:
        """Run ``func`` in the engine's event loop, then wait until quiet."""

        async def act_then_settle() -> T:
            result = await self._bounded(func, "a user action")
            await self._settle()
            return result

        try:
            return self._portal.call(act_then_settle)
        except BaseException:
            self._failed = True
            raise

    def _check(self, func: Callable[[], None]) -> None:
        """Run a check in the engine's event loop (nothing moves meanwhile: it is quiet)."""
        try:
            self._portal.call(func)
        except BaseException:
            self._failed = True
            raise

    async def _watch(self, model: _TurnModel) -> None:
        assert model.turn is not None
        await model.turn.wait_finished()
        model.done = True

    def _parked(self, model: _TurnModel) -> bool:
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
        A stall (see :class:`_Stall`) or :attr:`quiet_timeout` is a stuck turn: a failure.
        """
        stall = _Stall(self)
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
            stall = _Stall(self)
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

    def _engine(self) -> Engine:
        assert self.engine is not None
        return self.engine

    # -- rules ----------------------------------------------------------------------------

    @initialize(data=st.data())
    def first_turns(self, data: st.DataObject) -> None:
        """Every program starts with a turn on ``t0`` and one on ``t1``."""
        self._send("t0", data.draw(self._plans, label="plan"))
        self._send("t1", data.draw(self._plans, label="plan"))

    # Rule order matters to Hypothesis (it favours rules with fewer arguments, then by
    # name): ``send`` is the one-argument rule that is always enabled before close.

    @precondition(lambda self: not self._closed)
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        """The user sends a message on a thread; a live turn there is superseded."""
        thread = data.draw(st.sampled_from(THREADS), label="thread")
        self._send(thread, data.draw(self._plans, label="plan"))

    @precondition(lambda self: not self._closed and bool(self._live))
    @rule(data=st.data())
    def resend(self, data: st.DataObject) -> None:
        """The user sends again on a thread whose turn is live (promise 5: supersede)."""
        thread = data.draw(st.sampled_from(self._live), label="thread")
        self._send(thread, data.draw(self._plans, label="plan"))

    def _send(
        self,
        thread: str,
        plan: TurnPlan,
        *,
        resume: tuple[ResumeEntry, ...] = (),
        message: bool = True,
    ) -> None:
        ordinal = len(self._models) + 1
        model = _TurnModel(
            ordinal, thread, plan, plan.expected_end(self.max_depth, self.max_repeated_calls)
        )
        model.resume = resume

        async def act() -> None:
            engine = self._engine()
            previous = engine.turn(thread)
            was_live = previous is not None and not previous.finished
            self._models.append(model)
            self._latest[thread] = model
            text = UserMessage(id=f"user-{ordinal}", content=f"message {ordinal}")
            model.turn = engine.start_turn(thread, text if message else None, resume=resume)
            if was_live:
                assert previous is not None
                old = next(m for m in self._models if m.turn is previous)
                old.external = ReasonKind.SUPERSEDED
                assert previous.status is RunStatus.superseded, (
                    f"promise 5: re-sending on {thread} left {old.label} {previous.status}"
                )
            assert self._group is not None
            self._group.start_soon(self._watch, model)

        self._call(act)

    @precondition(lambda self: not self._closed and bool(self._interrupted))
    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        """The user answers the interrupts of a thread whose turn ended ``interrupted``:
        one resume entry per interrupt, in a new turn (with or without a message). A
        wrong answer (an unknown id, one answered twice, one left out) is refused with
        ``ResumeError`` before anything changes."""
        thread = data.draw(st.sampled_from(self._interrupted), label="thread")
        read: list[tuple[Turn, tuple[Interrupt, ...] | None]] = []

        def read_thread() -> None:
            engine = self._engine()
            turn = engine.turn(thread)
            assert turn is not None and turn.status is RunStatus.interrupted, turn
            read.append((turn, engine.open_interrupts(thread)))

        self._check(read_thread)
        [(turn, open_interrupts)] = read
        assert open_interrupts == turn.interrupts, (open_interrupts, turn.interrupts)
        ordinal = len(self._models) + 1
        entries = [
            ResumeEntry(
                interrupt_id=interrupt.id,
                status=data.draw(st.sampled_from(["resolved", "cancelled"]), label="status"),
                payload={"turn": ordinal},
            )
            for interrupt in turn.interrupts
        ]
        mistakes = ["unknown", "twice"] + (["left_out"] if len(entries) > 1 else [])
        mistake = data.draw(st.none() | st.sampled_from(mistakes), label="mistake")
        hypothesis.event("answer", mistake or "resumed")  # for --hypothesis-show-statistics
        if mistake is None:
            self._send(
                thread,
                data.draw(self._plans, label="plan"),
                resume=tuple(entries),
                message=data.draw(st.booleans(), label="with a message"),
            )
            return
        if mistake == "unknown":
            entries.append(ResumeEntry(interrupt_id="no-such-interrupt", status="resolved"))
        elif mistake == "twice":
            entries.append(entries[0])
        else:
            entries.pop()

        async def act() -> None:
            engine = self._engine()
            models = len(self._models)
            try:
                engine.start_turn(thread, resume=entries)
            except ResumeError as error:
                problem = {
                    "unknown": error.unknown,
                    "twice": error.duplicated,
                    "left_out": error.unanswered,
                }[mistake]
                assert problem, f"{mistake}: {error}"
            else:
                raise AssertionError(f"a resume with a {mistake} entry was accepted")
            assert engine.turn(thread) is turn, "a refused resume changed the thread's turn"
            assert len(self._models) == models

        self._call(act)

    @rule(data=st.data(), message=st.sampled_from(["stop", "cancelled by the user"]))
    def cancel(self, data: st.DataObject, message: str) -> None:
        """The user cancels a thread's turn, live (streaming, parked on a gate, executing
        tools) or not (promise 4: a live one ends ``cancelled`` at once, with the
        user's message; ``cancel`` says whether it was live)."""
        # Live threads first: Hypothesis favours the first choices.
        thread = data.draw(st.sampled_from((*self._live, *THREADS)), label="thread")

        async def act() -> None:
            engine = self._engine()
            turn = engine.turn(thread)
            live = turn is not None and not turn.finished
            cancelled = engine.cancel(thread, message)
            assert cancelled == live, f"cancel({thread}) returned {cancelled}, live={live}"
            if cancelled:
                assert turn is not None
                model = self._latest[thread]
                model.external = ReasonKind.CANCELLED
                assert turn.status is RunStatus.cancelled, (
                    f"promise 4: {model.label} is {turn.status} right after cancel()"
                )
                assert turn.reason is not None and turn.reason.message == message, turn.reason

        self._call(act)

    @rule(thread=st.none() | st.sampled_from(THREADS), fresh_view=st.booleans())
    def focus(self, thread: str | None, fresh_view: bool) -> None:
        """The UI shows ``thread`` (or nothing). With ``fresh_view``, a view subscribed
        just before sees the thread's current state at once (promise 6: background
        turns are visible when focused)."""

        async def act() -> None:
            self._check_focused_notifications()
            engine = self._engine()
            view = engine.subscribe(focused_only=True) if fresh_view else None
            snapshot = engine.focus(thread)
            self._focus = thread
            state = None if thread is None else engine.state(thread)
            assert snapshot == state, (
                f"promise 6: focus({thread}) returned {snapshot}, the thread's state is {state}"
            )
            if view is not None:
                seen = _drain(view)
                await view.aclose()
                expected = [] if state is None or self._closed else [state]
                shown = [n.snapshot for n in seen if isinstance(n, StateChanged)]
                assert shown == expected, f"promise 6: focusing {thread} showed {shown}"

        self._call(act)

    @precondition(lambda self: bool(self._held))
    @rule(data=st.data())
    def release_one(self, data: st.DataObject) -> None:
        """Open one gate a stream or a slow tool waits on."""
        name = data.draw(st.sampled_from(self._held), label="gate")

        async def act() -> None:
            hold = self._stream_holds.get(name) or self._tool_holds[name]
            hold.set()

        self._call(act)

    @precondition(lambda self: bool(self._awaiting))
    @rule(data=st.data(), approve=st.booleans())
    def decide(self, data: st.DataObject, approve: bool) -> None:
        """Approve or deny one call that awaits approval (a tool policy)."""
        thread, call_id = data.draw(st.sampled_from(self._awaiting), label="call")

        async def act() -> None:
            turn = self._engine().turn(thread)
            assert turn is not None
            if approve:
                turn.approve(call_id)
            else:
                turn.deny(call_id, f"denied {call_id}")
            self._decisions[call_id] = approve
            assert call_id not in {a.id for a in turn.approvals}

        self._call(act)

    @precondition(lambda self: bool(self._held))
    @rule()
    def release_all(self) -> None:
        """Open every gate."""

        async def act() -> None:
            for hold in (*self._stream_holds.values(), *self._tool_holds.values()):
                hold.set()

        self._call(act)

    @precondition(lambda self: not self._closed and len(self._models) >= 4)
    @rule()
    def close(self) -> None:
        """Close the engine: every live turn ends ``cancelled`` (reason ``closed``)."""

        async def act() -> None:
            for model in self._models:
                assert model.turn is not None
                if not model.turn.finished:
                    model.external = ReasonKind.CLOSED
            await self._engine().aclose()
            self._closed = True
            for model in self._models:
                assert model.turn is not None
                assert model.turn.finished, f"promise 1: {model.label} live after aclose()"

        self._call(act)

    @precondition(lambda self: self._closed)
    @rule(thread=st.sampled_from(THREADS))
    def send_after_close(self, thread: str) -> None:
        """Sending on a closed engine is a typed error that changes nothing."""

        async def act() -> None:
            try:
                self._engine().start_turn(thread, "too late")
            except ClosedError:
                return
            raise AssertionError("start_turn on a closed engine did not raise ClosedError")

        self._call(act)

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def no_machine_problems(self) -> None:
        """Problems noticed while the engine ran (dispose order, the responder)."""
        assert not self._problems, self._problems

    @invariant()
    def every_path_ends_in_a_terminal_state(self) -> None:
        """Promise 1."""

        def check() -> None:
            for model in self._models:
                turn = model.turn
                assert turn is not None
                stats = turn.statistics()
                if turn.finished:
                    assert turn.status.is_final and turn.reason is not None, model.label
                    assert model.done, f"promise 1: {model.label} is final but its task runs"
                    open_calls = {s: n for s, n in stats.tool_calls.items() if not s.is_final and n}
                    assert not open_calls, f"promise 1: {model.label} has open calls {open_calls}"
                    assert not turn.tool_calls, f"promise 1: {model.label} kept {turn.tool_calls}"
                else:
                    assert turn.status.is_running, f"{model.label} is {turn.status} once quiet"
                    assert self._parked(model), f"promise 1: {model.label} is not parked"
                    if turn.status is RunStatus.executing_tools:
                        wrong = [
                            c
                            for c in turn.tool_calls
                            if c.status in (ToolCallStatus.streaming, ToolCallStatus.pending)
                        ]
                        assert not wrong, f"promise 1: {model.label} executing with {wrong}"
                for call in turn.abandoned_calls:
                    assert call.status is ToolCallStatus.failed, f"{model.label}: {call}"
                    assert call.result is not None, f"{model.label}: {call} has no result"
            for key in THREADS:
                conversation = self._engine().conversation(key)
                if conversation is not None:
                    for call in conversation.tool_calls():
                        assert call.status.is_final, f"promise 1: {key} committed {call}"

        self._check(check)

    @invariant()
    def turns_end_as_their_plan_says(self) -> None:
        """The model: every turn ends as its plan (or the user) says; promises 3, 4, 5."""

        def check() -> None:
            for model in self._models:
                turn = model.turn
                assert turn is not None
                reason = turn.reason
                if reason is not None:
                    assert reason.kind is not ReasonKind.INTERNAL_ERROR, (
                        f"{model.label} ended with an internal error: {reason}"
                    )
                if reason is not None and not model.reported:
                    model.reported = True
                    endings.append(f"{turn.status.value} ({reason.kind.value})")
                if model.external is ReasonKind.SUPERSEDED:
                    assert turn.status is RunStatus.superseded, f"{model.label}: {turn!r}"
                elif model.external is ReasonKind.CANCELLED:
                    assert turn.status is RunStatus.cancelled, f"promise 4: {model.label}: {turn!r}"
                    assert reason is not None and reason.kind is ReasonKind.CANCELLED, reason
                elif model.external is ReasonKind.CLOSED:
                    assert turn.status is RunStatus.cancelled, f"{model.label}: {turn!r}"
                    assert reason is not None and reason.kind is ReasonKind.CLOSED, reason
                elif model.expected is None:
                    assert not turn.finished, (
                        f"{model.label} should hang until ended from outside, ended {reason}"
                    )
                elif turn.finished:
                    assert reason is not None and reason.kind is model.expected, (
                        f"{model.label} with {model.plan} ended {reason}, "
                        f"expected {model.expected.value}"
                    )
                    expected_status = {
                        ReasonKind.COMPLETED: RunStatus.completed,
                        ReasonKind.INTERRUPTED: RunStatus.interrupted,
                        ReasonKind.AGENT_CANCELLED: RunStatus.cancelled,
                    }.get(model.expected, RunStatus.failed)
                    assert turn.status is expected_status, f"{model.label}: {turn!r}"
                asked = model.runs[-1].interrupts if turn.status is RunStatus.interrupted else ()
                assert turn.interrupts == asked, f"{model.label} exposes {turn.interrupts}"
                assert turn.snapshot().interrupts == asked, f"{model.label}: {turn.snapshot()}"
            self._check_open_interrupts()

        endings: list[str] = []
        self._check(check)
        for ending in endings:  # for --hypothesis-show-statistics
            hypothesis.event("turn ended", ending)

    def _check_open_interrupts(self) -> None:
        """The engine's open interrupts per thread follow the turns: those of the last
        turn that ended ``interrupted``, until one ends ``completed`` or
        ``interrupted``; a turn that ended otherwise changes nothing."""
        engine = self._engine()
        for key in THREADS:
            expected: tuple[Interrupt, ...] | None = None
            for model in self._models:
                turn = model.turn
                if model.key != key or turn is None:
                    continue
                if turn.status is RunStatus.interrupted:
                    expected = turn.interrupts
                elif turn.status is RunStatus.completed:
                    expected = ()
            assert engine.open_interrupts(key) == expected, (
                f"{key}: open interrupts {engine.open_interrupts(key)}, expected {expected}"
            )

    @invariant()
    def continuation_depth_is_bounded(self) -> None:
        """Promise 3."""

        def check() -> None:
            for model in self._models:
                turn = model.turn
                assert turn is not None
                assert turn.depth <= self.max_depth, f"promise 3: {model.label} depth {turn.depth}"
                assert len(model.runs) <= self.max_depth + 1, (
                    f"promise 3: {model.label} streamed {len(model.runs)} runs"
                )
                reason = turn.reason
                if reason is not None and reason.kind is ReasonKind.MAX_DEPTH:
                    assert turn.status is RunStatus.failed, f"promise 3: {turn!r}"
                    assert turn.depth == self.max_depth, f"promise 3: {turn!r} tripped early"
                if reason is not None and reason.kind is ReasonKind.NO_PROGRESS:
                    assert turn.status is RunStatus.failed, f"loop detection: {turn!r}"
                    stops_at = model.plan.no_progress_at(self.max_depth, self.max_repeated_calls)
                    assert turn.depth == stops_at, f"loop detection: {turn!r} at {stops_at}"
                if model.plan.endless and turn.finished and model.external is None:
                    # The breaker stops an endless loop, or loop detection first when the
                    # agent repeats itself.
                    assert reason is not None and reason.kind in (
                        ReasonKind.MAX_DEPTH,
                        ReasonKind.NO_PROGRESS,
                    ), f"promise 3: the endless {model.label} ended {reason}"

        self._check(check)

    @invariant()
    def cancelled_turns_end_cancelled(self) -> None:
        """Promise 4 (a cancelled turn stays cancelled; its task finished)."""

        def check() -> None:
            for model in self._models:
                if model.external in (ReasonKind.CANCELLED, ReasonKind.CLOSED):
                    assert model.turn is not None
                    assert model.turn.status is RunStatus.cancelled, f"promise 4: {model.label}"
                    assert model.done, f"promise 4: {model.label}'s task did not finish promptly"

        self._check(check)

    @invariant()
    def one_registered_run_per_thread(self) -> None:
        """Promise 5: the registry holds the live turns' current runs, and only those."""

        def check() -> None:
            engine = self._engine()
            registry = engine.registry
            self._check_lifecycle_events()
            if registry.closed:
                assert self._closed, "the registry closed before the engine"
                return
            live = 0
            for key in THREADS:
                turn = engine.turn(key)
                handle = registry.get_handle(ThreadKey(key))
                if turn is None or turn.finished:
                    assert handle is None, f"promise 5: {key}'s turn ended, {handle} registered"
                    continue
                live += 1
                assert handle is not None, f"promise 5: live {turn!r} has no registered run"
                assert handle.run_id == turn.run_id, (
                    f"promise 5: {key} registers {handle.run_id}, its turn runs {turn.run_id}"
                )
                assert handle.depth == turn.depth, f"promise 5: {handle} vs {turn!r}"
                assert not handle.disposed, f"promise 5: registered {handle} is disposed"
            assert len(registry) == live, f"promise 5: {len(registry)} runs for {live} live turns"
            assert engine.statistics().registered_runs == live

        self._check(check)

    def _check_lifecycle_events(self) -> None:
        for event in _drain(self._lifecycle_sub):
            record = self._records.get(event.run_id)
            assert record is not None, f"promise 5: {event} for a run that never streamed"
            label = f"{record.model.label}, run {record.index}"
            match event:
                case RunStarted():
                    assert record.index == 0, f"promise 5: continuation {label} sent RunStarted"
                    kind = "started"
                case RunContinued(previous_run_id=previous):
                    assert record.index > 0, f"promise 5: first run {label} sent RunContinued"
                    assert previous == record.parent_run_id, f"promise 5: {event} ({label})"
                    kind = "continued"
                case RunCompleted(status=status):
                    turn = record.model.turn
                    assert turn is not None and status == turn.status.value, (
                        f"promise 5: {event} but {turn!r}"
                    )
                    kind = "completed"
            seen = self._lifecycle_seen.get(event.run_id, "")
            assert kind not in seen, f"promise 5: {event} twice"
            self._lifecycle_seen[event.run_id] = seen + kind

    @invariant()
    def background_turns_never_steal_focus(self) -> None:
        """Promise 6."""

        def check() -> None:
            engine = self._engine()
            expected = None if self._focus is None else ThreadKey(self._focus)
            assert engine.focused == expected, (
                f"promise 6: focus is {engine.focused}, only the focus rule set {expected}"
            )
            self._check_focused_notifications()
            self._check_thread_views()

        self._check(check)

    def _check_focused_notifications(self) -> None:
        for notification in _drain(self._focused_sub):
            assert self._focus is not None and notification.key == ThreadKey(self._focus), (
                f"promise 6: a focused-only subscriber heard {notification} "
                f"while {self._focus} was focused"
            )

    def _turn_of_run(self, run_id: str | None) -> int | None:
        record = self._records.get(run_id or "")
        return None if record is None else record.model.ordinal

    def _check_thread_views(self) -> None:
        """Per thread, what a subscriber sees follows the run lifecycle: turns in order,
        never a running state after a final one of the same turn."""
        for notification in _drain(self._all_sub):
            key = notification.key.thread_id
            view = self._views.setdefault(key, [])
            if isinstance(notification, EventReceived):
                continue
            if isinstance(notification, ToolCallFinished):
                owner = next(
                    (r for r in self._records.values() if notification.call_id in r.calls), None
                )
                assert owner is not None, (
                    f"promises 1/3/7: {notification.call_id} ran, but it had to be abandoned, "
                    "or came past the depth bound or after the run's end"
                )
                current = max((o for o, _ in view if o is not None), default=0)
                assert owner.model.ordinal >= current, (
                    f"promise 5: {notification} of {owner.model.label} after a newer turn"
                )
                continue
            assert isinstance(notification, StateChanged)
            snapshot = notification.snapshot
            ordinal = self._turn_of_run(snapshot.run_id)
            if snapshot.status is RunStatus.idle:
                ordinal = next(
                    m.ordinal
                    for m in self._models
                    if m.key == key and m.ordinal > max((o or 0 for o, _ in view), default=0)
                )
            if ordinal is not None:
                newest = max((o for o, _ in view if o is not None), default=0)
                assert ordinal >= newest, (
                    f"promise 6: {key} showed turn #{ordinal} ({snapshot.status}) after "
                    f"turn #{newest}: {view}"
                )
                previous = [s for o, s in view if o == ordinal]
                if previous and previous[-1].is_final:
                    assert snapshot.status == previous[-1], (
                        f"promise 6: turn #{ordinal} on {key} flashed {previous[-1]} then "
                        f"{snapshot.status}"
                    )
            view.append((ordinal, snapshot.status))

    @invariant()
    def continuations_carry_every_result(self) -> None:
        """Promise 2."""

        def check() -> None:
            inputs = self.agent.inputs
            for run_input in inputs[self._inputs_checked :]:
                self._check_continuation(run_input)
            self._inputs_checked = len(inputs)
            expected_once: dict[str, int] = {}
            for record in self._records.values():
                for call_id in record.calls:
                    expected_once[call_id] = 1
                for call_id in record.never_run:
                    assert call_id not in self._executed, (
                        f"promise 7: {record.model.label} executed {call_id}, which it "
                        "had to abandon or never process"
                    )
            for ticket, count in self._executed.items():
                assert ticket in expected_once, f"a call nobody asked for ran: {ticket}"
                assert count == 1, f"promise 2: {ticket} ran {count} times"
            for model in self._models:
                turn = model.turn
                assert turn is not None
                if turn.status is RunStatus.executing_tools:
                    waiting = [
                        c
                        for c in turn.tool_calls
                        if not c.status.is_final
                        and c.status is not ToolCallStatus.awaiting_approval
                        and c.id not in self._tool_holds
                    ]
                    assert not waiting, f"promise 2: {model.label} runs calls one by one: {waiting}"
                for approval in turn.approvals:
                    assert approval.id not in self._executed, (
                        f"tool policy: {model.label} ran {approval.id} before its approval"
                    )
            for call_id, approved in self._decisions.items():
                if not approved:
                    assert call_id not in self._executed, f"tool policy: denied {call_id} ran"

        self._check(check)

    def _check_continuation(self, run_input: RunAgentInput) -> None:
        parent = run_input.parent_run_id
        record = self._records[run_input.run_id]
        sent = run_input.resume
        if record.index == 0:
            expected = list(record.model.resume) if record.model.resume else msgspec.UNSET
            assert sent == expected, (
                f"{record.model.label}'s first run carried resume={sent}, not {expected}"
            )
        else:
            assert sent is msgspec.UNSET, (
                f"{record.model.label}'s continuation {record.index} repeats resume={sent}"
            )
        if not isinstance(parent, str):
            assert record.index == 0, f"{record.model.label}'s run {record.index} has no parent"
            return
        before = self._records.get(parent)
        assert before is not None and before.model is record.model, (
            f"promise 5: the continuation {run_input.run_id} names {parent}"
        )
        assert before.index == record.index - 1 and before.plan.kind is RunKind.tools
        results = {m.tool_call_id: m for m in run_input.messages if isinstance(m, ToolMessage)}
        for call_id, call in before.calls.items():
            message = results.get(call_id)
            assert message is not None, (
                f"promise 2: the continuation of {record.model.label} lacks the result of "
                f"{call_id} ({call.outcome})"
            )
            content = message.content
            assert isinstance(content, str), message
            problem = _outcome_problem(
                call, call_id, content, message.error, self._decisions.get(call_id)
            )
            assert problem is None, f"promise 2: {call_id} ({call.outcome}): {problem}"

    @invariant()
    def received_text_is_kept(self) -> None:
        """Promise 7: bad input is recorded; text already received is never lost."""

        def check() -> None:
            engine = self._engine()
            texts = {
                message.id: message.text
                for key in THREADS
                if (conversation := engine.conversation(key)) is not None
                for message in conversation.texts()
            }
            for record in self._records.values():
                label = f"{record.model.label}, run {record.index}"
                for message_id, expected, mark in record.texts:
                    if mark.reached:
                        assert texts.get(message_id) == expected, (
                            f"promise 7: {label} lost text {message_id!r}: "
                            f"{texts.get(message_id)!r} != {expected!r}"
                        )
                if record.late_text_id is not None:
                    assert record.late_text_id not in texts, (
                        f"{label}: an event after the run's end was processed"
                    )
                malformed = record.malformed_mark
                if malformed is not None and malformed.reached and record.expects_violation:
                    turn = record.model.turn
                    assert turn is not None and turn.violations, (
                        f"promise 7: {label} received {record.plan.malformed}, no violation"
                    )

        self._check(check)


def _outcome_problem(
    call: CallPlan, call_id: str, content: str, error: str | None, approved: bool | None = None
) -> str | None:
    match call.outcome:
        case CallOutcome.ok:
            ok = error is None and content == f"ok {call_id}"
        case CallOutcome.slow:
            ok = error is None and content == f"slow {call_id}"
        case CallOutcome.raises:
            ok = error is not None and f"boom {call_id}" in error
        case CallOutcome.timeout:
            ok = error is not None and "timed out" in error
        case CallOutcome.unknown:
            ok = error is not None and "Unknown tool" in error
        case CallOutcome.invalid:
            ok = error is not None and "Invalid arguments" in error
        case CallOutcome.raises_base:
            ok = error is not None and error.startswith(_base_exception_of(call_id))
        case CallOutcome.stuck:
            # Past ToolOptions.max_threads stuck threads, a blocking call fails at once.
            ok = error is not None and ("timed out" in error or "no worker thread" in error)
        case CallOutcome.unsendable:
            ok = error is not None and "cannot be encoded as JSON" in error
        case CallOutcome.approval:
            # A continuation only starts once every call of the batch has an outcome.
            if approved is None:
                return "a continuation started before the call was approved or denied"
            if approved:
                ok = error is None and content == f"guarded {call_id}"
            else:
                ok = error == f"denied {call_id}"
        case CallOutcome.user:
            ok = True
    return None if ok else f"the model saw content={content!r} error={error!r}"


#: The machine as a ``unittest.TestCase`` (asyncio); pytest collects it where imported.
TestPromises = PromisesMachine.TestCase


def run_promises(
    *,
    examples: int = 100,
    seed: int | None = None,
    backend: str = "asyncio",
    tools: ToolRegistry | None = None,
    max_depth: int = 3,
    steps: int = 30,
    derandomize: bool = False,
    reproduce: str | bytes | None = None,
) -> None:
    """Run :class:`PromisesMachine` and raise on the first counterexample.

    Args:
        examples: How many programs (sequences of steps) to try.
        seed: Make the run reproducible (Hypothesis ``@seed``); ``None`` for a random one.
        backend: The anyio backend ("asyncio" or "trio").
        tools: Your tools, called by the agent beside the machine's own.
        max_depth: The engine's continuation bound.
        steps: The most steps in one program.
        derandomize: Derive the programs from the machine itself (the same ones on
            every run, whatever ``seed``).
        reproduce: The blob of a failure's ``@reproduce_failure`` note: replay that
            very program (same Hypothesis version, same tools and options).

    Raises:
        Exception: The failure of the minimal failing program: an ``AssertionError``
            naming the promise, or the error that broke the engine. Hypothesis
            attaches the program's steps and, as a note, the ``@reproduce_failure``
            blob that replays it.
    """
    registry = tools if tools is not None else ToolRegistry()
    attributes: dict[str, Any] = {
        "backend": backend,
        "max_depth": max_depth,
        "tools": lambda self: registry,
        "__module__": __name__,
    }
    machine = cast("type[PromisesMachine]", type("VerifyPromises", (PromisesMachine,), attributes))
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    if reproduce is not None:
        blob = reproduce.encode("ascii") if isinstance(reproduce, str) else reproduce
        machine = hypothesis.reproduce_failure(hypothesis.__version__, blob)(machine)
    settings = hypothesis.settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=derandomize,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # The explain phase traces every line the engine runs: five times slower to
        # report a failure, for notes that say little about a whole engine.
        phases=[phase for phase in Phase if phase is not Phase.explain],
    )
    run_state_machine_as_test(machine, settings=settings)
