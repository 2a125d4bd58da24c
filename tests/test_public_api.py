"""The public surface is exported on purpose (httpx's and anyio's checks)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

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
        "toolrelay.runtime._engine toolrelay.core._tools True",
        "module 'toolrelay' has no attribute 'Nope'",
    ]


def test_the_package_ships_py_typed() -> None:
    from importlib.resources import files

    assert files("toolrelay").joinpath("py.typed").is_file()
