"""The machine's ground: its settings, the engine on its own loop in a thread, the
machine's own tools, and running steps there. The agent's answers are
:mod:`._script`'s, knowing when the engine is quiet :mod:`._quiet`'s."""

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
from hypothesis.stateful import (
    RuleBasedStateMachine,
)

from toolrelay._core import ToolRegistry, ToolSpec, tool
from toolrelay._machines import RunStatus
from toolrelay._runtime import (
    Engine,
    Notification,
    RegistryChange,
)
from toolrelay.backends._base import ThreadKey
from toolrelay.testing.stateful._doubles import (
    Abort,
    FlakyRegistry,
    Hold,
    PlanAgent,
    RunRecord,
    TurnModel,
    drain,
)
from toolrelay.testing.stateful._plans import (
    PROBE_PREFIX,
    PROBE_TIMEOUT,
    T,
    base_exception_of,
    call_plans,
    turn_plans,
)
from toolrelay.testing.stateful._quiet import Quiet
from toolrelay.testing.stateful._script import AgentScripts

__all__ = ("MachineBase",)


class MachineBase(AgentScripts, Quiet, RuleBasedStateMachine):
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
        self.agent = PlanAgent(self._respond, self._allocation_fails)
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
            registry=FlakyRegistry(self._dispose_raises, self._problems.append),
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

    def _engine(self) -> Engine:
        assert self.engine is not None
        return self.engine

    def _check_focused_notifications(self) -> None:
        for notification in drain(self._focused_sub):
            assert self._focus is not None and notification.key == ThreadKey(self._focus), (
                f"promise 6: a focused-only subscriber heard {notification} "
                f"while {self._focus} was focused"
            )
