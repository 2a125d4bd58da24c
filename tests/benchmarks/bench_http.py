"""Case 5: events per second over loopback HTTP, through the engine and without it.

The embedded demo agent (``toolrelay.demo.serve_demo``) is served by uvicorn in a
child process, so that the server does not share this process's core or event loop.
Both sides read the same stream, its ``slow`` scenario with no delay (a 400-word
answer: about 400 TEXT_MESSAGE_CONTENT events per run), one request after another:

- alone: ``httpx.AsyncClient`` + ``httpx_sse.aconnect_sse`` + ``aiter_sse`` and a bare
  ``msgspec.json.Decoder(Event)`` on every ``data`` line;
- the engine: ``Engine(AguiHttpBackend(url))``, one ``run_turn`` per request.

The wall-clock rate is reported, but it also depends on the server (and, on a busy
machine, on what else runs), so the comparison is made on this process's CPU time per
event (``time.thread_time``): what the client spends, which is what the engine adds to.
The target: the engine's CPU per event at most that of the bare client (1.0x), and at
most 0.8x of it for one run of 100,000 small deltas that arrive in 64 KiB chunks
(``_chunked_server.py``, a bare asyncio server in a child process).

Repeats: the runs flushed event by event are compared over the run's repeats (7 in
the full run): their per-round ratios spread widely (0.78x to 1.19x in one run), close
to the 1.0x bound. The large chunks and the in-memory comparison take the median of 3
rounds: their per-round ratios stay within 5% of each other (large chunks: 0.439x to
0.446x on asyncio, 0.449x to 0.468x on trio, in the same run; the median of its first
3 rounds read what the median of 7 did), far from the bound, and the four more rounds
of 100,000 events added nothing but seconds.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import msgspec
from bench_harness import Report, Sample, Target, interleaved, no_gc

from toolrelay import RunStatus
from toolrelay.protocol import (
    Event,
    RunAgentInput,
    UserMessage,
    decode_run_input,
    encode,
    encode_event,
)

__all__ = ("available", "run_http")

#: Rounds of the large-chunk and in-memory comparisons (module docstring).
STEADY_REPEATS = 3

CASE = "5. HTTP"
PROPS = {"scenario": "slow", "delay": 0}
PROMPT = "slow"

_SERVER = """
import sys
import anyio
from toolrelay.demo import serve_demo

async def main():
    async with serve_demo() as url:
        print(url, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)

anyio.run(main)
"""


def available() -> str | None:
    """``None`` when the HTTP backend and the demo server exist, else why not."""
    try:
        from toolrelay.backends import AguiHttpBackend  # noqa: F401
        from toolrelay.demo import serve_demo  # noqa: F401
    except ImportError as exc:
        return f"toolrelay.backends.AguiHttpBackend or toolrelay.demo is missing ({exc})"
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        return "uvicorn is not installed (the demo extra)"
    return None


@contextmanager
def demo_server(*command: str) -> Iterator[str]:
    """The demo agent served from a child process (or ``command``'s server); yields
    its URL."""
    process = subprocess.Popen(
        [sys.executable, *(command or ("-c", _SERVER))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the demo server did not start (it printed {url!r})")
        yield url
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True, slots=True)
class Pass:
    events: int
    wall_s: float
    cpu_s: float

    @property
    def wall_rate(self) -> float:
        return self.events / self.wall_s

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s / self.events * 1e6


def in_memory() -> httpx.MockTransport:
    """The demo agent's streams served from memory: each response body is one chunk,
    built with ``toolrelay.demo.plan_reply`` (no socket, no server process)."""
    from toolrelay.demo import plan_reply

    def handler(request: httpx.Request) -> httpx.Response:
        items = plan_reply(decode_run_input(request.content))
        body = b"".join(
            b"data: " + encode_event(item) + b"\n\n"
            for item in items
            if item is not None and not isinstance(item, bytes)
        )
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx.MockTransport(handler)


async def bare(url: str, requests: int, transport: httpx.AsyncBaseTransport | None = None) -> Pass:
    """httpx + httpx-sse + msgspec alone: every request's stream, decoded."""
    from httpx_sse import aconnect_sse

    decode = msgspec.json.Decoder(Event).decode
    headers = {"Content-Type": "application/json"}
    bodies = [
        encode(
            RunAgentInput(
                thread_id=f"bare-{i}",
                run_id=f"run-{i}",
                messages=[UserMessage(id=f"user-{i}", content=PROMPT)],
                forwarded_props=PROPS,
            )
        )
        for i in range(requests)
    ]
    events = 0
    async with httpx.AsyncClient(transport=transport) as client:
        wall, cpu = time.perf_counter(), time.thread_time()
        for body in bodies:
            async with aconnect_sse(client, "POST", url, content=body, headers=headers) as source:
                async for sse in source.aiter_sse():
                    if sse.data:
                        decode(sse.data)
                        events += 1
        return Pass(events, time.perf_counter() - wall, time.thread_time() - cpu)


async def engine(
    url: str,
    requests: int,
    events_per_run: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Pass:
    """The engine: one turn (one run) per request, through AguiHttpBackend."""
    from toolrelay import Engine
    from toolrelay.backends import AguiHttpBackend

    async with AguiHttpBackend(url, transport=transport) as backend:
        async with Engine(backend, forwarded_props=PROPS) as relay:
            wall, cpu = time.perf_counter(), time.thread_time()
            for i in range(requests):
                turn = await relay.run_turn(f"engine-{i}", PROMPT)
                if turn.status is not RunStatus.completed:
                    raise AssertionError(f"HTTP turn did not complete: {turn.reason}")
            return Pass(
                requests * events_per_run, time.perf_counter() - wall, time.thread_time() - cpu
            )


def run_http(report: Report, *, repeats: int, quick: bool) -> None:
    """Case 5: events/s, engine vs httpx + httpx-sse + msgspec alone."""
    missing = available()
    if missing is not None:
        report.notes.append(f"case 5 skipped: {missing}")
        return
    requests = 20 if quick else 100
    backends = ("asyncio",) if quick else ("asyncio", "trio")
    with ExitStack() as stack:
        with report.part("5 demo server start"):
            url = stack.enter_context(demo_server())
        for backend in backends:
            with report.part(f"5 {backend}: warm-up"):
                warm = anyio.run(bare, url, 2, backend=backend)
                per_run = warm.events // 2
                anyio.run(engine, url, 2, per_run, backend=backend)
            passes: dict[str, list[Pass]] = {"bare": [], "engine": []}
            with report.part(f"5 {backend}: {repeats} rounds of {requests} runs x 2"):
                for _ in range(repeats):
                    with no_gc():
                        passes["bare"].append(anyio.run(bare, url, requests, backend=backend))
                    with no_gc():
                        passes["engine"].append(
                            anyio.run(engine, url, requests, per_run, backend=backend)
                        )
            samples: dict[str, Sample] = {}
            for name, label in (
                ("bare", "httpx + httpx-sse + msgspec alone"),
                ("engine", "Engine + AguiHttpBackend"),
            ):
                samples[name] = report.add(
                    Sample(
                        CASE,
                        f"{backend}: {label}, CPU per event",
                        "µs/event",
                        tuple(p.cpu_us_per_event for p in passes[name]),
                        note=f"{requests} runs of {per_run} events per repeat; this "
                        "process's CPU time",
                    )
                )
                report.add(
                    Sample(
                        CASE,
                        f"{backend}: {label}, wall-clock rate",
                        "events/s",
                        tuple(p.wall_rate for p in passes[name]),
                        note="client and server each on their own core",
                    )
                )
            ratio = report.ratio(
                f"{backend}: engine CPU per event / bare client",
                samples["engine"],
                samples["bare"],
                "target <= 1.0",
                paired=True,
            )
            report.target(
                Target(
                    f"http_overhead_{backend}",
                    f"{backend}: engine CPU per event, events flushed one by one, vs httpx + "
                    "httpx-sse + msgspec",
                    ratio,
                    1.0,
                    "x",
                )
            )
    with report.part("5 large chunks"):
        _large_chunks(report, repeats=min(repeats, STEADY_REPEATS), quick=quick)
    with report.part("5 in memory"):
        _in_memory(report, repeats=min(repeats, STEADY_REPEATS), requests=requests)


def _large_chunks(report: Report, *, repeats: int, quick: bool) -> None:
    """100,000 small deltas per run arriving in 64 KiB chunks: the per-event layers,
    with few socket reads (``_chunked_server.py`` in a child process)."""
    deltas = 20_000 if quick else 100_000
    per_run = deltas + 4  # RUN_STARTED, TEXT_MESSAGE_START ... END, RUN_FINISHED
    backends = ("asyncio",) if quick else ("asyncio", "trio")
    server = str(Path(__file__).resolve().parent / "_chunked_server.py")
    with demo_server(server, str(deltas)) as url:
        for backend in backends:
            anyio.run(bare, url, 1, backend=backend)
            anyio.run(engine, url, 1, per_run, backend=backend)

            def bare_pass(backend: str = backend) -> float:
                return anyio.run(bare, url, 1, backend=backend).cpu_us_per_event

            def engine_pass(backend: str = backend) -> float:
                return anyio.run(engine, url, 1, per_run, backend=backend).cpu_us_per_event

            values = interleaved((bare_pass, engine_pass), repeats)
            note = f"one run of {deltas:,} text deltas per repeat, 64 KiB per server write"
            alone = report.add(
                Sample(
                    CASE,
                    f"{backend}: large chunks, httpx + httpx-sse + msgspec alone",
                    "µs/event",
                    values[0],
                    note,
                )
            )
            relay = report.add(
                Sample(
                    CASE,
                    f"{backend}: large chunks, Engine + AguiHttpBackend",
                    "µs/event",
                    values[1],
                    note,
                )
            )
            ratio = report.ratio(
                f"{backend}: large chunks, engine CPU per event / bare client",
                relay,
                alone,
                "target <= 0.8",
                paired=True,
            )
            report.target(
                Target(
                    f"http_large_chunks_{backend}",
                    f"{backend}: engine CPU per event in large chunks vs httpx + httpx-sse "
                    "+ msgspec",
                    ratio,
                    0.8,
                    "x",
                )
            )


def _in_memory(report: Report, *, repeats: int, requests: int) -> None:
    """The same comparison without a socket: what each layer costs per event."""
    url = "http://demo.invalid/"
    transport = in_memory()
    per_run = anyio.run(bare, url, 1, transport).events
    anyio.run(engine, url, 1, per_run, transport)
    values = interleaved(
        (
            lambda: anyio.run(bare, url, requests, transport).cpu_us_per_event,
            lambda: anyio.run(engine, url, requests, per_run, transport).cpu_us_per_event,
        ),
        repeats,
    )
    note = "asyncio; httpx.MockTransport, one chunk per response; for information"
    alone = report.add(
        Sample(CASE, "in memory: httpx + httpx-sse + msgspec alone", "µs/event", values[0], note)
    )
    relay = report.add(
        Sample(CASE, "in memory: Engine + AguiHttpBackend", "µs/event", values[1], note)
    )
    report.ratio(
        "in memory: engine CPU per event / bare client",
        relay,
        alone,
        "the same without socket reads: the per-event layers alone",
        paired=True,
    )
