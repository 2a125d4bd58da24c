"""JSON Patch (RFC 6902) for AG-UI STATE_DELTA events.

The agent's state is JSON; STATE_DELTA carries a list of patch operations. The patch
is applied to a deep copy so that a failing operation (RFC 6902 section 5: the whole
patch fails) leaves the previous state untouched.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ("JsonPatchError", "apply_patch")


class JsonPatchError(ValueError):
    """A patch operation cannot be applied (bad pointer, failed test, unknown op)."""


def _parse_pointer(pointer: str) -> list[str]:
    # RFC 6901: "" is the whole document; every other pointer starts with "/".
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JsonPatchError(f"JSON pointer must start with '/': {pointer!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
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


def apply_patch(document: Any, operations: Iterable[Mapping[str, Any]]) -> Any:
    """Return ``document`` with the RFC 6902 ``operations`` applied (the input is not changed).

    Raises:
        JsonPatchError: An operation failed; the caller keeps its previous document.
    """
    result = copy.deepcopy(document)
    for operation in operations:
        op = operation.get("op")
        tokens = _parse_pointer(str(operation.get("path", "")))
        if op == "add":
            result = _add(result, tokens, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            result, _ = _remove(result, tokens)
        elif op == "replace":
            _get(result, tokens)
            if tokens:
                result, _ = _remove(result, tokens)
            result = _add(result, tokens, copy.deepcopy(operation.get("value")))
        elif op in ("move", "copy"):
            source = _parse_pointer(str(operation.get("from", "")))
            if op == "move":
                if tokens[: len(source)] == source and tokens != source:
                    raise JsonPatchError("cannot move a value into one of its children")
                result, value = _remove(result, source)
            else:
                value = copy.deepcopy(_get(result, source))
            result = _add(result, tokens, value)
        elif op == "test":
            if _get(result, tokens) != operation.get("value"):
                raise JsonPatchError(f"test failed at {operation.get('path')!r}")
        else:
            raise JsonPatchError(f"unknown patch operation {op!r}")
    return result
