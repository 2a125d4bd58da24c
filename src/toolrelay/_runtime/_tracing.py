"""OpenTelemetry spans of a turn, named by the GenAI semantic conventions.

Theory of operation
-------------------
Opt-in and free when off. ``opentelemetry-api`` is an optional dependency (the
``otel`` extra). Once per turn, :func:`start_turn` asks whether tracing is on: the
package imports, and the tracer provider (the engine's ``tracer_provider``, else the
global one) is a real one, not the API's proxy or no-op provider. When it is off the
turn holds ``None`` and every hook the turn, the engine and the executor call is
behind one ``is not None`` test, per turn, per run or per tool call; nothing is done
per event.

When it is on, a turn makes this tree (span kind in brackets)::

    invoke_agent [INTERNAL]                        the turn (conversation id = thread id)
      chat {model} [CLIENT]                        one run of a provider backend, or
      invoke_agent [CLIENT]                        one run of an AG-UI server (or any
                                                   other backend)
      execute_tool {tool name} [INTERNAL]          one per tool call of the batch
      chat {model} / invoke_agent [CLIENT]         the continuation run
      ...

The turn's span is the current span of the turn's task for the whole turn, so tool
calls (each in a task the batch starts) nest under it, and a run's span is current
while the backend streams it, so the W3C ``traceparent`` an AG-UI backend sends
(:func:`toolrelay.backends._propagation.inject_trace_context`) names that run. A
tool's own spans nest under its ``execute_tool`` span: it is current in the tool's
task, and worker threads run in a copy of that context.

Attribute names come from the conventions (``gen_ai.*``, ``server.*``,
``error.type``); where no convention exists they are toolrelay's own
(``toolrelay.*``): the turn's end (``toolrelay.turn.status``, ``.reason``,
``.reason_code``), a run's outcome (``toolrelay.run.outcome``) and a call's final
status (``toolrelay.tool_call.status``).
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from toolrelay._core import ThreadKey, ToolCallInfo, ToolResult, ToolsReady
from toolrelay._machines import RunStatus
from toolrelay._reasons import TerminalReason
from toolrelay._version import __version__
from toolrelay.backends import AguiHttpBackend, RoutingBackend
from toolrelay.backends._base import AgentBackend, EventStream
from toolrelay.protocol import Event, RunErrorEvent, RunFinishedEvent, TokenUsage, UnknownEvent

try:
    from opentelemetry import context as otel_context, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised in a subprocess without the package
    AVAILABLE = False

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context as OtelContext
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ("AVAILABLE", "PROVIDER_NAMES", "TurnTrace", "start_turn", "tracer_for")

logger = logging.getLogger("toolrelay.runtime")

#: The instrumentation scope's name.
SCOPE = "toolrelay"

#: ``gen_ai.provider.name`` of each provider backend (``ProviderBackend.name``), the
#: conventions' well-known value where there is one.
PROVIDER_NAMES: dict[str, str] = {
    "openai": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "google": "gcp.gemini",
    "cohere": "cohere",
    "ollama": "ollama",
}
#: ``gen_ai.provider.name`` of a run whose backend is not a provider: the agent behind
#: an AG-UI server does not say which provider it uses.
AG_UI_PROVIDER = "ag_ui"

#: The longest text the agent controls (a tool's name, a call's id, a model's name, an
#: error message) that goes on a span: longer is cut (an agent's strings are bounded by
#: ``Limits.max_event_bytes`` only, and every span is kept and exported).
MAX_TEXT = 256

# One tracer per provider, the last one asked for (an engine keeps its provider).
_cached: tuple[object, Any] | None = None


def tracer_for(provider: TracerProvider | None) -> Tracer | None:
    """The tracer to use, or ``None`` when tracing is off: the package is missing, or
    the provider (``None``: the global one) is the API's proxy or no-op provider, that
    is, nobody set one."""
    global _cached
    if not AVAILABLE:
        return None
    if provider is None:
        provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    cached = _cached
    if cached is not None and cached[0] is provider:
        tracer: Tracer = cached[1]
        return tracer
    tracer = provider.get_tracer(SCOPE, __version__)
    _cached = (provider, tracer)
    return tracer


def start_turn(
    provider: TracerProvider | None, backend: AgentBackend, key: ThreadKey, turn_id: str
) -> TurnTrace | None:
    """The trace of a turn that starts now (its span opened), or ``None`` when off.

    Tracing never fails a turn: if the tracer raises (a span processor of the
    embedding code, say), it is logged and the turn goes on untraced.
    """
    try:
        tracer = tracer_for(provider)
        if tracer is None:
            return None
        return TurnTrace(tracer, _resolve(backend, key), key, turn_id)
    except Exception as exc:
        logger.warning("tracing failed: turn %s on %s is not traced", turn_id, key, exc_info=exc)
        return None


def _resolve(backend: AgentBackend, key: ThreadKey) -> AgentBackend:
    """The backend that serves ``key``'s runs: through routing and wrappers (a
    ``RoundLimit`` keeps the backend it wraps as ``backend``)."""
    for _ in range(8):
        if isinstance(backend, RoutingBackend):
            try:
                backend = backend.backend_for(key)
            except Exception:
                return backend  # no route: the turn fails before any run
            continue
        inner = getattr(backend, "backend", None)
        if inner is None or not isinstance(inner, AgentBackend):
            return backend
        backend = inner
    return backend


def _server(url: str) -> tuple[str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname, port


class _Usage:
    """Tokens reported by the agent (AG-UI ``usage`` on ``RUN_FINISHED``/``RUN_ERROR``)."""

    __slots__ = ("cache_creation", "cache_read", "input", "model", "output", "reasoning")

    def __init__(self) -> None:
        self.input: int | None = None
        self.output: int | None = None
        self.cache_read: int | None = None
        self.cache_creation: int | None = None
        self.reasoning: int | None = None
        self.model: str | None = None

    def add(self, usage: TokenUsage) -> None:
        self.input = _plus(self.input, usage.input_tokens)
        self.output = _plus(self.output, usage.output_tokens)
        self.cache_read = _plus(self.cache_read, usage.cached_input_tokens)
        self.cache_creation = _plus(self.cache_creation, usage.cache_write_input_tokens)
        self.reasoning = _plus(self.reasoning, usage.reasoning_tokens)
        if self.model is None and usage.model:
            self.model = usage.model[:MAX_TEXT]

    def merge(self, other: _Usage) -> None:
        self.input = _plus(self.input, other.input)
        self.output = _plus(self.output, other.output)
        self.cache_read = _plus(self.cache_read, other.cache_read)
        self.cache_creation = _plus(self.cache_creation, other.cache_creation)
        self.reasoning = _plus(self.reasoning, other.reasoning)

    def record(self, span: Span) -> None:
        for name, value in (
            ("gen_ai.usage.input_tokens", self.input),
            ("gen_ai.usage.output_tokens", self.output),
            ("gen_ai.usage.cache_read.input_tokens", self.cache_read),
            ("gen_ai.usage.cache_creation.input_tokens", self.cache_creation),
            ("gen_ai.usage.reasoning.output_tokens", self.reasoning),
        ):
            if value is not None:
                span.set_attribute(name, value)


@contextlib.contextmanager
def _logged(what: str) -> Iterator[None]:
    """Log, rather than raise, what the tracer raises while ending ``what``."""
    try:
        yield
    except Exception as exc:
        logger.warning("tracing failed while ending %s", what, exc_info=exc)


def _plus(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def _error(span: Span, error_type: str, message: str | None) -> None:
    span.set_attribute("error.type", error_type[:MAX_TEXT])
    description = (message or error_type)[:MAX_TEXT]
    span.set_status(Status(StatusCode.ERROR, description))


class _Watched:
    """A run's events as they come, with the usage its last event reports recorded.

    A class rather than an async generator: nothing to finalize when the turn stops
    reading early (the backend closes the stream it gave).
    """

    __slots__ = ("_events", "_usage")

    def __init__(self, events: EventStream, usage: _Usage) -> None:
        self._events = events
        self._usage = usage

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Event | UnknownEvent:
        event = await self._events.__anext__()
        if isinstance(event, RunFinishedEvent | RunErrorEvent) and event.usage:
            for usage in event.usage:
                self._usage.add(usage)
        return event


def _end_run(span: Span, usage: _Usage, effect: object, why: TerminalReason | None) -> None:
    """Record how a run ended on its span, and end it."""
    if usage.model is not None:
        span.set_attribute("gen_ai.response.model", usage.model)
    usage.record(span)
    if isinstance(effect, ToolsReady):
        span.set_attribute("toolrelay.run.outcome", "tool_calls")
    elif why is not None:
        span.set_attribute("toolrelay.run.outcome", why.kind.value)
        if why.kind.value not in _NOT_ERRORS:
            _error(span, why.kind.value, why.message)
    else:
        span.set_attribute("toolrelay.run.outcome", "cancelled")
    span.end()


class TurnTrace:
    """The spans of one turn (made only when tracing is on; see :func:`start_turn`)."""

    __slots__ = ("_base", "_kind", "_run_usage", "_span", "_tracer", "_usage", "key")

    def __init__(self, tracer: Tracer, backend: AgentBackend, key: ThreadKey, turn_id: str) -> None:
        self._tracer = tracer
        self.key = key
        self._usage = _Usage()
        self._run_usage = self._usage
        # The attributes every run span starts with, and the run span's kind of name.
        thread = key.thread_id[:MAX_TEXT]  # a server's client chooses it
        base: dict[str, Any] = {"gen_ai.conversation.id": thread}
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": thread,
            "toolrelay.turn.id": turn_id,
        }
        if key.server:
            attributes["gen_ai.agent.name"] = key.server
            base["gen_ai.agent.name"] = key.server
        # Imported here, not at the top: only a traced turn needs the providers.
        from toolrelay.backends.providers import ProviderBackend

        if isinstance(backend, ProviderBackend):
            provider = PROVIDER_NAMES.get(backend.name, backend.name)
            base["gen_ai.operation.name"] = "chat"
            base["gen_ai.request.model"] = attributes["gen_ai.request.model"] = backend.model
            address, port = _server(backend.base_url)
            self._kind = f"chat {backend.model}"
        else:
            provider = AG_UI_PROVIDER
            base["gen_ai.operation.name"] = "invoke_agent"
            address, port = (
                _server(str(backend.url)) if isinstance(backend, AguiHttpBackend) else (None, None)
            )
            self._kind = f"invoke_agent {key.server}" if key.server else "invoke_agent"
        base["gen_ai.provider.name"] = attributes["gen_ai.provider.name"] = provider
        if address is not None:
            base["server.address"] = address
            if port is not None:
                base["server.port"] = port
        self._base = base
        name = f"invoke_agent {key.server}" if key.server else "invoke_agent"
        self._span: Span = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes)

    def attach(self) -> Token[OtelContext]:
        """Make the turn's span the current one (in the turn's task, for the turn);
        returns what :meth:`detach` takes, in the same task, when the turn is over."""
        return otel_context.attach(trace.set_span_in_context(self._span))

    def detach(self, token: Token[OtelContext]) -> None:
        """The turn's span is no longer the current one (``token``: :meth:`attach`'s)."""
        otel_context.detach(token)

    def watch(self, events: EventStream) -> EventStream:
        """``events``, recording the usage the run reports on its run's span."""
        return _Watched(events, self._run_usage)

    @contextlib.contextmanager
    def run(
        self, run_id: str, depth: int, ending: Callable[[], object], reason: Callable[[], Any]
    ) -> Iterator[None]:
        """One run's span, current while the run streams; on leaving, it records how the
        run ended (``ending()``: the effect that ended it; ``reason()``: the turn's
        terminal reason, if it ended). A tracer that raises leaves the run untraced."""
        attributes = dict(self._base)
        attributes["toolrelay.run.id"] = run_id
        attributes["toolrelay.run.depth"] = depth
        try:
            span = self._tracer.start_span(
                self._kind,
                context=trace.set_span_in_context(self._span),
                kind=SpanKind.CLIENT,
                attributes=attributes,
            )
        except Exception as exc:
            logger.warning("tracing failed: run %s is not traced", run_id, exc_info=exc)
            yield
            return
        usage = self._run_usage = _Usage()
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield
        finally:
            otel_context.detach(token)
            self._run_usage = self._usage
            self._usage.merge(usage)
            with _logged("a run's span"):
                _end_run(span, usage, ending(), reason())

    async def tool(
        self,
        call: ToolCallInfo,
        description: str | None,
        execute: Callable[[], Awaitable[ToolResult]],
    ) -> ToolResult:
        """Run ``execute`` (one tool call) inside its ``execute_tool`` span, current in
        the calling task; its result's status on the span. A tracer that raises leaves
        the call untraced."""
        name = call.name[:MAX_TEXT]  # the agent's: an unknown tool's name is any text
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call.id[:MAX_TEXT],
            "gen_ai.tool.type": "function",
        }
        if description:
            attributes["gen_ai.tool.description"] = description
        try:
            span = self._tracer.start_span(
                f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes
            )
        except Exception as exc:
            logger.warning("tracing failed: tool call %s is not traced", call.id, exc_info=exc)
            return await execute()
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            result = await execute()
        except BaseException as exc:
            otel_context.detach(token)
            with _logged("a tool call's span"):
                # Cancelled with its turn (the call is abandoned: it ends failed), or a
                # bug of ours that the batch turns into a failed result.
                span.set_attribute("toolrelay.tool_call.status", "failed")
                if isinstance(exc, Exception):
                    _error(span, type(exc).__qualname__, str(exc))
                else:
                    _error(span, "cancelled", "the tool call was cancelled")
                span.end()
            raise
        otel_context.detach(token)
        with _logged("a tool call's span"):
            if result.ok:
                span.set_attribute("toolrelay.tool_call.status", "completed")
            else:
                span.set_attribute("toolrelay.tool_call.status", "failed")
                raised = result.exception
                kind = type(raised).__qualname__ if raised is not None else "tool_error"
                _error(span, kind, result.error)
            span.end()
        return result

    def end(self, status: RunStatus, reason: TerminalReason | None, runs: int, depth: int) -> None:
        """End the turn's span with how the turn ended (never raises: logged)."""
        with _logged("the turn's span"):
            self._end(status, reason, runs, depth)

    def _end(self, status: RunStatus, reason: TerminalReason | None, runs: int, depth: int) -> None:
        span = self._span
        span.set_attribute("toolrelay.turn.status", status.value)
        span.set_attribute("toolrelay.turn.runs", runs)
        span.set_attribute("toolrelay.turn.depth", depth)
        self._usage.record(span)
        if reason is not None:
            span.set_attribute("toolrelay.turn.reason", reason.kind.value)
            if reason.code:
                span.set_attribute("toolrelay.turn.reason_code", reason.code[:MAX_TEXT])
            if status is RunStatus.failed:
                _error(span, reason.kind.value, reason.message)
        span.end()


#: Turn endings that are not errors on a span.
_NOT_ERRORS = frozenset(
    {"completed", "interrupted", "cancelled", "agent_cancelled", "superseded", "closed"}
)
