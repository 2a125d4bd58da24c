"""``toolrelay replay`` on hostile captures: every problem reported (deep JSON
included), bounded memory on a large capture, the wire's small print."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

from toolrelay import Limits, RunStatus, TextMessage
from toolrelay.cli import ExitCode, main
from toolrelay.cli._replay import MAX_FINDINGS, replay_capture

START = b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
TEXT = (
    b'data: {"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}\n\n'
    b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}\n\n'
    b'data: {"type":"TEXT_MESSAGE_END","messageId":"m"}\n\n'
)
FINISH = b'data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}\n\n'
DEEP = b'data: {"type":"CUSTOM","name":"x","value":' + b"[" * 30_000 + b"]" * 30_000 + b"}\n\n"


def texts(report: object) -> list[str]:
    messages = report.processor.conversation.messages  # type: ignore[attr-defined]
    return [m.text for m in messages if isinstance(m, TextMessage)]


def test_every_problem_is_reported_deep_json_included() -> None:
    capture = START + DEEP + b"data: not json\n\n" + TEXT + DEEP + FINISH
    report = replay_capture(capture)
    assert [f.code for f in report.findings] == [
        "nesting_too_deep",
        "malformed_event",
        "nesting_too_deep",
    ]
    assert report.status is RunStatus.completed
    assert texts(report) == ["hi"]


def test_a_large_capture_is_replayed_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "large.sse"
    ping = b'data: {"type":"CUSTOM","name":"ping","value":1}\n\n'
    with path.open("wb") as capture:
        capture.write(START)
        for _ in range(12):
            capture.write(ping * 10_000)  # 120 000 events, about 6 MB
        capture.write(TEXT + FINISH)
    tracemalloc.start()
    try:
        with path.open("rb") as capture:
            report = replay_capture(capture)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.sse_events == 120_005
    assert report.status is RunStatus.completed
    # Held whole with its decoded events, it took more than 20 MiB.
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB for a 6 MB capture"


def test_findings_past_the_cap_are_counted_and_the_cli_says_so(tmp_path: Path) -> None:
    bad = b"data: not json\n\n"
    path = tmp_path / "bad.sse"
    path.write_bytes(START + bad * (MAX_FINDINGS + 25) + FINISH)
    report = replay_capture(path.read_bytes())
    assert len(report.findings) == MAX_FINDINGS
    assert report.omitted == {"malformed_event": 25}
    out = io.StringIO()
    code = main(["replay", str(path)], stdout=out, stderr=io.StringIO())
    assert code == ExitCode.CHECK_FAILED  # the run completed; the capture is bad
    assert f"Protocol violations ({MAX_FINDINGS + 25})" in out.getvalue()
    assert "... and more, counted: malformed_event: 25" in out.getvalue()


def test_a_line_longer_than_the_bound_is_cut_and_reported() -> None:
    huge = b"data: " + b"x" * 300_000 + b"\n\n"
    capture = io.BytesIO(START + huge + TEXT + FINISH)  # read in pieces, as a file is
    report = replay_capture(capture, limits=Limits(max_event_bytes=10_000))
    codes = [f.code for f in report.findings]
    assert codes[0] == "line_too_long"
    assert report.status is RunStatus.completed
    assert texts(report) == ["hi"]


def test_bom_cr_line_endings_and_bad_utf8_in_a_capture() -> None:
    capture = b"\xef\xbb\xbf" + (START + TEXT + FINISH).replace(b"\n", b"\r")
    report = replay_capture(capture)
    assert report.findings == []
    assert report.status is RunStatus.completed
    bad = b'data: {"type":"CUSTOM","name":"x","value":"\xff"}\n\n'
    report = replay_capture(START + bad + TEXT + FINISH)
    assert [f.code for f in report.findings] == ["invalid_utf8"]
    assert texts(report) == ["hi"]


def test_replay_output_neutralises_control_characters(tmp_path: Path) -> None:
    evil = json.dumps(
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "\x1b]0;title\x07\r"}
    ).encode()
    capture = (
        START
        + TEXT.replace(
            b'data: {"type":"TEXT_MESSAGE_END',
            b"data: " + evil + b'\n\ndata: {"type":"TEXT_MESSAGE_END',
        )
        + FINISH
    )
    path = tmp_path / "evil.sse"
    path.write_bytes(capture)
    out = io.StringIO()
    assert main(["replay", str(path)], stdout=out, stderr=io.StringIO()) == ExitCode.OK
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    assert "␛]0;title␇" in out.getvalue()
