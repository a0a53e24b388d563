"""`llmgw fabrics`, `llmgw fabrics show ID` and `llmgw fabrics parse FILE`.

The first two read the site's facts cache (one `<host>.json` per host; the hosts asked
for `ibnetdiscover` carry its text); `parse` reads a capture directly and needs no site,
so an operator can check what llmgw makes of a fabric before it ever plans on it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError
from rich.markup import escape

from llmgw.cli import output
from llmgw.cli.context import AppContext
from llmgw.errors import FabricError, FactsError
from llmgw.fabric import Fabric, FabricIndex, fabrics_from_facts, parse_ibnetdiscover
from llmgw.facts import HostFacts

CAPTURE_PREFIX = "ibnetdiscover from "  # how fabrics_from_facts names a capture's source


def load_facts(facts_dir: Path) -> list[HostFacts]:
    """Every host's facts in the cache; a missing cache is an empty one."""
    if not facts_dir.is_dir():
        return []
    facts: list[HostFacts] = []
    for path in sorted(facts_dir.glob("*.json")):
        try:
            facts.append(HostFacts.model_validate_json(path.read_bytes()))
        except ValidationError as exc:
            problems = [f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
                        for e in exc.errors()[:10]]
            raise FactsError(f"{path} is not a host facts file", detail=problems, path=str(path),
                             hint="gather facts again with `llmgw facts`, or remove the file") from None
        except OSError as exc:
            raise FactsError(f"cannot read {path}: {exc.strerror}", path=str(path)) from None
    return facts


def site_index(facts_dir: Path) -> FabricIndex:
    return fabrics_from_facts(load_facts(facts_dir))


def fabric_weights(app: AppContext, index: FabricIndex) -> dict[str, list[dict[str, Any]]]:
    """Fabric id -> the models whose weights how many of its hosts hold (llmgw.views.held)."""
    from llmgw.views.held import per_fabric
    from llmgw.views.planned import load_site_data

    if not index.fabrics:
        return {}
    held = load_site_data(app.site).held
    return {fid: per_fabric(held, f.hosts) for fid, f in index.fabrics.items()}


def read_capture(file: str) -> tuple[str, str]:
    """(text, source) of FILE, `-` being stdin."""
    if file == "-":
        return sys.stdin.read(), "<stdin>"
    path = Path(file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FabricError(f"cannot read {file}: {exc.strerror}", path=file) from None
    try:
        return data.decode("utf-8"), file
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise FabricError(f"{file}, line {line}: expected ibnetdiscover text, found bytes that "
                          "are not UTF-8", path=file, line=line) from None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def tiers_text(fabric: Fabric) -> str:
    return ", ".join(f"{n} {tier}" for tier, n in fabric.tier_counts().items()) or "none"


def rails_text(fabric: Fabric) -> str:
    rails = fabric.rails
    if rails.aligned is None:
        return f"n/a ({rails.reason})"
    return "aligned" if rails.aligned else f"misaligned: {', '.join(rails.misaligned_hosts)}"


def print_summary(fabric: Fabric) -> None:
    """What an operator wants first: shape, size, and what is wrong."""
    c = output.console
    adapters = sum(len(a) for a in fabric.hosts.values())
    expected = ", ".join(f"{kind} {rate}" for kind, rate in sorted(fabric.expected_rates.items()))
    c.print(f"[bold]Fabric {escape(fabric.id)}[/] (from {escape(fabric.source)})", soft_wrap=True)
    c.print(f"  switches: {len(fabric.switches)} ({tiers_text(fabric)})", markup=False, soft_wrap=True)
    c.print(f"  hosts:    {len(fabric.hosts)} ({_plural(adapters, 'adapter port')})", markup=False, soft_wrap=True)
    c.print(f"  links:    {len(fabric.links)} (expected rate: {expected or 'none'})", markup=False, soft_wrap=True)
    degraded = fabric.degraded_links
    c.print(f"  degraded: {len(degraded) or 'none'}", markup=False, soft_wrap=True)
    for link in degraded:
        c.print(f"    {link.a.label} <-> {link.b.label}: {link.rate}, expected {link.expected}",
                markup=False, soft_wrap=True)
    c.print(f"  rails:    {rails_text(fabric)}", markup=False, soft_wrap=True)
    for problem in fabric.rails.problems:
        c.print(f"    {problem}", markup=False, soft_wrap=True)
    for note in fabric.notes:
        c.print(f"  note: {note}", markup=False, soft_wrap=True)


def print_detail(fabric: Fabric) -> None:
    print_summary(fabric)
    c = output.console
    c.print()
    c.print(output.table(
        ["SWITCH", "GUID", "TIER", "HOPS"],
        [[s.name, f"0x{s.guid:016x}", s.tier or "-", "-" if s.hops is None else str(s.hops)]
         for s in fabric.switches]))
    c.print()
    rows = []
    for host, adapters in fabric.hosts.items():
        for a in adapters:
            flag = f"degraded (expected {a.expected})" if a.degraded else ""
            rows.append([host, a.ca if a.port == 1 else f"{a.ca} port {a.port}",
                         a.switch or a.peer, "-" if a.switch_port is None else str(a.switch_port),
                         str(a.rate), flag])
    c.print(output.table(["HOST", "ADAPTER", "SWITCH", "PORT", "RATE", ""], rows))
    if fabric.endpoints:
        c.print()
        c.print(output.table(["OTHER ENDPOINT", "PORT", "CABLED TO"],
                             [[e.end.name, str(e.end.port), e.peer.label] for e in fabric.endpoints]))


@click.group("fabrics", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def fabrics(ctx: click.Context, as_json: bool) -> None:
    """InfiniBand fabrics seen in the site's facts (or parse a capture: `fabrics parse`)."""
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(AppContext)
    assert app is not None
    index = site_index(app.site.facts_dir)
    weights = fabric_weights(app, index)
    if as_json:
        output.print_json({"fabrics": [{**f.to_json(), "weights": weights[f.id]} for f in index.fabrics.values()]})
        return
    if not index.fabrics:
        output.console.print(f"No fabrics: no host's facts under {app.site.facts_dir} carry "
                             "ibnetdiscover output.", markup=False, soft_wrap=True)
        return
    rows = [[f.id, tiers_text(f), str(len(f.hosts)), str(len(f.degraded_links)),
             f.rails.status, f.source.removeprefix(CAPTURE_PREFIX)]
            for f in index.fabrics.values()]
    output.console.print(output.table(
        ["FABRIC", "SWITCHES", "HOSTS", "DEGRADED", "RAILS", "FROM"], rows))
    from llmgw.views.held import per_fabric_text

    output.console.print()
    output.console.print("Weights present (catalog models, on how many of each fabric's hosts):", markup=False)
    for f in index.fabrics.values():
        output.console.print(f"  {f.id}  {per_fabric_text(weights[f.id], len(f.hosts))}", markup=False,
                             soft_wrap=True)

@fabrics.command("show")
@click.argument("fabric_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def show(ctx: click.Context, fabric_id: str, as_json: bool) -> None:
    """One fabric of the site in full: switches, every host's adapters, what is wrong.

    ID is a fabric id (`ib-` and its lowest switch GUID), a unique prefix of one, or
    that switch GUID."""
    app = ctx.find_object(AppContext)
    assert app is not None
    fabric = site_index(app.site.facts_dir).find(fabric_id)
    if as_json:
        output.print_json(fabric.to_json())
    else:
        print_detail(fabric)

@fabrics.command("parse")
@click.argument("file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary.")
def parse(file: str, as_json: bool) -> None:
    """Map the fabric(s) in an ibnetdiscover capture (default or -p format; `-` reads
    stdin). Needs no site."""
    text, source = read_capture(file)
    found = parse_ibnetdiscover(text, source=source)
    if as_json:
        output.print_json({"fabrics": [f.to_json() for f in found]})
        return
    for i, fabric in enumerate(found):
        if i:
            output.console.print()
        print_summary(fabric)


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [fabrics]
