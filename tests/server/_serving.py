"""Serving an :class:`AguiServer` on loopback inside the test's own event loop.

Under asyncio, uvicorn runs as a task of the test's loop; under trio, hypercorn's trio
worker does (uvicorn is asyncio-only). Either way the ASGI lifespan starts and stops
the server, as in production, and the test can read the server's engine and store.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
import sniffio
from httpx_sse import aconnect_sse


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` served on 127.0.0.1 (an ephemeral port) with its lifespan; its URL."""
    if sniffio.current_async_library() == "asyncio":
        async with _uvicorn(app) as url:
            yield url
    else:
        async with _hypercorn(app) as url:
            yield url


@contextlib.asynccontextmanager
async def _uvicorn(app: Any) -> AsyncIterator[str]:
    import uvicorn

    listening = anyio.Event()

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            listening.set()

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="on", log_config=None, http="h11", ws="none"
    )
    server = Server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        with anyio.fail_after(10):
            await listening.wait()
        assert server.started, "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


@contextlib.asynccontextmanager
async def _hypercorn(app: Any) -> AsyncIterator[str]:
    import hypercorn.config
    import hypercorn.trio

    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 5
    stop = anyio.Event()
    async with anyio.create_task_group() as group:
        binds = await group.start(
            lambda task_status: hypercorn.trio.serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield str(binds[0])
        finally:
            stop.set()


#: httpx leaves its inner async generators to the garbage collector when a client
#: hangs up mid-stream; trio warns about it (not the server's doing).
HTTPX_GC_ON_TRIO = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx|httpcore)\S*' was garbage collected:ResourceWarning"
)


@dataclass(frozen=True)
class Sse:
    """One SSE event as a client read it."""

    id: str
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data["type"])

    @property
    def seq(self) -> int:
        """The sequence number of the record the event comes from (``N`` of ``N`` or
        ``N:i``)."""
        return int(self.id.partition(":")[0])


async def read_events(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
    stop_after: int | None = None,
) -> list[Sse]:
    """The SSE events of one request (``stop_after``: hang up after that many)."""
    out: list[Sse] = []
    kwargs: dict[str, Any] = {"headers": headers or {}}
    if json_body is not None:
        kwargs["json"] = json_body
    async with aconnect_sse(client, method, url, **kwargs) as source:
        source.response.raise_for_status()
        async with contextlib.aclosing(source.aiter_sse()) as events:
            async for sse in events:
                if not sse.data:
                    continue
                out.append(Sse(sse.id, json.loads(sse.data)))
                if stop_after is not None and len(out) >= stop_after:
                    break
    return out


def run_input(thread_id: str, text: str, **extra: Any) -> dict[str, Any]:
    """A RunAgentInput (camelCase JSON) with one user message."""
    body: dict[str, Any] = {
        "threadId": thread_id,
        "runId": f"run-{thread_id}",
        "messages": [{"id": f"u-{thread_id}", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    body.update(extra)
    return body


def fold(events: list[Sse]) -> list[tuple[Any, ...]]:
    """What a client makes of a stream: runs, whole messages, calls, results and ends,
    in order of first appearance (live text deltas and the record's text fold into the
    same message; a message started again replaces what came of it; a run that a
    resumed stream opens again is the same run)."""
    order: list[tuple[str, str]] = []
    texts: dict[str, str] = {}
    items: dict[tuple[str, str], tuple[Any, ...]] = {}
    open_run: str | None = None
    for number, event in enumerate(events):
        data = event.data
        kind = event.type
        if kind == "RUN_STARTED":
            if data["runId"] == open_run:
                continue
            open_run = data["runId"]
            key = ("run", data["runId"])
            items[key] = ("run", data["runId"])
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            open_run = None
            key = ("end", str(number))
            items[key] = (kind, data.get("result"), data.get("code"))
        elif kind == "TEXT_MESSAGE_START":
            # Started again (a resumed stream sends a message cut mid-way whole): the
            # client replaces what it had of it.
            key = ("text", data["messageId"])
            texts[data["messageId"]] = ""
        elif kind == "TEXT_MESSAGE_CONTENT":
            key = ("text", data["messageId"])
            texts[data["messageId"]] = texts.get(data["messageId"], "") + data["delta"]
        elif kind == "TOOL_CALL_START":
            key = ("call", data["toolCallId"])
            items[key] = ("call", data["toolCallId"], data["toolCallName"])
        elif kind == "TOOL_CALL_RESULT":
            key = ("result", data["toolCallId"])
            items[key] = ("result", data["toolCallId"], data["content"])
        elif kind == "CUSTOM":
            key = ("custom", str(number))
            items[key] = ("custom", data["name"])
        else:
            continue
        if key not in order:
            order.append(key)
    return [("text", k[1], texts[k[1]]) if k[0] == "text" else items[k] for k in order]
