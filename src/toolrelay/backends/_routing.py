"""One engine, several agent servers: a backend per server, chosen by ``ThreadKey.server``.

The reference client keeps one client per server and picks it by the thread's server;
here that is a backend like any other, so the engine keeps its one seam::

    routing = RoutingBackend({"alpha": AguiHttpBackend(url_a), "beta": AguiHttpBackend(url_b)})
    async with routing, Engine(routing, tools=registry) as engine:
        await engine.run_turn(ThreadKey("t-1", server="alpha"), "hello")

What the engine asks of a backend beyond its two methods, and what routing does:

- ``limits``: an engine has one set of limits and hands it to every run (see
  :class:`~toolrelay.backends.RunSettings`), whichever route serves it. An engine given
  no limits adopts the routing backend's ``limits``: the routes' own when they all agree,
  else none (the defaults).
- ``takes_reasoning``: the engine reads it once, when it is built. The routing backend
  says ``True`` when any route does; an engine left to decide then keeps reasoning in
  its run inputs, and the routing backend takes it out again for each run whose route
  does not ask for it (an AG-UI server before 1.0 rejects the ``reasoning`` role). An
  engine given ``include_reasoning`` explicitly is obeyed on every route.
- Retries and their notices: each route's own retry policy applies; the notices reach
  the engine driving the run as they would without routing.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from types import MappingProxyType

import msgspec

from toolrelay._core import Limits, ThreadKey
from toolrelay._errors import UnknownServerError
from toolrelay.backends._base import (
    AgentBackend,
    ClosedOnExit,
    EventStream,
    current_run_settings,
)
from toolrelay.protocol import ReasoningMessage, RunAgentInput

__all__ = ("RoutingBackend",)


def _takes_reasoning(backend: AgentBackend) -> bool:
    return getattr(backend, "takes_reasoning", False) is True


class RoutingBackend(ClosedOnExit):
    """Routes each run to the backend of its thread's agent server (``ThreadKey.server``).

    Any backend can be a route: :class:`~toolrelay.backends.AguiHttpBackend`, a provider
    backend, a :class:`~toolrelay.testing.ScriptedAgent`. A thread whose server has no
    route fails its turn with :class:`~toolrelay.UnknownServerError` (terminal
    reason ``backend_error``, code ``unknown_server``) before any request is made. See
    the module docstring for limits, reasoning and retries.

    Use it as an async context manager, or call :meth:`aclose`, to close the routes:
    the routing backend owns the backends it is given.

    Args:
        routes: Server name -> the backend that serves it (at least one).
        default: The route of threads that name no server (``ThreadKey.server == ""``).
            A thread naming a server that has no route never falls back to it: a
            misspelt server fails rather than reaching the wrong agent.

    Raises:
        ValueError: ``routes`` is empty, or ``default`` is not one of its names.
        TypeError: A route is not an :class:`~toolrelay.backends.AgentBackend`.
    """

    def __init__(self, routes: Mapping[str, AgentBackend], *, default: str | None = None) -> None:
        if not routes:
            raise ValueError("RoutingBackend needs at least one route (server name -> backend)")
        for name, backend in routes.items():
            if not isinstance(name, str):
                raise TypeError(f"RoutingBackend: a server name must be a str, got {name!r}")
            if not isinstance(backend, AgentBackend):
                raise TypeError(
                    f"RoutingBackend: the route {name!r} is not an AgentBackend "
                    f"(got {type(backend).__name__})"
                )
        if default is not None and default not in routes:
            raise ValueError(
                f"RoutingBackend: default={default!r} is not a route; "
                f"the routes are {', '.join(map(repr, sorted(routes)))}"
            )
        self._routes: Mapping[str, AgentBackend] = MappingProxyType(dict(routes))
        self._known = tuple(sorted(routes))
        self.default = default
        self.takes_reasoning: bool = any(_takes_reasoning(b) for b in routes.values())
        own = [getattr(b, "limits", None) for b in routes.values()]
        agreed = [limits for limits in own if isinstance(limits, Limits)]
        self.limits: Limits | None = (
            agreed[0] if agreed and all(limits == agreed[0] for limits in agreed) else None
        )

    @property
    def routes(self) -> Mapping[str, AgentBackend]:
        """Server name -> backend (read-only)."""
        return self._routes

    def backend_for(self, key: ThreadKey) -> AgentBackend:
        """The backend serving ``key``'s thread.

        Raises:
            UnknownServerError: No route for ``key.server`` (nor a default, when the
                thread names no server).
        """
        server = key.server if key.server or self.default is None else self.default
        backend = self._routes.get(server)
        if backend is None:
            raise UnknownServerError(key.server, self._known)
        return backend

    # -- the AgentBackend protocol ----------------------------------------------------

    async def allocate_run(self, key: ThreadKey) -> str | None:
        """The route's answer for ``key`` (see :meth:`AgentBackend.allocate_run`).

        Raises:
            UnknownServerError: No route for the thread's server.
        """
        return await self.backend_for(key).allocate_run(key)

    def run(
        self, key: ThreadKey, run_input: RunAgentInput
    ) -> AbstractAsyncContextManager[EventStream]:
        """The route's run for ``key``; reasoning is left out for a route that does
        not take it when the engine left that choice to the backend.

        Raises:
            UnknownServerError: No route for the thread's server.
        """
        backend = self.backend_for(key)
        settings = current_run_settings()
        if (
            self.takes_reasoning
            and not _takes_reasoning(backend)
            and settings is not None
            and settings.include_reasoning is None
        ):
            kept = [m for m in run_input.messages if not isinstance(m, ReasoningMessage)]
            if len(kept) != len(run_input.messages):
                run_input = msgspec.structs.replace(run_input, messages=kept)
        return backend.run(key, run_input)

    # -- lifecycle ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every route that can be closed (each backend once, all of them even
        when one fails; the first failure is raised after)."""
        seen: set[int] = set()
        failure: BaseException | None = None
        for backend in self._routes.values():
            if id(backend) in seen:
                continue
            seen.add(id(backend))
            close = getattr(backend, "aclose", None)
            if close is None:
                continue
            try:
                await close()
            except Exception as exc:
                if failure is None:
                    failure = exc
        if failure is not None:
            raise failure
