"""Running tools: one call, and one batch of calls concurrently, each isolated.

The core decides what a call means (:meth:`~toolrelay.core.ToolSpec.bind` decodes its
arguments, :meth:`~toolrelay.core.ToolSpec.outcome` reads what came back); this module
runs it: awaits an async tool, runs a blocking one in a worker thread, bounds it
with its timeout.

Promise 2: the calls of a batch run at once in a task group; one failing, raising,
timing out or being unknown does not affect the others, and every call gets a
result the model will see. Cancellation is not a tool failure: it propagates out of
the batch (the whole turn is being cancelled).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio

from toolrelay.core import ToolCallInfo, ToolRegistry, ToolResult

__all__ = ("RunSync", "execute_batch", "execute_tool")

T = TypeVar("T")


class RunSync(Protocol):
    """How a blocking function is run off the event loop.

    ``anyio.to_thread.run_sync`` and ``trio.to_thread.run_sync`` both fit.
    """

    def __call__(self, func: Callable[[], T], /) -> Awaitable[T]: ...


async def execute_tool(
    registry: ToolRegistry, name: str, arguments: str, *, run_sync: RunSync | None = None
) -> ToolResult:
    """Run the tool ``name`` with the JSON ``arguments``; never raises for tool problems.

    Args:
        registry: Where the tool is looked up.
        name: The tool to call.
        arguments: The JSON text of the arguments, as streamed by the agent; empty,
            whitespace or ``null`` means ``{}``.
        run_sync: How to run a blocking sync tool off the event loop (the engine
            passes ``anyio.to_thread.run_sync``). Without it, or for a tool with
            ``blocking=False``, a sync tool is called inline. Async tools are awaited.
            Timeouts are the caller's (:attr:`~toolrelay.core.ToolSpec.timeout`).

    Returns:
        A success holding the tool's return value as text, or a failure when the tool
        is unknown, the arguments are not JSON or fail validation, the tool raised
        (``"<ExceptionType>: <message>"``; a ``ToolError``'s message alone), or the
        return value cannot be encoded.

    Raises:
        BaseException: Only exceptions that are not ``Exception`` propagate, and
            untouched: cancellation, ``KeyboardInterrupt``, ``SystemExit``.
    """
    spec = registry.get(name)
    if spec is None:
        return registry.unknown(name)
    call = spec.bind(arguments)
    if isinstance(call, ToolResult):
        return call
    try:
        value: Any
        if spec.is_async:
            value = await call()
        elif spec.blocking and run_sync is not None:
            value = await run_sync(call)
        else:
            value = call()
        if inspect.isawaitable(value):
            # A sync-looking callable that returned an awaitable (an undetected async
            # callable): finish it rather than encode a coroutine object.
            value = await value
    except Exception as exc:
        return spec.failure_of(exc)
    return spec.outcome(value)


async def execute_batch(
    registry: ToolRegistry,
    calls: tuple[ToolCallInfo, ...],
    *,
    default_timeout: float | None,
    on_result: Callable[[ToolCallInfo, ToolResult], Awaitable[None] | None],
    limiter: anyio.CapacityLimiter | None = None,
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
    """
    # Blocking tools run in anyio's worker threads; a cancelled turn does not wait for
    # a thread that cannot be interrupted (the thread finishes on its own).
    run_sync = functools.partial(anyio.to_thread.run_sync, abandon_on_cancel=True)

    async def run_timed(call: ToolCallInfo) -> ToolResult:
        spec = registry.get(call.name)
        timeout = spec.timeout if spec is not None and spec.timeout is not None else default_timeout
        try:
            with anyio.fail_after(math.inf if timeout is None else timeout):
                return await execute_tool(registry, call.name, call.arguments, run_sync=run_sync)
        except TimeoutError:
            return ToolResult.failure(f"tool {call.name!r} timed out after {timeout:g} s")

    async def run_one(call: ToolCallInfo) -> None:
        # The timeout bounds the tool's own run, not its wait for a limiter slot: a slow
        # tool holding the slot must not make the next one time out (promise 2).
        if limiter is not None:
            async with limiter:
                result = await run_timed(call)
        else:
            result = await run_timed(call)
        taken = on_result(call, result)
        if taken is not None:
            await taken

    async with anyio.create_task_group() as group:
        for call in calls:
            group.start_soon(run_one, call, name=f"tool {call.name} ({call.id})")
