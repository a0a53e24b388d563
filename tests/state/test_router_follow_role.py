"""Routers on a PostgreSQL state follow it themselves (#14): role llmgw_router's
`llmgw_router_state_follow` runs `llmgw state follow` as a second unit beside the router.

The role decides (off for a file state, whose apply passes no URL; a URL with a password
refused), renders the follower's unit, secrets file and site file as it would on a router,
and the unit's own command, run here against a real PostgreSQL, keeps the router's state
file at the newest serial (never stepping back over a newer one apply delivered)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.state import State
from llmgw.state.select import open_backend
from llmgw.yamlio import atomic_write
from tests.support.ansible import REPO, playbook
from tests.support.waiting import wait_until

ROLE = REPO / "roles" / "llmgw_router"

DECIDE = """\
- hosts: localhost
  connection: local
  gather_facts: false
  vars: {{llmgw_router_wheelhouse: "{wheelhouse}"}}
  tasks:
    - {{ansible.builtin.include_role: {{name: llmgw_router, tasks_from: preflight}},
       vars: {{llmgw_router_state_follow: true, llmgw_router_state_url: ""}}}}
    - ansible.builtin.set_fact: {{file_state: "{{{{ _llmgw_router_follow }}}}"}}
    - {{ansible.builtin.include_role: {{name: llmgw_router, tasks_from: preflight}},
       vars: {{llmgw_router_state_follow: false, llmgw_router_state_url: "postgresql://r@db/llmgw"}}}}
    - ansible.builtin.set_fact: {{not_asked: "{{{{ _llmgw_router_follow }}}}"}}
    - {{ansible.builtin.include_role: {{name: llmgw_router, tasks_from: preflight}},
       vars: {{llmgw_router_state_follow: true, llmgw_router_state_url: "postgresql://r@db/llmgw",
              llmgw_router_state_follow_url: "postgresql://r@10.0.0.9/llmgw"}}}}
    - ansible.builtin.set_fact:
        {{following: "{{{{ _llmgw_router_follow }}}}", url: "{{{{ _llmgw_router_follow_url }}}}"}}
    - block:
        - {{ansible.builtin.include_role: {{name: llmgw_router, tasks_from: preflight}},
           vars: {{llmgw_router_state_follow: true, llmgw_router_state_url: "postgresql://r:hunter2@db/llmgw"}}}}
      rescue:
        - ansible.builtin.set_fact: {{refused: "{{{{ ansible_failed_result.msg }}}}"}}
    - ansible.builtin.copy:
        dest: "{out}"
        content: "{{{{ {{'file_state': file_state, 'not_asked': not_asked, 'following': following, 'url': url,
                     'refused': refused | default('')}} | to_json }}}}"
"""

RENDER = """\
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [{defaults}]
  vars:
    _llmgw_router_dir: "{router_dir}"
    _llmgw_router_follow_url: "{url}"
  tasks:
    - ansible.builtin.template: {{src: {role}/templates/llmgw-router-follow.service.j2, dest: "{out}/follow.service"}}
    - ansible.builtin.template: {{src: {role}/templates/state-follow.env.j2, dest: "{out}/state-follow.env"}}
    - ansible.builtin.template: {{src: {role}/templates/follow-site.yaml.j2, dest: "{home}/follow/llmgw.yaml"}}
"""


def test_the_role_follows_only_a_postgresql_state_and_refuses_a_password_in_its_url(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse.tar"
    wheelhouse.write_bytes(b"not read here")
    play, out = tmp_path / "decide.yml", tmp_path / "decided.json"
    play.write_text(DECIDE.format(wheelhouse=wheelhouse, out=out))
    shown = playbook(play).stdout
    decided = json.loads(out.read_text())
    assert decided["file_state"] is False  # a file state: apply passes no URL, nothing to follow
    assert decided["not_asked"] is False
    assert decided["following"] is True and decided["url"] == "postgresql://r@10.0.0.9/llmgw"
    assert "without a password" in decided["refused"] and "hunter2" not in decided["refused"]
    assert "hunter2" not in shown


@pytest.mark.postgres
def test_the_rendered_follower_keeps_the_routers_file_at_the_newest_serial(tmp_path: Path, pg_state: str) -> None:
    password = os.environ["LLMGW_STATE_PASSWORD"]
    home, out, router_dir = tmp_path / "home", tmp_path / "out", tmp_path / "router"
    (home / "follow").mkdir(parents=True)
    out.mkdir()
    (router_dir / "venv" / "bin").mkdir(parents=True)
    (router_dir / "venv" / "bin" / "llmgw").symlink_to(Path(sys.executable).parent / "llmgw")
    play = tmp_path / "render.yml"
    play.write_text(RENDER.format(defaults=ROLE / "defaults" / "main.yml", role=ROLE, out=out, home=home,
                                  router_dir=router_dir, url=pg_state))
    playbook(play, {"llmgw_router_home": str(home), "llmgw_router_config_dir": str(out),
                    "llmgw_router_state_follow_password": password})
    unit = (out / "follow.service").read_text()
    secrets = (out / "state-follow.env").read_text()
    assert "LLMGW_STATE_PASSWORD=" not in unit and f'LLMGW_STATE_PASSWORD="{password}"' in secrets
    assert f"EnvironmentFile={out}/state-follow.env" in unit and f"ReadWritePaths={home}" in unit
    assert "NoNewPrivileges=yes" in unit and "User=llmgw-router" in unit
    checked = subprocess.run(["systemd-analyze", "verify", f"{out / 'follow.service'}:llmgw-router-follow.service"],
                             capture_output=True, text=True, timeout=60, check=False)
    problems = [ln for ln in checked.stderr.splitlines() if "follow.service" in ln
                and "User=" not in ln and "Group=" not in ln and "EnvironmentFile" not in ln]
    assert not problems, checked.stderr

    # The unit's own command line, as systemd would run it (its words are plain here).
    exec_start = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert argv[1:] == ["-C", f"{home}/follow", "state", "follow", "--out", f"{home}/state.json"]
    env = {k: v for k, v in os.environ.items() if k != "LLMGW_STATE_PASSWORD"}
    env["LLMGW_STATE_PASSWORD"] = shlex.split(secrets.split("LLMGW_STATE_PASSWORD=", 1)[1].splitlines()[0])[0]
    state_file = home / "state.json"

    def serial() -> int:
        try:
            return int(json.loads(state_file.read_text())["serial"])
        except (OSError, ValueError):
            return 0

    log = tmp_path / "follow.log"
    with log.open("wb") as sink, open_backend(pg_state, root=tmp_path) as writer:
        proc = subprocess.Popen(argv, cwd=home, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            s = writer.write(State(lineage=""), expect_serial=0)
            wait_until(lambda: serial() == 1, 60, f"serial 1 in the router's file ({log.read_text()[-500:]})")
            s = writer.write(s, expect_serial=1)
            wait_until(lambda: serial() == 2, 30, "serial 2 through NOTIFY")
            # apply delivered a newer serial than the follower is handed next: it is kept.
            atomic_write(state_file, s.model_copy(update={"serial": 9}).to_json())
            writer.write(s, expect_serial=2)
            wait_until(lambda: "serial 3 not written" in log.read_text() or proc.poll() is not None, 30,
                       "the follower to be handed serial 3")
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(30)
        assert serial() == 9, log.read_text()
        assert rc == 0, log.read_text()
    assert not (home / "follow" / ".llmgw").exists()  # nothing kept in the follower's site folder
