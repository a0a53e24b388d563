"""The token routers show the controller's demand API (reports, activation requests).

Derived like the engine keys (llmgw.apply.engine_keys): HMAC of a fixed name under the
site's engine key secret, which every control host applying to the fleet shares (the
controller too). So every apply hands the routers the same token, the controller knows it
without a list to keep in step, and a new secret changes it everywhere at the next apply.
It reaches a router as a 0600 file of its user (role llmgw_router), never a command line.
"""

from __future__ import annotations

from pathlib import Path

from llmgw.apply.engine_keys import KEY_PREFIX, EngineKeyring

# Not a replica id (a colon is never in one), so no engine key equals it.
_NAME = ":controller-demand-api"
PREFIX = "llmgw-routers-"


def router_token(keyring: EngineKeyring) -> str:
    return PREFIX + keyring.key(_NAME).removeprefix(KEY_PREFIX)


def router_token_for(state_file: Path) -> str:
    """The token for the site whose state file is `state_file` (its secret beside it, or the env)."""
    return router_token(EngineKeyring.beside(state_file))
