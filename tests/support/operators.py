"""The controller's admin API as an operator reaches it in-process: its loopback name in
`Host`, and an operator token of a secret made for the test."""

from __future__ import annotations

import secrets

from fastapi.testclient import TestClient

from llmgw.controller import Controller
from llmgw.controller.api import controller_app, listener_names
from llmgw.controller.operators import Operators

LISTEN = ("127.0.0.1", 8095)


def admin_client(ctl: Controller, operator: str = "tester") -> TestClient:
    """A client of `ctl`'s admin API that writes as `operator`."""
    admins = Operators(secrets.token_bytes(32))
    app = controller_app(ctl, operators=admins, hosts=listener_names(LISTEN[0]))
    return TestClient(app, base_url=f"http://{LISTEN[0]}:{LISTEN[1]}",
                      headers={"Authorization": f"Bearer {admins.mint(operator)}"})
