"""Optional pydantic support for tools: models as parameters, results and defaults.

pydantic stays optional: a model class exists only if its user imported pydantic, so
the checks here look pydantic up in ``sys.modules`` and never import it unless an
annotation already holds one of its models.
"""

from __future__ import annotations

import sys
import typing
from typing import Any

from toolrelay._errors import ToolDefinitionError

__all__ = (
    "is_pydantic_model",
    "mentions_pydantic",
    "merge_pydantic_schema",
    "pydantic_adapter",
    "validation_text",
)


def is_pydantic_model(cls: Any) -> bool:
    """Whether ``cls`` is a pydantic model class (pydantic stays optional: a model
    class exists only if its user imported pydantic)."""
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None)
    return isinstance(cls, type) and base is not None and issubclass(cls, base)


def mentions_pydantic(annotation: Any) -> bool:
    """Whether a pydantic model appears anywhere in ``annotation`` (``Model``,
    ``Model | None``, ``list[Model]``, ``Annotated[Model, ...]``)."""
    if is_pydantic_model(annotation):
        return True
    return any(mentions_pydantic(arg) for arg in typing.get_args(annotation))


def pydantic_adapter(annotation: Any, where: str) -> Any:
    """A pydantic ``TypeAdapter`` for ``annotation``: its JSON Schema and validator."""
    import pydantic  # present: a model class of it is in the annotation

    try:
        adapter = pydantic.TypeAdapter(annotation)
        adapter.json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: pydantic cannot describe its type as JSON Schema: {exc}"
        ) from exc
    return adapter


def merge_pydantic_schema(
    tool_name: str, field_name: str, adapter: Any, parameters: dict[str, Any]
) -> None:
    """Put a pydantic parameter's schema in ``parameters``, its definitions beside
    msgspec's (both refer to them as ``#/$defs/<name>``)."""
    schema: dict[str, Any] = dict(adapter.json_schema(ref_template="#/$defs/{model}"))
    definitions: dict[str, Any] = schema.pop("$defs", {})
    existing: dict[str, Any] = parameters.setdefault("$defs", {})
    for def_name, definition in definitions.items():
        if def_name in existing and existing[def_name] != definition:
            raise ToolDefinitionError(
                f"tool {tool_name!r}, parameter {field_name!r}: two different types are "
                f"named {def_name!r} in its schema; rename one"
            )
        existing[def_name] = definition
    if not existing:
        del parameters["$defs"]
    parameters["properties"][field_name] = schema


def validation_text(exc: Exception, field_name: str) -> str:
    """One line per problem of a (pydantic) validation error, with its path."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            items = errors(include_url=False)
            return "; ".join(
                f"{item['msg']} - at `$.{'.'.join(map(str, (field_name, *item['loc'])))}`"
                for item in items
            )
        except Exception:  # pragma: no cover - not pydantic's shape after all
            pass
    return f"{type(exc).__name__}: {exc} - at `$.{field_name}`"
