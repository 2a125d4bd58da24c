"""The public surface is exported on purpose (httpx's and anyio's checks)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import toolrelay
from toolrelay import ToolSpec

#: Every public namespace: an object is public under exactly one of them.
PUBLIC_NAMESPACES = (
    "toolrelay",
    "toolrelay.backends",
    "toolrelay.backends.providers",
    "toolrelay.cli",
    "toolrelay.demo",
    "toolrelay.diagrams",
    "toolrelay.protocol",
    "toolrelay.sansio",
    "toolrelay.server",
    "toolrelay.store",
    "toolrelay.testing",
    "toolrelay.testing.stateful",
    "toolrelay.testing.stateful_durable",
    "toolrelay.testing.store_contract",
    "toolrelay.testing.strategies",
    "toolrelay.verify",
)

#: The layers behind the public namespaces: internal, whatever their spelling.
INTERNAL_LAYERS = (
    "toolrelay._core",
    "toolrelay._errors",
    "toolrelay._machines",
    "toolrelay._runtime",
)


def _is_public_module(name: str) -> bool:
    internal = any(name == layer or name.startswith(f"{layer}.") for layer in INTERNAL_LAYERS)
    return not internal and not any(part.startswith("_") for part in name.split("."))


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


#: Namespaces whose ``__all__`` is sorted ruff's way (constants first), not plainly.
ALL_SORTED_CONSTANTS_FIRST = ("toolrelay.backends.providers", "toolrelay.store")


@pytest.mark.parametrize("module_name", [*PUBLIC_NAMESPACES, *INTERNAL_LAYERS])
def test_public_namespace_all_is_a_sorted_tuple_of_existing_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = module.__all__
    assert isinstance(exported, tuple)
    if module_name not in ALL_SORTED_CONSTANTS_FIRST:
        assert list(exported) == sorted(exported)
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ names missing {name!r}"


@pytest.mark.parametrize("module_name", _all_modules())
def test_every_module_has_a_tuple_all(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert isinstance(getattr(module, "__all__", None), tuple), module_name


def test_the_public_namespaces_are_the_declared_ones() -> None:
    # A module whose name has no ``_`` part is public: a new one is declared on purpose.
    assert sorted(filter(_is_public_module, _all_modules())) == sorted(PUBLIC_NAMESPACES)


def test_a_module_is_public_unless_internal_or_underscored() -> None:
    assert _is_public_module("toolrelay.sansio")
    assert _is_public_module("toolrelay.testing.strategies")
    assert not _is_public_module("toolrelay.backends._base")
    assert not _is_public_module(f"{INTERNAL_LAYERS[0]}")
    assert not _is_public_module(f"{INTERNAL_LAYERS[0]}.anything")
    assert not _is_public_module("toolrelay._core._processor")


def public_paths() -> dict[int, list[str]]:
    """Each object a public namespace exports (``__all__``) -> the paths it has."""
    paths: dict[int, list[str]] = {}
    for module_name in PUBLIC_NAMESPACES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            paths.setdefault(id(getattr(module, name)), []).append(f"{module_name}.{name}")
    return paths


def test_each_public_object_has_one_public_path() -> None:
    # ``Engine`` public at the top and again in the runtime layer was issue 17's
    # complaint: the engine story lives at the top, the rest in one namespace each.
    assert sorted(paths for paths in public_paths().values() if len(paths) > 1) == []


def test_the_one_path_check_sees_an_object_exported_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolrelay import sansio

    monkeypatch.setattr(sansio, "__all__", (*sansio.__all__, "check_resume_again"))
    monkeypatch.setattr(sansio, "check_resume_again", sansio.check_resume, raising=False)
    twice = [paths for paths in public_paths().values() if len(paths) > 1]
    assert twice == [["toolrelay.sansio.check_resume", "toolrelay.sansio.check_resume_again"]]


_SOURCES = sorted((Path(toolrelay.__file__).parent).rglob("*.py"))


def _documented_assignments() -> set[str]:
    """The module-level names assigned anywhere in the package with a ``#:`` comment
    above them or a docstring below them (how Sphinx documents a constant or alias)."""
    documented: set[str] = set()
    for path in _SOURCES:
        lines = path.read_text(encoding="utf-8").splitlines()
        body = ast.parse("\n".join(lines)).body
        for index, node in enumerate(body):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            elif isinstance(node, ast.AnnAssign):
                target = node.target
            else:
                continue
            if not isinstance(target, ast.Name):
                continue
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            after = body[index + 1] if index + 1 < len(body) else None
            below = (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            )
            if above.startswith("#:") or below:
                documented.add(target.id)
    return documented


def undocumented(module_name: str, documented: set[str]) -> list[str]:
    """The names of ``module_name.__all__`` with no documentation: a function without a
    docstring, a tool without a description, a class without its own docstring or any
    other object without a documented assignment."""
    module = importlib.import_module(module_name)
    missing: list[str] = []
    for name in module.__all__:
        if name == "__version__":
            continue
        found = getattr(module, name)
        doc: object
        if isinstance(found, ToolSpec):
            doc = found.description
        elif inspect.isroutine(found):
            doc = found.__doc__
        elif inspect.isclass(found) and vars(found).get("__doc__"):
            doc = vars(found)["__doc__"]
        else:
            doc = "documented" if name in documented else None
        if not (isinstance(doc, str) and doc.strip()):
            missing.append(f"{module_name}.{name}")
    return missing


def test_every_public_name_is_documented() -> None:
    documented = _documented_assignments()
    assert [name for module in PUBLIC_NAMESPACES for name in undocumented(module, documented)] == []


def test_the_documentation_check_sees_a_missing_docstring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolrelay import sansio

    def bare() -> None:
        pass

    monkeypatch.setattr(sansio, "__all__", (*sansio.__all__, "bare", "BARE"))
    monkeypatch.setattr(sansio, "bare", bare, raising=False)
    monkeypatch.setattr(sansio, "BARE", 3, raising=False)
    missing = undocumented("toolrelay.sansio", _documented_assignments())
    assert missing == ["toolrelay.sansio.bare", "toolrelay.sansio.BARE"]


def test_importing_the_package_imports_no_layer_and_no_dependency() -> None:
    # A fresh interpreter: ``import toolrelay`` reads the version and nothing else;
    # the first read of a name imports its layer (the cold start of issue 16).
    script = (
        "import sys, toolrelay\n"
        "heavy = ('httpx', 'httpx_sse', 'msgspec', 'anyio', 'statemachine',"
        " 'toolrelay._core', 'toolrelay._runtime', 'toolrelay.backends')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
        "from toolrelay import Engine, tool\n"
        "print(Engine.__module__, tool.__module__, 'toolrelay._runtime' in sys.modules)\n"
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
        "toolrelay._runtime._engine toolrelay._core._tool_decorator True",
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
        "from toolrelay.sansio import (\n    EventProcessor,\n    ToolsReady,\n)\n"
        "`toolrelay.testing.ScriptedAgent` and `toolrelay.Engine.start_turn`; the logger\n"
        "`toolrelay.tools`, the span attribute `toolrelay.turn.id`, `toolrelay.protocol`.\n"
    )
    assert set(taught_spellings(text)) == {
        "toolrelay.Engine",
        "toolrelay.ToolRegistry",
        "toolrelay.sansio.EventProcessor",
        "toolrelay.sansio.ToolsReady",
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
        if not _is_public_module(path.rpartition(".")[0])
    )
    assert private == []
