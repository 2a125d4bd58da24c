"""The Responses API's message phases: gpt-5 models and later label each message item
``commentary`` or ``final_answer`` and want the label back on every assistant message
of later requests. The backend remembers what it streamed and sends it back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from toolrelay import Engine, RunStatus, ToolRegistry
from toolrelay.backends.providers import OpenAIResponsesBackend, OpenAIResponsesTranslator
from toolrelay.backends.providers._translator import Recent
from toolrelay.protocol import AssistantMessage, UserMessage

sys.path.insert(0, str(Path(__file__).parent))
from _oa_servers import run_input, sse
from _wire_openai import (
    args_delta,
    call_added,
    call_done,
    completed,
    created,
    message_added,
    message_done,
    text_delta,
)

SSE_HEADERS = {"content-type": "text/event-stream"}


def phased(event: dict[str, Any], phase: str) -> dict[str, Any]:
    """An output item event whose message item says its phase."""
    return {**event, "item": {**event["item"], "phase": phase}}


def message(index: int, item_id: str, text: str, phase: str) -> list[dict[str, Any]]:
    *parts, done = message_done(index, item_id, text)
    return [
        phased(message_added(index, item_id), phase),
        text_delta(index, item_id, text),
        *parts,
        phased(done, phase),
    ]


FIRST = [
    created("resp_1"),
    *message(0, "msg_a", "I'll look that up.", "commentary"),
    call_added(1, "fc_1", "call_1", "lookup"),
    args_delta(1, "fc_1", '{"city": "Oslo"}'),
    *call_done(1, "fc_1", "call_1", "lookup", '{"city": "Oslo"}'),
    completed("resp_1"),
]
SECOND = [
    created("resp_2"),
    *message(0, "msg_b", "Oslo has 700,000 people.", "final_answer"),
    completed("resp_2"),
]


class Provider:
    """A MockTransport handler answering with the given bodies in turn, keeping each
    request's input items."""

    def __init__(self, *bodies: list[dict[str, Any]]) -> None:
        self.bodies = list(bodies)
        self.inputs: list[list[dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.inputs.append(msgspec.json.decode(request.content)["input"])
        return httpx.Response(200, headers=SSE_HEADERS, content=sse(self.bodies.pop(0), named=True))


async def lookup(city: str) -> str:
    """How many people live in ``city``."""
    return "700,000"


@pytest.mark.anyio
async def test_each_message_goes_back_with_the_phase_it_streamed_with() -> None:
    provider = Provider(FIRST, SECOND, [created("resp_3"), completed("resp_3")])
    backend = OpenAIResponsesBackend(
        "gpt-5", api_key="sk-test", transport=httpx.MockTransport(provider)
    )
    async with Engine(backend, tools=ToolRegistry.of(lookup)) as engine:
        first = await engine.run_turn("t1", "How many people live in Oslo?")
        assert first.status is RunStatus.completed
        await engine.run_turn("t1", "Thanks!")

    # The continuation sends the commentary back labelled; the next turn, both.
    assert [item.get("phase") for item in provider.inputs[1] if item.get("type") == "message"] == [
        None,  # the user's
        "commentary",
    ]
    said = [
        (item.get("role"), item.get("phase"))
        for item in provider.inputs[2]
        if item.get("type") == "message"
    ]
    assert said == [
        ("user", None),
        ("assistant", "commentary"),
        ("assistant", "final_answer"),
        ("user", None),
    ]


def test_a_message_it_did_not_stream_goes_without_a_phase() -> None:
    backend = OpenAIResponsesBackend("gpt-5", api_key="sk-test")
    given = run_input(
        [
            UserMessage(id="u1", content="hi"),
            AssistantMessage(id="msg_elsewhere", content="Hello."),
            UserMessage(id="u2", content="and?"),
        ]
    )
    items = backend.build_request(given)["input"]
    assert items[1] == {"type": "message", "role": "assistant", "content": "Hello."}


def test_the_translator_records_a_phase_from_either_end_of_the_item() -> None:
    phases: dict[str, str] = {}
    translator = OpenAIResponsesTranslator(phases=phases)
    *_, done = message_done(1, "msg_late", "Done.")
    for event in [
        phased(message_added(0, "msg_early"), "commentary"),
        message_added(1, "msg_late"),  # no phase when added; given when done
        phased(done, "final_answer"),
        phased(message_added(2, "msg_empty"), ""),  # not a phase
    ]:
        translator.feed(event)
    assert phases == {"msg_early": "commentary", "msg_late": "final_answer"}
    # With nowhere to record them, phases are read and dropped.
    assert OpenAIResponsesTranslator().feed(phased(message_added(0, "m"), "commentary")) == []


def test_the_backend_remembers_the_most_recent_phases_only() -> None:
    remembered: Recent[str] = Recent(2)
    for item_id in ("a", "b", "c"):
        remembered[item_id] = "commentary"
    remembered["b"] = "final_answer"  # written again: the most recent
    remembered["d"] = "commentary"
    assert list(remembered) == ["b", "d"]
