"""One tool's misbehaviour touches no other call, turn or thread (promises 2 and 11).

Whatever a tool raises (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, a
cancellation exception no scope asked for), whatever it returns (cyclic, too deep,
too large) and whatever the model sends it (arguments nested too deeply), that call
fails alone with a result the model sees; its siblings complete, the other threads'
turns go on, the engine stays usable. Blocking tools run in bounded daemon threads
whose timeout counts running time only.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from toolrelay import (
    Engine,
    RunStatus,
    ToolCallBatch,
    ToolCallInfo,
    ToolCallStatus,
    ToolOptions,
    ToolRegistry,
    ToolResult,
    Turn,
    tool,
)
from toolrelay._machines import ToolCallEvent
from toolrelay._runtime import ToolThreads, execute_batch
from toolrelay.backends._base import ThreadKey
from toolrelay.protocol import RunAgentInput, ToolMessage
from toolrelay.testing import Gate, ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio


def stray_cancellation() -> Callable[[], BaseException]:
    """Makes a cancellation exception of the running event loop that no scope asked
    for (called on the loop; what it returns may run in a worker thread)."""
    if anyio.get_cancelled_exc_class() is asyncio.CancelledError:
        return lambda: asyncio.CancelledError("raised by the tool")
    import trio

    return trio.Cancelled._create  # trio's has no public constructor


HOSTILE: dict[str, Callable[[], Callable[[], BaseException]]] = {
    "SystemExit": lambda: lambda: SystemExit(3),
    "KeyboardInterrupt": lambda: lambda: KeyboardInterrupt("stop"),
    "GeneratorExit": lambda: lambda: GeneratorExit("closed"),
    "stray-cancellation": stray_cancellation,
}


def hostile_tool(kind: str, make: Callable[[], BaseException]) -> Any:
    """The tool ``hostile`` raising ``make()``: async, blocking sync or inline sync."""
    if kind == "async":

        async def hostile() -> str:
            await anyio.lowlevel.checkpoint()
            raise make()

        return tool(hostile)

    def hostile_sync() -> str:
        raise make()

    return tool(hostile_sync, name="hostile", blocking=kind == "blocking")


def tool_messages(run_input: RunAgentInput) -> list[ToolMessage]:
    return [m for m in run_input.messages if isinstance(m, ToolMessage)]


def calls_of(turn: Turn) -> list[ToolCallInfo]:
    return [c for m in turn.conversation.messages if isinstance(m, ToolCallBatch) for c in m.calls]


async def ok(n: int) -> int:
    """A well-behaved sibling."""
    await anyio.lowlevel.checkpoint()
    return n * 2


@pytest.mark.parametrize("raised", sorted(HOSTILE))
@pytest.mark.parametrize("kind", ["async", "blocking", "inline"])
async def test_a_tool_raising_any_base_exception_fails_alone(kind: str, raised: str) -> None:
    release_other = anyio.Event()

    def respond(key: ThreadKey, run_input: RunAgentInput) -> Any:
        if key.thread_id == "other":
            return [Gate(release_other), text("the other thread's answer")]
        if tool_messages(run_input):
            return [text("done")]
        return [tool_call("hostile", id="bad"), tool_call("ok", {"n": 21}, id="good")]

    agent = ScriptedAgent(respond=respond)
    make = HOSTILE[raised]()
    tools = ToolRegistry.of(hostile_tool(kind, make), ok)
    with anyio.fail_after(10):
        async with Engine(agent, tools=tools) as engine:
            other = engine.start_turn("other", "wait")
            turn = await engine.run_turn("hostile", "go")
            assert not other.finished  # untouched, still streaming
            release_other.set()
            assert await other.wait_finished() is not None
            # The engine is still usable: a later turn runs.
            again = await engine.run_turn("hostile", "again")
    assert turn.status is RunStatus.completed, turn.reason
    assert other.status is RunStatus.completed
    assert again.status is RunStatus.completed
    bad, good = calls_of(turn)
    assert bad.status is ToolCallStatus.failed
    assert good.status is ToolCallStatus.completed and good.result == ToolResult.success("42")
    assert bad.result is not None and bad.result.error is not None
    assert bad.result.exception is not None
    expected = type(make()).__name__
    assert bad.result.error.startswith(expected)
    sent = {m.tool_call_id: m for m in tool_messages(agent.inputs[-2])}
    assert sent["bad"].error == bad.result.error
    assert all(c.status is not ToolCallStatus.executing for c in calls_of(turn))


async def test_a_real_cancellation_still_cancels_a_turn_whose_tool_turns_it_into_systemexit() -> (
    None
):
    started = anyio.Event()

    async def stubborn() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise SystemExit("not leaving") from None
        return "unreachable"

    agent = ScriptedAgent([tool_call("stubborn", id="c1")], [text("never")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(stubborn)) as engine:
            turn = engine.start_turn("t1", "go")
            await started.wait()
            turn.cancel()
            await turn.wait_finished()
            assert engine.statistics().turns[RunStatus.cancelled] == 1
    assert turn.status is RunStatus.cancelled
    assert agent.run_count == 1


async def test_a_cancelled_turn_is_not_reported_as_a_tool_failure() -> None:
    # The executor re-raises the cancellation its scope asked for: the batch stops.
    started = anyio.Event()
    results: list[ToolResult] = []

    async def slow() -> str:
        started.set()
        await anyio.sleep_forever()
        return "unreachable"

    call = ToolCallInfo("c1", "slow")
    call.send(ToolCallEvent.finish_args)
    call.send(ToolCallEvent.execute)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:

            async def run() -> None:
                await execute_batch(
                    ToolRegistry.of(slow),
                    (call,),
                    default_timeout=None,
                    on_result=lambda _c, r: results.append(r),
                )

            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    assert results == []


# --- what cannot be processed: arguments and results -------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class Shouty(str):
    def __str__(self) -> str:
        raise RuntimeError("str() of this str raises")


async def raises_unprintable() -> str:
    raise Unprintable


async def returns_cyclic() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


async def returns_deep() -> list[Any]:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    return value


async def returns_huge() -> str:
    return "x" * 5_000


async def returns_shouty() -> str:
    return Shouty("fine")


async def returns_object() -> object:
    return object()


async def takes_anything(data: dict[str, Any]) -> str:
    return "ran"


async def test_unprocessable_arguments_and_results_fail_alone() -> None:
    deep = '{"data": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    script = [
        tool_call("raises_unprintable", id="unprintable"),
        tool_call("returns_cyclic", id="cyclic"),
        tool_call("returns_deep", id="deep"),
        tool_call("returns_huge", id="huge"),
        tool_call("returns_shouty", id="shouty"),
        tool_call("returns_object", id="object"),
        tool_call("takes_anything", deep, id="deep-args"),
        tool_call("ok", {"n": 1}, id="sibling"),
    ]
    agent = ScriptedAgent(script, [text("done")])
    tools = ToolRegistry.of(
        raises_unprintable,
        returns_cyclic,
        returns_deep,
        returns_huge,
        returns_shouty,
        returns_object,
        takes_anything,
        ok,
    )
    with anyio.fail_after(10):
        async with Engine(
            agent, tools=tools, tool_options=ToolOptions(max_result_bytes=1_000)
        ) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed, turn.reason
    sent = {m.tool_call_id: m.error for m in tool_messages(agent.inputs[1])}
    assert sent["unprintable"] == "Unprintable: <the exception's message could not be read>"
    assert sent["cyclic"] is not None and "cyclic or nested too deeply" in sent["cyclic"]
    assert sent["deep"] is not None and "cyclic or nested too deeply" in sent["deep"]
    assert sent["huge"] is not None and "too large: more than 1000 bytes" in sent["huge"]
    assert sent["object"] is not None and "cannot be encoded as JSON" in sent["object"]
    assert sent["deep-args"] is not None and "nested too deeply" in sent["deep-args"]
    assert sent["shouty"] is None  # a str subclass is sent as its text, __str__ unused
    assert sent["sibling"] is None
    contents = {m.tool_call_id: m.content for m in tool_messages(agent.inputs[1])}
    assert contents["shouty"] == "fine" and contents["sibling"] == "2"


async def test_a_result_at_the_bound_passes_and_one_byte_more_fails() -> None:
    async def sized(n: int) -> str:
        return "é" * n  # two UTF-8 bytes each: the bound counts bytes, not characters

    registry = ToolRegistry.of(sized)
    options = ToolOptions(max_result_bytes=10)
    results: dict[str, ToolResult] = {}
    calls = []
    for call_id, n in (("fits", 5), ("over", 6)):
        call = ToolCallInfo(call_id, "sized", arguments=f'{{"n": {n}}}')
        call.send(ToolCallEvent.finish_args)
        call.send(ToolCallEvent.execute)
        calls.append(call)
    await execute_batch(
        registry,
        tuple(calls),
        default_timeout=5,
        on_result=lambda c, r: results.__setitem__(c.id, r),
        options=options,
    )
    assert results["fits"] == ToolResult.success("é" * 5)
    assert results["over"].error is not None and "too large" in results["over"].error


def test_tool_options_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="max_result_bytes"):
        ToolOptions(max_result_bytes=0)
    with pytest.raises(ValueError, match="max_threads"):
        ToolOptions(max_threads=0)
    with pytest.raises(ValueError, match="error_text"):
        ToolOptions(error_text="everything")  # type: ignore[arg-type]


# --- the tool's exception: logged, kept, shown as asked ----------------------------


async def test_a_tools_exception_is_logged_with_its_traceback_and_kept_on_the_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def explode() -> str:
        raise ValueError("secret internals")

    agent = ScriptedAgent([tool_call("explode", id="c1")], [text("sorry")])
    with caplog.at_level(logging.ERROR, logger="toolrelay.tools"):
        async with Engine(agent, tools=ToolRegistry.of(explode)) as engine:
            turn = await engine.run_turn("t1", "go")
    [record] = [r for r in caplog.records if r.name == "toolrelay.tools"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)
    assert "explode" in record.getMessage()
    [call] = calls_of(turn)
    assert call.result is not None and isinstance(call.result.exception, ValueError)
    [sent] = tool_messages(agent.inputs[1])
    assert sent.error == "ValueError: secret internals"


async def test_a_generic_error_text_hides_the_exception_from_the_model() -> None:
    async def explode() -> str:
        raise ValueError("secret internals")

    async def refuse() -> str:
        from toolrelay import ToolError

        raise ToolError("say it differently")

    agent = ScriptedAgent(
        [tool_call("explode", id="c1"), tool_call("refuse", id="c2")], [text("sorry")]
    )
    options = ToolOptions(error_text="generic")
    async with Engine(agent, tools=ToolRegistry.of(explode, refuse), tool_options=options) as e:
        turn = await e.run_turn("t1", "go")
    explode_call, refuse_call = calls_of(turn)
    sent = {m.tool_call_id: m for m in tool_messages(agent.inputs[1])}
    assert sent["c1"].error == "The tool failed."
    assert "secret internals" not in str(sent["c1"].content)
    assert sent["c2"].error == "say it differently"  # a ToolError is written for the model
    assert explode_call.result is not None
    assert isinstance(explode_call.result.exception, ValueError)  # the embedding code sees it


# --- blocking tools: bounded daemon threads, timeout on running time ---------------


async def test_the_timeout_of_a_blocking_tool_does_not_count_the_wait_for_a_thread() -> None:
    first_running = threading.Event()
    release_first = threading.Event()

    def holds_the_thread() -> str:
        first_running.set()
        release_first.wait(5)
        return "first"

    def quick() -> str:
        return "second"

    registry = ToolRegistry.of(tool(holds_the_thread), tool(quick, timeout=0.2))
    threads = ToolThreads(max_threads=1)
    results: dict[str, ToolResult] = {}
    calls = []
    for call_id, name in (("c1", "holds_the_thread"), ("c2", "quick")):
        call = ToolCallInfo(call_id, name)
        call.send(ToolCallEvent.finish_args)
        call.send(ToolCallEvent.execute)
        calls.append(call)

    async def release_later() -> None:
        await anyio.to_thread.run_sync(first_running.wait)
        await anyio.sleep(0.5)  # longer than quick's timeout: quick waits for the thread
        release_first.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(release_later)
            await execute_batch(
                registry,
                tuple(calls),
                default_timeout=5,
                on_result=lambda c, r: results.__setitem__(c.id, r),
                threads=threads,
            )
    assert results == {"c1": ToolResult.success("first"), "c2": ToolResult.success("second")}


async def test_stuck_blocking_tools_are_bounded_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    def hangs() -> str:
        release.wait(30)
        return "late"

    def quick() -> str:
        return "quick"

    async def also_async() -> str:
        return "async still runs"

    agent = ScriptedAgent(
        [tool_call("hangs", id="h1"), tool_call("hangs", id="h2")],
        [text("both timed out")],
        [tool_call("quick", id="q"), tool_call("also_async", id="a")],
        [text("no thread left")],
    )
    tools = ToolRegistry.of(tool(hangs, timeout=0.05), quick, also_async)
    try:
        with caplog.at_level(logging.WARNING, logger="toolrelay.tools"):
            async with Engine(agent, tools=tools, tool_options=ToolOptions(max_threads=2)) as e:
                with anyio.fail_after(10):
                    first = await e.run_turn("t1", "go")
                    assert e.statistics().stuck_tool_threads == 2
                    second = await e.run_turn("t1", "again")
                release.set()
                with anyio.fail_after(10):
                    for _ in range(1000):
                        if not e.statistics().stuck_tool_threads:
                            break
                        await anyio.sleep(0.01)
                assert e.statistics().stuck_tool_threads == 0
    finally:
        release.set()
    assert first.status is RunStatus.completed
    assert [m.error for m in tool_messages(agent.inputs[1])] == [
        "tool 'hangs' timed out after 0.05 s",
        "tool 'hangs' timed out after 0.05 s",
    ]
    quick_sent, async_sent = tool_messages(agent.inputs[3])[-2:]
    assert quick_sent.error is not None and "no worker thread" in quick_sent.error
    assert async_sent.content == "async still runs"
    assert second.status is RunStatus.completed
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "runs on" in warnings[0].getMessage()


async def test_a_blocking_tool_may_call_back_into_the_event_loop() -> None:
    seen = anyio.Event()

    def calls_back() -> str:
        anyio.from_thread.run_sync(seen.set)
        return "called back"

    agent = ScriptedAgent([tool_call("calls_back", id="c1")], [text("ok")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(calls_back)) as engine:
            await engine.run_turn("t1", "go")
    assert seen.is_set()
    [sent] = tool_messages(agent.inputs[1])
    assert sent.content == "called back"


_HUNG_SCRIPT = textwrap.dedent(
    """
    import sys, threading
    import anyio
    from toolrelay import Engine, ToolRegistry, tool
    from toolrelay.testing import ScriptedAgent, text, tool_call

    forever = threading.Event()

    def hangs() -> str:
        forever.wait()
        return "never"

    async def main() -> None:
        agent = ScriptedAgent([tool_call("hangs", id="c1")], [text("gave up")])
        tools = ToolRegistry.of(tool(hangs, timeout=0.1))
        async with Engine(agent, tools=tools) as engine:
            turn = await engine.run_turn("t1", "go")
        print(turn.status.value, engine.statistics().stuck_tool_threads, flush=True)

    anyio.run(main, backend=sys.argv[1])
    """
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_stuck_blocking_tool_never_keeps_the_process_from_exiting(backend: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HUNG_SCRIPT, backend],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["completed", "1"]
