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
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-from-env")
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
            "--api-key-env",
            "LOCAL_LLM_KEY",
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


def test_the_providers_own_key_is_not_sent_to_another_host_and_the_cli_says_so(
    provider: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-openai-only")
    provider.app.script(sse([_chat_chunk({"content": "hi"}), _chat_chunk({}, "stop")], done=True))
    out, err = io.StringIO(), io.StringIO()
    argv = ["run", "--provider", "openai", "--model", "m", "--base-url", provider.url + "/v1"]
    code = main([*argv, "--message", "hi", "--json"], stdout=out, stderr=err)
    assert code == ExitCode.OK, err.getvalue()
    (request,) = provider.app.requests
    assert "authorization" not in request.headers
    assert "OPENAI_API_KEY is not sent to" in err.getvalue()
    assert "--api-key-env" in err.getvalue()
    assert "sk-for-openai-only" not in out.getvalue() + err.getvalue()


def test_a_missing_key_is_named_before_any_network_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    err = io.StringIO()
    argv = ["run", "--provider", "anthropic", "--model", "m", "--message", "hi"]
    assert main(argv, stdout=io.StringIO(), stderr=err) == ExitCode.USAGE
    assert "set ANTHROPIC_API_KEY" in err.getvalue()


def test_an_unset_api_key_env_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    err = io.StringIO()
    argv = ["run", "--provider", "openai", "--model", "m", "--message", "hi"]
    code = main([*argv, "--api-key-env", "NOT_SET_ANYWHERE"], stdout=io.StringIO(), stderr=err)
    assert code == ExitCode.USAGE
    assert "NOT_SET_ANYWHERE is not set" in err.getvalue()


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
