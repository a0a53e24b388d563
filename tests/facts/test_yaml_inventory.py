"""The in-process reader of plain YAML inventories means what `ansible-inventory --list` means:
same hosts, groups and merged vars, on hand-written and generated inventories; anything it
does not handle goes to Ansible."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from llmgw.errors import InventoryError
from llmgw.inventory import _ansible_inventory, _plain_yaml_inventory, load_inventory

pytestmark = pytest.mark.slow  # runs ansible-inventory for the comparison

NESTED = """\
all:
  vars:
    llmgw_cache_dir: /var/cache/llmgw
    shared: from-all
    llmgw_labels: {tier: base}
  hosts:
    lonely: {ansible_host: 10.0.0.9}
  children:
    llmgw_nodes:
      vars: {shared: from-nodes, depth_one: yes}
      children:
        h100:
          vars:
            shared: from-h100
            llmgw_labels: {tier: h100, role: general}
          hosts:
            gpu-01: {ansible_host: 192.0.2.11}
            gpu-02:
              ansible_host: 192.0.2.12
              llmgw_node_state: cordoned
              shared: from-host
        a100:
          hosts:
            gpu-02:
            a100-01: {llmgw_failure_domain: 7, ratio: 0.5, flag: on, list: [1, two, {x: null}]}
    llmgw_routers:
      hosts:
        router-01:
        gpu-01: {late: value}
zeta:
  vars: {shared: from-zeta}
  hosts:
    a100-01:
alpha:
  vars: {shared: from-alpha}
  hosts:
    a100-01:
ungrouped:
  hosts:
    spare:
"""


def both(path: Path) -> None:
    fast = _plain_yaml_inventory(path)
    assert fast is not None, "a plain YAML inventory is read in-process"
    slow = _ansible_inventory(path)
    assert sorted(fast.hosts) == sorted(slow.hosts)
    for name, host in slow.hosts.items():
        assert fast.hosts[name] == host, name
        assert fast.hosts[name].vars == host.vars, name


def test_nested_groups_vars_precedence_and_ungrouped(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(NESTED)
    both(inv)
    fast = _plain_yaml_inventory(inv)
    assert fast is not None
    assert fast.hosts["gpu-02"].vars["shared"] == "from-host"
    assert fast.hosts["a100-01"].vars["shared"] == "from-zeta"  # same depth: by name, the last wins
    assert "ungrouped" in fast.hosts["spare"].groups and "ungrouped" in fast.hosts["lonely"].groups


def test_a_folder_of_yaml_files_read_in_name_order(tmp_path: Path) -> None:
    d = tmp_path / "inventory"
    d.mkdir()
    (d / "a.yml").write_text("llmgw_nodes:\n  hosts:\n    n1: {x: 1}\n    n2:\n  vars: {v: a}\n")
    (d / "b.yaml").write_text("llmgw_nodes:\n  hosts:\n    n1: {x: 2}\n  vars: {v: b}\n"
                              "llmgw_routers:\n  hosts:\n    r1:\n")
    both(d)


def _generated(rnd: random.Random) -> str:
    groups = [f"g{i}" for i in range(rnd.randint(2, 6))]
    hosts = [f"h{i:02d}" for i in range(rnd.randint(3, 12))]
    lines = ["all:", "  vars:", f"    v: all-{rnd.randint(0, 9)}", "  children:"]

    def emit(group: str, indent: int, budget: int) -> None:
        pad = " " * indent
        lines.append(f"{pad}{group}:")
        if rnd.random() < 0.7:
            lines.extend([f"{pad}  vars:", f"{pad}    v: {group}", f"{pad}    {group}_only: {rnd.randint(0, 99)}"])
        chosen = rnd.sample(hosts, rnd.randint(0, min(4, len(hosts))))
        if chosen:
            lines.append(f"{pad}  hosts:")
            for h in chosen:
                lines.append(f"{pad}    {h}: {{v: {h}-in-{group}}}" if rnd.random() < 0.3 else f"{pad}    {h}:")
        kids = [g for g in groups if g > group and budget > 0 and rnd.random() < 0.4]
        if kids:
            lines.append(f"{pad}  children:")
            for k in kids:
                emit(k, indent + 4, budget - 1)

    for g in groups:
        if rnd.random() < 0.8:
            emit(g, 4, 2)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(4))
def test_generated_inventories_agree_with_ansible(tmp_path: Path, seed: int) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(_generated(random.Random(seed)))
    if not _ansible_inventory(inv).hosts:
        pytest.skip("generated an inventory without hosts")  # not expected with these sizes
    both(inv)


@pytest.mark.parametrize("text", [
    "all:\n  hosts:\n    gpu-[01:04]:\n",  # a host range: Ansible expands it
    "all:\n  hosts:\n    gpu-01:2222:\n",  # a port in the name
    "all:\n  hosts:\n    gpu-01: {when: !unsafe '{{ x }}'}\n",  # a tag
    "all:\n  hosts:\n    gpu-01: {at: 2024-01-01}\n",  # a date: JSON would make it text
    "all:\n  children:\n    g:\n      vars: {ansible_group_priority: 5}\n      hosts: {gpu-01: }\n",
    "plugin: constructed\n",
])
def test_what_it_leaves_to_ansible(tmp_path: Path, text: str) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    assert _plain_yaml_inventory(inv) is None


def test_group_vars_beside_the_inventory_go_to_ansible(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu-01:\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("llmgw_node_state: draining\n")
    assert _plain_yaml_inventory(inv) is None
    assert load_inventory(inv).hosts["gpu-01"].node_state == "draining"


def test_bad_values_still_name_the_file_and_line(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu-01:\n      llmgw_node_state: sleeping\n")
    with pytest.raises(InventoryError, match=r"hosts.yml:3: host gpu-01: llmgw_node_state is 'sleeping'"):
        load_inventory(inv)
