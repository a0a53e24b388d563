"""Fabrics the parser has not seen: three tiers, other names, GUIDs, port counts and
rates, written in the exact text of real captures (proven first, on the real ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.fabric import Fabric, parse_ibnetdiscover
from llmgw.fabric.parse import parse_graph
from tests.support.fabric_gen import SWITCH_BASE, Built, synth_from_graph, three_tier

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ibnetdiscover"


REAL = sorted([*FIXTURES.glob("*.ibnetdiscover.txt"),
               *(Path(__file__).resolve().parent / "captures").glob("*.ibnetdiscover.txt")])


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_writer_reprints_real_captures_byte_for_byte(path: Path) -> None:
    text = path.read_text()
    graph = parse_graph(text)
    start = next(n for n in graph.nodes.values() if f"node {n.guid:016x}" in text.splitlines()[3])
    fab = synth_from_graph(graph, text.splitlines()[1])
    made = next(m for m in fab.nodes if m.guid == start.guid)
    assert fab.topology(made) == text
    ports = path.with_name(path.name.replace(".ibnetdiscover.txt", ".ibnetdiscover-p.txt"))
    assert sorted(fab.ports_report().splitlines()) == sorted(ports.read_text().splitlines())


def only(text: str) -> Fabric:
    (fabric,) = parse_ibnetdiscover(text, source="generated")
    return fabric


def assert_matches(fabric: Fabric, built: Built) -> None:
    assert {s.name: (s.tier, s.hops) for s in fabric.switches} == built.tiers
    assert {h: {a.ca: (a.switch, a.switch_port) for a in ads}
            for h, ads in fabric.hosts.items()} == built.adapters


@pytest.mark.parametrize("fmt", ["topology", "ports"])
def test_three_tier_fabric(fmt: str) -> None:
    built = three_tier()
    fabric = only(built.text() if fmt == "topology" else built.ports_text())
    assert_matches(fabric, built)
    assert fabric.tier_counts() == {"leaf": 16, "spine": 4, "core": 2}
    assert len(fabric.hosts) == 16
    assert fabric.id == f"ib-{SWITCH_BASE:016x}"  # the first core has the lowest GUID
    assert {k: str(v) for k, v in fabric.expected_rates.items()} == {"host": "4xNDR",
                                                                      "switch": "4xNDR"}
    assert fabric.degraded_links == ()
    # Four scalable units, each rail on its own leaf per unit: aligned, though no rail
    # is on one leaf for all hosts.
    assert fabric.rails.status == "aligned"
    assert list(fabric.hosts)[:3] == ["dgx-h100-001", "dgx-h100-002", "dgx-h100-003"]
    assert [a.ca for a in fabric.hosts["dgx-h100-001"]] == ["mlx5_0", "mlx5_3", "mlx5_4",
                                                            "mlx5_5"]


def test_node_order_does_not_change_the_map() -> None:
    built = three_tier(pods=1, sus_per_pod=2, hosts_per_su=3)
    first = only(built.text(seed=1)).to_json()
    for seed in (2, 3):
        assert only(built.text(seed=seed)).to_json() == first


def test_bigger_three_tier_with_eight_rails() -> None:
    built = three_tier(pods=3, sus_per_pod=2, hosts_per_su=8, rails=(
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"),
        spines_per_pod=4, cores=4)
    fabric = only(built.text())
    assert_matches(fabric, built)
    assert fabric.tier_counts() == {"leaf": 48, "spine": 12, "core": 4}
    assert fabric.rails.aligned is True
    assert [a.ca for a in fabric.hosts["dgx-h100-048"]][-2:] == ["mlx5_10", "mlx5_11"]


def test_cable_swapped_across_units_blames_exactly_its_two_hosts() -> None:
    built = three_tier(swap=("dgx-h100-002", "dgx-h100-007", "mlx5_4"))
    fabric = only(built.text())
    assert_matches(fabric, built)
    assert fabric.rails.aligned is False
    assert fabric.rails.misaligned_hosts == ("dgx-h100-002", "dgx-h100-007")
    assert fabric.rails.problems == (
        "dgx-h100-002 mlx5_4 is on QM9700;dc7-su02-rail2:MQM9700/U1 port 3; the hosts whose "
        "mlx5_0 share QM9700;dc7-su01-rail0:MQM9700/U1 have their mlx5_4 on "
        "QM9700;dc7-su01-rail2:MQM9700/U1",
        "dgx-h100-007 mlx5_4 is on QM9700;dc7-su01-rail2:MQM9700/U1 port 2; the hosts whose "
        "mlx5_0 share QM9700;dc7-su02-rail0:MQM9700/U1 have their mlx5_4 on "
        "QM9700;dc7-su02-rail2:MQM9700/U1")


def test_cable_swapped_within_a_leaf_is_still_aligned() -> None:
    """Two hosts trading ports on the same leaf: unusual cabling, same rails."""
    built = three_tier(swap=("dgx-h100-001", "dgx-h100-002", "mlx5_3"))
    fabric = only(built.text())
    assert_matches(fabric, built)
    assert fabric.rails.aligned is True


def test_adapter_on_another_rails_leaf_in_one_unit() -> None:
    built = three_tier(pods=1, sus_per_pod=1, hosts_per_su=6)
    leaf0, leaf1 = built.leaves[(0, "mlx5_0")], built.leaves[(0, "mlx5_3")]
    hca = built.hcas[("dgx-h100-004", "mlx5_0")]
    del leaf0.links[4], hca.links[1]
    built.fab.connect(leaf1, 20, hca, 1, "4xNDR")  # mlx5_0 of host 4 on the mlx5_3 leaf
    fabric = only(built.text())
    assert fabric.rails.misaligned_hosts == ("dgx-h100-004",)
    assert fabric.rails.problems == (
        "dgx-h100-004 mlx5_0 is on QM9700;dc7-su01-rail1:MQM9700/U1 port 20, a leaf that "
        "carries mlx5_3 for 6 hosts",)


def test_degraded_cables_of_each_kind() -> None:
    built = three_tier()
    leaf = built.leaves[(2, "mlx5_5")]
    built.fab.retrain(leaf, 64, "2xNDR")  # an uplink that trained at half width
    hca = built.hcas[("dgx-h100-010", "mlx5_3")]
    built.fab.retrain(hca, 1, "4xHDR")  # a host cable that trained one speed lower
    fabric = only(built.text())
    assert [lk.degraded_json() for lk in fabric.degraded_links] == [
        {"a": "dgx-h100-010 mlx5_3 port 1", "b": "QM9700;dc7-su03-rail1:MQM9700/U1 port 2",
         "rate": "4xHDR", "expected": "4xNDR", "kind": "host"},
        {"a": "QM9700;dc7-su03-rail3:MQM9700/U1 port 64",
         "b": "QM9700;dc7-pod2-spine-01:MQM9700/U1 port 4",
         "rate": "2xNDR", "expected": "4xNDR", "kind": "switch"}]
    adapter = next(a for a in fabric.hosts["dgx-h100-010"] if a.ca == "mlx5_3")
    assert adapter.degraded and str(adapter.expected) == "4xNDR"
    assert fabric.rails.aligned is True  # a slow cable is not a misplaced one


def test_faster_cable_than_its_peers_is_not_degraded() -> None:
    built = three_tier(rate="4xHDR")
    built.fab.retrain(built.hcas[("dgx-h100-001", "mlx5_0")], 1, "4xNDR")
    fabric = only(built.text())
    assert fabric.degraded_links == ()


def test_switch_aggregation_nodes_are_not_hosts_and_do_not_shift_tiers() -> None:
    """Quantum switches with SHARP show an adapter of their own on every switch."""
    built = three_tier(pods=1, sus_per_pod=1, hosts_per_su=2)
    for i, sw in enumerate([*built.leaves.values(), *built.spines, *built.cores]):
        an = built.fab.ca("Mellanox Technologies Aggregation Node", 0x7C00_0000_0000_0000 + 2 * i)
        built.fab.connect(sw, 60, an, 1, "4xNDR")
    fabric = only(built.text())
    assert_matches(fabric, built)
    assert len(fabric.endpoints) == 4 + 2 + 2
    assert all(e.end.name == "Mellanox Technologies Aggregation Node" for e in fabric.endpoints)
    assert set(fabric.hosts) == {"dgx-h100-001", "dgx-h100-002"}
    assert {lk.kind for lk in fabric.links} == {"host", "switch", "other"}
