"""Promise 9 and 10 with a real process: killed with SIGKILL, restarted on the same file.

The worker (``_crash_worker.py``) starts a turn on a SQLite store; the test waits
until the log shows the turn at the chosen point, kills the process with SIGKILL,
starts it again, and checks what the restarted engine made of the log: every turn
terminal, the sequence gapless and unrepeated, each call's result stored once, and
a call that was running at the crash run again only when its tool is idempotent.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from toolrelay.store import (
    Entry,
    MessageSaved,
    ToolFinished,
    TurnEnded,
    decode_record,
)

WORKER = Path(__file__).with_name("_crash_worker.py")
pytestmark = pytest.mark.slow


def _entries(db: Path) -> list[Entry]:
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
            rows = connection.execute("SELECT seq, body FROM records ORDER BY seq").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []
    return [Entry(seq, decode_record(body)) for seq, body in rows]


def _executions(workdir: Path) -> Counter[str]:
    path = workdir / "executions"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def _kill_when(db: Path, workdir: Path, phase: str, ready: Callable[[], bool]) -> None:
    errors = workdir / "stderr"
    with open(errors, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), str(db), str(workdir), phase],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 30
        while not ready():
            assert process.poll() is None, errors.read_text()
            assert time.monotonic() < deadline, f"the worker never reached {phase!r}"
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL


def _recover(db: Path, workdir: Path) -> dict[str, dict[str, str]]:
    done = subprocess.run(
        [sys.executable, str(WORKER), str(db), str(workdir), "recover"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _check_log(entries: list[Entry]) -> None:
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    finished = Counter(e.record.call_id for e in entries if isinstance(e.record, ToolFinished))
    assert all(count == 1 for count in finished.values()), finished
    assert isinstance(entries[-1].record, TurnEnded)
    assert entries[-1].record.status == "completed"


def test_killed_mid_stream_the_turn_runs_again_and_keeps_what_was_saved(tmp_path: Path) -> None:
    db = tmp_path / "toolrelay.db"

    def text_saved() -> bool:
        return any(
            isinstance(e.record, MessageSaved)
            and e.record.message.__class__.__name__ == "StoredText"
            for e in _entries(db)
        )

    _kill_when(db, tmp_path, "stream", text_saved)
    before = _entries(db)
    assert _recover(db, tmp_path) == {
        "t": {"status": "completed", "reason": "completed: the agent answered"}
    }
    after = _entries(db)
    assert after[: len(before)] == before  # nothing committed is lost or rewritten
    _check_log(after)
    assert _executions(tmp_path) == Counter({"fast": 1})


def test_killed_mid_tool_a_stored_result_is_kept_and_only_idempotent_calls_run_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "toolrelay.db"

    def tools_hang() -> bool:
        runs = _executions(tmp_path)
        stored = any(isinstance(e.record, ToolFinished) for e in _entries(db))
        return stored and runs["slow"] == 1 and runs["again"] == 1

    _kill_when(db, tmp_path, "tool", tools_hang)
    before = _entries(db)
    assert _recover(db, tmp_path)["t"]["status"] == "completed"
    after = _entries(db)
    assert after[: len(before)] == before
    _check_log(after)
    # fast had its result stored: never again. slow was running and is not
    # idempotent: not again, the model is told. again is idempotent: it ran twice.
    assert _executions(tmp_path) == Counter({"fast": 1, "slow": 1, "again": 2})
    results = {
        e.record.call_id: e.record.result for e in after if isinstance(e.record, ToolFinished)
    }
    assert sorted(r.content for r in results.values() if r.ok) == ["2", "4"]
    (interrupted,) = [r for r in results.values() if not r.ok]
    assert interrupted.error is not None and interrupted.error.startswith("interrupted")


def test_killed_between_the_results_and_the_continuation_the_turn_continues(
    tmp_path: Path,
) -> None:
    db = tmp_path / "toolrelay.db"

    def batch_committed() -> bool:
        return any(
            isinstance(e.record, MessageSaved)
            and e.record.message.__class__.__name__ == "StoredBatch"
            for e in _entries(db)
        )

    _kill_when(db, tmp_path, "between", batch_committed)
    before = _entries(db)
    assert _recover(db, tmp_path)["t"]["status"] == "completed"
    after = _entries(db)
    assert after[: len(before)] == before
    _check_log(after)
    assert _executions(tmp_path) == Counter({"fast": 1})
    assert os.path.getsize(db) > 0
