"""Collections shared between turns instead of made per turn (issue 16): the empties
a turn's lists and dicts start as, and the wire lists every run of an engine sends.

A turn that makes a list or dict it never fills still pays for it: an empty list is
56 bytes that the cycle collector walks, an empty dict 64 bytes. What most turns
leave empty therefore starts as one shared empty (:data:`NO_ITEMS`,
:data:`NO_KEYS`) that refuses to grow; the writer stores what :func:`added`
(:func:`keyed`) returns, a collection of the turn's own from the first item on.

What every run of an engine sends unchanged (``RunAgentInput.tools``, ``context``,
``forwardedProps``) is one list (dict) that refuses every change, the same for every
turn given the same tuple (:func:`wire_list`): a change made through one run's input
would otherwise reach every run that shares it. It copies and pickles as a plain
list (dict).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = (
    "NO_ITEMS",
    "NO_KEYS",
    "NO_WIRE_ITEMS",
    "NO_WIRE_KEYS",
    "WireList",
    "added",
    "keyed",
    "wire_list",
)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def _refuse_items(*args: Any, **kwargs: Any) -> Any:
    raise TypeError("NO_ITEMS is shared: store what added() returns instead")


def _refuse_keys(*args: Any, **kwargs: Any) -> Any:
    raise TypeError("NO_KEYS is shared: store what keyed() returns instead")


class _SharedEmptyList(list[Any]):
    """The type of :data:`NO_ITEMS`: adding to it, in any way a list can grow or
    change, is a bug, and raises."""

    __slots__ = ()

    append = extend = insert = __iadd__ = __imul__ = __setitem__ = _refuse_items


class _SharedEmptyDict(dict[Any, Any]):
    """The type of :data:`NO_KEYS`: setting a key in it, in any way a dict can gain
    one, is a bug, and raises."""

    __slots__ = ()

    __setitem__ = setdefault = update = __ior__ = _refuse_keys


# What a per-turn or per-run list (dict) is until its first item.
NO_ITEMS: list[Any] = _SharedEmptyList()
NO_KEYS: dict[Any, Any] = _SharedEmptyDict()


def added(items: list[T], item: T) -> list[T]:
    """``items`` with ``item`` appended: ``items`` itself, or a new list in place of
    an empty one (which may be the shared :data:`NO_ITEMS`); store what it returns."""
    if items:
        items.append(item)
        return items
    return [item]


def keyed(mapping: dict[K, V], key: K, value: V) -> dict[K, V]:
    """``mapping`` with ``key`` set to ``value``: ``mapping`` itself, or a new dict
    in place of the shared :data:`NO_KEYS`; store what it returns."""
    if type(mapping) is _SharedEmptyDict:
        return {key: value}
    mapping[key] = value
    return mapping


def _refuse_wire(*args: Any, **kwargs: Any) -> Any:
    raise TypeError(
        "this collection of a RunAgentInput is shared by the runs of every turn that "
        "sends it, and never changes: build a new one (msgspec.structs.replace)"
    )


class WireList(list[T]):
    """A list that refuses every change, shared by the runs that send it; it copies
    and pickles as a plain ``list``."""

    __slots__ = ()

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse_wire
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse_wire

    def __reduce__(self) -> tuple[type[list[T]], tuple[list[T]]]:
        return list, (list(self),)


class _WireDict(dict[Any, Any]):
    """The type of :data:`NO_WIRE_KEYS`: an empty dict that refuses every change; it
    copies and pickles as a plain ``dict``."""

    __slots__ = ()

    __setitem__ = __delitem__ = setdefault = update = __ior__ = _refuse_wire
    pop = popitem = clear = _refuse_wire

    def __reduce__(self) -> tuple[type[dict[Any, Any]], tuple[()]]:
        return dict, ()


#: The empty wire list (no tools, no context).
NO_WIRE_ITEMS: list[Any] = WireList()
#: The empty wire dict (no forwarded props).
NO_WIRE_KEYS: dict[Any, Any] = _WireDict()

# The wire list of each tuple given lately, by the tuple's id; the entry holds the
# tuple, so its id is not reused while it is there. Bounded: past _WIRE_LISTS_MAX
# tuples (engines come and go) it starts over, and a tuple given again gets a new
# list, which is what every turn got before.
_WIRE_LISTS: dict[int, tuple[Sequence[Any], WireList[Any]]] = {}
_WIRE_LISTS_MAX = 32


def wire_list(items: Sequence[T]) -> list[T]:
    """``items`` as a :class:`WireList`: the same one for the same tuple.

    An engine gives every turn's processor the same tuples (its tool registry's
    definitions, its context), so their turns send one list each, not one a turn.
    Anything but a tuple may change after the call: it gets a list of its own.
    """
    if type(items) is WireList:
        return items
    if not items:
        return NO_WIRE_ITEMS
    if type(items) is not tuple:
        return WireList(items)
    entry = _WIRE_LISTS.get(id(items))
    if entry is not None:
        return entry[1]
    if len(_WIRE_LISTS) >= _WIRE_LISTS_MAX:
        _WIRE_LISTS.clear()
    shared = WireList(items)
    _WIRE_LISTS[id(items)] = (items, shared)
    return shared
