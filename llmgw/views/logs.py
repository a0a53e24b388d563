"""`llmgw logs`: the journal of each shard of a replica, read on its node through Ansible.

One run of `playbooks/logs.yml` over the replica's nodes (llmgw.runner, the one wrapper
around ansible-runner); each node reads `journalctl --unit` of its shards' units. A node
that cannot be reached, or a journalctl that fails, is that shard's `error`; the other
shards still print.
"""

from __future__ import annotations

from typing import Any

from llmgw import ansible_content
from llmgw.runner import run_playbook
from llmgw.site import Site
from llmgw.state import Replica

TASK = "Read the shard journals"


def fetch_logs(site: Site, replica: Replica, lines: int) -> dict[str, Any]:
    shards = sorted(replica.shards, key=lambda s: s.rank)
    units: dict[str, list[str]] = {}
    for s in shards:
        units.setdefault(s.node, []).append(s.unit)
    nodes = sorted(units)
    result = run_playbook(ansible_content.playbook("logs.yml"), site.inventory, limit=",".join(nodes),
                          extravars={"llmgw_logs_targets": ",".join(nodes), "llmgw_logs_units": units,
                                     "llmgw_logs_lines": lines},
                          capture=(TASK,), forks=max(1, min(len(nodes), 50)))
    out = []
    for s in shards:
        task = result.results.get(s.node, {}).get(TASK)
        item = None
        if task is not None:
            item = next((r for r in task.result.get("results", []) if isinstance(r, dict) and r.get("item") == s.unit),
                        None)
        error: str | None = None
        text: list[str] = []
        if item is None:
            error = result.host_errors.get(s.node) or (
                f"{s.node} did not run the journal task" if s.node in result.stats
                else f"{s.node} is not in the inventory's hosts")
        elif item.get("unreachable") or item.get("failed"):
            why = str(item.get("msg") or "no message").removeprefix("Task failed: ")
            error = f"{'unreachable' if item.get('unreachable') else 'failed'}: {why}"
        else:
            text = [str(x) for x in item.get("stdout_lines", [])]
            if int(item.get("rc", 0) or 0) != 0:
                err = str(item.get("stderr") or "").strip().splitlines()
                error = f"journalctl exited {item.get('rc')}" + (f": {err[-1]}" if err else "")
        out.append({"node": s.node, "rank": s.rank, "unit": s.unit, "lines": text, "error": error})
    return {"replica": replica.id, "lines": lines, "shards": out}
