"""What turns share instead of making their own (issue 16): the wire lists every run
of an engine sends, one per tuple given, which refuse every change and copy and
pickle as plain lists."""

from __future__ import annotations

import copy
import pickle
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from toolrelay._core import _shared
from toolrelay._core._conversation import Conversation
from toolrelay._core._processor import EventProcessor
from toolrelay._core._shared import NO_WIRE_ITEMS, NO_WIRE_KEYS, WireList, wire_list
from toolrelay.protocol import Context, RunAgentInput, Tool, UserMessage

# The helpers sit next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _changes import change_dict, change_list

TOOLS = (Tool(name="lookup", description="Look it up.", parameters={"type": "object"}),)
CONTEXT = (Context(description="user", value="ada"),)


@pytest.mark.parametrize(
    "how",
    [
        "append",
        "extend",
        "insert",
        "remove",
        "pop",
        "clear",
        "sort",
        "reverse",
        "[]=",
        "del",
        "+=",
        "*=",
    ],
)
def test_a_wire_list_refuses_every_change(how: str) -> None:
    shared = wire_list(TOOLS)
    with pytest.raises(TypeError, match="shared by the runs of every turn"):
        change_list(shared, how)
    assert shared == list(TOOLS)


@pytest.mark.parametrize(
    "how", ["[]=", "del", "setdefault", "update", "|=", "pop", "popitem", "clear"]
)
def test_the_empty_wire_dict_refuses_every_change(how: str) -> None:
    with pytest.raises(TypeError, match="shared by the runs of every turn"):
        change_dict(NO_WIRE_KEYS, how)
    assert NO_WIRE_KEYS == {}


def test_wire_lists_and_the_empty_dict_copy_and_pickle_as_plain_ones() -> None:
    shared = wire_list(TOOLS)
    for made in (copy.copy(shared), copy.deepcopy(shared), pickle.loads(pickle.dumps(shared))):
        assert type(made) is list and made == list(TOOLS)
        made.append(TOOLS[0])  # a copy is the caller's own
    for empty in (copy.deepcopy(NO_WIRE_KEYS), pickle.loads(pickle.dumps(NO_WIRE_KEYS))):
        assert type(empty) is dict and empty == {}
    assert shared == list(TOOLS)


def test_wire_list_gives_one_list_per_tuple_and_its_own_to_anything_else() -> None:
    assert wire_list(TOOLS) is wire_list(TOOLS)
    assert wire_list(()) is NO_WIRE_ITEMS and wire_list([]) is NO_WIRE_ITEMS
    mine = wire_list(TOOLS)
    assert wire_list(mine) is mine
    given = list(TOOLS)
    made = wire_list(given)
    given.append(TOOLS[0])  # a list may change after: the wire list does not
    assert made == list(TOOLS) and made is not wire_list(list(TOOLS))
    assert type(made) is WireList


def test_wire_list_forgets_past_its_bound_and_gives_equal_lists() -> None:
    first = wire_list(TOOLS)
    tuples = [(*TOOLS,) * (n + 2) for n in range(_shared._WIRE_LISTS_MAX)]
    for items in tuples:
        assert wire_list(items) == list(items)
    assert len(_shared._WIRE_LISTS) <= _shared._WIRE_LISTS_MAX
    again = wire_list(TOOLS)
    assert again == first and again is not first


def _processor(thread: str, **kwargs: Any) -> EventProcessor:
    conversation = Conversation(thread, [UserMessage(id=f"u-{thread}", content="hi")])
    return EventProcessor(conversation, **kwargs)


def test_turns_given_the_same_tuples_send_the_same_lists_which_read_as_before() -> None:
    one = _processor("one", tools=TOOLS, context=CONTEXT).start_run("r1")
    two = _processor("two", tools=TOOLS, context=CONTEXT).start_run("r2")
    assert one.tools is two.tools and one.context is two.context
    assert one.tools == list(TOOLS) and one.context == list(CONTEXT)
    bare = _processor("bare").start_run("r3")
    assert bare.tools == [] and bare.context == [] and bare.forwarded_props == {}
    assert bare.tools is NO_WIRE_ITEMS and bare.forwarded_props is NO_WIRE_KEYS
    with pytest.raises(TypeError):
        one.tools.append(TOOLS[0])
    assert two.tools == list(TOOLS)
    # On the wire, and through msgspec, nothing tells them from plain lists.
    plain = RunAgentInput(
        thread_id="one",
        run_id="r1",
        messages=one.messages,
        tools=list(TOOLS),
        context=list(CONTEXT),
    )
    assert msgspec.json.encode(one) == msgspec.json.encode(plain)
    assert msgspec.to_builtins(one) == msgspec.to_builtins(plain)
    assert copy.deepcopy(one) == plain and pickle.loads(pickle.dumps(one)) == plain


def test_forwarded_props_given_are_sent_as_given() -> None:
    props = {"model": "small"}
    run_input = _processor("p", forwarded_props=props).start_run("r")
    assert run_input.forwarded_props is props


def test_a_processor_says_what_context_and_forwarded_props_its_runs_carry() -> None:
    props = {"model": "small"}
    given = _processor("g", context=CONTEXT, forwarded_props=props)
    assert list(given.context) == list(CONTEXT) and given.forwarded_props is props
    assert given.start_run("r").context is given.context
    bare = _processor("b")
    assert list(bare.context) == [] and bare.forwarded_props is None  # none, not the shared {}
    assert bare.start_run("r").forwarded_props is NO_WIRE_KEYS
