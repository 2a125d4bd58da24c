"""The AG-UI server: the tool loop runs server-side, outlives the client, and any AG-UI
client can catch up (reference 004).

- :class:`AguiServer`: a plain ASGI application; a ``POST`` of a ``RunAgentInput``
  starts a turn that runs in the server (the model is any
  :class:`~toolrelay.backends.AgentBackend`, the server's tools a
  :class:`~toolrelay.ToolRegistry`, the client's tools are handed back to it),
  and answers with the turn's AG-UI events, each with its log sequence number as SSE
  ``id``; ``GET /threads/{id}/events`` catches up from any of them.
- :class:`BearerTokens`, :class:`Authenticator`: who owns a thread.
- :class:`LogFeed`: a thread's log read as AG-UI events; :class:`StopReason` and
  :data:`STOP_EVENT` name what a finished run reports.

``toolrelay serve`` runs it under uvicorn; see ``docs/server.md``.
"""

from __future__ import annotations

from toolrelay.server._app import AguiServer as AguiServer
from toolrelay.server._auth import (
    ANONYMOUS as ANONYMOUS,
    Anonymous as Anonymous,
    Authenticator as Authenticator,
    BearerTokens as BearerTokens,
    Request as Request,
)
from toolrelay.server._feed import (
    STOP_EVENT as STOP_EVENT,
    LogFeed as LogFeed,
    StopReason as StopReason,
    result_message_id as result_message_id,
)
from toolrelay.server._rounds import (
    DEFAULT_MAX_TOOL_ROUNDS as DEFAULT_MAX_TOOL_ROUNDS,
    MAX_TOOL_ROUNDS_ENV as MAX_TOOL_ROUNDS_ENV,
    RoundLimit as RoundLimit,
    max_tool_rounds_from_env as max_tool_rounds_from_env,
    rounds_in as rounds_in,
)
from toolrelay.server._watch import WatchedStore as WatchedStore

__all__ = (
    "ANONYMOUS",
    "AguiServer",
    "Anonymous",
    "Authenticator",
    "BearerTokens",
    "DEFAULT_MAX_TOOL_ROUNDS",
    "LogFeed",
    "MAX_TOOL_ROUNDS_ENV",
    "Request",
    "RoundLimit",
    "STOP_EVENT",
    "StopReason",
    "WatchedStore",
    "max_tool_rounds_from_env",
    "result_message_id",
    "rounds_in",
)
