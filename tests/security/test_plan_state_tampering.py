"""Plans and state are input like the catalog: a value edited into a saved plan or the state
file is refused on load, naming the file, the field and what to do, before it can reach a
unit file, a host path or a router's idea of where an engine is (issue #32).

Every test drives the real CLI in a child process on a copy of the example site (a recorded
site: `apply` would refuse to contact its hosts anyway, so each `apply` here must be refused
*before* that guard, by the plan's own check, and the message says which check it was).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.security.test_catalog_hostile import llmgw, refused
from tests.support.example_site import example_site

# What the issue reproduced: a unit directive smuggled in as a fabric id. `+` runs it as root
# outside every sandbox setting.
INJECTED = "ib0\n[Service]\nExecStartPre=+/bin/sh -c 'id > /tmp/PWNED'"
RECORDED = "this is a recorded site"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The example site with the state a full apply of its plan leaves."""
    return example_site(tmp_path, state=True)


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    """The example site with no state yet: its plan creates every replica."""
    return example_site(tmp_path, state=False)


def saved_plan(root: Path) -> tuple[Path, dict[str, Any]]:
    out = root / "plan.json"
    proc = llmgw(root, "plan", "--out", str(out), child=True)
    assert proc.exit_code == 0 and out.is_file(), proc.stdout + proc.stderr
    return out, json.loads(out.read_text())


def new_replica(plan: dict[str, Any], *, multi_node: bool = False) -> dict[str, Any]:
    found = [r for r in plan["desired"]["replicas"] if r["status"] == "new" and (len(r["shards"]) > 1) == multi_node]
    assert found, "the example's plan creates such a replica"
    return found[0]


def replica_index(plan: dict[str, Any], replica: dict[str, Any]) -> int:
    return [r["id"] for r in plan["desired"]["replicas"]].index(replica["id"])


def write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def test_a_saved_plan_whose_fabric_adds_a_unit_directive_is_refused_by_show_and_apply(bare: Path) -> None:
    path, plan = saved_plan(bare)
    replica = new_replica(plan, multi_node=True)
    replica["fabric"] = INJECTED
    write(path, plan)
    field = re.escape(f"desired.replicas[{replica_index(plan, replica)}].fabric")
    for verb in (("show", str(path)), ("show", str(path), "--format", "json"),
                 ("apply", str(path), "--auto-approve")):
        err = refused(llmgw(bare, *verb, child=True), rf"{re.escape(str(path))} is not a llmgw plan: {field}: .*"
                                                      r"control character '\\n'")
        assert RECORDED not in err  # refused by the plan's check, before the recorded-site guard
        assert "llmgw plan --out FILE" in err  # what to do
    assert not (bare / "PWNED").exists() and not Path("/tmp/PWNED").exists()


def test_a_state_whose_lineage_carries_a_unit_directive_is_refused_by_plan(site: Path) -> None:
    state_file = site / "state.json"
    state = json.loads(state_file.read_text())
    state["lineage"] = INJECTED
    write(state_file, state)
    for verb in (("plan",), ("explain", "qwen2.5-7b"), ("plan", "--out", str(site / "plan.json"))):
        err = refused(llmgw(site, *verb, child=True), rf"state file {re.escape(str(state_file))}.*: lineage: ")
        assert "restore it" in err
    assert not (site / "plan.json").exists()


def _first_replica_on(state: dict[str, Any], address: str) -> tuple[int, dict[str, Any]]:
    for i, r in enumerate(state["replicas"]):
        if r["endpoint"].startswith(f"http://{address}:"):
            return i, r
    raise AssertionError(f"no replica at {address}")


@pytest.mark.parametrize("endpoint", [
    "http://198.51.100.99:{port}",   # another host, the right port: only the inventory knows
    "http://192.0.2.11:{other}",     # the right host, another port
    "http://192.0.2.11@198.51.100.99:{port}",  # userinfo: a URL that goes elsewhere
    "https://192.0.2.11:{port}",
    "http://192.0.2.11:{port}/v1/../../admin",
    "http://192.0.2.11:{port}\r\nX-Injected: 1",
])
def test_a_tampered_endpoint_in_the_state_is_refused(site: Path, endpoint: str) -> None:
    state_file = site / "state.json"
    state = json.loads(state_file.read_text())
    i, replica = _first_replica_on(state, "192.0.2.11")  # gpu-node-01's address
    port = next(s["port"] for s in replica["shards"] if s["rank"] == 0)
    replica["endpoint"] = endpoint.format(port=port, other=port + 1)
    write(state_file, state)
    err = refused(llmgw(site, "plan", child=True),
                  rf"{re.escape(str(state_file))}.*replicas\[{i}\](\.endpoint|: endpoint)")
    assert "restore" in err


def test_a_tampered_endpoint_in_a_saved_plan_is_refused(bare: Path) -> None:
    path, plan = saved_plan(bare)
    replica = new_replica(plan)
    replica["endpoint"] = re.sub(r"//[^:]+:", "//198.51.100.99:", replica["endpoint"])
    write(path, plan)
    for verb in (("show", str(path)), ("apply", str(path), "--auto-approve")):
        err = refused(llmgw(bare, *verb, child=True),
                      re.escape(f"desired.replicas[{replica_index(plan, replica)}]") + r": .*endpoint")
        assert RECORDED not in err


@pytest.mark.parametrize("cache_name", ["../../../etc/cron.d/llmgw", "0123456789abcdef-../../x", "..",
                                        "0123456789abcdef-tiny.gguf"])  # the last: well formed, another source's
def test_a_tampered_cache_name_in_a_saved_plan_is_refused(bare: Path, cache_name: str) -> None:
    path, plan = saved_plan(bare)
    replica = new_replica(plan)
    replica["cache_name"] = cache_name
    write(path, plan)
    for verb in (("show", str(path)), ("apply", str(path), "--auto-approve")):
        err = refused(llmgw(bare, *verb, child=True),
                      re.escape(f"desired.replicas[{replica_index(plan, replica)}]") + r".*cache_name")
        assert RECORDED not in err


@pytest.mark.parametrize("cache_name", ["../../../etc/cron.d/llmgw", "a/b", ".hidden"])
def test_a_tampered_cache_name_in_the_state_is_refused(site: Path, cache_name: str) -> None:
    state_file = site / "state.json"
    state = json.loads(state_file.read_text())
    state["replicas"][0]["cache_name"] = cache_name
    write(state_file, state)
    refused(llmgw(site, "plan", child=True), rf"{re.escape(str(state_file))}.*replicas\[0\]\.cache_name")


@pytest.mark.parametrize(("field", "value"), [
    ("unit", "llmgw-router.service"),          # another unit of llmgw's: stopping it stops the router
    ("unit", "llmgw-x-1-0.service\nExecStart=/bin/sh"),
    ("node", "gpu-node-01\n[Service]"),
    ("node", "../../etc"),
])
def test_a_tampered_shard_in_the_state_is_refused(site: Path, field: str, value: object) -> None:
    state_file = site / "state.json"
    state = json.loads(state_file.read_text())
    state["replicas"][0]["shards"][0][field] = value
    write(state_file, state)
    refused(llmgw(site, "plan", child=True), rf"{re.escape(str(state_file))}.*replicas\[0\]")


def test_a_plan_edited_after_saving_is_refused_by_apply(bare: Path) -> None:
    path, plan = saved_plan(bare)
    # As saved, the plan passes its checks and apply goes on to the recorded-site guard.
    refused(llmgw(bare, "apply", str(path), "--auto-approve", child=True), RECORDED)
    # An edit every field check passes (other GPUs of the same node) is still not the plan.
    replica = new_replica(plan)
    shard = replica["shards"][0]
    shard["gpus"] = [7 - g for g in shard["gpus"]]
    write(path, plan)
    assert llmgw(bare, "show", str(path), child=True).exit_code == 0  # a well-formed plan
    err = refused(llmgw(bare, "apply", str(path), "--auto-approve", child=True),
                  rf"{re.escape(str(path))} is not the plan its inputs give: at "
                  + re.escape(f"desired.replicas[{replica_index(plan, replica)}].shards[0].gpus"))
    assert "edited after" in err and RECORDED not in err


def test_a_plan_whose_inputs_moved_on_is_refused_by_apply(bare: Path) -> None:
    path, _ = saved_plan(bare)
    hosts = bare / "inventory" / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("gpu-node-01: {ansible_host: 192.0.2.11}",
                                               "gpu-node-01: {ansible_host: 192.0.2.11, llmgw_node_state: cordoned}"))
    err = refused(llmgw(bare, "apply", str(path), "--auto-approve", child=True),
                  rf"{re.escape(str(path))} was made from other inputs than the site holds now")
    assert RECORDED not in err


SHADOW = """\
models:
  - name: shadow
    source: {source}
    profiles:
      - {{name: l40s, engine: vllm, gpus: 1, gpu_class: L40S-48GB}}
  - name: shared-model
    source: file:///srv/models/shared-model
    profiles:
      - {{name: l40s, engine: vllm, gpus: 1, gpu_class: L40S-48GB}}
"""


@pytest.mark.parametrize("source", ["file:///etc/shadow", "file:///srv/models/../../etc/shadow"])
def test_plan_refuses_a_file_source_outside_every_model_dir(bare: Path, source: str) -> None:
    (bare / "catalog" / "shadow.yaml").write_text(SHADOW.format(source=source))
    proc = llmgw(bare, "plan", "--json", child=True)
    if proc.exit_code == 1:  # refused while validating the catalog (`..` in a file:// source)
        refused(proc, r"shadow\.yaml:\d+: .*\.\.")
        return
    assert proc.exit_code == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)
    placed = {r["model"]: r for r in plan["desired"]["replicas"]}
    assert "shadow" not in placed
    # The control: a source under the L40S hosts' llmgw_model_dirs (/srv/models) is placed there.
    assert {s["node"] for s in placed["shared-model"]["shards"]} <= {"l40s-01", "l40s-02"}
    unplaced = next(u for u in plan["unplaced"] if u["model"] == "shadow")
    reasons = {r["node"]: r["reason"] for r in unplaced["rejections"]}
    assert reasons["l40s-01"] == ("l40s-01: file:///etc/shadow is outside its llmgw_model_dirs (/srv/models); "
                                  "a file:// source must lie under one of them")


@pytest.mark.parametrize("address", ["198.51.100.99@192.0.2.11", "192.0.2.11:9999", "192.0.2.11/x"])
def test_an_inventory_address_that_is_not_a_host_is_refused(bare: Path, address: str) -> None:
    """A node's address becomes its replicas' endpoints: one with userinfo, a port or a path would
    send the routers (and their engine keys) somewhere else than the node."""
    hosts = bare / "inventory" / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("{ansible_host: 192.0.2.11}", f"{{ansible_host: '{address}'}}"))
    refused(llmgw(bare, "plan", child=True), r"hosts\.yml:\d+: host gpu-node-01: ansible_host is .*, expected an IP "
                                             "address or a DNS name")


def test_inputs_that_changed_without_changing_the_plan_leave_it_applicable(bare: Path) -> None:
    """The control for the two above: facts gathered again (the digest moves, the plan does not)."""
    path, _ = saved_plan(bare)
    facts = bare / "facts" / "cpu-01.json"
    facts.write_text(facts.read_text() + "\n")
    refused(llmgw(bare, "apply", str(path), "--auto-approve", child=True), RECORDED)
