"""The memo of parsed facts and fabric maps (llmgw.facts.memo) never changes a plan.

A plan made from memoised inputs is byte-identical to one made from the files; a
changed file is read again; a corrupt, truncated or foreign memo is ignored; and the
fabric map placement reads answers exactly what the full FabricIndex answers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmgw import facts as facts_pkg
from llmgw.fabric import fabrics_from_facts, parse_ibnetdiscover
from llmgw.fabric.index import FabricIndex
from llmgw.facts import cache as facts_cache
from llmgw.facts import memo
from llmgw.facts.cache import read_facts
from llmgw.planner import load as plan_load
from llmgw.planner import make_plan
from llmgw.planner.load import load_inputs
from llmgw.site import Site
from tests.support.fabric_gen import three_tier
from tests.support.plan_site import write_site

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ibnetdiscover"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    monkeypatch.setenv("LLMGW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(facts_pkg, "_memo", memo)  # as the bastion's CLI does (use_memo)
    return Site.load(write_site(tmp_path / "site"))


def plan_text(site: Site, memo_min: int) -> str:
    return make_plan(load_inputs(site, memo_min=memo_min)).to_json()


def memos(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "inputs").glob("*.pickle"))


def test_plan_from_memo_is_byte_identical(site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = plan_text(site, memo_min=10**9)
    assert not memos(tmp_path)
    first = plan_text(site, memo_min=0)  # parses, then memoises
    assert [p.name.split("-")[0] for p in memos(tmp_path)] == ["fabrics", "facts"]

    def no_parsing(*_: object, **__: object) -> None:
        raise AssertionError("parsed although the memo holds these inputs")

    monkeypatch.setattr(facts_cache, "_read_one", no_parsing)
    monkeypatch.setattr(plan_load, "fabrics_from_facts", no_parsing)
    again = plan_text(site, memo_min=0)  # from the memo alone
    assert plain == first == again
    assert "dgx" in again or "gpu-node" in again  # the fabric placed multi-node replicas


def test_a_changed_facts_file_is_read_again(site: Site, tmp_path: Path) -> None:
    before = read_facts(site.facts_dir, memo_min=0)
    path = site.facts_dir / "gpu-node-04.json"
    path.write_text(path.read_text().replace('"cpus": 128', '"cpus": 96'))
    assert before["gpu-node-04"].cpus == 128
    assert read_facts(site.facts_dir, memo_min=0)["gpu-node-04"].cpus == 96
    assert read_facts(site.facts_dir, memo_min=0)["gpu-node-04"].cpus == 96  # memo rewritten
    (site.facts_dir / "gpu-node-04.json").unlink()
    assert "gpu-node-04" not in read_facts(site.facts_dir, memo_min=0)


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign-writable", "garbage"])
def test_a_damaged_memo_is_ignored_and_rewritten(site: Site, tmp_path: Path, damage: str) -> None:
    plain = plan_text(site, memo_min=10**9)
    plan_text(site, memo_min=0)
    for path in memos(tmp_path):
        data = path.read_bytes()
        if damage == "truncate":
            path.write_bytes(data[: len(data) // 2])
        elif damage == "flip":
            path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
        elif damage == "garbage":
            path.write_bytes(b"not a memo at all")
        else:
            os.chmod(path, 0o666)  # another user could have written it: never unpickled
    assert plan_text(site, memo_min=0) == plain
    for path in memos(tmp_path):
        assert memo.load(path.name.split("-")[0], site.facts_dir.resolve(), object()) is None  # other key


def test_a_memo_from_other_code_is_a_miss(site: Site, tmp_path: Path) -> None:
    where = site.facts_dir.resolve()
    memo.store("facts", where, ("code", 1), {"x": 1})
    assert memo.load("facts", where, ("code", 1)) == {"x": 1}
    assert memo.load("facts", where, ("code", 2)) is None
    os.chmod(tmp_path / "cache" / "inputs", 0o777)
    assert memo.load("facts", where, ("code", 1)) is None


def _same_answers(index: FabricIndex, hosts: list[str]) -> None:
    mapped = index.host_map()
    for host in hosts:
        assert mapped.fabrics_of(host) == index.fabrics_of(host), host
        assert mapped.has_degraded_link(host) == index.has_degraded_link(host), host
        for fid in index.fabrics:
            assert mapped.leaves_of(host, fid) == index.leaves_of(host, fid), (host, fid)
            assert mapped.has_degraded_link(host, fid) == index.has_degraded_link(host, fid), (host, fid)
    for fid in index.fabrics:
        for group in (hosts[:2], hosts[:5], hosts[1:3], hosts[-4:], [], hosts):
            assert mapped.share_leaf(group, fid) == index.share_leaf(group, fid), (group, fid)
            assert mapped.rails_aligned(group, fid) == index.rails_aligned(group, fid), (group, fid)


def test_host_map_answers_like_the_fabric_index() -> None:
    built = three_tier(swap=("dgx-h100-002", "dgx-h100-007", "mlx5_3"))
    index = FabricIndex.from_fabrics(parse_ibnetdiscover(built.fab.topology(), source="t"))
    hosts = [*sorted(built.adapters), "dgx-h100-001.cluster", "unknown-host"]
    _same_answers(index, hosts)
    captures = sorted(FIXTURES.glob("*.ibnetdiscover*.txt"))
    assert captures
    for path in captures:
        real = FabricIndex.from_fabrics(parse_ibnetdiscover(path.read_text(), source=path.name))
        _same_answers(real, [*sorted({h for f in real.fabrics.values() for h in f.hosts}), "nobody"])


def test_site_fabric_map_matches(site: Site) -> None:
    facts = read_facts(site.facts_dir)
    index = fabrics_from_facts(list(facts.values()))
    _same_answers(index, sorted(facts))


def test_views_fabric_index_from_memo_is_the_parsed_one(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = read_facts(site.facts_dir)
    where = site.facts_dir.resolve()
    parsed = plan_load.memo_fabric_index(facts, where, memo_min=10**9)
    first = plan_load.memo_fabric_index(facts, where, memo_min=0)

    def no_parsing(*_: object, **__: object) -> None:
        raise AssertionError("parsed although the memo holds this fabric index")

    monkeypatch.setattr(plan_load, "fabrics_from_facts", no_parsing)
    again = plan_load.memo_fabric_index(facts, where, memo_min=0)
    assert parsed.fabrics
    for index in (first, again):
        assert [f.to_json() for f in index.fabrics.values()] == [f.to_json() for f in parsed.fabrics.values()]
        _same_answers(index, sorted(facts))
