"""FabricIndex: what placement asks, answered on the real captures c and e (gpu-node-01..04
sit on two fabrics there), and the site-facing `llmgw fabrics` / `fabrics show`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from llmgw.errors import FabricError
from llmgw.fabric import FabricIndex, fabrics_from_facts, parse_ibnetdiscover
from llmgw.facts.records import HostFacts
from tests.support.cli import run_cli
from tests.support.fabric_gen import three_tier

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ibnetdiscover"
COMPUTE, STORAGE = "ib-0c42a10300b50000", "ib-0c42a10300e60000"
FAT_TREE = "ib-0c42a10300b20000"


def capture(name: str) -> str:
    return (FIXTURES / f"{name}.ibnetdiscover.txt").read_text()


@pytest.fixture(scope="module")
def index() -> FabricIndex:
    texts = ["c_fattree_rails_misaligned_degraded", "e_two_subnets_fabric1_compute",
             "e_two_subnets_fabric2_storage"]
    return FabricIndex.from_fabrics(f for t in texts for f in parse_ibnetdiscover(capture(t)))


def test_fabrics_of(index: FabricIndex) -> None:
    assert list(index.fabrics) == [FAT_TREE, COMPUTE, STORAGE]
    for host in ("gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"):
        assert index.fabrics_of(host) == [FAT_TREE, COMPUTE, STORAGE]
    assert index.fabrics_of("gpu-node-05") == [FAT_TREE]
    assert index.fabrics_of("stor-01") == [STORAGE]
    assert index.fabrics_of("nowhere") == []
    assert index.hosts(STORAGE) == ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04",
                                    "stor-01", "stor-02"]


def test_leaves_of(index: FabricIndex) -> None:
    assert index.leaves_of("gpu-node-01", COMPUTE) == {"mlx5_0": "MF0;comp-leaf-01:MQM8790/U1",
                                                       "mlx5_1": "MF0;comp-leaf-02:MQM8790/U1"}
    assert index.leaves_of("gpu-node-03", STORAGE) == {"mlx5_2": "MF0;stor-sw-02:MQM8790/U1"}
    assert index.leaves_of("gpu-node-05", FAT_TREE) == {
        "mlx5_0": "MF0;leaf-01:MQM8790/U1", "mlx5_1": "MF0;leaf-02:MQM8790/U1",
        "mlx5_2": "MF0;leaf-04:MQM8790/U1", "mlx5_3": "MF0;leaf-03:MQM8790/U1"}
    assert index.leaves_of("stor-01", COMPUTE) == {}
    with pytest.raises(FabricError, match="no fabric 'ib-nope'"):
        index.leaves_of("gpu-node-01", "ib-nope")


def test_has_degraded_link(index: FabricIndex) -> None:
    assert index.has_degraded_link("gpu-node-03") is True
    assert index.has_degraded_link("gpu-node-03", FAT_TREE) is True
    assert index.has_degraded_link("gpu-node-03", COMPUTE) is False
    assert index.has_degraded_link("gpu-node-02") is False
    assert index.has_degraded_link("stor-01", STORAGE) is False
    assert index.has_degraded_link("nowhere") is False


def test_share_leaf(index: FabricIndex) -> None:
    hosts = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"]
    assert index.share_leaf(hosts, COMPUTE) is True
    assert index.share_leaf(hosts, STORAGE) is False  # 01,02 on stor-sw-01; 03,04 on sw-02
    assert index.share_leaf(["gpu-node-01", "gpu-node-02", "stor-01"], STORAGE) is True
    assert index.share_leaf(["gpu-node-02", "gpu-node-03"], STORAGE) is False
    assert index.share_leaf(["gpu-node-01", "stor-01"], COMPUTE) is False  # stor-01 not on it
    assert index.share_leaf(["gpu-node-01"], COMPUTE) is True
    assert index.share_leaf([], COMPUTE) is True


def test_rails_aligned(index: FabricIndex) -> None:
    assert index.rails_aligned(["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"],
                               COMPUTE) is True
    assert index.rails_aligned(["gpu-node-01", "gpu-node-02"], STORAGE) is True
    assert index.rails_aligned(["gpu-node-01", "gpu-node-03"], STORAGE) is False
    assert index.rails_aligned(["gpu-node-01", "gpu-node-08"], FAT_TREE) is True
    assert index.rails_aligned(["gpu-node-01", "gpu-node-05"], FAT_TREE) is False
    assert index.rails_aligned(["gpu-node-01", "stor-01"], COMPUTE) is False
    assert index.rails_aligned(["gpu-node-01", "stor-01"], STORAGE) is False  # mlx5_2 vs mlx5_0
    assert index.rails_aligned([], COMPUTE) is True


def test_short_and_long_host_names() -> None:
    text = capture("a_small_1switch").replace('"gpu-node-02 mlx5_0"', '"gpu-node-02.lab mlx5_0"')
    idx = FabricIndex.from_fabrics(parse_ibnetdiscover(text))
    (fid,) = idx.fabrics
    assert idx.fabrics_of("gpu-node-02") == [fid]
    assert idx.fabrics_of("gpu-node-01.lab") == [fid]
    assert idx.share_leaf(["gpu-node-01.lab", "gpu-node-02"], fid) is True


def test_find(index: FabricIndex) -> None:
    assert index.find(COMPUTE).id == COMPUTE
    assert index.find("ib-0c42a10300e6").id == STORAGE
    assert index.find("0c42a10300b5").id == COMPUTE
    assert index.find("0xc42a10300b20000").id == FAT_TREE  # the GUID as switchguid= prints it
    with pytest.raises(FabricError, match="matches 3 fabrics"):
        index.find("ib-0c42")
    with pytest.raises(FabricError, match=r"no fabric 'ib-ffff' \(known: ib-0c42a10300b20000, "):
        index.find("ib-ffff")


def test_dedupe_by_id_later_wins() -> None:
    (b,) = parse_ibnetdiscover(capture("b_fattree_rails_aligned"), source="b")
    (c,) = parse_ibnetdiscover(capture("c_fattree_rails_misaligned_degraded"), source="c")
    assert b.id == c.id
    assert FabricIndex.from_fabrics([b, c]).fabrics[b.id].source == "c"
    assert FabricIndex.from_fabrics([c, b]).fabrics[b.id].source == "b"


def test_dedupe_by_shared_switch_when_the_id_switch_left() -> None:
    """The lowest-GUID switch (a core) was replaced: new id, same fabric."""
    before = three_tier(pods=1, sus_per_pod=1, hosts_per_su=2, cores=2)
    after = three_tier(pods=1, sus_per_pod=1, hosts_per_su=2, cores=2)
    first_core = after.cores[0]
    for port, (peer, pport, _) in list(first_core.links.items()):
        del peer.links[pport], first_core.links[port]
    after.fab.nodes.remove(first_core)
    (old,) = parse_ibnetdiscover(before.text(), source="monday")
    (new,) = parse_ibnetdiscover(after.text(), source="tuesday")
    assert old.id != new.id
    idx = FabricIndex.from_fabrics([old, new])
    assert list(idx.fabrics) == [new.id]


def facts(host: str, text: str | None, minutes: int = 0) -> HostFacts:
    return HostFacts(host=host, gathered_at=datetime(2026, 3, 1, tzinfo=UTC) +
                     timedelta(minutes=minutes), ibnetdiscover=text)


def test_fabrics_from_facts() -> None:
    idx = fabrics_from_facts([
        facts("gpu-node-02", capture("b_fattree_rails_aligned"), minutes=5),
        facts("gpu-node-01", capture("e_two_subnets_fabric1_compute")),
        facts("gpu-node-03", capture("c_fattree_rails_misaligned_degraded"), minutes=1),
        facts("stor-01", capture("e_two_subnets_fabric2_storage")),
        facts("gpu-node-04", None),
    ])
    assert list(idx.fabrics) == [FAT_TREE, COMPUTE, STORAGE]
    # b (gathered later) replaced c: its rails are aligned and nothing is degraded.
    assert idx.fabrics[FAT_TREE].source == "ibnetdiscover from gpu-node-02"
    assert idx.has_degraded_link("gpu-node-03") is False
    assert idx.fabrics[COMPUTE].source == "ibnetdiscover from gpu-node-01"


def test_fabrics_from_facts_names_the_host_of_a_bad_capture() -> None:
    with pytest.raises(FabricError) as info:
        fabrics_from_facts([facts("gpu-node-07", capture("a_small_1switch")[:900])])
    assert info.value.message.startswith("ibnetdiscover from gpu-node-07, line ")


# -- the CLI on a site ---------------------------------------------------------------


@pytest.fixture
def fleet(site: Callable[..., Path]) -> Path:
    root = site()
    for f in (facts("gpu-node-01", capture("e_two_subnets_fabric1_compute")),
              facts("gpu-node-03", capture("e_two_subnets_fabric2_storage")),
              facts("gpu-node-02", None)):
        (root / "facts").mkdir(exist_ok=True)
        (root / "facts" / f"{f.host}.json").write_text(f.model_dump_json())
    return root


def test_cli_lists_the_sites_fabrics(fleet: Path) -> None:
    r = run_cli("-C", str(fleet), "fabrics")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["FABRIC", "SWITCHES", "HOSTS", "DEGRADED", "RAILS", "FROM"]
    assert lines[1].split() == [COMPUTE, "2", "leaf,", "1", "spine", "4", "0", "aligned",
                                "gpu-node-01"]
    assert lines[2].split() == [STORAGE, "2", "leaf", "6", "0", "n/a", "gpu-node-03"]
    assert lines[3:] == ["", "Weights present (catalog models, on how many of each fabric's hosts):",
                         f"  {COMPUTE}  none present", f"  {STORAGE}  none present"]
    r = run_cli("-C", str(fleet), "fabrics", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [f["id"] for f in data["fabrics"]] == [COMPUTE, STORAGE]
    assert data["fabrics"][1]["expected_rates"] == {"host": "4xEDR", "switch": "4xEDR"}


def test_cli_show(fleet: Path) -> None:
    r = run_cli("-C", str(fleet), "fabrics", "show", "ib-0c42a10300e6")
    assert r.exit_code == 0, r.stderr
    assert f"Fabric {STORAGE}" in r.stdout
    assert "rails:    n/a (one adapter per host on this fabric)" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("stor-02"))
    assert row.split() == ["stor-02", "mlx5_0", "MF0;stor-sw-02:MQM8790/U1", "3", "4xEDR"]
    r = run_cli("-C", str(fleet), "fabrics", "show", COMPUTE, "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["id"] == COMPUTE and data["rails"]["status"] == "aligned"
    r = run_cli("-C", str(fleet), "fabrics", "show", "ib-nope")
    assert r.exit_code == 1
    assert f"Error: no fabric 'ib-nope' (known: {COMPUTE}, {STORAGE})" in r.stderr


def test_cli_without_facts(site: Callable[..., Path]) -> None:
    r = run_cli("-C", str(site()), "fabrics")
    assert r.exit_code == 0, r.stderr
    assert "No fabrics: no host's facts under" in r.stdout
    r = run_cli("-C", str(site()), "fabrics", "--json")
    assert json.loads(r.stdout) == {"fabrics": []}


def test_cli_bad_facts_file(fleet: Path) -> None:
    (fleet / "facts" / "gpu-node-09.json").write_text('{"host": "gpu-node-09"}')
    r = run_cli("-C", str(fleet), "fabrics")
    assert r.exit_code == 1
    assert "gpu-node-09.json is not a host facts file" in r.stderr
    assert "gathered_at: Field required" in r.stderr


def test_cli_bad_capture_in_facts(fleet: Path) -> None:
    (fleet / "facts" / "gpu-node-04.json").write_text(
        facts("gpu-node-04", capture("a_small_1switch")[:900]).model_dump_json())
    r = run_cli("-C", str(fleet), "fabrics")
    assert r.exit_code == 1
    assert "Error: ibnetdiscover from gpu-node-04, line " in r.stderr
    assert "Traceback" not in r.stderr
