"""The one boundary where httpx's exceptions become toolrelay's typed errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
from httpx_sse import SSEError

from toolrelay._errors import (
    ConnectError,
    MalformedEventError,
    ReadTimeoutError,
    StreamDroppedError,
    TransportError,
)

__all__ = ("map_transport_errors",)


@contextlib.contextmanager
def map_transport_errors() -> Iterator[None]:
    """Translate httpx and httpx-sse exceptions into toolrelay's typed errors.

    The one boundary where third-party transport exceptions are caught; each is
    re-raised as a :class:`~toolrelay.TransportError` subclass (or, for a broken
    SSE framing, :class:`~toolrelay.MalformedEventError`) chained to the original.
    Anything else passes through untouched, cancellation included.

    Raises:
        ConnectError: The server could not be reached (refused, DNS, connect timeout,
            no pooled connection in time, an unsupported URL scheme).
        ReadTimeoutError: No byte arrived within the read timeout.
        StreamDroppedError: The connection broke while the response was streaming.
        MalformedEventError: httpx-sse rejected the stream, or its bytes could not be
            decoded.
        TransportError: Any other transport failure (a write error, a proxy error...).
    """
    try:
        yield
    except SSEError as exc:  # before httpx.TransportError, which it subclasses
        raise MalformedEventError(f"malformed SSE stream: {exc}", code="malformed_sse") from exc
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise ConnectError(
            f"cannot connect to the agent server: {_describe(exc)}", code="connect_error"
        ) from exc
    except httpx.UnsupportedProtocol as exc:
        raise ConnectError(f"cannot connect: {_describe(exc)}", code="connect_error") from exc
    except httpx.ReadTimeout as exc:
        raise ReadTimeoutError(
            "no data from the agent server within the read timeout", code="read_timeout"
        ) from exc
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.CloseError) as exc:
        raise StreamDroppedError(
            f"the connection to the agent server broke: {_describe(exc)}", code="stream_dropped"
        ) from exc
    except httpx.DecodingError as exc:
        raise MalformedEventError(
            f"the response body cannot be decoded: {_describe(exc)}", code="malformed_sse"
        ) from exc
    except httpx.HTTPError as exc:
        raise TransportError(
            f"transport failure: {_describe(exc)}", code="transport_error"
        ) from exc


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
