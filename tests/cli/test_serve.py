"""``toolrelay serve`` as real processes: a turn from ``toolrelay run`` against it, a
clean stop on Ctrl-C, and a server killed with SIGKILL mid-tool and restarted on the
same SQLite file (promises 9 and 10 through the server)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import pytest

from toolrelay.store import Entry, ToolFinished, TurnEnded, decode_record

SRC = Path(__file__).resolve().parents[2] / "src"
pytestmark = pytest.mark.slow

SLOW_TOOLS = '''
import asyncio, os
from toolrelay import ToolRegistry, tool

HERE = os.path.dirname(os.path.abspath(__file__))


@tool
async def get_secret_number(name: str) -> int:
    """A person's secret number (alice's first call hangs: the test kills the server)."""
    with open(os.path.join(HERE, "executions"), "a") as log:
        log.write(name + "\\n")
    marker = os.path.join(HERE, "alice-running")
    if name == "alice" and not os.path.exists(marker):
        open(marker, "w").close()
        await asyncio.sleep(120)
    return {"alice": 42, "bob": 7}[name]


TOOLS = ToolRegistry().register(get_secret_number)
'''


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(workdir)])
    env.pop("TOOLRELAY_TOKEN", None)
    return env


@contextmanager
def _server(workdir: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "toolrelay", "serve", "--port", "0", *args],
        cwd=workdir,
        env=_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"on (http://\S+/)", line)
        assert match, f"no address in {line!r}"
        yield process, match.group(1)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _entries(db: Path) -> list[Entry]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        rows = connection.execute("SELECT seq, body FROM records ORDER BY seq").fetchall()
    return [Entry(seq, decode_record(body)) for seq, body in rows]


def test_toolrelay_run_completes_a_turn_and_ctrl_c_stops_cleanly(tmp_path: Path) -> None:
    with _server(tmp_path, "--store", "served.db") as (process, url):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "toolrelay",
                "run",
                url,
                "--json",
                "--message",
                "What are the secret numbers of alice and bob?",
            ],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        state = json.loads(done.stdout)
        assert state["status"] == "completed"
        said = json.dumps(state["messages"])
        assert "secret number is 42" in said and "secret number is 7" in said
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        assert process.stdout is not None
        assert "stopped" in process.stdout.read()
    entries = _entries(tmp_path / "served.db")
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert isinstance(entries[-1].record, TurnEnded)
    assert entries[-1].record.status == "completed"


def test_a_token_is_required_when_given(tmp_path: Path) -> None:
    with _server(tmp_path, "--store", "memory:", "--token", "s3cret") as (process, url):
        body = {
            "threadId": "t",
            "runId": "r",
            "messages": [{"id": "u", "role": "user", "content": "hi"}],
        }
        assert httpx.post(url, json=body).status_code == 401
        ok = httpx.post(url, json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "RUN_FINISHED" in ok.text
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0


def test_killed_mid_tool_the_restarted_server_resumes_the_turn_and_no_call_runs_twice(
    tmp_path: Path,
) -> None:
    (tmp_path / "slowtools.py").write_text(SLOW_TOOLS)
    args = ("--store", "crash.db", "--tools", "slowtools:TOOLS")
    body = {
        "threadId": "crash",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "the secret numbers, please"}],
    }
    with _server(tmp_path, *args) as (process, url):
        with httpx.Client(timeout=30) as client, client.stream("POST", url, json=body) as response:
            assert response.status_code == 200
            deadline = time.monotonic() + 30
            while not (tmp_path / "alice-running").exists():
                assert time.monotonic() < deadline, "alice's call never started"
                time.sleep(0.02)
            # bob's result is written; alice's call hangs: kill the server mid-tool.
            while not any(
                isinstance(e.record, ToolFinished) for e in _entries(tmp_path / "crash.db")
            ):
                assert time.monotonic() < deadline, "bob's result was never written"
                time.sleep(0.02)
            process.send_signal(signal.SIGKILL)
            process.wait(10)
    before = _entries(tmp_path / "crash.db")
    assert not isinstance(before[-1].record, TurnEnded)  # the turn was live at the kill
    with _server(tmp_path, *args) as (process, url):
        with httpx.Client(timeout=30) as client:
            deadline = time.monotonic() + 30
            while True:
                response = client.get(url + "threads/crash/events")
                if response.status_code == 200 and "RUN_FINISHED" in response.text:
                    break
                assert time.monotonic() < deadline, response.text
                time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    entries = _entries(tmp_path / "crash.db")
    assert entries[: len(before)] == before  # nothing committed was lost
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))  # gapless
    finished = Counter(e.record.call_id for e in entries if isinstance(e.record, ToolFinished))
    assert set(finished.values()) == {1}, finished  # one result per call
    executions = Counter((tmp_path / "executions").read_text().split())
    assert executions == {"alice": 1, "bob": 1}  # no call ran twice
    end = entries[-1].record
    assert isinstance(end, TurnEnded) and end.status == "completed"
    alice = next(
        e.record.result
        for e in entries
        if isinstance(e.record, ToolFinished) and e.record.result.error is not None
    )
    assert "was not run again" in (alice.error or "")


def test_ctrl_c_lets_a_running_turn_finish_before_the_server_stops(tmp_path: Path) -> None:
    (tmp_path / "slowish.py").write_text(
        "import asyncio\n"
        "from toolrelay import ToolRegistry\n\n"
        "async def get_secret_number(name: str) -> int:\n"
        '    """Slow but finishes."""\n'
        "    await asyncio.sleep(1.5)\n"
        '    return {"alice": 42, "bob": 7}[name]\n\n'
        "TOOLS = ToolRegistry().register(get_secret_number)\n"
    )
    body = {
        "threadId": "drain",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "the secret numbers"}],
    }
    with _server(tmp_path, "--store", "drain.db", "--tools", "slowish:TOOLS") as (process, url):
        with httpx.Client(timeout=30) as client, client.stream("POST", url, json=body) as response:
            lines = response.iter_lines()
            for line in lines:  # the batch has started: the tools are running
                if "TOOL_CALL_END" in line:
                    break
            process.send_signal(signal.SIGINT)
            rest = "\n".join(lines)
        assert process.wait(30) == 0
    assert "RUN_FINISHED" in rest and "end_turn" in rest  # the turn finished, streamed
    end = _entries(tmp_path / "drain.db")[-1].record
    assert isinstance(end, TurnEnded) and end.status == "completed"


def _slow_turn(thread: str) -> dict[str, object]:
    """A run the demo model answers with its ``slow`` scenario (about 20 s)."""
    return {
        "threadId": thread,
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "slow"}],
    }


def test_the_in_process_demo_model_streams_the_slow_scenario_slowly(tmp_path: Path) -> None:
    arrivals: list[float] = []
    with _server(tmp_path, "--store", "memory:", "--drain", "0.1") as (process, url):
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url, json=_slow_turn("paced")) as response,
        ):
            for line in response.iter_lines():  # live text: each delta as it comes
                if "TEXT_MESSAGE_CONTENT" in line:
                    arrivals.append(time.monotonic())
                    if len(arrivals) == 11:
                        break
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    # The demo agent's slow pace, 0.05 s between two events (not all at once).
    assert arrivals[-1] - arrivals[0] >= 10 * 0.05 * 0.8, arrivals


def test_sigterm_stops_an_idle_server_cleanly(tmp_path: Path) -> None:
    with _server(tmp_path, "--store", "memory:") as (process, url):
        assert httpx.get(url + "healthz").json() == {"status": "ok"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert process.stdout is not None and process.stderr is not None
        assert "toolrelay serve: stopped" in process.stdout.read()
        assert "Traceback" not in process.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_drains_refuses_new_runs_and_ends_a_live_turns_stream_closed(
    tmp_path: Path, sig: signal.Signals
) -> None:
    args = ("--store", "drain.db", "--drain", "1")
    with _server(tmp_path, *args) as (process, url):
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url, json=_slow_turn("live")) as response,
        ):
            lines = response.iter_lines()
            for line in lines:  # the model is streaming its (slow) answer
                if "TEXT_MESSAGE_CONTENT" in line:
                    break
            process.send_signal(sig)
            deadline = time.monotonic() + 10
            while client.get(url + "healthz").json() != {"status": "stopping"}:
                assert time.monotonic() < deadline, "the drain never began"
                time.sleep(0.05)
            # Still listening while it drains: a new run is answered, and refused.
            late = client.post(url, json=_slow_turn("late"))
            rest = [line for line in lines if line.startswith("data: ")]
        assert process.wait(30) == 0
        assert process.stdout is not None and process.stderr is not None
        out, err = process.stdout.read(), process.stderr.read()
    assert late.status_code == 503, late.text
    assert late.json()["error"]["code"] == "unavailable"
    last = json.loads(rest[-1].removeprefix("data: "))
    assert (last["type"], last["code"]) == ("RUN_ERROR", "closed")
    assert "toolrelay serve: stopped" in out
    assert "Traceback" not in err and "graceful shutdown exceeded" not in err
    ends = [e.record for e in _entries(tmp_path / "drain.db") if isinstance(e.record, TurnEnded)]
    assert [(end.status, end.reason.kind) for end in ends] == [("cancelled", "closed")]


def test_a_second_ctrl_c_ends_the_drain_at_once(tmp_path: Path) -> None:
    # The drain would give the slow turn (about 20 s) all the time it needs: only the
    # second Ctrl-C can end it "closed" instead of completed.
    with _server(tmp_path, "--store", "impatient.db", "--drain", "600") as (process, url):
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", url, json=_slow_turn("live")) as response,
        ):
            lines = response.iter_lines()
            for line in lines:
                if "TEXT_MESSAGE_CONTENT" in line:
                    break
            process.send_signal(signal.SIGINT)
            deadline = time.monotonic() + 10
            while client.get(url + "healthz").json() != {"status": "stopping"}:
                assert time.monotonic() < deadline, "the drain never began"
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            rest = [line for line in lines if line.startswith("data: ")]
        assert process.wait(30) == 0
        assert process.stdout is not None and process.stderr is not None
        out, err = process.stdout.read(), process.stderr.read()
    last = json.loads(rest[-1].removeprefix("data: "))
    assert (last["type"], last["code"]) == ("RUN_ERROR", "closed")
    assert "toolrelay serve: stopped" in out
    assert "Traceback" not in err
    ends = [
        e.record for e in _entries(tmp_path / "impatient.db") if isinstance(e.record, TurnEnded)
    ]
    assert [(end.status, end.reason.kind) for end in ends] == [("cancelled", "closed")]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--provider", "openai"], "needs --model"),
        (["--provider", "openai", "--model", "m", "--upstream", "http://x/"], "not both"),
        (["--store", "redis://db"], "unknown store"),
        (["--tools", "no_such_module_here:TOOLS"], "cannot import"),
        (["--max-tool-rounds", "0"], "at least 1"),
    ],
)
def test_serve_refuses_bad_usage_before_it_starts(argv: list[str], says: str) -> None:
    import io

    from toolrelay.cli import ExitCode, main

    out, err = io.StringIO(), io.StringIO()
    assert main(["serve", *argv], stdout=out, stderr=err) == ExitCode.USAGE
    assert says in err.getvalue()
    assert out.getvalue() == ""


def test_toolrelay_run_executes_client_tools_the_server_hands_over(tmp_path: Path) -> None:
    (tmp_path / "nothing.py").write_text(
        "from toolrelay import ToolRegistry\nTOOLS = ToolRegistry()\n"
    )
    with _server(tmp_path, "--store", "client.db", "--tools", "nothing:TOOLS") as (process, url):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "toolrelay",
                "run",
                url,
                "--json",
                "--tools",
                "toolrelay.demo:DEMO_TOOLS",
                "--message",
                "What are the secret numbers of alice and bob?",
            ],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    assert state["status"] == "completed"
    assert state["toolCalls"]["completed"] == 2  # run by the client, not the server
    said = json.dumps(state["messages"])
    assert "secret number is 42" in said and "secret number is 7" in said
    entries = _entries(tmp_path / "client.db")
    results = [e.record for e in entries if isinstance(e.record, ToolFinished)]
    assert sorted(r.result.content for r in results) == ["42", "7"]
    assert isinstance(entries[-1].record, TurnEnded) and entries[-1].record.status == "completed"


def test_killed_while_the_client_owes_results_the_restarted_server_asks_for_none_again(
    tmp_path: Path,
) -> None:
    # The turn waits for the client's calls when the server is killed: recovery gives
    # them an "interrupted" result and the turn goes on. Catch-up shows those results
    # and no second request for the same calls (a client obeying one would get 409).
    (tmp_path / "nothing.py").write_text(
        "from toolrelay import ToolRegistry\nTOOLS = ToolRegistry()\n"
    )
    args = ("--store", "owed.db", "--tools", "nothing:TOOLS")
    declared = [
        {
            "name": "get_secret_number",
            "description": "A person's secret number.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
        }
    ]
    body = {
        "threadId": "owed",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "the secret numbers, please"}],
        "tools": declared,
    }
    with _server(tmp_path, *args) as (process, url):
        with httpx.Client(timeout=30) as client:
            handover = client.post(url, json=body).text
        assert '"stopReason":"client_tools"' in handover
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    owed = re.findall(r'"pendingToolCallIds":\[([^\]]*)\]', handover)
    calls = json.loads(f"[{owed[-1]}]")
    assert len(calls) == 2
    with _server(tmp_path, *args) as (process, url):
        with httpx.Client(timeout=30) as client:
            deadline = time.monotonic() + 30
            while True:
                response = client.get(url + "threads/owed/events")
                if (
                    response.status_code == 200
                    and "RUN_FINISHED" in response.text[len(handover) // 2 :]
                    and response.text.count("RUN_FINISHED") >= 2
                ):
                    break
                assert time.monotonic() < deadline, response.text
                time.sleep(0.1)
            caught_up = response.text
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    # One request for the client's calls (the handover), none after the restart.
    assert caught_up.count('"stopReason":"client_tools"') == 1, caught_up
    # Each owed call's "interrupted" result is shown, once.
    for call_id in calls:
        shown = re.findall(
            r'"type":"TOOL_CALL_RESULT"[^\n]*"toolCallId":"' + re.escape(call_id) + '"',
            caught_up,
        )
        assert len(shown) == 1, (call_id, caught_up)
    entries = _entries(tmp_path / "owed.db")
    started = [e for e in entries if type(e.record).__name__ == "ToolsStarted"]
    assert len(started) == 1  # recovery did not write the batch again
    end = entries[-1].record
    assert isinstance(end, TurnEnded)


def test_the_command_line_names_the_servers_rounds_variable_without_importing_it() -> None:
    # The parser of every command is built on each run, so `serve` keeps its help text's
    # variable name to itself instead of importing the server: the two must agree, and
    # building the parser (as `toolrelay demo` does) must not load the server.
    script = (
        "import sys\n"
        "from toolrelay.cli import _serve, build_parser\n"
        "build_parser(sys.stderr)\n"
        "print('toolrelay.server' in sys.modules)\n"
        "from toolrelay.server import MAX_TOOL_ROUNDS_ENV\n"
        "print(_serve.MAX_TOOL_ROUNDS_ENV == MAX_TOOL_ROUNDS_ENV)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["False", "True"]
