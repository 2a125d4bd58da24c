"""JSON Patch (RFC 6902) for AG-UI STATE_DELTA events, bounded.

The agent's state is JSON; STATE_DELTA carries a list of patch operations. RFC 6902
section 5 says a patch applies whole or not at all.

Strategy: the processor's state is patched in place, and every change is written to
an undo log first; a failing operation replays the log backwards, so the previous
state comes back without the state ever being copied whole (the cost of a delta is
its own size plus the parts it touches: the values it removes, replaces, copies or
moves deeper). :class:`BoundedState` also keeps an estimate of the state's encoded
size and its nesting depth within :class:`StateBounds`, so a ``copy`` that doubles
the state is stopped at the bound (its copy stops there too), and no value deeper
than the bound is ever walked by recursive code (msgspec's encoder, ``==`` on
dicts): every walk here is iterative.

:func:`apply_patch` is the functional form (the input is not changed), for callers
outside the processor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = (
    "BoundedState",
    "JsonPatchError",
    "StateBoundError",
    "StateBounds",
    "apply_patch",
    "bounded_copy",
)


class JsonPatchError(ValueError):
    """A patch operation cannot be applied (bad pointer, failed test, unknown op)."""


class StateBoundError(ValueError):
    """A value passes a bound of :class:`StateBounds`.

    Attributes:
        limit: ``"max_state_bytes"`` or ``"max_json_depth"``.
        bound: The bound passed.
    """

    def __init__(self, limit: str, bound: int, detail: str) -> None:
        super().__init__(f"{limit}={bound} passed: {detail}")
        self.limit = limit
        self.bound = bound


class StateBounds:
    """The bounds a state keeps: estimated encoded bytes and nesting depth."""

    __slots__ = ("max_bytes", "max_depth")

    def __init__(self, *, max_bytes: int, max_depth: int) -> None:
        self.max_bytes = max_bytes
        self.max_depth = max_depth


_UNBOUNDED: Final = StateBounds(max_bytes=2**62, max_depth=2**31)
_BAD_ESCAPE = re.compile(r"~(?![01])")
_MISSING: Final = object()


def _scalar_size(value: Any) -> int:
    # An estimate of the encoded size, cheap to compute: exact for strings up to
    # escapes, a constant for the rest (what matters is that it grows with the data).
    if isinstance(value, str):
        return len(value) + 2
    return 8


def bounded_copy(
    value: Any, bounds: StateBounds, *, depth: int = 0, budget: int = -1
) -> tuple[Any, int]:
    """A deep copy of the JSON ``value`` (dicts, lists, scalars) and its estimated size.

    Iterative: nesting costs no Python stack. The walk stops as soon as a bound is
    passed, so its cost is at most the bound.

    Args:
        value: The value to copy.
        bounds: The depth bound applies to ``depth`` plus the value's own nesting.
        depth: How deep the value will sit in its document.
        budget: The bytes the copy may take (``bounds.max_bytes`` when negative).

    Raises:
        StateBoundError: The value is deeper or larger than allowed.
    """
    if budget < 0:
        budget = bounds.max_bytes
    max_depth = bounds.max_depth
    size = 0

    def fresh(item: Any, level: int) -> Any:
        nonlocal size
        if isinstance(item, dict):
            size += 2
            if level > max_depth:
                raise StateBoundError("max_json_depth", max_depth, "value nested too deep")
            copy: Any = {}
            stack.append((item, copy, level))
            return copy
        if isinstance(item, (list, tuple)):
            size += 2
            if level > max_depth:
                raise StateBoundError("max_json_depth", max_depth, "value nested too deep")
            copy = []
            stack.append((item, copy, level))
            return copy
        size += _scalar_size(item)
        return item

    stack: list[tuple[Any, Any, int]] = []
    root = fresh(value, depth + 1 if isinstance(value, (dict, list, tuple)) else depth)
    while stack:
        if size > budget:
            raise StateBoundError("max_state_bytes", bounds.max_bytes, "state too large")
        source, target, level = stack.pop()
        if isinstance(target, dict):
            for key, item in source.items():
                size += len(key) + 3 if isinstance(key, str) else 11
                target[key] = fresh(item, level + 1)
        else:
            for item in source:
                size += 1
                target.append(fresh(item, level + 1))
    if size > budget:
        raise StateBoundError("max_state_bytes", bounds.max_bytes, "state too large")
    return root, size


def _measure(value: Any) -> tuple[int, int]:
    """The estimated size and the nesting height of ``value`` (iterative)."""
    size = 0
    height = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            size += 2
            height = max(height, level + 1)
            for key, child in item.items():
                size += len(key) + 3 if isinstance(key, str) else 11
                stack.append((child, level + 1))
        elif isinstance(item, list):
            size += 2 + len(item)
            height = max(height, level + 1)
            stack.extend((child, level + 1) for child in item)
        else:
            size += _scalar_size(item)
    return size, height


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


def _json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 section 4.6 equality: same JSON type and value (``true`` is not ``1``).

    Iterative, and it stops at the first difference.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, bool) or isinstance(y, bool):
            if not (isinstance(x, bool) and isinstance(y, bool) and x is y):
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if x != y:
                return False
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif type(x) is not type(y) or not bool(x == y):
            return False
    return True


def _member(operation: Mapping[str, Any], name: str) -> Any:
    """A member the operation must have (RFC 6902 section 4: ``value``, ``from``)."""
    if name not in operation:
        raise JsonPatchError(f"{operation.get('op')!r} operation has no {name!r} member")
    return operation[name]


class BoundedState:
    """A JSON document patched in place, within :class:`StateBounds`.

    Attributes:
        document: The document (the processor's ``conversation.state``).
        size: Its estimated encoded size.
    """

    __slots__ = ("_bounds", "_undo", "document", "size")

    def __init__(self, document: Any, bounds: StateBounds) -> None:
        """Take a bounded copy of ``document``.

        Raises:
            StateBoundError: ``document`` is larger or deeper than ``bounds``.
        """
        self._bounds = bounds
        self.document, self.size = bounded_copy(document, bounds)
        self._undo: list[tuple[Any, ...]] = []

    def apply(self, operations: Iterable[Mapping[str, Any]], *, copy_values: bool = True) -> None:
        """Apply the RFC 6902 ``operations`` whole, or not at all.

        Args:
            operations: The patch.
            copy_values: Copy the ``value`` members (False when the caller made them
                for this patch alone, as ``msgspec.to_builtins`` does).

        Raises:
            JsonPatchError: An operation failed; the document is as it was.
            StateBoundError: The result would pass a bound; the document is as it was.
        """
        undo = self._undo
        undo.clear()
        size = self.size
        try:
            for operation in operations:
                size = self._operation(operation, size, copy_values)
                if size > self._bounds.max_bytes:
                    raise StateBoundError(
                        "max_state_bytes", self._bounds.max_bytes, "the patch makes it too large"
                    )
        except BaseException:
            self._rollback()
            raise
        undo.clear()
        self.size = size

    def _rollback(self) -> None:
        for entry in reversed(self._undo):
            kind = entry[0]
            if kind == "root":
                self.document = entry[1]
            elif kind == "set":
                _, container, key, old = entry
                if old is _MISSING:
                    del container[key]
                else:
                    container[key] = old
            elif kind == "inserted":
                entry[1].pop(entry[2])
            else:  # "popped"
                entry[1].insert(entry[2], entry[3])
        self._undo.clear()

    def _value(self, value: Any, depth: int, copy_values: bool, size: int) -> tuple[Any, int]:
        """The value to insert at ``depth`` and its estimated size, bounds checked."""
        if copy_values:
            budget = max(self._bounds.max_bytes - size, 0)
            return bounded_copy(value, self._bounds, depth=depth, budget=budget)
        added, height = _measure(value)
        if depth + height > self._bounds.max_depth:
            raise StateBoundError(
                "max_json_depth", self._bounds.max_depth, "the patch nests the state too deep"
            )
        return value, added

    def _add(self, tokens: list[str], value: Any, added: int) -> int:
        """Put ``value`` (of size ``added``) at ``tokens``; returns the size change."""
        if not tokens:
            old = self.document
            self._undo.append(("root", old))
            self.document = value
            return added - _measure(old)[0]
        parent = _parent(self.document, tokens)
        last = tokens[-1]
        if isinstance(parent, dict):
            old = parent.get(last, _MISSING)
            self._undo.append(("set", parent, last, old))
            parent[last] = value
            if old is _MISSING:
                return added + len(last) + 3
            return added - _measure(old)[0]
        if isinstance(parent, list):
            index = _index(parent, last, for_add=True)
            parent.insert(index, value)
            self._undo.append(("inserted", parent, index))
            return added + 1
        raise JsonPatchError("cannot add to a scalar")

    def _remove(self, tokens: list[str]) -> tuple[Any, int, int, int]:
        """Take the value at ``tokens`` out; returns it, the size change, its own size
        and its height."""
        if not tokens:
            raise JsonPatchError("cannot remove the whole document")
        parent = _parent(self.document, tokens)
        last = tokens[-1]
        if isinstance(parent, dict):
            if last not in parent:
                raise JsonPatchError(f"path segment {last!r} does not exist")
            value = parent.pop(last)
            self._undo.append(("set", parent, last, value))
            slot = len(last) + 3
        elif isinstance(parent, list):
            index = _index(parent, last, for_add=False)
            value = parent.pop(index)
            self._undo.append(("popped", parent, index, value))
            slot = 1
        else:
            raise JsonPatchError("cannot remove from a scalar")
        removed, height = _measure(value)
        return value, -(removed + slot), removed, height

    def _operation(self, operation: Mapping[str, Any], size: int, copy_values: bool) -> int:
        """Apply one operation; returns the new estimated size."""
        op = operation.get("op")
        tokens = _parse_pointer(str(_member(operation, "path")))
        if op == "add":
            value, added = self._value(_member(operation, "value"), len(tokens), copy_values, size)
            return size + self._add(tokens, value, added)
        if op == "remove":
            return size + self._remove(tokens)[1]
        if op == "replace":
            _get(self.document, tokens)
            value, added = self._value(_member(operation, "value"), len(tokens), copy_values, size)
            if tokens:
                size += self._remove(tokens)[1]
            return size + self._add(tokens, value, added)
        if op in ("move", "copy"):
            source = _parse_pointer(str(_member(operation, "from")))
            if op == "move":
                if tokens[: len(source)] == source and tokens != source:
                    raise JsonPatchError("cannot move a value into one of its children")
                value, change, moved, height = self._remove(source)
                if len(tokens) + height > self._bounds.max_depth:
                    raise StateBoundError(
                        "max_json_depth", self._bounds.max_depth, "move nests the state too deep"
                    )
                return size + change + self._add(tokens, value, moved)
            value, added = bounded_copy(
                _get(self.document, source),
                self._bounds,
                depth=len(tokens),
                budget=max(self._bounds.max_bytes - size, 0),
            )
            return size + self._add(tokens, value, added)
        if op == "test":
            expected, _ = self._value(_member(operation, "value"), 0, False, 0)
            if not _json_equal(_get(self.document, tokens), expected):
                raise JsonPatchError(f"test failed at {operation.get('path')!r}")
            return size
        raise JsonPatchError(f"unknown patch operation {op!r}")


def apply_patch(document: Any, operations: Iterable[Mapping[str, Any]]) -> Any:
    """Return ``document`` with the RFC 6902 ``operations`` applied (the input is not changed).

    Raises:
        JsonPatchError: An operation failed; the caller keeps its previous document.
    """
    state = BoundedState(document, _UNBOUNDED)
    state.apply(operations)
    return state.document
