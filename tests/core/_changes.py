"""Every way to change a list or a dict in place, by name: the tests of collections
that refuse changes (the processor's shared empties, the engine's wire lists) try each
one."""

from __future__ import annotations

from typing import Any


def change_list(items: list[Any], how: str) -> None:
    """Change ``items`` the way ``how`` names (a method's name, or the operator)."""
    match how:
        case "append":
            items.append(1)
        case "extend":
            items.extend([1])
        case "insert":
            items.insert(0, 1)
        case "remove":
            items.remove(items[0])
        case "pop":
            items.pop()
        case "clear":
            items.clear()
        case "sort":
            items.sort()
        case "reverse":
            items.reverse()
        case "[]=":
            items[0] = 1
        case "del":
            del items[0]
        case "slice":
            items[0:0] = [1]
        case "+=":
            items += [1]
        case "*=":
            items *= 2
        case _:
            raise ValueError(f"no list change named {how!r}")


def change_dict(mapping: dict[Any, Any], how: str) -> None:
    """Change ``mapping`` the way ``how`` names (a method's name, or the operator)."""
    match how:
        case "[]=":
            mapping["key"] = 1
        case "del":
            del mapping["key"]
        case "setdefault":
            mapping.setdefault("key", 1)
        case "update":
            mapping.update(key=1)
        case "|=":
            mapping |= {"key": 1}
        case "pop":
            mapping.pop("key")
        case "popitem":
            mapping.popitem()
        case "clear":
            mapping.clear()
        case _:
            raise ValueError(f"no dict change named {how!r}")
