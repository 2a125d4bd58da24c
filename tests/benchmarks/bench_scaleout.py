"""Case 9: scale-out: turns of two tool rounds over two server processes on PostgreSQL.

The same load (N turns, each two tool rounds of the demo agent's ``multihop``
scenario, at most ``IN_FLIGHT`` at once, spread evenly over the processes' ports) is
run, in one go, against:

- two ``toolrelay serve`` processes sharing one PostgreSQL store (shared mode: each
  turn claimed, its writes fenced, every commit notified);
- one such process on PostgreSQL (the baseline of the scale-out figures);
- one process on a SQLite file (the embedded default, no claims).

Reported: turns/s; every turn completed and every thread's log gapless (read from
the database afterwards); the p99 of the claim each run makes of its thread (from the
processes' ``toolrelay_claim_seconds`` histograms: an upper bound, a bucket's edge);
and CPU seconds per turn, the servers' plus the database's (``/proc``: PostgreSQL's
postmaster with its reaped and live backends).

Two targets read the two-process run against the one-process run on PostgreSQL:
CPU per turn at most 1.3x (scale-out costs little), everywhere; and turns/s at least
1.6x, which needs a free core for the second process, so it is checked only where
``os.cpu_count() >= 4`` (the client, two servers and the database share the cores;
on fewer the ratio is reported, not checked).
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import msgspec
from bench_harness import Report, Sample, Target
from bench_postgres import shared_server

__all__ = ("run_scaleout",)

CASE = "9. scale-out"
SRC = Path(__file__).resolve().parents[2] / "src"
IN_FLIGHT = 100  # turns in flight at once over all processes


def _cpu(pid: int, *, children: bool = False) -> float:
    """CPU seconds of ``pid`` (with its reaped children's when ``children``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _database_cpu(postmaster: int) -> float:
    """The PostgreSQL server's CPU seconds: the postmaster, the backends it reaped,
    and its live children."""
    total = _cpu(postmaster, children=True)
    try:
        listing = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text()
    except FileNotFoundError:
        return total
    return total + sum(_cpu(int(pid)) for pid in listing.split())


@contextmanager
def _serve(
    workdir: Path, stores: Sequence[str], log: Path
) -> Iterator[list[tuple[subprocess.Popen[str], str]]]:
    """One ``toolrelay serve`` per store, started together and stopped together (each
    start-up and each graceful stop takes about a second)."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("TOOLRELAY_TOKEN", None)
    processes: list[subprocess.Popen[str]] = []
    try:
        with log.open("a") as stderr:
            for store in stores:  # one by one: those started are stopped if one fails
                process = subprocess.Popen(
                    [sys.executable, "-m", "toolrelay", "serve", "--port", "0", "--store", store],
                    cwd=workdir,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
                processes.append(process)
        served = []
        for process in processes:
            assert process.stdout is not None
            match = re.search(r"on (http://\S+/)", process.stdout.readline())
            assert match, "toolrelay serve did not start"
            served.append((process, match.group(1)))
        yield served
    finally:
        for process in processes:
            process.send_signal(signal.SIGINT)
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def _body(thread: str) -> dict[str, object]:
    return {
        "threadId": thread,
        "runId": f"r-{thread}",
        "messages": [{"id": f"u-{thread}", "role": "user", "content": "multihop"}],
    }


async def _load(urls: Sequence[str], prefix: str, turns: int) -> tuple[float, int]:
    """Run ``turns`` turns, turn n on ``urls[n % len(urls)]``; (seconds, completed).
    A turn whose stream fails is not completed (the servers' logs say why).

    ``IN_FLIGHT`` clients, each with one keep-alive connection per process, take the
    next turn as soon as their last one ended. (One client with a pool of ``IN_FLIGHT``
    connections cost this process more CPU per turn than the server's: httpcore walks
    every pooled connection, polling its socket, on each request and each response,
    and the load client shares the machine's cores with what is measured.)
    """
    from httpx_sse import aconnect_sse

    completed = 0
    errors: list[str] = []
    numbers = iter(range(turns))
    # A connection is reused at once; one idle for a second is dropped, before uvicorn
    # drops it (5 s): a request sent on a connection the server is closing fails.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=1.0)

    # The clients are made before the clock starts (each would load its own TLS
    # context: one is shared, the URLs are plain HTTP).
    tls = ssl.create_default_context()
    pools = [
        [httpx.AsyncClient(base_url=url, timeout=120, limits=limits, verify=tls) for url in urls]
        for _ in range(min(IN_FLIGHT, turns))
    ]

    async def client(clients: list[httpx.AsyncClient]) -> None:
        nonlocal completed
        for n in numbers:
            last: dict[str, object] = {}
            try:
                async with aconnect_sse(
                    clients[n % len(clients)], "POST", "/", json=_body(f"{prefix}{n}")
                ) as source:
                    async for sse in source.aiter_sse():
                        last = msgspec.json.decode(sse.data)
            except httpx.HTTPError as exc:
                errors.append(f"{prefix}{n}: {type(exc).__name__}: {exc}")
                continue
            if last.get("type") == "RUN_FINISHED" and last.get("result") == {
                "stopReason": "end_turn",
                "rounds": 2,
            }:
                completed += 1

    try:
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for clients in pools:
                group.start_soon(client, clients)
        wall = time.perf_counter() - started
    finally:
        for clients in pools:
            for each in clients:
                await each.aclose()
    if errors:
        print(f"{len(errors)} streams failed, first: {errors[0]}", file=sys.stderr)
    return wall, completed


def _claim_buckets(urls: Sequence[str]) -> tuple[dict[float, float], float]:
    """The processes' claim histograms added up: (upper bound -> cumulative count,
    mean seconds)."""
    buckets: dict[float, float] = defaultdict(float)
    pattern = re.compile(
        r'^toolrelay_claim_seconds_bucket\{le="([^"]+)",outcome="claimed"\} (\S+)$', re.M
    )
    total = re.compile(r'^toolrelay_claim_seconds_(sum|count)\{outcome="claimed"\} (\S+)$', re.M)
    sums = {"sum": 0.0, "count": 0.0}
    for url in urls:
        text = httpx.get(url + "metrics", timeout=30).text
        for bound, count in pattern.findall(text):
            buckets[float(bound)] += float(count)
        for which, value in total.findall(text):
            sums[which] += float(value)
    return dict(buckets), sums["sum"] / sums["count"] if sums["count"] else float("nan")


def _p99_bound(buckets: dict[float, float]) -> float:
    """The smallest bucket edge at or above the 99th percentile (seconds)."""
    if not buckets:
        return float("nan")
    total = buckets.get(float("inf"), max(buckets.values()))
    for bound in sorted(buckets):
        if buckets[bound] >= 0.99 * total:
            return bound
    return float("inf")


def _gapless_postgres(dsn: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(dsn) as connection:
        rows = connection.execute("SELECT thread, seq FROM toolrelay.records").fetchall()
    return _gapless(rows)


def _gapless_sqlite(db: Path) -> tuple[int, int]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        rows = connection.execute("SELECT thread, seq FROM records").fetchall()
    return _gapless(rows)


def _gapless(rows: Sequence[tuple[object, int]]) -> tuple[int, int]:
    """(threads, threads whose log is gapless)."""
    seqs: dict[object, list[int]] = defaultdict(list)
    for thread, seq in rows:
        seqs[thread].append(int(seq))
    good = sum(1 for values in seqs.values() if sorted(values) == list(range(1, len(values) + 1)))
    return len(seqs), good


@dataclass
class _Run:
    name: str
    turns: int
    wall: float
    completed: int
    threads: int
    gapless: int
    cpu: float  # servers + database, seconds
    claim_p99: float  # seconds (an upper bound), nan without claims
    claim_mean: float  # seconds, nan without claims

    @property
    def rate(self) -> float:
        return self.turns / self.wall

    @property
    def cpu_per_turn(self) -> float:
        return self.cpu / self.turns


def _run(
    report: Report,
    name: str,
    workdir: Path,
    stores: Sequence[str],
    turns: int,
    postmaster: int | None,
) -> _Run:
    log = workdir / f"{name.split(',')[0].lower()}-{len(stores)}.log"
    with ExitStack() as stack:
        with report.part(f"9 {name}: servers start"):
            served = stack.enter_context(_serve(workdir, stores, log))
        urls = [url for _, url in served]
        with report.part(f"9 {name}: warm-up"):
            anyio.run(_load, urls, "warm-", 4 * len(urls))
        pids = [process.pid for process, _ in served]
        cpu = sum(_cpu(pid) for pid in pids)
        database = _database_cpu(postmaster) if postmaster else 0.0
        with report.part(f"9 {name}: {turns} turns"):
            wall, completed = anyio.run(_load, urls, "load-", turns)
        cpu = sum(_cpu(pid) for pid in pids) - cpu
        if postmaster:
            cpu += _database_cpu(postmaster) - database
        buckets, claim_mean = _claim_buckets(urls) if postmaster else ({}, float("nan"))
        claim_p99 = _p99_bound(buckets) if postmaster else float("nan")
        stopping = time.perf_counter()
    report.record_part(f"9 {name}: servers stop", time.perf_counter() - stopping)
    with report.part(f"9 {name}: gapless check"):
        if postmaster:
            threads, gapless = _gapless_postgres(stores[0])
        else:
            threads, gapless = _gapless_sqlite(workdir / stores[0])
    errors = [line for line in log.read_text().splitlines() if line.startswith("ERROR")]
    if errors:  # shown with the case's notes: a failure here is a finding
        print(f"{name}: the servers logged {len(errors)} errors:", file=sys.stderr)
        print(log.read_text()[-4000:], file=sys.stderr)
    return _Run(name, turns, wall, completed, threads, gapless, cpu, claim_p99, claim_mean)


def run_scaleout(report: Report, *, quick: bool) -> None:
    """Case 9 (module docstring)."""
    # The figure is 5,000 per configuration; the full run uses 1,000 to stay
    # within its few minutes, and the variable asks for more. Two 1,000-turn loads
    # on the same servers gave CPU-per-turn ratios within 3.5% of the two together,
    # where whole 2,000-turn runs moved from 0.91x to 1.24x with the machine's load
    # (docs/performance.md, "the full run").
    turns = 50 if quick else int(os.environ.get("TOOLRELAY_SCALEOUT_TURNS", "1000"))
    with report.part("9 PostgreSQL start"):
        server = shared_server()  # case 7's, when it ran
    with tempfile.TemporaryDirectory() as tmp:
        if server is None:
            report.notes.append(f"{CASE}: skipped, PostgreSQL is not installed here")
            return
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        workdir = Path(tmp)
        two_dsn, one_dsn = server.create_database(), server.create_database()
        two = _run(
            report, "PostgreSQL, 2 processes", workdir, [two_dsn, two_dsn], turns, postmaster
        )
        one = _run(report, "PostgreSQL, 1 process", workdir, [one_dsn], turns, postmaster)
        lite = _run(report, "SQLite, 1 process", workdir, ["load.db"], turns, None)
    cores = os.cpu_count() or 1
    samples: dict[str, Sample] = {}
    for slug, run in (("postgres_2", two), ("postgres_1", one), ("sqlite_1", lite)):
        samples[run.name] = report.add(
            Sample(CASE, f"{run.name}: {turns} two-round turns", "turns/s", (run.rate,))
        )
        report.add(
            Sample(
                CASE,
                f"{run.name}: CPU per turn (servers + database)",
                "ms/turn",
                (run.cpu_per_turn * 1e3,),
            )
        )
        if run.claim_p99 == run.claim_p99:  # not nan
            report.add(
                Sample(
                    CASE,
                    f"{run.name}: p99 claim latency (bucket edge at or above it)",
                    "ms",
                    (run.claim_p99 * 1e3,),
                    note=f"mean {run.claim_mean * 1e3:.1f} ms; includes the wait for one "
                    "of the process's 8 pooled connections",
                )
            )
        report.notes.append(
            f"{CASE}, {run.name}: {run.completed}/{run.turns} turns completed (end_turn, "
            f"2 rounds), {run.gapless}/{run.threads} thread logs gapless"
        )
        report.target(
            Target(
                f"scaleout_completed_{slug}",
                f"{run.name}: every turn completed, every log gapless",
                min(run.completed / run.turns, run.gapless / max(run.threads, 1)),
                1.0,
                "fraction",
                upper=False,
            )
        )
    speedup = report.ratio(
        "turns/s, 2 processes / 1 process, PostgreSQL",
        samples[two.name],
        samples[one.name],
        "the scale-out figure; it needs a free core for the second process",
    )
    cost = two.cpu_per_turn / one.cpu_per_turn
    report.target(
        Target(
            "scaleout_cpu_per_turn",
            "CPU per turn (servers + database), 2 processes / 1 process on PostgreSQL",
            cost,
            1.3,
            "x",
        )
    )
    if cores >= 4:
        report.target(
            Target(
                "scaleout_turns_per_second",
                "turns/s, 2 processes / 1 process on PostgreSQL",
                speedup,
                1.6,
                "x",
                upper=False,
            )
        )
    else:
        report.notes.append(
            f"{CASE}: this machine has {cores} cores, shared by the load client, the "
            "server processes and PostgreSQL: the second process finds no free core, so "
            f"turns/s 2 processes / 1 process ({speedup:.2f}x) is reported and the 1.6x "
            "target is not checked (it applies where os.cpu_count() >= 4); the cost of "
            f"scaling out is checked instead: CPU per turn {cost:.2f}x (target <= 1.3x)"
        )
    report.notes.append(
        f"{CASE}: {turns} turns per configuration, at most {IN_FLIGHT} in flight, spread "
        "evenly over the processes' ports; PostgreSQL local, fsync off"
    )
