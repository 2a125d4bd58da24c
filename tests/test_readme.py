"""The README tells the truth: its commands are what CI runs, its code runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def test_readme_opens_with_the_two_newcomer_commands() -> None:
    first = _blocks("bash")[0]
    commands = [line for line in first.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert commands[0].endswith("toolrelay demo")
    assert commands[1].endswith(".venv/bin/pytest")
    assert README.index("```bash") < README.index("toolrelay runs")


def test_ci_runs_the_readme_test_command_exactly() -> None:
    test_command = _blocks("bash")[0].strip().splitlines()[-1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_readme_python_example_runs_as_written(tmp_path: Path) -> None:
    (example,) = _blocks("python")
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "completed" in result.stdout
    assert "42" in result.stdout and "7" in result.stdout


def test_readme_lifecycle_diagram_is_the_generated_one() -> None:
    (diagram,) = _blocks("mermaid")
    generated = (ROOT / "diagrams" / "run_lifecycle.mmd").read_text(encoding="utf-8")
    assert diagram.strip() == generated.strip()
