"""`llmgw facts`: run `playbooks/facts.yml` on the nodes and keep what each host reported.

A host that answers gets fresh facts. A host that cannot be reached (or whose facts
tasks failed) keeps its last good facts, marked stale with since-when and why, so one
host down for maintenance does not make the planner forget it; a host never gathered
before is simply reported failed. Host vars stay in the inventory, not in the facts.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError

from llmgw import ansible_content
from llmgw.childenv import child_env
from llmgw.errors import UsageError
from llmgw.facts.cache import read_facts, write_facts
from llmgw.facts.records import HostFacts
from llmgw.inventory import SAFE_INVENTORY_PLUGINS, ansible_bin, load_inventory
from llmgw.known_hosts import forget, names_of
from llmgw.runner import RunEvent, TaskResult, run_playbook
from llmgw.site import Site

PLAYBOOK = "facts.yml"
# Task names in playbooks/facts.yml whose results become the facts.
TASK_NODE = "Gather llmgw node facts"
TASK_GPU = "Gather llmgw GPU facts"
TASK_IB = "Gather llmgw InfiniBand facts"
TASK_PROBES = "Choose one host per fabric"
TASK_FABRIC = "Map each fabric (ibnetdiscover)"
CAPTURED = (TASK_NODE, TASK_GPU, TASK_IB, TASK_FABRIC)

Outcome = Literal["gathered", "stale", "failed"]


@dataclass(frozen=True)
class HostOutcome:
    host: str
    outcome: Outcome
    reason: str | None = None  # why not gathered
    facts: HostFacts | None = None  # what the cache now holds for the host


@dataclass(frozen=True)
class GatherReport:
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    key_changed: tuple[str, ...] = ()  # hosts refused because their SSH host key changed

    def of(self, outcome: Outcome) -> list[HostOutcome]:
        return [h for _, h in sorted(self.hosts.items()) if h.outcome == outcome]

    @property
    def gathered(self) -> list[HostOutcome]:
        return self.of("gathered")

    @property
    def stale(self) -> list[HostOutcome]:
        return self.of("stale")

    @property
    def failed(self) -> list[HostOutcome]:
        return self.of("failed")


@dataclass(frozen=True)
class GatherEvent:
    """Progress, in words a display can use: a phase starts, or a host is done with it."""

    kind: Literal["start", "host_done", "fabric_start", "fabric_done"]
    host: str | None = None
    ok: bool = True
    message: str = ""
    total: int = 0


def facts_from_results(host: str, results: Mapping[str, TaskResult], now: datetime) -> HostFacts:
    """A host's facts from the results of the facts playbook's tasks (pure).

    A task that did not run leaves its facts unknown (None), never empty.
    """
    facts: dict[str, Any] = {}
    for task in (TASK_NODE, TASK_GPU, TASK_IB):
        res = results.get(task)
        if res is not None and res.status == "ok":
            facts.update(res.facts)
    fabric = results.get(TASK_FABRIC)
    fabric_facts = fabric.facts if fabric is not None and fabric.status == "ok" else {}
    return HostFacts(
        host=host,
        gathered_at=now,
        cpus=facts.get("llmgw_cpus"),
        memory_total_mb=facts.get("llmgw_memory_total_mb"),
        gpus=facts.get("llmgw_gpus"),
        gpus_unknown_reason=facts.get("llmgw_gpus_unknown_reason"),
        **_gpu_host(facts.get("llmgw_gpu_host")),
        filesystems=facts.get("llmgw_filesystems"),
        weights=facts.get("llmgw_weights"),
        units=facts.get("llmgw_units"),
        units_unknown_reason=facts.get("llmgw_units_unknown_reason"),
        engines=facts.get("llmgw_engines"),
        ib_adapters=fabric_facts.get("llmgw_ib_adapters", facts.get("llmgw_ib_adapters")),
        ibnetdiscover=fabric_facts.get("llmgw_ibnetdiscover"),
        ibnetdiscover_reason=fabric_facts.get("llmgw_ibnetdiscover_reason"),
        **_ib_stack(facts.get("llmgw_ib_stack")),
    )


def _ib_stack(found: Any) -> dict[str, Any]:
    found = found if isinstance(found, dict) else {}
    return {"rdma_core": found.get("rdma_core"), "ofed": found.get("ofed")}


def _gpu_host(found: Any) -> dict[str, Any]:
    """The host-wide part of gpu_facts (llmgw_gpu_host) as HostFacts fields."""
    found = found if isinstance(found, dict) else {}
    return {"gpu_driver": found.get("driver_version"), "cuda_version": found.get("cuda_version"),
            "gpu_kernel_log": found.get("kernel_log"), "gpu_notes": found.get("notes"),
            "fabric_manager": found.get("fabric_manager")}


def keep_stale(previous: HostFacts, reason: str, now: datetime) -> HostFacts:
    """The last good facts, marked stale since the first gathering that missed the host."""
    return previous.model_copy(update={"stale_since": previous.stale_since or now, "stale_reason": reason})


def resolve_limit(site: Site, nodes: list[str], limit: str) -> list[str]:
    """The nodes an Ansible --limit pattern selects (Ansible itself reads the pattern), reading the
    inventory as llmgw.inventory does: data-file plugins only, from `/` (no site ansible.cfg)."""
    proc = subprocess.run([ansible_bin("ansible"), "all", "-i", str(site.inventory), "--list-hosts",
                           "--limit", limit], capture_output=True, text=True, check=False, cwd="/",
                          env={"ANSIBLE_INVENTORY_ENABLED": SAFE_INVENTORY_PLUGINS, **child_env()})
    listed = {ln.strip() for ln in proc.stdout.splitlines()[1:] if ln.strip()} if proc.returncode == 0 else set()
    chosen = [n for n in nodes if n in listed]
    if not chosen:
        raise UsageError(f"--limit {limit} selects no node of the inventory",
                         hint="use a host name, a group, or a pattern such as 'gpu-0*' or 'all:!gpu-03'")
    return chosen


def _summary(results: Mapping[str, TaskResult]) -> str:
    node = results.get(TASK_NODE)
    gpu = results.get(TASK_GPU)
    parts: list[str] = []
    gpus = gpu.facts.get("llmgw_gpus") if gpu else None
    if gpus is None:
        parts.append("GPUs unknown")
    else:
        classes = sorted({str(g.get("gpu_class")) for g in gpus})
        sick = sum(1 for g in gpus if g.get("problems"))
        parts.append(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}" + (f" {'/'.join(classes)}" if classes else "")
                     + (f" ({sick} unhealthy)" if sick else ""))
    mem = node.facts.get("llmgw_memory_total_mb") if node else None
    parts.append(f"{mem / 1024:.0f} GiB memory" if isinstance(mem, int) else "memory unknown")
    return ", ".join(parts)


def gather(site: Site, *, limit: str | None = None, forks: int = 20, install_nvml: bool = False,
           accept_new_keys: Sequence[str] = (),
           on_progress: Callable[[GatherEvent], None] | None = None,
           now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> GatherReport:
    """Gather facts from the site's nodes (or those `limit` selects) into its facts cache.

    A host's SSH key is recorded in the site's known-hosts file on first contact; a key that
    changed is refused (the host's reason says so) unless the host is in `accept_new_keys`,
    whose old entries are removed first so that this gathering records the new key."""
    inventory = load_inventory(site.inventory)
    nodes = sorted(inventory.nodes)
    if not nodes:
        raise UsageError(f"the inventory {site.inventory} has no nodes",
                         hint="add hosts to group llmgw_nodes (or to any group besides llmgw_routers)")
    unknown = [h for h in accept_new_keys if h not in inventory.hosts]
    if unknown:
        raise UsageError(f"--accept-new-key {unknown[0]}: no such host in the inventory {site.inventory}",
                         hint="name a host as the inventory does (see `llmgw nodes`)")
    for name in accept_new_keys:
        forget(site.known_hosts, names_of(inventory.hosts[name]))
    targets = resolve_limit(site, nodes, limit) if limit else nodes
    progress = on_progress or (lambda _e: None)
    progress(GatherEvent("start", total=len(targets)))
    partial: dict[str, dict[str, TaskResult]] = {}
    done: set[str] = set()

    def on_event(ev: RunEvent) -> None:
        if ev.host is None:
            return
        if ev.task == TASK_PROBES and ev.kind == "host_ok":
            probes = ev.result.get("ansible_facts", {}).get("_llmgw_fabric_probes") or []
            progress(GatherEvent("fabric_start", total=len(probes), message=", ".join(probes)))
            return
        if ev.kind in ("host_failed", "host_unreachable") and not ev.ignore_errors and ev.host not in done:
            done.add(ev.host)
            progress(GatherEvent("host_done", host=ev.host, ok=False, message=ev.message))
        elif ev.kind == "host_ok" and ev.task in CAPTURED:
            partial.setdefault(ev.host, {})[ev.task] = TaskResult(ev.host, ev.task, ev.action or "", "ok", ev.result)
            if ev.task == TASK_IB and ev.host not in done:
                done.add(ev.host)
                progress(GatherEvent("host_done", host=ev.host, message=_summary(partial[ev.host])))
            elif ev.task == TASK_FABRIC:
                text = ev.result.get("ansible_facts", {}).get("llmgw_ibnetdiscover")
                reason = ev.result.get("ansible_facts", {}).get("llmgw_ibnetdiscover_reason")
                progress(GatherEvent("fabric_done", host=ev.host, ok=bool(text),
                                     message=reason or f"{len(text or '')} bytes of ibnetdiscover output"))

    run = run_playbook(ansible_content.playbook(PLAYBOOK), site.inventory, forks=forks, capture=CAPTURED,
                       extravars={"llmgw_facts_targets": ",".join(targets), "llmgw_install_nvml": install_nvml,
                                  "llmgw_facts_meet_routers": not limit},
                       on_event=on_event, host_keys="accept-new")
    previous = read_facts(site.facts_dir)
    stamp = now()
    report: dict[str, HostOutcome] = {}
    for host in targets:
        results = run.results.get(host, {})
        reason = run.host_errors.get(host)
        if reason is None and not all(t in results and results[t].status == "ok" for t in (TASK_NODE, TASK_GPU,
                                                                                              TASK_IB)):
            reason = "the facts tasks did not run on it" if host not in run.stats else "the facts tasks did not finish"
        facts: HostFacts | None = None
        if reason is None:
            try:
                facts = facts_from_results(host, results, stamp)
            except ValidationError as exc:
                first = exc.errors()[0]
                reason = (f"reported facts of the wrong shape ({'.'.join(map(str, first['loc']))}: {first['msg']}); "
                          "is the llmgw.cluster collection on the control host the same version?")
        if facts is not None:
            write_facts(site.facts_dir, facts)
            report[host] = HostOutcome(host, "gathered", facts=facts)
        elif host in previous:
            kept = keep_stale(previous[host], reason or "not gathered", stamp)
            write_facts(site.facts_dir, kept)
            report[host] = HostOutcome(host, "stale", reason=reason, facts=kept)
        else:
            report[host] = HostOutcome(host, "failed", reason=reason)
    return GatherReport(hosts=report, key_changed=tuple(h for h in run.key_changed if h in report))
