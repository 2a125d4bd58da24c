"""What the demo agent says: a reply planned from the request alone.

Which scenario it plays is chosen by ``forwardedProps.scenario`` or, failing that, by
words in the last user message (see :data:`SCENARIOS`). It honours the tools the client
declares: it only calls tools listed in ``RunAgentInput.tools``, and when a tool it needs
is missing it answers in words saying so. Where a conversation stands is read from the
messages the client sends (the tool results after the last user message).

A reply streams like a real agent's: RUN_STARTED and RUN_FINISHED carry the input's ids,
text arrives a word at a time, tool-call arguments in small pieces, and message and call
ids are derived from the run id (deterministic).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import msgspec

from toolrelay.protocol import (
    AssistantMessage,
    Event,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

__all__ = ("SCENARIOS", "choose_scenario", "plan", "plan_reply", "reply_delay")

#: The scenarios the demo agent plays, by name: what each one does.
SCENARIOS: Final[dict[str, str]] = {
    "secret": "two get_secret_number calls in one run (alice and bob), then an answer "
    "quoting both results",
    "multihop": "lookup_city, then get_weather with its result, then an answer",
    "zero-arg": "list_people, a tool without arguments, then an answer",
    "text": "a streamed answer, no tools",
    "loop": (
        "asks for get_secret_number on every run, forever: loop detection (or, with "
        "--max-depth below 2, the circuit breaker) stops the turn"
    ),
    "broken": "the connection drops in the middle of a tool call",
    "error": "the agent reports RUN_ERROR after some text",
    "malformed": "a data line that is not JSON, after some text",
    "slow": "a long answer streamed slowly (something to cancel)",
}

# Words of the last user message that pick a scenario, tried in order.
_KEYWORDS: Final = (
    ("loop", "loop"),
    ("broken", "broken"),
    ("malformed", "malformed"),
    ("slow", "slow"),
    ("error", "error"),
    ("multihop", "multihop"),
    ("multi-hop", "multihop"),
    ("weather", "multihop"),
    ("zero-arg", "zero-arg"),
    ("who do you know", "zero-arg"),
    ("people", "zero-arg"),
    ("secret", "secret"),
)

_MAX_BODY_BYTES: Final = 4 * 1024 * 1024
_MAX_DELAY: Final = 5.0
_SLOW_DELAY: Final = 0.05
_ARG_PIECE: Final = 7  # characters per TOOL_CALL_ARGS delta
_WORDS = re.compile(r"\S+\s*|\s+")


class _Drop:
    """The end of a plan that closes the connection without finishing the stream."""


_Item: TypeAlias = Event | bytes | _Drop  # bytes: a raw (possibly broken) data payload


# --- reading the conversation ----------------------------------------------------------


@dataclass(slots=True)
class _Result:
    name: str
    arguments: dict[str, Any]
    content: str
    error: str | None


@dataclass(slots=True)
class _Turn:
    """The conversation since the last user message."""

    prompt: str = ""
    results: list[_Result] = field(default_factory=list)

    def of(self, name: str) -> list[_Result]:
        return [result for result in self.results if result.name == name]


def _text_of(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.text for part in content if isinstance(part, TextPart))


def _decoded(text: str) -> Any:
    """``text`` decoded as JSON; ``None`` when it is not JSON."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None


def _error_of(message: ToolMessage, content: str) -> str | None:
    if message.error is not None:
        return message.error
    decoded = _decoded(content)
    error = decoded.get("error") if isinstance(decoded, dict) else None
    return error if isinstance(error, str) else None


def _arguments(call: ToolCall | None) -> dict[str, Any]:
    if call is None:
        return {}
    decoded = _decoded(call.function.arguments or "{}")
    return decoded if isinstance(decoded, dict) else {}


def _read_turn(run_input: RunAgentInput) -> _Turn:
    turn = _Turn()
    calls: dict[str, ToolCall] = {}
    for message in run_input.messages:
        if isinstance(message, UserMessage):
            turn = _Turn(prompt=_text_of(message.content))
            calls = {}
        elif isinstance(message, AssistantMessage):
            calls.update((call.id, call) for call in message.tool_calls or ())
        elif isinstance(message, ToolMessage):
            call = calls.get(message.tool_call_id)
            content = _text_of(message.content)
            turn.results.append(
                _Result(
                    name=call.function.name if call is not None else "",
                    arguments=_arguments(call),
                    content=content,
                    error=_error_of(message, content),
                )
            )
    return turn


def choose_scenario(run_input: RunAgentInput) -> str:
    """The scenario a request asks for: ``forwardedProps.scenario``, else a word of the
    last user message, else ``"text"``. An unknown name is returned as it is (the agent
    then says which scenarios it knows)."""
    props = run_input.forwarded_props
    if isinstance(props, dict) and isinstance(props.get("scenario"), str):
        return str(props["scenario"])
    prompt = _read_turn(run_input).prompt.strip().lower()
    if prompt in SCENARIOS:
        return prompt
    for word, scenario in _KEYWORDS:
        if word in prompt:
            return scenario
    return "text"


def reply_delay(run_input: RunAgentInput, scenario: str) -> float:
    """Seconds between two events of the reply: ``forwardedProps.delay`` (at most
    five), else a slow pace for the ``slow`` scenario, else none."""
    props = run_input.forwarded_props
    value = props.get("delay") if isinstance(props, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return min(float(value), _MAX_DELAY)
    return _SLOW_DELAY if scenario == "slow" else 0.0


# --- writing the reply -----------------------------------------------------------------


class _Reply:
    """Builds the items of one run's stream, with ids derived from the run id."""

    def __init__(self, run_input: RunAgentInput, offered: Iterable[str]) -> None:
        self.thread_id = run_input.thread_id
        self.run_id = run_input.run_id
        self.offered = tuple(offered)
        self.items: list[_Item] = [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)]
        self._ids = itertools.count(1)

    def _id(self, kind: str) -> str:
        return f"{self.run_id}-{kind}-{next(self._ids)}"

    def text(self, content: str) -> str:
        message_id = self._id("msg")
        self.items.append(TextMessageStartEvent(message_id=message_id, role="assistant"))
        self.items.extend(
            TextMessageContentEvent(message_id=message_id, delta=word)
            for word in _WORDS.findall(content)
        )
        self.items.append(TextMessageEndEvent(message_id=message_id))
        return message_id

    def call(self, name: str, arguments: dict[str, Any] | None, *, parent: str | None) -> str:
        """A tool call; ``arguments=None`` streams no TOOL_CALL_ARGS at all."""
        call_id = self._id("call")
        self.items.append(
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=parent)
        )
        if arguments is not None:
            raw = msgspec.json.encode(arguments).decode()
            self.items.extend(
                ToolCallArgsEvent(tool_call_id=call_id, delta=raw[i : i + _ARG_PIECE])
                for i in range(0, len(raw), _ARG_PIECE)
            )
        self.items.append(ToolCallEndEvent(tool_call_id=call_id))
        return call_id

    def cut_call(self, name: str, delta: str, *, parent: str | None) -> None:
        """A tool call whose arguments stop at ``delta``: the connection drops there."""
        call_id = self._id("call")
        self.items.append(
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=parent)
        )
        self.items.append(ToolCallArgsEvent(tool_call_id=call_id, delta=delta))
        self.drop()

    def needs(self, *names: str) -> bool:
        """Whether every tool in ``names`` is offered; if not, say so and finish."""
        missing = [name for name in names if name not in self.offered]
        if not missing:
            return True
        offered = ", ".join(self.offered) if self.offered else "none"
        self.text(
            f"I would need the {_and(missing)} tool{'s' if len(missing) > 1 else ''} for that, "
            f"but this client does not offer {'them' if len(missing) > 1 else 'it'} "
            f"(tools offered: {offered})."
        )
        self.finish()
        return False

    def finish(self) -> None:
        self.items.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id))

    def error(self, message: str, code: str) -> None:
        self.items.append(RunErrorEvent(message=message, code=code))

    def raw(self, payload: bytes) -> None:
        self.items.append(payload)

    def drop(self) -> None:
        self.items.append(_Drop())


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _plain(content: str) -> str:
    """A tool result as words: a JSON string is unquoted, anything else kept."""
    decoded = _decoded(content)
    return decoded if isinstance(decoded, str) else content


def _secret(reply: _Reply, turn: _Turn) -> None:
    if not reply.needs("get_secret_number"):
        return
    results = turn.of("get_secret_number")
    if not results:
        parent = reply.text("Let me look up both secret numbers.")
        reply.call("get_secret_number", {"name": "alice"}, parent=parent)
        reply.call("get_secret_number", {"name": "bob"}, parent=parent)
        reply.finish()
        return
    parts = []
    for result in results:
        who = str(result.arguments.get("name", "someone")).title()
        if result.error is not None:
            parts.append(f"I could not get {who}'s number ({result.error})")
        else:
            parts.append(f"{who}'s secret number is {_plain(result.content)}")
    reply.text(_and(parts) + ".")
    reply.finish()


def _multihop(reply: _Reply, turn: _Turn) -> None:
    if not reply.needs("lookup_city", "get_weather"):
        return
    cities = turn.of("lookup_city")
    weather = turn.of("get_weather")
    if not cities:
        parent = reply.text("First I need to know where Alice lives.")
        reply.call("lookup_city", {"person": "alice"}, parent=parent)
        reply.finish()
        return
    city = cities[-1]
    if city.error is not None:
        reply.text(f"I could not find where Alice lives: {city.error}.")
        reply.finish()
        return
    name = _plain(city.content)
    if not weather:
        parent = reply.text(f"Alice lives in {name}. Now the weather there.")
        reply.call("get_weather", {"city": name}, parent=parent)
        reply.finish()
        return
    forecast = weather[-1]
    if forecast.error is not None:
        reply.text(f"Alice lives in {name}, but I could not get its weather: {forecast.error}.")
    else:
        report = _decoded(forecast.content)
        if isinstance(report, dict) and "forecast" in report:
            said = f"{report['forecast']}, {report.get('temperature_c', '?')} degrees Celsius"
        else:
            said = forecast.content
        reply.text(f"Alice lives in {name}, where the weather today is {said}.")
    reply.finish()


def _zero_arg(reply: _Reply, turn: _Turn) -> None:
    if not reply.needs("list_people"):
        return
    results = turn.of("list_people")
    if not results:
        reply.call("list_people", None, parent=None)
        reply.finish()
        return
    result = results[-1]
    if result.error is not None:
        reply.text(f"I could not list the people I know: {result.error}.")
    else:
        people = _decoded(result.content)
        if isinstance(people, list) and people:
            reply.text(f"I know {_and([str(p).title() for p in people])}.")
        else:
            reply.text(f"The people I know: {result.content}.")
    reply.finish()


def _text(reply: _Reply, turn: _Turn) -> None:
    reply.text(
        "Hello! I am toolrelay's demo agent. Ask me for the secret numbers, the weather "
        "where Alice lives, or who I know, and I will call your tools to find out."
    )
    reply.finish()


def _loop(reply: _Reply, turn: _Turn) -> None:
    if not reply.needs("get_secret_number"):
        return
    attempt = len(turn.results) + 1
    parent = reply.text(f"Let me check Alice's number again (attempt {attempt}).")
    reply.call("get_secret_number", {"name": "alice"}, parent=parent)
    reply.finish()


def _broken(reply: _Reply, turn: _Turn) -> None:
    parent = reply.text("Let me look up both secret numbers.")
    reply.cut_call("get_secret_number", '{"name": "al', parent=parent)


def _error(reply: _Reply, turn: _Turn) -> None:
    reply.text("Let me think about that.")
    reply.error("the demo agent's model is overloaded; try again later", "overloaded")


def _malformed(reply: _Reply, turn: _Turn) -> None:
    reply.text("Here comes a broken event.")
    reply.raw(b'{"type": "TEXT_MESSAGE_CONTENT", "messageId": oops')
    reply.finish()


def _slow(reply: _Reply, turn: _Turn) -> None:
    reply.text(" ".join(f"word{i}" for i in range(1, 401)))
    reply.finish()


def _unknown(name: str) -> Callable[[_Reply, _Turn], None]:
    def answer(reply: _Reply, turn: _Turn) -> None:
        reply.text(f"I do not know the scenario {name!r}. I know: {', '.join(SCENARIOS)}.")
        reply.finish()

    return answer


_PLAYS: Final[dict[str, Callable[[_Reply, _Turn], None]]] = {
    "secret": _secret,
    "multihop": _multihop,
    "zero-arg": _zero_arg,
    "text": _text,
    "loop": _loop,
    "broken": _broken,
    "error": _error,
    "malformed": _malformed,
    "slow": _slow,
}


def plan_reply(run_input: RunAgentInput) -> list[Event | bytes | None]:
    """The stream the demo agent answers ``run_input`` with, as a list.

    Returns:
        Events in order; ``bytes`` stand for a raw (malformed) data payload, and a final
        ``None`` means the connection is dropped there instead of finishing.
    """
    return plan(run_input, choose_scenario(run_input))


def plan(run_input: RunAgentInput, scenario: str) -> list[Event | bytes | None]:
    """The stream of :func:`plan_reply`, for the ``scenario`` already chosen."""
    reply = _Reply(run_input, (tool.name for tool in run_input.tools))
    play = _PLAYS.get(scenario) or _unknown(scenario)
    play(reply, _read_turn(run_input))
    return [None if isinstance(item, _Drop) else item for item in reply.items]
