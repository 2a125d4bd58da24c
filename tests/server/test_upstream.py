"""toolrelay in front of another AG-UI server: the upstream agent is the model, the
tools run in toolrelay's server, and the client sees one run per turn."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from toolrelay.backends import AguiHttpBackend
from toolrelay.demo import DEMO_TOOLS, DemoAgent, serve_demo
from toolrelay.protocol import ToolMessage
from toolrelay.server import AguiServer

sys.path.insert(0, str(Path(__file__).parent))
from _serving import read_events, run_input, serving

pytestmark = pytest.mark.anyio


async def test_another_ag_ui_server_as_the_model() -> None:
    upstream = DemoAgent()
    async with serve_demo(upstream) as upstream_url:
        backend = AguiHttpBackend(upstream_url)
        server = AguiServer(backend, tools=DEMO_TOOLS)
        async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
            events = await read_events(
                client,
                "POST",
                "/",
                json_body=run_input("up", "What's the weather where Alice lives?"),
            )
        await backend.aclose()
    assert events[-1].data["result"] == {"stopReason": "end_turn", "rounds": 2}
    said = "".join(e.data["delta"] for e in events if e.type == "TEXT_MESSAGE_CONTENT")
    assert "Paris" in said
    assert len(upstream.requests) == 3  # the upstream ran the model three times
    # The upstream saw the tools' results, run by toolrelay's server.
    last = upstream.requests[-1]
    assert sum(1 for m in last.messages if isinstance(m, ToolMessage)) == 2
