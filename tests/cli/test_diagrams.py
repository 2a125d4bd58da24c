"""``toolrelay diagrams``: write, check for drift, images with and without Graphviz."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from toolrelay.cli import ExitCode, main

REPO = Path(__file__).resolve().parents[2]
FILES = ["run_lifecycle.mmd", "run_lifecycle.dot", "tool_call.mmd", "tool_call.dot"]


def _run(*argv: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


def _names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_diagrams_writes_mermaid_and_dot_into_out(tmp_path: Path) -> None:
    code, out, err = _run("diagrams", "--out", str(tmp_path / "d"))
    assert (code, err) == (ExitCode.OK, "")
    assert _names(tmp_path / "d") == sorted(FILES)
    assert out.splitlines() == [str(tmp_path / "d" / name) for name in FILES]


def test_diagrams_defaults_to_diagrams_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = _run("diagrams")
    assert code == ExitCode.OK
    assert _names(tmp_path / "diagrams") == sorted(FILES)


def test_check_is_clean_after_writing(tmp_path: Path) -> None:
    _run("diagrams", "--out", str(tmp_path))
    code, out, err = _run("diagrams", "--out", str(tmp_path), "--check")
    assert (code, err) == (ExitCode.OK, "")
    assert "up to date" in out


def test_check_fails_on_drift_and_names_the_files(tmp_path: Path) -> None:
    _run("diagrams", "--out", str(tmp_path))
    edited = tmp_path / "run_lifecycle.mmd"
    edited.write_text(edited.read_text().replace("continue_run", "Continue run"))
    (tmp_path / "tool_call.dot").unlink()
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    code, out, err = _run("diagrams", "--out", str(tmp_path), "--check")
    assert code == ExitCode.CHECK_FAILED
    assert code == 5
    assert out == ""
    assert "2 diagram file(s)" in err
    assert "run `toolrelay diagrams`" in err
    assert f"  {tmp_path / 'run_lifecycle.mmd'}" in err.splitlines()
    assert f"  {tmp_path / 'tool_call.dot'}" in err.splitlines()
    assert "tool_call.mmd" not in err
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before  # untouched


def test_check_of_one_format(tmp_path: Path) -> None:
    _run("diagrams", "--out", str(tmp_path), "--format", "mermaid")
    assert _names(tmp_path) == ["run_lifecycle.mmd", "tool_call.mmd"]
    assert _run("diagrams", "--out", str(tmp_path), "--check", "--format", "mermaid")[0] == 0
    assert _run("diagrams", "--out", str(tmp_path), "--check")[0] == ExitCode.CHECK_FAILED


def test_check_refuses_image_formats(tmp_path: Path) -> None:
    code, _, err = _run("diagrams", "--out", str(tmp_path), "--check", "--format", "svg")
    assert code == ExitCode.USAGE
    assert "mermaid, dot" in err


def test_png_and_svg_are_written_with_graphviz(tmp_path: Path) -> None:
    for fmt in ("png", "svg"):
        code, _, err = _run("diagrams", "--out", str(tmp_path), "--format", fmt)
        assert (code, err) == (ExitCode.OK, "")
    assert _names(tmp_path) == sorted(
        f"{stem}.{ext}" for stem in ("run_lifecycle", "tool_call") for ext in ("png", "svg")
    )
    assert (tmp_path / "tool_call.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_images_without_graphviz_are_a_usage_error_with_one_clear_line(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: None)
    code, out, err = _run("diagrams", "--out", str(tmp_path / "d"), "--format", fmt)
    assert code == ExitCode.USAGE
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("toolrelay diagrams: ")
    assert "apt-get install graphviz" in err
    assert "brew install graphviz" in err
    assert not (tmp_path / "d").exists()


def test_an_unknown_format_is_a_usage_error(tmp_path: Path) -> None:
    assert _run("diagrams", "--format", "gif", "--out", str(tmp_path))[0] == ExitCode.USAGE


def test_python_m_toolrelay_diagrams_check_passes_on_the_committed_diagrams() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "toolrelay", "diagrams", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout
