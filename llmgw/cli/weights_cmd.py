"""`llmgw weights orphans [--collect]`: list, and reclaim, weights nothing wants any more."""

from __future__ import annotations

from typing import Any

import click

from llmgw.catalog import load_catalog
from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.facts import HostFacts
from llmgw.facts.cache import read_facts, write_facts
from llmgw.site import Site
from llmgw.state import read_state
from llmgw.views.text import human_bytes
from llmgw.weights.check import pin_catalog
from llmgw.weights.orphans import Orphan, catalog_names, find_orphans, spare_unpinned, state_wants, wanted_names

TASK = "Remove orphaned cache entries"  # the task in playbooks/weights_gc.yml


def collect_orphans(site: Site, orphans: dict[str, list[Orphan]], wanted: set[str]) -> dict[str, dict[str, Any]]:
    """Ask each host to remove its orphans; host -> {removed, refused} or {error}."""
    from llmgw import ansible_content
    from llmgw.runner import run_playbook

    hosts = sorted(orphans)
    extravars = {"llmgw_gc_targets": ",".join(hosts),
                 "llmgw_gc_names": {h: [o.name for o in orphans[h]] for h in hosts},
                 "llmgw_gc_in_use": {h: sorted(wanted) for h in hosts}}
    with output.console.status(f"Asking {len(hosts)} host{'s' if len(hosts) != 1 else ''} to remove orphans"):
        result = run_playbook(ansible_content.playbook("weights_gc.yml"), site.inventory, limit=",".join(hosts),
                              extravars=extravars, capture=[TASK])
    report: dict[str, dict[str, Any]] = {}
    for host in hosts:
        task = result.results.get(host, {}).get(TASK)
        if task is None or task.status != "ok":
            reason = result.host_errors.get(host) or (task.message if task else "no answer")
            report[host] = {"error": reason}
        else:
            report[host] = {"removed": task.result.get("removed", []), "refused": task.result.get("refused", [])}
    return report


def forget_removed(site: Site, facts: dict[str, HostFacts], report: dict[str, dict[str, Any]]) -> None:
    """Drop removed entries from the cached facts, so the next plan does not count them."""
    for host, outcome in report.items():
        gone = {r["name"] for r in outcome.get("removed", [])}
        if gone and facts[host].weights is not None:
            kept = [w for w in facts[host].weights or [] if w.cache_name not in gone]
            write_facts(site.facts_dir, facts[host].model_copy(update={"weights": kept}))


def _kept_for_state(facts: dict[str, HostFacts], by_catalog: set[str],
                    by_state: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Cache entries on the hosts that only replicas in the state still want, with those replicas."""
    return [{"host": host, "name": w.cache_name, "path": w.path, "replicas": by_state[w.cache_name]}
            for host in sorted(facts) for w in facts[host].weights or []
            if w.cache and w.cache_name and w.cache_name in by_state and w.cache_name not in by_catalog]


@click.group("weights")
def weights_group() -> None:
    """Model weights on the hosts."""

@weights_group.command("orphans")
@click.option("--collect", is_flag=True, help="Ask each host to remove its orphans (it re-checks each one).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
def orphans_cmd(app: AppContext, collect: bool, as_json: bool) -> None:
    """llmgw-fetched weights that no catalog model wants, per host, from the facts cache.

    Only entries named by llmgw's cache (a hash of their source) are listed; files an
    operator put in a model dir are never touched. Run `llmgw facts` first for a fresh view.
    """
    site = app.live_site("weights orphans --collect") if collect else app.site
    # Whole repositories as pinned by `catalog validate`: their cache names follow the commit.
    catalog, unpinned = pin_catalog(load_catalog(site.catalog_dir, root=site.root), site)
    state = read_state(site.state_file)
    wanted = wanted_names(catalog, state)
    facts = read_facts(site.facts_dir)
    found = spare_unpinned(find_orphans(facts, wanted), unpinned)
    listing = [o for entries in found.values() for o in entries]
    total = sum(o.size_bytes for o in listing)
    kept = _kept_for_state(facts, catalog_names(catalog), state_wants(catalog, state))
    report = collect_orphans(site, found, wanted) if collect and found else {}
    forget_removed(site, facts, report)
    if as_json:
        data: dict[str, Any] = {"orphans": [vars(o) for o in listing], "total_bytes": total,
                                "kept_for_state": kept}
        if collect:
            data["collect"] = report
        output.print_json(data)
        return
    if kept:
        output.console.print("Kept for replicas the state records, though the catalog no longer wants them (they "
                             "become orphans once `llmgw apply` replaces or destroys those replicas):", markup=False)
        for k in kept:
            output.console.print(f"  {k['host']}  {k['name']}  ({', '.join(k['replicas'])})", markup=False)
    if not listing:
        by = "the catalog or by a replica the state records" if kept else "the catalog"
        output.console.print(f"No orphaned weights: every llmgw cache entry is wanted by {by}.", markup=False)
        return
    rows = [[o.host, o.name, human_bytes(o.size_bytes), o.path] for o in listing]
    output.console.print(output.table(["HOST", "ENTRY", "SIZE", "PATH"], rows))
    output.console.print(f"{len(listing)} orphaned entr{'ies' if len(listing) != 1 else 'y'} on "
                         f"{len(found)} host{'s' if len(found) != 1 else ''}, {human_bytes(total)} in all.")
    if not collect:
        output.console.print("Reclaim them with `llmgw weights orphans --collect`.")
        return
    removed = [r for v in report.values() for r in v.get("removed", [])]
    output.console.print(f"Asked to remove {len(listing)} entr{'ies' if len(listing) != 1 else 'y'}; the hosts "
                         f"removed {len(removed)} ({human_bytes(sum(int(r['size_bytes']) for r in removed))}).")
    for host, outcome in sorted(report.items()):
        if "error" in outcome:
            output.console.print(f"  {host}: not asked: {outcome['error']}", markup=False)
        for r in outcome.get("refused", []):
            output.console.print(f"  {host}: refused {r['name']}: {r['reason']}", markup=False)


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [weights_group]
