"""`llmgw state ...` and `llmgw apply` over a PostgreSQL state shared by two site checkouts.

The sites have no hosts: their catalog holds one on-demand model, so a plan only tells the
routers about it (an `update`), and apply writes the state without running Ansible. That
keeps these tests about the state: who may write it, when, and what is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.state.select import open_backend
from tests.support.cli import Result, run_cli

REPO = Path(__file__).resolve().parents[2]

CATALOG = """\
models:
  - name: tiny
    source: hf://org/tiny/tiny.gguf
    scaling: {min: 0, max: 1}
    profiles:
      - name: cpu
        engine: llamacpp
"""
HOSTS = "all:\n  children:\n    llmgw_nodes:\n      hosts: {}\n"


def make_site(root: Path, state: str) -> Path:
    (root / "catalog").mkdir(parents=True)
    (root / "llmgw.yaml").write_text(f"inventory: hosts.yml\n# where the state lives\nstate: {state}\n")
    (root / "hosts.yml").write_text(HOSTS)
    (root / "catalog" / "tiny.yaml").write_text(CATALOG)
    return root


def cli(site: Path, *args: str) -> Result:
    return run_cli("-C", str(site), *args)


def ok(site: Path, *args: str) -> Result:
    result = cli(site, *args)
    assert result.exit_code in (0, 2), f"llmgw {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result


# The stand-in for site A's apply while it runs: a process that takes the state's lock as
# apply does, says so, writes one serial when told to, and exits (or is killed).
HOLDER = """
import sys
from pathlib import Path
from llmgw.site import Site
from llmgw.state import WriteMeta
from llmgw.state.select import backend_for

site = Site.load(Path(sys.argv[1]))
with backend_for(site) as backend, backend.lock("apply") as info:
    print(info.id, flush=True)
    if sys.stdin.readline().strip() == "write":
        state = backend.read()
        backend.write(state.model_copy(update={"models": []}), expect_serial=state.serial, meta=WriteMeta("apply"))
"""


@pytest.fixture
def sites(tmp_path: Path, pg_state: str) -> tuple[Path, Path]:
    return make_site(tmp_path / "site-a", pg_state), make_site(tmp_path / "site-b", pg_state)


pytestmark = pytest.mark.postgres


def test_two_checkouts_race_one_applies_the_other_is_refused_then_stale(sites: tuple[Path, Path]) -> None:
    a, b = sites
    ok(a, "plan", "--out", str(a / "plan.json"))
    ok(b, "plan", "--out", str(b / "plan.json"))
    env = {**os.environ, "LLMGW_AUTHOR": "alice@site-a"}
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(a)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, env=env, cwd=REPO) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        lock_id = holder.stdout.readline().strip()
        assert lock_id, "site A did not take the lock"
        info = json.loads(ok(b, "state", "lock-info", "--json").stdout)["lock"]
        assert info["id"] == lock_id and info["operation"] == "apply" and "alice@site-a" in info["holder"]
        refused = cli(b, "apply", str(b / "plan.json"), "--auto-approve")
        assert refused.exit_code == 1
        assert "locked by alice@site-a" in refused.stderr and lock_id in refused.stderr, refused.stderr
        holder.stdin.write("write\n")
        holder.stdin.close()
        assert holder.wait(30) == 0
    stale = cli(b, "apply", str(b / "plan.json"), "--auto-approve")
    assert stale.exit_code == 1 and "stale" in stale.stderr and "llmgw plan --out" in stale.stderr, stale.stderr
    assert json.loads(ok(b, "state", "lock-info", "--json").stdout)["lock"] is None
    # Re-planned, B applies; A, whose saved plan is now older, is refused in turn.
    ok(b, "plan", "--out", str(b / "plan.json"))
    ok(b, "apply", str(b / "plan.json"), "--auto-approve")
    assert cli(a, "apply", str(a / "plan.json"), "--auto-approve").exit_code == 1
    serials = json.loads(ok(a, "state", "list", "--json").stdout)["serials"]
    assert [(s["serial"], s["operation"]) for s in serials] == [(2, "apply"), (1, "apply")]
    assert serials[1]["author"] == "alice@site-a" and serials[0]["author"] and serials[0]["plan"]


def test_push_refuses_an_older_serial_and_says_what_forcing_loses(sites: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = sites
    ok(a, "apply", "--auto-approve")
    old = tmp_path / "old.json"
    ok(a, "state", "pull", "--out", str(old))
    assert json.loads(old.read_text())["serial"] == 1
    ok(b, "scale", "tiny", "--min", "0", "--max", "2")
    ok(b, "apply", "--auto-approve")
    refused = cli(a, "state", "push", str(old))
    assert refused.exit_code == 1
    assert "serial 1 is not newer than serial 2" in refused.stderr and "--force" in refused.stderr
    assert json.loads(ok(a, "state", "show", "--json").stdout)["serial"] == 2
    forced = ok(a, "state", "push", str(old), "--force")
    assert "as serial 3" in forced.stdout
    shown = json.loads(ok(a, "state", "show", "1", "--json").stdout)
    assert shown["serial"] == 1 and shown["models"][0]["scaling"]["max"] == 1
    listed = json.loads(ok(b, "state", "list", "--json").stdout)["serials"]
    assert [s["operation"] for s in listed] == ["push", "apply", "apply"] and all(s["author"] for s in listed)


def test_a_password_in_llmgw_yaml_is_refused_with_its_line(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site", "postgresql://llmgw:hunter2-pw@127.0.0.1/llmgw")
    result = cli(site, "plan")
    assert result.exit_code == 1
    assert "llmgw.yaml:3" in result.stderr and "LLMGW_STATE_PASSWORD" in result.stderr
    assert "hunter2-pw" not in result.stderr + result.stdout


def test_migrate_a_local_state_keeps_serial_and_lineage(tmp_path: Path, pg_state: str) -> None:
    local = make_site(tmp_path / "local", "state.json")
    ok(local, "apply", "--auto-approve")
    before = json.loads(ok(local, "state", "show", "--json").stdout)
    secret = local / "llmgw-engine-keys.secret"
    if not secret.exists():
        secret.write_text("ab" * 32 + "\n")
        secret.chmod(0o600)
    moved = ok(local, "state", "migrate", "--to", pg_state)
    assert "state:" in moved.stdout
    carried = local / ".llmgw" / "llmgw-engine-keys.secret"  # beside the PostgreSQL state's local copy
    assert carried.read_text() == secret.read_text() and carried.stat().st_mode & 0o777 == 0o600
    shared = make_site(tmp_path / "shared", pg_state)
    after = json.loads(ok(shared, "state", "show", "--json").stdout)
    assert (after["serial"], after["lineage"]) == (before["serial"], before["lineage"])
    assert "No changes" in ok(shared, "plan").stdout
    again = cli(local, "state", "migrate", "--to", pg_state)
    assert again.exit_code == 1 and "not empty" in again.stderr


def test_lock_info_and_unlock_of_a_dead_holder(sites: tuple[Path, Path], pg_state: str) -> None:
    a, _b = sites
    with open_backend(pg_state, root=a) as other:
        held = other.lock("apply")
        info = held.__enter__()
        try:
            table = ok(a, "state", "lock-info").stdout
            assert info.id in table and "apply" in table
            assert cli(a, "state", "unlock", "nope", "--yes").exit_code == 1
            broke = ok(a, "state", "unlock", info.id, "--yes")
            assert info.id in broke.stdout
            assert json.loads(ok(a, "state", "lock-info", "--json").stdout)["lock"] is None
        finally:
            held.__exit__(None, None, None)


def test_status_shows_serial_author_and_lock_holder(sites: tuple[Path, Path], pg_state: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    a, _b = sites
    monkeypatch.setenv("LLMGW_AUTHOR", "carol@bastion")
    ok(a, "apply", "--auto-approve")
    with open_backend(pg_state, root=a) as other, other.lock("apply") as held:
        view = json.loads(ok(a, "status", "--json", "--no-router").stdout)["state"]
        assert view["serial"] == 1 and view["written_by"] == "carol@bastion" and view["operation"] == "apply"
        assert view["lock"]["id"] == held.id and view["lock"]["holder"] == held.holder
        line = ok(a, "status", "--no-router").stdout
        assert "State: serial 1, written by carol@bastion" in line and f"lock id {held.id}" in line


def test_the_dashboard_overview_names_the_writer_and_the_lock_holder(sites: tuple[Path, Path], pg_state: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from llmgw.views import Runtime, SiteDataCache
    from llmgw.web.dashboard import DashboardSources, dashboard_router, handed_in

    a, _b = sites
    monkeypatch.setenv("LLMGW_AUTHOR", "dave <b>@bastion")
    ok(a, "apply", "--auto-approve")
    app = FastAPI()
    app.include_router(dashboard_router(DashboardSources(site=SiteDataCache(a),
                                                         runtime=handed_in(Runtime.unknown("no router here")))))
    with open_backend(pg_state, root=a) as other, other.lock("apply") as held, TestClient(app) as client:
        page = client.get("/").text
    assert "State: serial 1, written by dave &lt;b&gt;@bastion (apply)" in page  # escaped
    assert f"lock id {held.id}" in page


def test_apply_waits_for_the_lock_when_asked(sites: tuple[Path, Path]) -> None:
    a, b = sites
    env = {**os.environ, "LLMGW_AUTHOR": "alice@site-a"}
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(a)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, env=env, cwd=REPO) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip()
        with subprocess.Popen([str(Path(sys.executable).parent / "llmgw"), "-C", str(b), "apply", "--auto-approve",
                               "--lock-timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as waiter:
            assert waiter.stderr is not None
            line = waiter.stderr.readline()  # the event: it says it waits, and for whom
            assert "Waiting for the state's lock, held by alice@site-a" in line, line
            holder.stdin.write("done\n")
            holder.stdin.close()
            assert holder.wait(30) == 0
            out, err = waiter.communicate(timeout=120)
            assert waiter.returncode == 0, err
            assert "Apply complete!" in out
