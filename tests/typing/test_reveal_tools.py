"""Static typing of the tool API, checked by mypy (``assert_type``) and run by pytest."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, assert_type

import anyio.to_thread

from toolrelay import ToolContext, ToolRegistry, ToolResult, ToolSpec, execute_tool, tool


def _add(a: int, b: int = 0) -> int:
    return a + b


async def _fetch(url: str) -> bytes:
    return url.encode()


def test_tool_keeps_the_handler_signature() -> None:
    # assert_type cannot spell parameter names, so the spec types are checked by
    # assignment, and wrong calls by `type: ignore` (strict mypy flags unused ones).
    bare = tool(_add)
    as_spec: ToolSpec[[int, int], int] = bare
    assert_type(bare(1, b=2), int)

    configured = tool(name="fetch", timeout=3)(_fetch)
    coroutine_spec: ToolSpec[[str], Coroutine[Any, Any, bytes]] = configured

    from_schema = ToolSpec.from_schema("raw", "", {"type": "object"}, lambda args: len(args))
    assert_type(from_schema, ToolSpec[[dict[str, Any]], int])
    assert bare(1, b=2) == 3
    assert as_spec is bare and coroutine_spec is configured


def _wrong_calls_are_type_errors() -> None:
    # Never called: mypy checks it, and strict mypy reports an unneeded ignore.
    tool(_add)("1")  # type: ignore[arg-type]
    _ = tool(_fetch)(url=1)  # type: ignore[arg-type]
    ToolRegistry().register(42)  # type: ignore[arg-type]


async def _uses_anyio_run_sync(registry: ToolRegistry) -> ToolResult:
    # The runtime's thread runner fits the run_sync parameter as it is.
    return await execute_tool(registry, "_add", '{"a": 1}', run_sync=anyio.to_thread.run_sync)


def test_registry_accepts_specs_and_functions() -> None:
    registry = ToolRegistry().register(tool(_add)).register(_fetch)
    assert_type(registry, ToolRegistry)
    assert_type(registry.lookup("_add"), ToolSpec[..., Any])
    assert_type(registry.get("_add"), ToolSpec[..., Any] | None)
    assert registry.names == ("_add", "_fetch")
    assert anyio.run(_uses_anyio_run_sync, registry) == ToolResult.success("1")


class _Session:
    user: str = "ada"


def _whoami(ctx: ToolContext[_Session], loud: bool = False) -> str:
    return ctx.deps.user.upper() if loud else ctx.deps.user


def test_a_tool_context_is_typed_by_its_deps() -> None:
    context = ToolContext(deps=_Session(), tool_name="whoami")
    assert_type(context, ToolContext[_Session])
    assert_type(context.deps, _Session)
    spec = tool(_whoami)
    # The spec keeps the handler's signature, context included: calling it directly
    # passes the context explicitly.
    typed: ToolSpec[[ToolContext[_Session], bool], str] = spec
    assert typed is spec and spec(context, loud=True) == "ADA"
    assert spec.context_parameter == "ctx"


def _context_of_the_wrong_deps_is_a_type_error() -> None:
    tool(_whoami)(ToolContext(deps=42))  # type: ignore[arg-type]
