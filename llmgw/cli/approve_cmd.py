"""`llmgw approve RUN`: approve a waiting controller run through the controller's admin API,
as the operator the token file names (never by writing the runs store)."""

from __future__ import annotations

from pathlib import Path

import click

from llmgw.controller.operators import ADMIN_LISTEN, TOKEN_FILE, controller_home, read_token
from llmgw.errors import LlmgwError


@click.command("approve")
@click.argument("run_id", type=click.IntRange(min=1))
@click.option("--controller", "url", default=f"http://{ADMIN_LISTEN}", show_default=True,
              envvar="LLMGW_CONTROLLER_ADMIN", metavar="URL",
              help="The controller's admin API (its --listen; through an SSH tunnel from elsewhere).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), envvar="LLMGW_OPERATOR_TOKEN_FILE",
              help=f"Your operator token. Default: the controller's {TOKEN_FILE} in its home "
                   "($LLMGW_CONTROLLER_HOME, /var/lib/llmgw-controller), readable by group llmgw-operators.")
def approve_cmd(run_id: int, url: str, token_file: Path | None) -> None:
    """Approve controller run RUN_ID (a plan that waits for a person); the leader applies it next.

    The run records the operator your token names as its approver."""
    import httpx

    token = read_token(token_file or controller_home() / TOKEN_FILE)
    try:
        answer = httpx.post(f"{url.rstrip('/')}/api/v1/runs/{run_id}/approve", json={}, timeout=30,
                            headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise LlmgwError(f"cannot reach the controller's admin API at {url}: {exc}",
                         hint="is `llmgw controller run` running there? give --controller URL") from None
    try:
        data = answer.json()
    except ValueError:
        data = {}
    if answer.status_code != 200 or not isinstance(data, dict):
        detail = data.get("detail") if isinstance(data, dict) else None
        raise LlmgwError(f"the controller refused to approve run {run_id} ({answer.status_code}): "
                         f"{str(detail or answer.text)[:500]}")
    click.echo(f"Approved run {data.get('id')} ({str(data.get('commit'))[:12]}: {data.get('summary')}) as "
               f"{data.get('approved_by')}; the controller applies it next.")


COMMANDS: list[click.Command] = [approve_cmd]
