"""The view functions on the example site: numbers worked out from the recorded facts,
the inventory and the state, independently of the views' own code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from llmgw.fabric import parse_ibnetdiscover
from llmgw.inventory import load_inventory
from llmgw.site import Site
from llmgw.views import Runtime, SiteData, SiteDataCache
from llmgw.views.fabrics import fabric_drawing
from llmgw.views.models import models_view
from llmgw.views.nodes import node_detail, nodes_view
from llmgw.views.placement import Unplaced
from llmgw.views.planned import load_site_data, view_plan
from llmgw.views.replicas import idle_text, replicas_view, shard_text
from llmgw.views.status import status_view
from llmgw.views.text import bar_cells, duration
from tests.support.example_site import CREATED, EXAMPLE, FIXTURES, NOW, example_site

NOT_READY = {"gpu-node-08", "a100-node-04"}  # cordoned, draining (inventory/hosts.yml)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteData]:
    root = example_site(tmp_path_factory.mktemp("views"))
    yield load_site_data(Site.load(root))


def expected_capacity(site_root: Path) -> dict[str, dict[str, int]]:
    """Count from the files themselves: facts, state, the two non-ready nodes, and the GPUs the
    inventory cordons by hand (held back: placement leaves them out)."""
    state = json.loads((site_root / "state.json").read_text())
    held = {(s["node"], g) for r in state["replicas"] for s in r["shards"] for g in s["gpus"]}
    cordoned = {(h.name, i) for h in load_inventory(site_root / "inventory").hosts.values() for i in h.cordoned_gpus}
    assert cordoned == {("gpu-node-10", 7)}
    out: dict[str, dict[str, int]] = {}
    for path in sorted((site_root / "facts").glob("*.json")):
        facts = json.loads(path.read_text())
        for g in facts.get("gpus") or []:
            c = out.setdefault(g["gpu_class"], {"total": 0, "used": 0, "free": 0, "held_back": 0, "unhealthy": 0})
            c["total"] += 1
            if g["problems"]:
                c["unhealthy"] += 1
            elif (facts["host"], g["index"]) in held:
                c["used"] += 1
            elif facts["host"] in NOT_READY or (facts["host"], g["index"]) in cordoned:
                c["held_back"] += 1
            else:
                c["free"] += 1
    return out


def test_capacity_per_gpu_class(data: SiteData) -> None:
    view = status_view(data, Runtime.unknown(), NOW)
    got = {c["gpu_class"]: {k: c[k] for k in ("total", "used", "free", "held_back", "unhealthy")}
           for c in view["capacity"]}
    assert got == expected_capacity(data.site.root)
    # Pinned: 8 H100 nodes x 8; deepseek-v3-1 holds 2 x 8, llama-3.1-70b 2 x 4; two GPUs
    # unhealthy (gpu-node-06 #3, gpu-node-07 #5) are neither used nor free; gpu-node-08 is cordoned.
    assert got["H100-80GB"] == {"total": 64, "used": 24, "free": 30, "held_back": 8, "unhealthy": 2}
    assert got["A100-40GB"] == {"total": 32, "used": 0, "free": 24, "held_back": 8, "unhealthy": 0}
    assert got["L40S-48GB"] == {"total": 8, "used": 2, "free": 6, "held_back": 0, "unhealthy": 0}
    assert view["gpus_unknown"] == ["cpu-01", "cpu-02", "new-01", "old-01"]


def test_free_whole_nodes_per_fabric(data: SiteData) -> None:
    fabrics = {f["fabric"]: f for f in status_view(data, Runtime.unknown(), NOW)["fabrics"]}
    h100, a100 = fabrics["ib-0c42a10300b20000"], fabrics["ib-0c42a10300c70000"]
    # 01/02 hold deepseek-v3-1, 06/07 a replica and an unhealthy GPU, 08 is cordoned.
    assert h100["free"] == ["gpu-node-03", "gpu-node-04", "gpu-node-05"] and h100["nodes"] == 8
    assert h100["degraded_links"] == 1 and h100["rails"] == "misaligned"
    assert a100["free"] == ["a100-node-01", "a100-node-02", "a100-node-03"] and a100["nodes"] == 4


def test_counts_and_unplaceable(data: SiteData) -> None:
    view = status_view(data, Runtime.unknown(), NOW)
    # a recorded site has no clock: stale a100-node-03 is neither unreachable nor lost there
    assert view["nodes"] == {"total": 20, "ready": 18, "cordoned": 1, "draining": 1, "stale": ["a100-node-03"],
                             "no_facts": ["new-01"], "unreachable": [], "lost": []}
    assert view["replicas"] == {"total": 4, "ready": 3, "starting": 1, "draining": 0, "with_errors": 0}
    assert view["models"] == {"total": 7, "ready": 2, "starting": 1, "not placed": 3, "not moved": 0, "stopped": 0,
                              "on demand": 1}
    assert [u["model"] for u in view["unplaceable"]] == ["grok-1", "llama-3.1-405b", "llama-4-maverick"]
    assert view["unplaceable"][1]["reason"] == "fabric ib-0c42a10300c70000: 3 nodes with 8 GPUs free, needs 6"
    assert view["idle"] is None and "idle replicas are not known: no router answered" in view["notes"]


def test_model_status_words(data: SiteData) -> None:
    models = {m["name"]: m for m in models_view(data, Runtime.unknown())["models"]}
    assert {n: m["status"] for n, m in models.items()} == {
        "deepseek-v3": "ready", "grok-1": "not placed", "llama-3.1-405b": "not placed", "llama-3.1-70b": "ready",
        "llama-4-maverick": "not placed", "qwen2.5-7b": "on demand", "qwen2.5-coder-14b": "starting"}
    assert models["llama-3.1-70b"]["replicas_text"] == "2/2"
    assert models["llama-3.1-405b"]["serving"] == "via llama-3.1-70b"  # its fallback answers
    assert models["qwen2.5-7b"]["serving"] == "on request"
    assert models["grok-1"]["hint"] == "llmgw explain grok-1"
    scaling = models["llama-3.1-70b"]["scaling"]  # the catalog entry as written (and its defaults)
    assert {k: scaling[k] for k in ("min", "max", "idle_timeout")} == {"min": 2, "max": 4, "idle_timeout": 3600}


def test_models_without_a_state_are_stopped(tmp_path: Path) -> None:
    data = load_site_data(Site.load(example_site(tmp_path, state=False)))
    statuses = {m["name"]: m["status"] for m in models_view(data, Runtime.unknown())["models"]}
    assert statuses["deepseek-v3"] == statuses["llama-3.1-70b"] == statuses["qwen2.5-coder-14b"] == "stopped"
    assert replicas_view(data, Runtime.unknown(), NOW)["replicas"] == []


def router_runtime(data: SiteData, watched: float = 86400.0) -> Runtime:
    """Two routers' replica lists; r1 has watched its replicas for `watched` seconds."""
    a = [{"id": "llama-3.1-70b-1", "health": "healthy", "in_flight": 2, "requests": 10,
          "last_used": "2026-11-30T07:59:00+00:00", "idle_seconds": 60.0, "watched_seconds": watched},
         {"id": "llama-3.1-70b-2", "health": "unhealthy", "in_flight": 0, "requests": 0,
          "last_error": "connect failed: refused", "watched_seconds": watched},
         {"id": "deepseek-v3-1", "health": "healthy", "in_flight": 0, "requests": 0, "watched_seconds": watched},
         {"id": "qwen2.5-coder-14b-1", "health": "unknown", "in_flight": 0, "requests": 0,
          "watched_seconds": watched}]
    b = [{"id": "llama-3.1-70b-1", "health": "healthy", "in_flight": 1, "requests": 4,
          "last_used": "2026-11-30T05:00:00+00:00", "idle_seconds": 10800.0, "watched_seconds": 86400.0},
         {"id": "deepseek-v3-1", "health": "healthy", "in_flight": 0, "requests": 1,
          "last_used": "2026-11-30T05:30:00+00:00", "idle_seconds": 9000.0, "watched_seconds": 86400.0}]
    return Runtime.from_replicas([("r1", a), ("r2", b)])


def test_replicas_with_two_routers(data: SiteData) -> None:
    downloads = {("l40s-01", "bbc40e7b720952e6-qwen2.5-coder-14b-instruct-q4_k_m.gguf"):
                 {"bytes": 3 * 2**30, "total": 9 * 2**30}}
    view = replicas_view(data, router_runtime(data), NOW, downloads=downloads)
    recs = {r["id"]: r for r in view["replicas"]}
    assert list(recs) == ["deepseek-v3-1", "llama-3.1-70b-1", "llama-3.1-70b-2", "qwen2.5-coder-14b-1"]
    assert [s["text"] for s in recs["deepseek-v3-1"]["shards"]] == ["gpu-node-01:0-7", "gpu-node-02:0-7"]
    assert recs["llama-3.1-70b-1"]["in_flight"] == 3  # both routers' requests add up
    assert idle_text(recs["llama-3.1-70b-1"]) == "1m"  # the most recent use wins
    assert idle_text(recs["llama-3.1-70b-2"]) == "-"  # never used
    assert recs["llama-3.1-70b-2"]["errors"] == ["unhealthy at the router: connect failed: refused"]
    assert recs["deepseek-v3-1"]["age_seconds"] == (NOW - CREATED).total_seconds()
    assert recs["qwen2.5-coder-14b-1"]["downloads"][0]["text"] == \
        "downloading on l40s-01: 3.0 GiB of 9.0 GiB (33%)"
    assert recs["qwen2.5-coder-14b-1"]["downloads"][0]["percent"] == 33.3
    only = replicas_view(data, router_runtime(data), NOW, model="llama")  # an alias
    assert [r["id"] for r in only["replicas"]] == ["llama-3.1-70b-1", "llama-3.1-70b-2"]


def test_idle_replicas_need_a_router(data: SiteData) -> None:
    view = status_view(data, router_runtime(data), NOW, idle_after=3600)
    # llama-3.1-70b-2 never used and 2h old; deepseek-v3-1 last used 2.5h ago; the
    # coder replica is still starting, so not idle.
    assert [(i["id"], i["used"]) for i in view["idle"]] == [("deepseek-v3-1", True), ("llama-3.1-70b-2", False)]
    models = {m["name"]: m for m in models_view(data, router_runtime(data))["models"]}
    assert models["llama-3.1-70b"]["in_flight"] == 3


def test_after_a_router_restart_idle_is_not_known_yet_never_idle(data: SiteData) -> None:
    """r1 restarted 10 s ago: it cannot know what it served before, so nothing is idle for 1h
    (before, every replica never used since its creation was "never used in 2h")."""
    view = status_view(data, router_runtime(data, watched=10.0), NOW, idle_after=3600)
    assert view["idle"] == []
    assert view["idle_not_known"] == [{"id": "deepseek-v3-1", "model": "deepseek-v3", "watched_seconds": 10.0},
                                      {"id": "llama-3.1-70b-2", "model": "llama-3.1-70b", "watched_seconds": 10.0}]


def test_a_router_not_answering_makes_idle_not_known_never_idle(data: SiteData) -> None:
    full = router_runtime(data)
    partial = Runtime.from_replicas([("r1", [dict(r) for r in full.replicas.values()])],
                                    ["router r2 is not known: ..."], missing=["r2"])
    view = status_view(data, partial, NOW, idle_after=3600)
    assert view["idle"] is None and view["routers_not_known"] == ["r2"]
    live = {r["id"]: r for r in view["live"]}
    assert live["deepseek-v3-1"]["idle_seconds"] is None and live["deepseek-v3-1"]["used"] is None
    assert live["llama-3.1-70b-1"]["in_flight"] == 3  # busy is busy, whoever else is silent
    recs = {r["id"]: r for r in replicas_view(data, partial, NOW)["replicas"]}
    assert idle_text(recs["llama-3.1-70b-2"]) == "?" and recs["llama-3.1-70b-2"]["in_flight_partial"]
    complete = status_view(data, full, NOW, idle_after=3600)
    assert {r["id"]: r["in_flight"] for r in complete["live"]}["llama-3.1-70b-1"] == 3
    assert complete["in_flight"] == 3 and complete["routers_not_known"] == []


def test_units_gone_from_a_host_are_errors(tmp_path: Path) -> None:
    root = example_site(tmp_path)
    state = json.loads((root / "state.json").read_text())
    for r in state["replicas"]:
        r["created_at"] = (NOW - timedelta(days=1)).isoformat()  # before the facts were gathered
    (root / "state.json").write_text(json.dumps(state))
    data = load_site_data(Site.load(root))
    rec = next(r for r in replicas_view(data, Runtime.unknown(), NOW)["replicas"] if r["id"] == "llama-3.1-70b-1")
    unit = rec["shards"][0]["unit"]
    assert rec["errors"] == [f"shard 0: unit {unit} is not on gpu-node-06 (facts of 2026-11-30T05:40+00:00)"]


def test_nodes_and_node_detail(data: SiteData) -> None:
    nodes = {n["node"]: n for n in nodes_view(data)["nodes"]}
    assert len(nodes) == 20
    assert nodes["gpu-node-06"]["gpus"] == {"total": 8, "healthy": 7, "used": 4, "free": 3}
    assert nodes["new-01"]["gpus"] is None and nodes["new-01"]["last_seen"] is None
    assert nodes["l40s-01"]["fabrics"] is None or nodes["l40s-01"]["fabrics"] == []
    d = node_detail(data, "gpu-node-03")
    assert d is not None
    assert [a["ca"] for a in d["adapters"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert [a["degraded"] for a in d["adapters"]] == [False, True, False, False]
    assert node_detail(data, "nope") is None


@pytest.mark.parametrize("capture", sorted(p.name for p in FIXTURES.glob("*.ibnetdiscover.txt")))
def test_every_fixture_draws_every_switch_and_cable(capture: str) -> None:
    for fabric in parse_ibnetdiscover((FIXTURES / capture).read_text(), source=capture):
        d = fabric_drawing(fabric)
        assert d["links_not_drawn"] == 0 and len(d["links"]) == len(fabric.links)
        assert len(d["switches"]) == len(fabric.switches)
        assert len(d["adapters"]) == sum(len(a) for a in fabric.hosts.values()) + len(fabric.endpoints)
        assert sum(1 for link in d["links"] if link["colour"] == d["degraded_colour"]) == len(fabric.degraded_links)
        for tier in d["tiers"]:  # one row per tier
            assert {s["y"] for s in d["switches"] if s["tier"] == tier["tier"]} == {tier["y"]}


def test_site_cache_reloads_on_change(tmp_path: Path) -> None:
    root = example_site(tmp_path, state=False)
    cache = SiteDataCache(root)
    first = cache.get()
    assert cache.get() is first
    (root / "catalog" / "chat.yaml").write_text((EXAMPLE / "catalog" / "chat.yaml").read_text() + "\n# touched\n")
    second = cache.get()
    assert second is not first and cache.get() is second
    # A file added in a folder below the catalog, then removed, reloads too; one outside the inputs does not.
    (root / "catalog" / "more").mkdir()
    (root / "catalog" / "more" / "README.md").write_text("notes beside the catalog\n")
    third = cache.get()
    assert third is not second
    (root / "catalog" / "more" / "README.md").unlink()
    assert cache.get() is not third
    fourth = cache.get()
    (root / "notes.txt").write_text("not an input")
    assert cache.get() is fourth


def test_text_rules() -> None:
    assert [duration(s) for s in (None, 42, 300, 3600, 4000, 90000)] == ["?", "42s", "5m", "1h", "1h06m", "1d1h"]
    assert shard_text("n", []) == "n" and shard_text("n", [0, 2]) == "n:0,2" and shard_text("n", [4, 5, 6]) == "n:4-6"
    cells = bar_cells([("used", 24), ("free", 30), ("held_back", 8), ("unhealthy", 2)], 30)
    assert sum(n for _, n in cells) == 30 and all(n >= 1 for _, n in cells)
    assert bar_cells([("used", 0), ("free", 0)], 10) == [("empty", 10)]


def test_the_plan_is_made_when_a_view_asks_for_it(tmp_path: Path) -> None:
    """`llmgw nodes` (and the dashboard's node and fabric pages) show no plan: at 4,096 hosts
    making one was a third of their time. The views that do show one get the same plan."""
    data = load_site_data(Site.load(example_site(tmp_path)))
    nodes_view(data)
    node_detail(data, "gpu-node-01")
    assert "placement" not in vars(data)  # nothing has asked for the plan
    view = models_view(data, Runtime.unknown())
    assert "placement" in vars(data)
    plan, notes = view_plan(data)
    assert view["failures"] and [f["model"] for f in view["failures"]] == [u.model for u in plan.unplaced]
    assert data.placement.unplaced == tuple(Unplaced.model_validate(u.model_dump(mode="json")) for u in plan.unplaced)
    assert data.placement.notes == notes == ()  # planned as `llmgw plan` plans: nothing to say


def test_a_gpu_placement_leaves_out_is_held_back_not_free(tmp_path: Path) -> None:
    """status counts what placement can use: a GPU cordoned by hand (llmgw_cordoned_gpus) is
    held back, not free, and its node is no longer a free whole node of its fabric."""
    root = example_site(tmp_path)
    hosts = root / "inventory" / "hosts.yml"
    text = hosts.read_text()
    assert "gpu-node-03: {ansible_host: 192.0.2.13}" in text
    hosts.write_text(text.replace("gpu-node-03: {ansible_host: 192.0.2.13}",
                                  "gpu-node-03: {ansible_host: 192.0.2.13, llmgw_cordoned_gpus: [5]}"))
    view = status_view(load_site_data(Site.load(root), now=NOW), Runtime.unknown(), NOW)
    h100 = next(c for c in view["capacity"] if c["gpu_class"] == "H100-80GB")
    assert {k: h100[k] for k in ("total", "used", "free", "held_back", "unhealthy")} == \
        {"total": 64, "used": 24, "free": 29, "held_back": 9, "unhealthy": 2}
    fabric = next(f for f in view["fabrics"] if f["fabric"] == "ib-0c42a10300b20000")
    assert fabric["free"] == ["gpu-node-04", "gpu-node-05"]
