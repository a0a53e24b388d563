"""`llmgw facts` (gather what every host has) and `llmgw nodes` (show it).

`nodes` joins three sources: the inventory (node state, labels), the facts cache (what
each host has) and the state (which replicas use which GPUs). A value a host did not
report prints as `-`: unknown is not zero.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from llmgw import collector
from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import FactsError
from llmgw.runner import default_forks
from llmgw.site import Site
from llmgw.views.text import human_bytes, iso
from llmgw.views.versions import summary_lines

# Gathering (Ansible's runner) and rich's progress bars are imported by `llmgw facts` when it
# runs: `llmgw nodes --json` needs neither (a twentieth of its time at 4,096 hosts).
if TYPE_CHECKING:
    from rich.progress import Progress

    from llmgw.facts.gather import GatherEvent, GatherReport

UNKNOWN = "-"


def when(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M") + ("Z" if ts.utcoffset() is not None and not ts.utcoffset() else "")


# ---------------------------------------------------------------------------- nodes


def node_row(rec: dict[str, Any]) -> list[str]:
    from rich.markup import escape  # rich is imported by the table alone: `nodes --json` needs none of it

    gpus = rec["gpus"]
    disk = rec["disk"]
    if disk is None:
        disk_text = UNKNOWN
    elif not disk["filesystems"]:
        disk_text = "none"  # reported: none of the configured dirs exists
    elif disk["total_bytes"] is None:
        disk_text = f"shared {human_bytes(disk['shared_free_bytes'])}/{human_bytes(disk['shared_total_bytes'])}"
    else:
        disk_text = f"{human_bytes(disk['free_bytes'])}/{human_bytes(disk['total_bytes'])}"
        if disk["shared_total_bytes"] is not None:
            disk_text += " +shared"
    if rec["last_seen"] is None:
        seen = "never"
    else:
        seen = when(datetime.fromisoformat(rec["last_seen"]))
        if rec["stale_since"]:
            seen += " (stale)"
    classes = rec["classes"]
    return [
        rec["node"],
        rec["state"] + (f", {rec['condition']}" if rec["condition"] else ""),  # unreachable, lost (llmgw.nodetime)
        UNKNOWN if gpus is None else f"{gpus['free']}/{gpus['total']}",
        UNKNOWN if rec["memory_mb"] is None else human_bytes(rec["memory_mb"] * 1024 * 1024),
        disk_text,
        UNKNOWN if classes is None else (",".join(classes) or "none"),
        escape(rec["stack"]),  # host data: no rich markup in it (llmgw.views.versions keeps it printable)
        UNKNOWN if rec["fabrics"] is None else (",".join(rec["fabrics"]) or "none"),
        str(len(rec["replicas"])),
        seen,
    ]


def nodes_report(site: Site) -> dict[str, Any]:
    """Every inventory node as a record, the fleet's versions and notes (the dashboard's nodes page shows the same)."""
    from llmgw.views.nodes import nodes_view
    from llmgw.views.planned import load_site_data

    return nodes_view(load_site_data(site))


# ---------------------------------------------------------------------------- facts


def report_json(report: GatherReport) -> dict[str, Any]:
    return {
        "gathered": [h.host for h in report.gathered],
        "stale": [{"host": h.host, "reason": h.reason,
                   "stale_since": iso(h.facts.stale_since) if h.facts and h.facts.stale_since else None}
                  for h in report.stale],
        "failed": [{"host": h.host, "reason": h.reason} for h in report.failed],
    }


def print_summary(report: GatherReport) -> None:
    g, s, f = len(report.gathered), len(report.stale), len(report.failed)
    output.console.print(f"Facts: gathered {g}, stale {s}, failed {f}.")
    for h in report.stale:
        since = when(h.facts.stale_since) if h.facts and h.facts.stale_since else "now"
        output.console.print(f"  {h.host}: {h.reason} (kept its last facts, stale since {since})",
                             markup=False, soft_wrap=True)
    for h in report.failed:
        output.console.print(f"  {h.host}: {h.reason} (no earlier facts)", markup=False, soft_wrap=True)


class _ProgressView:
    """Per-host progress on stderr: a bar over the hosts, and a line as each one finishes."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.bar: Any = None

    def __call__(self, ev: GatherEvent) -> None:
        from rich.text import Text

        p = self.progress
        if ev.kind == "start":
            self.bar = p.add_task("gathering facts", total=ev.total)
        elif ev.kind == "host_done":
            p.console.print(Text.assemble(("  ok " if ev.ok else "  failed ", "green" if ev.ok else "red"),
                                          f"{ev.host}: {ev.message}"), soft_wrap=True)
            if self.bar is not None:
                p.advance(self.bar)
        elif ev.kind == "fabric_start" and ev.total:
            p.console.print(Text(f"  mapping fabrics from {ev.message}"), soft_wrap=True)
        elif ev.kind == "fabric_done":
            mark = ("  fabric ", "green") if ev.ok else ("  no fabric map ", "yellow")
            p.console.print(Text.assemble(mark, f"{ev.host}: {ev.message}"), soft_wrap=True)


@click.command("facts")
@click.option("--limit", "-l", metavar="HOSTS", help="Only these hosts (an Ansible pattern: name, group, glob).")
@click.option("--forks", type=click.IntRange(1, 1000), default=default_forks(), show_default=True,
              help="Hosts Ansible talks to at once.")
@click.option("--install-nvml", is_flag=True,
              help="pip-install nvidia-ml-py on hosts that have the NVIDIA driver but not the library.")
@click.option("--accept-new-key", "accept_new_keys", multiple=True, metavar="HOST",
              help="HOST's SSH host key changed and you checked the new one: forget the old key in the "
                   "site's known-hosts file and record the new one (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON instead of a summary.")
@pass_app
def facts_command(app: AppContext, limit: str | None, forks: int, install_nvml: bool,
                  accept_new_keys: tuple[str, ...], as_json: bool) -> None:
    """Gather what every node has (GPUs, memory, disks, weights, fabrics) into the facts cache.

    A host that cannot be reached keeps its last facts, marked stale. Exits 1 only
    when no host at all could be gathered. A host met for the first time has its SSH
    host key recorded in the site's known-hosts file (`known_hosts:` in llmgw.yaml), which
    every later run checks strictly: commit that file. A host whose key changed is refused.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from llmgw.facts.gather import gather

    site = app.live_site("facts")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=output.err_console, transient=True) as progress:
        report = gather(site, limit=limit, forks=forks, install_nvml=install_nvml,
                        accept_new_keys=accept_new_keys, on_progress=_ProgressView(progress))
    if as_json:
        output.print_json(report_json(report))
    else:
        print_summary(report)
    if report.key_changed:
        raise FactsError(f"the SSH host key of {', '.join(report.key_changed)} changed; llmgw did not connect",
                         detail=[f"known hosts: {site.known_hosts}"],
                         hint="check the new key on the host itself, then run `llmgw facts --accept-new-key "
                              f"{report.key_changed[0]}`")
    if not report.gathered and (report.stale or report.failed):
        raise FactsError(f"no host could be gathered ({len(report.stale)} stale, {len(report.failed)} failed)",
                         hint="check that the hosts are up and reachable over SSH: "
                              "`ansible -i INVENTORY all -m ping`")

@click.command("nodes")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
@collector.paused()  # a short-lived process: see llmgw.collector
def nodes_command(app: AppContext, as_json: bool) -> None:
    """Every node: state, free/total GPUs, memory, disk, GPU classes, host stack, fabrics, replicas, last seen.

    `-` means the host did not report it (unknown, not zero). Unhealthy GPUs are
    listed under the table with their reasons, then how many hosts run each NVIDIA driver,
    CUDA, rdma-core and MLNX_OFED version (`versions` in --json; unknown counted apart).
    """
    view = nodes_report(app.site)
    records, notes = view["nodes"], view["notes"]
    if as_json:
        output.print_json(view)
        return
    from rich.console import Console

    columns = ["NODE", "STATE", "GPUS", "MEM", "DISK", "CLASSES", "STACK", "FABRICS", "REPLICAS", "LAST SEEN"]
    # Piped or captured output gets room for every column instead of folding cells.
    console = output.console if output.console.is_terminal else Console(highlight=False, width=200)
    console.print(output.table(columns, [node_row(r) for r in records]))
    lines: list[str] = []
    for r in records:
        for g in r["unhealthy_gpus"]:
            lines.append(f"  {r['node']} GPU {g['index']} ({g['gpu_class']}, {g['uuid']}): "
                         + "; ".join(g["problems"]))
    if lines:
        output.console.print("\nUnhealthy GPUs (neither used nor free):")
        for line in lines:
            output.console.print(line, markup=False, soft_wrap=True)
    left_out = [f"  {r['node']}: {g['why']}" for r in records for g in r["left_out_gpus"]]
    if left_out:
        output.console.print("\nGPUs placement leaves out (cordoned, or of unknown health):")
        for line in left_out:
            output.console.print(line, markup=False, soft_wrap=True)
    versions = summary_lines(view["versions"])
    if versions:
        output.console.print("\nHost stack versions:")
        for line in versions:
            output.console.print(f"  {line}", markup=False, soft_wrap=True)
    stale = [r for r in records if r["stale_since"]]
    if stale:
        output.console.print("\nStale facts (host not reached at the last `llmgw facts`):")
        for r in stale:
            output.console.print(f"  {r['node']}: since {when(datetime.fromisoformat(r['stale_since']))}: "
                                 f"{r['stale_reason']}", markup=False, soft_wrap=True)
            if r["condition_reason"]:
                output.console.print(f"    {r['condition_reason']}", markup=False, soft_wrap=True)
    for note in notes:
        output.console.print(f"\n{note}", markup=False, soft_wrap=True)


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [facts_command, nodes_command]
