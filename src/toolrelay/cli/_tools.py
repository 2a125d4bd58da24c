"""``--tools MODULE:ATTR``: the user's tools, imported by name (``run`` and ``serve``)."""

from __future__ import annotations

import importlib
import os
import sys

from toolrelay._core import ToolRegistry, ToolSpec
from toolrelay._errors import ToolDefinitionError

__all__ = ("ToolsUsageError", "load_tools")


class ToolsUsageError(Exception):
    """``--tools`` cannot be turned into a registry; the message says why."""


def load_tools(spec: str) -> ToolRegistry:
    """The registry named by ``MODULE:ATTR`` (``ATTR`` may be dotted).

    The module is imported with the current directory first on ``sys.path``. The
    attribute may be a :class:`ToolRegistry`, a :class:`ToolSpec`, a tool function, or a
    list or tuple of specs and functions.

    Raises:
        ToolsUsageError: The spec is malformed, the module does not import, the
            attribute is missing, or it is not (made of) tools.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ToolsUsageError(
            f"--tools takes MODULE:ATTR (for example mytools:TOOLS), not {spec!r}"
        )
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise ToolsUsageError(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:
        raise ToolsUsageError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    obj: object = module
    for part in attr.strip().split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ToolsUsageError(f"{module_name!r} has no attribute {attr!r}") from None
    try:
        return _as_registry(obj)
    except ToolDefinitionError as exc:
        raise ToolsUsageError(f"{spec} cannot be used as tools: {exc}") from exc


def _as_registry(obj: object) -> ToolRegistry:
    if isinstance(obj, ToolRegistry):
        return obj
    if isinstance(obj, ToolSpec):
        return ToolRegistry.of(obj)
    if isinstance(obj, (list, tuple)):
        for item in obj:
            if not callable(item):
                raise ToolsUsageError(f"{item!r} in the list is not a tool or a function")
        return ToolRegistry.of(*obj)
    if callable(obj):
        return ToolRegistry.of(obj)
    raise ToolsUsageError(
        f"expected a ToolRegistry, a ToolSpec, a function or a list of them, "
        f"got {type(obj).__name__}"
    )
