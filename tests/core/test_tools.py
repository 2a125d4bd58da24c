"""Tests for the tool registry: declaring tools, their schemas, executing them.

This module uses ``from __future__ import annotations`` (ruff requires it), so every
tool declared here has string annotations: resolving them is tested throughout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import keyword
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio
import anyio.lowlevel
import msgspec
import pytest
from hypothesis import given, strategies as st

from toolrelay import (
    ToolContext,
    ToolDefinitionError,
    ToolError,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    execute_tool,
    tool,
)
from toolrelay.protocol import Tool

T = TypeVar("T")


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end on an asyncio event loop."""

    async def main() -> T:
        return await coro

    return anyio.run(main)


# --- module-level types and tools (string annotations resolve against these) ---


class Point(msgspec.Struct):
    """A point on a grid."""

    x: int
    y: int


@dataclasses.dataclass
class Weather:
    city: str
    celsius: float


class Opaque:
    """A type msgspec has no JSON Schema for."""


PositiveInt = Annotated[int, msgspec.Meta(ge=1, description="A positive count.")]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(name="shout", description="Upper-case a text.", timeout=2.5)
def upper(text: str) -> str:
    return text.upper()


def failing(reason: str) -> str:
    """Always raises."""
    raise ValueError(reason)


# --- ToolResult and ToolError ---


def test_success_result_is_ok_and_carries_content() -> None:
    result = ToolResult.success("42")
    assert result.ok
    assert result.content == "42"
    assert result.error is None


def test_failure_result_sends_json_error_object_to_the_model() -> None:
    result = ToolResult.failure('bad "input"')
    assert not result.ok
    assert result.error == 'bad "input"'
    assert msgspec.json.decode(result.content) == {"error": 'bad "input"'}


# --- the registry table (reference 002) ---


def test_register_adds_tool_to_registry() -> None:
    registry = ToolRegistry().register(add)
    assert "add" in registry
    assert len(registry) == 1
    assert registry.lookup("add") is add


def test_register_adds_to_the_registry_itself_and_chains() -> None:
    registry = ToolRegistry()
    registry.register(add)  # the call alone registers: no new registry to lose
    assert list(registry.names) == ["add"]
    assert registry.register(upper) is registry
    assert list(registry.names) == ["add", "shout"]
    assert [d.name for d in registry.definitions()] == ["add", "shout"]


def test_a_frozen_registry_refuses_register_and_a_copy_takes_it() -> None:
    registry = ToolRegistry.of(add).freeze()
    with pytest.raises(ToolDefinitionError, match="frozen"):
        registry.register(upper)
    assert registry.names == ("add",) and registry.frozen
    copy = registry.copy().register(upper)
    assert copy.names == ("add", "shout") and not copy.frozen
    assert registry.names == ("add",)


def test_lookup_returns_tool_by_name() -> None:
    registry = ToolRegistry.of(add, upper)
    assert registry.lookup("shout") is upper
    assert registry.get("shout") is upper


def test_lookup_of_unknown_tool_raises_key_error_listing_known_names() -> None:
    registry = ToolRegistry.of(add, upper)
    with pytest.raises(KeyError, match=r"unknown tool 'nope'; known tools: add, shout"):
        registry.lookup("nope")
    assert registry.get("nope") is None
    with pytest.raises(KeyError, match=r"\(none\)"):
        ToolRegistry().lookup("nope")


def test_execute_runs_the_tool_and_returns_its_result() -> None:
    result = run_now(execute_tool(ToolRegistry.of(add), "add", '{"a": 2, "b": 40}'))
    assert result == ToolResult.success("42")


def test_execute_with_failing_tool_returns_failure_not_exception() -> None:
    result = run_now(execute_tool(ToolRegistry.of(failing), "failing", '{"reason": "boom"}'))
    assert not result.ok
    assert result.error == "ValueError: boom"
    assert msgspec.json.decode(result.content) == {"error": "ValueError: boom"}


def test_definitions_list_the_tools_in_registration_order() -> None:
    registry = ToolRegistry.of(upper, add)
    definitions = registry.definitions()
    assert all(isinstance(d, Tool) for d in definitions)
    assert [d.name for d in definitions] == ["shout", "add"]
    assert definitions[0] == Tool(
        name="shout",
        description="Upper-case a text.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    )
    assert registry.definitions() is definitions  # computed once per registry


def test_register_duplicate_name_is_rejected_and_registry_unchanged() -> None:
    registry = ToolRegistry.of(add)
    other = tool(upper.handler, name="add")
    with pytest.raises(ToolDefinitionError, match="'add' is already registered"):
        registry.register(other)
    assert registry.lookup("add") is add


def test_register_wraps_a_plain_function_with_tool() -> None:
    registry = ToolRegistry().register(failing)
    spec = registry.lookup("failing")
    assert isinstance(spec, ToolSpec)
    assert spec.description == "Always raises."
    assert spec.handler is failing


def test_registry_iterates_over_specs_in_order() -> None:
    registry = ToolRegistry.of(add, upper)
    assert list(registry) == [add, upper]
    assert 42 not in registry
    assert repr(registry) == "ToolRegistry(['add', 'shout'])"


def test_registry_rejects_a_function_that_cannot_be_a_tool() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ToolDefinitionError, match="missing type annotation"):
        ToolRegistry().register(untyped)


# --- ToolSpec ---


def test_decorated_function_stays_callable() -> None:
    assert add(1, 2) == 3
    assert add.handler(a=1, b=2) == 3


def test_spec_records_name_description_timeout_and_mode() -> None:
    assert upper.name == "shout"
    assert upper.description == "Upper-case a text."
    assert upper.timeout == 2.5
    assert not upper.is_async
    assert upper.blocking
    assert add.timeout is None
    assert add.definition() == Tool(
        name="add", description="Add two integers.", parameters=add.parameters
    )


def test_async_tool_is_not_blocking_by_default() -> None:
    @tool
    async def fetch(url: str) -> str:
        return url

    assert fetch.is_async
    assert not fetch.blocking


def test_sync_tool_can_opt_out_of_blocking() -> None:
    @tool(blocking=False)
    def quick() -> str:
        return "fast"

    assert not quick.blocking
    assert not quick.is_async


def test_callable_object_with_async_call_is_async() -> None:
    class Fetcher:
        async def __call__(self, url: str) -> str:
            return url

    spec = tool(Fetcher(), name="fetch")
    assert spec.is_async
    assert spec.parameters["required"] == ["url"]


class Mover:
    """Move a point."""

    def __call__(self, p: Point, dx: int = 0) -> Point:
        return Point(p.x + dx, p.y)


def test_callable_object_annotations_resolve_in_its_module() -> None:
    spec = tool(Mover(), name="move")
    assert spec.description == "Move a point."
    assert spec.parameters["properties"]["p"] == {"$ref": "#/$defs/Point"}
    result = run_now(
        execute_tool(ToolRegistry.of(spec), "move", '{"p": {"x": 1, "y": 2}, "dx": 2}')
    )
    assert result == ToolResult.success('{"x":3,"y":2}')


def test_partial_is_declared_from_its_remaining_parameters() -> None:
    def scaled(factor: int, value: int) -> int:
        """Scale a value."""
        return factor * value

    spec = tool(functools.partial(scaled, factor=3))
    assert spec.name == "scaled"
    assert spec.description == "Scale a value."
    assert spec.parameters["required"] == ["value"]
    assert run_now(execute_tool(ToolRegistry.of(spec), "scaled", '{"value": 5}')).content == "15"


def test_function_without_signature_is_rejected() -> None:
    class Unsigned:
        __signature__ = "not a signature"  # inspect.signature raises TypeError

        def __call__(self) -> None:
            pass

    with pytest.raises(ToolDefinitionError, match="no signature"):
        tool(Unsigned(), name="unsigned")


def test_tool_without_name_needs_explicit_name() -> None:
    class Nameless:
        def __call__(self, x: int) -> int:
            return x

    with pytest.raises(ToolDefinitionError, match="pass name="):
        tool(Nameless())
    assert tool(Nameless(), name="nameless").name == "nameless"


# --- schema generation ---


def test_schema_for_required_int_and_str() -> None:
    @tool
    def greet(name: str, times: int) -> str:
        return name * times

    assert greet.parameters == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "times": {"type": "integer"}},
        "required": ["name", "times"],
    }


def test_schema_for_optional_and_defaults() -> None:
    @tool
    def search(query: str, limit: int = 10, lang: str | None = None) -> str:
        return query

    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
            "lang": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["query"],
    }


def test_defaults_may_precede_required_parameters() -> None:
    @tool
    def f(a: int = 1, *, b: str) -> str:
        return b * a

    assert f.parameters["required"] == ["b"]
    assert run_now(execute_tool(ToolRegistry.of(f), "f", '{"b": "x"}')).content == "x"


def test_schema_for_lists() -> None:
    @tool
    def total(values: list[int], tags: list[str] = []) -> int:  # noqa: B006
        return sum(values)

    assert total.parameters["properties"] == {
        "values": {"type": "array", "items": {"type": "integer"}},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
    }


def test_non_empty_mutable_default_is_in_schema_and_copied_per_call() -> None:
    seen: list[list[int]] = []

    @tool
    def collect(values: list[int] = [1, 2]) -> None:  # noqa: B006
        seen.append(values)
        values.append(99)

    assert collect.parameters["properties"]["values"]["default"] == [1, 2]
    registry = ToolRegistry.of(collect)
    run_now(execute_tool(registry, "collect", ""))
    run_now(execute_tool(registry, "collect", ""))
    assert seen == [[1, 2, 99], [1, 2, 99]]


def test_schema_for_nested_struct_keeps_defs_valid() -> None:
    @tool
    def distance(a: Point, b: Point | None = None) -> int:
        other = b or Point(0, 0)
        return abs(a.x - other.x) + abs(a.y - other.y)

    schema = distance.parameters
    assert schema["properties"]["a"] == {"$ref": "#/$defs/Point"}
    assert schema["properties"]["b"] == {
        "anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}],
        "default": None,
    }
    assert schema["$defs"] == {
        "Point": {
            "title": "Point",
            "description": "A point on a grid.",
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
        }
    }
    assert "title" not in schema
    result = run_now(
        execute_tool(ToolRegistry.of(distance), "distance", '{"a": {"x": 3, "y": -4}}')
    )
    assert result == ToolResult.success("7")


def test_schema_for_literal() -> None:
    @tool
    def convert(unit: Literal["c", "f"]) -> str:
        return unit

    assert convert.parameters["properties"]["unit"] == {"enum": ["c", "f"]}
    result = run_now(execute_tool(ToolRegistry.of(convert), "convert", '{"unit": "k"}'))
    assert (
        result.error == "Invalid arguments for tool 'convert': Invalid enum value 'k' - at `$.unit`"
    )


def test_schema_for_annotated_meta() -> None:
    @tool
    def repeat(count: PositiveInt, word: Annotated[str, msgspec.Meta(max_length=5)]) -> str:
        return word * count

    assert repeat.parameters["properties"] == {
        "count": {"type": "integer", "minimum": 1, "description": "A positive count."},
        "word": {"type": "string", "maxLength": 5},
    }
    result = run_now(execute_tool(ToolRegistry.of(repeat), "repeat", '{"count": 0, "word": "a"}'))
    assert result.error == "Invalid arguments for tool 'repeat': Expected `int` >= 1 - at `$.count`"


def test_zero_parameter_tool_has_empty_object_schema() -> None:
    @tool
    def now() -> str:
        return "noon"

    assert now.parameters == {"type": "object", "properties": {}}


def test_string_annotations_are_resolved() -> None:
    def area(p: Point, scale: PositiveInt = 1) -> int:
        return p.x * p.y * scale

    # This module uses `from __future__ import annotations`: annotations are strings.
    assert area.__annotations__["p"] == "Point"
    spec = tool(area)
    assert spec.parameters["properties"]["p"] == {"$ref": "#/$defs/Point"}
    assert spec.parameters["properties"]["scale"]["minimum"] == 1
    result = run_now(
        execute_tool(ToolRegistry.of(spec), "area", '{"p": {"x": 2, "y": 3}, "scale": 2}')
    )
    assert result.content == "12"


def test_unresolvable_string_annotation_is_rejected_naming_the_parameter() -> None:
    class Local(msgspec.Struct):
        v: int

    def use_local(item: Local) -> int:
        return item.v

    with pytest.raises(ToolDefinitionError, match=r"parameter 'item'.*'Local'"):
        tool(use_local)


def test_unresolvable_return_annotation_is_ignored() -> None:
    def answer() -> Undefined:  # type: ignore[name-defined]  # noqa: F821
        return 42

    assert tool(answer).parameters == {"type": "object", "properties": {}}


# --- descriptions from docstrings ---


def test_description_is_the_first_paragraph_of_the_docstring() -> None:
    @tool
    def weather(city: str, units: str = "metric") -> str:
        """Get the current weather
        for a city.

        Longer explanation that the model does not need.

        Args:
            city: The city name,
                for example "Paris".
            units (str): Either "metric" or "imperial".

        Returns:
            A summary.
        """
        return city

    assert weather.description == "Get the current weather for a city."
    properties = weather.parameters["properties"]
    assert properties["city"] == {
        "type": "string",
        "description": 'The city name, for example "Paris".',
    }
    assert properties["units"]["description"] == 'Either "metric" or "imperial".'


def test_docstring_section_right_after_summary_ends_the_description() -> None:
    @tool
    def ping(host: str) -> str:
        """Ping a host.
        Args:
            host: Where to send the ping.
        """
        return host

    assert ping.description == "Ping a host."
    assert ping.parameters["properties"]["host"]["description"] == "Where to send the ping."


def test_meta_description_wins_over_docstring() -> None:
    @tool
    def f(count: PositiveInt, other: int) -> int:
        """Do it.

        Args:
            count: Ignored, Meta has one.
            other: Another number.
            missing: Not a parameter.
        """
        return count

    properties = f.parameters["properties"]
    assert properties["count"]["description"] == "A positive count."
    assert properties["other"]["description"] == "Another number."
    assert "missing" not in properties


def test_explicit_description_overrides_docstring() -> None:
    @tool(description="Explicit.")
    def documented(x: int) -> int:
        """From the docstring.

        Args:
            x: Still described.
        """
        return x

    assert documented.description == "Explicit."
    assert documented.parameters["properties"]["x"]["description"] == "Still described."


def test_no_docstring_gives_empty_description() -> None:
    @tool
    def bare(x: int) -> int:
        return x

    assert bare.description == ""
    assert "description" not in bare.parameters["properties"]["x"]


# --- rejected declarations ---


def _var_positional(*values: int) -> int:
    return sum(values)


def _var_keyword(**values: int) -> int:
    return sum(values.values())


def _positional_only(x: int, /) -> int:
    return x


def _unannotated(x, y: int) -> int:  # type: ignore[no-untyped-def]
    return y


def _opaque(thing: Opaque) -> str:
    return "?"


def _bad_default(when: Any = Opaque()) -> str:  # noqa: B008
    return "?"


def _bad_mutable_default(things: list[Any] = [Opaque()]) -> str:  # noqa: B006, B008
    return "?"


def _generator(n: int) -> Iterator[int]:
    yield n


async def _async_generator(n: int) -> AsyncIterator[int]:
    yield n


async def _async_tool(n: int) -> int:
    return n


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_var_positional, r"parameter 'values'.*\*args and \*\*kwargs"),
        (_var_keyword, r"parameter 'values'.*\*args and \*\*kwargs"),
        (_positional_only, r"parameter 'x'.*positional-only"),
        (_unannotated, r"parameter 'x'.*missing type annotation"),
        (_opaque, r"parameter 'thing'.*no JSON Schema.*Opaque"),
        (_bad_default, r"parameter 'when'.*no JSON Schema.*Opaque"),
        (_bad_mutable_default, r"parameter 'things'.*default is not JSON.*Opaque"),
        (_generator, "generator functions cannot be tools"),
        (_async_generator, "generator functions cannot be tools"),
    ],
)
def test_unsupported_signature_is_rejected(fn: Callable[..., Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        tool(fn)


@pytest.mark.parametrize("name", ["", "has space", "dotted.name", "x" * 65, "émoji"])
def test_invalid_tool_name_is_rejected(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="invalid tool name"):
        tool(name=name)(_async_tool)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_invalid_timeout_is_rejected(timeout: Any) -> None:
    with pytest.raises(ToolDefinitionError, match="timeout must be"):
        tool(_async_tool, timeout=timeout)


def test_async_tool_cannot_be_blocking() -> None:
    with pytest.raises(ToolDefinitionError, match="async tool cannot be blocking"):
        tool(_async_tool, blocking=True)


def test_a_spec_cannot_be_declared_again() -> None:
    with pytest.raises(ToolDefinitionError, match="already a tool"):
        tool(cast("Callable[..., Any]", add))


# --- from_schema ---


def test_from_schema_passes_the_decoded_object_to_the_handler() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }
    received: list[dict[str, Any]] = []

    def handler(args: dict[str, Any]) -> str:
        received.append(args)
        return "done"

    spec = ToolSpec.from_schema("lookup", "Look something up.", schema, handler, timeout=1)
    schema["properties"]["q"]["type"] = "integer"  # the spec holds a copy
    assert spec.parameters["properties"]["q"] == {"type": "string"}
    assert spec.definition() == Tool(
        name="lookup", description="Look something up.", parameters=spec.parameters
    )
    assert spec.blocking and not spec.is_async and spec.timeout == 1.0 and spec.args_type is None

    registry = ToolRegistry.of(spec)
    assert run_now(
        execute_tool(registry, "lookup", '{"q": "x", "extra": [1]}')
    ) == ToolResult.success("done")
    assert run_now(execute_tool(registry, "lookup", "")) == ToolResult.success("done")
    assert received == [{"q": "x", "extra": [1]}, {}]
    result = run_now(execute_tool(registry, "lookup", "[1]"))
    assert result.error == "Invalid arguments for tool 'lookup': Expected `object`, got `array`"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "array"}, '"type": "object"'),
        ({"properties": {}}, '"type": "object"'),
        ({"type": "object", "default": Opaque()}, "cannot be encoded as JSON"),
    ],
)
def test_from_schema_rejects_bad_schemas(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        ToolSpec.from_schema("t", "", parameters, lambda args: None)


# --- argument decoding ---


@pytest.mark.parametrize("arguments", ["", "   ", "\n\t", "null", " {} "])
def test_empty_arguments_mean_an_empty_object(arguments: str) -> None:
    @tool
    def hello(name: str = "world") -> str:
        return f"hello {name}"

    result = run_now(execute_tool(ToolRegistry.of(hello), "hello", arguments))
    assert result == ToolResult.success("hello world")


def test_invalid_json_gives_a_failure_saying_so() -> None:
    result = run_now(execute_tool(ToolRegistry.of(add), "add", '{"a": 1, "b": '))
    assert result.error == "Arguments for tool 'add' are not valid JSON: Input data was truncated"


def test_validation_failure_names_the_path() -> None:
    result = run_now(execute_tool(ToolRegistry.of(add), "add", '{"a": 1, "b": "2"}'))
    assert result.error == "Invalid arguments for tool 'add': Expected `int`, got `str` - at `$.b`"


def test_missing_required_argument_is_a_failure() -> None:
    result = run_now(execute_tool(ToolRegistry.of(add), "add", '{"a": 1}'))
    assert result.error == "Invalid arguments for tool 'add': Object missing required field `b`"


def test_nested_validation_failure_names_the_nested_path() -> None:
    @tool
    def move(to: Point) -> str:
        return "ok"

    result = run_now(execute_tool(ToolRegistry.of(move), "move", '{"to": {"x": 1, "y": null}}'))
    assert result.error == (
        "Invalid arguments for tool 'move': Expected `int`, got `null` - at `$.to.y`"
    )


def test_unknown_arguments_are_ignored() -> None:
    result = run_now(execute_tool(ToolRegistry.of(add), "add", '{"a": 1, "b": 2, "c": 3}'))
    assert result == ToolResult.success("3")


def test_unknown_tool_gives_a_failure_listing_available_tools() -> None:
    result = run_now(execute_tool(ToolRegistry.of(add, upper), "nope", "{}"))
    assert result.error == "Unknown tool 'nope'. Available tools: add, shout."
    empty = run_now(execute_tool(ToolRegistry(), "nope", "{}"))
    assert empty.error == "Unknown tool 'nope'. Available tools: (none)."


# --- execution: sync, async, run_sync ---


class RecordingRunSync:
    """A stand-in for ``anyio.to_thread.run_sync`` that records its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, func: Callable[[], T], /) -> T:
        self.calls += 1
        return func()


def test_blocking_sync_tool_runs_through_run_sync() -> None:
    run_sync = RecordingRunSync()
    result = run_now(
        execute_tool(ToolRegistry.of(add), "add", '{"a": 1, "b": 1}', run_sync=run_sync)
    )
    assert result == ToolResult.success("2")
    assert run_sync.calls == 1


def test_blocking_sync_tool_runs_inline_without_run_sync() -> None:
    assert run_now(execute_tool(ToolRegistry.of(add), "add", '{"a": 1, "b": 1}')).content == "2"


def test_non_blocking_sync_tool_runs_inline_even_with_run_sync() -> None:
    @tool(blocking=False)
    def quick(n: int) -> int:
        return n * 2

    run_sync = RecordingRunSync()
    result = run_now(execute_tool(ToolRegistry.of(quick), "quick", '{"n": 4}', run_sync=run_sync))
    assert result.content == "8"
    assert run_sync.calls == 0


def test_exception_inside_run_sync_is_a_failure() -> None:
    run_sync = RecordingRunSync()
    result = run_now(
        execute_tool(ToolRegistry.of(failing), "failing", '{"reason": "x"}', run_sync=run_sync)
    )
    assert result.error == "ValueError: x"
    assert run_sync.calls == 1


@pytest.mark.anyio
async def test_async_tool_is_awaited(anyio_backend: str) -> None:
    @tool
    async def slow_add(a: int, b: int) -> int:
        await anyio.lowlevel.checkpoint()
        return a + b

    run_sync = RecordingRunSync()
    registry = ToolRegistry.of(slow_add)
    result = await execute_tool(registry, "slow_add", '{"a": 2, "b": 3}', run_sync=run_sync)
    assert result == ToolResult.success("5")
    assert run_sync.calls == 0


@pytest.mark.anyio
async def test_async_tool_failure_is_a_failure_result(anyio_backend: str) -> None:
    @tool
    async def broken() -> str:
        await anyio.lowlevel.checkpoint()
        raise ToolError("the service is down")

    result = await execute_tool(ToolRegistry.of(broken), "broken", "{}")
    assert result.error == "the service is down"


def test_sync_callable_returning_an_awaitable_is_awaited() -> None:
    async def inner() -> str:
        return "from coroutine"

    def wrapper() -> Coroutine[Any, Any, str]:
        return inner()

    spec = tool(wrapper)
    assert not spec.is_async
    assert run_now(execute_tool(ToolRegistry.of(spec), "wrapper", "")) == ToolResult.success(
        "from coroutine"
    )


# --- errors and cancellation ---


def test_tool_error_sends_its_message_alone() -> None:
    @tool
    def picky(n: int) -> int:
        raise ToolError(f"{n} is not allowed, try 3")

    result = run_now(execute_tool(ToolRegistry.of(picky), "picky", '{"n": 2}'))
    assert result.error == "2 is not allowed, try 3"
    assert msgspec.json.decode(result.content) == {"error": "2 is not allowed, try 3"}


def test_exception_without_message_is_named_by_its_type() -> None:
    @tool
    def empty() -> None:
        raise RuntimeError

    assert run_now(execute_tool(ToolRegistry.of(empty), "empty", "")).error == "RuntimeError"


@pytest.mark.parametrize(
    "exc_type", [KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError]
)
def test_base_exceptions_from_a_sync_tool_fail_that_call(exc_type: type[BaseException]) -> None:
    @tool
    def interrupted() -> None:
        raise exc_type("why")

    result = run_now(execute_tool(ToolRegistry.of(interrupted), "interrupted", ""))
    assert result.error == f"{exc_type.__name__}: why"
    assert isinstance(result.exception, exc_type)


@pytest.mark.anyio
async def test_cancellation_propagates_out_of_execute(anyio_backend: str) -> None:
    started = anyio.Event()

    @tool
    async def hang() -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    registry = ToolRegistry.of(hang)
    outcomes: list[ToolResult] = []

    async def call() -> None:
        outcomes.append(await execute_tool(registry, "hang", ""))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await started.wait()
            tg.cancel_scope.cancel()
    assert tg.cancel_scope.cancelled_caught
    assert outcomes == []  # no failure result: the cancellation went through


@pytest.mark.anyio
async def test_cancellation_propagates_through_run_sync(anyio_backend: str) -> None:
    async def cancelled_run_sync(func: Callable[[], T], /) -> T:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    outcomes: list[ToolResult] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        outcomes.append(
            await execute_tool(
                ToolRegistry.of(add), "add", '{"a": 1, "b": 2}', run_sync=cancelled_run_sync
            )
        )
    assert scope.cancelled_caught
    assert outcomes == []


# --- return values ---


def _returning(value: object) -> ToolResult:
    def give() -> object:
        return value

    return run_now(execute_tool(ToolRegistry.of(tool(give)), "give", ""))


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ("plain text", "plain text"),
        ("", ""),
        (None, ""),
        ({"a": [1, 2]}, '{"a":[1,2]}'),
        ([1, "two"], '[1,"two"]'),
        (3.5, "3.5"),
        (True, "true"),
        (Point(1, 2), '{"x":1,"y":2}'),
        (Weather("Oslo", -3.0), '{"city":"Oslo","celsius":-3.0}'),
    ],
)
def test_return_values_are_encoded(value: object, content: str) -> None:
    assert _returning(value) == ToolResult.success(content)


def test_returned_tool_result_is_passed_through() -> None:
    assert _returning(ToolResult.failure("custom")) == ToolResult.failure("custom")


def test_unencodable_return_value_is_a_failure() -> None:
    result = _returning(Opaque())
    assert result.error is not None
    assert result.error.startswith("The result of tool 'give' cannot be encoded as JSON: ")


# --- property: valid arguments reach the handler as keyword arguments ---

_VALUE_STRATEGIES: dict[Any, st.SearchStrategy[Any]] = {
    int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
    str: st.text(max_size=20),
    bool: st.booleans(),
    list[int]: st.lists(st.integers(-1000, 1000), max_size=4),
}
_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name)
)
_Shape = list[tuple[str, Any, Any]]


@st.composite
def tool_shapes(draw: st.DrawFn) -> _Shape:
    """Parameters as (name, type, default or ``Parameter.empty``)."""
    shape: _Shape = []
    for name in draw(st.lists(_NAMES, unique=True, max_size=6)):
        annotation = draw(st.sampled_from(list(_VALUE_STRATEGIES)))
        has_default = draw(st.booleans())
        default = draw(_VALUE_STRATEGIES[annotation]) if has_default else inspect.Parameter.empty
        shape.append((name, annotation, default))
    return shape


def _echo_handler(shape: _Shape) -> Callable[..., Any]:
    def echo(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    parameters = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
        )
        for name, annotation, default in shape
    ]
    setattr(echo, "__signature__", inspect.Signature(parameters))  # noqa: B010
    return echo


@given(shape=tool_shapes(), data=st.data())
def test_valid_arguments_round_trip_to_the_handler_kwargs(
    shape: _Shape, data: st.DataObject
) -> None:
    spec = tool(_echo_handler(shape), name="echo")
    empty = inspect.Parameter.empty
    required = [name for name, _, default in shape if default is empty]
    assert list(spec.parameters["properties"]) == [name for name, _, _ in shape]
    assert spec.parameters.get("required", []) == required

    arguments = data.draw(
        st.fixed_dictionaries(
            {name: _VALUE_STRATEGIES[ann] for name, ann, default in shape if default is empty},
            optional={
                name: _VALUE_STRATEGIES[ann] for name, ann, default in shape if default is not empty
            },
        )
    )
    result = run_now(
        execute_tool(ToolRegistry.of(spec), "echo", msgspec.json.encode(arguments).decode())
    )
    assert result.ok, result
    expected = {name: arguments.get(name, default) for name, _, default in shape}
    assert msgspec.json.decode(result.content) == expected


# --- what the model never sets: the context parameter, partial-bound arguments ---


class Account(msgspec.Struct):
    """The embedding code's per-turn object (module level: annotations resolve here)."""

    user: str


def transfer(amount: int, user: str) -> str:
    """Move money on behalf of a user."""
    return f"{user} moved {amount}"


def whoami(ctx: ToolContext[Account], shout: bool = False) -> str:
    """Say who the turn is for."""
    name = ctx.deps.user
    return f"{name.upper() if shout else name} ({ctx.tool_name})"


def test_a_partial_bound_argument_leaves_the_schema() -> None:
    spec = tool(functools.partial(transfer, user="alice"), name="transfer")
    assert spec.parameters == {
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
        "required": ["amount"],
    }
    assert spec.hidden == frozenset({"user"})
    assert run_now(execute_tool(ToolRegistry.of(spec), "transfer", '{"amount": 5}')).content == (
        "alice moved 5"
    )


def test_the_model_cannot_override_a_partial_bound_argument() -> None:
    spec = tool(functools.partial(transfer, user="alice"), name="transfer")
    registry = ToolRegistry.of(spec)
    result = run_now(execute_tool(registry, "transfer", '{"amount": 5, "user": "root"}'))
    assert not result.ok
    assert (
        result.error == "Invalid arguments for tool 'transfer': 'user' cannot be set by the model"
    )


def test_a_context_parameter_is_not_in_the_schema_and_is_injected() -> None:
    spec = tool(whoami)
    assert spec.context_parameter == "ctx"
    assert spec.parameters == {
        "type": "object",
        "properties": {"shout": {"type": "boolean", "default": False}},
    }
    context = ToolContext(deps=Account("ada"), tool_name="whoami")
    result = run_now(
        execute_tool(ToolRegistry.of(spec), "whoami", '{"shout": true}', context=context)
    )
    assert result == ToolResult.success("ADA (whoami)")


def test_the_model_cannot_set_the_context_parameter() -> None:
    registry = ToolRegistry.of(whoami)
    result = run_now(execute_tool(registry, "whoami", '{"ctx": {"deps": {"user": "root"}}}'))
    assert result.error == "Invalid arguments for tool 'whoami': 'ctx' cannot be set by the model"


def test_a_context_parameter_without_a_context_gets_none_as_deps() -> None:
    def deps_of(ctx: ToolContext[None]) -> str:
        return repr(ctx.deps)

    assert run_now(execute_tool(ToolRegistry.of(deps_of), "deps_of", "")).content == "None"


def test_two_context_parameters_are_refused_naming_the_second() -> None:
    def twice(a: ToolContext[int], b: ToolContext[int]) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match="parameter 'b': only one parameter"):
        tool(twice)


# --- pydantic models as parameters, reST and NumPy docstrings ---


def test_a_pydantic_model_parameter_is_described_and_validated() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Address(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        street: str
        number: int = 1

    def ship(to: Address, extra: list[Address] | None = None) -> str:
        """Ship a parcel.

        Args:
            to: Where it goes.
        """
        return f"{to.street} {to.number} +{len(extra or [])}"

    ship.__annotations__ = {"to": Address, "extra": list[Address] | None, "return": str}
    spec = tool(ship)
    properties = spec.parameters["properties"]
    assert properties["to"]["properties"]["street"] == {"title": "Street", "type": "string"}
    assert properties["to"]["description"] == "Where it goes."
    assert properties["extra"]["anyOf"][0] == {
        "items": {"$ref": "#/$defs/Address"},
        "type": "array",
    }
    assert spec.parameters["$defs"]["Address"]["required"] == ["street"]
    assert spec.parameters["required"] == ["to"]
    registry = ToolRegistry.of(spec)
    ok = run_now(
        execute_tool(registry, "ship", '{"to": {"street": "Main"}, "extra": [{"street": "B"}]}')
    )
    assert ok == ToolResult.success("Main 1 +1")
    bad = run_now(execute_tool(registry, "ship", '{"to": {"number": "x"}}'))
    assert bad.error is not None
    assert "Field required - at `$.to.street`" in bad.error
    assert "at `$.to.number`" in bad.error


def test_a_pydantic_model_result_is_sent_as_its_json() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Answer(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        value: int

    def answer() -> object:
        return Answer(value=42)

    assert run_now(execute_tool(ToolRegistry.of(answer), "answer", "")).content == '{"value":42}'


def test_an_unsupported_parameter_type_names_the_parameter() -> None:
    class Opaque:
        pass

    def use(thing: Opaque) -> None:
        return None

    use.__annotations__ = {"thing": Opaque, "return": None}
    with pytest.raises(ToolDefinitionError, match="parameter 'thing': no JSON Schema"):
        tool(use)


def test_rest_docstrings_describe_the_parameters() -> None:
    def rest(city: str, days: int = 1) -> str:
        """Forecast the weather.

        :param city: The city,
            by name.
        :param int days: How many days.
        :returns: The forecast.
        """
        return city

    spec = tool(rest)
    assert spec.description == "Forecast the weather."
    assert spec.parameters["properties"]["city"]["description"] == "The city, by name."
    assert spec.parameters["properties"]["days"]["description"] == "How many days."


def test_numpy_docstrings_describe_the_parameters() -> None:
    def numpy(city: str, days: int = 1) -> str:
        """Forecast the weather.

        Parameters
        ----------
        city : str
            The city,
            by name.
        days
            How many days.

        Returns
        -------
        str
            The forecast.
        """
        return city

    spec = tool(numpy)
    assert spec.description == "Forecast the weather."
    assert spec.parameters["properties"]["city"]["description"] == "The city, by name."
    assert spec.parameters["properties"]["days"]["description"] == "How many days."


def test_pydantic_stays_optional() -> None:
    # With pydantic impossible to import, toolrelay imports, declares and runs tools.
    script = (
        "import sys\n"
        "sys.modules['pydantic'] = None\n"
        "import anyio\n"
        "from toolrelay import ToolRegistry, execute_tool\n"
        "def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
        "result = anyio.run(execute_tool, ToolRegistry.of(add), 'add', '{\"a\": 1, \"b\": 2}')\n"
        "print(result.content, 'pydantic' in sys.modules and sys.modules['pydantic'] is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "False"]


def test_the_exception_on_a_failure_is_kept_but_never_encoded_or_compared() -> None:
    error = ValueError("internal detail")
    result = ToolResult.failure("ValueError: internal detail", exception=error)
    assert result.exception is error
    assert result == ToolResult.failure("ValueError: internal detail")
    encoded = msgspec.json.encode(result)
    assert b"internal detail" in encoded and b"exception" not in encoded
    decoded = msgspec.json.decode(encoded, type=ToolResult)
    assert decoded == result and decoded.exception is None
    assert ToolResult.success("ok").exception is None


# --- the edges of binding, results, schemas and docstrings ---


def test_arguments_nested_too_deeply_are_a_failure_not_a_recursion_error() -> None:
    def lookup(city: str) -> str:
        return city

    spec = tool(lookup)
    deep = '{"city": "x", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    bound = spec.bind(deep)
    assert isinstance(bound, ToolResult)
    assert bound.error == "Arguments for tool 'lookup' are nested too deeply"


def test_an_exception_is_told_to_the_model_in_bounded_text_whatever_its_str_does() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    unprintable = ToolSpec.failure_of(Unprintable())
    assert unprintable.error == "Unprintable: <the exception's message could not be read>"
    long = ToolSpec.failure_of(ValueError("x" * 5000))
    assert long.error == "ValueError: " + "x" * 2000 + "... (3000 characters cut)"
    hidden = ToolSpec.failure_of(KeyError("/etc/secret"), detail=False)
    assert hidden.error == "The tool failed."
    assert isinstance(hidden.exception, KeyError)


def test_results_that_cannot_reach_the_model_are_failures() -> None:
    def answer() -> str:
        return ""

    spec = tool(answer)
    built = ToolResult(content=42)  # type: ignore[arg-type]
    assert spec.outcome(built).error == (
        "tool 'answer' returned a ToolResult whose content or error is not a str"
    )
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert spec.outcome(cyclic).error == (
        "The result of tool 'answer' cannot be encoded as JSON: it is cyclic or nested too deeply"
    )


@pytest.mark.parametrize(
    ("text", "fits"),
    [
        ("a" * 11, False),  # more characters than bytes allowed
        ("é" * 5, True),  # 10 bytes: counted, at the bound
        ("é" * 6, False),  # 12 bytes in 6 characters
        ("ab", True),  # four bytes a character would still fit
    ],
)
def test_a_result_past_max_bytes_counts_utf8_bytes(text: str, fits: bool) -> None:
    def answer() -> str:
        return text

    result = tool(answer).outcome(text, max_bytes=10)
    if fits:
        assert result == ToolResult.success(text)
    else:
        assert result.error == (
            "The result of tool 'answer' is too large: more than 10 bytes "
            "(the engine's max_result_bytes)"
        )


def test_a_registry_names_the_tools_that_need_approval() -> None:
    def read(path: str) -> str:
        return path

    def delete(path: str) -> str:
        return path

    registry = ToolRegistry.of(read, tool(delete, needs_approval=True))
    assert registry.needing_approval == frozenset({"delete"})


def test_a_pydantic_parameter_default_is_its_json_and_a_validator_crash_is_told() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Address(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        street: str

        @pydantic.field_validator("street")  # type: ignore[untyped-decorator]
        @classmethod
        def known(cls, street: str) -> str:
            if street == "crash":
                raise RuntimeError("the street list is down")
            return street

    def ship(to: Address = Address(street="Main")) -> str:  # noqa: B008
        return to.street

    ship.__annotations__ = {"to": Address, "return": str}
    spec = tool(ship)
    assert spec.parameters["properties"]["to"]["default"] == {"street": "Main"}
    failed = spec.bind('{"to": {"street": "crash"}}')
    assert isinstance(failed, ToolResult)
    assert failed.error == (
        "Invalid arguments for tool 'ship': RuntimeError: the street list is down - at `$.to`"
    )


def test_a_type_pydantic_cannot_describe_is_a_definition_error() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Address(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        street: str

    def ship(to: Address | Opaque) -> str:
        return "sent"

    ship.__annotations__ = {"to": Address | Opaque, "return": str}
    with pytest.raises(ToolDefinitionError, match="pydantic cannot describe its type"):
        tool(ship)


def test_two_pydantic_types_of_one_name_are_a_definition_error() -> None:
    pydantic = pytest.importorskip("pydantic")

    def model(field: str) -> Any:
        return pydantic.create_model("Address", **{field: (str, ...)})

    def ship(home: Any, work: Any) -> str:
        return "sent"

    listed: Any = list
    ship.__annotations__ = {"home": listed[model("street")], "work": listed[model("city")]}
    with pytest.raises(ToolDefinitionError, match="two different types are named 'Address'"):
        tool(ship)


def test_docstring_prose_between_parameters_describes_none_of_them() -> None:
    def google(city: str, days: int = 1) -> str:
        """Forecast the weather.

        Args:
            city: The city.
            Every value is checked by the service.
                even this continuation.
            days: How many days.
        """
        return city

    def numpy(city: str, days: int = 1) -> str:
        """Forecast the weather.

        Parameters
        ----------
        city
            The city.
        Every value is checked.
            even this continuation.
        days
            How many days.
        """
        return city

    for fn in (google, numpy):
        properties = tool(fn).parameters["properties"]
        assert properties["city"]["description"] == "The city."
        assert properties["days"]["description"] == "How many days."
