"""The package as an index shows it: the wheel's license and metadata, and the extras.

The wheel is built for real (``pip wheel``, the build backend of ``pyproject.toml``), so
what is checked is what an index would receive.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

import pytest

from toolrelay._version import __version__

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(out)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("toolrelay-*.whl")
    return zipfile.ZipFile(built)


def _metadata(wheel: zipfile.ZipFile) -> Message:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return HeaderParser().parsestr(wheel.read(name).decode("utf-8"))


def test_the_license_file_is_in_the_repository_and_the_wheel(wheel: zipfile.ZipFile) -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith(f"{PROJECT['license']} License\n")  # one license, said once
    (packed,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(packed).decode("utf-8") == license_text
    metadata = _metadata(wheel)
    assert metadata["License-Expression"] == PROJECT["license"]
    assert metadata.get_all("License-File") == ["LICENSE"]


def test_the_version_has_one_source(wheel: zipfile.ZipFile) -> None:
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert _metadata(wheel)["Version"] == __version__


def test_the_classifiers_say_the_python_versions_and_the_status(wheel: zipfile.ZipFile) -> None:
    classifiers = _metadata(wheel).get_all("Classifier") or []
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    lowest = PROJECT["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {lowest}" in classifiers
    versions = [c.rpartition(" :: ")[2] for c in classifiers if c.count("::") == 2]
    assert all(tuple(map(int, v.split("."))) >= (3, 11) for v in versions if "." in v)


def test_the_readme_is_the_index_page(wheel: zipfile.ZipFile) -> None:
    metadata = _metadata(wheel)
    assert metadata["Description-Content-Type"] == "text/markdown"
    body = metadata.get_payload()
    assert isinstance(body, str)
    assert body.strip() == (ROOT / "README.md").read_text(encoding="utf-8").strip()


def test_developer_tools_are_a_dependency_group_not_an_extra() -> None:
    tools = {"mypy", "ruff"}
    extras: dict[str, list[str]] = PROJECT["optional-dependencies"]
    for name, requirements in extras.items():
        assert not {_name(r) for r in requirements} & tools, name
    assert {_name(r) for r in PYPROJECT["dependency-groups"]["dev"]} >= tools


def test_trio_has_its_extra() -> None:
    assert [_name(r) for r in PROJECT["optional-dependencies"]["trio"]] == ["trio"]


@pytest.mark.parametrize("extra", ["verify", "demo"])
def test_verify_runs_with_the_demo_or_verify_extra(extra: str) -> None:
    """Every distribution the property suite imports (it is what ``toolrelay verify``
    runs) is a base dependency or in the extra: the README's demo install is enough."""
    installed = {
        _name(r) for r in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"][extra]]
    }
    suite = ROOT / "src" / "toolrelay" / "testing"
    needed: set[str] = set()
    providers = importlib.metadata.packages_distributions()
    for module in [*sorted((suite / "stateful").glob("*.py")), suite / "strategies.py"]:
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and not node.level
                else []
            )
            for name in names:
                top = name.partition(".")[0]
                if top in sys.stdlib_module_names or top in ("toolrelay", "__future__"):
                    continue
                needed.update(_name(d) for d in providers[top])
    assert "hypothesis" in needed  # the check sees the suite's real imports
    assert needed <= installed, needed - installed


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (``psycopg[binary]>=3`` -> psycopg)."""
    for stop in "[<>=!~;":
        requirement = requirement.partition(stop)[0]
    return requirement.strip().lower().replace("_", "-")


def test_the_readme_lists_every_extra() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Installing") :]
    section = section[: section.index("\n## ")]
    listed = re.findall(r"^\| `([a-z-]+)` \|", section, re.M)
    assert sorted(listed) == sorted(PROJECT["optional-dependencies"])
