"""toolrelay.diagrams: the diagram files, their drift check, and images through Graphviz."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from toolrelay import RunLifecycle, ToolCallLifecycle, diagrams
from toolrelay.diagrams import (
    MACHINES,
    DiagramError,
    GraphvizError,
    GraphvizNotFoundError,
    check,
    render,
    render_image,
    write_all,
)

sys.path.insert(0, str(Path(__file__).parent))
from _shared import FILES, MACHINE_CLASSES, REPO, event_ids, state_ids

# --- files and drift ---------------------------------------------------------------------


def test_write_all_writes_the_four_files_and_check_finds_them_clean(tmp_path: Path) -> None:
    out = tmp_path / "new" / "diagrams"
    paths = write_all(out)
    assert [path.name for path in paths] == FILES
    assert all(path.parent == out for path in paths)
    assert check(out) == []
    for path in paths:
        machine = MACHINES[path.stem]
        fmt: diagrams.TextFormat = "mermaid" if path.suffix == ".mmd" else "dot"
        assert path.read_bytes() == render(machine, fmt).encode("utf-8")
    assert b"\r\n" not in (out / "tool_call.dot").read_bytes()


def test_check_names_edited_and_missing_files(tmp_path: Path) -> None:
    write_all(tmp_path)
    edited = tmp_path / "tool_call.mmd"
    edited.write_text(edited.read_text() + "    completed --> streaming : Oops\n")
    (tmp_path / "run_lifecycle.dot").unlink()
    assert check(tmp_path) == ["run_lifecycle.dot", "tool_call.mmd"]
    assert check(tmp_path, ("mermaid",)) == ["tool_call.mmd"]
    write_all(tmp_path)
    assert check(tmp_path) == []


def test_check_of_an_empty_directory_lists_every_file(tmp_path: Path) -> None:
    assert check(tmp_path / "nowhere") == FILES


def test_a_one_byte_change_is_drift(tmp_path: Path) -> None:
    write_all(tmp_path)
    path = tmp_path / "run_lifecycle.dot"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n", 1))
    assert check(tmp_path) == ["run_lifecycle.dot"]


def test_write_all_leaves_up_to_date_files_untouched(tmp_path: Path) -> None:
    paths = write_all(tmp_path)
    for path in paths:
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    write_all(tmp_path)
    assert {path.stat().st_mtime_ns for path in paths} == {1_000_000_000}


def test_write_all_and_check_refuse_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown diagram format 'gif'"):
        write_all(tmp_path, ("mermaid", "gif"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'png'"):
        check(tmp_path, ("png",))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_the_committed_diagrams_are_up_to_date() -> None:
    assert check(REPO / "diagrams") == [], "run `toolrelay diagrams` from the repository root"


# --- images (Graphviz) -------------------------------------------------------------------


def test_svg_and_png_are_drawn_by_graphviz() -> None:
    svg = render_image(RunLifecycle, "svg").decode("utf-8")
    assert "<svg" in svg
    for state_id in state_ids(RunLifecycle):
        assert f">{state_id}</text>" in svg
    for event_id in event_ids(RunLifecycle):
        assert f">{event_id}</text>" in svg
    assert "Executing tools" not in svg and "Continue run" not in svg
    png = render_image(ToolCallLifecycle, "png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_write_all_writes_images(tmp_path: Path) -> None:
    paths = write_all(tmp_path, ("svg", "png"))
    assert [path.name for path in paths] == [
        "run_lifecycle.svg",
        "run_lifecycle.png",
        "tool_call.svg",
        "tool_call.png",
    ]


def test_without_graphviz_images_raise_a_typed_error_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: None)
    with pytest.raises(GraphvizNotFoundError) as info:
        render_image(RunLifecycle, "png")
    message = str(info.value)
    assert "apt-get install graphviz" in message
    assert "brew install graphviz" in message
    assert "\n" not in message
    assert isinstance(info.value, DiagramError)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(GraphvizNotFoundError):
        write_all(tmp_path, ("mermaid", "svg"))
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the mermaid file
    # Text never needs Graphviz.
    assert render(RunLifecycle, "dot").startswith("digraph")
    assert write_all(tmp_path)


def test_a_failing_dot_program_is_a_graphviz_error(monkeypatch: pytest.MonkeyPatch) -> None:
    false = subprocess.run(
        ["sh", "-c", "command -v false"], capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: false)
    with pytest.raises(GraphvizError, match="exit code 1") as info:
        render_image(RunLifecycle, "svg")
    assert not isinstance(info.value, GraphvizNotFoundError)


def test_a_dot_program_that_vanished_is_graphviz_not_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: str(tmp_path / "dot"))
    with pytest.raises(GraphvizNotFoundError, match="apt-get install graphviz"):
        render_image(RunLifecycle, "svg")


def test_unknown_image_format_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="svg, png"):
        render_image(RunLifecycle, "gif")  # type: ignore[arg-type]


def _block_pydot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pydot`` fail, as when it is not installed."""
    monkeypatch.setitem(sys.modules, "pydot", None)
    monkeypatch.delitem(sys.modules, "statemachine.contrib.diagram.renderers.dot", raising=False)


def test_without_pydot_every_format_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")}
    _block_pydot(monkeypatch)
    # python-statemachine's own DOT path needs pydot: the reason toolrelay prints its own.
    with pytest.raises(ImportError):
        format(RunLifecycle, "dot")
    assert {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")} == expected
    assert b"<svg" in render_image(RunLifecycle, "svg")


def test_with_pydot_installed_the_output_does_not_change(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")}
    fake = types.ModuleType("pydot")
    fake.__dict__["Dot"] = object  # anything toolrelay would touch would be this fake
    monkeypatch.setitem(sys.modules, "pydot", fake)
    assert {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")} == expected


def test_importing_the_diagrams_needs_neither_pydot_nor_graphviz() -> None:
    code = (
        "import sys; sys.modules['pydot'] = None\n"
        "import toolrelay.diagrams as d\n"
        "from toolrelay import RunLifecycle\n"
        "print(d.render(RunLifecycle, 'dot').splitlines()[0])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": ""},
    )
    assert result.stdout == 'digraph "RunLifecycle" {\n'
