"""The token that routers' admin APIs take for a change (llmgw.router.admin_guard).

Derived like the controller's token (llmgw.apply.controller_token): HMAC of a fixed name
under the site's engine key secret, so every control host applying to the fleet (and
its download feed, llmgw.views.live_downloads) knows it without a file to keep in step.
It reaches a router as `admin.token` beside its state file, 0640 root:<router group>
(role llmgw_router), never a command line or a unit.
"""

from __future__ import annotations

from llmgw.apply.engine_keys import KEY_PREFIX, EngineKeyring

# Not a replica id (a colon is never in one), nor the controller token's name.
_NAME = ":router-admin-api"
PREFIX = "llmgw-admin-"


def admin_token(keyring: EngineKeyring) -> str:
    return PREFIX + keyring.key(_NAME).removeprefix(KEY_PREFIX)
