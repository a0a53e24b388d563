"""`llmgw state ...`: terraform's state verbs over the site's state backend.

    list               every serial kept, newest first, with who wrote it, when, from what
    show [SERIAL]      one serial (default the newest): models and replicas, or --json
    pull               the newest state as JSON on stdout (or --out FILE)
    push FILE          replace the newest state, refused for an older serial or another
                       lineage unless --force (which says what it loses)
    lock-info          who holds the lock, doing what, until when
    unlock LOCK_ID     break a dead holder's lock
    migrate --to URL   copy the state into an empty backend, keeping serial and lineage
    import --lineage L adopt another state's units deliberately (an empty state takes lineage L)
    follow --out FILE  keep a router's state file equal to a PostgreSQL state (LISTEN/NOTIFY)
    grant-follower ROLE  make ROLE a read-only follower of a PostgreSQL state (the routers')
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

import click

from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import StateError, UsageError
from llmgw.state import State, WriteMeta, git_commit, parse_state
from llmgw.state.select import backend_for, is_state_url, open_backend
from llmgw.yamlio import atomic_write


def _when(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value is not None else "-"


@click.group("state")
def state_group() -> None:
    """Inspect and move the applied state (a file, or PostgreSQL for several operators)."""


@state_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
def list_cmd(app: AppContext, as_json: bool) -> None:
    """Every serial the backend keeps, newest first, with its author, time, plan and git commit."""
    with backend_for(app.site) as backend:
        records = sorted(backend.history(), key=lambda r: -r.serial)
        where = backend.where
    if as_json:
        output.print_json({"backend": where, "serials": [r.as_json() for r in records]})
        return
    if not records:
        click.echo(f"The state at {where} is empty: nothing was applied yet.")
        return
    rows = [[str(r.serial), _when(r.written_at), r.author or "-", r.operation, r.plan or "-",
             (r.git_commit or "-")[:14], r.lineage[:8]] for r in records]
    output.console.print(output.table(["SERIAL", "WRITTEN", "AUTHOR", "OPERATION", "PLAN", "COMMIT", "LINEAGE"],
                                      rows))


def _show_text(state: State, where: str) -> None:
    c = output.console
    click.echo(f"State serial {state.serial}, lineage {state.lineage or '(none yet)'}, at {where}")
    if state.models:
        c.print(output.table(["MODEL", "ALIASES", "MIN", "MAX"],
                             [[m.name, ", ".join(m.aliases) or "-", str(m.scaling.min), str(m.scaling.max)]
                              for m in state.models]))
    if state.replicas:
        c.print(output.table(["REPLICA", "MODEL", "STATE", "ENDPOINT", "SHARDS"],
                             [[r.id, r.model, r.state, r.endpoint,
                               ", ".join(f"{s.unit} on {s.node}" for s in r.shards)] for r in state.replicas]))
    else:
        c.print("No replicas.")


@state_group.command("show")
@click.argument("serial", required=False, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the state document itself.")
@pass_app
def show_cmd(app: AppContext, serial: int | None, as_json: bool) -> None:
    """One serial of the state (default: the newest)."""
    with backend_for(app.site) as backend:
        state = backend.read() if serial is None else backend.read_serial(serial)
        where = backend.where
    if as_json:
        sys.stdout.write(state.to_json())
    else:
        _show_text(state, where)


@state_group.command("pull")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write it to FILE instead of stdout.")
@pass_app
def pull_cmd(app: AppContext, out: Path | None) -> None:
    """The newest state as JSON, to edit offline and `push` back, or to keep as a backup."""
    with backend_for(app.site) as backend:
        state = backend.read()
    if out is None:
        sys.stdout.write(state.to_json())
    else:
        atomic_write(out, state.to_json())
        click.echo(f"Wrote serial {state.serial} (lineage {state.lineage or 'none'}) to {out}.", err=True)


def _read_file(path: Path) -> State:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return parse_state(text, str(path))


@state_group.command("push")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Push even an older serial or another lineage (says what it loses).")
@pass_app
def push_cmd(app: AppContext, file: Path, force: bool) -> None:
    """Make FILE the newest state, written as the next serial, under the lock."""
    state = _read_file(file)
    with backend_for(app.site) as backend, backend.lock("push"):
        before = backend.read()
        written = backend.push(state, force=force, meta=WriteMeta("push", git_commit=git_commit(app.site.root)))
    if written.serial == before.serial:
        click.echo(f"The state at {backend.where} already is {file} (serial {written.serial}); nothing pushed.")
        return
    click.echo(f"Pushed {file} as serial {written.serial} (lineage {written.lineage}) to {backend.where}.")


@state_group.command("lock-info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def lock_info_cmd(app: AppContext, as_json: bool) -> None:
    """Who holds the state's lock, doing what, and until when its lease runs."""
    with backend_for(app.site) as backend:
        info = backend.lock_info()
        where = backend.where
    if as_json:
        output.print_json({"backend": where, "lock": info.as_json() if info else None})
    elif info is None:
        click.echo(f"The state at {where} is not locked.")
    else:
        output.console.print(output.table(
            ["LOCK ID", "HOLDER", "OPERATION", "SINCE", "LEASE UNTIL"],
            [[info.id, info.holder, info.operation, _when(info.acquired_at),
              _when(info.expires_at) if info.expires_at else "while its process runs"]]))


@state_group.command("unlock")
@click.argument("lock_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_app
def unlock_cmd(app: AppContext, lock_id: str, yes: bool) -> None:
    """Break the lock LOCK_ID, when its holder is gone and you cannot wait for its lease.

    A holder that still runs loses its lock: its next write is refused (fencing), so
    nothing is lost, but its apply stops half way and a new plan finishes it."""
    with backend_for(app.site) as backend:
        info = backend.lock_info()
        if info is not None and info.id == lock_id and not yes:
            if not sys.stdin.isatty():
                raise UsageError("unlock needs confirmation, and this is not a terminal", hint="pass --yes")
            if not click.confirm(f"Break the lock held by {info.describe()}?", default=False):
                output.console.print("Left the lock alone.")
                return
        broken = backend.unlock(lock_id)
    click.echo(f"Broke the lock {broken.id} held by {broken.holder} ({broken.operation}).")


def _carry_engine_secret(old_state: Path, target: str, root: Path) -> None:
    """Engine keys derive from a secret kept beside the state file; a PostgreSQL state's copy
    lives in `.llmgw/`, so the secret moves there too, or the next apply would re-key every engine."""
    from llmgw.apply.engine_keys import SECRET_FILE

    if not is_state_url(target):
        return
    old, new = old_state.with_name(SECRET_FILE), root / ".llmgw" / SECRET_FILE
    if old.is_file() and not new.exists():
        new.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(old.read_text(encoding="ascii"))
        click.echo(f"Copied the engine key secret to {new}; other control hosts need it too "
                   "($LLMGW_ENGINE_KEY_SECRET).")


@state_group.command("migrate")
@click.option("--to", "target", required=True, metavar="URL_OR_PATH",
              help="An empty backend: postgresql://user@host/db (password from $LLMGW_STATE_PASSWORD...) or a path.")
@pass_app
def migrate_cmd(app: AppContext, target: str) -> None:
    """Copy the newest state into an empty backend, keeping its serial and lineage.

    The source is locked meanwhile; afterwards set `state:` in llmgw.yaml to the target."""
    site = app.site
    with backend_for(site) as source, source.lock("migrate"):
        state = source.read()
        if not state.serial:
            raise StateError(f"the state at {source.where} is empty: nothing to migrate",
                             hint=f"set `state: {target}` in llmgw.yaml and apply from there")
        with open_backend(target, root=site.root, where="--to") as dest:
            written = dest.seed(state, WriteMeta("migrate", git_commit=git_commit(site.root)))
            where = dest.where
    _carry_engine_secret(site.state_file, target, site.root)
    click.echo(f"Copied serial {written.serial} (lineage {written.lineage}) from {source.where} "
                         f"to {where}.")
    click.echo(f"Now set `state: {target}` in {site.root / 'llmgw.yaml'} and commit it, so every "
                         "checkout plans against the same state.")


@state_group.command("follow")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The state file to keep current (the one a router serves).")
@click.option("--poll", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds between reads should a notification be missed.")
@pass_app
def follow_cmd(app: AppContext, out: Path, poll: float) -> None:
    """Keep FILE equal to the newest serial of a PostgreSQL state (LISTEN/NOTIFY), for a router
    beside it: a router then follows writes at once without apply delivering to it, and routes
    by the last good copy through a database outage. Runs until interrupted."""
    import signal
    import threading

    from llmgw.state import Database, Follow, require

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_a: stop.set())
    with backend_for(app.site) as backend:
        follower = require(backend, Follow, to="follow it (a local file reaches routers through apply)")
        follower.cache = None  # the follower keeps --out itself (a router's home), nothing in the site folder
        from llmgw.state.roles import writable

        with require(backend, Database, to="check the follower's database role").transaction() as cur:
            can_write = writable(cur)
        if can_write:  # the controller's role, most likely: a compromised router could approve runs
            click.echo(f"warning: this follower's database role may write {', '.join(can_write)}; give the routers "
                       "a read-only role (`llmgw state grant-follower ROLE`, docs/state.md)", err=True)

        def write(state: State) -> None:
            try:  # apply may have delivered a newer serial meanwhile: never step a router back
                there = parse_state(out.read_text(encoding="utf-8"), str(out))
            except (OSError, StateError):
                there = None
            if there is not None and there.lineage == state.lineage and there.serial > state.serial:
                click.echo(f"serial {state.serial} not written: {out} holds serial {there.serial}", err=True)
                return
            atomic_write(out, state.to_json())
            click.echo(f"serial {state.serial} written to {out}", err=True)

        try:
            follower.follow(write, stop, poll=poll)
        except KeyboardInterrupt:
            stop.set()


@state_group.command("grant-follower")
@click.argument("role")
@click.option("--print", "only_print", is_flag=True, help="Print the SQL for a database administrator; run nothing.")
@pass_app
def grant_follower_cmd(app: AppContext, role: str, only_print: bool) -> None:
    """Give PostgreSQL role ROLE read access to the state and nothing else (llmgw.state.roles):
    what the routers' state followers connect as (llmgw_router_state_follow_url), so a router
    can neither write a serial nor approve or insert a controller run. Run as the tables' owner
    (the controller's role); ROLE must exist."""
    from llmgw.controller import runs_for
    from llmgw.state import Database, require
    from llmgw.state.roles import grant_follower, grant_follower_sql

    with backend_for(app.site) as backend:
        database = require(backend, Database, to="grant a database role read access to it")
        if only_print:
            with database.transaction() as cur:
                cur.execute("SELECT current_schema()")
                schema = cur.fetchone()[0] or "public"
            click.echo(";\n".join(grant_follower_sql(role, schema)) + ";")
            return
        runs_for(backend)  # the runs' table exists, so its rights are revoked too
        with database.transaction() as cur:
            done = grant_follower(cur, role)
    for stmt in done:
        click.echo(stmt, err=True)
    click.echo(f"{role} may read the state at {backend.where} and nothing else: give it to the routers' "
               "followers (llmgw_router_state_follow_url, llmgw_router_state_follow_password).")


@state_group.command("import")
@click.option("--lineage", required=True, help="The lineage the hosts' units carry (the plan's refusal names it).")
@pass_app
def import_cmd(app: AppContext, lineage: str) -> None:
    """Adopt units of another state deliberately: start this empty state in their lineage.

    Its plans then manage those units as their own: units no replica records are drift, and
    the next plan destroys them (and creates what the catalog wants). Prefer pointing
    `state:` in llmgw.yaml at the state that made them, which keeps them running."""
    lineage = lineage.strip()
    if not lineage or len(lineage) > 200 or not all(c.isalnum() or c in "-_." for c in lineage):
        raise UsageError(f"--lineage {lineage!r} is not a lineage", hint="copy it from the plan's refusal")
    with backend_for(app.site) as backend, backend.lock("import"):
        current = backend.read()
        if current.serial or current.lineage:
            raise StateError(f"the state at {backend.where} is not empty (serial {current.serial}, lineage "
                             f"{current.lineage})", hint="import only into an empty state")
        written = backend.write(State(lineage=lineage), expect_serial=0,
                                meta=WriteMeta("import", git_commit=git_commit(app.site.root)))
    click.echo(f"The state at {backend.where} now has lineage {written.lineage} (serial "
                         f"{written.serial}); `llmgw plan` shows what its plans do with those units.")


# What `llmgw` attaches to its group.
COMMANDS: list[click.Command] = [state_group]
