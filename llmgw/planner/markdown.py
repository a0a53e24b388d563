"""The plan as Markdown, for a pull request's review comment (`llmgw show plan.json --format markdown`).

A pull request may come from anyone, and every name and reason in a plan comes from its
catalog and inventory: all of it is escaped (HTML and Markdown punctuation), so a model
name can neither inject markup into the comment nor break its tables.
"""

from __future__ import annotations

import html
import re

from llmgw.planner.render import summary_line
from llmgw.planner.schema import Action, Plan

_SYMBOL = {"create": "`+` create", "update": "`~` update", "replace": "`-/+` replace", "destroy": "`-` destroy"}
_PUNCT = re.compile(r"([\\`*_{}\[\]#!|~])")
ROWS_SHOWN = 200


def md(text: str | None) -> str:
    """`text` as inert Markdown: one line, HTML escaped, Markdown punctuation backslash-escaped
    (links, images, emphasis, code, headings and table cells cannot start or end in it)."""
    if not text:
        return ""
    one_line = " ".join(str(text).split())
    return _PUNCT.sub(r"\\\1", html.escape(one_line, quote=False))


def _where(a: Action, plan: Plan) -> str:
    if a.action == "destroy" or a.stray:
        return ", ".join(f"{u.unit} on {u.node}" for u in a.units)
    new = next((r for r in plan.desired.replicas if r.id == a.replica), None)
    if new is None:
        return ""
    where = ", ".join(f"{s.node} gpus {list(s.gpus)} port {s.port}" for s in new.shards)
    return where + ("; runs the model's own code (trust_remote_code)" if new.trust_remote_code else "")


def render_markdown(plan: Plan) -> str:
    """The plan's summary, one table row per action, then what cannot be placed and the notes."""
    s = plan.summary
    head = (f"Plan: {s.add} to add, {s.change} to change, {s.destroy} to destroy" if plan.has_changes
            else "No changes")
    out = [f"### llmgw: {head}", "",
           f"Planned against state serial {plan.state_serial}"
           + (f", lineage `{md(plan.state_lineage)}`" if plan.state_lineage else "") + ".", ""]
    if plan.has_changes:
        out += ["| | replica or model | model | where | why |", "|---|---|---|---|---|"]
        for a in plan.actions[:ROWS_SHOWN]:
            name = a.replica or a.model
            if a.action == "replace":
                name = f"{a.replaces} → {a.replica}"
            if a.stray:
                name = f"{a.replica} (units no state records)"
            out.append(f"| {_SYMBOL[a.action]} | {md(name)} | {md(a.model)} | {md(_where(a, plan))} | "
                       f"{md(a.reason)} |")
        if len(plan.actions) > ROWS_SHOWN:
            out.append(f"| | … and {len(plan.actions) - ROWS_SHOWN} more | | | |")
        out.append("")
    destroys = [a for a in plan.actions if a.action in ("destroy", "replace")]
    if destroys:
        out += [f"> **{len(destroys)} replica(s) will be drained and stopped.** "
                "Review before merging.", ""]
    if plan.unplaced:
        out += ["<details><summary>Models that cannot be placed</summary>", ""]
        for u in plan.unplaced:
            out.append(f"- **{md(u.model)}**: {u.placed} of {u.wanted} placed")
            out.extend(f"  - {md(r.profile)} on {md(r.node or r.fabric or 'every node')}: {md(r.reason)}"
                       for r in u.rejections[:20])
            out.extend(f"  - {md(n.replica)}: {md(n.reason)}" for n in u.not_moved)
        out += ["", "</details>", ""]
    if plan.notes:
        out += ["<details><summary>Notes</summary>", "", *(f"- {md(n)}" for n in plan.notes), "", "</details>", ""]
    out.append(summary_line(plan))
    return "\n".join(out) + "\n"
