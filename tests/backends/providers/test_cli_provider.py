"""`toolrelay run --provider`: the same engine driven by a provider's streaming API."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolrelay.cli import ExitCode, main

sys.path.insert(0, str(Path(__file__).parent))
from _oa_servers import LoopbackServer, ScriptedProvider, sse

TOOLS_MODULE = '''
SECRETS = {"alice": 42}


async def get_secret_number(name: str) -> int:
    """A person's secret number."""
    return SECRETS[name]


TOOLS = [get_secret_number]
'''


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


@pytest.fixture
def provider() -> Iterator[LoopbackServer]:
    with LoopbackServer(ScriptedProvider()) as server:
        yield server


def test_run_with_provider_executes_tools_and_prints_the_final_state(
    provider: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mytools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    call = {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_secret_number", "arguments": '{"name": "alice"}'},
            }
        ]
    }
    provider.app.script(
        sse([_chat_chunk(call), _chat_chunk({}, "tool_calls")], done=True),
        sse([_chat_chunk({"content": "Alice has 42."}), _chat_chunk({}, "stop")], done=True),
    )
    out, err = io.StringIO(), io.StringIO()
    code = main(
        [
            "run",
            "--provider",
            "openai",
            "--model",
            "gpt-test",
            "--base-url",
            provider.url + "/v1",
            "--tools",
            "mytools:TOOLS",
            "--message",
            "What is Alice's number?",
            "--json",
        ],
        stdout=out,
        stderr=err,
    )
    assert code == ExitCode.OK, err.getvalue()
    state = json.loads(out.getvalue())
    assert state["status"] == "completed"
    first, second = provider.app.requests
    assert first.headers["authorization"] == "Bearer sk-from-env"
    assert second.body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "42",
    }
    assert "sk-from-env" not in out.getvalue() + err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--message", "hi"],
        ["run", "http://127.0.0.1:9", "--provider", "openai", "--model", "m", "--message", "hi"],
        ["run", "--provider", "openai", "--message", "hi"],
    ],
)
def test_run_needs_exactly_one_of_url_and_provider_with_a_model(argv: list[str]) -> None:
    err = io.StringIO()
    assert main(argv, stdout=io.StringIO(), stderr=err) == ExitCode.USAGE
    assert "toolrelay run:" in err.getvalue()


def test_an_unknown_provider_is_a_usage_error() -> None:
    err = io.StringIO()
    argv = ["run", "--provider", "nope", "--model", "m", "--message", "hi"]
    assert main(argv, stdout=io.StringIO(), stderr=err) == ExitCode.USAGE
    assert "invalid choice" in err.getvalue()
