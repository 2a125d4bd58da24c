"""The public surface is exported on purpose (httpx's and anyio's checks)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import toolrelay

PUBLIC_NAMESPACES = (
    "toolrelay",
    "toolrelay.protocol",
    "toolrelay.machines",
    "toolrelay.core",
    "toolrelay.runtime",
    "toolrelay.backends",
    "toolrelay.server",
    "toolrelay.testing",
    "toolrelay.errors",
    "toolrelay.diagrams",
    "toolrelay.verify",
)


def _all_modules() -> list[str]:
    names = ["toolrelay"]
    for info in pkgutil.walk_packages(toolrelay.__path__, prefix="toolrelay."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_top_level_all_equals_the_public_names() -> None:
    # The names are imported on first access: read each, then nothing else may be public.
    for name in toolrelay.__all__:
        assert getattr(toolrelay, name) is not None, name
    assert set(toolrelay.__all__) <= set(dir(toolrelay))
    public = {name for name in vars(toolrelay) if not name.startswith("_")}
    modules = {
        name for name in public if type(getattr(toolrelay, name)).__name__ in ("module", "_Feature")
    }
    assert set(toolrelay.__all__) - {"__version__"} == public - modules


@pytest.mark.parametrize("module_name", PUBLIC_NAMESPACES)
def test_public_namespace_all_is_a_sorted_tuple_of_existing_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = module.__all__
    assert isinstance(exported, tuple)
    assert list(exported) == sorted(exported)
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ names missing {name!r}"


@pytest.mark.parametrize("module_name", _all_modules())
def test_every_module_has_a_tuple_all(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert isinstance(getattr(module, "__all__", None), tuple), module_name


def test_importing_the_package_imports_no_layer_and_no_dependency() -> None:
    # A fresh interpreter: ``import toolrelay`` reads the version and nothing else;
    # the first read of a name imports its layer (the cold start of issue 16).
    script = (
        "import sys, toolrelay\n"
        "heavy = ('httpx', 'httpx_sse', 'msgspec', 'anyio', 'statemachine',"
        " 'toolrelay.core', 'toolrelay.runtime', 'toolrelay.backends')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
        "from toolrelay import Engine, tool\n"
        "print(Engine.__module__, tool.__module__, 'toolrelay.runtime' in sys.modules)\n"
        "try:\n"
        "    toolrelay.Nope\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines() == [
        "[]",
        "toolrelay.runtime._engine toolrelay.core._tool_decorator True",
        "module 'toolrelay' has no attribute 'Nope'",
    ]


def test_the_package_ships_py_typed() -> None:
    from importlib.resources import files

    assert files("toolrelay").joinpath("py.typed").is_file()


# -- one spelling per name in the docs -------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
_FROM_IMPORT = re.compile(r"from\s+(toolrelay(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n`]*)")
_DOTTED = re.compile(r"(?<![\w.])toolrelay(?:\.\w+)+")


def _resolve(dotted: str) -> tuple[str, object] | None:
    """``(module.name, object)`` for a dotted spelling of a public object: its longest
    importable module, then one attribute; ``None`` for a module, a method's further
    parts kept off, or what names nothing (a logger, a span attribute)."""
    parts = dotted.split(".")
    for end in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        found = getattr(module, parts[end], None)
        if found is None or isinstance(found, types.ModuleType):
            return None
        return f"{module.__name__}.{parts[end]}", found
    return None


def taught_spellings(text: str) -> dict[str, object]:
    """Every path a page names a public object under, with the object: in
    ``from toolrelay... import A, B as C`` lines and in ``toolrelay.x.Y`` references."""
    dotted: list[str] = []
    for match in _FROM_IMPORT.finditer(text):
        for item in match.group(2).strip("()").split(","):
            name = item.partition("#")[0].strip().partition(" as ")[0].strip()
            if name:
                dotted.append(f"{match.group(1)}.{name}")
    dotted.extend(match.group(0) for match in _DOTTED.finditer(text))
    return dict(found for spelling in dotted if (found := _resolve(spelling)) is not None)


def _pages() -> list[Path]:
    return sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])


def test_the_spelling_scan_reads_imports_and_references() -> None:
    text = (
        "from toolrelay import Engine, ToolRegistry as Registry  # the engine\n"
        "from toolrelay.core import (\n    ThreadKey,\n    tool,\n)\n"
        "`toolrelay.testing.ScriptedAgent` and `toolrelay.Engine.start_turn`; the logger\n"
        "`toolrelay.tools`, the span attribute `toolrelay.turn.id`, `toolrelay.protocol`.\n"
    )
    assert set(taught_spellings(text)) == {
        "toolrelay.Engine",
        "toolrelay.ToolRegistry",
        "toolrelay.core.ThreadKey",
        "toolrelay.core.tool",
        "toolrelay.testing.ScriptedAgent",
    }


def test_the_docs_teach_each_public_name_under_one_path() -> None:
    # A name the top level exports is taught there (the engine story); any other name
    # under one subpackage, the same on every page.
    top = {id(getattr(toolrelay, name)) for name in toolrelay.__all__}
    paths: dict[int, dict[str, list[str]]] = {}
    for page in _pages():
        for path, found in taught_spellings(page.read_text(encoding="utf-8")).items():
            paths.setdefault(id(found), {}).setdefault(path, []).append(page.name)
    twice = [spellings for spellings in paths.values() if len(spellings) > 1]
    assert twice == []
    below_the_top = [
        spellings
        for key, spellings in paths.items()
        if key in top and any(path.count(".") > 1 for path in spellings)
    ]
    assert below_the_top == []


def test_the_docs_teach_no_private_module() -> None:
    private = sorted(
        f"{page.name}: {path}"
        for page in _pages()
        for path in taught_spellings(page.read_text(encoding="utf-8"))
        if any(part.startswith("_") for part in path.split(".")[1:-1])
    )
    assert private == []
