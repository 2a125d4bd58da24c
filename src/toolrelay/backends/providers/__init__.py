"""LLM provider streams as agent backends: OpenAI, Anthropic, Google, Ollama, Cohere.

Each provider has a pure translator (provider stream chunks -> AG-UI events) and a
backend that speaks its streaming HTTP API; see ``_base.py`` for the shared shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from toolrelay.backends.providers._anthropic import (
    AnthropicBackend as AnthropicBackend,
    AnthropicTranslator as AnthropicTranslator,
)
from toolrelay.backends.providers._base import (
    CONTEXT_MESSAGE_ID as CONTEXT_MESSAGE_ID,
    Capabilities as Capabilities,
    ProviderBackend as ProviderBackend,
    context_prompt as context_prompt,
)
from toolrelay.backends.providers._cohere import (
    CohereBackend as CohereBackend,
    CohereTranslator as CohereTranslator,
)
from toolrelay.backends.providers._google import (
    GoogleBackend as GoogleBackend,
    GoogleTranslator as GoogleTranslator,
)
from toolrelay.backends.providers._ollama import (
    OllamaBackend as OllamaBackend,
    OllamaTranslator as OllamaTranslator,
)
from toolrelay.backends.providers._openai_chat import (
    OpenAIChatBackend as OpenAIChatBackend,
    OpenAIChatTranslator as OpenAIChatTranslator,
)
from toolrelay.backends.providers._openai_responses import (
    OpenAIResponsesBackend as OpenAIResponsesBackend,
    OpenAIResponsesTranslator as OpenAIResponsesTranslator,
)
from toolrelay.backends.providers._translator import (
    BuffersArguments as BuffersArguments,
    StreamTranslator as StreamTranslator,
    TrailingUsage as TrailingUsage,
)

__all__ = (
    "CONTEXT_MESSAGE_ID",
    "PROVIDERS",
    "AnthropicBackend",
    "AnthropicTranslator",
    "BuffersArguments",
    "Capabilities",
    "CohereBackend",
    "CohereTranslator",
    "GoogleBackend",
    "GoogleTranslator",
    "OllamaBackend",
    "OllamaTranslator",
    "OpenAIChatBackend",
    "OpenAIChatTranslator",
    "OpenAIResponsesBackend",
    "OpenAIResponsesTranslator",
    "ProviderBackend",
    "StreamTranslator",
    "TrailingUsage",
    "capability_table",
    "context_prompt",
    "provider_backend",
)

PROVIDERS: Mapping[str, type[ProviderBackend]] = MappingProxyType(
    {
        cls.name: cls
        for cls in (
            OpenAIChatBackend,
            OpenAIResponsesBackend,
            AnthropicBackend,
            GoogleBackend,
            OllamaBackend,
            CohereBackend,
        )
    }
)
"""Every provider backend by the name ``toolrelay run --provider`` takes."""


def provider_backend(name: str, model: str, **options: Any) -> ProviderBackend:
    """The backend for provider ``name`` (see :data:`PROVIDERS`) and ``model``.

    Raises:
        KeyError: No such provider; the message lists the known ones.
    """
    try:
        cls = PROVIDERS[name]
    except KeyError:
        known = ", ".join(sorted(PROVIDERS))
        raise KeyError(f"unknown provider {name!r}; known providers: {known}") from None
    return cls(model, **options)


def capability_table() -> str:
    """The providers' capabilities as a markdown table."""
    rows = ["| provider | streaming | tools | tool ids | parallel calls |", "|---|---|---|---|---|"]
    for name, cls in PROVIDERS.items():
        caps = cls.capabilities
        marks = [
            "yes" if value else "no"
            for value in (caps.streaming, caps.tools, caps.tool_ids, caps.parallel_calls)
        ]
        rows.append(f"| {name} | " + " | ".join(marks) + " |")
    return "\n".join(rows)
