"""The credential each router shows the controller's demand API (load reports, activations).

One token per router host, bound to its inventory name: `llmgw-router.NAME.MAC`, where MAC
is the HMAC of NAME (under a fixed label) with the site's engine key secret, which every
control host applying to the fleet shares (the controller too). So apply hands each router
its own token without a list to keep in step, the controller checks a token by computing it
again (nothing stored, compared in constant time), and a new secret changes them everywhere
at the next apply. The name a report is counted under is the one its token carries: a router
holding its own token cannot speak for another (it would need the secret to mint one).

A token reaches its router only, as a 0600 file of the router's user (role llmgw_router:
`llmgw_router_controller_tokens[inventory_hostname]`), never a command line, URL or log.
"""

from __future__ import annotations

import hmac
import re
from pathlib import Path

from llmgw.apply.engine_keys import KEY_PREFIX, EngineKeyring

PREFIX = "llmgw-router."
# Not a replica id (a colon is never in one), so no engine key equals a router's token MAC.
_LABEL = ":controller-demand-api:router:"
# An inventory host name as Ansible accepts one on a line of its own (no space, no control
# character); dots are allowed, so the MAC (hex, no dot) is what follows the last one.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@\[\]-]{0,252}")


def router_token(keyring: EngineKeyring, router: str) -> str:
    """The token of inventory router `router`."""
    if not _NAME.fullmatch(router):
        raise ValueError(f"not a router name: {router!r}")
    return f"{PREFIX}{router}.{_mac(keyring, router)}"


def router_of(keyring: EngineKeyring, token: str) -> str | None:
    """The router a token names, or None when it is not one this site's secret made."""
    if not token.startswith(PREFIX) or len(token) > 400:
        return None
    name, _, mac = token[len(PREFIX):].rpartition(".")
    if not _NAME.fullmatch(name):
        return None
    return name if hmac.compare_digest(mac.encode(), _mac(keyring, name).encode()) else None


def _mac(keyring: EngineKeyring, router: str) -> str:
    return keyring.key(_LABEL + router).removeprefix(KEY_PREFIX)


def router_token_for(state_file: Path, router: str) -> str:
    """Router `router`'s token for the site whose state file is `state_file` (its secret beside it, or the env)."""
    return router_token(EngineKeyring.beside(state_file), router)
