"""The AG-UI server: a plain ASGI application around an engine on a store.

Theory of operation
-------------------
The server owns one :class:`~toolrelay.Engine` whose backend is the model
(wrapped in :class:`~toolrelay.server._rounds.RoundLimit`) and whose store is the
server's log (wrapped in :class:`~toolrelay.server._watch.WatchedStore`). A ``POST``
of a ``RunAgentInput`` starts a turn in the engine (``_runs``); the response is the log
of that turn read as AG-UI events (:class:`~toolrelay.server._feed.LogFeed`) from the
sequence number the thread had when the request came, following new commits until
the AG-UI run ends (``_streams``); every event carries the sequence number of the
record it comes from as its SSE ``id`` (``_sse``), where a client catches up from
(``_catch_up``). Several processes may share a store (``_shared``).

This module is the application itself: its lifecycle (the engine, the recovery of
the turns a crash left live, the drain on shutdown) and its routes (under the mount
point):

==========================================  ==========================================
``POST /``                                  run: a ``RunAgentInput``; answers SSE
``GET /threads/{thread}/events?after=N``    catch-up: the thread's events after N
                                            (or ``Last-Event-ID``), then the live
                                            tail until no run is open; 204 when
                                            there is nothing to send
``POST /threads/{thread}/cancel``           cancel the thread's live turn
``GET /metrics``                            Prometheus metrics
``GET /healthz``                            200 (no authentication)
``GET /``                                   what the server is (JSON)
``GET /inspect``, ``GET /threads``,         the inspector page (no authentication for
``GET /threads/{thread}/calls``             its files, which hold no data) and the
                                            JSON it reads (see ``_inspector``)
==========================================  ==========================================
"""

from __future__ import annotations

import logging
from typing import Any, Self

import anyio

from toolrelay._core import ThreadKey
from toolrelay._runtime import Engine, Turn
from toolrelay._version import __version__
from toolrelay.backends._base import ClosedOnExit
from toolrelay.server._asgi import (
    Disconnected,
    HTTPError,
    Receive,
    Scope,
    Send,
    method_not_allowed,
    respond,
    respond_json,
)
from toolrelay.server._auth import Request
from toolrelay.server._inspector import call_outcomes, static_file, static_headers, thread_list
from toolrelay.server._rounds import RoundLimit
from toolrelay.server._runs import Runs

__all__ = ("AguiServer",)

logger = logging.getLogger("toolrelay.server")


class AguiServer(Runs, ClosedOnExit):
    """The AG-UI server as an ASGI application (see the module docstring).

    Enter it (``async with server:``) or let the ASGI server's lifespan do it; the
    engine, its store and the recovery of turns a crash left live start then.

    Args:
        backend: The model: a provider backend, ``AguiHttpBackend`` (another AG-UI
            server), a ``ScriptedAgent``...
        tools: The server's tools, executed in the server.
        store: The log (default: a :class:`~toolrelay.store.MemoryStore`).
        authenticator: Who a request comes from (default: everyone is
            ``anonymous``); see :class:`BearerTokens`.
        token: Shorthand for ``authenticator=BearerTokens.single(token)``.
        max_tool_rounds: Tool rounds a turn may make before the server ends it
            ``completed`` with stop reason ``max_tool_rounds`` (default:
            ``TOOLRELAY_MAX_TOOL_ROUNDS``, else 5).
        continuation: ``False``: never call the model again after a tool round (the
            turn completes with stop reason ``tool_use``).
        tool_timeout: Seconds a server tool may run unless its spec says otherwise.
        client_tool_timeout: Seconds the server waits for a client tool's result;
            then the model gets an error result.
        max_body_bytes: The largest request body accepted (413 beyond).
        body_timeout: Seconds a request's body may take to arrive (408 beyond).
        heartbeat: Seconds between SSE comments on an idle stream.
        drain_timeout: On shutdown, seconds to let running turns finish before the
            engine closes (turns waiting for a client do not hold it).
        max_live_turns: Turns live at once, across all threads and principals; a run
            that would start one more is refused with 429 (``None``: no bound).
        max_streams: SSE responses open at once; one more is refused with 429
            (``None``: no bound).
        live_text: Stream the model's text as it comes (``TEXT_MESSAGE_START`` and
            ``TEXT_MESSAGE_CONTENT`` deltas, before the message is in the log); the
            message's ``TEXT_MESSAGE_END`` comes with its record. ``False``: every
            event comes from a committed record (text per message).
        engine_options: More keyword arguments for the :class:`Engine` (say
            ``{"max_repeated_calls": 3}`` to fail a turn whose model repeats a call,
            before ``max_tool_rounds`` completes it).
        shared: Share the store's turns with other server processes (see "Several
            processes" in ``docs/server.md``): each turn runs under a claim of its
            thread (lease, heartbeat, fencing token), a thread held elsewhere is
            refused with 409, turns whose worker died are taken over, and every
            process's commits reach this one's streams. ``None`` (default): shared
            when the store offers claims and commit notifications
            (:class:`~toolrelay.store.PostgresStore`).
        worker: This process's name in its claims (default: ``host:pid``).
        lease: Seconds a claim lasts unless renewed (renewed every third of it);
            a dead worker's turns move on this long after its last renewal.
        takeover_interval: Seconds between two looks for turns whose worker died
            (default: a third of ``lease``).

    Raises:
        ValueError: A bound is not positive, ``token`` and ``authenticator`` are
            both given, or ``shared=True`` with a store that offers no claims.
    """

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("the server was already started")
        self._entered = True
        model = RoundLimit(
            self.backend,
            max_tool_rounds=self.max_tool_rounds,
            continuation=self.continuation,
            on_stop=self._stopped,
        )
        options: dict[str, Any] = {
            "tools": self.tools,
            "max_depth": self.max_tool_rounds + 1,
            "tool_timeout": self.tool_timeout,
            # Idle threads leave memory (they are read back from the store when used).
            "max_threads": 10_000,
            # The loop's bound is max_tool_rounds, which completes the turn (004); the
            # engine's no-progress breaker (which fails it) is the embedder's choice.
            "max_repeated_calls": None,
            **self._engine_options,
        }
        engine = Engine(model, store=self.store, recover=False, **options)
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            await engine.__aenter__()  # opens the store
        except BaseException as exc:
            group.cancel_scope.cancel()
            await group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._engine = engine
        if self.live_text:
            group.start_soon(self._route_deltas, engine.subscribe(events=True))
        try:
            live = await self.store.threads(live=True)
            if self._fenced is None:
                self.metrics.live_at_start([(info.key, info.live_turn or "") for info in live])
                # The turns a crash left live resume (promise 9); calls whose result is
                # stored never run again (promise 10).
                await engine.recover()
            else:
                # Shared: a live turn is resumed by whichever worker claims it once
                # its worker's lease ran out (maybe this one, in a moment).
                if self._notifying is not None:
                    group.start_soon(self._listen, self._notifying)
                group.start_soon(self._take_over, self._fenced)
        except BaseException as exc:
            await engine.__aexit__(type(exc), exc, exc.__traceback__)
            await self.store.close_store()
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
            raise
        if self._fenced is None:
            logger.info("toolrelay server started (%d live turn(s) resumed)", len(live))
        else:
            logger.info(
                "toolrelay server %s started, sharing its store (%d live turn(s) in it)",
                self.worker,
                len(live),
            )
        return self

    async def drain(self) -> None:
        """Stop serving turns, still answering requests: new runs are refused (503),
        running turns get ``drain_timeout`` seconds to finish, what is still live then
        ends ``cancelled`` (reason ``closed``), and every stream sends the rest of its
        run and ends. The store stays open until :meth:`aclose`, which drains first.
        Idempotent.

        Call it as soon as the process is asked to stop, before the ASGI server waits
        for the open requests: uvicorn waits for them before the lifespan's shutdown,
        and a stream ends only when its run does, so a drain left to the lifespan
        starts only after the ASGI server gave up on the streams (``toolrelay serve``
        drains on SIGINT and SIGTERM, then stops uvicorn).

        Called again while the running turns are given their time, it ends that time
        at once (``toolrelay serve`` does on a second Ctrl-C), and returns when the
        drain is over.
        """
        under_way = self._draining
        if under_way is not None:  # its patience is over
            patience, over = under_way
            patience.cancel()
            await over.wait()
        if self._drained.is_set():
            return
        self._stopping.set()
        engine = self._engine
        if engine is not None:
            self._draining = patience, over = anyio.CancelScope(), anyio.Event()
            try:
                with patience, anyio.move_on_after(self.drain_timeout):
                    for turn in self._running_turns(engine):
                        await turn.wait_finished()
                # Every live turn ends (closed) and its end is written; the store
                # stays open (WatchedStore) for the streams to read it.
                await engine.aclose()
            finally:
                self._draining = None
                over.set()
        self._drained.set()
        self.store.wake_all()

    async def aclose(self) -> None:
        """Stop: drain (:meth:`drain`) unless that was done, then close the store and
        end what the server runs (a stream still open reads no more). Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.drain()
        engine = self._engine
        if engine is not None:
            # Shared: let this worker's holds be released before the store closes
            # (a claim left behind would keep its thread from other workers until
            # its lease ran out).
            with anyio.move_on_after(5):
                for holder in list(self._holders.values()):
                    await holder.released.wait()
                for leaving in list(self._leaving.values()):
                    await leaving.wait()
            await engine.__aexit__(None, None, None)
            await self.store.close_store()
        group, self._group = self._group, None
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    def _running_turns(self, engine: Engine) -> list[Turn]:
        """The live turns that are not only waiting for a client's results."""
        waiting = {key for key, calls in self._client_waits.items() if calls}
        turns = [engine.turn(key) for key in engine.threads if key not in waiting]
        return [turn for turn in turns if turn is not None and not turn.finished]

    # -- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        # websocket: not served (the ASGI server closes the connection)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        try:
            await self.__aenter__()
        except Exception as exc:
            logger.exception("toolrelay server failed to start")
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.startup.complete"})
        try:
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        finally:
            # Not under a shielded scope of its own: the engine's task group, entered
            # in this task, must be left from the scope it was entered in.
            await self.aclose()
        await send({"type": "lifespan.shutdown.complete"})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        path = path or "/"
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        client = scope.get("client")
        request = Request(method, path, headers, tuple(client) if client else None)
        try:
            if path == "/healthz" and method == "GET":
                await respond_json(
                    send, 200, {"status": "stopping" if self._stopping.is_set() else "ok"}
                )
                return
            if path == "/inspect" or path.startswith("/inspect/"):
                await self._inspect_file(method, path, send)
                return
            principal = await self._authenticate(request)
            if path == "/":
                if method == "POST":
                    await self._run(request, principal, scope, receive, send)
                elif method == "GET":
                    await respond_json(
                        send,
                        200,
                        {
                            "server": "toolrelay",
                            "version": __version__,
                            "protocol": "ag-ui",
                            "maxToolRounds": self.max_tool_rounds,
                            "continuation": self.continuation,
                            "tools": list(self.tools.names),
                        },
                    )
                else:
                    raise method_not_allowed("GET, POST")
            elif path == "/metrics":
                if method != "GET":
                    raise method_not_allowed("GET")
                if not self.metrics.enabled:  # pragma: no cover - the server extra is missing
                    raise HTTPError(501, "no_metrics", "install prometheus-client for /metrics")
                body, content_type = self.metrics.render()
                await respond(send, 200, body, content_type)
            elif path.startswith("/threads/") and path.endswith("/events"):
                if method != "GET":
                    raise method_not_allowed("GET")
                thread = path[len("/threads/") : -len("/events")]
                await self._catch_up(request, principal, thread, scope, receive, send)
            elif path == "/threads":
                if method != "GET":
                    raise method_not_allowed("GET")
                await respond_json(
                    send, 200, await self._store_call(thread_list(self.store, principal))
                )
            elif path.startswith("/threads/") and path.endswith("/calls"):
                if method != "GET":
                    raise method_not_allowed("GET")
                await self._calls(principal, path[len("/threads/") : -len("/calls")], send)
            elif path.startswith("/threads/") and path.endswith("/cancel"):
                if method != "POST":
                    raise method_not_allowed("POST")
                thread = path[len("/threads/") : -len("/cancel")]
                await self._cancel(principal, thread, send)
            else:
                raise HTTPError(404, "not_found", f"no route {method} {path}")
        except HTTPError as exc:
            await respond_json(
                send,
                exc.status,
                {"error": {"code": exc.code, "message": exc.message}},
                exc.headers,
            )
        except Disconnected:
            return

    async def _authenticate(self, request: Request) -> str:
        principal = await self.authenticator.authenticate(request)
        if not principal:
            raise HTTPError(
                401,
                "unauthorized",
                "a valid bearer token is required (Authorization: Bearer <token>)",
                [(b"www-authenticate", b'Bearer realm="toolrelay"')],
            )
        return principal

    # -- the inspector ------------------------------------------------------------------

    async def _inspect_file(self, method: str, path: str, send: Send) -> None:
        if method != "GET":
            raise method_not_allowed("GET")
        if path == "/inspect":  # the page's files are relative to /inspect/
            await respond(send, 308, b"", None, [(b"location", b"inspect/")])
            return
        name = path[len("/inspect/") :] or "index.html"
        body = static_file(name)
        if body is None:
            raise HTTPError(404, "not_found", f"no inspector file {name!r}")
        await respond(send, 200, body, None, static_headers(name))

    async def _calls(self, principal: str, thread: str, send: Send) -> None:
        key = ThreadKey(thread)
        if not await self._check_owner(key, principal):
            raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
        info = await self._thread_info(key)
        last_seq = info.last_seq if info is not None else 0
        await respond_json(
            send, 200, await self._store_call(call_outcomes(self.store, key, last_seq))
        )

    # -- POST /threads/{thread}/cancel ------------------------------------------------------

    async def _cancel(self, principal: str, thread: str, send: Send) -> None:
        key = ThreadKey(thread)  # the ASGI server decoded the path
        if not await self._check_owner(key, principal):
            raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
        cancelled = self.engine.cancel(key, "cancelled by the client")
        status = 200
        if not cancelled and self._fenced is not None and key not in self._holders:
            info = await self._thread_info(key)
            if info is not None and info.live_turn is not None:
                if self._inbox is None:
                    raise self._held_elsewhere(key)
                # Another process runs the turn: the cancel goes to it.
                status, cancelled = await self._hand_over_cancel(key, info.live_turn)
        answer: dict[str, object] = {"threadId": key.thread_id, "cancelled": cancelled}
        if status == 202:
            answer["handedOver"] = True  # the turn ends where it runs, when it can
        await respond_json(send, status, answer)
