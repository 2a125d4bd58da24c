"""The machine's ground: the engine on its own loop in a thread, the agent's scripted
answers, and when the engine counts as quiet (see the package docstring)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import ExitStack
from typing import Any, ClassVar, cast

import anyio
from anyio.abc import ObjectReceiveStream, TaskGroup, TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream
from hypothesis.stateful import (
    RuleBasedStateMachine,
)

from toolrelay.backends._base import ThreadKey
from toolrelay.core import ToolRegistry, ToolSpec, tool
from toolrelay.errors import StreamDroppedError
from toolrelay.machines import RunStatus, ToolCallStatus
from toolrelay.protocol import (
    Event,
    Interrupt,
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
    UnknownEvent,
    UserMessage,
)
from toolrelay.runtime import (
    Engine,
    Notification,
    RegistryChange,
)
from toolrelay.testing._builders import run_cancelled, run_interrupted, text, tool_call
from toolrelay.testing._scripted import Hang, Raise, Step
from toolrelay.testing.stateful._doubles import (
    Abort,
    FlakyRegistry,
    Hold,
    Mark,
    PlanAgent,
    RunRecord,
    Stall,
    TurnModel,
    drain,
    gate_of,
)
from toolrelay.testing.stateful._plans import (
    PROBE_PREFIX,
    PROBE_TIMEOUT,
    VIOLATING,
    CallOutcome,
    CallPlan,
    Malformation,
    RunKind,
    T,
    base_exception_of,
    call_plans,
    turn_plans,
)

__all__ = ("MachineBase",)


class MachineBase(RuleBasedStateMachine):
    """What the rules and the invariants stand on: the settings users override, the
    engine's host loop, the scripted agent's answers, and knowing when the engine is
    quiet. :class:`~toolrelay.testing.stateful.PromisesMachine` adds the rules and the
    invariants."""

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
    #: return promptly (promise 4). A busy machine (two cores, load 5) once moved
    #: nothing for just over a second while a probe's worker thread waited for a core.
    stall_timeout: ClassVar[float] = 3.0
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
        self._plans = turn_plans(call_plans(self._user_tools), self.max_depth)
        self._ids = itertools.count(1)
        self._models: list[TurnModel] = []
        self._latest: dict[str, TurnModel] = {}
        self._records: dict[str, RunRecord] = {}
        self._tool_holds: dict[str, Hold] = {}
        self._stream_holds: dict[str, Hold] = {}
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
        self.agent = PlanAgent(self)
        self.engine: Engine | None = None
        self._group: TaskGroup | None = None
        self._stop: anyio.Event | None = None
        self._focused_sub: ObjectReceiveStream[Notification] | None = None
        self._all_sub: ObjectReceiveStream[Notification] | None = None
        self._lifecycle_sub: ObjectReceiveStream[RegistryChange] | None = None
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
            registry=FlakyRegistry(self),
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
                        raise Abort from None  # cancels the stuck turns' tasks
        except* Abort:
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
            match base_exception_of(ticket):
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

    def _model_of(self, run_input: RunAgentInput) -> TurnModel:
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
        record = RunRecord(
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
            mark = Mark()
            text_events = text(plan.text, id=text_id, chunk=plan.text_chunk)
            if plan.cut and not plan.calls:
                text_events.pop()  # the stream breaks mid-message: no TEXT_MESSAGE_END
            steps.extend(text_events)
            steps.append(gate_of(mark))
            record.texts.append((text_id, plan.text, mark))
        if plan.gated:
            hold = record.stream_hold = Hold(f"{prefix}G")
            self._stream_holds[hold.name] = hold
            steps.append(gate_of(hold))

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
                    self._tool_holds[call_id] = Hold(call_id)
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
            record.malformed_mark = Mark()
            steps.append(gate_of(record.malformed_mark))
            violating = VIOLATING.intersection(plan.malformed)
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
                record.hang_mark = Mark()
                steps.extend([gate_of(record.hang_mark), Hang()])
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
        record: RunRecord,
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
                    mark = Mark()
                    steps.append(TextMessageContentEvent(message_id=fresh, delta="orphan"))
                    steps.append(gate_of(mark))
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

    async def _watch(self, model: TurnModel) -> None:
        assert model.turn is not None
        await model.turn.wait_finished()
        model.done = True

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
        stall = Stall(self)
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
            stall = Stall(self)
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

    def _check_focused_notifications(self) -> None:
        for notification in drain(self._focused_sub):
            assert self._focus is not None and notification.key == ThreadKey(self._focus), (
                f"promise 6: a focused-only subscriber heard {notification} "
                f"while {self._focus} was focused"
            )
