"""`llmgw keys ...`: API keys, the group tree with its quotas, and usage, in the store.

Every command takes `--store URL` (or `$LLMGW_STORE`); without it, the site's store
(llmgw.yaml `store:`, default a SQLite file beside the state), and outside a site the
embedded default `~/.local/share/llmgw/store.sqlite`. A router started with the same
store sees changes within a couple of seconds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.site import SITE_FILE
from llmgw.store import UNSET, GroupRecord, KeyRecord, Store, Unset, default_store_url, open_store


def resolve_store_url(app: Any, url: str | None) -> str:
    """--store, else the site's store, else (no llmgw.yaml here) the embedded default.

    A site whose llmgw.yaml is broken is an error, never a silent switch to another store.
    """
    if url:
        return url
    if not (Path(app.directory) / SITE_FILE).is_file():
        return default_store_url()
    return str(app.site.store_url)


@contextmanager
def opened(app: Any, url: str | None) -> Iterator[Store]:
    store = open_store(resolve_store_url(app, url))
    try:
        yield store
    finally:
        store.close()


store_option = click.option(
    "--store", "store_url", metavar="URL", envvar="LLMGW_STORE",
    help="Key store: sqlite:///PATH or postgresql://USER:PASS@HOST/DB "
         "(default: the site's store, else ~/.local/share/llmgw/store.sqlite).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


class LimitType(click.ParamType):  # type: ignore[type-arg]
    """A whole number >= 1, or `unlimited`/`none` to clear the limit."""

    name = "N|unlimited"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | Unset | None:
        if value is None or isinstance(value, int | Unset):
            return value
        text = str(value).strip().lower()
        if text in ("unlimited", "none", "-"):
            return None
        try:
            n = int(text)
        except ValueError:
            self.fail(f"{value!r} is not a whole number or 'unlimited'", param, ctx)
        if n < 1:
            self.fail(f"{n} is below 1 (use 'unlimited' to remove the limit)", param, ctx)
        return n


def key_json(k: KeyRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"id": k.id, "name": k.name, "group": k.group, "prefix": k.prefix,
                           "created_at": k.created_at.isoformat(), "active": k.active}
    if k.revoked_at is not None:
        out["revoked_at"] = k.revoked_at.isoformat()
    return out


def group_json(g: GroupRecord) -> dict[str, Any]:
    return {"name": g.name, "parent": g.parent, "rpm": g.rpm, "tokens_per_day": g.tokens_per_day,
            "created_at": g.created_at.isoformat()}


def _limit(n: int | None) -> str:
    return "unlimited" if n is None else f"{n:,}"


@click.group("keys")
def keys() -> None:
    """API keys for the router, groups with quotas, and usage."""

@keys.command("create")
@click.argument("name")
@click.option("--group", "group", metavar="G", help="Put the key in this group (its quotas apply).")
@store_option
@json_option
@pass_app
def create(app: AppContext, name: str, group: str | None, store_url: str | None, as_json: bool) -> None:
    """Create a key and print it. It is shown this once: only its hash is stored."""
    with opened(app, store_url) as store:
        record, secret = store.create_key(name, group)
    if as_json:
        output.print_json({**key_json(record), "key": secret})
        return
    output.err_console.print(f"Created key {record.name!r} (id {record.id}"
                             f"{', group ' + record.group if record.group else ''}). "
                             "Store it now; it cannot be shown again:")
    click.echo(secret)

@keys.command("list")
@click.option("--all", "include_revoked", is_flag=True, help="Include revoked keys.")
@store_option
@json_option
@pass_app
def list_(app: AppContext, include_revoked: bool, store_url: str | None, as_json: bool) -> None:
    """The keys (never the secrets): name, id, prefix, group, creation."""
    with opened(app, store_url) as store:
        records = store.list_keys(include_revoked=include_revoked)
    if as_json:
        output.print_json({"keys": [key_json(k) for k in records]})
        return
    if not records:
        output.console.print("No keys. Create one with `llmgw keys create NAME`.")
        return
    rows = [[k.name, k.id, k.prefix + "…", k.group or "-", k.created_at.strftime("%Y-%m-%d %H:%M"),
             "active" if k.active else f"revoked {k.revoked_at:%Y-%m-%d %H:%M}"] for k in records]
    output.console.print(output.table(["NAME", "ID", "PREFIX", "GROUP", "CREATED", "STATUS"], rows))

@keys.command("revoke")
@click.argument("key")
@store_option
@pass_app
def revoke(app: AppContext, key: str, store_url: str | None) -> None:
    """Revoke the active key with this name or id (routers drop it within seconds)."""
    with opened(app, store_url) as store:
        record = store.revoke_key(key)
    output.console.print(f"Revoked key {record.name!r} (id {record.id}).")

@keys.command("usage")
@click.option("--day", metavar="YYYY-MM-DD", help="UTC day (default today).")
@store_option
@json_option
@pass_app
def usage(app: AppContext, day: str | None, store_url: str | None, as_json: bool) -> None:
    """Requests and tokens per key and per group (subtrees included) for one UTC day."""
    day = day or datetime.now(UTC).strftime("%Y-%m-%d")
    with opened(app, store_url) as store:
        rows = store.usage(day)
        records = {k.id: k for k in store.list_keys(include_revoked=True)}
        groups = {g.name: g for g in store.list_groups()}
    per_key: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    per_group: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        for acc in [per_key[r.key_id]] + [per_group[g] for g in _ancestry(groups, records, r.key_id)]:
            acc[0] += r.requests
            acc[1] += r.prompt_tokens
            acc[2] += r.completion_tokens

    def entry(v: list[int]) -> dict[str, int]:
        return {"requests": v[0], "prompt_tokens": v[1], "completion_tokens": v[2],
                "total_tokens": v[1] + v[2]}

    if as_json:
        output.print_json({
            "day": day,
            "keys": [{"id": kid, "name": records[kid].name if kid in records else None,
                      "group": records[kid].group if kid in records else None, **entry(v)}
                     for kid, v in sorted(per_key.items())],
            "groups": [{"name": g, **entry(v)} for g, v in sorted(per_group.items())]})
        return
    krows = [[records[kid].name if kid in records else kid, f"{v[0]:,}", f"{v[1] + v[2]:,}"]
             for kid, v in sorted(per_key.items())]
    output.console.print(output.table(["KEY", "REQUESTS", "TOKENS"], krows, title=f"Usage on {day} (UTC)"))
    if per_group:
        grows = [[g, f"{v[0]:,}", f"{v[1] + v[2]:,}"] for g, v in sorted(per_group.items())]
        output.console.print(output.table(["GROUP", "REQUESTS", "TOKENS"], grows))

@keys.group("group")
def group() -> None:
    """Groups of keys, in a tree; each level's quotas apply to everything below it."""

@group.command("set")
@click.argument("name")
@click.option("--parent", metavar="P", help="Parent group (must exist).")
@click.option("--no-parent", is_flag=True, help="Make this a top-level group.")
@click.option("--rpm", type=LimitType(), default=UNSET, show_default=False,
              help="Requests per minute for the whole subtree, or 'unlimited'.")
@click.option("--tokens-per-day", type=LimitType(), default=UNSET, show_default=False,
              help="Tokens (prompt + completion) per UTC day for the subtree, or 'unlimited'.")
@store_option
@pass_app
def group_set(app: AppContext, name: str, parent: str | None, no_parent: bool,
              rpm: int | Unset | None, tokens_per_day: int | Unset | None, store_url: str | None) -> None:
    """Create group NAME or change it; options not given stay as they are."""
    if parent and no_parent:
        raise click.UsageError("--parent and --no-parent exclude each other")
    new_parent: str | Unset | None = None if no_parent else (parent if parent else UNSET)
    with opened(app, store_url) as store:
        g = store.set_group(name, parent=new_parent, rpm=rpm, tokens_per_day=tokens_per_day)
    output.console.print(f"Group {g.name!r}: parent {g.parent or '-'}, {_limit(g.rpm)} requests/minute, "
                         f"{_limit(g.tokens_per_day)} tokens/day.")

@group.command("list")
@store_option
@json_option
@pass_app
def group_list(app: AppContext, store_url: str | None, as_json: bool) -> None:
    """The groups with their parents and limits."""
    with opened(app, store_url) as store:
        groups = store.list_groups()
        members: dict[str | None, int] = defaultdict(int)
        for record in store.list_keys(include_revoked=False):
            members[record.group] += 1
    if as_json:
        output.print_json({"groups": [{**group_json(g), "keys": members[g.name]} for g in groups]})
        return
    if not groups:
        output.console.print("No groups. Create one with `llmgw keys group set NAME --rpm N`.")
        return
    rows = [[g.name, g.parent or "-", _limit(g.rpm), _limit(g.tokens_per_day), str(members[g.name])]
            for g in groups]
    output.console.print(output.table(["GROUP", "PARENT", "RPM", "TOKENS/DAY", "KEYS"], rows))

@group.command("delete")
@click.argument("name")
@store_option
@pass_app
def group_delete(app: AppContext, name: str, store_url: str | None) -> None:
    """Delete an empty group (no active keys, no child groups)."""
    with opened(app, store_url) as store:
        store.delete_group(name)
    output.console.print(f"Deleted group {name!r}.")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [keys]


def _ancestry(groups: dict[str, GroupRecord], keys: dict[str, KeyRecord], key_id: str) -> list[str]:
    g = keys[key_id].group if key_id in keys else None
    out: list[str] = []
    while g is not None and g in groups and g not in out:
        out.append(g)
        g = groups[g].parent
    return out
