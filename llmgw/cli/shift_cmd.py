"""`llmgw shift ROUTE MODEL=PERCENT ...`: move a weighted route's traffic between its models.

Like `scale`, it edits the catalog (only the targets' `weight:` values, comments kept) and
prints the diff to commit; the routers follow once the commit is applied (docs/routes.md).
"""

from __future__ import annotations

import json

import click

from llmgw import edits
from llmgw.cli.context import AppContext, pass_app


@click.command("shift")
@click.argument("route")
@click.argument("shares", nargs=-1, metavar="MODEL=PERCENT...")
@click.option("--json", "as_json", is_flag=True, help="Print the split before and after as JSON.")
@pass_app
def shift(app: AppContext, route: str, shares: tuple[str, ...], as_json: bool) -> None:
    """Set how weighted ROUTE (a name or alias) splits its traffic, in its catalog file.

    Each MODEL=PERCENT sets one target's share (whole percentages). Leave exactly one target
    out and it takes the rest of 100; otherwise the split given must add up to 100. A target
    at 0 keeps its place in the route with no share (it is still tried when the others
    cannot answer). Commit the change and apply: a new split also clears what the route's
    guard found (a canary it sent back to the stable target gets its share again).
    """
    site = app.site
    done = edits.shift_edit(site, route, edits.parse_shares(shares))
    before, after = edits.split_of(done.before), edits.split_of(done.after)
    if done.edit is not None:
        done.edit.write()
    if as_json:
        click.echo(json.dumps({"route": done.after.name, "changed": done.edit is not None,
                               "before": {t.model: t.weight for t in done.before.routes},
                               "after": {t.model: t.weight for t in done.after.routes},
                               "file": str(done.edit.path.relative_to(site.root)) if done.edit else None}, indent=2))
        return
    if done.edit is None:
        click.echo(f"{done.after.name} already splits {after}; nothing was written.")
        return
    click.echo(done.edit.diff(site.root), nl=False)
    click.echo(f"Shifted {done.after.name}: {before} -> {after}, once applied.")
    click.echo("Commit the change, then run `llmgw plan` to see what it does.")


COMMANDS: list[click.Command] = [shift]
