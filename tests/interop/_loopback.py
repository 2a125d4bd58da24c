"""What the interop tests share: a third-party AG-UI app on loopback, and toolrelay against it.

:func:`serve` runs an ASGI app under uvicorn on 127.0.0.1 and an ephemeral port, in a
thread (uvicorn brings its own asyncio loop there, so tests on asyncio and on trio share
one server). :class:`Recording` keeps every ``RunAgentInput`` toolrelay sends; the rest
drives a turn, or one run on the wire, against such a server.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from toolrelay import (
    Engine,
    HTTPStatusError,
    RunStatus,
    TextMessage,
    ThreadKey,
    ToolCallStatus,
    ToolRegistry,
    Turn,
)
from toolrelay._core import ReasoningRecord
from toolrelay._reasons import ReasonKind
from toolrelay.backends import AguiHttpBackend
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import AssistantMessage, Event, RunAgentInput, UnknownEvent, UserMessage

# --- the server ------------------------------------------------------------------------------


@contextlib.contextmanager
def serve(app: Any, name: str) -> Iterator[str]:
    """``app`` served by uvicorn on loopback, in a thread; gives its base URL.

    ``name`` says whose server it is when it does not start.
    """
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", log_config=None, http="h11", ws="none"
    )
    uv = uvicorn.Server(config)
    stopped = threading.Event()

    def run() -> None:
        try:
            uv.run()
        finally:
            stopped.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    for _ in range(1000):
        if uv.started or stopped.wait(0.01):
            break
    assert uv.started, f"{name} did not start"
    host, port = uv.servers[0].sockets[0].getsockname()[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        uv.should_exit = True
        thread.join(5)


# --- turns -----------------------------------------------------------------------------------


class Recording:
    """An AguiHttpBackend that keeps every RunAgentInput it sent."""

    def __init__(self, backend: AguiHttpBackend) -> None:
        self.backend = backend
        self.inputs: list[RunAgentInput] = []

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return await self.backend.allocate_run(key)

    def run(self, key: ThreadKey, run_input: RunAgentInput) -> Any:
        self.inputs.append(run_input)
        return self.backend.run(key, run_input)


@contextlib.asynccontextmanager
async def recorded_engine(
    url: str, *, tools: ToolRegistry = DEMO_TOOLS
) -> AsyncIterator[tuple[Engine, Recording]]:
    """An Engine on the AG-UI server at ``url``, and the :class:`Recording` it sends through."""
    async with AguiHttpBackend(url) as backend:
        recording = Recording(backend)
        async with Engine(recording, tools=tools) as engine:
            yield engine, recording


def new_thread() -> str:
    """A thread the server has never seen (LangGraph's checkpointer outlives a test)."""
    return f"interop-{uuid.uuid4().hex}"


async def run_turn(
    url: str, message: str, *, tools: ToolRegistry = DEMO_TOOLS
) -> tuple[Turn, list[RunAgentInput]]:
    """One turn on a new thread, and every RunAgentInput its runs sent."""
    async with recorded_engine(url, tools=tools) as (engine, recording):
        turn = await engine.run_turn(new_thread(), message)
    return turn, recording.inputs


async def completed_turn(url: str, message: str) -> tuple[Turn, list[RunAgentInput]]:
    """:func:`run_turn`, for a turn that must complete without protocol violations."""
    turn, inputs = await run_turn(url, message)
    assert turn.status is RunStatus.completed, turn.reason
    assert turn.violations == ()
    return turn, inputs


def texts(turn: Turn) -> list[str]:
    return [m.text for m in turn.conversation.messages if isinstance(m, TextMessage)]


def failure(turn: Turn) -> tuple[RunStatus, ReasonKind | None, str | None]:
    """How the turn ended: its status, and its reason's kind and message (if it has one)."""
    if turn.reason is None:
        return turn.status, None, None
    return turn.status, turn.reason.kind, turn.reason.message


# --- scenarios every interop server's scripted model plays -----------------------------------


async def no_arguments_turn(url: str) -> tuple[Turn, list[RunAgentInput]]:
    """The model calls ``list_people`` with no arguments at all: none stream, and the
    continuation sends them back as an empty object."""
    turn, inputs = await run_turn(url, "Which people do you know?")
    assert turn.status is RunStatus.completed, turn.reason
    (call,) = turn.conversation.tool_calls()
    assert (call.name, call.arguments) == ("list_people", "")
    (sent,) = [m for m in inputs[1].messages if isinstance(m, AssistantMessage) and m.tool_calls]
    assert sent.tool_calls is not None
    assert sent.tool_calls[0].function.arguments == "{}"
    return turn, inputs


async def no_tools_turn(url: str) -> None:
    """The client offers no tools: the model says in words that it lacks one."""
    turn, inputs = await run_turn(url, "secret?", tools=ToolRegistry())
    assert turn.status is RunStatus.completed
    assert texts(turn) == ["I have no get_secret_number tool."]
    assert inputs[0].tools == []


async def reasoning_turn(url: str) -> tuple[Turn, list[RunAgentInput]]:
    """The model thinks before it calls a tool: the reasoning is recorded, and the
    continuation carries no reasoning message (and so no thinking signature)."""
    turn, inputs = await completed_turn(url, "think, then tell me Bob's number")
    (reasoning,) = [m for m in turn.conversation.messages if isinstance(m, ReasoningRecord)]
    assert reasoning.text == "The user wants a number."
    assert all(type(m).__name__ != "ReasoningMessage" for m in inputs[1].messages)
    return turn, inputs


async def server_tool_turn(url: str, server_runs: list[int]) -> tuple[Turn, list[RunAgentInput]]:
    """The model calls the server's ``roll_die`` (``srv-1``), then the client's
    ``get_secret_number`` (``cli-1``): the die is rolled once, on the server (each run of
    it appends to ``server_runs``), and its result is kept, not executed here again."""
    server_runs.clear()
    turn, inputs = await completed_turn(url, "roll a die, then ask for a number")
    assert server_runs == [4]
    calls = {c.id: c for c in turn.conversation.tool_calls()}
    # roll_die is not a client tool: executing it here would have failed ("unknown tool").
    assert calls["srv-1"].status is ToolCallStatus.completed
    assert calls["srv-1"].result is not None and calls["srv-1"].result.content == "4"
    assert calls["cli-1"].result is not None and calls["cli-1"].result.content == "42"
    return turn, inputs


# --- the wire, directly ----------------------------------------------------------------------


def secret_input(
    *, thread_id: str = "wire-thread", prompt: str = "secret numbers", **kwargs: Any
) -> RunAgentInput:
    """A run that asks for the secret numbers (or says ``prompt``), offering the demo tools."""
    return RunAgentInput(
        thread_id=thread_id,
        run_id="wire-run",
        messages=[UserMessage(id="u1", content=prompt)],
        tools=list(DEMO_TOOLS.definitions()),
        **kwargs,
    )


async def wire_run(url: str, run_input: RunAgentInput) -> list[Event | UnknownEvent]:
    """Every event of one run of ``run_input``, as toolrelay decodes them."""
    async with AguiHttpBackend(url) as backend:
        async with backend.run(ThreadKey(run_input.thread_id), run_input) as events:
            return [event async for event in events]


async def rejected_without_run_id(url: str, run_input: RunAgentInput) -> HTTPStatusError:
    """What the server answers to ``run_input`` (from :func:`secret_input`) without ``runId``."""
    async with AguiHttpBackend(
        url, transport=_BreakingTransport(httpx.AsyncHTTPTransport())
    ) as backend:
        with pytest.raises(HTTPStatusError) as caught:
            async with backend.run(ThreadKey("t"), run_input) as events:
                async for _ in events:
                    pass
    return caught.value


class _BreakingTransport(httpx.AsyncBaseTransport):
    """Sends a body without ``runId`` (what a buggy client would)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        broken = httpx.Request(
            request.method,
            request.url,
            headers=headers,
            content=request.content.replace(b'"runId":"wire-run",', b""),
        )
        return await self.inner.handle_async_request(broken)

    async def aclose(self) -> None:
        await self.inner.aclose()
