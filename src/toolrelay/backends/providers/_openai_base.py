"""What the two OpenAI APIs share: the backend's options and auth, the stream's
common pieces (run end, errors, argument pieces).

Chat Completions lives in ``_openai_chat.py``, the Responses API in
``_openai_responses.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec

from toolrelay.backends.providers._base import CUT_OFF, Capabilities, ProviderBackend
from toolrelay.backends.providers._translator import nonempty, token_count
from toolrelay.protocol import RunErrorEvent, RunFinishedEvent, TokenUsage

__all__ = (
    "OpenAIBase",
    "arguments_piece",
    "cut_off",
    "error_event",
    "finished",
    "token_usage",
)

_JSON_ENCODER = msgspec.json.Encoder()


#: OpenAI's finish reasons (Chat Completions' ``finish_reason``, the Responses API's
#: incomplete reasons) in the words every provider backend reports them in.
_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "max_output_tokens": "max_tokens",
    "content_filter": "content_filter",
}


def finished(
    provider_reason: Any,
    *,
    made_calls: bool = False,
    usage: list[TokenUsage] | None = None,
    stop_reason: str | None = None,
) -> RunFinishedEvent:
    """RUN_FINISHED with ``{"stopReason": ..., "providerStopReason": provider_reason}``:
    the reason in the words every provider backend uses (``end_turn``, ``tool_use``,
    ``max_tokens``, ``content_filter``; ``other`` for one it does not know), and
    OpenAI's own.

    Args:
        provider_reason: OpenAI's reason.
        made_calls: Whether the response made tool calls. A response that did and still
            says ``"stop"`` (OpenAI does, with a forced ``tool_choice``) ends for its
            tools, so it reports ``tool_use``, as the Gemini and Ollama backends do. A
            response cut off (``max_tokens``) or filtered keeps its reason: that is what
            happened to its calls.
        usage: The tokens the response used, as :func:`token_usage` read them.
        stop_reason: The reason in the shared words, when OpenAI's own is not one
            they translate (the Responses API says only ``"completed"``).
    """
    reason = str(provider_reason)
    if stop_reason is None:
        stop_reason = _STOP_REASONS.get(reason, "other")
    if made_calls and stop_reason == "end_turn":
        stop_reason = "tool_use"
    # The backend stamps the run's ids (the translator does not know them).
    return RunFinishedEvent(
        thread_id="",
        run_id="",
        result={"stopReason": stop_reason, "providerStopReason": reason},
        usage=usage,
    )


def token_usage(usage: Any, model: Any) -> list[TokenUsage] | None:
    """The tokens a response used, from its ``usage`` object: Chat Completions'
    (``prompt_tokens``, ``completion_tokens``) or the Responses API's (``input_tokens``,
    ``output_tokens``), with the cached input and reasoning tokens their details give;
    ``None`` when it holds no count. OpenAI counts the cached tokens in the input."""
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage or "completion_tokens" in usage:  # Chat Completions
        input_key, output_key = "prompt_tokens", "completion_tokens"
    else:  # the Responses API
        input_key, output_key = "input_tokens", "output_tokens"
    input_details = usage.get(f"{input_key}_details")
    output_details = usage.get(f"{output_key}_details")
    counted = TokenUsage(
        provider="openai",
        model=nonempty(model),
        input_tokens=token_count(usage, input_key),
        output_tokens=token_count(usage, output_key),
        total_tokens=token_count(usage, "total_tokens"),
        reasoning_tokens=token_count(output_details, "reasoning_tokens"),
        cached_input_tokens=token_count(input_details, "cached_tokens"),
    )
    if counted.input_tokens is None and counted.output_tokens is None:
        return None
    return [counted]


def cut_off(provider_reason: Any) -> bool:
    """Whether OpenAI's reason says the response was cut off (``max_tokens``) or
    filtered (``content_filter``): the last thing it was saying, a call's arguments
    among them, may stop mid-way, so none of its calls is complete."""
    return _STOP_REASONS.get(str(provider_reason)) in CUT_OFF


def error_event(error: Any, default: str) -> RunErrorEvent:
    """RUN_ERROR from an error object (``{"message", "code", "type"}``) or a string."""
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        if code is None:
            code = error.get("type")
        return RunErrorEvent(
            message=message if isinstance(message, str) and message else default,
            code=None if code is None else str(code),
        )
    if isinstance(error, str) and error:
        return RunErrorEvent(message=error)
    return RunErrorEvent(message=default)


def arguments_piece(value: Any) -> str:
    """An arguments piece as text: servers that send an object get it JSON-encoded."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return _JSON_ENCODER.encode(value).decode()


class OpenAIBase(ProviderBackend):
    """What the two OpenAI APIs share.

    Args:
        model: The model name.
        developer_role: The role AG-UI ``developer`` messages are sent with:
            ``"developer"`` (OpenAI's own API) or ``"system"``, for OpenAI-compatible
            servers that predate the developer role and refuse it.
        **kwargs: The other arguments of
            :class:`~toolrelay.backends.providers._base.ProviderBackend`.
    """

    api_key_env: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    capabilities: ClassVar[Capabilities] = Capabilities(
        streaming=True, tools=True, tool_ids=True, parallel_calls=True
    )

    def __init__(
        self,
        model: str,
        *,
        developer_role: Literal["developer", "system"] = "developer",
        **kwargs: Any,
    ) -> None:
        if developer_role not in ("developer", "system"):
            raise ValueError(
                f"developer_role must be 'developer' or 'system', not {developer_role!r}"
            )
        self.developer_role = developer_role
        super().__init__(model, **kwargs)

    def auth_headers(self) -> dict[str, str]:
        if not self._api_key:
            return {}  # OpenAI-compatible servers on a private network often need none
        return {"Authorization": f"Bearer {self._api_key}"}
