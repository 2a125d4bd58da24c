"""Several ``toolrelay serve`` processes sharing one PostgreSQL store (issue 13).

Real processes on loopback, each its own port (as on several machines), on the test
session's real PostgreSQL: a turn runs on the process that took its POST; a client on
another process sees every event of it, in order, once; a process killed with
SIGKILL mid-tool has its turn taken over once its lease ran out (no call runs twice,
the log stays gapless); a process frozen past its lease (SIGSTOP) has its late writes
refused once it runs again (SIGCONT). And ``--workers N``: N processes on one port.

Client tools across processes: the results of a client's calls and a cancel reach the
turn whatever process takes them (the thread's inbox), also when the process running
the turn dies just after they were posted; ``toolrelay run --tools`` against
``--workers 2`` completes every time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import msgspec
import psycopg
import pytest
from _pg_cluster import PostgresServer

from toolrelay import TextMessage
from toolrelay.store import Entry, ToolFinished, TurnEnded, TurnStarted, decode_record, replay

SRC = Path(__file__).resolve().parents[2] / "src"
pytestmark = pytest.mark.slow

LEASE = "1.5"

# lookup_city's first call hangs until the test creates the file "gate"; every call
# is counted in "executions", whichever process runs it.
TOOLS = '''
import asyncio, os
from toolrelay import ToolRegistry, tool
from toolrelay.demo import get_weather

HERE = os.path.dirname(os.path.abspath(__file__))


@tool
async def lookup_city(person: str) -> str:
    """Find the city a person lives in (the first call waits for the test's gate)."""
    with open(os.path.join(HERE, "executions"), "a") as log:
        log.write(f"lookup_city {os.getpid()}\\n")
    while not os.path.exists(os.path.join(HERE, "gate")):
        await asyncio.sleep(0.05)
    return "Paris"


TOOLS = ToolRegistry().register(lookup_city).register(get_weather)
'''


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stderr(self) -> str:
        return self.log.with_suffix(".err").read_text(errors="replace")


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(workdir)])
    env.pop("TOOLRELAY_TOKEN", None)
    return env


def _wait_for(what: str, check: Callable[[], object], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@contextmanager
def _serve(workdir: Path, name: str, *args: str) -> Iterator[Worker]:
    out = workdir / f"{name}.out"
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "toolrelay", "serve", "--port", "0", *args],
            cwd=workdir,
            env=_env(workdir),
            stdout=stdout,
            stderr=stderr,
        )
    try:
        found: list[str] = []

        def started() -> bool:
            assert process.poll() is None, out.with_suffix(".err").read_text()
            found[:] = re.findall(r"on (http://\S+/)", out.read_text())
            return bool(found)

        _wait_for(f"{name} to start", started)
        yield Worker(process, found[0], out)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait(10)


@contextmanager
def _workers(workdir: Path, dsn: str, count: int) -> Iterator[list[Worker]]:
    (workdir / "scaletools.py").write_text(TOOLS)
    args = ("--store", dsn, "--lease", LEASE, "--tools", "scaletools:TOOLS", "--drain", "2")
    with ExitStack() as stack:
        yield [stack.enter_context(_serve(workdir, f"w{n}", *args)) for n in range(count)]


@dataclass
class Stream:
    """An SSE response read in a thread: ``(id, event)`` pairs as they come."""

    events: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    status: int | None = None
    body: bytes = b""  # of a response that is not a stream
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def join(self, timeout: float = 60) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream did not end"

    @property
    def types(self) -> list[str]:
        return [str(event["type"]) for _, event in self.events]


def _stream(method: str, url: str, body: dict[str, object] | None = None) -> Stream:
    stream = Stream()

    def read() -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(5, read=120)) as client,
                client.stream(method, url, json=body) as response,
            ):
                stream.status = response.status_code
                if response.status_code != 200:
                    stream.body = response.read()
                    return
                event_id = ""
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        stream.events.append((event_id, msgspec.json.decode(line[6:])))
        except (httpx.HTTPError, OSError) as exc:
            stream.error = exc

    stream.thread = threading.Thread(target=read, daemon=True)
    stream.thread.start()
    return stream


def _run(thread: str, content: str = "the weather where alice lives") -> dict[str, object]:
    return {
        "threadId": thread,
        "runId": f"r-{thread}",
        "messages": [{"id": f"u-{thread}-{content[:4]}", "role": "user", "content": content}],
    }


def _entries(dsn: str, thread: str) -> list[Entry]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT r.seq, r.body FROM toolrelay.records r "
            "JOIN toolrelay.threads t ON r.thread = t.id WHERE t.thread = %s ORDER BY r.seq",
            (thread,),
        ).fetchall()
    return [Entry(int(seq), decode_record(bytes(body))) for seq, body in rows]


def _ended(dsn: str, thread: str, turns: int = 1) -> bool:
    ends = [e for e in _entries(dsn, thread) if isinstance(e.record, TurnEnded)]
    return len(ends) >= turns


def _executions(workdir: Path) -> Counter[str]:
    path = workdir / "executions"
    text = path.read_text() if path.exists() else ""
    return Counter(line.split()[0] for line in text.splitlines())


def _check_log(entries: list[Entry]) -> None:
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))  # gapless
    finished = Counter(e.record.call_id for e in entries if isinstance(e.record, ToolFinished))
    assert all(count == 1 for count in finished.values()), finished  # one result per call


def _check_stream(stream: Stream, entries: list[Entry]) -> None:
    """Every event once, in the log's order, one AG-UI run to its end: each message's
    text deltas add up to the message the log holds."""
    assert stream.error is None, stream.error
    assert stream.status == 200
    whole = [
        (event_id, msgspec.json.encode(event))
        for event_id, event in stream.events
        if event["type"] != "TEXT_MESSAGE_CONTENT"
    ]
    assert len(set(whole)) == len(whole), "an event came twice"
    seqs = [int(event_id.split(":")[0]) for event_id, _ in stream.events]
    assert seqs == sorted(seqs), "events out of order"
    assert stream.types[-1] == "RUN_FINISHED"
    assert stream.events[-1][0] == str(entries[-1].seq)  # up to the log's last record
    texts: dict[str, str] = {}
    for _, event in stream.events:
        if event["type"] == "TEXT_MESSAGE_CONTENT":
            message = str(event["messageId"])
            texts[message] = texts.get(message, "") + str(event["delta"])
    logged = {m.id: m.text for m in replay(entries).messages if isinstance(m, TextMessage)}
    assert texts and all(logged[message] == text for message, text in texts.items())


def test_a_worker_killed_mid_tool_has_its_turn_finished_by_another_and_seen_whole_on_a_third(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 3) as (a, b, c):
        post = _stream("POST", a.url, _run("t1"))
        _wait_for("lookup_city to run on a", lambda: _executions(tmp_path)["lookup_city"] == 1)
        # A client on c follows the turn a runs, from the start of the thread.
        follower = _stream("GET", c.url + "threads/t1/events?after=0")
        _wait_for("c's stream to show the tool call", lambda: "TOOL_CALL_END" in follower.types)
        (tmp_path / "gate").touch()  # from now on the tool returns at once...
        a.process.send_signal(signal.SIGKILL)  # ...but a dies before it does
        a.process.wait(10)
        post.join()
        assert post.error is not None or "RUN_FINISHED" not in post.types  # a's client was cut
        follower.join()
        entries = _entries(postgres_dsn, "t1")
        _check_stream(follower, entries)
        _check_log(entries)
        ends = [e.record for e in entries if isinstance(e.record, TurnEnded)]
        assert [end.status for end in ends] == ["completed"]
        (interrupted,) = [
            e.record.result
            for e in entries
            if isinstance(e.record, ToolFinished) and e.record.result.error is not None
        ]
        assert "not run again" in (interrupted.error or "")  # lookup_city is not idempotent
        assert _executions(tmp_path) == {"lookup_city": 1}  # no call ran twice
        # Exactly one of the live workers took the turn over.
        takers = [w for w in (b, c) if "took over thread t1" in w.stderr()]
        assert len(takers) == 1, [w.stderr() for w in (b, c)]


def test_a_worker_frozen_past_its_lease_has_its_late_writes_refused_and_lets_the_turn_go(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        post = _stream("POST", a.url, _run("t2"))
        _wait_for("lookup_city to run on a", lambda: _executions(tmp_path)["lookup_city"] == 1)
        a.process.send_signal(signal.SIGSTOP)
        # b takes the turn over once a's lease ran out, and finishes it.
        _wait_for("b to finish the turn", lambda: _ended(postgres_dsn, "t2"))
        finished = _entries(postgres_dsn, "t2")
        (tmp_path / "gate").touch()  # a's tool returns as soon as a runs again
        a.process.send_signal(signal.SIGCONT)
        # a's own client gets the turn to its end, as b wrote it.
        post.join()
        _check_stream(post, finished)
        _wait_for("a to see it lost the thread", lambda: "lost thread t2" in a.stderr())
        assert _entries(postgres_dsn, "t2") == finished  # nothing of a's landed
        _check_log(finished)
        assert "took over thread t2" in b.stderr()
        assert _executions(tmp_path)["lookup_city"] == 1
        # a serves on, and a new turn on the thread there reads the log afresh.
        with httpx.Client(timeout=30) as client:
            again = client.post(a.url, json=_run("t2", "just text please"))
        assert again.status_code == 200 and "RUN_FINISHED" in again.text
        entries = _entries(postgres_dsn, "t2")
        _check_log(entries)
        starts = [e.record for e in entries if isinstance(e.record, TurnStarted)]
        assert len(starts) == 2 and _ended(postgres_dsn, "t2", turns=2)


def test_a_thread_whose_turn_runs_on_another_worker_is_refused_typed(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        post = _stream("POST", a.url, _run("t3"))
        _wait_for("lookup_city to run on a", lambda: _executions(tmp_path)["lookup_city"] == 1)
        follower = _stream("GET", b.url + "threads/t3/events")  # b follows a's turn
        with httpx.Client(timeout=30) as client:
            busy = client.post(b.url, json=_run("t3", "something else"))
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "thread_busy"
        assert busy.headers["retry-after"]
        (tmp_path / "gate").touch()
        post.join()
        follower.join()
        entries = _entries(postgres_dsn, "t3")
        _check_stream(post, entries)
        _check_stream(follower, entries)

        # The same events (b has no live text of a's turn: text comes per message).
        def whole(stream: Stream) -> list[str]:
            return [t for t in stream.types if t != "TEXT_MESSAGE_CONTENT"]

        assert whole(follower)[0] == "RUN_STARTED" and whole(follower) == whole(post)
        with httpx.Client(timeout=30) as client:  # the thread is free again: b runs it
            later = client.post(b.url, json=_run("t3", "just text please"))
        assert later.status_code == 200 and "RUN_FINISHED" in later.text
        _check_log(_entries(postgres_dsn, "t3"))


def test_a_worker_stopped_mid_turn_ends_it_and_leaves_the_thread_free_at_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        post = _stream("POST", a.url, _run("t4"))
        _wait_for("lookup_city to run on a", lambda: _executions(tmp_path)["lookup_city"] == 1)
        a.process.send_signal(signal.SIGINT)  # the turn cannot finish within --drain
        assert a.process.wait(30) == 0
        post.join()
        with httpx.Client(timeout=30) as client:  # no lease to wait out: released
            later = client.post(b.url, json=_run("t4", "just text please"))
        assert later.status_code == 200 and "RUN_FINISHED" in later.text
        entries = _entries(postgres_dsn, "t4")
        _check_log(entries)
        ends = [e.record for e in entries if isinstance(e.record, TurnEnded)]
        assert [end.status for end in ends] == ["cancelled", "completed"]
        assert ends[0].reason.kind == "closed"


def test_the_database_restarted_mid_turn_loses_nothing_and_the_turn_goes_on(
    tmp_path: Path, postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        post = _stream("POST", a.url, _run("t5"))
        _wait_for("lookup_city to run on a", lambda: _executions(tmp_path)["lookup_city"] == 1)
        follower = _stream("GET", b.url + "threads/t5/events")
        _wait_for("b's stream to show the tool call", lambda: "TOOL_CALL_END" in follower.types)
        before = _entries(postgres_dsn, "t5")
        postgres_server.restart()  # every connection of both workers ends
        (tmp_path / "gate").touch()
        post.join()
        follower.join()
        entries = _entries(postgres_dsn, "t5")
        assert entries[: len(before)] == before  # nothing committed was lost
        _check_log(entries)
        _check_stream(post, entries)
        _check_stream(follower, entries)  # b's commit feed reconnected
        ends = [e.record for e in entries if isinstance(e.record, TurnEnded)]
        assert [end.status for end in ends] == ["completed"]
        assert _executions(tmp_path)["lookup_city"] == 1


def test_workers_share_one_port_and_stop_cleanly_on_sigterm(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _serve(tmp_path, "sup", "--store", postgres_dsn, "--workers", "2") as supervisor:
        assert "2 workers on" in supervisor.log.read_text()
        assert "postgres@" not in supervisor.log.read_text().replace("postgres@127", "")
        _wait_for(
            "both workers",
            lambda: supervisor.log.read_text().count("ready") == 2,
        )
        streams = [_stream("POST", supervisor.url, _run(f"p{n}")) for n in range(8)]
        for n, stream in enumerate(streams):
            stream.join()
            _check_stream(stream, _entries(postgres_dsn, f"p{n}"))
        # A worker that dies is started again; the port never stops serving.
        pids = [
            int(pid) for pid in re.findall(r"worker \S+:(\d+) ready", supervisor.log.read_text())
        ]
        assert len(set(pids)) == 2 and supervisor.process.pid not in pids
        os.kill(pids[0], signal.SIGKILL)
        _wait_for("a worker to replace it", lambda: supervisor.log.read_text().count("ready") == 3)
        assert "exited" in supervisor.stderr() and "starting another" in supervisor.stderr()
        for n in range(8, 12):
            again = _stream("POST", supervisor.url, _run(f"p{n}"))
            again.join()
            _check_stream(again, _entries(postgres_dsn, f"p{n}"))
        supervisor.process.send_signal(signal.SIGTERM)
        assert supervisor.process.wait(30) == 0
        assert supervisor.log.read_text().rstrip().endswith("stopped")
    for n in range(12):
        entries = _entries(postgres_dsn, f"p{n}")
        _check_log(entries)
        assert sum(isinstance(e.record, ToolFinished) for e in entries) == 2  # two rounds
        assert isinstance(entries[-1].record, TurnEnded)
        assert entries[-1].record.status == "completed"


def test_a_second_signal_to_the_supervisor_ends_the_workers_drain_at_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    (tmp_path / "scaletools.py").write_text(TOOLS)
    args = ("--store", postgres_dsn, "--workers", "2", "--tools", "scaletools:TOOLS")
    with _serve(tmp_path, "sup", *args, "--drain", "600") as supervisor:
        _wait_for("the workers", lambda: supervisor.log.read_text().count("ready") == 2)
        post = _stream("POST", supervisor.url, _run("q1"))  # its tool waits for "gate"
        _wait_for("lookup_city to run", lambda: _executions(tmp_path)["lookup_city"] == 1)
        supervisor.process.send_signal(signal.SIGINT)
        with httpx.Client(timeout=30) as client:
            _wait_for(
                "the drain",
                lambda: client.get(supervisor.url + "healthz").json() == {"status": "stopping"},
            )
        supervisor.process.send_signal(signal.SIGINT)  # the tool would wait 600 s
        assert supervisor.process.wait(30) == 0
        post.join()
    assert post.types[-1] == "RUN_ERROR" and post.events[-1][1]["code"] == "closed"
    entries = _entries(postgres_dsn, "q1")
    _check_log(entries)
    ends = [e.record for e in entries if isinstance(e.record, TurnEnded)]
    assert [(end.status, end.reason.kind) for end in ends] == [("cancelled", "closed")]


def test_workers_that_cannot_start_stop_the_command_with_a_clear_error(tmp_path: Path) -> None:
    unreachable = "postgresql://nobody:s3cret@127.0.0.1:1/none"
    out = tmp_path / "sup.out"
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "toolrelay", "serve", "--port", "0"]
            + ["--store", unreachable, "--workers", "2"],
            cwd=tmp_path,
            env=_env(tmp_path),
            stdout=stdout,
            stderr=stderr,
        )
    try:
        assert process.wait(60) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    said = out.with_suffix(".err").read_text()
    assert "failed to start" in said and "cannot connect to 127.0.0.1:1/none" in said
    assert "s3cret" not in said + out.read_text()


# -- client tools and cancels, on any process ---------------------------------------------

SECRETS = {"alice": "42", "bob": "7"}
CLIENT_TOOLS = [
    {
        "name": "get_secret_number",
        "description": "A person's secret number.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    }
]


def _client_run(thread: str) -> dict[str, object]:
    """A run whose model (the demo's) asks for two calls of the client's tool."""
    question = "What are the secret numbers of alice and bob?"
    return {
        "threadId": thread,
        "runId": f"r-{thread}",
        "messages": [{"id": f"u-{thread}", "role": "user", "content": question}],
        "tools": CLIENT_TOOLS,
    }


def _handed_over(stream: Stream) -> list[str]:
    """The calls the run handed to the client (its RUN_FINISHED says which)."""
    stream.join()
    assert stream.error is None and stream.status == 200, (stream.error, stream.body)
    finished = stream.events[-1][1]
    assert finished["type"] == "RUN_FINISHED", stream.types
    result = finished["result"]
    assert isinstance(result, dict) and result["stopReason"] == "client_tools", result
    pending = result["pendingToolCallIds"]
    assert isinstance(pending, list) and len(pending) == 2
    return [str(call_id) for call_id in pending]


def _answer(thread: str, stream: Stream) -> dict[str, object]:
    """The client's next request: the run's calls, and their results."""
    pending = _handed_over(stream)
    calls: dict[str, dict[str, str]] = {}
    for _, event in stream.events:
        call_id = str(event.get("toolCallId", ""))
        if event["type"] == "TOOL_CALL_START":
            calls[call_id] = {"name": str(event["toolCallName"]), "arguments": ""}
        elif event["type"] == "TOOL_CALL_ARGS":
            calls[call_id]["arguments"] += str(event["delta"])
    body = _client_run(thread)
    messages = list(body["messages"])  # type: ignore[call-overload]
    messages.append(
        {
            "id": f"a-{thread}",
            "role": "assistant",
            "toolCalls": [
                {"id": call_id, "type": "function", "function": calls[call_id]}
                for call_id in pending
            ],
        }
    )
    for call_id in pending:
        person = msgspec.json.decode(calls[call_id]["arguments"])["name"]
        messages.append(
            {
                "id": f"tr-{call_id}",
                "role": "tool",
                "toolCallId": call_id,
                "content": SECRETS[person],
            }
        )
    return {**body, "messages": messages}


def _client_results(entries: list[Entry]) -> list[str]:
    return sorted(e.record.result.content for e in entries if isinstance(e.record, ToolFinished))


def _ends(entries: list[Entry]) -> list[str]:
    return [e.record.status for e in entries if isinstance(e.record, TurnEnded)]


def test_client_results_posted_to_another_worker_finish_the_turn_and_stream_it(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        first = _stream("POST", a.url, _client_run("c1"))
        answered = _stream("POST", b.url, _answer("c1", first))
        answered.join()
        entries = _entries(postgres_dsn, "c1")
        _check_stream(answered, entries)  # b streams the rest of a's turn, to its end
        _check_log(entries)
        assert _ends(entries) == ["completed"]
        assert _client_results(entries) == ["42", "7"]  # each call answered once
        said = "".join(str(event["delta"]) for _, event in answered.events if "delta" in event)
        assert "42" in said and "7" in said


def test_a_cancel_posted_to_another_worker_ends_the_turn_where_it_runs(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        _handed_over(_stream("POST", a.url, _client_run("c2")))
        with httpx.Client(timeout=30) as client:
            cancel = client.post(b.url + "threads/c2/cancel")
        assert cancel.status_code == 200, cancel.text
        assert cancel.json() == {"threadId": "c2", "cancelled": True}
        entries = _entries(postgres_dsn, "c2")  # the end is in the log when b answers
        _check_log(entries)
        assert _ends(entries) == ["cancelled"]
        with httpx.Client(timeout=30) as client:  # nothing left to cancel
            again = client.post(b.url + "threads/c2/cancel")
        assert again.json() == {"threadId": "c2", "cancelled": False}


def test_results_posted_twice_to_two_workers_are_taken_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        answer = _answer("c3", _stream("POST", a.url, _client_run("c3")))
        via_b = _stream("POST", b.url, answer)  # handed over to a...
        via_a = _stream("POST", a.url, answer)  # ...and sent to a itself
        via_b.join()
        via_a.join()
        taken = [s for s in (via_a, via_b) if s.status == 200]
        refused = [s for s in (via_a, via_b) if s.status != 200]
        assert len(taken) == 1 and len(refused) == 1, [(s.status, s.body) for s in (via_a, via_b)]
        assert refused[0].status == 409
        assert msgspec.json.decode(refused[0].body)["error"]["code"] == "no_pending_call"
        entries = _entries(postgres_dsn, "c3")
        _check_stream(taken[0], entries)
        _check_log(entries)
        assert _ends(entries) == ["completed"]
        assert _client_results(entries) == ["42", "7"]


def test_results_posted_just_before_the_worker_running_the_turn_dies_are_not_lost(
    tmp_path: Path, postgres_dsn: str
) -> None:
    with _workers(tmp_path, postgres_dsn, 2) as (a, b):
        answer = _answer("c4", _stream("POST", a.url, _client_run("c4")))
        a.process.send_signal(signal.SIGSTOP)  # a takes nothing more...
        answered = _stream("POST", b.url, answer)

        def posted() -> bool:
            with psycopg.connect(postgres_dsn) as connection:
                row = connection.execute("SELECT count(*) FROM toolrelay.inbox").fetchone()
            return row is not None and row[0] == 1

        _wait_for("b to post the results to a", posted)
        a.process.send_signal(signal.SIGKILL)  # ...and dies with them unread
        a.process.wait(10)
        answered.join()
        entries = _entries(postgres_dsn, "c4")
        _check_stream(answered, entries)
        _check_log(entries)
        assert _ends(entries) == ["completed"]
        assert _client_results(entries) == ["42", "7"]  # the client's, not "interrupted"
        assert "took over thread c4" in b.stderr()


def test_toolrelay_run_with_client_tools_against_two_workers_on_one_port_always_completes(
    tmp_path: Path, postgres_dsn: str
) -> None:
    (tmp_path / "nothing.py").write_text(
        "from toolrelay import ToolRegistry\nTOOLS = ToolRegistry()\n"
    )
    args = ("--store", postgres_dsn, "--workers", "2", "--tools", "nothing:TOOLS")
    with _serve(tmp_path, "sup", *args) as supervisor:
        _wait_for("both workers", lambda: supervisor.log.read_text().count("ready") == 2)
        for attempt in range(10):
            done = subprocess.run(
                [sys.executable, "-m", "toolrelay", "run", supervisor.url, "--json"]
                + ["--tools", "toolrelay.demo:DEMO_TOOLS"]
                + ["--message", "What are the secret numbers of alice and bob?"],
                cwd=tmp_path,
                env=_env(tmp_path),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, (attempt, done.stderr)
            state = msgspec.json.decode(done.stdout)
            assert state["status"] == "completed", (attempt, state)
            assert state["toolCalls"]["completed"] == 2  # run by the client
            said = msgspec.json.encode(state["messages"]).decode()
            assert "secret number is 42" in said and "secret number is 7" in said
        supervisor.process.send_signal(signal.SIGTERM)
        assert supervisor.process.wait(30) == 0
