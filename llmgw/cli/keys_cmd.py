"""`llmgw keys ...`: API keys, the group tree with its quotas, and usage, in the store.

Every command acts on the store the site's routers read (llmgw.cli.key_store says which, in
order: `--store URL` or `$LLMGW_STORE`; the site's `store:`, e.g. the PostgreSQL the
routers share; on a site with `llmgw_routers`, the first router's own store, through its
host's `llmgw keys` run by Ansible; else a SQLite file beside the state; outside a site
`~/.local/share/llmgw/store.sqlite`) and says which on stderr (`store` in --json). A
router sees changes within a couple of seconds.

Why long: one noun, `keys` with its `keys group` subgroup, whose every command shares the
store plumbing at the top (which store, act there or on the router host, say which).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import UsageError
from llmgw.site import SITE_FILE
from llmgw.store import UNSET, GroupRecord, KeyRecord, Store, Unset, default_store_url, open_store
from llmgw.store.keys import is_key, new_key
from llmgw.store.model import PRIORITIES
from llmgw.store.urls import password_problem, with_password

if TYPE_CHECKING:
    from llmgw.cli.key_store import KeyStoreTarget


def resolve_store_url(app: Any, url: str | None) -> str:
    """--store, else the site's store, else (no llmgw.yaml here) the embedded default; with the
    password of --store-password-file, if given.

    A site whose llmgw.yaml is broken is an error, never a silent switch to another store.
    """
    if url:
        return with_store_password(url)
    if not (Path(app.directory) / SITE_FILE).is_file():
        return default_store_url()
    return with_store_password(str(app.site.store_url))


def target(app: AppContext, url: str | None) -> KeyStoreTarget:
    from llmgw.cli.key_store import key_store_target

    if url:  # checked first: on a router host the command runs where the site file is not readable
        where = key_store_target(Path(app.directory), None, url)
    else:
        here = Path(app.directory)
        where = key_store_target(here, app.site if (here / SITE_FILE).is_file() else None, url)
    return replace(where, url=with_store_password(where.url)) if where.url else where


def act(app: AppContext, url: str | None, argv: list[str], here: Callable[[Store], dict[str, Any]],
        *, stdin: str | None = None) -> tuple[dict[str, Any], KeyStoreTarget]:
    """`here(store)` on a store this host opens, or `llmgw keys ARGV --json` on the router host
    that holds it (llmgw.cli.key_store): the same JSON either way, and where it was done."""
    from llmgw.cli.key_store import run_on_router

    where = target(app, url)
    if where.router is not None:
        data = run_on_router(where, argv, stdin=stdin)
        remote = data.pop("store", None)
        if isinstance(remote, str) and remote:
            where = replace(where, described=f"{where.described} ({remote}, through Ansible)")
        return data, where
    assert where.url is not None
    store = open_store(where.url)
    try:
        return here(store), where
    finally:
        store.close()


def said_where(where: KeyStoreTarget, as_json: bool, data: dict[str, Any]) -> None:
    """Which store a command acted on: in the JSON, or a line on stderr beside the text."""
    if as_json:
        data["store"] = where.described
        if where.notes:
            data["notes"] = list(where.notes)
        return
    output.err_console.print(f"[dim]Store: {where.described}[/]", markup=True, soft_wrap=True, highlight=False)
    for n in where.notes:
        output.err_console.print(f"[dim]Note: {n}[/]", markup=True, soft_wrap=True, highlight=False)


# --store-password-file's password, for the command being run (click's context meta).
_PASSWORD_META = "llmgw.store_password"


def _read_password_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is None:
        return
    try:
        password = value.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {value}: {getattr(exc, 'strerror', None) or exc}") from None
    if not password or any(c in password for c in "\r\n\x00"):
        raise click.BadParameter(f"{value} must hold the password on one line")
    ctx.meta[_PASSWORD_META] = password


def _refuse_password_in_argv(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A password in --store's URL is on the command line, which every local user reads (`ps`,
    /proc/PID/cmdline): refused there. $LLMGW_STORE may carry one (an environment is private)."""
    if value is None or ctx.get_parameter_source(param.name or "") != ParameterSource.COMMANDLINE:
        return value
    problem = password_problem(value)
    if problem is not None:
        raise click.BadParameter(f"the store URL is refused: {problem}, and a command line is readable by every "
                                 "local user; remove the password and give it with --store-password-file FILE "
                                 "(or $LLMGW_STORE_PASSWORD_FILE), or in ~/.pgpass ($PGPASSFILE)")
    return value


def with_store_password(url: str) -> str:
    """`url` with --store-password-file's password when it names PostgreSQL without one."""
    ctx = click.get_current_context(silent=True)
    password = ctx.meta.get(_PASSWORD_META) if ctx is not None else None
    if password and url.startswith(("postgresql://", "postgres://")) and password_problem(url) is None:
        try:
            return with_password(url, password)
        except ValueError as exc:
            raise UsageError(f"--store-password-file: {exc}") from None
    return url


def store_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--store URL and --store-password-file FILE (read first: eager)."""
    fn = click.option(
        "--store", "store_url", metavar="URL", envvar="LLMGW_STORE", callback=_refuse_password_in_argv,
        help="Key store: sqlite:///PATH or postgresql://USER@HOST/DB, without a password: give that with "
             "--store-password-file or ~/.pgpass (default: the site's store, else "
             "~/.local/share/llmgw/store.sqlite).")(fn)
    return click.option(
        "--store-password-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
        envvar="LLMGW_STORE_PASSWORD_FILE", is_eager=True, expose_value=False, callback=_read_password_file,
        help="A file holding the PostgreSQL store's password (one line).")(fn)
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


_INHERIT = ("inherit", "none", "-")


class InheritType(click.ParamType):  # type: ignore[type-arg]
    """A group's admission setting (docs/tenants.md): a value, or `inherit` to take the
    parent's (the default at the top)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # share | priority | yes-no
        self.name = {"share": "N|inherit", "priority": "|".join((*PRIORITIES, "inherit")),
                     "yes-no": "yes|no|inherit"}[kind]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, Unset) or not isinstance(value, str):
            return value
        text = value.strip().lower()
        if text in _INHERIT:
            return None
        if self.kind == "priority":
            if text not in PRIORITIES:
                self.fail(f"{value!r} is not one of {', '.join(PRIORITIES)} or 'inherit'", param, ctx)
            return text
        if self.kind == "yes-no":
            if text not in ("yes", "no"):
                self.fail(f"{value!r} is not yes, no or 'inherit'", param, ctx)
            return text == "yes"
        try:
            share = float(text)
        except ValueError:
            self.fail(f"{value!r} is not a number or 'inherit'", param, ctx)
        if not 0 < share <= 1e6:  # also refuses nan and inf
            self.fail(f"{value!r} must be above 0 and at most 1000000 (shares are relative weights)", param, ctx)
        return share


def _inherit_arg(value: Any) -> str:
    """A setting as `keys group set` reads it back (for the router host's command line)."""
    if value is None:
        return "inherit"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def key_json(k: KeyRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"id": k.id, "name": k.name, "group": k.group, "prefix": k.prefix,
                           "created_at": k.created_at.isoformat(), "active": k.active}
    if k.revoked_at is not None:
        out["revoked_at"] = k.revoked_at.isoformat()
    return out


def group_json(g: GroupRecord) -> dict[str, Any]:
    return {"name": g.name, "parent": g.parent, "rpm": g.rpm, "tokens_per_day": g.tokens_per_day,
            "share": g.share, "priority": g.priority, "may_choose_priority": g.may_choose_priority,
            "created_at": g.created_at.isoformat()}


def _limit(n: int | None) -> str:
    return "unlimited" if n is None else f"{n:,}"


@click.group("keys")
def keys() -> None:
    """API keys for the router, groups with quotas, and usage."""

@keys.command("create")
@click.argument("name")
@click.option("--group", "group", metavar="G", help="Put the key in this group (its quotas apply).")
@click.option("--key-stdin", is_flag=True, hidden=True,
              help="Store the key read from stdin (made by `llmgw keys create` on the control host).")
@store_option
@json_option
@pass_app
def create(app: AppContext, name: str, group: str | None, key_stdin: bool, store_url: str | None,
           as_json: bool) -> None:
    """Create a key and print it. It is shown this once: only its hash is stored."""
    given: str | None = None
    if key_stdin:  # on a router host, from the control host's `keys create` (llmgw.cli.key_store)
        given = sys.stdin.readline().strip()
        if not is_key(given):
            raise UsageError("--key-stdin: standard input holds no key made by llmgw")
    secret = given or new_key()

    def here(store: Store) -> dict[str, Any]:
        record, _ = store.create_key(name, group, secret=secret)
        return {**key_json(record), "store": store.redacted_url}

    argv = ["create", name, "--key-stdin", *(["--group", group] if group else [])]
    data, where = act(app, store_url, argv, here, stdin=secret)
    if given is not None:  # the caller has the key: it never travels back
        output.print_json(data)
        return
    if as_json:
        data.pop("store", None)
        said_where(where, True, data)
        output.print_json({**data, "key": secret})
        return
    output.err_console.print(f"Created key {data['name']!r} (id {data['id']}"
                             f"{', group ' + data['group'] if data.get('group') else ''}) in {where.described}. "
                             "Store it now; it cannot be shown again:", highlight=False, soft_wrap=True)
    click.echo(secret)

def _here(fn: Callable[[Store], dict[str, Any]]) -> Callable[[Store], dict[str, Any]]:
    """`fn`'s JSON, with the store it used (on a router host, what the control host reports)."""
    def run(store: Store) -> dict[str, Any]:
        return {**fn(store), "store": store.redacted_url}
    return run


def _print(where: KeyStoreTarget, as_json: bool, data: dict[str, Any]) -> bool:
    """Print JSON (and return True), or say where the command acted before its text."""
    said_where(where, as_json, data)
    if as_json:
        output.print_json(data)
    return as_json


@keys.command("list")
@click.option("--all", "include_revoked", is_flag=True, help="Include revoked keys.")
@store_option
@json_option
@pass_app
def list_(app: AppContext, include_revoked: bool, store_url: str | None, as_json: bool) -> None:
    """The keys (never the secrets): name, id, prefix, group, creation."""
    data, where = act(app, store_url, ["list", *(["--all"] if include_revoked else [])],
                      _here(lambda store: {"keys": [key_json(k) for k in
                                                    store.list_keys(include_revoked=include_revoked)]}))
    if _print(where, as_json, data):
        return
    records = data["keys"]
    if not records:
        output.console.print("No keys. Create one with `llmgw keys create NAME`.")
        return
    rows = [[k["name"], k["id"], k["prefix"] + "…", k["group"] or "-", _when(k["created_at"]),
             "active" if k["active"] else f"revoked {_when(k['revoked_at'])}"] for k in records]
    output.console.print(output.table(["NAME", "ID", "PREFIX", "GROUP", "CREATED", "STATUS"], rows))


def _when(iso: str | None) -> str:
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M") if iso else "-"


@keys.command("revoke")
@click.argument("key")
@store_option
@json_option
@pass_app
def revoke(app: AppContext, key: str, store_url: str | None, as_json: bool) -> None:
    """Revoke the active key with this name or id (routers drop it within seconds)."""
    data, where = act(app, store_url, ["revoke", key], _here(lambda store: key_json(store.revoke_key(key))))
    if not _print(where, as_json, data):
        output.console.print(f"Revoked key {data['name']!r} (id {data['id']}).")


def usage_json(store: Store, day: str) -> dict[str, Any]:
    """Requests and tokens per key and per group (subtrees included) on one UTC day."""
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

    return {"day": day,
            "keys": [{"id": kid, "name": records[kid].name if kid in records else None,
                      "group": records[kid].group if kid in records else None, **entry(v)}
                     for kid, v in sorted(per_key.items())],
            "groups": [{"name": g, **entry(v)} for g, v in sorted(per_group.items())]}


@keys.command("usage")
@click.option("--day", metavar="YYYY-MM-DD", help="UTC day (default today).")
@store_option
@json_option
@pass_app
def usage(app: AppContext, day: str | None, store_url: str | None, as_json: bool) -> None:
    """Requests and tokens per key and per group (subtrees included) for one UTC day."""
    day = day or datetime.now(UTC).strftime("%Y-%m-%d")
    data, where = act(app, store_url, ["usage", "--day", day], _here(lambda store: usage_json(store, day)))
    if _print(where, as_json, data):
        return
    krows = [[k["name"] or k["id"], f"{k['requests']:,}", f"{k['total_tokens']:,}"] for k in data["keys"]]
    output.console.print(output.table(["KEY", "REQUESTS", "TOKENS"], krows, title=f"Usage on {day} (UTC)"))
    if data["groups"]:
        grows = [[g["name"], f"{g['requests']:,}", f"{g['total_tokens']:,}"] for g in data["groups"]]
        output.console.print(output.table(["GROUP", "REQUESTS", "TOKENS"], grows))


@keys.group("group")
def group() -> None:
    """Groups of keys, in a tree; each level's quotas apply to everything below it."""


def _limit_arg(n: int | Unset | None) -> str:
    return "unlimited" if n is None else str(n)


@group.command("set")
@click.argument("name")
@click.option("--parent", metavar="P", help="Parent group (must exist).")
@click.option("--no-parent", is_flag=True, help="Make this a top-level group.")
@click.option("--rpm", type=LimitType(), default=UNSET, show_default=False,
              help="Requests per minute for the whole subtree, or 'unlimited'.")
@click.option("--tokens-per-day", type=LimitType(), default=UNSET, show_default=False,
              help="Tokens (prompt + completion) per UTC day for the subtree, or 'unlimited'.")
@click.option("--share", type=InheritType("share"), default=UNSET, show_default=False,
              help="Weight in fair sharing of a busy model between groups (default 1), or 'inherit'.")
@click.option("--priority", type=InheritType("priority"), default=UNSET, show_default=False,
              help="Class its requests queue in when a model is busy (default interactive), or 'inherit'.")
@click.option("--may-choose-priority", "may_choose", type=InheritType("yes-no"), default=UNSET,
              show_default=False, help="May its requests ask for a higher class (x-llmgw-priority header, "
                                       "service_tier) than --priority? Default no; or 'inherit'.")
@store_option
@json_option
@pass_app
def group_set(app: AppContext, name: str, parent: str | None, no_parent: bool,
              rpm: int | Unset | None, tokens_per_day: int | Unset | None, share: Any, priority: Any,
              may_choose: Any, store_url: str | None, as_json: bool) -> None:
    """Create group NAME or change it; options not given stay as they are."""
    if parent and no_parent:
        raise click.UsageError("--parent and --no-parent exclude each other")
    new_parent: str | Unset | None = None if no_parent else (parent if parent else UNSET)
    argv = ["group", "set", name, *(["--parent", parent] if parent else []), *(["--no-parent"] if no_parent else []),
            *(["--rpm", _limit_arg(rpm)] if not isinstance(rpm, Unset) else []),
            *(["--tokens-per-day", _limit_arg(tokens_per_day)] if not isinstance(tokens_per_day, Unset) else []),
            *[a for flag, v in (("--share", share), ("--priority", priority), ("--may-choose-priority", may_choose))
              if not isinstance(v, Unset) for a in (flag, _inherit_arg(v))]]
    data, where = act(app, store_url, argv, _here(lambda store: group_json(
        store.set_group(name, parent=new_parent, rpm=rpm, tokens_per_day=tokens_per_day, share=share,
                        priority=priority, may_choose_priority=may_choose))))
    if not _print(where, as_json, data):
        output.console.print(f"Group {data['name']!r}: parent {data['parent'] or '-'}, {_limit(data['rpm'])} "
                             f"requests/minute, {_limit(data['tokens_per_day'])} tokens/day, "
                             f"{_admission_text(data)}.")


def _admission_text(g: dict[str, Any]) -> str:
    choose = g.get("may_choose_priority")
    return (f"share {_inherit_arg(g.get('share'))}, priority {_inherit_arg(g.get('priority'))}, "
            f"may choose priority: {_inherit_arg(choose)}")


def group_list_json(store: Store) -> dict[str, Any]:
    members: dict[str | None, int] = defaultdict(int)
    for record in store.list_keys(include_revoked=False):
        members[record.group] += 1
    return {"groups": [{**group_json(g), "keys": members[g.name]} for g in store.list_groups()]}


@group.command("list")
@store_option
@json_option
@pass_app
def group_list(app: AppContext, store_url: str | None, as_json: bool) -> None:
    """The groups with their parents and limits."""
    data, where = act(app, store_url, ["group", "list"], _here(group_list_json))
    if _print(where, as_json, data):
        return
    if not data["groups"]:
        output.console.print("No groups. Create one with `llmgw keys group set NAME --rpm N`.")
        return
    rows = [[g["name"], g["parent"] or "-", _limit(g["rpm"]), _limit(g["tokens_per_day"]),
             _inherit_arg(g.get("share")), _inherit_arg(g.get("priority")), _inherit_arg(g.get("may_choose_priority")),
             str(g["keys"])] for g in data["groups"]]
    output.console.print(output.table(["GROUP", "PARENT", "RPM", "TOKENS/DAY", "SHARE", "PRIORITY", "MAY CHOOSE",
                                       "KEYS"], rows))


@group.command("delete")
@click.argument("name")
@store_option
@json_option
@pass_app
def group_delete(app: AppContext, name: str, store_url: str | None, as_json: bool) -> None:
    """Delete an empty group (no active keys, no child groups)."""
    def here(store: Store) -> dict[str, Any]:
        store.delete_group(name)
        return {"deleted": name}

    data, where = act(app, store_url, ["group", "delete", name], _here(here))
    if not _print(where, as_json, data):
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
