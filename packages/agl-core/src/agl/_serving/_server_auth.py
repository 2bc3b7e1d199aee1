"""Bearer-token authentication, one rule for every agl server (the store and the gateway).

- A server bound beyond loopback without a token is refused (:func:`check_bind_address`):
  anyone who can reach the port could otherwise read the store, enqueue work, or spend the
  gateway's upstream key.
- With a token, every request must carry ``Authorization: Bearer <token>``
  (:class:`BearerTokenMiddleware`). The scheme is matched in any case (RFC 9110 says it is
  case-insensitive), the token is compared in constant time, and a refusal is a 401 with a
  ``WWW-Authenticate: Bearer`` header and a JSON body in the server's own error format.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agl._errors import InvalidInputError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BearerTokenMiddleware", "check_bind_address", "is_loopback"]


def check_bind_address(host: str, token: str | None, *, server: str, token_env: str) -> None:
    """Refuse to bind a non-loopback address without a token.

    Args:
        host: The address the server is to bind.
        token: The token it requires, if any.
        server: What is served, for the message ("the store", "the gateway").
        token_env: The environment variable that sets the token, for the message.

    Raises:
        InvalidInputError: ``host`` is reachable from other machines and ``token`` is empty.
    """
    if token or is_loopback(host):
        return
    raise InvalidInputError(
        f"refusing to serve {server} on {host!r} without a token: other machines could use it "
        f"freely. Pass --token-file (or set {token_env}), or bind 127.0.0.1.",
        field="host",
        value=host,
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(info[4][0]).is_loopback
                for info in socket.getaddrinfo(host, None)
            )
        except (OSError, ValueError):
            return False


def bearer_token(header: bytes) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header value (scheme in any case)."""
    scheme, _, token = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return token.strip() or None


class BearerTokenMiddleware:
    """Plain ASGI middleware: every HTTP request must carry the bearer ``token``.

    Args:
        app: The app to guard.
        token: The token every request must carry.
        refusal: Builds the JSON body of the 401 from a message and the request's path (each
            server has its own error format: the store's; the gateway's, by the wire the path
            is on).
        public: Paths served without the token to ``GET`` requests: exact paths, or prefixes
            ending in ``/`` (the dashboard's page and assets, which hold no data).
        key_header: A header that may carry the token instead, as it is (Anthropic's clients
            send their API key as ``x-api-key``); none by default.
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        refusal: Callable[[str, str], dict[str, Any]],
        public: tuple[str, ...] = (),
        key_header: str | None = None,
    ) -> None:
        if not token:
            raise InvalidInputError("the token must not be empty", field="token")
        self.app = app
        self.expected = token.encode()
        self.refusal = refusal
        self.key_header = key_header.lower().encode() if key_header else None
        self.public_exact = frozenset(p for p in public if not p.endswith("/") or p == "/")
        self.public_prefixes = tuple(p for p in public if p.endswith("/") and p != "/")

    def _public(self, scope: Scope) -> bool:
        if scope.get("method") not in ("GET", "HEAD"):
            return False
        path = scope.get("path", "")
        return path in self.public_exact or (
            bool(self.public_prefixes)
            and path.startswith(self.public_prefixes)
            and ".." not in path
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._public(scope):
            await self.app(scope, receive, send)
            return
        header = key = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value
            elif name == self.key_header:
                key = value.strip()
        given = bearer_token(header) if header else key or None
        if given is not None and hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        asked = "'Authorization: Bearer <token>'"
        if self.key_header is not None:
            asked += f" or '{self.key_header.decode()}: <token>'"
        message = (
            f"this server requires {asked}"
            if not header and not key
            else f"the token is wrong (or not sent as {asked})"
        )
        payload = json.dumps(self.refusal(message, scope.get("path", ""))).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"www-authenticate", b'Bearer realm="agl"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
