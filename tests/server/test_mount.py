"""The server mounted in another ASGI framework (Starlette), under a path prefix."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from toolrelay.server import AguiServer
from toolrelay.testing import ScriptedAgent, text

sys.path.insert(0, str(Path(__file__).parent))
from _serving import fold, read_events, run_input, serving

pytestmark = pytest.mark.anyio


async def test_mounted_in_starlette_under_a_prefix() -> None:
    server = AguiServer(ScriptedAgent(respond=lambda key, ri: text("hello from the mount")))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server:  # the host app's lifespan starts and stops the server
            yield

    async def home(request: object) -> PlainTextResponse:
        return PlainTextResponse("the host app")

    app = Starlette(routes=[Route("/", home), Mount("/agent", app=server)], lifespan=lifespan)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/")).text == "the host app"
        events = await read_events(client, "POST", "/agent/", json_body=run_input("m", "hi"))
        assert events[-1].type == "RUN_FINISHED"
        assert any(e.data.get("delta") == "hello from the mount" for e in events)
        again = await read_events(client, "GET", "/agent/threads/m/events")
        assert fold(again) == fold(events)
        assert (await client.get("/agent/healthz")).json() == {"status": "ok"}
