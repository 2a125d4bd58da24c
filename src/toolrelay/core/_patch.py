"""JSON Patch (RFC 6902) for AG-UI STATE_DELTA events.

The agent's state is JSON; STATE_DELTA carries a list of patch operations. The patch
is applied to a deep copy so that a failing operation (RFC 6902 section 5: the whole
patch fails) leaves the previous state untouched.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ("JsonPatchError", "apply_patch")


class JsonPatchError(ValueError):
    """A patch operation cannot be applied (bad pointer, failed test, unknown op)."""


_BAD_ESCAPE = re.compile(r"~(?![01])")


def _parse_pointer(pointer: str) -> list[str]:
    # RFC 6901: "" is the whole document; every other pointer starts with "/".
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JsonPatchError(f"JSON pointer must start with '/': {pointer!r}")
    if _BAD_ESCAPE.search(pointer):
        # RFC 6901 section 3: "~" is only ever followed by "0" or "1".
        raise JsonPatchError(f"invalid escape in JSON pointer {pointer!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    # RFC 6901: ASCII digits, no leading zero ("1" but not "01", "+1" or "１").
    if not (token.isascii() and token.isdigit()) or (token != "0" and token.startswith("0")):
        raise JsonPatchError(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise JsonPatchError(f"array index {index} out of range")
    return index


def _parent(document: Any, tokens: list[str]) -> Any:
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise JsonPatchError(f"path segment {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise JsonPatchError(f"cannot descend into a scalar at {token!r}")
    return node


def _get(document: Any, tokens: list[str]) -> Any:
    if not tokens:
        return document
    parent = _parent(document, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"path segment {last!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise JsonPatchError("cannot index a scalar")


def _add(document: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _parent(document, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise JsonPatchError("cannot add to a scalar")
    return document


def _remove(document: Any, tokens: list[str]) -> tuple[Any, Any]:
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _parent(document, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"path segment {last!r} does not exist")
        return document, parent.pop(last)
    if isinstance(parent, list):
        return document, parent.pop(_index(parent, last, for_add=False))
    raise JsonPatchError("cannot remove from a scalar")


def _json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 section 4.6 equality: same JSON type and value (``true`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _member(operation: Mapping[str, Any], name: str) -> Any:
    """A member the operation must have (RFC 6902 section 4: ``value``, ``from``)."""
    if name not in operation:
        raise JsonPatchError(f"{operation.get('op')!r} operation has no {name!r} member")
    return operation[name]


def apply_patch(document: Any, operations: Iterable[Mapping[str, Any]]) -> Any:
    """Return ``document`` with the RFC 6902 ``operations`` applied (the input is not changed).

    Raises:
        JsonPatchError: An operation failed; the caller keeps its previous document.
    """
    result = copy.deepcopy(document)
    for operation in operations:
        op = operation.get("op")
        tokens = _parse_pointer(str(_member(operation, "path")))
        if op == "add":
            result = _add(result, tokens, copy.deepcopy(_member(operation, "value")))
        elif op == "remove":
            result, _ = _remove(result, tokens)
        elif op == "replace":
            value = copy.deepcopy(_member(operation, "value"))
            _get(result, tokens)
            if tokens:
                result, _ = _remove(result, tokens)
            result = _add(result, tokens, value)
        elif op in ("move", "copy"):
            source = _parse_pointer(str(_member(operation, "from")))
            if op == "move":
                if tokens[: len(source)] == source and tokens != source:
                    raise JsonPatchError("cannot move a value into one of its children")
                result, value = _remove(result, source)
            else:
                value = copy.deepcopy(_get(result, source))
            result = _add(result, tokens, value)
        elif op == "test":
            if not _json_equal(_get(result, tokens), _member(operation, "value")):
                raise JsonPatchError(f"test failed at {operation.get('path')!r}")
        else:
            raise JsonPatchError(f"unknown patch operation {op!r}")
    return result
