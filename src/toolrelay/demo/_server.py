"""Serving the demo agent over real loopback HTTP with uvicorn.

uvicorn is asyncio-only. Under asyncio, :func:`serve_demo` runs ``uvicorn.Server`` as a
task of the caller's event loop; under any other async library (trio) it runs the server
in a thread with an asyncio loop of its own (:class:`DemoServer`). Either way it binds
127.0.0.1 on an ephemeral port, yields the agent's URL once the socket listens, and
stops the server when the context ends.

The server never installs signal handlers (Ctrl-C stays the caller's), configures no
logging, and hides the one error uvicorn logs on purpose for the ``broken`` scenario
("ASGI callable returned without completing response"), so the demo prints cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from types import TracebackType
from typing import Any, Self

import anyio

from toolrelay.demo._agent import DemoAgent

try:  # imported here, not when serving: a first import blocks the event loop
    import uvicorn
except ImportError:  # pragma: no cover - the demo extra is missing
    uvicorn = None  # type: ignore[assignment]

__all__ = ("DemoServer", "serve_demo")

_START_TIMEOUT = 10.0  # seconds for the socket to listen
_STOP_TIMEOUT = 5.0
_UVICORN_LOGGER = "uvicorn.error"


def _make_server(
    app: DemoAgent, host: str, port: int, on_started: Callable[[], None]
) -> uvicorn.Server:
    if uvicorn is None:  # pragma: no cover - the demo extra is missing
        raise RuntimeError("the demo agent server needs uvicorn: pip install 'toolrelay[demo]'")

    class _Server(uvicorn.Server):
        """A uvicorn server that leaves signal handling to its caller and says when it
        listens."""

        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                on_started()

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        log_config=None,
        access_log=False,
        http="h11",
        ws="none",
        loop="asyncio",
        timeout_graceful_shutdown=1,
    )
    server: uvicorn.Server = _Server(config)
    return server


def _bound_url(server: uvicorn.Server, path: str) -> str:
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    return f"http://{host}:{port}{path}"


class _HideIntentionalDrops(logging.Filter):
    """Drops uvicorn's error record for a stream the demo agent cut on purpose."""

    def __init__(self, app: DemoAgent) -> None:
        super().__init__()
        self._app = app
        self._hidden = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("ASGI callable returned without completing"):
            if self._hidden < self._app.drops:
                self._hidden += 1
                return False
        return True


@contextlib.contextmanager
def _quiet_drops(app: DemoAgent) -> Iterator[None]:
    logger = logging.getLogger(_UVICORN_LOGGER)
    hide = _HideIntentionalDrops(app)
    logger.addFilter(hide)
    try:
        yield
    finally:
        logger.removeFilter(hide)


class DemoServer:
    """The demo agent served by uvicorn in a thread with its own asyncio loop.

    Synchronous, so a test session or a program on any async library can share one::

        with DemoServer() as server:
            backend = AguiHttpBackend(server.url)

    Args:
        app: The agent to serve (a new :class:`DemoAgent` by default).
        host: The address to bind; keep it on loopback.
        port: The port; 0 picks a free one.

    Attributes:
        app: The agent being served (read its ``requests`` and ``disconnects``).
        url: The agent's URL, once started.
    """

    def __init__(self, app: DemoAgent | None = None, *, host: str = "127.0.0.1", port: int = 0):
        self.app = app if app is not None else DemoAgent()
        self.url = ""
        self._listening = threading.Event()
        self._server = _make_server(self.app, host, port, self._listening.set)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._quiet = _quiet_drops(self.app)

    def start(self) -> str:
        """Start serving; returns the URL once the socket listens.

        Raises:
            RuntimeError: The server did not start within 10 seconds, or failed.
        """
        if self._thread is not None:
            raise RuntimeError("the demo server was already started")
        self._quiet.__enter__()
        self._thread = threading.Thread(target=self._run, name="toolrelay-demo", daemon=True)
        self._thread.start()
        if not self._listening.wait(_START_TIMEOUT) or not self._server.started:
            self.stop()
            raise RuntimeError(f"the demo server did not start: {self._error!r}")
        self.url = _bound_url(self._server, self.app.path)
        return self.url

    def _run(self) -> None:
        try:
            self._server.run()
        except BaseException as exc:  # SystemExit from a failed bind, among others
            self._error = exc
        finally:
            self._listening.set()  # wake start() if the server never listened

    def stop(self) -> None:
        """Stop serving and wait for the thread (at most 5 seconds). Idempotent."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(_STOP_TIMEOUT)
        self._quiet.__exit__(None, None, None)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _on_asyncio() -> bool:
    """Whether the caller runs on asyncio (uvicorn's own loop library)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextlib.asynccontextmanager
async def serve_demo(
    app: DemoAgent | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve the demo agent on loopback for the duration of the context; yields its URL.

    Args:
        app: The agent to serve (a new :class:`DemoAgent` by default); keep a reference
            to read what it saw.
        host: The address to bind; keep it on loopback.
        port: The port; 0 picks a free one.

    Raises:
        RuntimeError: The server could not start (uvicorn missing, port taken).
    """
    app = app if app is not None else DemoAgent()
    if not _on_asyncio():
        server = DemoServer(app, host=host, port=port)
        url = await anyio.to_thread.run_sync(server.start)
        try:
            yield url
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server.stop)
        return

    listening = anyio.Event()
    uvicorn_server = _make_server(app, host, port, listening.set)
    failure: list[BaseException] = []

    stopped = anyio.Event()

    async def run_server() -> None:
        try:
            await uvicorn_server.serve()
        except (SystemExit, OSError) as exc:
            failure.append(exc)
        finally:
            listening.set()
            stopped.set()

    with _quiet_drops(app):
        async with anyio.create_task_group() as group:
            group.start_soon(run_server, name="toolrelay demo server")
            with anyio.fail_after(_START_TIMEOUT):
                await listening.wait()
            if failure or not uvicorn_server.started:
                raise RuntimeError(f"the demo server did not start: {failure[0]!r}")
            try:
                yield _bound_url(uvicorn_server, app.path)
            finally:
                uvicorn_server.should_exit = True
                # Also when the body failed (the group would cancel the server at once):
                # the server closes its sockets before the context ends.
                with anyio.CancelScope(shield=True), anyio.move_on_after(_START_TIMEOUT):
                    await stopped.wait()
