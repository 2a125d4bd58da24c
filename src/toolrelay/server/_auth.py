"""Who is asking: authenticators turn a request's headers into a principal.

Every thread belongs to the principal whose request created it (the store records it
as the thread's owner); a request from anyone else gets 404 for that thread, as if it
did not exist. An authenticator is any object with ``async authenticate(request)``
returning the principal's name, or ``None`` to refuse the request (401).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ("ANONYMOUS", "Anonymous", "Authenticator", "BearerTokens", "Request")

#: The principal of every request when the server has no authentication.
ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Request:
    """What an authenticator sees of a request.

    Attributes:
        method: ``GET``, ``POST``...
        path: The path under the server's mount point.
        headers: The request's headers, names in lower case (a repeated header:
            the last value).
        client: The peer's ``(host, port)``, when the ASGI server says.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    client: tuple[str, int] | None = None


@runtime_checkable
class Authenticator(Protocol):
    """Decides who a request comes from."""

    async def authenticate(self, request: Request) -> str | None:
        """The principal making ``request``, or ``None``: refuse it (401)."""
        ...


class Anonymous:
    """No authentication: every request is :data:`ANONYMOUS` (for loopback use)."""

    async def authenticate(self, request: Request) -> str | None:
        return ANONYMOUS


class BearerTokens:
    """``Authorization: Bearer <token>``, each token naming a principal.

    Args:
        tokens: Token -> principal. Tokens are compared in constant time.

    Raises:
        ValueError: No token, or an empty one.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens or any(not token for token in tokens):
            raise ValueError("BearerTokens needs at least one non-empty token")
        self._tokens = [(token.encode(), principal) for token, principal in tokens.items()]

    @classmethod
    def single(cls, token: str, principal: str = "default") -> BearerTokens:
        """One token for one principal (``toolrelay serve --token``)."""
        return cls({token: principal})

    async def authenticate(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return None
        given = credentials.strip().encode()
        found: str | None = None
        for token, principal in self._tokens:  # every token compared: no timing hint
            if hmac.compare_digest(given, token):
                found = principal
        return found

    def __repr__(self) -> str:
        return f"BearerTokens({len(self._tokens)} token(s))"
