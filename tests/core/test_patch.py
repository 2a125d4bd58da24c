"""JSON Patch (RFC 6902) for STATE_DELTA: the RFC's own examples, then the failures.

The examples of RFC 6902 Appendix A are written out with their section numbers.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given

from toolrelay._core._patch import (
    BoundedState,
    JsonPatchError,
    StateBoundError,
    StateBounds,
    apply_patch,
)
from toolrelay.testing.strategies import json_values

# (section, document, patch, expected result)
RFC_EXAMPLES: list[tuple[str, Any, list[dict[str, Any]], Any]] = [
    (
        "A.1 adding an object member",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux"}],
        {"baz": "qux", "foo": "bar"},
    ),
    (
        "A.2 adding an array element",
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    (
        "A.3 removing an object member",
        {"baz": "qux", "foo": "bar"},
        [{"op": "remove", "path": "/baz"}],
        {"foo": "bar"},
    ),
    (
        "A.4 removing an array element",
        {"foo": ["bar", "qux", "baz"]},
        [{"op": "remove", "path": "/foo/1"}],
        {"foo": ["bar", "baz"]},
    ),
    (
        "A.5 replacing a value",
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        "A.6 moving a value",
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        "A.7 moving an array element",
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        "A.8 testing a value: success",
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [
            {"op": "test", "path": "/baz", "value": "qux"},
            {"op": "test", "path": "/foo/1", "value": 2},
        ],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        "A.10 adding a nested member object",
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        "A.11 ignoring unrecognized elements",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
        {"foo": "bar", "baz": "qux"},
    ),
    (
        "A.14 ~ escape ordering",
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": 10}],
        {"/": 9, "~1": 10},
    ),
    (
        "A.16 adding an array value",
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
    (
        "a path through an array element",
        {"a": [{"b": 1}, {"b": 2}]},
        [{"op": "replace", "path": "/a/1/b", "value": 3}, {"op": "remove", "path": "/a/0/b"}],
        {"a": [{}, {"b": 3}]},
    ),
    (
        "test: booleans equal to booleans",
        {"a": [True, False]},
        [{"op": "test", "path": "/a", "value": [True, False]}],
        {"a": [True, False]},
    ),
]

# (section or case, document, patch)
FAILURES: list[tuple[str, Any, list[dict[str, Any]]]] = [
    (
        "A.9 testing a value: error",
        {"baz": "qux"},
        [{"op": "test", "path": "/baz", "value": "bar"}],
    ),
    (
        "A.12 adding to a nonexistent target",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz/bat", "value": "qux"}],
    ),
    (
        "A.15 comparing strings and numbers",
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": "10"}],
    ),
    ("test: true is not 1", {"a": True}, [{"op": "test", "path": "/a", "value": 1}]),
    ("test: 0 is not false", {"a": [0]}, [{"op": "test", "path": "/a", "value": [False]}]),
    ("test: null is not missing", {"a": None}, [{"op": "test", "path": "/b", "value": None}]),
    ("remove a missing member", {"a": 1}, [{"op": "remove", "path": "/b"}]),
    ("remove past the end of an array", {"a": [1]}, [{"op": "remove", "path": "/a/1"}]),
    ("remove with '-'", {"a": [1]}, [{"op": "remove", "path": "/a/-"}]),
    ("remove the whole document", {"a": 1}, [{"op": "remove", "path": ""}]),
    ("replace a missing member", {"a": 1}, [{"op": "replace", "path": "/b", "value": 2}]),
    ("add past the end of an array", {"a": [1]}, [{"op": "add", "path": "/a/2", "value": 2}]),
    ("an index with a leading zero", {"a": [1, 2]}, [{"op": "remove", "path": "/a/01"}]),
    ("an index with a sign", {"a": [1, 2]}, [{"op": "remove", "path": "/a/+1"}]),
    ("an index in non-ASCII digits", {"a": [1, 2]}, [{"op": "remove", "path": "/a/\uff11"}]),
    ("descend into a scalar", {"a": 1}, [{"op": "add", "path": "/a/b/c", "value": 2}]),
    ("add under a scalar", {"a": 1}, [{"op": "add", "path": "/a/b", "value": 2}]),
    ("a pointer without a leading slash", {"a": 1}, [{"op": "remove", "path": "a"}]),
    ("an invalid ~ escape", {"~2": 1}, [{"op": "remove", "path": "/~2"}]),
    ("a ~ at the end", {"a~": 1}, [{"op": "remove", "path": "/a~"}]),
    ("a ~ before an escape", {"~~1": 1}, [{"op": "remove", "path": "/~~01"}]),
    ("move into its own child", {"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b"}]),
    ("move from a missing member", {"a": 1}, [{"op": "move", "from": "/x", "path": "/y"}]),
    ("copy from a missing member", {"a": 1}, [{"op": "copy", "from": "/x", "path": "/y"}]),
    ("an unknown operation", {"a": 1}, [{"op": "increment", "path": "/a"}]),
    ("an operation without op", {"a": 1}, [{"path": "/a"}]),
    ("add without value", {"a": 1}, [{"op": "add", "path": "/b"}]),
    ("replace without value", {"a": 1}, [{"op": "replace", "path": "/a"}]),
    ("test without value", {"a": None}, [{"op": "test", "path": "/a"}]),
    ("move without from", {"a": 1}, [{"op": "move", "path": "/b"}]),
    ("copy without from", {"a": 1}, [{"op": "copy", "path": "/b"}]),
    ("an operation without path", {"a": 1}, [{"op": "remove"}]),
    ("test below a scalar", {"a": 1}, [{"op": "test", "path": "/a/b", "value": 1}]),
    ("remove below a scalar", {"a": 1}, [{"op": "remove", "path": "/a/b"}]),
    (
        "test: objects with other members",
        {"a": {"x": 1}},
        [{"op": "test", "path": "/a", "value": {"y": 1}}],
    ),
    ("test: arrays of other lengths", {"a": [1, 2]}, [{"op": "test", "path": "/a", "value": [1]}]),
    (
        "a later operation fails after earlier ones applied",
        {"a": 1, "list": [1, 2]},
        [
            {"op": "replace", "path": "/a", "value": 2},
            {"op": "remove", "path": "/list/0"},
            {"op": "test", "path": "/a", "value": 1},
        ],
    ),
]


@pytest.mark.parametrize(
    ("document", "patch", "expected"),
    [pytest.param(d, p, e, id=name) for name, d, p, e in RFC_EXAMPLES],
)
def test_the_rfc_6902_examples_give_the_rfc_results(
    document: Any, patch: list[dict[str, Any]], expected: Any
) -> None:
    before = copy.deepcopy(document)
    assert apply_patch(document, patch) == expected
    assert document == before  # the input is never changed


@pytest.mark.parametrize(
    ("document", "patch"), [pytest.param(d, p, id=name) for name, d, p in FAILURES]
)
def test_a_failing_patch_raises_and_leaves_the_input_untouched(
    document: Any, patch: list[dict[str, Any]]
) -> None:
    before = copy.deepcopy(document)
    with pytest.raises(JsonPatchError):
        apply_patch(document, patch)
    assert document == before


def test_json_patch_error_is_a_value_error() -> None:
    assert issubclass(JsonPatchError, ValueError)


def test_dash_appends_to_an_array() -> None:
    assert apply_patch({"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2}]) == {"a": [1, 2]}


def test_adding_at_the_array_length_appends() -> None:
    assert apply_patch([1, 2], [{"op": "add", "path": "/2", "value": 3}]) == [1, 2, 3]


def test_add_replaces_an_existing_member() -> None:
    assert apply_patch({"a": 1}, [{"op": "add", "path": "/a", "value": 2}]) == {"a": 2}


def test_replace_in_an_array_keeps_its_position() -> None:
    result = apply_patch([1, 2, 3], [{"op": "replace", "path": "/2", "value": 9}])
    assert result == [1, 2, 9]


def test_the_empty_pointer_is_the_whole_document() -> None:
    assert apply_patch({"a": 1}, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert apply_patch({"a": 1}, [{"op": "add", "path": "", "value": "x"}]) == "x"
    assert apply_patch({"a": 1}, [{"op": "test", "path": "", "value": {"a": 1}}]) == {"a": 1}


def test_escaped_tokens_address_keys_with_slash_and_tilde() -> None:
    document = {"a/b": 1, "m~n": 2}
    patch: list[dict[str, Any]] = [
        {"op": "replace", "path": "/a~1b", "value": 10},
        {"op": "remove", "path": "/m~0n"},
        {"op": "add", "path": "/x~1y~0z", "value": 3},
    ]
    assert apply_patch(document, patch) == {"a/b": 10, "x/y~z": 3}


def test_the_empty_key_is_a_valid_member_name() -> None:
    assert apply_patch({}, [{"op": "add", "path": "/", "value": 1}]) == {"": 1}


def test_copy_is_a_deep_copy() -> None:
    result = apply_patch({"a": {"b": [1]}}, [{"op": "copy", "from": "/a", "path": "/c"}])
    assert result == {"a": {"b": [1]}, "c": {"b": [1]}}
    result["c"]["b"].append(2)
    assert result["a"] == {"b": [1]}


def test_move_within_an_array_and_to_the_same_place() -> None:
    assert apply_patch([1, 2, 3], [{"op": "move", "from": "/0", "path": "/-"}]) == [2, 3, 1]
    assert apply_patch({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}


def test_an_added_value_is_not_shared_with_the_patch() -> None:
    value: dict[str, Any] = {"k": [1]}
    result = apply_patch({}, [{"op": "add", "path": "/v", "value": value}])
    value["k"].append(2)
    assert result == {"v": {"k": [1]}}


def test_test_compares_numbers_by_value_and_containers_deeply() -> None:
    document = {"n": 1, "f": 1.0, "o": {"x": [1, {"y": None}]}}
    patch: list[dict[str, Any]] = [
        {"op": "test", "path": "/n", "value": 1.0},
        {"op": "test", "path": "/f", "value": 1},
        {"op": "test", "path": "/o", "value": {"x": [1, {"y": None}]}},
    ]
    assert apply_patch(document, patch) == document


def test_an_empty_patch_returns_an_equal_copy() -> None:
    document = {"a": [1, {"b": 2}]}
    result = apply_patch(document, [])
    assert result == document
    assert result is not document


@given(json_values())
def test_replacing_the_root_then_testing_it_gives_the_value(value: Any) -> None:
    patch = [
        {"op": "replace", "path": "", "value": value},
        {"op": "test", "path": "", "value": value},
    ]
    assert apply_patch({"old": True}, patch) == value


@given(json_values())
def test_adding_then_removing_a_member_restores_the_document(document: Any) -> None:
    wrapped = {"doc": document}
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": "/tmp", "value": [1, 2]},
        {"op": "remove", "path": "/tmp"},
    ]
    assert apply_patch(wrapped, patch) == wrapped


def test_a_state_nested_past_the_depth_bound_is_refused() -> None:
    with pytest.raises(StateBoundError) as info:
        BoundedState({"a": {"b": {}}}, StateBounds(max_bytes=1000, max_depth=2))
    assert (info.value.limit, info.value.bound) == ("max_json_depth", 2)


def test_a_scalar_state_past_the_size_bound_is_refused() -> None:
    with pytest.raises(StateBoundError) as info:
        BoundedState("x" * 100, StateBounds(max_bytes=50, max_depth=5))
    assert (info.value.limit, info.value.bound) == ("max_state_bytes", 50)


def test_an_uncopied_value_that_passes_the_size_bound_leaves_the_state_as_it_was() -> None:
    state = BoundedState({"a": 1}, StateBounds(max_bytes=50, max_depth=5))
    with pytest.raises(StateBoundError) as info:
        state.apply([{"op": "add", "path": "/b", "value": "x" * 100}], copy_values=False)
    assert info.value.limit == "max_state_bytes"
    assert state.document == {"a": 1}
    state.apply([{"op": "add", "path": "/b", "value": 2}], copy_values=False)
    assert state.document == {"a": 1, "b": 2}


def test_a_failed_patch_after_replacing_the_root_restores_the_root() -> None:
    state = BoundedState({"a": 1}, StateBounds(max_bytes=1000, max_depth=5))
    before = state.document
    with pytest.raises(JsonPatchError):
        state.apply(
            [
                {"op": "replace", "path": "", "value": [1]},
                {"op": "test", "path": "/0", "value": 2},
            ]
        )
    assert state.document is before
    assert state.document == {"a": 1}
