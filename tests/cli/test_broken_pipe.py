"""A reader that goes away (``toolrelay demo | head -2``): the command stops quietly with
128 + SIGPIPE, as command-line tools do, instead of an error about a task group."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolrelay.cli import ExitCode, main

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pipe")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_whose_reader_closes_the_pipe_exits_141_and_says_nothing(backend: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "toolrelay", "demo", "--scenario", "slow", "--delay", "0.02"]
        + ["--backend", backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    with process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        assert first.startswith(b"Scenario slow"), first
        process.stdout.close()  # `head -1` has what it wanted
        err = process.stderr.read().decode()
        assert process.wait(timeout=60) == ExitCode.BROKEN_PIPE
    assert ExitCode.BROKEN_PIPE.value == 141  # 128 + SIGPIPE, as shells report it
    assert err == ""


class _ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_output_in_process_is_the_same_exit_and_no_error_text() -> None:
    err = io.StringIO()
    code = main(["demo", "--scenario", "secret"], stdout=_ClosedPipe(), stderr=err)
    assert code == ExitCode.BROKEN_PIPE
    assert "error" not in err.getvalue()


def test_other_errors_beside_a_closed_pipe_are_still_reported() -> None:
    class _Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(5, "Input/output error")

    err = io.StringIO()
    code = main(["demo", "--scenario", "secret"], stdout=_Broken(), stderr=err)
    assert code == ExitCode.FAILED
    assert "Input/output error" in err.getvalue()
