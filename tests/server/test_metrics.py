"""Prometheus metrics and structured log records, read off the log as it commits."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from toolrelay import ToolError, ToolRegistry
from toolrelay.server import AguiServer
from toolrelay.testing import ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import read_events, run_input, serving

pytestmark = pytest.mark.anyio


async def ok(n: int) -> int:
    """Works."""
    return n


async def bad(n: int) -> int:
    """Fails."""
    raise ToolError("no")


def samples(text_: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text_):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_count_turns_rounds_tools_and_store_writes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedAgent(
        [tool_call("ok", {"n": 1}), tool_call("bad", {"n": 2})],
        [text("done")],
        respond=lambda key, ri: tool_call("ok", {"n": 3}),
    )
    server = AguiServer(agent, tools=ToolRegistry().register(ok).register(bad), max_tool_rounds=2)
    caplog.set_level(logging.DEBUG, logger="toolrelay.server")
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        await read_events(client, "POST", "/", json_body=run_input("m1", "a"))
        await read_events(client, "POST", "/", json_body=run_input("m2", "b"))
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)
    assert found[("toolrelay_turns_started_total", ())] == 2
    completed = (("reason", "end_turn"), ("status", "completed"))
    limited = (("reason", "max_tool_rounds"), ("status", "completed"))
    assert found[("toolrelay_turns_completed_total", completed)] == 1
    assert found[("toolrelay_turns_completed_total", limited)] == 1
    assert found[("toolrelay_turn_rounds_count", ())] == 2
    assert found[("toolrelay_turn_rounds_sum", ())] == 1 + 2
    assert found[("toolrelay_tool_seconds_count", (("outcome", "ok"), ("tool", "ok")))] == 3
    assert found[("toolrelay_tool_seconds_count", (("outcome", "error"), ("tool", "bad")))] == 1
    assert found[("toolrelay_store_write_seconds_count", (("outcome", "ok"),))] > 0
    assert found[("toolrelay_live_turns", ())] == 0
    # Structured records carry thread, turn, round and the next sequence number.
    records = [r.toolrelay for r in caplog.records if hasattr(r, "toolrelay")]
    ends = [r for r in records if r["record"] == "TurnEnded"]
    assert {(r["thread"], r["round"], r["reason"]) for r in ends} == {
        ("m1", 1, "end_turn"),
        ("m2", 2, "max_tool_rounds"),
    }
    assert all(r["next_seq"] == r["seq"] + 1 and r["turn"] for r in records)
