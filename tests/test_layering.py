"""Inner layers never import outer ones (ARCHITECTURE: layers), checked from the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "toolrelay"

# For each layer, the toolrelay layers and third-party modules it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "protocol": (
        "toolrelay.machines",
        "toolrelay.core",
        "toolrelay.runtime",
        "toolrelay.backends",
        "toolrelay.testing",
        "toolrelay.cli",
        "anyio",
        "httpx",
        "statemachine",
    ),
    "machines": (
        "toolrelay.protocol",
        "toolrelay.core",
        "toolrelay.runtime",
        "toolrelay.backends",
        "toolrelay.testing",
        "toolrelay.cli",
        "anyio",
        "httpx",
    ),
    "core": (
        "toolrelay.runtime",
        "toolrelay.backends",
        "toolrelay.testing",
        "toolrelay.cli",
        "anyio",
        "trio",
        "asyncio",
        "httpx",
        "httpx_sse",
        "time",
        "datetime",
    ),
    "runtime": ("toolrelay.testing", "toolrelay.cli", "httpx", "httpx_sse", "toolrelay.demo"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _violations(layer: str) -> list[str]:
    return [
        f"{path.relative_to(SRC)} imports {name}"
        for path in sorted((SRC / layer).rglob("*.py"))
        for name in sorted(_imports(path))
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[layer])
    ]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_from_outer_layers(layer: str) -> None:
    assert _violations(layer) == []


def test_the_layer_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import anyio\nfrom toolrelay.runtime import Engine\n")
    assert _imports(bad) == {"anyio", "toolrelay.runtime"}
