"""W3C trace context across the wire: sent with each AG-UI run, continued by the server.

Opt-in: without ``opentelemetry-api`` both functions do nothing. With it, the
propagators are the API's global ones (W3C ``traceparent``/``tracestate`` and
``baggage`` unless configured otherwise), so the header names the span current when
the run starts (a turn's run span, see :mod:`toolrelay._runtime._tracing`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping

try:
    from opentelemetry import context as otel_context, propagate, trace

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised in a subprocess without the package
    AVAILABLE = False

__all__ = ("continued_trace", "inject_trace_context")


def inject_trace_context(headers: MutableMapping[str, str]) -> None:
    """Add the current trace context to a request's ``headers`` (``traceparent``,
    ``tracestate``); nothing when no span is current or the package is missing."""
    if AVAILABLE:
        propagate.inject(headers)


@contextlib.contextmanager
def continued_trace(headers: Mapping[str, str]) -> Iterator[None]:
    """Within the block, the trace an incoming request's ``traceparent`` names is the
    current context (so a turn started there continues it).

    Does nothing when the request carries no ``traceparent``, the package is missing,
    or a span is already current (an ASGI middleware continued the trace already).
    ``headers`` has lower-case names.
    """
    if (
        not AVAILABLE
        or "traceparent" not in headers
        or trace.get_current_span().get_span_context().is_valid
    ):
        yield
        return
    token = otel_context.attach(propagate.extract(headers))
    try:
        yield
    finally:
        otel_context.detach(token)
