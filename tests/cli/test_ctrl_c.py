"""Ctrl-C in ``toolrelay run`` and ``toolrelay demo``: a real process, a real SIGINT in
the middle of a slow turn. The turn ends ``cancelled``, its summary is printed, and the
command exits 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolrelay.cli import ExitCode
from toolrelay.demo import DemoServer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process")

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def server() -> Iterator[DemoServer]:
    with DemoServer() as demo:
        yield demo


def _start(*argv: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    env.pop("NO_COLOR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "toolrelay", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _interrupt_once_streaming(process: subprocess.Popen[bytes], sign: bytes) -> tuple[str, str]:
    """Read stdout until ``sign`` shows the turn is under way, send SIGINT, and return
    everything the process printed."""
    assert process.stdout is not None
    seen = b""
    deadline = time.monotonic() + 60
    while sign not in seen:
        assert time.monotonic() < deadline, seen
        piece = os.read(process.stdout.fileno(), 4096)
        assert piece, f"the process ended before {sign!r}: {seen!r}"
        seen += piece
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return (seen + out).decode(), err.decode()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_during_demo_cancels_the_turn_prints_its_summary_and_exits_130(
    backend: str,
) -> None:
    process = _start("demo", "--scenario", "slow", "--delay", "0.05", "--backend", backend)
    out, err = _interrupt_once_streaming(process, b" word3 ")
    assert process.returncode == ExitCode.CTRL_C, err
    assert ExitCode.CTRL_C.value == 130  # 128 + SIGINT, as shells report it
    assert "\nCancelled (cancelled): cancelled by Ctrl-C (SIGINT)\n" in out
    assert "Kept: the 2 message(s) of the conversation so far, nothing lost." in out
    assert "Runs: 1 | tool calls: 0 executed (0 completed, 0 failed) | depth: 0 |" in out
    assert "Traceback" not in err


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_during_run_prints_the_json_state_and_exits_130(
    server: DemoServer, backend: str
) -> None:
    before = len(server.app.requests)
    process = _start(
        "run", server.url, "--message", "Tell me something slow.", "--json", "--backend", backend
    )
    # --json prints nothing before the end: wait for the server to be streaming the run.
    deadline = time.monotonic() + 60
    while len(server.app.requests) == before:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    out, err = _interrupt_once_streaming(process, b"")
    assert process.returncode == 130, err
    state = json.loads(out)
    assert state["status"] == "cancelled"
    assert state["reason"]["message"] == "cancelled by Ctrl-C (SIGINT)"
    said = [m["content"] for m in state["messages"] if m["role"] == "assistant"]
    story = " ".join(f"word{n}" for n in range(1, 401))
    assert all(story.startswith(text.strip()) for text in said)  # what arrived, kept
    assert state["messages"][0]["content"] == "Tell me something slow."


def test_ctrl_c_during_run_prints_the_text_summary(server: DemoServer) -> None:
    process = _start("run", server.url, "--message", "Tell me something slow.")
    out, err = _interrupt_once_streaming(process, b" word3 ")
    assert process.returncode == 130, err
    assert "\nCancelled (cancelled): cancelled by Ctrl-C (SIGINT)\n" in out
    assert "Agent: word1 word2 word3 " in out
