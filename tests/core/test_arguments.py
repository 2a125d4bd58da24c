"""TextAccumulator: streamed text and tool-call arguments built from deltas (promise 8)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from toolrelay._core._arguments import TextAccumulator
from toolrelay._core._conversation import ToolCallInfo


def test_a_new_accumulator_is_empty_and_falsy() -> None:
    acc = TextAccumulator()
    assert acc.text == ""
    assert acc.byte_count == 0
    assert acc.chunk_count == 0
    assert not acc


def test_deltas_are_joined_in_order() -> None:
    acc = TextAccumulator()
    for delta in ('{"ci', 'ty": "Pa', 'ris"}'):
        acc.append(delta)
    assert acc.text == '{"city": "Paris"}'
    assert acc


def test_append_returns_the_running_byte_count() -> None:
    acc = TextAccumulator()
    assert acc.append("ab") == 2
    assert acc.append("cde") == 5
    assert acc.byte_count == 5


@pytest.mark.parametrize(
    ("delta", "size"),
    [
        pytest.param("é", 2, id="two-byte"),
        pytest.param("€", 3, id="three-byte"),
        pytest.param("😀", 4, id="four-byte"),
        pytest.param('{"name": "Zoë 北京"}', len('{"name": "Zoë 北京"}'.encode()), id="mixed"),
    ],
)
def test_non_ascii_deltas_are_counted_in_utf8_bytes_not_characters(delta: str, size: int) -> None:
    acc = TextAccumulator()
    assert acc.append(delta) == size
    assert acc.byte_count == size
    assert len(acc.text) < size


def test_a_lone_surrogate_is_counted_instead_of_raising() -> None:
    # stdlib json decodes "\ud800" to a lone surrogate; a provider adapter may pass it on.
    acc = TextAccumulator()
    assert acc.append("a\ud800") == 4
    assert acc.text == "a\ud800"


def test_the_initial_value_is_text_and_bytes() -> None:
    acc = TextAccumulator("né")
    assert acc.text == "né"
    assert acc.byte_count == 3
    assert acc.chunk_count == 1
    assert acc.append("e") == 4
    assert acc.text == "née"


def test_an_empty_delta_changes_nothing() -> None:
    acc = TextAccumulator()
    acc.append("x")
    joined = acc.text
    assert acc.append("") == 1
    assert acc.chunk_count == 1
    assert acc.text is joined


def test_appending_does_not_join_and_joining_collapses_the_chunks() -> None:
    acc = TextAccumulator()
    for i in range(100):
        acc.append(str(i % 10))
    assert acc.chunk_count == 100  # appends are O(1): nothing was joined yet
    text = acc.text
    assert acc.chunk_count == 1  # the join collapsed the list
    acc.append("a")
    acc.append("b")
    assert acc.chunk_count == 3
    assert acc.text == text + "ab"
    assert acc.chunk_count == 1


def test_the_join_is_cached_until_the_next_delta() -> None:
    acc = TextAccumulator()
    acc.append("x" * 10)
    acc.append("y" * 10)
    first = acc.text
    assert acc.text is first
    acc.append("z")
    assert acc.text is not first


def test_repr_shows_the_text() -> None:
    acc = TextAccumulator()
    acc.append("hi")
    assert repr(acc) == "TextAccumulator('hi')"


@given(st.lists(st.text(max_size=12), max_size=30))
def test_any_deltas_give_their_concatenation_and_its_utf8_size(deltas: list[str]) -> None:
    acc = TextAccumulator()
    for delta in deltas:
        acc.append(delta)
    expected = "".join(deltas)
    assert acc.text == expected
    assert acc.byte_count == len(expected.encode())
    assert bool(acc) == bool(expected)
    assert acc.chunk_count <= 1


def test_tool_call_arguments_use_the_accumulator() -> None:
    call = ToolCallInfo("c1", "lookup")
    assert call.arguments == ""
    assert call.argument_bytes == 0
    assert call.append_arguments('{"q": "') == 7
    assert call.append_arguments("é") == 9
    assert call.append_arguments('"}') == 11
    assert call.arguments == '{"q": "é"}'
    assert call.argument_bytes == 11


def test_tool_call_initial_arguments_are_kept() -> None:
    call = ToolCallInfo("c1", "lookup", arguments='{"a": 1}')
    assert call.arguments == '{"a": 1}'
    assert call.argument_bytes == 8


def test_deltas_added_on_the_hot_path_are_counted_after_a_join() -> None:
    # The hot path adds deltas uncounted; a join then drops the count, which the next
    # question settles in one encode of the joined text.
    acc = TextAccumulator("a")
    acc.add("é")
    acc.add("€")
    assert acc.text == "aé€"
    assert acc.byte_count == 1 + 2 + 3
    assert acc.append("b") == 7
