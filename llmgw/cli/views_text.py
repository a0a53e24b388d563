"""The text of `llmgw status`, `models` and `replicas`: what a person reads of the dicts
`llmgw.views` computes (`--json` prints those dicts as they are). Apart from the commands
(llmgw.cli.views_cmd) so each module holds one job: options and wiring there, layout here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from llmgw.nodetime import DEFAULT_DRAIN_DEADLINE

NEVER = "-"
BAR_WIDTH = 30
BAR_STYLE = {"used": ("█", "cyan"), "free": ("░", "green"), "held_back": ("▒", "yellow"),
             "unhealthy": ("\u00d7", "red"), "empty": (" ", "")}


def console() -> Console:
    """A console sized now (COLUMNS read per command, so tests and pipes get their width)."""
    return Console(highlight=False, soft_wrap=False)


def drain_line(d: dict[str, Any]) -> str:
    """What one drain (an entry of status's `drains`) waits for, and until when."""
    node, end = d["node"], d["deadline"]
    if not d["replicas"]:
        return f"{node} is drained: it runs no replica"
    if end is None:
        until = f"{node} drains with no deadline (`llmgw drain {node} --deadline {DEFAULT_DRAIN_DEADLINE}` sets one)"
    elif d["deadline_passed"]:
        until = f"{node} drains; its deadline {end} has passed"
    else:
        until = f"{node} drains until {end}"
    parts = []
    if d["moving"]:
        parts.append(f"the next apply moves {', '.join(d['moving'])}")
    if d["waiting"]:
        parts.append(f"{', '.join(d['waiting'])} wait{'s' if len(d['waiting']) == 1 else ''} for a node to take "
                     "a replacement" + (f", at most until {end}" if end and not d["deadline_passed"] else ""))
    if d["destroyed_at_deadline"]:
        parts.append(f"the next apply destroys {', '.join(d['destroyed_at_deadline'])}: no node can take it")
    return f"{until}: {'; '.join(parts)}" if parts else until


def _notes(con: Console, notes: Sequence[str]) -> None:
    if notes:
        con.print()
        for n in notes:
            con.print(f"[dim]Note: {Text(n).plain}[/]", soft_wrap=False, markup=True, overflow="fold")


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                under: Sequence[Sequence[str]] | None = None) -> list[str]:
    """Left-aligned columns two spaces apart; `under[i]` are lines printed beneath row i."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(headers)]
    for i, r in enumerate(rows):
        out.append(line(r))
        for extra in (under[i] if under else ()):
            out.append(f"  {extra}")
    return out


# ------------------------------------------------------------------------------ status


def status_text(view: dict[str, Any], con: Console) -> None:
    from llmgw.views.held import per_fabric_text
    from llmgw.views.text import bar_cells, duration

    con.print("[bold]GPU capacity[/]  [cyan]█ used[/] [green]░ free[/] [yellow]▒ held back[/] "
              "(cordoned/draining)  [red]\u00d7 unhealthy[/]")
    caps = view["capacity"]
    name_w = max([len(c["gpu_class"]) for c in caps] + [5])
    con.print(f"  {'CLASS'.ljust(name_w)}  {' ' * BAR_WIDTH}  USED  FREE  HELD  BAD  TOTAL", style="bold")
    for c in caps:
        bar = Text()
        parts = [("used", c["used"]), ("free", c["free"]), ("held_back", c["held_back"]),
                 ("unhealthy", c["unhealthy"])]
        for kind, n in bar_cells(parts, BAR_WIDTH):
            ch, style = BAR_STYLE[kind]
            bar.append(ch * n, style=style)
        row = Text(f"  {c['gpu_class'].ljust(name_w)}  ")
        row.append(bar)
        row.append(f"  {c['used']:>4}  {c['free']:>4}  {c['held_back']:>4}  {c['unhealthy']:>3}  {c['total']:>5}")
        con.print(row)
    if view["gpus_unknown"]:
        con.print(Text(f"  GPUs not known on {len(view['gpus_unknown'])} nodes: "
                       f"{', '.join(view['gpus_unknown'])}", style="dim"), overflow="fold")
    con.print()
    con.print("[bold]Fabrics[/]  (free whole nodes: ready, every GPU healthy and free)")
    if not view["fabrics"]:
        con.print("  none known")
    for f in view["fabrics"]:
        extra = []
        if f["degraded_links"]:
            extra.append(f"{f['degraded_links']} degraded cable{'s' if f['degraded_links'] != 1 else ''}")
        extra.append(f"rails {f['rails']}")
        con.print(Text(f"  {f['fabric']}  {','.join(f['gpu_classes']) or '-':<10} "
                       f"{f['free_whole_nodes']:>3} of {f['nodes']:<3} free   {', '.join(extra)}"))
        con.print(Text(f"    weights: {per_fabric_text(f['weights'], f['nodes'])}"), overflow="fold")
    con.print()
    n, r, m = view["nodes"], view["replicas"], view["models"]
    node_line = f"{n['total']}: {n['ready']} ready, {n['cordoned']} cordoned, {n['draining']} draining"
    if n["stale"]:
        node_line += f"; stale facts: {', '.join(n['stale'])}"
    if n["no_facts"]:
        node_line += f"; no facts: {', '.join(n['no_facts'])}"
    if n["unreachable"]:
        node_line += f"; unreachable (nothing new goes there): {', '.join(n['unreachable'])}"
    if n["lost"]:
        node_line += f"; lost (its replicas are replaced): {', '.join(n['lost'])}"
    con.print(Text("Nodes     ", style="bold") + Text(node_line), overflow="fold")
    for d in view["drains"]:
        con.print(Text(f"  {drain_line(d)}"), overflow="fold")
    rep_line = f"{r['total']}: {r['ready']} ready, {r['starting']} starting, {r['draining']} draining"
    if r["with_errors"]:
        rep_line += f"; {r['with_errors']} with errors (llmgw replicas)"
    con.print(Text("Replicas  ", style="bold") + Text(rep_line))
    con.print(Text("Models    ", style="bold") + Text(
        f"{m['total']}: {m['ready']} ready, {m['starting']} starting, {m['not placed']} not placed, "
        + (f"{m['not moved']} not moved, " if m["not moved"] else "")
        + f"{m['stopped']} stopped, {m['on demand']} on demand"), overflow="fold")
    if view["unplaceable"]:
        con.print()
        con.print(f"[bold red]Cannot be placed[/] ({len(view['unplaceable'])}; `llmgw explain MODEL` says why):")
        w = max(len(u["model"]) for u in view["unplaceable"])
        for u in view["unplaceable"]:
            con.print(Text(f"  {u['model'].ljust(w)}  {u['placed']}/{u['wanted']}  {u['reason']}"), overflow="fold")
    if view["not_moved"]:
        con.print()
        con.print(f"[bold yellow]Not moved[/] ({len(view['not_moved'])}; `llmgw explain MODEL` says why):")
        w = max(len(n["replica"]) for n in view["not_moved"])
        for n in view["not_moved"]:
            con.print(Text(f"  {n['replica'].ljust(w)}  {n['reason']}"), overflow="fold")
    _live_text(view, con)
    con.print()
    idle_after = duration(view["idle_after_seconds"])
    if view["idle"] is None and view["routers_not_known"] and view["routers"]:
        con.print(Text.from_markup(f"[bold]Idle replicas[/] (no request for {idle_after}): not known, "
                                   f"router {', '.join(view['routers_not_known'])} did not answer"))
    elif view["idle"] is None:
        con.print(f"[bold]Idle replicas[/] (no request for {idle_after}): not known, no router answered")
    else:
        waiting = view.get("idle_not_known") or []
        # Not known yet: no request seen, but no router has watched them for the whole window (llmgw.idle).
        unknown = (f"not known yet for {len(waiting)} (no router has watched them for {idle_after}): "
                   + ", ".join(w["id"] for w in waiting)) if waiting else ""
        if not view["idle"]:
            con.print(Text.from_markup(f"[bold]Idle replicas[/] (no request for {idle_after}): none")
                      + Text(f"; {unknown}" if unknown else ""), overflow="fold")
        else:
            con.print(f"[bold]Idle replicas[/] (no request for {idle_after}): {len(view['idle'])}")
            for i in view["idle"]:
                quiet = min(v for v in (i["watched_seconds"], i["age_seconds"]) if v is not None)
                how = f"idle {duration(i['idle_seconds'])}" if i["used"] else \
                    f"never used in the {duration(quiet)} routers have watched it"
                con.print(Text(f"  {i['id']}  ({i['model']})  {how}"))
            if unknown:
                con.print(Text(f"  {unknown}"), overflow="fold")
    _notes(con, view["notes"])


LIVE_ROWS = 20  # replicas listed under "Live" in `llmgw status`; `llmgw replicas` lists them all


def _live_text(view: dict[str, Any], con: Console) -> None:
    """Each replica's in-flight requests and idle time, from the routers that answered."""
    from llmgw.views.replicas import idle_text

    live = view.get("live")
    if live is None:
        return
    con.print()
    routers = ", ".join(view["routers"]) + (f"; not known: {', '.join(view['routers_not_known'])}"
                                            if view["routers_not_known"] else "")
    con.print(Text.from_markup(f"[bold]Live[/] ({view['in_flight']}{'+' if view['routers_not_known'] else ''} "
                               f"in flight; routers asked: ") + Text(routers + ")"), overflow="fold")
    if not live:
        con.print("  no replicas")
        return
    shown = sorted(live, key=lambda r: -(r["in_flight"] or 0))[:LIVE_ROWS]
    partial = bool(view["routers_not_known"])
    rows = [[r["id"], r["state"], f"{r['in_flight']}{'+' if partial else ''}", idle_text(r)] for r in shown]
    for line in plain_table(["REPLICA", "STATE", "IN-FLIGHT", "IDLE"], rows):
        con.print(Text(f"  {line}"), overflow="fold")
    if len(live) > len(shown):
        con.print(Text(f"  ... {len(live) - len(shown)} more (`llmgw replicas`)", style="dim"))


# ------------------------------------------------------------------------------ replicas


def in_flight_text(rec: dict[str, Any]) -> str:
    """Requests in flight now; `?` when no router answered, `N+` when some did not."""
    if rec["in_flight"] is None:
        return "?"
    return f"{rec['in_flight']}+" if rec.get("in_flight_partial") else str(rec["in_flight"])


def replicas_text(view: dict[str, Any], con: Console) -> None:
    from llmgw.views.replicas import idle_text
    from llmgw.views.text import duration

    recs = view["replicas"]
    if not recs:
        which = f" of {view['model']}" if view["model"] else ""
        con.print(f"No replicas{which} in the state (serial {view['serial']}).")
        _notes(con, view["notes"])
        return
    rows = [[r["id"], " ".join(s["text"] for s in r["shards"]), r["state"],
             duration(r["age_seconds"]) if r["age_seconds"] is not None else NEVER, idle_text(r),
             in_flight_text(r), r["endpoint"]]
            for r in recs]
    under = [[d["text"] for d in r["downloads"]] for r in recs]
    for line in plain_table(["REPLICA", "SHARDS", "STATE", "AGE", "IDLE", "IN-FLIGHT", "ENDPOINT"], rows, under):
        con.print(Text(line), overflow="fold")
    errs = [(r["id"], e) for r in recs for e in r["errors"]]
    if errs:
        con.print()
        con.print("[bold red]Errors:[/]")
        for rid, e in errs:
            con.print(Text(f"  {rid}: {e}"), overflow="fold")
    _notes(con, view["notes"])


# ------------------------------------------------------------------------------ models


def models_text(view: dict[str, Any], con: Console) -> None:
    from llmgw.planner.fleet import BYTES_PER_GB, fmt_gb

    rows = [[m["name"], ", ".join(m["aliases"]) or "-", m["serving"], m["replicas_text"], m["status"],
             "-" if m["weights_bytes"] is None else f"{fmt_gb(m['weights_bytes'] / BYTES_PER_GB)} GB",
             (m["commit"] or "-")[:12]]
            for m in view["models"]]
    for line in plain_table(["MODEL", "ALIASES", "SERVING", "REPLICAS", "STATUS", "WEIGHTS", "COMMIT"], rows):
        con.print(Text(line), overflow="fold")
    what = {"not placed": "`llmgw explain MODEL` says why",
            "not moved": "a replica stays where the plan would move it from; `llmgw explain MODEL` says why",
            "stopped": "`llmgw apply` starts it",
            "starting": "wait, or `llmgw replicas` shows progress"}
    present = [s for s in what if view["counts"].get(s)]
    if present:
        con.print()
        for s in present:
            con.print(Text(f"{s}: {what[s]}", style="dim"))
    from llmgw.views.demand import demand_lines

    scaled = demand_lines(view.get("demand", {}))
    if scaled:  # the controller's last scale decision per model (#16)
        con.print()
        con.print(Text("Demand (the controller's last decisions):"))
        for line in scaled:
            con.print(Text(f"  {line}"), overflow="fold")
    _notes(con, view["notes"])
