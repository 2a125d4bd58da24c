"""Colour in the CLI: on a terminal only, never with ``NO_COLOR``, always with
``FORCE_COLOR``; a real process writing to a real pseudo-terminal and to a pipe."""

from __future__ import annotations

import io
import os
import pty
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from toolrelay.cli import ExitCode, main
from toolrelay.cli._terminal import Palette, colour_wanted

# The hostile server sits with the backend tests (importlib mode: no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent.parent / "backends"))
from _hostile import HostileServer, Request, event, head

SRC = Path(__file__).resolve().parents[2] / "src"
SGR = re.compile(r"\x1b\[[0-9;]*m")
GREEN_COMPLETED = "\n\x1b[32mCompleted: the agent answered.\x1b[0m\n"


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["PYTHONPATH"] = str(SRC)
    env["TERM"] = "xterm-256color"
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _demo_on_a_terminal(**env: str | None) -> str:
    """``toolrelay demo`` with its stdout on a pseudo-terminal; what it printed."""
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "toolrelay", "demo", "--delay", "0"],
            stdout=secondary,
            stderr=subprocess.PIPE,
            env=_env(**env),
        )
        os.close(secondary)
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        _, err = process.communicate(timeout=60)
        assert process.returncode == ExitCode.OK, err
    finally:
        os.close(primary)
    return b"".join(chunks).decode().replace("\r\n", "\n")  # the tty's ONLCR


def _demo_piped(**env: str | None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "toolrelay", "demo", "--delay", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=_env(**env),
    )
    return done.stdout


def test_a_terminal_gets_colour() -> None:
    out = _demo_on_a_terminal()
    assert GREEN_COMPLETED in out
    assert "\x1b[32m  ok  \x1b[0m get_secret_number(" in out
    assert "Final answer: Alice's secret number is 42" in SGR.sub("", out)


def test_no_color_keeps_a_terminal_plain() -> None:
    out = _demo_on_a_terminal(NO_COLOR="1")
    assert "\x1b" not in out
    assert "\nCompleted: the agent answered.\n" in out


def test_a_pipe_gets_no_colour_unless_forced() -> None:
    plain = _demo_piped()
    assert "\x1b" not in plain
    assert "\nCompleted: the agent answered.\n" in plain
    assert GREEN_COMPLETED in _demo_piped(FORCE_COLOR="1")


@pytest.mark.parametrize(
    ("tty", "environ", "wanted"),
    [
        (True, {}, True),
        (False, {}, False),
        (True, {"NO_COLOR": "1"}, False),
        (True, {"NO_COLOR": ""}, True),  # set but empty: no opinion (no-color.org)
        (True, {"TERM": "dumb"}, False),
        (False, {"FORCE_COLOR": "1"}, True),
        (True, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, True),
    ],
)
def test_colour_wanted(tty: bool, environ: dict[str, str], wanted: bool) -> None:
    if tty:
        primary, secondary = pty.openpty()
        with open(secondary, "w", encoding="utf-8") as stream:
            assert colour_wanted(stream, environ) is wanted
        os.close(primary)
    else:
        assert colour_wanted(io.StringIO(), environ) is wanted


def test_a_closed_stream_gets_no_colour() -> None:
    stream = io.StringIO()
    stream.close()
    assert colour_wanted(stream, {}) is False


def test_paint_keeps_the_newline_outside_and_plain_text_plain() -> None:
    assert Palette(True).paint("PASS\n", "green") == "\x1b[32mPASS\x1b[0m\n"
    assert Palette(False).paint("PASS\n", "green") == "PASS\n"
    assert Palette(True).paint("\nFailed\n", "red") == "\n\x1b[31mFailed\x1b[0m\n"
    assert Palette(True).paint("", "red") == ""
    assert Palette(True).paint("\n", "red") == "\n"


def test_in_colour_the_only_escapes_are_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's control characters stay neutralised when colour is on: every ESC in
    the output starts one of toolrelay's own SGR codes."""
    escapes = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b1m"

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(
            head()
            + event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}')
            + event('{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}')
            + event(
                '{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi'
                + escapes.encode("unicode_escape").decode().replace("\\x", "\\u00")
                + '"}'
            )
            + event('{"type":"TEXT_MESSAGE_END","messageId":"m"}')
            + event('{"type":"RUN_FINISHED","threadId":"t","runId":"r"}')
        )

    monkeypatch.setenv("FORCE_COLOR", "1")
    out, err = io.StringIO(), io.StringIO()
    with HostileServer(scenario) as server:
        code = main(["run", server.url, "--message", "hi"], stdout=out, stderr=err)
    assert code == ExitCode.OK, err.getvalue()
    text = out.getvalue()
    assert GREEN_COMPLETED in text  # colour is on
    leftover = SGR.sub("", text)
    assert "\x1b" not in leftover and "\x9b" not in leftover and "\x07" not in leftover
    assert "␛[31mred" in leftover  # the server's own "colour" shown, harmless


def test_run_reports_each_violation_once(caplog: pytest.LogCaptureFixture) -> None:
    """The summary prints the violation; the processor's warning about it is not logged
    on top (``--debug`` keeps it)."""

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(
            head()
            + event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}')
            + event('{"type":"TOOL_CALL_ARGS","toolCallId":"ghost","delta":"{}"}')
            + event('{"type":"RUN_FINISHED","threadId":"t","runId":"r"}')
        )

    with HostileServer(scenario) as server:
        for debug in ([], ["--debug"]):
            caplog.clear()
            out, err = io.StringIO(), io.StringIO()
            argv = [*debug, "run", server.url, "--message", "hi", "--retries", "0"]
            assert main(argv, stdout=out, stderr=err) == ExitCode.OK, err.getvalue()
            assert out.getvalue().count("args_for_unknown_call") == 1
            logged = [r for r in caplog.records if "args_for_unknown_call" in r.getMessage()]
            assert len(logged) == (1 if debug else 0)
