"""Gemini's stream as published: one ``GenerateContentResponse`` per SSE event.

The builders serve the provider's own tests; ``ROW`` is its row of the engine harness
(``test_providers_engine.py``): the conversation scripted in this format, and what the
provider is sent back.
"""

from __future__ import annotations

from typing import Any

from _gc_servers import SSE, Failure, Recorded, gemini_sse
from _provider_table import (
    DAVE_ANSWER,
    QUESTION,
    Provider,
    dave_calls,
    dave_error,
)

from toolrelay import Turn
from toolrelay.backends.providers import GoogleBackend

MODEL = "gemini-2.5-flash"


def chunk(
    *parts: dict[str, Any],
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": MODEL,
        "responseId": "resp-1",
    }
    if usage is not None:
        out["usageMetadata"] = usage
    return out


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def call(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if args is not None:
        function["args"] = args
    return {"functionCall": function}


USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}


TEXT_BEFORE_CALLS = [
    chunk(text("Let me look up ")),
    chunk(text("both secret numbers.")),
    chunk(
        call("get_secret_number", {"name": "alice"}),
        call("get_secret_number", {"name": "bob"}),
        finish="STOP",
        usage=USAGE,
    ),
]


ERROR_MID_STREAM = [
    chunk(text("Let me think")),
    {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
]


TEXT_ONLY = [
    chunk(text("The sky is ")),
    chunk(text("blue because of Rayleigh scattering.")),
    chunk(text(""), finish="STOP", usage=USAGE),
]
ONE_CALL = [chunk(call("get_weather", {"city": "Paris"}), finish="STOP", usage=USAGE)]
PARALLEL_CALLS = [
    chunk(
        call("get_secret_number", {"name": "alice"}),
        call("get_secret_number", {"name": "bob"}),
        call("lookup_city", {"person": "alice"}),
        finish="STOP",
    )
]
SAME_CALL_TWICE_ACROSS_CHUNKS = [
    chunk(call("get_secret_number", {"name": "alice"})),
    chunk(call("get_secret_number", {"name": "alice"}), finish="STOP"),
]
ZERO_ARG_CALLS = [chunk(call("list_people"), call("list_people", {}), finish="STOP")]
NESTED_ARGS = [
    chunk(
        call("plan", {"steps": [{"n": 1, "tags": ["a", "b"]}], "note": "é ✓", "ok": True}),
        finish="STOP",
    )
]
FIXTURES = {
    "text_only": TEXT_ONLY,
    "one_call": ONE_CALL,
    "parallel_calls": PARALLEL_CALLS,
    "same_call_twice": SAME_CALL_TWICE_ACROSS_CHUNKS,
    "zero_arg_calls": ZERO_ARG_CALLS,
    "text_before_calls": TEXT_BEFORE_CALLS,
    "error_mid_stream": ERROR_MID_STREAM,
    "nested_args": NESTED_ARGS,
}


# --- the engine's scenarios in this wire format (test_providers_engine.py) ---


def google_auth(key: str | None) -> dict[str, str]:
    return {"x-goog-api-key": key} if key else {}


GOOGLE_HOPS = [
    TEXT_BEFORE_CALLS,
    [
        chunk(
            call("list_people"),
            call("get_secret_number", {"name": "dave"}),
            finish="STOP",
        )
    ],
    [
        chunk(text("Alice's number is 42 and Bob's is 7. ")),
        chunk(text("I know alice, bob and carol; nobody called Dave."), finish="STOP"),
    ],
]


def google_wire(first: Recorded, second: Recorded, third: Recorded, turn: Turn) -> None:
    def called(function: str, **args: Any) -> dict[str, Any]:
        return {"functionCall": {"name": function, "args": args}}

    def answered(name: str, response: dict[str, Any]) -> dict[str, Any]:
        return {"functionResponse": {"name": name, "response": response}}

    assert all(r.query == "alt=sse" for r in (first, second, third))
    question = first.body["contents"][0]
    hop_one = [
        {
            "role": "model",
            "parts": [
                {"text": "Let me look up both secret numbers."},
                called("get_secret_number", name="alice"),
                called("get_secret_number", name="bob"),
            ],
        },
        {
            "role": "user",
            "parts": [
                answered("get_secret_number", {"result": 42}),
                answered("get_secret_number", {"result": 7}),
            ],
        },
    ]
    assert second.body["contents"] == [question, *hop_one]
    assert third.body["contents"] == [
        question,
        *hop_one,
        {
            "role": "model",
            "parts": [called("list_people"), called("get_secret_number", name="dave")],
        },
        {
            "role": "user",
            "parts": [
                answered("list_people", {"result": ["alice", "bob", "carol"]}),
                answered("get_secret_number", {"error": dave_error(turn)}),
            ],
        },
    ]


ROW = Provider(
    id="google",
    env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    name="google",
    cls=GoogleBackend,
    model=MODEL,
    base_path="/v1beta",
    frame=gemini_sse,
    media_type=SSE,
    hops=GOOGLE_HOPS,
    texts=["Let me look up both secret numbers.", DAVE_ANSWER],
    calls=dave_calls([None] * 4),
    path=f"/v1beta/models/{MODEL}:streamGenerateContent",
    auth=google_auth,
    tool_names=lambda body: [d["name"] for d in body["tools"][0]["functionDeclarations"]],
    wire=google_wire,
    error_stream=ERROR_MID_STREAM,
    error_reason=("The model is overloaded.", "UNAVAILABLE"),
    failure=Failure(
        400,
        b'{"error": {"code": 400, "message": "API key not valid. Please pass a valid API'
        b' key.", "status": "INVALID_ARGUMENT"}}',
    ),
    failure_message="google error 400: API key not valid. Please pass a valid API key.",
    default_url=(
        "https://generativelanguage.googleapis.com/v1beta/models/"
        f"{MODEL}:streamGenerateContent?alt=sse"
    ),
    opening=("contents", [{"role": "user", "parts": [{"text": QUESTION}]}]),
    streams=FIXTURES,
)
