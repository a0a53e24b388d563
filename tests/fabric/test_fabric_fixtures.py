"""Every real capture against its ground truth, exactly: tiers and hops, which adapter is
on which switch port, degraded cables, rails. Through the API and through the CLI, in
both output formats ibnetdiscover has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmgw.fabric import Fabric, parse_ibnetdiscover
from tests.support.cli import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ibnetdiscover"
NAMES = sorted(p.name.removesuffix(".truth.json") for p in FIXTURES.glob("*.truth.json"))
# Our own real capture of a fabric with three tiers (see captures/README.md).
CAPTURES = Path(__file__).resolve().parent / "captures"
ALL = [(FIXTURES, n) for n in NAMES] + [(CAPTURES, "f_three_tier_row9")]


def truth_view(fabric: dict[str, Any]) -> dict[str, Any]:
    """Our JSON in the shape of truth.json, so the two compare with ==."""
    rails = fabric["rails"]
    return {
        "switches": {s["name"]: {"tier": s["tier"], "hops_from_nearest_hca": s["hops"]}
                     for s in fabric["switches"]},
        "hosts": {h["host"]: {a["ca"]: {"switch": a["switch"], "switch_port": a["switch_port"]}
                              for a in h["adapters"]} for h in fabric["hosts"]},
        "degraded_links": [{"end_a": d["a"], "end_b": d["b"], "trained": d["rate"],
                            "peers_run_at": d["expected"]} for d in fabric["degraded_links"]],
        "rails": rails["status"],
        "misaligned_hosts": rails["misaligned_hosts"],
    }


def expected_view(name: str, folder: Path = FIXTURES) -> dict[str, Any]:
    truth = json.loads((folder / f"{name}.truth.json").read_text())
    view = {k: truth[k] for k in ("switches", "hosts", "degraded_links", "misaligned_hosts")}
    view["rails"] = "n/a" if truth["rails"].startswith("n/a") else truth["rails"]
    return view


def parse_file(path: Path) -> list[Fabric]:
    return parse_ibnetdiscover(path.read_text(), source=path.name)


def test_every_fixture_is_covered() -> None:
    assert NAMES == ["a_small_1switch", "b_fattree_rails_aligned",
                     "c_fattree_rails_misaligned_degraded", "e_two_subnets_fabric1_compute",
                     "e_two_subnets_fabric2_storage"]


@pytest.mark.parametrize("fmt", ["ibnetdiscover", "ibnetdiscover-p"])
@pytest.mark.parametrize(("folder", "name"), ALL, ids=[n for _, n in ALL])
def test_parse_matches_truth(folder: Path, name: str, fmt: str) -> None:
    (fabric,) = parse_file(folder / f"{name}.{fmt}.txt")
    assert truth_view(fabric.to_json()) == expected_view(name, folder)


@pytest.mark.parametrize(("folder", "name"), ALL, ids=[n for _, n in ALL])
def test_cli_parse_json_matches_truth(folder: Path, name: str) -> None:
    r = run_cli("fabrics", "parse", str(folder / f"{name}.ibnetdiscover.txt"), "--json")
    assert r.exit_code == 0, r.stderr
    (fabric,) = json.loads(r.stdout)["fabrics"]
    assert truth_view(fabric) == expected_view(name, folder)


@pytest.mark.parametrize(("folder", "name"), ALL, ids=[n for _, n in ALL])
def test_both_formats_give_the_same_fabric(folder: Path, name: str) -> None:
    """Same id, cables, rates and verdicts; only what -p cannot carry (adapter node GUIDs,
    switch port counts) differs."""
    (full,) = parse_file(folder / f"{name}.ibnetdiscover.txt")
    (ports,) = parse_file(folder / f"{name}.ibnetdiscover-p.txt")
    assert full.id == ports.id
    assert [(lk.a.label, lk.b.label, str(lk.rate), lk.degraded) for lk in full.links] == \
        [(lk.a.label, lk.b.label, str(lk.rate), lk.degraded) for lk in ports.links]
    assert full.rails == ports.rails
    assert [(s.guid, s.name, s.hops, s.lid) for s in full.switches] == \
        [(s.guid, s.name, s.hops, s.lid) for s in ports.switches]


def test_json_shape_on_the_degraded_fixture() -> None:
    (fabric,) = parse_file(FIXTURES / "c_fattree_rails_misaligned_degraded.ibnetdiscover.txt")
    data = fabric.to_json()
    assert data["id"] == "ib-0c42a10300b20000"
    assert data["summary"] == {"switches": {"leaf": 4, "spine": 2}, "hosts": 8, "adapters": 32,
                               "links": 64, "degraded_links": 1, "rails": "misaligned"}
    assert data["switches"][0] == {"guid": "0x0c42a10300b20000", "name": "MF0;leaf-01:MQM8790/U1",
                                   "tier": "leaf", "hops": 1, "lid": 2, "ports": 40}
    host3 = next(h for h in data["hosts"] if h["host"] == "gpu-node-03")
    assert host3["adapters"][1] == {
        "ca": "mlx5_1", "port": 1, "rail": "mlx5_1", "guid": "0xb83fd20300a20012",
        "port_guid": "0xb83fd20300a20013", "lid": 16, "switch": "MF0;leaf-02:MQM8790/U1",
        "switch_guid": "0x0c42a10300b20001", "switch_port": 3,
        "peer": "MF0;leaf-02:MQM8790/U1 port 3", "rate": "1xHDR", "expected": "4xHDR",
        "degraded": True}
    assert data["degraded_links"] == [{"a": "gpu-node-03 mlx5_1 port 1",
                                       "b": "MF0;leaf-02:MQM8790/U1 port 3", "rate": "1xHDR",
                                       "expected": "4xHDR", "kind": "host"}]
    assert data["rails"]["aligned"] is False
    assert data["rails"]["misaligned_hosts"] == ["gpu-node-05"]
    assert data["rails"]["problems"] == [
        "gpu-node-05 mlx5_2 is on MF0;leaf-04:MQM8790/U1 port 5, a leaf that carries mlx5_3 "
        "for 7 hosts",
        "gpu-node-05 mlx5_3 is on MF0;leaf-03:MQM8790/U1 port 5, a leaf that carries mlx5_2 "
        "for 7 hosts"]
    assert len(data["links"]) == 64
    assert sum(1 for lk in data["links"] if lk["kind"] == "host") == 32
    uplink = next(lk for lk in data["links"] if lk["kind"] == "switch")
    assert uplink["a"]["name"] == "MF0;leaf-01:MQM8790/U1"  # the lower tier first
    assert uplink["b"]["name"].startswith("MF0;spine-")
    assert (uplink["width"], uplink["speed"], uplink["rate"]) == ("4x", "HDR", "4xHDR")
    # Deterministic: the same bytes every time.
    (again,) = parse_file(FIXTURES / "c_fattree_rails_misaligned_degraded.ibnetdiscover.txt")
    assert json.dumps(again.to_json()) == json.dumps(data)


def test_rails_not_applicable_is_said_in_json() -> None:
    for name in ("a_small_1switch", "e_two_subnets_fabric2_storage"):
        (fabric,) = parse_file(FIXTURES / f"{name}.ibnetdiscover.txt")
        assert fabric.to_json()["rails"] == {
            "status": "n/a", "aligned": None, "misaligned_hosts": [],
            "reason": "one adapter per host on this fabric", "problems": []}


def test_storage_fabric_runs_edr_and_nothing_is_degraded() -> None:
    (fabric,) = parse_file(FIXTURES / "e_two_subnets_fabric2_storage.ibnetdiscover.txt")
    assert {k: str(v) for k, v in fabric.expected_rates.items()} == {"host": "4xEDR",
                                                                      "switch": "4xEDR"}
    assert fabric.degraded_links == ()


def test_ids_are_stable_across_rediscovery() -> None:
    """b and c are the same switches (same GUIDs) discovered twice, recabled in between:
    the id stays. The two e subnets differ."""
    ids = {name: parse_file(FIXTURES / f"{name}.ibnetdiscover.txt")[0].id for name in NAMES}
    assert ids["b_fattree_rails_aligned"] == ids["c_fattree_rails_misaligned_degraded"]
    assert ids["e_two_subnets_fabric1_compute"] == "ib-0c42a10300b50000"
    assert ids["e_two_subnets_fabric2_storage"] == "ib-0c42a10300e60000"


def test_two_captures_in_one_text_give_two_fabrics() -> None:
    text = "".join((FIXTURES / f"e_two_subnets_fabric{n}.ibnetdiscover.txt").read_text()
                   for n in ("2_storage", "1_compute"))
    fabrics = parse_ibnetdiscover(text)
    assert [f.id for f in fabrics] == ["ib-0c42a10300b50000", "ib-0c42a10300e60000"]
    assert [len(f.hosts) for f in fabrics] == [4, 6]


def test_cli_parse_human_summary() -> None:
    r = run_cli("fabrics", "parse",
                str(FIXTURES / "c_fattree_rails_misaligned_degraded.ibnetdiscover.txt"))
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "Fabric ib-0c42a10300b20000" in out
    assert "switches: 6 (4 leaf, 2 spine)" in out
    assert "hosts:    8 (32 adapter ports)" in out
    assert "links:    64 (expected rate: host 4xHDR, switch 4xHDR)" in out
    assert "degraded: 1" in out
    assert ("gpu-node-03 mlx5_1 port 1 <-> MF0;leaf-02:MQM8790/U1 port 3: 1xHDR, expected 4xHDR"
            in out)
    assert "rails:    misaligned: gpu-node-05" in out
    r = run_cli("fabrics", "parse", str(FIXTURES / "a_small_1switch.ibnetdiscover-p.txt"))
    assert r.exit_code == 0, r.stderr
    assert "degraded: none" in r.stdout
    assert "rails:    n/a (one adapter per host on this fabric)" in r.stdout
