"""Role llmgw_controller's unit and secrets file, rendered by Ansible as the role renders
them: the password only in the root-only environment file, every word of ExecStart quoted,
and the unit accepted by `systemd-analyze verify`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.ansible import REPO, playbook

ROLE = REPO / "roles" / "llmgw_controller"

PLAYBOOK = """\
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [{defaults}]
  tasks:
    - ansible.builtin.template:
        src: {role}/templates/llmgw-controller.service.j2
        dest: "{out}/llmgw-controller.service"
    - ansible.builtin.template: {{src: {role}/templates/controller.env.j2, dest: "{out}/controller.env"}}
"""


def render(tmp_path: Path, extra: dict[str, object]) -> tuple[str, str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK.format(defaults=ROLE / "defaults" / "main.yml", role=ROLE, out=tmp_path))
    playbook(play, extra)
    return (tmp_path / "llmgw-controller.service").read_text(), (tmp_path / "controller.env").read_text()


def test_the_password_stays_out_of_the_unit_and_every_word_is_quoted(tmp_path: Path) -> None:
    secret = 'pa"ss$wo`rd\\x'
    unit, env = render(tmp_path, {"llmgw_controller_state_password": secret,
                                  "llmgw_controller_engine_key_secret": "ab" * 32,
                                  "llmgw_controller_branch": "release 1; rm -rf /",
                                  "llmgw_controller_llmgw": "/bin/true"})
    assert secret not in unit
    assert "LLMGW_STATE_PASSWORD" not in unit and "EnvironmentFile=/etc/llmgw/controller.env" in unit
    assert 'LLMGW_STATE_PASSWORD="pa\\"ss\\$wo\\`rd\\\\x"' in env
    assert f'LLMGW_ENGINE_KEY_SECRET="{"ab" * 32}"' in env and "ab" * 32 not in unit
    assert '"--branch" "release 1; rm -rf /"' in unit  # one word, never split or run
    assert '"--listen" "127.0.0.1:8095"' in unit and "NoNewPrivileges=yes" in unit
    # The controller's runtime (state, runs, secrets) outside the clone it checks commits out in.
    assert 'LLMGW_CONTROLLER_RUNTIME_DIR="/var/lib/llmgw-controller/runtime"' in env
    # systemd-analyze checks the unit as systemd would load it (its binary must exist: /bin/true).
    unit_file = tmp_path / "llmgw-controller.service"
    unit_file.write_text(unit.replace("EnvironmentFile=/etc/llmgw/controller.env",
                                      f"EnvironmentFile={tmp_path / 'controller.env'}"))
    checked = subprocess.run(["systemd-analyze", "verify", f"{unit_file}:llmgw-controller.service"],
                             capture_output=True, text=True, timeout=60, check=False)
    problems = [ln for ln in checked.stderr.splitlines() if "llmgw-controller.service" in ln
                and "User=" not in ln and "Group=" not in ln]
    assert not problems, checked.stderr


def test_the_demand_listener_is_a_word_of_its_own(tmp_path: Path) -> None:
    unit, _env = render(tmp_path, {"llmgw_controller_demand_listen": "10.0.0.5:8096"})
    assert '"--demand-listen" "10.0.0.5:8096"' in unit
    (tmp_path / "plain").mkdir()
    plain, _env = render(tmp_path / "plain", {})
    assert "--demand-listen" not in plain


ROUTER = REPO / "roles" / "llmgw_router"
ROUTER_PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [{defaults}]
  vars:
    _llmgw_router_dir: /opt/llmgw/router/x
    _llmgw_router_dashboard: false
  tasks:
    - ansible.builtin.template: {{src: {role}/templates/llmgw-router.service.j2, dest: "{out}/router.service"}}
    - ansible.builtin.template: {{src: {role}/templates/router.env.j2, dest: "{out}/router.env"}}
    - ansible.builtin.copy: {{content: "{{{{ llmgw_router_controller_token }}}}", dest: "{out}/controller.token"}}
      no_log: true
"""


def test_a_router_pointed_at_the_controller_asks_it_and_never_shows_the_token(tmp_path: Path) -> None:
    """The router's unit runs the controller's client; its URL and name are in the root-only env
    file; the token (a 0600 file apply writes) is in neither."""
    (tmp_path / "out").mkdir()
    play = tmp_path / "play.yml"
    play.write_text(ROUTER_PLAY.format(defaults=ROUTER / "defaults" / "main.yml", role=ROUTER, out=tmp_path / "out"))
    token, other = "llmgw-router.localhost." + "c" * 64, "llmgw-router.r2." + "d" * 64
    # What apply passes: every router's token; the host takes its own entry alone.
    done = playbook(play, {"llmgw_router_controller_url": "http://10.0.0.5:8096",
                           "llmgw_router_controller_tokens": {"localhost": token, "r2": other}})
    assert (tmp_path / "out" / "controller.token").read_text() == token
    unit = (tmp_path / "out" / "router.service").read_text()
    secrets = (tmp_path / "out" / "router.env").read_text()
    assert '"--activator" "llmgw.router.activator:factory"' in unit
    assert 'LLMGW_CONTROLLER_URL="http://10.0.0.5:8096"' in secrets and 'LLMGW_ROUTER_NAME="localhost"' in secrets
    assert token not in unit and token not in secrets and token not in done.stdout and other not in done.stdout


def test_the_service_is_told_its_home_where_the_operator_token_is(tmp_path: Path) -> None:
    """The controller makes the operator token in $LLMGW_CONTROLLER_HOME; without it the service
    would look in the default home whatever llmgw_controller_home says."""
    _unit, env = render(tmp_path, {"llmgw_controller_home": "/srv/ctl"})
    assert 'LLMGW_CONTROLLER_HOME="/srv/ctl"' in env.splitlines()
