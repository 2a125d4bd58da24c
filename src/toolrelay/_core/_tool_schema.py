"""A function's signature as a tool's arguments: one Struct type, one JSON Schema.

Strategy: the signature is the single source of truth. Each parameter becomes a
field of a Struct type made with ``msgspec.defstruct`` (annotation, default,
``kw_only``). The same type gives the JSON Schema
(``msgspec.json.schema_components``, with the top-level object inlined so the wire
sees ``{"type": "object", "properties": ..., "required": ...}``) and decodes and
validates the model's arguments in one step (``msgspec.json.decode(args, type=...)``),
so the schema the model is shown and the check its arguments pass cannot drift apart.
A parameter whose type mentions a pydantic model is described and validated by a
pydantic ``TypeAdapter`` instead (its schema merged in, its value checked after the
decode).

What the model never sets: a parameter annotated :class:`ToolContext` (the engine
injects it) and an argument bound with :func:`functools.partial` are left out of the
schema; they are fields of a second Struct type, used to decode, so that a call whose
arguments name one of them is caught and refused.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from toolrelay._core._tool_context import ToolContext
from toolrelay._core._tool_pydantic import (
    is_pydantic_model,
    mentions_pydantic,
    merge_pydantic_schema,
    pydantic_adapter,
)
from toolrelay._errors import ToolDefinitionError

__all__ = ("SignatureArguments", "signature_arguments")

#: The schema of a tool without parameters.
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True, kw_only=True)
class SignatureArguments:
    """What a function's signature gives its tool (the fields of ``ToolSpec`` of the
    same names).

    Attributes:
        args_type: The Struct type of the arguments the model sends.
        decode_type: ``args_type`` plus a field per hidden parameter, so that a model
            naming one is caught.
        parameters: The JSON Schema of ``args_type``, an ``object`` schema.
        context_parameter: The parameter the engine fills with a
            :class:`ToolContext`, or ``None``.
        hidden: The parameters the model may not set.
        validators: Per pydantic-typed parameter, the function validating its
            decoded value.
    """

    args_type: type[msgspec.Struct]
    decode_type: type[msgspec.Struct]
    parameters: dict[str, Any]
    context_parameter: str | None
    hidden: frozenset[str]
    validators: tuple[tuple[str, Callable[[Any], Any]], ...]


def signature_arguments(
    fn: Callable[..., Any],
    target: Callable[..., Any],
    tool_name: str,
    arg_docs: dict[str, str],
) -> SignatureArguments:
    """The arguments of the tool ``tool_name`` whose handler is ``fn``.

    Args:
        fn: The handler, as it will be called (possibly a partial or a decorated
            function).
        target: The function behind ``fn``: its string annotations are resolved in
            that function's module.
        tool_name: The tool's name, for the struct types and the error messages.
        arg_docs: The parameters' descriptions from the docstring; an explicit
            ``Meta(description=...)`` wins.

    Raises:
        ToolDefinitionError: The function has no signature, ``*args``/``**kwargs``,
            positional-only or unannotated parameters, two context parameters, an
            annotation that cannot be resolved or has no JSON Schema, or a default
            that is not JSON. The message names the parameter.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: no signature: {exc}") from exc

    globalns = _globals_of(target)
    bound = _bound_keywords(fn)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    schema_defaults: dict[str, Any] = {}
    # Per pydantic-typed parameter: its TypeAdapter (schema and validation).
    adapters: dict[str, Any] = {}
    context_parameter: str | None = None
    for param in signature.parameters.values():
        where = f"tool {tool_name!r}, parameter {param.name!r}"
        if param.name in bound:
            continue  # bound with functools.partial: never the model's to set
        if param.kind is param.VAR_POSITIONAL or param.kind is param.VAR_KEYWORD:
            raise ToolDefinitionError(f"{where}: *args and **kwargs cannot be tool parameters")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"{where}: positional-only parameters cannot be passed")
        if param.annotation is param.empty:
            raise ToolDefinitionError(f"{where}: missing type annotation")
        annotation = _resolve_annotation(param.name, param.annotation, globalns, where)
        if _is_context(annotation):
            if context_parameter is not None:
                raise ToolDefinitionError(
                    f"{where}: only one parameter can take the ToolContext "
                    f"({context_parameter!r} already does)"
                )
            context_parameter = param.name
            continue
        if mentions_pydantic(annotation):
            adapters[param.name] = pydantic_adapter(annotation, where)
            annotation = Any
        if param.default is param.empty:
            fields.append((param.name, annotation))
        elif (
            isinstance(param.default, (list, dict, set, bytearray)) and param.default
        ) or is_pydantic_model(type(param.default)):
            # msgspec refuses non-empty mutable defaults; give each call its own copy.
            factory = functools.partial(copy.deepcopy, param.default)
            fields.append((param.name, annotation, msgspec.field(default_factory=factory)))
            schema_defaults[param.name] = param.default
        else:
            fields.append((param.name, annotation, param.default))

    args_type = msgspec.defstruct(
        f"{tool_name}_arguments",
        fields,
        kw_only=True,
        module=__name__,
    )
    parameters = _object_schema(tool_name, args_type, fields)
    properties: dict[str, Any] = parameters["properties"]
    for field_name, adapter in adapters.items():
        merge_pydantic_schema(tool_name, field_name, adapter, parameters)
    for field_name, default in schema_defaults.items():
        try:
            if field_name in adapters:
                properties[field_name]["default"] = adapters[field_name].dump_python(
                    default, mode="json"
                )
            else:
                properties[field_name]["default"] = msgspec.to_builtins(default)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {tool_name!r}, parameter {field_name!r}: default is not JSON: {exc}"
            ) from exc
    for field_name, text in arg_docs.items():
        if field_name in properties and text:
            properties[field_name].setdefault("description", text)

    hidden = frozenset(bound) | ({context_parameter} if context_parameter else frozenset())
    decode_type = args_type
    if hidden:
        # The same fields, plus one per hidden parameter: a model that names one is
        # caught (msgspec ignores unknown fields).
        decode_type = msgspec.defstruct(
            f"{tool_name}_arguments_checked",
            [*fields, *((n, Any, msgspec.UNSET) for n in sorted(hidden))],
            kw_only=True,
            module=__name__,
        )
    return SignatureArguments(
        args_type=args_type,
        decode_type=decode_type,
        parameters=parameters,
        context_parameter=context_parameter,
        hidden=hidden,
        validators=tuple(
            (field_name, adapter.validate_python) for field_name, adapter in adapters.items()
        ),
    )


def _bound_keywords(fn: Callable[..., Any]) -> set[str]:
    """The arguments bound by keyword with :func:`functools.partial` (through
    decorators): the signature keeps them, with their bound value as a default."""
    names: set[str] = set()
    while True:
        fn = inspect.unwrap(fn)
        if not isinstance(fn, functools.partial):
            return names
        names.update(fn.keywords)
        fn = fn.func


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_context(annotation: Any) -> bool:
    """Whether ``annotation`` is ``ToolContext`` or ``ToolContext[X]``."""
    annotation = _strip_annotated(annotation)
    return annotation is ToolContext or typing.get_origin(annotation) is ToolContext


def _object_schema(
    tool_name: str,
    args_type: type[msgspec.Struct],
    fields: list[tuple[str, Any] | tuple[str, Any, Any]],
) -> dict[str, Any]:
    """The JSON Schema of ``args_type`` with its top-level object inlined."""
    try:
        (ref,), components = msgspec.json.schema_components([args_type])
    except (TypeError, ValueError) as exc:
        # Find the parameter at fault to name it; each one alone is cheap to check.
        for field in fields:
            probe = msgspec.defstruct("probe", [field], kw_only=True)
            try:
                msgspec.json.schema(probe)
            except (TypeError, ValueError) as field_exc:
                detail = " ".join(str(field_exc).split())
                raise ToolDefinitionError(
                    f"tool {tool_name!r}, parameter {field[0]!r}: no JSON Schema "
                    f"for its type or default: {detail}"
                ) from field_exc
        # Defensive: a type msgspec refuses is refused alone as well.
        raise ToolDefinitionError(  # pragma: no cover
            f"tool {tool_name!r}: no JSON Schema: {' '.join(str(exc).split())}"
        ) from exc
    top = components.pop(ref["$ref"].rsplit("/", 1)[-1])
    schema: dict[str, Any] = dict(_EMPTY_OBJECT_SCHEMA)
    schema["properties"] = top["properties"]
    if top.get("required"):
        schema["required"] = top["required"]
    if components:
        # Nested types keep their "#/$defs/<name>" references, valid from the root.
        schema["$defs"] = components
    return schema


def _resolve_annotation(name: str, annotation: Any, globalns: dict[str, Any], where: str) -> Any:
    """Resolve one (possibly string) annotation, keeping ``Annotated`` metadata."""
    probe = types.SimpleNamespace(__annotations__={name: annotation})
    try:
        return typing.get_type_hints(probe, globalns=globalns, include_extras=True)[name]
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: cannot resolve annotation {annotation!r}: {exc} (string "
            "annotations are resolved in the function's module globals)"
        ) from exc


def _globals_of(target: Callable[..., Any]) -> dict[str, Any]:
    """The namespace string annotations of ``target`` are resolved in."""
    namespace = getattr(target, "__globals__", None)
    if isinstance(namespace, dict):
        return namespace
    # A callable object: its class's module.
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    return vars(module) if module is not None else {}
