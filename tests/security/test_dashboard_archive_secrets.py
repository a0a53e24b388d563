"""A single-file inventory's secrets stay on the control host: the routers' dashboard archive
(the site copy every router gets, llmgw.apply.dashboard_site) holds the hosts, their groups
and the host vars the dashboard reads, nothing else.

The archive is the one apply sends: made by the site's own wiring (`hosts_for`) from a
site whose inventory is one file with the secrets operators keep there (the HF token, the
become and SSH passwords, a store URL with its password, a vault-ish name nobody listed),
then unpacked with GNU tar as the router's `unarchive` does and read back by llmgw's own
inventory reader, as the dashboard reads it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llmgw.apply import hosts_for
from llmgw.inventory import load_inventory
from llmgw.site import Site

# Values no test would write by chance: each one found anywhere in the archive is a leak.
SECRETS = {
    "llmgw_weights_hf_token": "hf_SECRETtoken0001",
    "ansible_become_password": "SECRETbecome0002",
    "ansible_ssh_pass": "SECRETssh0003",
    "ansible_password": "SECRETpass0004",
    "llmgw_router_store_url": "postgresql://llmgw:SECRETdb0005@db.example/llmgw",
    "llmgw_router_state_follow_password": "SECRETfollow0006",
    "site_api_key": "SECRETkey0007",
    "vault_blob": "SECRETblob0008",  # under a name no deny-list would know
}

INVENTORY = f"""all:
  vars:
    llmgw_weights_hf_token: {SECRETS["llmgw_weights_hf_token"]}
    ansible_become_password: {SECRETS["ansible_become_password"]}
    vault_blob: {SECRETS["vault_blob"]}
    llmgw_model_dirs: [/models]
  children:
    llmgw_routers:
      hosts:
        gw-1:
          ansible_host: 192.0.2.1
          llmgw_router_store_url: "{SECRETS["llmgw_router_store_url"]}"
          llmgw_router_state_follow_password: {SECRETS["llmgw_router_state_follow_password"]}
    llmgw_nodes:
      vars:
        ansible_ssh_pass: {SECRETS["ansible_ssh_pass"]}
      children:
        gpus:
          vars:
            llmgw_labels: {{tier: h100}}
            site_api_key: {SECRETS["site_api_key"]}
          hosts:
            gpu-1:
              ansible_host: 192.0.2.11
              ansible_password: {SECRETS["ansible_password"]}
              llmgw_failure_domain: room-a
            gpu-2:
              ansible_host: 192.0.2.12
              llmgw_node_state: cordoned
              llmgw_cache_dir: /srv/cache
"""


@pytest.fixture
def unpacked(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "catalog").mkdir(parents=True)
    (site / "catalog" / "models.yaml").write_text("models: []\n")
    (site / "hosts.yml").write_text(INVENTORY)
    (site / "llmgw.yaml").write_text("catalog: catalog\ninventory: hosts.yml\nstate: state.json\nfacts: facts\n")
    dashboard = hosts_for(Site.load(site)).dashboard_site
    assert dashboard is not None
    bundle = dashboard.pack(tmp_path / "site.tar")
    out = tmp_path / "router-site"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(bundle), "-C", str(out)], check=True)  # as unarchive does on a router
    return out


def test_no_secret_of_the_inventory_reaches_the_archive(unpacked: Path) -> None:
    leaked = {name: str(path.relative_to(unpacked)) for path in unpacked.rglob("*") if path.is_file()
              for name, value in SECRETS.items() if value.encode() in path.read_bytes()}
    assert leaked == {}, f"secrets in the routers' dashboard archive: {leaked}"
    text = (unpacked / "hosts.yml").read_text()
    for name in SECRETS:
        assert name not in text


def test_the_dashboard_still_reads_the_hosts_their_groups_and_its_vars(unpacked: Path,
                                                                      tmp_path: Path) -> None:
    original = load_inventory(tmp_path / "site" / "hosts.yml")
    copy = load_inventory(unpacked / "hosts.yml")
    assert sorted(copy.hosts) == ["gpu-1", "gpu-2", "gw-1"]
    assert sorted(copy.routers) == ["gw-1"] and sorted(copy.nodes) == ["gpu-1", "gpu-2"]
    for name, host in original.hosts.items():
        got = copy.hosts[name]
        assert got.groups == host.groups, name
        assert (got.node_state, got.labels, got.model_dirs, got.cache_dir, got.mgmt_address) == \
               (host.node_state, host.labels, host.model_dirs, host.cache_dir, host.mgmt_address), name
    assert copy.hosts["gpu-1"].vars["llmgw_failure_domain"] == "room-a"
    assert copy.hosts["gpu-2"].node_state == "cordoned"
