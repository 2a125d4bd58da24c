"""`toolrelay demo --diagram OUT` and `toolrelay replay FILE --diagram OUT`."""

from __future__ import annotations

import io
from pathlib import Path

from toolrelay.cli import ExitCode, main

CAPTURES = Path(__file__).parent.parent / "backends" / "captures"


def test_demo_writes_the_finished_turn_as_a_sequence_diagram(tmp_path: Path) -> None:
    out = tmp_path / "turn.mmd"
    code = main(["demo", "--diagram", str(out)], stdout=io.StringIO(), stderr=io.StringIO())
    assert code == ExitCode.OK
    diagram = out.read_text(encoding="utf-8")
    assert diagram.startswith("sequenceDiagram")
    assert "get_secret_number" in diagram and "completed: 42" in diagram
    assert "continuation: run 2" in diagram
    assert "turn completed" in diagram


def test_replay_writes_the_recorded_run_with_its_abandoned_calls(tmp_path: Path) -> None:
    out = tmp_path / "broken.mmd"
    code = main(
        ["replay", str(CAPTURES / "demo-broken.sse"), "--diagram", str(out)],
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert code == ExitCode.FAILED
    diagram = out.read_text(encoding="utf-8")
    assert "abandoned, never run" in diagram
    assert "turn failed (protocol_error" in diagram


def test_an_unwritable_diagram_path_is_a_usage_error(tmp_path: Path) -> None:
    err = io.StringIO()
    target = tmp_path / "missing-dir" / "x.mmd"
    code = main(
        ["replay", str(CAPTURES / "demo-secret-answer.sse"), "--diagram", str(target)],
        stdout=io.StringIO(),
        stderr=err,
    )
    assert code == ExitCode.USAGE
    assert "cannot write" in err.getvalue()
