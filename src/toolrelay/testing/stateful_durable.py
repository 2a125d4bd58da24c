"""The stateful suite's crash points: an engine on a durable store, "killed" at any step.

:class:`CrashMachine` is a Hypothesis ``RuleBasedStateMachine`` that drives a real
:class:`~toolrelay.Engine` on a real :class:`~toolrelay.store.SQLiteStore`
file. Its agent plays a plan per turn (rounds of tool calls, then an answer) whose
runs and tools wait on gates the machine opens; its ``crash`` rule kills the engine
where it stands and opens a new one on the same file, which recovers what the log
shows live.

A crash here is what SIGKILL does to a process (``tests/store/test_crash.py`` does
the real thing): from the crash on, the dead engine writes nothing (its store
refuses every write, as a dead process would make none) and runs no new tool (its
tools hang, uncounted). A tool that had started before the crash counts as run.

Rules: ``send`` (a turn on one of three threads, superseding a live one), ``step``
(let the engines' tasks run a few loop iterations), ``release`` (open the gates of
the live engine: streams and tools go on), ``crash``.

Checked after every step: at most one live turn per thread, and the registry holds
exactly their runs (promise 5). Checked at the end, once every gate is open and the
last engine is quiet:

- every turn of the last engine ended, and the store shows no live turn (promise 1);
- per thread, the log's sequence is 1..n with no gap or repeat, and what the log held
  at each crash is a prefix of what it holds at the end (promise 9);
- every call id ran at most once, but for the idempotent tool's calls, which may run
  once per engine they were live in; each call has at most one stored result, and a
  call a recovered turn found running without a result got the "interrupted" error
  unless its tool is idempotent (promise 10);
- every batch the log shows started got a result for each call, unless its turn
  ended before the batch was committed (promise 2).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

import anyio
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from toolrelay._core import ThreadKey, ToolRegistry, tool
from toolrelay._errors import StoreUnavailableError
from toolrelay._machines import RunStatus
from toolrelay._runtime import Engine, Turn
from toolrelay.protocol import RunAgentInput, ToolMessage, UserMessage
from toolrelay.store import (
    Entry,
    MessageSaved,
    Record,
    SQLiteStore,
    Store,
    ToolFinished,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
)
from toolrelay.store._forwarding import ForwardingStore, read_and_append
from toolrelay.store._records import StoredBatch
from toolrelay.testing._builders import text, tool_call
from toolrelay.testing._scripted import Gate, ScriptedAgent, Step

__all__ = ("CrashMachine", "CrashableStore", "TurnPlan")

T = TypeVar("T")

THREADS = ("a", "b", "c")


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What the agent does in one turn: ``rounds`` of tool calls (each a tuple of tool
    names, ``"once"`` or ``"again"``), then an answer; ``hold`` puts a gate in each
    run's stream, before its end."""

    rounds: tuple[tuple[str, ...], ...]
    hold: bool


_plans = st.builds(
    TurnPlan,
    rounds=st.lists(
        st.lists(st.sampled_from(["once", "again"]), min_size=1, max_size=3).map(tuple),
        max_size=2,
    ).map(tuple),
    hold=st.booleans(),
)


#: How long one step of the machine may take before it counts as stuck.
_STEP_SECONDS = 60.0


class CrashableStore(ForwardingStore[Store]):
    """A store that can die: after :meth:`crash` it refuses every write, writing
    nothing (what a killed process leaves on disk is what it wrote before)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.dead = False
        #: Dead, it writes nothing: it settles a cancelled append as the inner store does.
        self.ordered_cancellation: bool = getattr(inner, "ordered_cancellation", False)

    @property
    def inner(self) -> Store:
        """The store that lives on after the crash."""
        return self.store

    def crash(self) -> None:
        self.dead = True

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        if self.dead:
            raise StoreUnavailableError("the process is dead")
        return await self.store.append(key, records, owner=owner)

    async def read_and_append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> tuple[list[Entry], int]:
        """The inner store's (the engine's first write to a thread it loads), or a
        read then an append where the inner store has no such call."""
        if self.dead:
            raise StoreUnavailableError("the process is dead")
        return await read_and_append(self.store, key, records, owner=owner)


class _Generation:
    """One engine's life: its store handle, its gates, whether it is dead."""

    def __init__(self, store: CrashableStore) -> None:
        self.store = store
        self.gate = anyio.Event()
        self.dead = False


class CrashMachine(RuleBasedStateMachine):
    """Crash points for the durable engine (see the module)."""

    #: The event loop the examples run on.
    backend: ClassVar[str] = "asyncio"

    def __init__(self) -> None:
        super().__init__()
        self._exit = ExitStack()
        try:
            folder = self._exit.enter_context(tempfile.TemporaryDirectory())
            self._path = Path(folder) / "toolrelay.db"
            self._portal: BlockingPortal = self._exit.enter_context(
                start_blocking_portal(self.backend)
            )
            self.plans: dict[str, TurnPlan] = {}
            self.executions: Counter[str] = Counter()
            self.crashes: list[dict[str, list[Entry]]] = []
            self.engine: Engine | None = None
            self.generation: _Generation | None = None
            #: Every engine's host task, so that none outlives the example.
            self._hosts: list[Future[None]] = []
            self._start_engine()
        except BaseException:
            self._exit.close()
            raise

    # -- the world --------------------------------------------------------------------

    def _call(self, func: Callable[[], Awaitable[T]]) -> T:
        async def bounded() -> T:
            # A step that does not return is a finding (a stuck turn or store), not a
            # hung suite.
            with anyio.fail_after(_STEP_SECONDS):
                return await func()

        return self._portal.call(bounded)

    def _start_engine(self) -> None:
        generation = _Generation(CrashableStore(SQLiteStore(self._path)))
        self.generation = generation

        async def ran(tag: str) -> str:
            if generation.dead:
                await anyio.sleep_forever()  # a dead process runs nothing
            self.executions[tag] += 1
            await generation.gate.wait()
            return tag

        @tool(name="once")
        async def once(tag: str) -> str:
            """Not idempotent: must never run twice."""
            return await ran(tag)

        @tool(name="again", idempotent=True)
        async def again(tag: str) -> str:
            """Idempotent: may run again after a crash."""
            return await ran(tag)

        def respond(key: ThreadKey, run_input: RunAgentInput) -> list[Step]:
            messages = run_input.messages
            last_user = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
            user = messages[last_user]
            assert isinstance(user, UserMessage) and isinstance(user.content, str)
            plan = self.plans[user.content]
            done = len(
                {
                    m.tool_call_id.rsplit("-", 1)[0]
                    for m in messages[last_user:]
                    if isinstance(m, ToolMessage)
                }
            )
            steps: list[Step] = []
            if plan.hold:
                steps.append(Gate(generation.gate))
            if done < len(plan.rounds):
                for j, name in enumerate(plan.rounds[done]):
                    tag = f"{user.content}.{done}-{j}"
                    steps.extend(tool_call(name, {"tag": tag}, id=tag))
            else:
                steps.extend(text(f"answer to {user.content}"))
            return steps

        agent = ScriptedAgent(respond=respond)
        engine = Engine(
            agent,
            tools=ToolRegistry.of(once, again),
            store=generation.store,
            tool_timeout=None,
            max_depth=5,
        )

        async def host(*, task_status: TaskStatus[anyio.Event] = anyio.TASK_STATUS_IGNORED) -> None:
            # One task holds the engine for its whole life (its task group's scope).
            stop = anyio.Event()
            async with engine:  # recovers what the log shows live
                task_status.started(stop)
                await stop.wait()

        self._host, self._stop = self._portal.start_task(host, name="engine host")
        self._hosts.append(self._host)
        self.engine = engine

    def _stop_engine(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            self._call(engine.aclose)
            self._portal.call(self._stop.set)
            self._host.result(timeout=10)

    def _log(self) -> dict[str, list[Entry]]:
        store = SQLiteStore(self._path)

        async def read() -> dict[str, list[Entry]]:
            try:
                return {t: await store.read(ThreadKey(t)) for t in THREADS}
            finally:
                await store.aclose()

        return self._call(read)

    # -- rules ------------------------------------------------------------------------

    @rule(thread=st.sampled_from(THREADS), plan=_plans)
    def send(self, thread: str, plan: TurnPlan) -> None:
        assert self.engine is not None
        name = f"p{len(self.plans)}"
        self.plans[name] = plan
        engine = self.engine

        async def start() -> None:
            engine.start_turn(thread, name)

        self._call(start)

    @rule(iterations=st.integers(min_value=0, max_value=30))
    def step(self, iterations: int) -> None:
        async def run() -> None:
            for _ in range(iterations):
                await anyio.lowlevel.checkpoint()

        self._call(run)

    @rule()
    def release(self) -> None:
        generation = self.generation
        assert generation is not None

        async def open_gate() -> None:
            generation.gate.set()
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            generation.gate = anyio.Event()  # later runs and tools wait again

        self._call(open_gate)

    @rule()
    def crash(self) -> None:
        generation = self.generation
        assert generation is not None
        generation.store.crash()
        generation.dead = True
        self._stop_engine()
        self.crashes.append(self._log())
        self._start_engine()

    # -- checks ---------------------------------------------------------------------

    @invariant()
    def one_live_turn_per_thread_and_the_registry_holds_their_runs(self) -> None:
        engine = self.engine
        if engine is None:
            return
        live = [engine.turn(t) for t in THREADS]
        running = [t for t in live if t is not None and not t.finished]
        assert len({t.key for t in running}) == len(running)
        handles = [engine.registry.get_handle(t.key) for t in running]
        for turn, handle in zip(running, handles, strict=True):
            if handle is not None:
                assert handle.key == turn.key

    def teardown(self) -> None:
        try:
            if self.engine is not None and self.generation is not None:
                try:
                    self._finish()
                finally:
                    self._stop_engine()
                self._check(self._log())
        finally:
            # A finding (here or in a crash step) may leave an engine's host task
            # running: the portal would wait for it forever on exit.
            for host in self._hosts:
                if not host.done():
                    host.cancel()
            self._exit.close()

    def _finish(self) -> None:
        engine = self.engine
        generation = self.generation
        assert engine is not None and generation is not None

        async def finish() -> None:
            generation.gate.set()
            opened = anyio.Event()
            opened.set()
            generation.gate = opened  # whatever runs from now on goes straight through
            with anyio.fail_after(10):
                for thread in THREADS:
                    turn = engine.turn(thread)
                    if turn is not None:
                        await turn.wait_finished()
                        assert turn.finished

        self._call(finish)
        turns: list[Turn | None] = [engine.turn(t) for t in THREADS]
        for turn in turns:
            if turn is not None:
                assert turn.status in (RunStatus.completed, RunStatus.failed), turn.reason

    def _check(self, log: dict[str, list[Entry]]) -> None:
        store = SQLiteStore(self._path)
        assert self._call(lambda: store.threads(live=True)) == []
        self._call(store.aclose)
        for earlier in self.crashes:
            for thread, entries in earlier.items():
                assert log[thread][: len(entries)] == entries, "a committed record changed"
        results: Counter[str] = Counter()
        for thread, entries in log.items():
            assert [e.seq for e in entries] == list(range(1, len(entries) + 1)), thread
            if entries:
                self._check_turns(thread, [e.record for e in entries], results)
        assert all(count == 1 for count in results.values()), results
        for tag, count in self.executions.items():
            if not self._idempotent(tag):
                assert count <= 1, f"{tag} ran {count} times"
            else:
                assert count <= len(self.crashes) + 1, f"{tag} ran {count} times"

    def _idempotent(self, tag: str) -> bool:
        plan_name, position = tag.split(".", 1)
        round_index, call_index = (int(p) for p in position.split("-"))
        return self.plans[plan_name].rounds[round_index][call_index] == "again"

    def _check_turns(self, thread: str, records: list[Record], results: Counter[str]) -> None:
        started: list[ToolsStarted] = []
        finished: set[str] = set()
        committed: set[str] = set()
        ended: dict[str, TurnEnded] = {}
        turns: list[str] = []
        for record in records:
            match record:
                case TurnStarted():
                    turns.append(record.turn_id)
                case ToolsStarted():
                    started.append(record)
                case ToolFinished(result=result):
                    results[record.call_id] += 1
                    finished.add(record.call_id)
                    if result.error is not None and result.error.startswith("interrupted"):
                        assert not self._idempotent(record.call_id), (
                            f"{record.call_id} is idempotent: it runs again, it is not "
                            "reported interrupted"
                        )
                case MessageSaved(message=StoredBatch(calls=calls)):
                    committed.update(call.id for call in calls)
                case TurnEnded():
                    ended[record.turn_id] = record
                case _:
                    pass
        assert turns, f"thread {thread} has records but no turn"
        assert turns[-1] in ended, f"the last turn on {thread} never ended"
        # A committed call's outcome was stored when it came (the agent here resolves
        # none itself): nothing the model saw is missing from the log.
        assert committed <= finished, f"committed calls {committed - finished} have no result"
        # A turn that completed saw every call of every batch through (promise 2).
        for batch in started:
            if ended.get(batch.turn_id, None) is not None and ended[batch.turn_id].status == (
                "completed"
            ):
                ids = {call.id for call in batch.calls if call.status.value == "executing"}
                assert ids <= finished, f"calls {ids - finished} of a completed turn have no result"
