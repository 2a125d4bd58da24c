"""``toolrelay serve``: the AG-UI server (:mod:`toolrelay.server`) under uvicorn.

The model is, in this order: ``--provider NAME --model NAME`` (an LLM provider's
streaming API), ``--upstream URL`` (another AG-UI server, through
``AguiHttpBackend``), or by default the demo agent's scenarios, played in the process
(no API key, nothing else to start), whose tools then default to the demo tools.
The log is a SQLite file (``toolrelay.db``) unless ``--store`` says otherwise
(``postgresql://...``: a PostgreSQL store that several server processes share).

``--workers N`` (PostgreSQL only) runs N server processes on one port: this process
binds the listening socket and supervises N children that accept on it (each an
``AguiServer`` sharing the store: claims, takeover, commits heard across processes).
A worker that dies is started again, and its turns move to a live worker once its
lease ran out. A SQLite file serves one process: ``--workers`` above 1 is refused.

Ctrl-C (SIGINT) or SIGTERM stops it cleanly: no new run is accepted, running turns
get ``--drain`` seconds to finish, the rest end ``cancelled`` (reason ``closed``)
and every stream ends; the exit status is 0. A second Ctrl-C ends the running turns
at once (``cancelled``, reason ``closed``, their streams ended as in a drain). With
``--workers``, the supervisor passes SIGTERM to each worker and waits for them; a
second signal to the supervisor passes SIGINT on, which cuts their drain short.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, TextIO

import anyio

from toolrelay._core import ThreadKey, ToolRegistry
from toolrelay._errors import StreamDroppedError
from toolrelay.backends import AguiHttpBackend, EventStream
from toolrelay.backends._base import AgentBackend
from toolrelay.backends.providers import PROVIDERS, provider_backend
from toolrelay.cli._exit import ExitCode
from toolrelay.cli._tools import ToolsUsageError, load_tools
from toolrelay.demo import DEMO_TOOLS, choose_scenario
from toolrelay.demo._scenarios import plan, reply_delay
from toolrelay.protocol import RunAgentInput, decode_event
from toolrelay.store import ClaimingStore, MemoryStore, NotifyingStore, SQLiteStore, Store

__all__ = ("DemoModel", "open_store", "register", "serve")

#: The environment variable holding the bearer token when ``--token`` is not given.
TOKEN_ENV = "TOOLRELAY_TOKEN"
#: ``toolrelay.server.MAX_TOOL_ROUNDS_ENV``, written here so that building the command
#: line (every ``toolrelay`` command does) does not import the server.
MAX_TOOL_ROUNDS_ENV = "TOOLRELAY_MAX_TOOL_ROUNDS"
#: Seconds uvicorn gives the open requests once the drain is over (the streams end
#: with it) before it cancels them.
_STREAMS_GRACE = 5


class DemoModel:
    """The demo agent's scenarios as an in-process model (no HTTP, no API key).

    It answers each run as :class:`~toolrelay.demo.DemoAgent` would (the scenario
    comes from ``forwardedProps.scenario`` or a word of the user's message), at its
    pace: the ``slow`` scenario streams slowly (something to cancel, or to drain),
    ``forwardedProps.delay`` sets the seconds between two events (at most five; a
    request's ``forwardedProps`` reach it). A scenario that drops its connection raises
    the error a dropped stream raises.
    """

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return None

    @contextlib.asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        scenario = choose_scenario(run_input)
        items = plan(run_input, scenario)
        delay = reply_delay(run_input, scenario)

        async def events() -> EventStream:
            for index, item in enumerate(items):
                if delay and index:
                    await anyio.sleep(delay)
                if item is None:
                    raise StreamDroppedError("the demo agent dropped the connection")
                yield decode_event(item) if isinstance(item, bytes) else item

        stream = events()
        try:
            yield stream
        finally:
            await stream.aclose()  # type: ignore[attr-defined]


def open_store(spec: str, *, pool_size: int | None = None) -> Store:
    """The store ``--store`` names: ``memory:``, ``sqlite:///PATH``, a file path, or
    ``postgresql://[user[:password]@]host[:port]/db`` (a libpq URI; ``postgres://``
    too), with at most ``pool_size`` connections (PostgreSQL's default when ``None``).
    The store's ``repr`` never shows a password.

    Raises:
        ValueError: Another scheme, a PostgreSQL URI that does not parse, or psycopg
            missing (the ``postgres`` extra).
    """
    if spec.startswith(("postgresql://", "postgres://")):
        try:
            from toolrelay.store._postgres import PostgresStore
        except ImportError as exc:
            raise ValueError(
                f"--store postgresql://...: needs psycopg ({exc}): "
                "pip install 'toolrelay[postgres]'"
            ) from None
        try:
            if pool_size is None:
                return PostgresStore(spec)
            return PostgresStore(spec, pool_size=pool_size)
        except ValueError:
            # The parser's message may quote the URI, password and all.
            raise ValueError("--store: not a valid PostgreSQL URI") from None
    if spec in ("memory", "memory:"):
        return MemoryStore()
    if spec.startswith("sqlite://"):
        path = spec.removeprefix("sqlite://")
        path = path[1:] if path.startswith("/") and not path.startswith("//") else path
        return SQLiteStore(path or "toolrelay.db")
    if "://" in spec:
        raise ValueError(
            f"--store: unknown store {spec.split('://', 1)[0]}:// (use a file path, "
            "sqlite:///PATH, postgresql://... or memory:)"
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
        help="the log: a SQLite file path, sqlite:///PATH, postgresql://USER@HOST/DB "
        "(shared by several processes) or memory: (default: toolrelay.db)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="server processes sharing the port (PostgreSQL store only; default: 1)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="with a PostgreSQL store: how long a process's hold on a turn lasts unless "
        "renewed; a dead process's turns move on after it (default: 15)",
    )
    parser.add_argument(
        "--pool-size",
        type=int,
        default=None,
        metavar="N",
        help="with a PostgreSQL store: the most connections each process uses (default: 8)",
    )
    # A worker of --workers: the listening socket's descriptor and the supervisor's pid.
    parser.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--supervisor", type=int, default=None, help=argparse.SUPPRESS)
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
        help="on Ctrl-C, seconds running turns get to finish; a second Ctrl-C ends them "
        "at once (default: 30)",
    )
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay serve`` until Ctrl-C; returns an exit code."""
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
        if args.workers < 1:
            raise ValueError("--workers must be at least 1")
        if not 0 < args.lease < 1e9:
            raise ValueError("--lease must be a positive number of seconds")
        if args.pool_size is not None:
            if args.pool_size < 1:
                raise ValueError("--pool-size must be at least 1")
            if not args.store.startswith(("postgresql://", "postgres://")):
                raise ValueError(
                    "--pool-size sizes a PostgreSQL store's pool: give --store postgresql://..."
                )
        store = open_store(args.store, pool_size=args.pool_size)
        shared = isinstance(store, ClaimingStore) and isinstance(store, NotifyingStore)
        if args.workers > 1 and not shared:
            raise ValueError(
                f"--workers {args.workers} needs a store the processes share: give "
                "--store postgresql://USER@HOST/DB (a SQLite file or memory: serves one "
                "process)"
            )
        if args.workers > 1 and not hasattr(os, "fork"):
            raise ValueError("--workers above 1 needs a POSIX system")
        demo = args.provider is None and args.upstream is None
        if args.tools:
            tools = load_tools(args.tools)
        else:
            tools = DEMO_TOOLS if demo else ToolRegistry()
    except (ValueError, ToolsUsageError) as exc:
        stderr.write(f"toolrelay serve: {exc}\n")
        return ExitCode.USAGE
    if args.workers > 1:
        return _supervise(args, stdout, stderr)
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
        lease=args.lease,
    )
    if args.supervisor is not None:
        _leave_with(args.supervisor)

    class _Server(uvicorn.Server):
        def _log_started_message(self, listeners: Any) -> None:  # says where, once
            for listener in listeners:
                host, port = listener.getsockname()[:2]
                stdout.write(
                    f"toolrelay serve: {what} on http://{host}:{port}/ "
                    f"(store: {store!r}, tools: {', '.join(tools.names) or 'none'}"
                    f"{', token required' if token else ''})\n"
                    f"toolrelay serve: inspector page at http://{host}:{port}/inspect/\n"
                )
            stdout.flush()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if sockets is not None and self.started:  # a worker: the supervisor said where
                stdout.write(f"toolrelay serve: worker {server.worker} ready\n")
                stdout.flush()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # uvicorn waits for the open requests before the lifespan's shutdown, and a
            # stream ends with its run: the drain comes first, still listening (a new
            # run is answered 503, /healthz "stopping"), then uvicorn stops.
            async with anyio.create_task_group() as group:
                group.start_soon(self._impatient)
                await server.drain()
                group.cancel_scope.cancel()
            # The second Ctrl-C has done its work: what is left (the streams' last
            # events, the store's close in the lifespan's shutdown) runs as after one.
            self.force_exit = False
            await super().shutdown(sockets)

        async def _impatient(self) -> None:
            # A second Ctrl-C (uvicorn's force_exit): the running turns' time is over.
            while not self.force_exit:  # noqa: ASYNC110 - uvicorn sets a plain flag
                await anyio.sleep(0.1)
            await server.drain()

    config = uvicorn.Config(
        server,
        host=args.host,
        port=args.port,
        lifespan="on",
        log_config=None,
        ws="none",
        # The streams end with the drain: this only bounds a client that reads its
        # stream's last events too slowly.
        timeout_graceful_shutdown=_STREAMS_GRACE,
    )
    sockets = None if args.fd is None else [socket.socket(fileno=args.fd)]
    try:
        with _sigterm_as_interrupt():
            _Server(config).run(sockets=sockets)
    except KeyboardInterrupt:
        pass  # uvicorn raises the signal again once it stopped cleanly
    if args.fd is None:
        stdout.write("toolrelay serve: stopped\n")
        stdout.flush()
    return ExitCode.OK


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """uvicorn raises the signal that stopped it again once it stopped cleanly, with
    the handler it found: SIGTERM's default one would end the process (status 143)
    before it says it stopped. Here SIGTERM raises ``KeyboardInterrupt``, as SIGINT
    does (the main thread only: no other can set a handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _leave_with(supervisor: int) -> None:
    """A worker stops (SIGTERM to itself) when its supervisor is gone (killed with
    SIGKILL, say): no worker outlives the command that started it."""

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="toolrelay supervisor watch", daemon=True).start()


def _worker_argv(args: argparse.Namespace, fd: int) -> list[str]:
    """The command line of one worker of ``--workers`` (the token goes by environment,
    never on a command line others can read)."""
    argv = [sys.executable, "-m", "toolrelay", "serve", "--store", args.store]
    options = {
        "--provider": args.provider,
        "--model": args.model,
        "--base-url": args.base_url,
        "--upstream": args.upstream,
        "--tools": args.tools,
        "--max-tool-rounds": args.max_tool_rounds,
        "--pool-size": args.pool_size,
    }
    for flag, value in options.items():
        if value is not None:
            argv += [flag, str(value)]
    if args.no_continuation:
        argv.append("--no-continuation")
    argv += ["--host", args.host, "--drain", repr(args.drain), "--lease", repr(args.lease)]
    argv += ["--fd", str(fd), "--supervisor", str(os.getpid())]
    return argv


def _supervise(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``--workers N``: bind the port, run N workers on it, start again one that dies,
    and on SIGINT/SIGTERM pass SIGTERM to each and wait for them to drain."""
    try:
        listener = socket.create_server(
            (args.host, args.port),
            family=socket.AF_INET6 if ":" in args.host else socket.AF_INET,
            backlog=2048,
        )
    except OSError as exc:
        stderr.write(f"toolrelay serve: cannot listen on {args.host}:{args.port}: {exc}\n")
        return ExitCode.USAGE
    listener.set_inheritable(True)
    env = dict(os.environ)
    if args.token is not None:
        env[TOKEN_ENV] = args.token
    argv = _worker_argv(args, listener.fileno())
    stopping = threading.Event()
    workers: list[tuple[subprocess.Popen[bytes], float]] = []

    def stop(signum: int, frame: object) -> None:
        if stopping.is_set():  # a second signal: the workers' drain is cut short
            for child, _ in workers:
                if child.poll() is None:
                    child.send_signal(signal.SIGINT)
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}

    def start() -> tuple[subprocess.Popen[bytes], float]:
        # A process group of its own: Ctrl-C reaches the supervisor, which passes
        # SIGTERM on once, and SIGINT on a second signal (that cuts the drain short).
        child = subprocess.Popen(argv, env=env, pass_fds=(listener.fileno(),), process_group=0)
        return child, time.monotonic()

    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    stdout.write(
        f"toolrelay serve: {args.workers} workers on http://{shown}:{port}/ "
        f"(store: {open_store(args.store)!r}, supervisor pid {os.getpid()})\n"
    )
    stdout.flush()
    status = ExitCode.OK
    workers += [start() for _ in range(args.workers)]
    try:
        while not stopping.is_set():
            for index, (child, since) in enumerate(workers):
                code = child.poll()
                if code is None:
                    continue
                # Exited by itself with an error soon after its start (a database that
                # cannot be reached, say): starting it again would fail the same way.
                # Killed by a signal (negative status): started again.
                if code > 0 and time.monotonic() - since < 5:
                    stderr.write(
                        f"toolrelay serve: worker {child.pid} failed to start (status {code})\n"
                    )
                    status = ExitCode.FAILED
                    stopping.set()
                    break
                stderr.write(
                    f"toolrelay serve: worker {child.pid} exited (status {code}): starting "
                    "another; its turns move on once its lease ran out\n"
                )
                workers[index] = start()
            stopping.wait(0.2)
    finally:
        for child, _ in workers:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + args.drain + 15
        for child, _ in workers:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        listener.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    stdout.write("toolrelay serve: stopped\n")
    stdout.flush()
    return status
