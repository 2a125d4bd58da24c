"""``toolrelay serve``: the AG-UI server (:mod:`toolrelay.server`) under uvicorn.

The model is, in this order: ``--provider NAME --model NAME`` (an LLM provider's
streaming API), ``--upstream URL`` (another AG-UI server, through
``AguiHttpBackend``), or by default the demo agent's scenarios, played in the process
(no API key, nothing else to start), whose tools then default to the demo tools.
The log is a SQLite file (``toolrelay.db``) unless ``--store`` says otherwise.

Ctrl-C (SIGINT) or SIGTERM stops it cleanly: no new run is accepted, running turns
get ``--drain`` seconds to finish, the rest end ``cancelled`` (reason ``closed``)
and every stream ends; the exit status is 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any, TextIO

from toolrelay.backends import AgentBackend, AguiHttpBackend, EventStream, ThreadKey
from toolrelay.backends.providers import PROVIDERS, provider_backend
from toolrelay.cli._run import ToolsUsageError, load_tools
from toolrelay.core import ToolRegistry
from toolrelay.demo import DEMO_TOOLS, plan_reply
from toolrelay.errors import StreamDroppedError
from toolrelay.protocol import RunAgentInput, decode_event
from toolrelay.store import MemoryStore, SQLiteStore, Store

__all__ = ("DemoModel", "open_store", "register", "serve")

#: The environment variable holding the bearer token when ``--token`` is not given.
TOKEN_ENV = "TOOLRELAY_TOKEN"
#: ``toolrelay.server.MAX_TOOL_ROUNDS_ENV``, written here so that building the command
#: line (every ``toolrelay`` command does) does not import the server.
MAX_TOOL_ROUNDS_ENV = "TOOLRELAY_MAX_TOOL_ROUNDS"


class DemoModel:
    """The demo agent's scenarios as an in-process model (no HTTP, no API key).

    It answers each run as :class:`~toolrelay.demo.DemoAgent` would (the scenario
    comes from ``forwardedProps.scenario`` or a word of the user's message); a
    scenario that drops its connection raises the error a dropped stream raises.
    """

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return None

    @contextlib.asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        items = plan_reply(run_input)

        async def events() -> EventStream:
            for item in items:
                if item is None:
                    raise StreamDroppedError("the demo agent dropped the connection")
                yield decode_event(item) if isinstance(item, bytes) else item

        stream = events()
        try:
            yield stream
        finally:
            await stream.aclose()  # type: ignore[attr-defined]


def open_store(spec: str) -> Store:
    """The store ``--store`` names: ``memory:``, ``sqlite:///PATH``, or a file path.

    Raises:
        ValueError: Another scheme.
    """
    if spec in ("memory", "memory:"):
        return MemoryStore()
    if spec.startswith("sqlite://"):
        path = spec.removeprefix("sqlite://")
        path = path[1:] if path.startswith("/") and not path.startswith("//") else path
        return SQLiteStore(path or "toolrelay.db")
    if "://" in spec:
        raise ValueError(
            f"--store: unknown store {spec!r} (use a file path, sqlite:///PATH or memory:)"
        )
    return SQLiteStore(spec)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``serve`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        "serve",
        help="serve an AG-UI agent whose tool loop runs in the server",
        description=(
            "Serve AG-UI over HTTP: each POSTed RunAgentInput starts a turn that runs in "
            "the server (tool rounds until the model answers), durable in a SQLite log "
            "that any client can catch up on. The model is a provider, another AG-UI "
            "server, or by default the demo agent."
        ),
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to bind (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="the port (default: 8000; 0: any free port)"
    )
    parser.add_argument(
        "--store",
        default="toolrelay.db",
        metavar="URL",
        help="the log: a SQLite file path, sqlite:///PATH, or memory: (default: toolrelay.db)",
    )
    parser.add_argument(
        "--provider", choices=sorted(PROVIDERS), default=None, help="an LLM provider as the model"
    )
    parser.add_argument("--model", default=None, metavar="NAME", help="the provider's model")
    parser.add_argument(
        "--base-url", default=None, metavar="URL", help="the provider's API base URL"
    )
    parser.add_argument(
        "--upstream", default=None, metavar="URL", help="another AG-UI server as the model"
    )
    parser.add_argument(
        "--tools",
        metavar="MODULE:ATTR",
        default=None,
        help="the server's tools (a ToolRegistry, a tool or a list of them); default: "
        "the demo tools with the demo model, none otherwise",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"the bearer token clients must send (default: ${TOKEN_ENV}; none: no "
        "authentication, for loopback use)",
    )
    parser.add_argument(
        "--max-tool-rounds",
        type=int,
        default=None,
        metavar="N",
        help=f"tool rounds per turn (default: ${MAX_TOOL_ROUNDS_ENV}, else 5)",
    )
    parser.add_argument(
        "--no-continuation",
        action="store_true",
        help="never call the model again after a tool round (stop reason tool_use)",
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on Ctrl-C, seconds running turns get to finish (default: 30)",
    )
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay serve`` until Ctrl-C; returns an exit code."""
    from toolrelay.cli import ExitCode
    from toolrelay.server import AguiServer, max_tool_rounds_from_env

    try:
        import uvicorn
    except ImportError:
        stderr.write("toolrelay serve: needs uvicorn: pip install 'toolrelay[server]'\n")
        return ExitCode.USAGE
    if args.provider is not None and not args.model:
        stderr.write(f"toolrelay serve: --provider {args.provider} needs --model NAME\n")
        return ExitCode.USAGE
    if args.provider is not None and args.upstream is not None:
        stderr.write("toolrelay serve: give --provider or --upstream, not both\n")
        return ExitCode.USAGE
    try:
        rounds = (
            args.max_tool_rounds if args.max_tool_rounds is not None else max_tool_rounds_from_env()
        )
        if rounds < 1:
            raise ValueError("--max-tool-rounds must be at least 1")
        store = open_store(args.store)
        demo = args.provider is None and args.upstream is None
        if args.tools:
            tools = load_tools(args.tools)
        else:
            tools = DEMO_TOOLS if demo else ToolRegistry()
    except (ValueError, ToolsUsageError) as exc:
        stderr.write(f"toolrelay serve: {exc}\n")
        return ExitCode.USAGE
    model: AgentBackend
    if args.provider is not None:
        model = provider_backend(args.provider, args.model, base_url=args.base_url)
        what = f"{args.provider} {args.model}"
    elif args.upstream is not None:
        model = AguiHttpBackend(args.upstream)
        what = f"the AG-UI server {args.upstream}"
    else:
        model = DemoModel()
        what = "the demo agent"
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        stderr.write(
            f"toolrelay serve: warning: listening on {args.host} with no token: anyone who "
            f"can reach it can run turns (set --token or ${TOKEN_ENV})\n"
        )
    server = AguiServer(
        model,
        tools=tools,
        store=store,
        token=token,
        max_tool_rounds=rounds,
        continuation=not args.no_continuation,
        drain_timeout=args.drain,
    )

    class _Server(uvicorn.Server):
        def _log_started_message(self, listeners: Any) -> None:  # says where, once
            for listener in listeners:
                host, port = listener.getsockname()[:2]
                stdout.write(
                    f"toolrelay serve: {what} on http://{host}:{port}/ "
                    f"(store: {store!r}, tools: {', '.join(tools.names) or 'none'}"
                    f"{', token required' if token else ''})\n"
                )
            stdout.flush()

    config = uvicorn.Config(
        server,
        host=args.host,
        port=args.port,
        lifespan="on",
        log_config=None,
        ws="none",
        timeout_graceful_shutdown=max(1, int(args.drain)),
    )
    try:
        _Server(config).run()
    except KeyboardInterrupt:
        pass  # uvicorn raises the signal again once it stopped cleanly
    stdout.write("toolrelay serve: stopped\n")
    stdout.flush()
    return ExitCode.OK
