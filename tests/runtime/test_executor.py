"""execute_batch: one batch of tool calls, concurrent and isolated (promise 2)."""

from __future__ import annotations

import contextvars
import json
import threading

import anyio
import anyio.lowlevel
import pytest

from toolrelay import ToolCallInfo, ToolCallStatus, ToolRegistry, ToolResult, tool
from toolrelay._machines import ToolCallEvent
from toolrelay._runtime import execute_batch, running_call

pytestmark = pytest.mark.anyio


def executing(call_id: str, name: str, arguments: str = "") -> ToolCallInfo:
    """A call as the engine hands it to the executor: arguments complete, executing."""
    call = ToolCallInfo(call_id, name, arguments=arguments)
    call.send(ToolCallEvent.finish_args)
    call.send(ToolCallEvent.execute)
    assert call.status is ToolCallStatus.executing
    return call


class Results:
    """Collects ``on_result`` calls in the order they arrive."""

    def __init__(self) -> None:
        self.items: list[tuple[str, ToolResult]] = []

    def __call__(self, call: ToolCallInfo, result: ToolResult) -> None:
        self.items.append((call.id, result))

    @property
    def by_id(self) -> dict[str, ToolResult]:
        return dict(self.items)


async def run_batch(
    registry: ToolRegistry,
    *calls: ToolCallInfo,
    default_timeout: float | None = 5.0,
    limiter: anyio.CapacityLimiter | None = None,
) -> Results:
    results = Results()
    with anyio.fail_after(10):
        await execute_batch(
            registry, calls, default_timeout=default_timeout, on_result=results, limiter=limiter
        )
    return results


async def test_calls_of_a_batch_run_concurrently() -> None:
    # Each tool waits for the other to have started: run one after the other they
    # would deadlock (and fail_after would fire).
    a_started = anyio.Event()
    b_started = anyio.Event()

    async def tool_a() -> str:
        a_started.set()
        await b_started.wait()
        return "a"

    async def tool_b() -> str:
        b_started.set()
        await a_started.wait()
        return "b"

    registry = ToolRegistry.of(tool_a, tool_b)
    with anyio.fail_after(2):
        results = await run_batch(registry, executing("1", "tool_a"), executing("2", "tool_b"))
    assert results.by_id == {"1": ToolResult.success("a"), "2": ToolResult.success("b")}


async def test_on_result_is_called_as_each_call_finishes() -> None:
    release_slow = anyio.Event()

    async def slow() -> str:
        await release_slow.wait()
        return "slow"

    async def fast() -> str:
        return "fast"

    results = Results()

    def on_result(call: ToolCallInfo, result: ToolResult) -> None:
        results(call, result)
        release_slow.set()  # the slow tool may only finish after fast was reported

    with anyio.fail_after(5):
        await execute_batch(
            ToolRegistry.of(slow, fast),
            (executing("s", "slow"), executing("f", "fast")),
            default_timeout=None,
            on_result=on_result,
        )
    assert [call_id for call_id, _ in results.items] == ["f", "s"]


async def test_one_failing_call_does_not_affect_the_others() -> None:
    async def good(name: str) -> str:
        return f"hello {name}"

    async def bad() -> str:
        raise RuntimeError("kaboom")

    registry = ToolRegistry.of(good, bad)
    results = await run_batch(
        registry,
        executing("1", "good", json.dumps({"name": "ann"})),
        executing("2", "bad"),
        executing("3", "missing"),
        executing("4", "good", '{"name": 5}'),
        executing("5", "good", "not json"),
    )
    by_id = results.by_id
    assert set(by_id) == {"1", "2", "3", "4", "5"}  # every call gets a result
    assert by_id["1"] == ToolResult.success("hello ann")
    assert by_id["2"].error == "RuntimeError: kaboom"
    assert by_id["3"].error is not None and "Unknown tool 'missing'" in by_id["3"].error
    assert by_id["4"].error is not None and "Invalid arguments" in by_id["4"].error
    assert by_id["5"].error is not None and "not valid JSON" in by_id["5"].error


async def test_a_call_that_times_out_fails_and_the_others_finish() -> None:
    never = anyio.Event()

    async def stuck() -> str:
        await never.wait()
        return "never"

    async def quick() -> str:
        return "quick"

    results = await run_batch(
        ToolRegistry.of(stuck, quick),
        executing("1", "stuck"),
        executing("2", "quick"),
        default_timeout=0.05,
    )
    assert results.by_id["2"] == ToolResult.success("quick")
    assert results.by_id["1"].error == "tool 'stuck' timed out after 0.05 s"


async def test_the_tool_spec_timeout_overrides_the_default() -> None:
    never = anyio.Event()

    async def stuck() -> str:
        await never.wait()
        return "never"

    async def slowish() -> str:
        await anyio.sleep(0.2)  # a duration to outlast the default, not synchronisation
        return "done"

    registry = ToolRegistry.of(tool(stuck, timeout=0.05), tool(slowish, timeout=10))
    results = await run_batch(
        registry, executing("1", "stuck"), executing("2", "slowish"), default_timeout=0.1
    )
    # The spec's shorter bound applies although the default is longer ...
    assert results.by_id["1"].error == "tool 'stuck' timed out after 0.05 s"
    # ... and its longer bound although the default is shorter.
    assert results.by_id["2"] == ToolResult.success("done")


async def test_no_default_timeout_means_no_bound() -> None:
    release = anyio.Event()

    async def waits() -> str:
        await release.wait()
        return "ok"

    results = Results()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: execute_batch(
                    ToolRegistry.of(waits),
                    (executing("1", "waits"),),
                    default_timeout=None,
                    on_result=results,
                )
            )
            await anyio.wait_all_tasks_blocked()
            assert results.items == []
            release.set()
    assert results.by_id == {"1": ToolResult.success("ok")}


_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


@pytest.mark.parametrize("size", [1, 2])
async def test_tools_see_the_callers_context_variables_and_keep_their_own_sets(
    size: int,
) -> None:
    # A single call runs in the caller's task (no task group), two in tasks of their
    # own: either way a tool reads the context as it was when the batch began, and
    # what it sets stays with it and its on_result.
    read: list[str] = []
    after: list[tuple[str, str]] = []

    async def setter(label: str) -> str:
        read.append(_SEEN.get())
        _SEEN.set(label)
        await anyio.lowlevel.checkpoint()
        return _SEEN.get()

    def on_result(call: ToolCallInfo, result: ToolResult) -> None:
        after.append((call.id, _SEEN.get()))

    calls = tuple(
        executing(str(i), "setter", json.dumps({"label": f"tool {i}"})) for i in range(size)
    )
    token = _SEEN.set("caller")
    try:
        await execute_batch(
            ToolRegistry.of(setter), calls, default_timeout=5.0, on_result=on_result
        )
        assert _SEEN.get() == "caller"  # nothing a tool set leaked into the caller
    finally:
        _SEEN.reset(token)
    assert read == ["caller"] * size
    assert sorted(after) == [(str(i), f"tool {i}") for i in range(size)]


async def test_a_single_call_runs_in_the_callers_task() -> None:
    tasks: list[anyio.TaskInfo] = []

    async def where() -> str:
        tasks.append(anyio.get_current_task())
        return "here"

    results = await run_batch(ToolRegistry.of(where), executing("1", "where"))
    assert results.by_id == {"1": ToolResult.success("here")}
    assert tasks == [anyio.get_current_task()]


@pytest.mark.parametrize("size", [1, 3])
async def test_each_tool_reads_its_own_call_as_the_running_call(size: int) -> None:
    seen: list[tuple[str, str | None]] = []

    async def which(label: str) -> str:
        call = running_call()
        await anyio.lowlevel.checkpoint()  # the others run meanwhile
        seen.append((label, call.id if call is not None else None))
        return label

    calls = tuple(executing(f"c{i}", "which", json.dumps({"label": f"l{i}"})) for i in range(size))
    await run_batch(ToolRegistry.of(which), *calls)
    assert sorted(seen) == [(f"l{i}", f"c{i}") for i in range(size)]
    assert running_call() is None  # nothing of it outside the calls


async def test_cancellation_propagates_and_records_no_result() -> None:
    started = anyio.Event()
    never = anyio.Event()
    cleaned_up: list[str] = []

    async def stuck() -> str:
        started.set()
        try:
            await never.wait()
        finally:
            cleaned_up.append("stuck")
        return "never"

    results = Results()
    with anyio.fail_after(5):
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:

                async def batch() -> None:
                    await execute_batch(
                        ToolRegistry.of(stuck),
                        (executing("1", "stuck"),),
                        default_timeout=None,
                        on_result=results,
                    )
                    pytest.fail("execute_batch returned although it was cancelled")

                group.start_soon(batch)
                await started.wait()
                scope.cancel()
    assert scope.cancelled_caught
    assert results.items == []  # cancellation is not a tool failure
    assert cleaned_up == ["stuck"]


async def test_a_cancelled_batch_does_not_wait_for_a_blocking_tool() -> None:
    entered = anyio.Event()
    release = threading.Event()

    def blocking() -> str:
        anyio.from_thread.run_sync(entered.set)
        release.wait(10)
        return "late"

    results = Results()
    try:
        # The worker thread is abandoned on cancel: the batch returns without it.
        with anyio.fail_after(5):
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        lambda: execute_batch(
                            ToolRegistry.of(blocking),
                            (executing("1", "blocking"),),
                            default_timeout=None,
                            on_result=results,
                        )
                    )
                    await entered.wait()
                    scope.cancel()
    finally:
        release.set()
    assert scope.cancelled_caught
    assert results.items == []


@pytest.mark.parametrize("bound", [1, 2])
async def test_the_limiter_bounds_how_many_tools_run_at_once(bound: int) -> None:
    running = 0
    peak = 0
    release = anyio.Event()

    async def work(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return n

    registry = ToolRegistry.of(work)
    calls = [executing(str(n), "work", json.dumps({"n": n})) for n in range(5)]
    results = Results()
    limiter = anyio.CapacityLimiter(bound)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: execute_batch(
                    registry,
                    tuple(calls),
                    default_timeout=None,
                    on_result=results,
                    limiter=limiter,
                )
            )
            await anyio.wait_all_tasks_blocked()
            assert running == bound  # the others wait for a slot
            release.set()
    assert peak == bound
    assert sorted(results.by_id) == ["0", "1", "2", "3", "4"]
    assert all(r.ok for _, r in results.items)


async def test_waiting_for_a_limiter_slot_does_not_count_against_the_timeout() -> None:
    # Two tools, each well within the timeout, but together longer than it. With one
    # slot the second waits for the first; only its own run may be timed (promise 2:
    # one slow tool must not make another one fail).
    async def takes_a_while(n: int) -> int:
        await anyio.sleep(0.25)  # a duration, not synchronisation
        return n

    registry = ToolRegistry.of(takes_a_while)
    results = await run_batch(
        registry,
        executing("1", "takes_a_while", '{"n": 1}'),
        executing("2", "takes_a_while", '{"n": 2}'),
        default_timeout=0.4,
        limiter=anyio.CapacityLimiter(1),
    )
    assert results.by_id == {"1": ToolResult.success("1"), "2": ToolResult.success("2")}


async def test_an_empty_batch_returns_at_once() -> None:
    results = await run_batch(ToolRegistry())
    assert results.items == []
