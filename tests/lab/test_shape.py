"""The lab tests' one site builder (tests/support/lab.shape), without a container: what it
writes is what the inventory and site loaders read back."""

from __future__ import annotations

from pathlib import Path

from llmgw.inventory import load_inventory
from llmgw.site import Site
from tests.support.lab import TINY, Lab, shape, site_copy

HOSTS = """\
all:
  children:
    llmgw_nodes:
      hosts:
        node1: {ansible_host: 10.0.0.2, ansible_user: root, llmgw_node_state: ready}
        node2: {ansible_host: 10.0.0.3, ansible_user: root, llmgw_node_state: ready}
    llmgw_routers:
      hosts:
        node1:
"""


def test_shape_writes_catalog_host_variables_groups_and_site_lines(tmp_path: Path) -> None:
    site = site_copy(tmp_path)
    (site / "hosts.yml").write_text(HOSTS)
    (site / "catalog" / "other.yaml").write_text("models: []\n")
    it = Lab(site, "unused")
    shape(it, catalog={"a.yaml": TINY}, host_vars={"node1": {"llmgw_router_workers": 1}},
          groups={"llmgw_prometheus": {"hosts": {"node1": None}, "vars": {"llmgw_prometheus_listen": "10.0.0.2:9090"}}},
          config="prometheus: http://10.0.0.2:9090", facts=False)
    assert sorted(p.name for p in (site / "catalog").iterdir()) == ["a.yaml"]
    inv = load_inventory(site / "hosts.yml")
    assert inv.nodes["node1"].vars["llmgw_router_workers"] == 1 and inv.nodes["node1"].mgmt_address == "10.0.0.2"
    assert "llmgw_router_workers" not in inv.nodes["node2"].vars and list(inv.routers) == ["node1"]
    assert "llmgw_prometheus" in inv.nodes["node1"].groups
    assert Site.load(site).config.prometheus == "http://10.0.0.2:9090"
    shape(it, catalog={}, facts=False)  # an empty fleet: no catalog file left
    assert list((site / "catalog").iterdir()) == []
