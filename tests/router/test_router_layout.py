"""The router's module layout: the dashboard package never imports the router back.

The admin listener (llmgw.router.admin) includes the dashboard's routes and hands it the
router's facts as `DashboardSources`; if llmgw.web imported the router, the two would form
a cycle again (issue #18). Checked in a fresh interpreter, so what other tests imported
does not hide an import.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.router import REPO


def _modules_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_the_dashboard_does_not_import_the_router() -> None:
    loaded = _modules_after("import llmgw.web")
    assert "llmgw.web.dashboard" in loaded
    assert [m for m in loaded if m.startswith("llmgw.router")] == []


def test_the_client_app_does_not_load_the_admin_side() -> None:
    loaded = _modules_after("import llmgw.router.app")
    assert "llmgw.router.app" in loaded
    assert [m for m in loaded if m == "llmgw.router.admin" or m.startswith("llmgw.web")] == []
