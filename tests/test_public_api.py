"""The public surface is exported on purpose (httpx's and anyio's checks)."""

from __future__ import annotations

import importlib
import pkgutil

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


def test_the_package_ships_py_typed() -> None:
    from importlib.resources import files

    assert files("toolrelay").joinpath("py.typed").is_file()
