"""Case 8: ``toolrelay serve`` under load: concurrent turns of two tool rounds each.

One ``toolrelay serve`` process (uvicorn, the demo agent's ``multihop`` scenario as the
model, its two server tools, a SQLite log in a temporary directory) serves N turns
started at once by this process (httpx, one SSE stream per turn, asyncio). Each turn
makes two tool rounds in the server before the answer. Reported:

- turns/s over the whole load, and the time to each turn's first event (p99);
- every turn completed (``RUN_FINISHED``, stop reason ``end_turn``, 2 rounds) and every
  thread's log gapless (read from the SQLite file afterwards);
- catch-up latency: a ``GET /threads/{id}/events`` of a finished turn, to its last event;
- the server's CPU per streamed event (``/proc/<pid>/stat``) against this client's
  (``time.process_time``): the target is at most 2x.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import closing
from pathlib import Path

import anyio
import httpx
import msgspec
from bench_harness import Report, Sample, Target, percentile

__all__ = ("run_server",)

CASE = "8. server"
SRC = Path(__file__).resolve().parents[2] / "src"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _body(thread: str) -> dict[str, object]:
    return {
        "threadId": thread,
        "runId": f"r-{thread}",
        "messages": [{"id": f"u-{thread}", "role": "user", "content": "multihop"}],
    }


Outcome = tuple[float, list[dict[str, object]]]


async def _turn(client: httpx.AsyncClient, thread: str, out: dict[str, Outcome]) -> None:
    from httpx_sse import aconnect_sse

    started = time.perf_counter()
    first: float | None = None
    events: list[dict[str, object]] = []
    async with aconnect_sse(client, "POST", "/", json=_body(thread)) as source:
        async for sse in source.aiter_sse():
            if first is None:
                first = time.perf_counter() - started
            events.append(msgspec.json.decode(sse.data))
    out[thread] = (first if first is not None else float("nan"), events)


async def _load(url: str, turns: int) -> tuple[float, dict[str, Outcome], float]:
    results: dict[str, Outcome] = {}
    limits = httpx.Limits(max_connections=turns + 10, max_keepalive_connections=turns + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        cpu = time.process_time()
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for n in range(turns):
                group.start_soon(_turn, client, f"load-{n}", results)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
    return wall, results, cpu


async def _catch_up(url: str, threads: list[str]) -> list[float]:
    latencies = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for thread in threads:
            started = time.perf_counter()
            response = await client.get(f"/threads/{thread}/events?after=0")
            assert response.status_code == 200 and "RUN_FINISHED" in response.text
            latencies.append(time.perf_counter() - started)
    return latencies


def _gapless(db: Path) -> tuple[int, int]:
    """(threads, threads whose log is gapless)."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        rows = connection.execute("SELECT thread, seq FROM records ORDER BY thread, seq").fetchall()
    seqs: dict[int, list[int]] = defaultdict(list)
    for thread, seq in rows:
        seqs[thread].append(seq)
    good = sum(1 for values in seqs.values() if values == list(range(1, len(values) + 1)))
    return len(seqs), good


def run_server(report: Report, *, quick: bool) -> None:
    """Case 8: N concurrent two-round turns against one ``toolrelay serve``."""
    turns = 100 if quick else 1000
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(SRC))
        env.pop("TOOLRELAY_TOKEN", None)
        process = subprocess.Popen(
            [sys.executable, "-m", "toolrelay", "serve", "--port", "0", "--store", "load.db"],
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert process.stdout is not None
            with report.part("8 server start"):
                match = re.search(r"on (http://\S+)/", process.stdout.readline())
            assert match, "toolrelay serve did not start"
            url = match.group(1)
            with report.part("8 warm-up"):
                anyio.run(_load, url, 5)  # warm-up
            server_cpu = _cpu_seconds(process.pid)
            with report.part(f"8 {turns} turns"):
                wall, results, client_cpu = anyio.run(_load, url, turns)
            server_cpu = _cpu_seconds(process.pid) - server_cpu
            sample = [f"load-{n}" for n in range(0, turns, max(1, turns // 50))]
            with report.part("8 catch-up"):
                catch_up = anyio.run(_catch_up, url, sample)
        finally:
            with report.part("8 server stop"):
                process.send_signal(signal.SIGINT)
                process.wait(60)
        with report.part("8 gapless check"):
            threads, gapless = _gapless(Path(tmp) / "load.db")
    completed = 0
    events = 0
    firsts = []
    for first, streamed in results.values():
        events += len(streamed)
        firsts.append(first)
        end: dict[str, object] = streamed[-1] if streamed else {}
        if end.get("type") == "RUN_FINISHED" and end.get("result") == {
            "stopReason": "end_turn",
            "rounds": 2,
        }:
            completed += 1
    report.add(Sample(CASE, f"{turns} concurrent two-round turns", "turns/s", (turns / wall,)))
    report.add(
        Sample(
            CASE,
            "time to first event",
            "ms",
            tuple(f * 1000 for f in firsts),
            note=f"p99 {percentile(firsts, 0.99) * 1000:.0f} ms under {turns} concurrent turns",
            distribution=True,
        )
    )
    report.add(
        Sample(
            CASE,
            "catch-up of a finished turn (GET after=0, to its last event)",
            "ms",
            tuple(c * 1000 for c in catch_up),
            distribution=True,
        )
    )
    server_per_event = server_cpu / events * 1e6
    client_per_event = client_cpu / events * 1e6
    report.add(Sample(CASE, "server CPU per streamed event", "µs/event", (server_per_event,)))
    report.add(Sample(CASE, "client CPU per streamed event", "µs/event", (client_per_event,)))
    report.notes.append(
        f"case 8: {completed}/{turns} turns completed (end_turn, 2 rounds), "
        f"{gapless}/{threads} thread logs gapless, {events} events streamed"
    )
    report.target(
        Target(
            "server_turns_completed",
            "every turn under load completed",
            completed,
            turns,
            "turns",
            upper=False,
        )
    )
    report.target(
        Target(
            "server_logs_gapless",
            "every thread's log gapless",
            gapless,
            threads,
            "threads",
            upper=False,
        )
    )
    report.target(
        Target(
            "server_cpu_per_event",
            "server CPU per streamed event / client CPU per streamed event",
            server_per_event / client_per_event,
            2.0,
            "x",
        )
    )
