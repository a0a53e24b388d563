"""playbooks/drain.yml's guard: shards stop only where every router loaded the draining state.

The guard play is taken from the playbook itself and run for real by Ansible on the control
host, after a play that stands in for router.yml's wait (it registers what each router
answered: serial 7, an older serial, or nothing at all, as an unreachable router leaves).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from llmgw import ansible_content
from llmgw.runner import run_playbook

GUARD = "Check that every router holds the draining state"


def guard(tmp_path: Path, answers: dict[str, int | None]) -> tuple[bool, str]:
    plays = yaml.safe_load(ansible_content.playbook("drain.yml").read_text())
    [play] = [p for p in plays if p.get("name") == GUARD]
    routers = "\n".join(f"{r} ansible_connection=local ansible_python_interpreter={sys.executable}" for r in answers)
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[llmgw_routers]\n{routers}\n[llmgw_nodes]\n"
                   f"n1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    # One task per serial answered, each on the routers that answered it; None: no answer.
    serials = sorted({s for s in answers.values() if s is not None})
    stand_in = {"name": "What each router answered", "hosts": "llmgw_routers", "gather_facts": False,
                "tasks": [{"name": f"Answer serial {s}",
                           "ansible.builtin.set_fact": {"__llmgw_wait": {"json": {"serial": s}}},
                           "when": f"inventory_hostname in {[r for r, a in answers.items() if a == s]!r}"}
                          for s in serials]}
    book = tmp_path / "guard.yml"
    book.write_text(yaml.safe_dump([stand_in, play]))
    result = run_playbook(book, inv, extravars={"llmgw_apply_targets": "n1", "llmgw_wait_serial": 7})
    return "n1" not in result.host_errors, "\n".join([*result.host_errors.values(), *result.output_tail])


@pytest.mark.slow
def test_shards_stop_only_once_every_router_holds_the_state(tmp_path: Path) -> None:
    assert guard(tmp_path, {"r1": 7, "r2": 8})[0]
    ok, out = guard(tmp_path, {"r1": 7, "r2": 6})
    assert not ok and "router r2 did not load state serial 7" in out, out
    ok, out = guard(tmp_path, {"r1": None, "r2": 7})
    assert not ok and "router r1 did not load state serial 7" in out, out
