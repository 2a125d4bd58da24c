"""Running tools: one call, and one batch of calls concurrently, each isolated.

The core decides what a call means (:meth:`~toolrelay.ToolSpec.bind` decodes its
arguments, :meth:`~toolrelay.ToolSpec.outcome` reads what came back); this module
runs it: awaits an async tool, runs a blocking one in a worker thread, bounds it
with its timeout.

Promise 2 and 11: the calls of a batch run at once in a task group; one failing,
raising (anything: ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, a
cancellation exception no scope of ours asked for), timing out, being unknown or
returning something that cannot be sent does not affect the others, and every call
gets a result the model will see. A real cancellation is not a tool failure: it
propagates out of the batch (the whole turn is being cancelled). Telling the two
apart: when a tool raises a ``BaseException`` that is not an ``Exception``, we
checkpoint; if a scope around us was cancelled, the checkpoint raises the
cancellation, otherwise the exception was the tool's own.

Blocking tools run in :class:`ToolThreads`: daemon threads, at most ``max_threads``
at once. The timeout counts from the moment a thread runs the tool, never the wait
for one. A tool that outlives its timeout cannot be interrupted (Python has no way
to stop a thread): its thread is abandoned, counted (:attr:`ToolThreads.stuck`,
``Engine.statistics()``) and logged, still holding its slot, so stuck tools can
never take more than ``max_threads`` threads; once every slot is held by a stuck
tool, a blocking call fails at once rather than wait forever. Being daemons, stuck
threads never keep the process from exiting.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import itertools
import logging
import math
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.abc import ObjectReceiveStream

from toolrelay._core import ToolCallInfo, ToolRegistry, ToolResult, ToolSpec
from toolrelay._core._tool_context import ToolContext
from toolrelay._core._tool_result import DEFAULT_MAX_RESULT_BYTES

if TYPE_CHECKING:
    from toolrelay._runtime._tracing import TurnTrace

__all__ = (
    "RunSync",
    "ToolOptions",
    "ToolThreads",
    "execute_batch",
    "execute_batch_with_approvals",
    "execute_tool",
    "running_call",
)

T = TypeVar("T")

#: Where tools' exceptions and stuck threads are logged.
logger = logging.getLogger("toolrelay.tools")


#: The call whose tool runs in the current context: each call of a batch runs in a
#: context of its own (a task's, or a copy in the batch's task), so it is set once per
#: call and never reset.
_RUNNING_CALL: contextvars.ContextVar[ToolCallInfo] = contextvars.ContextVar(
    "toolrelay_running_call"
)


def running_call() -> ToolCallInfo | None:
    """The tool call the engine's executor runs in the current context, or ``None``
    outside one (a tool is not handed its call; a server's client tool reads it here)."""
    return _RUNNING_CALL.get(None)


class RunSync(Protocol):
    """How a blocking function is run off the event loop.

    ``anyio.to_thread.run_sync`` and ``trio.to_thread.run_sync`` both fit.
    """

    def __call__(self, func: Callable[[], T], /) -> Awaitable[T]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOptions:
    """How the engine runs tools, beside their timeout (``Engine(tool_options=...)``).

    Attributes:
        max_result_bytes: The largest result (UTF-8 bytes of the text the model
            sees); a larger one becomes a failure saying so.
        error_text: What the model sees when a tool raises: ``"exception"``,
            ``"<ExceptionType>: <message>"``; ``"generic"``, ``"The tool failed."``
            (a :class:`~toolrelay.ToolError`'s message is always sent: it is
            written for the model). The exception is logged either way and kept on
            the result (:attr:`~toolrelay.ToolResult.exception`).
        max_threads: How many worker threads blocking tools may use at once, stuck
            ones included (see :class:`ToolThreads`).

    Raises:
        ValueError: A bound is not positive, or ``error_text`` is unknown.
    """

    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    error_text: Literal["exception", "generic"] = "exception"
    max_threads: int = 32

    def __post_init__(self) -> None:
        if self.max_result_bytes < 1:
            raise ValueError("max_result_bytes must be >= 1")
        if self.max_threads < 1:
            raise ValueError("max_threads must be >= 1")
        if self.error_text not in ("exception", "generic"):
            raise ValueError('error_text must be "exception" or "generic"')


_DEFAULT_OPTIONS = ToolOptions()


class _NoThread(Exception):
    """Every worker thread is stuck in a tool that timed out."""


@dataclass(slots=True, eq=False)
class _ThreadCall:
    done: anyio.Event
    value: Any = None
    error: BaseException | None = None
    abandoned: bool = False


class ToolThreads:
    """The worker threads blocking tools run in: daemon threads, at most
    ``max_threads`` at once, the stuck ones counted.

    One engine owns one; it belongs to the event loop it is used from.

    Args:
        max_threads: The most threads running tools at once, stuck ones included.
    """

    __slots__ = ("_changed", "_names", "_running", "_stuck", "_stuck_total", "max_threads")

    def __init__(self, max_threads: int = 32) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be >= 1")
        self.max_threads = max_threads
        self._running = 0
        self._stuck = 0
        self._stuck_total = 0
        self._changed: anyio.Event | None = None
        self._names = itertools.count(1)

    @property
    def running(self) -> int:
        """Threads running a tool now, stuck ones included."""
        return self._running

    @property
    def stuck(self) -> int:
        """Threads still running a tool whose call gave up on it (timed out or
        cancelled)."""
        return self._stuck

    @property
    def stuck_total(self) -> int:
        """Threads ever abandoned this way (including those that ended since)."""
        return self._stuck_total

    def _changes(self) -> None:
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    async def _acquire(self) -> None:
        while self._running >= self.max_threads:
            if self._running == self._stuck:
                raise _NoThread(
                    f"no worker thread for a blocking tool: all {self.max_threads} are "
                    "stuck in tools that timed out"
                )
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()
        self._running += 1

    async def run(
        self,
        func: Callable[[], T],
        scope: anyio.CancelScope,
        timeout: float | None,  # noqa: ASYNC109 - it starts once a thread is free
        name: str,
    ) -> T:
        """Run ``func`` in a thread of its own, waiting for it inside ``scope``, whose
        ``timeout`` starts only once a thread is free.

        Raises:
            BaseException: What ``func`` raised; ``_NoThread`` when every thread is
                stuck; the cancellation when ``scope`` or a scope around it is
                cancelled (the thread is then abandoned).
        """
        await self._acquire()
        _arm(scope, timeout)
        token = anyio.lowlevel.current_token()
        call = _ThreadCall(anyio.Event())

        def finish() -> None:  # on the event loop
            self._running -= 1
            if call.abandoned:
                self._stuck -= 1
            call.done.set()
            self._changes()

        def work() -> None:
            _claim_thread(token)
            try:
                call.value = func()
            except BaseException as exc:
                call.error = exc
            try:
                anyio.from_thread.run_sync(finish, token=token)
            except BaseException:
                pass  # the event loop is gone: no one waits for this thread

        trio_token = _trio_token(token)
        if trio_token is not None:
            # Trio's own worker threads (daemons too), so that the tool may call
            # trio.from_thread / anyio.from_thread without a token; the slots are
            # ours, trio's limiter must not bound them a second time.
            import trio

            limiter = trio.CapacityLimiter(math.inf)
            try:
                with scope:
                    await trio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=limiter)
                    await call.done.wait()
            finally:
                self._given_up(call, name)
            return cast("T", self._outcome(call, scope))

        # In a copy of this task's context, as trio's and anyio's threads do: what the
        # tool reads of it (its execute_tool span, say) is the caller's.
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(work,),
            name=f"toolrelay tool {name} #{next(self._names)}",
            daemon=True,
        )
        try:
            thread.start()
        except BaseException:
            self._running -= 1
            self._changes()
            raise
        try:
            with scope:
                await call.done.wait()
        finally:
            self._given_up(call, name)
        return cast("T", self._outcome(call, scope))

    def _given_up(self, call: _ThreadCall, name: str) -> None:
        """Count and log a thread whose tool was given up on before it returned."""
        if call.done.is_set():
            return
        call.abandoned = True
        self._stuck += 1
        self._stuck_total += 1
        logger.warning(
            "blocking tool %r was given up on (timed out or cancelled) and cannot "
            "be interrupted: its thread runs on (%d stuck of %d worker threads)",
            name,
            self._stuck,
            self.max_threads,
        )
        self._changes()

    @staticmethod
    def _outcome(call: _ThreadCall, scope: anyio.CancelScope) -> Any:
        if scope.cancelled_caught:
            return None  # the caller reads the scope: timed out
        if call.error is not None:
            raise call.error
        return call.value


def _trio_token(token: anyio.lowlevel.EventLoopToken) -> Any:
    """The native trio token when running under trio, else ``None``."""
    trio = sys.modules.get("trio")
    native = token.native_token
    if trio is not None and isinstance(native, trio.lowlevel.TrioToken):
        return native
    return None


def _claim_thread(token: object) -> None:
    """Let the tool call ``anyio.from_thread.run_sync(...)`` without a token, as it
    could in anyio's own worker threads (anyio keeps the token in a thread-local,
    private attribute; if that changes, tools pass ``token=`` themselves)."""
    try:
        from anyio._core._eventloop import threadlocals

        threadlocals.current_token = token
    except Exception:  # pragma: no cover - anyio changed its internals
        pass


async def execute_tool(
    registry: ToolRegistry,
    name: str,
    arguments: str,
    *,
    run_sync: RunSync | None = None,
    threads: ToolThreads | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - bounds the run, not the wait
    context: ToolContext[Any] | None = None,
    options: ToolOptions = _DEFAULT_OPTIONS,
) -> ToolResult:
    """Run the tool ``name`` with the JSON ``arguments``; never raises for tool problems.

    Args:
        registry: Where the tool is looked up.
        name: The tool to call.
        arguments: The JSON text of the arguments, as streamed by the agent; empty,
            whitespace or ``null`` means ``{}``.
        run_sync: How to run a blocking sync tool off the event loop, when
            ``threads`` is not given. Without either, or for a tool with
            ``blocking=False``, a sync tool is called inline. Async tools are awaited.
        threads: The worker threads for blocking sync tools (the engine's).
        timeout: Seconds the tool may run (for a blocking tool, from the moment a
            thread runs it); ``None``: the tool's own
            :attr:`~toolrelay.ToolSpec.timeout`, or no bound. A sync tool called
            inline cannot be interrupted.
        context: What a tool's :class:`~toolrelay.ToolContext` parameter receives.
        options: The result bound and what the model sees of an exception.

    Returns:
        A success holding the tool's return value as text, or a failure when the tool
        is unknown, the arguments are not JSON, too deep, fail validation or set a
        parameter the model may not set, the tool raised anything (its exception is
        logged on ``toolrelay.tools`` and kept on the result), timed out, or its
        return value cannot be encoded or is too large.

    Raises:
        BaseException: Only a cancellation asked by a scope around the call (the
            turn is cancelled); the tool's own exceptions, whatever their type, never.
    """
    spec = registry.get(name)
    if spec is None:
        return registry.unknown(name)
    call = spec.bind(arguments, context=context)
    if isinstance(call, ToolResult):
        return call
    if timeout is None:
        timeout = spec.timeout
    scope = anyio.CancelScope()
    try:
        value = await _invoke(spec, call, scope, timeout, run_sync, threads)
    except _NoThread as exc:
        return ToolResult.failure(str(exc))
    except Exception as exc:
        return _raised(spec, exc, options)
    except BaseException as exc:
        # A cancellation that a scope around us asked for goes on; anything else
        # (SystemExit, KeyboardInterrupt, GeneratorExit, a stray CancelledError) is
        # the tool's own, and fails this call only.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return _raised(spec, exc, options)
    if scope.cancelled_caught:
        return ToolResult.failure(f"tool {name!r} timed out after {timeout:g} s")
    return spec.outcome(value, max_bytes=options.max_result_bytes)


async def _invoke(
    spec: ToolSpec[..., Any],
    call: Callable[[], Any],
    scope: anyio.CancelScope,
    timeout: float | None,  # noqa: ASYNC109 - armed once the tool runs
    run_sync: RunSync | None,
    threads: ToolThreads | None,
) -> Any:
    value: Any = None
    if spec.blocking and not spec.is_async and threads is not None:
        # The timeout starts once a thread is free: ToolThreads arms the scope then.
        return await threads.run(call, scope, timeout, spec.name)
    _arm(scope, timeout)
    if spec.is_async:
        with scope:
            value = await call()
    elif spec.blocking and run_sync is not None:
        with scope:
            value = await run_sync(call)
    else:
        value = call()
    if inspect.isawaitable(value) and not scope.cancelled_caught:
        # A sync-looking callable that returned an awaitable (an undetected async
        # callable): finish it rather than encode a coroutine object.
        with scope:
            value = await value
    return value


def _arm(scope: anyio.CancelScope, timeout: float | None) -> None:
    """Start ``timeout`` on ``scope`` now."""
    scope.deadline = math.inf if timeout is None else anyio.current_time() + timeout


def _raised(spec: ToolSpec[..., Any], exc: BaseException, options: ToolOptions) -> ToolResult:
    """Log a tool's exception with its traceback; the failure the model sees."""
    try:
        logger.error("tool %r raised %s", spec.name, type(exc).__name__, exc_info=exc)
    except Exception:  # pragma: no cover - a handler failing on a hostile exception
        pass
    return spec.failure_of(exc, detail=options.error_text == "exception")


async def execute_batch(
    registry: ToolRegistry,
    calls: tuple[ToolCallInfo, ...],
    *,
    default_timeout: float | None,
    on_result: Callable[[ToolCallInfo, ToolResult], Awaitable[None] | None],
    limiter: anyio.CapacityLimiter | None = None,
    threads: ToolThreads | None = None,
    context: ToolContext[Any] | None = None,
    options: ToolOptions = _DEFAULT_OPTIONS,
    trace: TurnTrace | None = None,
) -> None:
    """Execute ``calls`` concurrently; ``on_result`` is called as each one finishes.

    Args:
        registry: Where the tools are looked up.
        calls: The batch (already ``executing``).
        default_timeout: Seconds a tool may take unless its spec says otherwise;
            ``None`` for no bound.
        on_result: Called with each call and its result, in the order they finish
            (the engine writes the result to its store and hands it to the processor,
            once); awaited when it returns an awaitable.
        limiter: Bounds how many tools (of every batch sharing it) run at once.
        threads: Where blocking tools run (a :class:`ToolThreads` of
            ``options.max_threads`` is made for the batch otherwise).
        context: The turn's tool context; each call gets a copy naming the call.
        options: The result bound and what the model sees of an exception.
        trace: The turn's spans, when it is traced: each call runs in its
            ``execute_tool`` span.
    """
    batch = _Batch(
        registry,
        default_timeout,
        on_result,
        limiter,
        threads if threads is not None else ToolThreads(options.max_threads),
        context,
        options,
        trace,
    )
    if len(calls) == 1:
        # One call (most batches): it runs in this task, in a copy of its context as
        # a task of its own would (what the tool sets of it stays its own), without a
        # task group and a task: about 30 objects fewer per batch for the cycle
        # collector to walk while the tool runs.
        await _InContext(batch.run_one(calls[0]))
        return
    async with anyio.create_task_group() as group:
        for call in calls:
            group.start_soon(batch.run_one, call, name=f"tool {call.name} ({call.id})")


class _InContext(Generic[T]):
    """Await a coroutine in the awaiting task, each of its steps run in a copy of the
    context as it is now: what the coroutine reads and sets of the context variables
    is what it would in a task started here (asyncio and trio both copy the starter's
    context), and whatever it awaits reaches the event loop unchanged."""

    __slots__ = ("_context", "_coroutine")

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine
        self._context = contextvars.copy_context()

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine = self._coroutine
        run = self._context.run
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                if error is None:
                    signal = run(coroutine.send, value)
                else:
                    signal, error = run(coroutine.throw, error), None
            except StopIteration as stop:
                return cast("T", stop.value)
            try:
                value = yield signal
            except GeneratorExit:
                run(coroutine.close)
                raise
            except BaseException as exc:  # a cancellation, delivered to the awaiter
                error = exc


class _Batch:
    """What every call of one batch runs with (see :func:`execute_batch`): one slotted
    object, where closures would be two functions and a cell per name they read, each
    walked by the cycle collector for as long as the batch runs."""

    __slots__ = (
        "context",
        "default_timeout",
        "limiter",
        "on_result",
        "options",
        "registry",
        "threads",
        "trace",
    )

    def __init__(
        self,
        registry: ToolRegistry,
        default_timeout: float | None,
        on_result: Callable[[ToolCallInfo, ToolResult], Awaitable[None] | None],
        limiter: anyio.CapacityLimiter | None,
        threads: ToolThreads,
        context: ToolContext[Any] | None,
        options: ToolOptions,
        trace: TurnTrace | None,
    ) -> None:
        self.registry = registry
        self.default_timeout = default_timeout
        self.on_result = on_result
        self.limiter = limiter
        self.threads = threads
        self.context = context
        self.options = options
        self.trace = trace

    async def run_one(self, call: ToolCallInfo) -> None:
        _RUNNING_CALL.set(call)  # in the call's own context (see execute_batch)
        # The timeout bounds the tool's own run, not its wait for a limiter slot: a slow
        # tool holding the slot must not make the next one time out (promise 2).
        if self.limiter is not None:
            async with self.limiter:
                result = await self.run_timed(call)
        else:
            result = await self.run_timed(call)
        taken = self.on_result(call, result)
        if taken is not None:
            await taken

    async def run_timed(self, call: ToolCallInfo) -> ToolResult:
        registry = self.registry
        spec = registry.get(call.name)
        timeout = (
            spec.timeout if spec is not None and spec.timeout is not None else self.default_timeout
        )
        context = self.context
        call_context = (
            dataclasses.replace(context, tool_call_id=call.id, tool_name=call.name)
            if context is not None
            else None
        )
        execute = functools.partial(
            execute_tool,
            registry,
            call.name,
            call.arguments,
            threads=self.threads,
            timeout=timeout,
            context=call_context,
            options=self.options,
        )
        try:
            if self.trace is not None:
                return await self.trace.tool(call, spec.description if spec else None, execute)
            return await execute()
        except Exception as exc:  # pragma: no cover - a bug of ours: still one call only
            logger.error("running tool %r failed", call.name, exc_info=exc)
            return ToolResult.failure(f"tool {call.name!r} could not be run", exception=exc)


async def execute_batch_with_approvals(
    registry: ToolRegistry,
    calls: tuple[ToolCallInfo, ...],
    approved: ObjectReceiveStream[ToolCallInfo],
    **options: Any,
) -> None:
    """Execute ``calls`` as :func:`execute_batch` does, and each call received on
    ``approved`` as it arrives (a call of the batch the embedding code approved),
    until ``approved`` ends (every call awaiting approval was decided).

    Args:
        registry: Where the tools are looked up.
        calls: The calls that run at once (already ``executing``).
        approved: The approved calls (already ``executing``), one by one; its sender
            closes it once no call awaits a decision.
        **options: The keyword arguments of :func:`execute_batch`.
    """
    async with anyio.create_task_group() as group:
        if calls:
            group.start_soon(functools.partial(execute_batch, registry, calls, **options))
        async with approved:
            async for call in approved:
                group.start_soon(
                    functools.partial(execute_batch, registry, (call,), **options),
                    name=f"approved tool {call.name} ({call.id})",
                )
