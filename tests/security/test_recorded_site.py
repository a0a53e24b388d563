"""The recorded example site never reaches out: every verb that would contact its hosts
refuses with an error naming llmgw.yaml's `recorded:` line, and any Ansible run against
its inventory is refused too. Its addresses are documentation addresses (RFC 5737)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from llmgw.errors import RunnerError
from llmgw.inventory import load_inventory
from llmgw.runner import run_playbook
from tests.security.test_catalog_hostile import llmgw
from tests.support.example_site import example_site

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example"
DOCUMENTATION = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_site(tmp_path_factory.mktemp("recorded"), state=True)  # a state, so `logs` has replicas


@pytest.mark.parametrize("verb", [("apply", "--auto-approve"), ("facts",), ("logs", "llama-3.1-70b-1"),
                                  ("weights", "orphans", "--collect"), ("lab", "up", "--nodes", "1"),
                                  ("replicas", "--downloads", "--no-router")])
def test_verbs_that_contact_hosts_refuse(example: Path, verb: tuple[str, ...]) -> None:
    before = sorted(p.relative_to(example) for p in example.rglob("*"))
    proc = llmgw(example, *verb)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and proc.exit_code == 1, out
    assert re.search(r"^Error: .*llmgw\.yaml:\d+: this is a recorded site \(recorded: true\)", proc.stderr), out
    assert sorted(p.relative_to(example) for p in example.rglob("*")) == before  # nothing written


def test_any_ansible_run_against_its_inventory_is_refused(example: Path) -> None:
    with pytest.raises(RunnerError, match="a recorded site"):
        run_playbook(REPO / "playbooks" / "facts.yml", example / "inventory")


def test_plan_and_the_views_still_work(example: Path) -> None:
    for verb in (("plan",), ("nodes",), ("catalog", "validate", "--offline")):
        proc = llmgw(example, *verb)
        assert proc.exit_code in (0, 2) and "Traceback" not in proc.stderr, proc.stderr  # plan exits 2 on changes


def test_every_address_is_a_documentation_address() -> None:
    inventory = load_inventory(EXAMPLE / "inventory")
    for host in inventory.hosts.values():
        address = ipaddress.ip_address(host.vars["ansible_host"])
        assert any(address in net for net in DOCUMENTATION), (host.name, address)
    for path in EXAMPLE.rglob("*"):
        if path.is_file():
            for found in re.findall(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])", path.read_text()):
                assert any(ipaddress.ip_address(found) in net for net in DOCUMENTATION), (path, found)

