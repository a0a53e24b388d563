"""Facts refreshed for nodes whose replicas the routers find failing (llmgw.controller.refresh)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from llmgw.controller import Controller
from llmgw.controller.demand import ReplicaLoad, Report, ReportError, parse_report
from llmgw.controller.refresh import REFRESH_EVERY, failing_replicas, nodes_to_refresh
from llmgw.errors import UsageError
from llmgw.facts.cache import read_facts, write_facts
from llmgw.facts.gather import GatherReport, HostOutcome, keep_stale
from llmgw.facts.records import HostFacts
from llmgw.site import Site
from tests.controller.support import WITH_N1, clone, seed_applied, site_repo


def rep(router: str, **failing: bool) -> Report:
    return Report(router=router, process="1", at=0.0,
                  replicas={rid: ReplicaLoad(failing=f) for rid, f in failing.items()})


def test_a_report_says_per_replica_whether_it_fails_as_a_bool_only() -> None:
    got = parse_report({"replicas": {"a": {"healthy": False}, "b": {"healthy": True}, "c": {}}}, 0.0, "r1")
    assert {rid: load.failing for rid, load in got.replicas.items()} == {"a": True, "b": False, "c": False}
    for hostile in ("false", 0, None, [False]):
        with pytest.raises(ReportError, match=r"replicas\.a\.healthy must be true or false"):
            parse_report({"replicas": {"a": {"healthy": hostile}}}, 0.0, "r1")


def test_a_replica_is_failing_only_when_every_router_reporting_it_says_so() -> None:
    reports = [rep("r1", a=True, b=True, c=False), rep("r2", a=True, b=False), rep("gone", c=True)]
    assert failing_replicas(reports, ("r1", "r2")) == {"a"}


def test_nodes_of_failing_replicas_at_most_once_per_interval(tmp_path: Path) -> None:
    from llmgw.state import State

    state = State.model_validate(_state_with("old-1", "n1"))
    assert nodes_to_refresh({"old-1"}, state, {}, 100.0) == ["n1"]
    assert nodes_to_refresh({"old-1"}, state, {"n1": 90.0}, 100.0) == []
    assert nodes_to_refresh({"old-1"}, state, {"n1": 100.0 - REFRESH_EVERY}, 100.0) == ["n1"]
    assert nodes_to_refresh({"other"}, state, {}, 100.0) == []


def _state_with(rid: str, node: str) -> dict[str, Any]:
    return {"lineage": "x", "serial": 1, "models": [], "replicas": [{
        "id": rid, "model": "old", "profile": "cpu", "engine": "llamacpp", "state": "ready",
        "endpoint": "http://192.0.2.1:8000", "shards": [{"node": node, "rank": 0, "port": 8000,
                                                         "unit": f"llmgw-{rid}-0.service"}]}]}


@pytest.mark.postgres
def test_the_demand_tick_refreshes_a_failing_replicas_node_and_plans_again(tmp_path: Path, pg_state: str) -> None:
    repo = site_repo(tmp_path, pg_state)
    work = clone(repo, tmp_path / "work")
    seed_applied(work)
    facts_dir = Site.load(work).facts_dir
    write_facts(facts_dir, HostFacts(host="n1", gathered_at=datetime(2026, 1, 1, tzinfo=UTC)))
    said: list[str] = []
    calls: list[str | None] = []

    def unreachable(site: Site, *, limit: str | None = None) -> GatherReport:
        # What gather writes for a host that does not answer (its last facts, stale since now).
        calls.append(limit)
        kept = keep_stale(read_facts(site.facts_dir)["n1"], "unreachable: ssh timed out", datetime.now(UTC))
        write_facts(site.facts_dir, kept)
        return GatherReport(hosts={"n1": HostOutcome("n1", "stale", "unreachable: ssh timed out", kept)})

    ctl = Controller(work, runtime=tmp_path / "runtime", say=said.append)
    ctl.refresher.gather = unreachable
    try:
        ctl.tick()
        assert ctl._replan_at is None  # n1 answers, as far as the facts know
        ctl.scaler.reports.add(parse_report({"replicas": {"old-1": {"healthy": False}}}, _now(), "r1"))
        ctl.demand_tick()  # r1 is no router of this inventory: its report does not count
        assert calls == []
        # r1 joins the inventory (in the site folder the demand tick reads).
        (work / "hosts.yml").write_text(WITH_N1 + "    llmgw_routers:\n      hosts:\n        r1:\n"
                                        "          ansible_host: 192.0.2.2\n")
        ctl.demand_tick()
        assert calls == ["n1"], said
        assert read_facts(facts_dir)["n1"].stale_since is not None
        assert "facts: n1: stale (unreachable: ssh timed out)" in said
        assert ctl._replan_at is not None  # n1's reachability changed: its commit is planned again
        ctl.demand_tick()
        assert calls == ["n1"]  # once per interval
        ctl.refresher.last.clear()
        ctl.refresher.gather = _broken
        ctl.demand_tick()
        assert "facts: refreshing n1 failed: no such node" in said and ctl.status.error is None
        (work / "hosts.yml").write_text(WITH_N1)
        ctl.tick()
        assert any(line.endswith("planned again: a drain deadline passed or a node stopped answering")
                   for line in said), said
    finally:
        ctl.stop()
        ctl.backend.close()


def _broken(site: Site, *, limit: str | None = None) -> GatherReport:
    raise UsageError("no such node")


def _now() -> float:
    import time

    return time.monotonic()


def test_a_router_reports_a_replica_its_health_checks_find_down_and_the_controller_reads_it() -> None:
    from types import SimpleNamespace

    from llmgw.router.ondemand import OnDemand
    from llmgw.router.table import ReplicaRuntime

    down, up = (ReplicaRuntime(SimpleNamespace(id=rid, model="old", state="ready",  # type: ignore[arg-type]
                                               endpoint="http://192.0.2.1:8000")) for rid in ("old-1", "old-2"))
    down.mark_failure("health check failed", base=1.0, cap=30.0)
    up.mark_healthy()
    table = SimpleNamespace(serial=1, replicas={"old-1": down, "old-2": up})
    router = OnDemand(SimpleNamespace(name="r1"), None, lambda: table, None, lambda: None)  # type: ignore[arg-type,return-value]
    sent = router.report()
    assert {rid: load["healthy"] for rid, load in sent["replicas"].items()} == {"old-1": False, "old-2": True}
    assert failing_replicas([parse_report(sent, 0.0, "r1")], ("r1",)) == {"old-1"}
