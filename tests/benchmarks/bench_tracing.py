"""Case t: what OpenTelemetry tracing costs per turn, on asyncio and on trio.

The same two-hop turn (three runs, two tool calls, against the in-process
:class:`ScriptedAgent`) is run one after another on one engine, in three set-ups
measured interleaved (round by round, so a slow phase of the machine hits them alike):

- *absent*: the engine as if ``opentelemetry-api`` were not installed (the tracing
  module's ``AVAILABLE`` flag off);
- *off*: the package installed and no tracer provider set (the API's proxy provider):
  what every user who does not trace pays. The target: the same as *absent*, within
  the noise;
- *on*: the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` and an exporter
  that drops every span: the cost of making the spans (six per turn), without any I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import anyio
from bench_harness import Report, Sample, Target, interleaved

from toolrelay import Engine, RunStatus, ThreadKey, ToolRegistry
from toolrelay._runtime import _tracing
from toolrelay.protocol import RunAgentInput, ToolMessage
from toolrelay.testing import ScriptedAgent, text, tool_call
from toolrelay.testing._scripted import Script

__all__ = ("run_tracing",)

CASE = "t. tracing"
BACKENDS = ("asyncio", "trio")


async def lookup(hop: int) -> str:
    """Look something up.

    Args:
        hop: Which hop.
    """
    return f"result {hop}"


TOOLS = ToolRegistry.of(lookup)


def _two_hops(key: ThreadKey, run_input: RunAgentInput) -> Script:
    hop = sum(1 for message in run_input.messages if isinstance(message, ToolMessage))
    if hop < 2:
        return [tool_call("lookup", {"hop": hop})]
    return [text("Both lookups are done.")]


def _dropping_provider() -> Any:
    """An SDK tracer provider whose exporter drops every span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    return provider


async def _turns(n: int, provider: Any) -> float:
    """µs per turn for ``n`` two-hop turns, one after another."""
    agent = ScriptedAgent(respond=_two_hops)
    async with Engine(agent, tools=TOOLS, tracer_provider=provider) as engine:
        await engine.run_turn("warm-up", "Look it up twice.")
        began = time.perf_counter_ns()
        for i in range(n):
            turn = await engine.run_turn(f"turn-{i:06d}", "Look it up twice.")
            if turn.status is not RunStatus.completed:
                raise AssertionError(f"turn {i} ended {turn.status}: {turn.reason}")
        return (time.perf_counter_ns() - began) / 1_000 / n


def _measure(backend: str, n: int, setup: str, provider: Any) -> Callable[[], float]:
    def measure() -> float:
        if setup == "absent":
            with mock.patch.object(_tracing, "AVAILABLE", False):
                value: float = anyio.run(_turns, n, None, backend=backend)
                return value
        value = anyio.run(_turns, n, provider if setup == "on" else None, backend=backend)
        return value

    return measure


def run_tracing(report: Report, *, quick: bool) -> None:
    """Case t on asyncio and trio."""
    if not _tracing.AVAILABLE:
        report.notes.append("case t skipped: opentelemetry-api is not installed")
        return
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        report.errors.append("case t: a global tracer provider is set; 'off' cannot be measured")
        return
    n = 50 if quick else 300
    repeats = 3 if quick else 7
    provider = _dropping_provider()
    try:
        for backend in BACKENDS:
            setups = ("absent", "off", "on")
            with report.part(f"t {backend}: {repeats} rounds of {n} turns x 3"):
                values = interleaved([_measure(backend, n, s, provider) for s in setups], repeats)
            samples = {
                setup: report.add(
                    Sample(
                        CASE,
                        f"{backend}: two-hop turn, tracing {setup}",
                        "µs/turn",
                        found,
                        note=note,
                    )
                )
                for setup, found, note in zip(
                    setups,
                    values,
                    (
                        "as if opentelemetry-api were not installed",
                        "opentelemetry-api installed, no tracer provider set",
                        "SDK provider, SimpleSpanProcessor, an exporter that drops "
                        "spans (6 spans per turn)",
                    ),
                    strict=True,
                )
            }
            off = report.ratio(
                f"{backend}: per turn, tracing off / package absent",
                samples["off"],
                samples["absent"],
                "what not tracing costs (1 = nothing)",
                paired=True,
            )
            report.ratio(
                f"{backend}: per turn, tracing on (spans dropped) / off",
                samples["on"],
                samples["off"],
                "what making the spans costs",
                paired=True,
            )
            report.target(
                Target(
                    f"tracing_off_{backend}",
                    f"{backend}: per-turn cost with tracing off vs the package absent",
                    off,
                    1.05,
                    "x",
                )
            )
    finally:
        provider.shutdown()
