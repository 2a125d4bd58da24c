"""The provider table of ``test_providers_engine.py``: what a row says, and what rows share.

Each ``_wire_<provider>.py`` builds its rows (``ROW``, or ``CHAT`` and ``RESPONSES``
for OpenAI) from the pieces here: the question of the three-hop conversation, and the
calls and answers it ends with. Two scripts exist: the "zed" one (OpenAI, Anthropic:
a city lookup and a call for an unknown person in the second batch) and the "dave" one
(Gemini, Cohere, Ollama: the people list and an unknown person).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from toolrelay import Engine, EventReceived, ToolCallStatus, ToolRegistry, Turn
from toolrelay.backends.providers import ProviderBackend
from toolrelay.protocol import RunFinishedEvent

# The helpers sit next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _gc_servers import Failure, Recorded
from _oa_servers import Outcome, sse

Call = tuple[str | None, str, str, ToolCallStatus]  # id (None: made up here), name, args


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider as the harness drives it.

    Attributes:
        id: The test id.
        cls: The backend class.
        model: The model the backend asks for.
        base_path: What follows the server's URL in ``base_url``.
        frame: One scripted chunk as the provider puts it on the wire.
        media_type: The stream's ``Content-Type``.
        hops: The three answers of the tool conversation.
        texts: The assistant's texts the conversation ends with.
        calls: The two batches of calls, as the turn records them.
        path: The path every request goes to.
        name: The provider's name (``toolrelay run --provider``).
        env: The environment variables that may hold the key, in the order tried.
        auth: The backend's ``auth_headers()`` for a key (``None``: no key).
        tool_names: The tool names a request body declares.
        wire: Checks the three request bodies of the conversation (the provider's own).
        error_stream: A stream broken by the provider's error event.
        error_reason: The run's ``(message, code)`` for ``error_stream``.
        failure: A non-2xx answer with the provider's error body.
        failure_message: The :class:`AgentRunError` message for ``failure``.
        default_url: The URL a request goes to without ``base_url``.
        opening: The body field holding the conversation, and its value in the first
            request (the question alone).
        streams: Published streams the backend must play as its translator does,
            however the bytes are cut.
        named: Whether the translator is fed each chunk's SSE event name (its ``type``).
        expected: What some of ``streams`` amount to, written out.
        history: What precedes the question in the conversation.
    """

    id: str
    cls: type[ProviderBackend]
    model: str
    base_path: str
    frame: Callable[[Any], bytes]
    media_type: str
    hops: Sequence[list[Any]]
    texts: list[str]
    calls: list[list[Call]]
    path: str
    name: str
    env: tuple[str, ...]
    auth: Callable[[str | None], dict[str, str]]
    tool_names: Callable[[Any], list[str]]
    wire: Callable[[Recorded, Recorded, Recorded, Turn], None]
    error_stream: list[Any]
    error_reason: tuple[str, str | None]
    failure: Failure
    failure_message: str
    default_url: str
    opening: tuple[str, Any]
    streams: dict[str, list[Any]]
    named: bool = False
    expected: dict[str, Outcome] = field(default_factory=dict)
    history: list[Any] = field(default_factory=list)


def error_body(value: Any) -> bytes:
    return msgspec.json.encode(value)


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def function_names(body: Any) -> list[str]:
    return [t["function"]["name"] for t in body["tools"]]


QUESTION = "What are the secret numbers of alice and bob, where does alice live, who is there?"
ZED_ERROR = msgspec.json.encode({"error": "nobody called 'zed' has a secret number"}).decode()


def named_frame(chunk: Any) -> bytes:
    return sse([chunk], named=True)


ZED_TEXTS = ["Let me look up both secret numbers.", "Alice: 42, Bob: 7. Alice lives in Paris."]


def lettered_calls(prefix: str) -> list[list[Call]]:
    """The calls of the OpenAI and Anthropic conversations, ids ``<prefix>a`` to ``e``."""
    return [
        [
            (f"{prefix}a", "get_secret_number", '{"name": "alice"}', ToolCallStatus.completed),
            (f"{prefix}b", "get_secret_number", '{"name": "bob"}', ToolCallStatus.completed),
        ],
        [
            (f"{prefix}c", "lookup_city", '{"person": "alice"}', ToolCallStatus.completed),
            (f"{prefix}d", "get_secret_number", '{"name": "zed"}', ToolCallStatus.failed),
            (f"{prefix}e", "list_people", "", ToolCallStatus.completed),
        ],
    ]


DAVE_ANSWER = (
    "Alice's number is 42 and Bob's is 7. I know alice, bob and carol; nobody called Dave."
)


def dave_calls(ids: Sequence[str | None], compact: bool = True) -> list[list[Call]]:
    """The calls of the Gemini, Cohere and Ollama conversations."""
    dave = '{"name":"dave"}' if compact else '{"name": "dave"}'
    a, b, z, d = ids
    return [
        [
            (a, "get_secret_number", '{"name":"alice"}', ToolCallStatus.completed),
            (b, "get_secret_number", '{"name":"bob"}', ToolCallStatus.completed),
        ],
        [
            (z, "list_people", "{}", ToolCallStatus.completed),
            (d, "get_secret_number", dave, ToolCallStatus.failed),
        ],
    ]


def dave_error(turn: Turn) -> str:
    """The error of the one call that failed (the demo tool's own words)."""
    (error,) = [
        c.result.error for c in turn.conversation.tool_calls() if c.result and c.result.error
    ]
    return error


def dave_content(turn: Turn) -> str:
    """The result the model is sent for the one call that failed."""
    (content,) = [
        c.result.content for c in turn.conversation.tool_calls() if c.result and c.result.error
    ]
    return content


def recording_tools(ran: list[tuple[str, str]]) -> ToolRegistry:
    """The two demo tools' names and parameters, noting each run in ``ran`` (the
    tests of a cut-off response check that none runs)."""

    async def get_secret_number(name: str) -> int:
        """A person's secret number."""
        ran.append(("get_secret_number", name))
        return 42

    async def lookup_city(person: str) -> str:
        """The city a person lives in."""
        ran.append(("lookup_city", person))
        return "Paris"

    return ToolRegistry().register(get_secret_number).register(lookup_city)


async def run_recorded_turn(
    backend: ProviderBackend, ran: list[tuple[str, str]]
) -> tuple[Turn, list[Any]]:
    """One turn of a real Engine over ``backend`` with :func:`recording_tools`: the
    turn, and the ``result`` of each RUN_FINISHED it received (the backend is closed
    after)."""
    finished: list[Any] = []
    try:
        async with Engine(backend, tools=recording_tools(ran)) as engine:
            with engine.subscribe(events=True) as notes:
                turn = await engine.run_turn("thread-cut", "Secret numbers?")
                while True:
                    try:
                        note = notes.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    if isinstance(note, EventReceived) and isinstance(note.event, RunFinishedEvent):
                        finished.append(note.event.result)
    finally:
        await backend.aclose()
    return turn, finished
