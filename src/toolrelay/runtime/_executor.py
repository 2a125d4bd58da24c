"""Running one batch of tool calls: concurrently, each isolated, each with a timeout.

Promise 2: the calls of a batch run at once in a task group; one failing, raising,
timing out or being unknown does not affect the others, and every call gets a
result the model will see. Cancellation is not a tool failure: it propagates out of
the batch (the whole turn is being cancelled).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import anyio

from toolrelay.core import ToolCallInfo, ToolRegistry, ToolResult

__all__ = ("execute_batch",)


async def execute_batch(
    registry: ToolRegistry,
    calls: tuple[ToolCallInfo, ...],
    *,
    default_timeout: float | None,
    on_result: Callable[[ToolCallInfo, ToolResult], None],
    limiter: anyio.CapacityLimiter | None = None,
) -> None:
    """Execute ``calls`` concurrently; ``on_result`` is called as each one finishes.

    Args:
        registry: Where the tools are looked up.
        calls: The batch (already ``executing``).
        default_timeout: Seconds a tool may take unless its spec says otherwise;
            ``None`` for no bound.
        on_result: Called synchronously with each call and its result, in the order
            they finish.
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
                return await registry.execute(call.name, call.arguments, run_sync=run_sync)
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
        on_result(call, result)

    async with anyio.create_task_group() as group:
        for call in calls:
            group.start_soon(run_one, call, name=f"tool {call.name} ({call.id})")
