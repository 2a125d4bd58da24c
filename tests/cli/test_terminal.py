"""What the CLI prints of a hostile server's text: no control character reaches the
terminal, ``--json`` stays exact, and the output stays linear in what happened."""

from __future__ import annotations

import io
import json
import socket
import sys
from pathlib import Path

from toolrelay.cli import ExitCode, main
from toolrelay.cli._terminal import neutralise

# The hostile server sits with the backend tests (importlib mode: no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent.parent / "backends"))
from _hostile import HostileServer, Request, event, head

ESCAPES = (
    "\x1b]0;pwned title\x07"  # set the window title
    "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # write the clipboard (OSC 52)
    "\x1b[2J\x1b[H"  # clear the screen
    "\rtoolrelay: fake line\n"  # overwrite a line
    "\x9b31m"  # a C1 CSI
    "\u202eevil"  # a bidi override
)


def hostile_run(calls: int = 0) -> bytes:
    js = json.dumps
    parts = [
        event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}'),
        event('{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}'),
        event(js({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi" + ESCAPES})),
        event('{"type":"TEXT_MESSAGE_END","messageId":"m"}'),
    ]
    for n in range(calls):
        name = f"tool{n}\x1b[31m"
        start = {"type": "TOOL_CALL_START", "toolCallId": f"c{n}", "toolCallName": name}
        parts.append(event(js(start)))
        parts.append(event(js({"type": "TOOL_CALL_END", "toolCallId": f"c{n}"})))
    if calls:
        parts.append(event(js({"type": "RUN_ERROR", "message": "bad" + ESCAPES, "code": "x"})))
    else:
        parts.append(event('{"type":"RUN_FINISHED","threadId":"t","runId":"r"}'))
    return b"".join(parts)


def run_cli(url: str, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", url, "--message", "hi", "--retries", "0", *extra], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def assert_safe(text: str) -> None:
    for bad in ("\x1b", "\x07", "\r", "\x9b", "\u202e"):
        assert bad not in text, f"{bad!r} reached the terminal"


def test_control_characters_from_the_wire_never_reach_the_terminal() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + hostile_run())

    with HostileServer(scenario) as server:
        code, out, err = run_cli(server.url)
    assert code == ExitCode.OK, err
    assert_safe(out + err)
    assert "␛]0;pwned title␇" in out  # shown, harmless
    assert "Final answer: hi" in out


def test_json_output_keeps_the_text_exact() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + hostile_run())

    with HostileServer(scenario) as server:
        code, out, _ = run_cli(server.url, "--json")
    assert code == ExitCode.OK
    assert "\x1b" not in out  # JSON escapes it...
    state = json.loads(out)
    assert state["messages"][-1]["content"] == "hi" + ESCAPES  # ...and keeps it exact


def test_names_and_errors_from_the_wire_are_neutralised_and_output_is_linear() -> None:
    calls = 300

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + hostile_run(calls))

    with HostileServer(scenario) as server:
        code, out, err = run_cli(server.url)
    assert code == ExitCode.FAILED
    assert_safe(out + err)
    assert "bad␛]0;pwned title␇" in out
    # Each call's name printed once as it streams: linear, not the whole list per call.
    calling = [line for line in out.splitlines() if line.startswith("Calling: ")]
    assert len(calling) == calls
    assert sum(len(line) for line in calling) < calls * 40
    assert len(out) < 100_000


def test_neutralise_keeps_ordinary_text() -> None:
    text = "Hello, wörld! 你好 🎉\n\tindented"
    assert neutralise(text) == text
    assert neutralise("a\r\nb\x00c\x7f") == "a\nb\u2400c\u2421"


def test_violations_past_a_few_are_counted_not_listed() -> None:
    unknown = b"".join(
        event(json.dumps({"type": "TOOL_CALL_ARGS", "toolCallId": f"nope{n}", "delta": "x"}))
        for n in range(50)
    )

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        run = hostile_run()
        cut = run.index(b'data: {"type":"RUN_FINISHED"')
        conn.sendall(head() + run[:cut] + unknown + run[cut:])

    with HostileServer(scenario) as server:
        code, out, err = run_cli(server.url)
        _, as_json, _ = run_cli(server.url, "--json")
    assert code == ExitCode.OK, err
    listed = [line for line in out.splitlines() if line.startswith("Protocol violation (")]
    assert len(listed) == 5
    violations = json.loads(as_json)["violations"]  # --json keeps every one
    assert sum(v["code"] == "args_for_unknown_call" for v in violations) == 50
    rest = len(violations) - 5
    assert f"... and {rest} more protocol violation(s) (args_for_unknown_call: " in out


def test_each_retry_is_printed() -> None:
    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            conn.sendall(head("503 Service Unavailable", "text/plain", ["Retry-After: 0"]))
            conn.sendall(b"busy \x1b[2J")
        else:
            conn.sendall(head() + hostile_run())

    with HostileServer(scenario) as server:
        out, err = io.StringIO(), io.StringIO()
        code = main(["run", server.url, "--message", "hi"], stdout=out, stderr=err)
    assert code == ExitCode.OK, err.getvalue()
    assert "Retrying in 0.0 s (attempt 1 failed: HTTP 503: busy ␛[2J)" in out.getvalue()
