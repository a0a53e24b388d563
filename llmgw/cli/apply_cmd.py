"""`llmgw apply [PLAN]`: make the fleet match a plan, rolling and resumable."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich import filesize
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from llmgw.apply import applier_for, check_fresh
from llmgw.cli.context import AppContext, pass_app
from llmgw.cli.output import console, err_console
from llmgw.errors import UsageError
from llmgw.planner import Plan, load_plan
from llmgw.planner.load import check_replanned, site_plan
from llmgw.planner.render import render_plan
from llmgw.runner import default_forks
from llmgw.state import LockInfo, WriteMeta, git_commit, lock_waiting
from llmgw.state.select import backend_for

if TYPE_CHECKING:
    from llmgw.views.live_downloads import DownloadFeed


class StepBars:
    """One rich bar per (step, host): bytes for downloads, tasks done otherwise."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[tuple[str, str], TaskID] = {}
        self.started = time.monotonic()
        self.feed: DownloadFeed | None = None  # the downloads, to the routers' dashboards

    def download(self, host: str, name: str, done: int, total: int | None) -> None:
        """A download by cache entry (llmgw.apply.hosts): on to the dashboards' feed."""
        if self.feed is not None:
            self.feed.reading(host, name, done, total)

    def __call__(self, step: str, host: str, done: int, total: int | None) -> None:
        downloading = step == "weights"
        key = (step, host)
        task = self.tasks.get(key)
        if task is None:
            task = self.progress.add_task(f"{step:<8} {host}", total=total, what="")
            self.tasks[key] = task
        if downloading:
            what = filesize.decimal(done) + (f" / {filesize.decimal(total)}" if total else "")
        else:
            what = f"{done} tasks"
        self.progress.update(task, completed=done, total=total, what=what)

    def say(self, line: str) -> None:
        took = time.monotonic() - self.started
        self.progress.console.print(f"[dim]{took:6.1f}s[/] [bold]>[/] {line}", markup=True, highlight=False)


def _load_plan(path: Path) -> Plan:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the plan {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return load_plan(text, str(path))


def _waiting(holder: LockInfo) -> None:
    err_console.print(f"Waiting for the state's lock, held by {holder.describe()}", markup=False, soft_wrap=True)


@click.command("apply")
@click.argument("plan_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--auto-approve", is_flag=True, help="Apply without asking (needed when not on a terminal).")
@click.option("--grace", type=click.FloatRange(min=0), default=120.0, show_default=True,
              help="Seconds to wait for drained replicas to finish their requests before stopping them.")
@click.option("--forks", type=click.IntRange(1, 1000), default=default_forks(), show_default=True,
              help="Hosts Ansible works on at once.")
@click.option("--lock-timeout", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="SECONDS",
              help="Wait this long for another apply (or the controller) to release the state's lock.")
@pass_app
def apply(app: AppContext, plan_file: Path | None, auto_approve: bool, grace: float, forks: int,
          lock_timeout: float) -> None:
    """Make the fleet match the catalog: plan (or read PLAN_FILE), then start and stop engine shards.

    New replicas serve before old ones are drained and stopped; the state file is written after
    every step, so an interrupted apply is finished by the next `llmgw plan` and `llmgw apply`.
    """
    # A saved plan is read, checked and made again before anything else, the recorded-site
    # guard included: a plan that is not what its inputs give is refused wherever it is applied.
    # Planning contacts no host.
    if plan_file is not None:
        saved = _load_plan(plan_file)
        inputs, plan = site_plan(app.site)
        check_fresh(saved, inputs.state)
        check_replanned(saved, plan, str(plan_file))
    site = app.live_site("apply")
    backend = backend_for(site)
    click.get_current_context().call_on_close(backend.close)
    if plan_file is None:
        inputs, plan = site_plan(site)
        click.echo(render_plan(plan, inputs.state), nl=False)
    meta = WriteMeta("apply", plan=plan.digest()[:12], git_commit=git_commit(site.root))
    if not plan.has_changes:
        if plan_file is not None:
            click.echo("No changes. The fleet matches the catalog.")
        # Routers still get the state when an earlier apply stopped before delivering it.
        applier = applier_for(site, plan, forks=forks, backend=backend, meta=meta)
        if applier.deliveries.routers_behind(applier.hosts.routers, applier.state.serial):
            with lock_waiting(backend, "apply", lock_timeout, on_wait=_waiting):
                behind = applier.catch_up_routers()
            console.print(f"Delivered state serial {applier.state.serial} to {', '.join(behind)}, "
                          "which had not loaded it.")
        return
    if not auto_approve:
        if not sys.stdin.isatty():
            raise UsageError("apply needs approval, and this is not a terminal",
                             hint="review the plan above and pass --auto-approve, or apply a saved plan "
                                  "with `llmgw apply FILE --auto-approve`")
        if not click.confirm("\nApply these changes?", default=False):
            click.echo("Apply cancelled; nothing changed.")
            return
    started = time.monotonic()
    bars = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[what]}"),
                    TimeElapsedColumn(),
                    console=err_console, transient=False, disable=not err_console.is_terminal)
    with lock_waiting(backend, "apply", lock_timeout, on_wait=_waiting), bars:
        ui = StepBars(bars)
        say = ui.say if err_console.is_terminal else (
            lambda line: err_console.print(f"{time.monotonic() - started:6.1f}s > {line}", markup=False))
        from llmgw.apply.admin_token import admin_token
        from llmgw.apply.engine_keys import EngineKeyring
        from llmgw.views.live_downloads import download_feed  # httpx and the tunnels: only when applying
        from llmgw.views.planned import planned_downloads

        ui.feed = download_feed(site, planned_downloads(plan), say=say,
                                token=lambda: admin_token(EngineKeyring.beside(site.state_file)))
        try:
            outcome = applier_for(site, plan, grace=grace, forks=forks, progress=ui, say=say, backend=backend,
                                  meta=meta).run()
        finally:
            ui.feed.close()  # the dashboards drop the downloads
    took = time.monotonic() - started
    console.print(f"Apply complete! {len(outcome.created)} added, {len(outcome.destroyed)} destroyed"
                  + (f", {len(outcome.strays)} stray units removed" if outcome.strays else "")
                  + f" (state serial {outcome.serial}, {took:.0f} s).")
    if outcome.grace_expired:
        console.print(f"Stopped with requests still in flight after the grace period: "
                      f"{', '.join(outcome.grace_expired)}")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [apply]
