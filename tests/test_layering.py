"""The layers of ARCHITECTURE.md, as a declared contract checked over every module.

Each package (or top-level module) of ``toolrelay`` belongs to one layer; a module may
import its own layer and the layers below it, never one above, and siblings on one
level (``testing``, ``diagrams``, ``demo``) never import each other. Absolute and
relative imports are both read, at any depth of a module (imports inside functions
count: they run too). Some layers also must not touch certain libraries: the
sans-IO core never an event loop, an HTTP client or the clock. Inside a layer, modules
import one another one way: no circle, even through ``TYPE_CHECKING`` imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "toolrelay"

#: From the bottom up; a tuple is one level of independent siblings.
LAYERS: tuple[str | tuple[str, ...], ...] = (
    ("_reasons", "_version"),
    "_errors",
    "protocol",
    "_machines",
    "_core",
    "sansio",
    "store",
    "backends",
    "_runtime",
    "server",
    ("testing", "diagrams", "demo"),
    "verify",
    "cli",
    ("__init__", "__main__"),
)

#: Libraries a layer must not import (besides the layers above it).
BANNED_LIBRARIES: dict[str, tuple[str, ...]] = {
    "protocol": ("anyio", "trio", "asyncio", "httpx", "httpx_sse", "statemachine"),
    "_machines": ("anyio", "trio", "asyncio", "httpx", "httpx_sse"),
    "_core": ("anyio", "trio", "asyncio", "httpx", "httpx_sse", "time", "datetime"),
    "store": ("httpx", "httpx_sse"),
    "_runtime": ("httpx", "httpx_sse"),
}

_LEVEL: dict[str, int] = {}
for _level, _names in enumerate(LAYERS):
    for _name in (_names,) if isinstance(_names, str) else _names:
        _LEVEL[_name] = _level


def _layer_of(path: Path) -> str:
    """The layer of a source file: its top package under toolrelay, or its module."""
    first = path.relative_to(SRC).parts[0]
    return first.removesuffix(".py")


def _module_of(path: Path) -> list[str]:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports(path: Path, source: str | None = None, *, names: bool = False) -> set[str]:
    """Every module ``path`` imports (or ``source``, read as if it stood at ``path``),
    relative imports resolved to absolute names; with ``names``, ``from m import x``
    also gives ``m.x`` (which may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    package = _module_of(path)
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            if module:
                found.add(module)
                if names:
                    found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def violations(path: Path, source: str | None = None) -> list[str]:
    """What ``path`` (or ``source`` standing there) imports against the contract."""
    layer = _layer_of(path)
    level = _LEVEL[layer]
    banned = BANNED_LIBRARIES.get(layer, ())
    found: list[str] = []
    for name in sorted(imports(path, source)):
        top, _, rest = name.partition(".")
        if top == "toolrelay":
            target = rest.partition(".")[0] or "__init__"
            if target == layer:
                continue
            if _LEVEL[target] >= level:
                found.append(f"{path.relative_to(SRC)} ({layer}) imports {name} ({target})")
        elif top in banned:
            found.append(f"{path.relative_to(SRC)} ({layer}) imports {name}")
    return found


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_source_file_belongs_to_a_declared_layer() -> None:
    assert sorted({_layer_of(path) for path in _sources()} - set(_LEVEL)) == []


@pytest.mark.parametrize("layer", sorted({_layer_of(path) for path in SRC.rglob("*.py")}), ids=str)
def test_layer_imports_only_itself_and_the_layers_below(layer: str) -> None:
    assert [v for path in _sources() if _layer_of(path) == layer for v in violations(path)] == []


def test_the_contract_catches_upward_sibling_and_relative_imports() -> None:
    core = SRC / "_core" / "_probe.py"
    source = (
        "import anyio\n"
        "from toolrelay._runtime import Engine\n"
        "def later():\n"
        "    from ..store import Store\n"
        "from . import _processor\n"
    )
    assert imports(core, source) == {
        "anyio",
        "toolrelay._runtime",
        "toolrelay.store",
        "toolrelay._core",
    }
    assert violations(core, source) == [
        "_core/_probe.py (_core) imports anyio",
        "_core/_probe.py (_core) imports toolrelay._runtime (_runtime)",
        "_core/_probe.py (_core) imports toolrelay.store (store)",
    ]
    sibling = SRC / "testing" / "_probe.py"
    assert violations(sibling, "from toolrelay.diagrams import render\n") == [
        "testing/_probe.py (testing) imports toolrelay.diagrams (diagrams)"
    ]


# -- import circles --------------------------------------------------------------------


def _module_graph() -> dict[str, set[str]]:
    """Each module's name -> the toolrelay modules it imports (``from pkg import name``
    counts as importing ``pkg``, or ``pkg.name`` when that is a module), type-checking
    imports included: a circle hidden behind ``TYPE_CHECKING`` is still a circle."""
    modules = {".".join(_module_of(path)): path for path in _sources()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for imported in imports(path, names=True):
            while imported not in modules and "." in imported:
                imported = imported.rpartition(".")[0]
            if imported in modules and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than
    one module, each sorted (Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return sorted(found)


def test_the_circle_check_finds_circles_at_any_depth() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_type_checking_imports_count() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import _mapper\n"
    assert "toolrelay._core._mapper" in imports(SRC / "_core" / "_probe.py", source, names=True)


def test_the_mapper_imports_the_conversation_and_not_the_other_way() -> None:
    # The circle of issue 17: the conversation held the mapper's cache, typed.
    graph = _module_graph()
    assert "toolrelay._core._conversation" in graph["toolrelay._core._mapper"]
    assert "toolrelay._core._mapper" not in graph["toolrelay._core._conversation"]


@pytest.mark.parametrize(
    "layer",
    sorted({_layer_of(path) for path in SRC.rglob("*.py")}),
    ids=str,
)
def test_modules_of_a_layer_import_one_another_one_way(layer: str) -> None:
    def layer_of(module: str) -> str:
        return module.split(".")[1] if "." in module else "__init__"

    assert [c for c in circles(_module_graph()) if layer in map(layer_of, c)] == []
