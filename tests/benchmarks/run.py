"""toolrelay's benchmark suite: one command, one markdown table, the targets checked.

Usage::

    python tests/benchmarks/run.py [--quick] [--json FILE] [--only CASES] [--profile N]

Cases (each compares toolrelay with a floor measured in the same run):

1. processor: ``decode_event`` + ``EventProcessor.receive`` over a realistic
   100,000-event stream, vs msgspec decode alone and the ag-ui-protocol pydantic parse.
2. flat cost: per event at 10 vs 10,000 messages, per delta at 10 vs 100,000 deltas.
3. machines: the compiled cursors vs an enum table and python-statemachine instances.
4. engine: N concurrent two-hop turns on asyncio and trio; overhead per continuation;
   memory per idle turn.
5. HTTP: events over loopback from the demo server, engine vs httpx + httpx-sse + msgspec.
6. store: SQLite writes per block and per turn vs raw sqlite3 and vs no store; memory
   per evicted thread; 10,000 threads loaded and evicted with flat cost.
7. postgres: PostgresStore writes per block vs raw psycopg, and claim latency with two
   workers (skipped where PostgreSQL is not installed).
8. server: concurrent two-round turns against one ``toolrelay serve`` on SQLite:
   turns/s, time to first event, catch-up latency, server vs client CPU per event.
9. scale-out: two-round turns over two ``toolrelay serve`` processes sharing a
   PostgreSQL store, one process on PostgreSQL, one on SQLite: turns/s, p99 claim
   latency, CPU per turn (servers + database); skipped without PostgreSQL.
t. tracing: cost per turn with OpenTelemetry off (no provider set) vs the package
   absent, and on (the SDK with an exporter that drops spans).
c. cold start: ``import toolrelay`` and ``toolrelay demo``'s first answer, each in a
   fresh interpreter, best of a few runs.

``--quick`` (CI's smoke test) runs every case smaller and with fewer repeats, in under
a minute; the targets are read from the full run. Each case's wall time, and its
parts' (set-ups, warm-ups, measurements), go to stderr as the run goes, and with the
JSON (``parts``): the suite's own time is watched as its numbers are. The command exits 0 whether or
not the targets are met, and 1 only if a case itself failed (a bug). Nothing here is
collected by pytest, and no test asserts on wall-clock time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_harness import Report


def _cases(quick: bool) -> dict[str, Callable[[Report], None]]:
    import bench_engine
    import bench_http
    import bench_machines
    import bench_postgres
    import bench_processor
    import bench_scaleout
    import bench_server
    import bench_startup
    import bench_store
    import bench_tracing

    repeats = 3 if quick else 7
    return {
        "1": lambda r: bench_processor.run_throughput(r, repeats=repeats, events=100_000),
        "2": lambda r: bench_processor.run_flat(r, repeats=repeats, quick=quick),
        "3": lambda r: bench_machines.run_machines(r, repeats=repeats, quick=quick),
        "4": lambda r: bench_engine.run_engine(r, quick=quick),
        "5": lambda r: bench_http.run_http(r, repeats=3 if quick else 7, quick=quick),
        "6": lambda r: bench_store.run_store(r, quick=quick),
        "7": lambda r: bench_postgres.run_postgres(r, quick=quick),
        "8": lambda r: bench_server.run_server(r, quick=quick),
        "9": lambda r: bench_scaleout.run_scaleout(r, quick=quick),
        "t": lambda r: bench_tracing.run_tracing(r, quick=quick),
        "c": lambda r: bench_startup.run_startup(r, quick=quick),
    }


def _profiled(case: Callable[[Report], None], report: Report, top: int) -> None:
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    try:
        case(report)
    finally:
        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(top)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller, faster (CI smoke test)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--only", metavar="CASES", default="123456789ct", help="which cases, e.g. 13 (default: all)"
    )
    parser.add_argument(
        "--profile",
        metavar="N",
        type=int,
        default=0,
        help="run each case under cProfile and print its N costliest functions to stderr "
        "(the numbers are then not comparable)",
    )
    args = parser.parse_args(argv)
    report = Report("quick" if args.quick else "full")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    failed = False
    for key, case in _cases(args.quick).items():
        if key not in args.only:
            continue
        started = time.perf_counter()
        print(f"case {key}...", file=sys.stderr, flush=True)
        try:
            if args.profile:
                _profiled(case, report, args.profile)
            else:
                case(report)
        except Exception:
            failed = True
            report.errors.append(f"case {key} failed:\n```\n{traceback.format_exc()}```")
        took = time.perf_counter() - started
        report.parts.append((f"case {key}", took))
        print(f"case {key}: {took:.1f} s", file=sys.stderr, flush=True)
    end_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    report.notes.append(
        f"load average (1 min) {load:.2f} at the start, {end_load:.2f} at the end: other "
        "processes on the machine slow every number, the tails (p99) most"
    )
    import bench_postgres

    bench_postgres.stop_shared_server()  # cases 7 and 9 share one PostgreSQL cluster
    cases = [(name, took) for name, took in report.parts if name.startswith("case ")]
    report.notes.append(
        "wall time per case: "
        + ", ".join(f"{name.removeprefix('case ')} {took:.0f} s" for name, took in cases)
        + f"; {sum(took for _, took in cases):.0f} s in all"
    )
    print(report.markdown())
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
