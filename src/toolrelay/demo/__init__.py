"""The embedded demo: a deterministic AG-UI agent server and the tools it calls.

- :class:`DemoAgent`: the agent, a plain ASGI application (no framework) that answers a
  ``RunAgentInput`` with a realistic AG-UI event stream, by scenario (:data:`SCENARIOS`).
- :func:`serve_demo`: serves it on 127.0.0.1 with uvicorn (an ephemeral port) and
  yields its URL; :class:`DemoServer` does the same from synchronous code, in a thread.
- :data:`DEMO_TOOLS`: the tools it calls (``get_secret_number``, ``lookup_city``,
  ``get_weather``, ``list_people``), as a :class:`~toolrelay.ToolRegistry`.

``toolrelay demo`` runs a turn against it; the tests use it for real-HTTP integration
tests and to record SSE captures. Serving needs uvicorn (the ``demo`` extra).
"""

from __future__ import annotations

from toolrelay.demo._agent import DemoAgent as DemoAgent
from toolrelay.demo._scenarios import (
    SCENARIOS as SCENARIOS,
    choose_scenario as choose_scenario,
    plan_reply as plan_reply,
)
from toolrelay.demo._server import DemoServer as DemoServer, serve_demo as serve_demo
from toolrelay.demo._tools import (
    CITIES as CITIES,
    DEMO_TOOLS as DEMO_TOOLS,
    SECRET_NUMBERS as SECRET_NUMBERS,
    WEATHER as WEATHER,
    get_secret_number as get_secret_number,
    get_weather as get_weather,
    list_people as list_people,
    lookup_city as lookup_city,
)

__all__ = (
    "CITIES",
    "DEMO_TOOLS",
    "DemoAgent",
    "DemoServer",
    "SCENARIOS",
    "SECRET_NUMBERS",
    "WEATHER",
    "choose_scenario",
    "get_secret_number",
    "get_weather",
    "list_people",
    "lookup_city",
    "plan_reply",
    "serve_demo",
)
