"""The router as a client of the controller's demand API (llmgw.controller.api.demand_app).

`llmgw router serve --activator llmgw.router.activator:factory` with $LLMGW_CONTROLLER_URL
set (role llmgw_router does both when `llmgw_router_controller_url` is set) gives the
router a `ControllerClient`: it asks the controller to start a model's replica and reports
its load; the controller plans and applies (the router holds no SSH key and never writes
the state). The token, which apply hands each router (its own, bound to its inventory
name: llmgw.apply.controller_token) as `controller.token` beside the state file, is read at
each call, so a new one is used without a restart, and goes only in the Authorization
header: never in the URL, a command line or a log (an error quotes the controller's answer,
never the request). The controller counts a report under the router its token names;
$LLMGW_ROUTER_NAME (the inventory name too) is only what the report says it is.

The channel: `http://` reaches the controller's demand listener in the clear, so keep it on
a network only the fleet reaches (the bastion's management network, or an SSH-forwarded
port); `https://` verifies the controller's certificate against the system's CAs, or the
CA file in $LLMGW_CONTROLLER_CA.
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp

from llmgw.errors import UsageError
from llmgw.router.ondemand import Answer

TOKEN_FILE = "controller.token"

TIMEOUT = aiohttp.ClientTimeout(total=10, sock_connect=5)


class ControllerError(Exception):
    pass


class ControllerClient:
    def __init__(self, url: str, token_file: Path, name: str, session: aiohttp.ClientSession | None = None, *,
                 ca_file: Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.name = name
        self._session = session  # made on first use, in the process and loop that use it
        # https: the system's CAs, or the controller's own CA; always verified.
        self._ssl: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _headers(self) -> dict[str, str]:
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ControllerError(f"cannot read the controller token {self.token_file}: {exc.strerror}") from None
        return {"Authorization": f"Bearer {token}"}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.url + path, json=body, headers=self._headers(), timeout=TIMEOUT,
                                     ssl=self._ssl) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300]
                raise ControllerError(f"the controller answered {resp.status}: {text}")
            data = await resp.json(content_type=None)
        if not isinstance(data, dict):
            raise ControllerError("the controller's answer is not a JSON object")
        return data

    async def ask(self, model: str) -> Answer:
        data = await self._post("/api/v1/demand/activate", {"model": model})
        status = data.get("status")
        if status not in ("pending", "starting", "ready", "failed"):
            raise ControllerError(f"the controller's answer has no known status: {status!r}")
        hold = data.get("hold_s")
        return Answer(str(status), str(data.get("reason") or "")[:500],
                      float(hold) if isinstance(hold, int | float) and not isinstance(hold, bool) and hold > 0
                      else None)

    async def report(self, report: dict[str, Any]) -> None:
        await self._post("/api/v1/demand/report", report)


def factory(*, state_path: Path, site_dir: Path | None = None) -> ControllerClient:
    """For `--activator llmgw.router.activator:factory`: the controller named by $LLMGW_CONTROLLER_URL.

    `site_dir` comes with every factory's call (plugins.py); the controller client needs no site."""
    url = os.environ.get("LLMGW_CONTROLLER_URL", "").strip()
    if not url.startswith(("http://", "https://")):
        raise UsageError("the controller client needs $LLMGW_CONTROLLER_URL (http://HOST:PORT of the controller's "
                         f"demand API), not {url!r}", hint="set llmgw_router_controller_url for the routers")
    if "@" in url.split("//", 1)[1].split("/", 1)[0]:
        raise UsageError("$LLMGW_CONTROLLER_URL must not carry credentials; the router's token is its "
                         "controller.token file")
    name = os.environ.get("LLMGW_ROUTER_NAME", "").strip() or socket.gethostname()
    ca = os.environ.get("LLMGW_CONTROLLER_CA", "").strip()
    return ControllerClient(url, state_path.with_name(TOKEN_FILE), name, ca_file=Path(ca) if ca else None)
