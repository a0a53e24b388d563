"""Who may use the router's admin listener: its own Host, and a token for any change.

The admin listener is on loopback (the role asserts it; apply and the views reach it
through SSH tunnels), but loopback is not a boundary against a browser on the same
host or at the end of a tunnel: any web page can make that browser post to
`http://127.0.0.1:8001` (a "simple" cross-site request: `text/plain`, no preflight), and
a page on a name the attacker points at 127.0.0.1 (DNS rebinding) can read what the
admin API answers. So, in front of every admin route:

- `Host` must be an IP address or `localhost` (any port: a tunnel's local port is not
  the listener's): a rebound name is refused, before anything is read or answered;
- anything but GET and HEAD is a change: it must be same-origin (`Origin`, when sent,
  names a loopback or IP host like `Host`; `Sec-Fetch-Site`, when sent, is
  `same-origin` or `none`), be `application/json` (no form or `text/plain` post), and
  carry `Authorization: Bearer <token>`, the token in `admin.token` beside the state
  file (written by the role, 0640 root:<router group>; apply derives the same,
  llmgw.apply.admin_token). Without that file the admin API changes nothing.

The read-only dashboard and API (GET) need only the Host check: what they show is for
whoever can reach the listener, which the loopback bind and SSH decide.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmgw.hostnames import is_ip_address
from llmgw.router.asgi import Receive, Scope, Send
from llmgw.router.bodies import header
from llmgw.router.openai_errors import RouterError, send_error

ADMIN_TOKEN_FILE = "admin.token"
_READS = frozenset({"GET", "HEAD"})
_SAME_SITE = frozenset({"same-origin", "none"})  # `none`: typed in, not sent by a page


def own_host(host: str | None) -> bool:
    """A Host (or an Origin's host) that no DNS name can rebind: an IP literal or localhost."""
    if not host:
        return False
    try:
        name = urlsplit("//" + host).hostname
    except ValueError:
        return False
    if name is None:
        return False
    return name == "localhost" or is_ip_address(name)


class AdminGuard:
    """ASGI middleware in front of the admin app (see the module docstring)."""

    def __init__(self, app: Any, token_file: Path) -> None:
        self.app = app
        self.token_file = token_file

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self.check(scope)
            except RouterError as err:
                await send_error(send, err)
                return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> None:
        host = header(scope, b"host")
        if not own_host(host):
            raise RouterError(403, f"Host {host!r} is not this admin listener's: ask it by address "
                                   "(http://127.0.0.1:PORT, or localhost), as apply and the views do",
                              code="host_not_allowed")
        if scope["method"] in _READS:
            return
        what = f"{scope['method']} {scope['path']}"
        site = header(scope, b"sec-fetch-site")
        origin = header(scope, b"origin")
        if (site is not None and site.lower() not in _SAME_SITE) or \
                (origin is not None and not own_host(urlsplit(origin).netloc)):
            raise RouterError(403, f"{what} from another site (Origin {origin!r}, Sec-Fetch-Site {site!r}) is "
                                   "refused: the admin API takes changes only from llmgw itself",
                              code="cross_origin")
        ctype = (header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            raise RouterError(415, f"{what} takes an application/json body, not {ctype or 'none'!r}",
                              code="unsupported_media_type")
        expected = self._token()
        given = header(scope, b"authorization") or ""
        if expected is None:
            raise RouterError(403, f"{what}: this router has no admin token ({self.token_file} is missing or "
                                   "empty; the role writes it), so its admin API changes nothing",
                              code="admin_token_missing")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected.encode()):
            raise RouterError(401, f"{what} needs the router's admin token: Authorization: Bearer <the token "
                                   f"in {self.token_file}>", code="invalid_admin_token")

    def _token(self) -> str | None:
        """Read at each change, so a new token (the next apply) needs no restart."""
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return token or None
