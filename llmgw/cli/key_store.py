"""Which key store `llmgw keys` acts on, and acting on one that lives on a router host.

A verb's own logic, in the CLI: it reads the site and runs a playbook, which the store package
(llmgw.store: the keys, quotas and usage the routers serve from) must not, since the router
imports that package (#34).

The keys must land where the site's routers read them, not in a file beside the state
that no router opens. In order:

1. `--store URL` or `$LLMGW_STORE`: that store (on a router host, the router's unit sets
   `$LLMGW_STORE`, so the same command there acts on the router's own store);
2. no llmgw.yaml here: the embedded default (`~/.local/share/llmgw/store.sqlite`);
3. `store:` in llmgw.yaml: that store, typically the PostgreSQL all routers share;
4. a live site whose inventory has `llmgw_routers`: the store of the first router, read
   and written by the router host's own `llmgw keys` through Ansible
   (`playbooks/router_keys.yml`, as apply reaches hosts), where the router's secrets
   file names it (the role's default: SQLite on the router host);
5. otherwise the SQLite file beside the state, for a router run on this host.

A key made through a router host is generated here and handed over on the command's
standard input in a task with `no_log`: it is never on a command line, in a task result
or in a log; the router host's `llmgw` prints the record without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgw import ansible_content
from llmgw.errors import RunnerError, StoreError
from llmgw.inventory import load_inventory
from llmgw.runner import run_playbook
from llmgw.site import SITE_FILE, Site
from llmgw.store import default_store_url, redact_url

RUN_TASK = "Run llmgw keys on the router host"
REPORT_TASK = "Report what llmgw keys said"
ROUTER_TIMEOUT_S = 120


@dataclass(frozen=True)
class KeyStoreTarget:
    """A store to open here (`url`), or a router host whose store its own llmgw acts on."""

    described: str  # which store, for the operator: never a password
    url: str | None = None
    router: str | None = None
    site: Site | None = None
    notes: tuple[str, ...] = field(default=())


def key_store_target(directory: Path, site: Site | None, flag_url: str | None) -> KeyStoreTarget:
    """Where `llmgw keys` acts, for a command run in `directory` (see the module's order).

    `site` is the loaded site when `directory` holds an llmgw.yaml (a broken one has raised)."""
    if flag_url:
        return KeyStoreTarget(f"{redact_url(flag_url)} (--store or $LLMGW_STORE)", url=flag_url)
    if site is None or not (directory / SITE_FILE).is_file():
        url = default_store_url()
        return KeyStoreTarget(f"{url} (no llmgw.yaml here: the embedded default)", url=url)
    if site.config.store:
        shared = "the shared PostgreSQL store" if site.config.store.startswith(("postgres://", "postgresql://")) \
            else "the store"
        return KeyStoreTarget(f"{shared} {redact_url(site.config.store)} (llmgw.yaml store:)", url=site.config.store)
    routers = {}
    if not site.config.recorded and site.inventory.exists():
        routers = load_inventory(site.inventory).routers
    if routers:
        names = sorted(routers)
        notes: tuple[str, ...] = ()
        if len(names) > 1:
            notes = (f"{', '.join(names[1:])} read their own store unless llmgw_router_store_url points every "
                     "router at one PostgreSQL; set `store:` in llmgw.yaml to that PostgreSQL so `llmgw keys` "
                     "acts on it directly",)
        return KeyStoreTarget(f"the key store of router {names[0]}", router=names[0], site=site, notes=notes)
    url = site.store_url
    return KeyStoreTarget(f"{url} (the site's store beside the state: no llmgw_routers in the inventory)", url=url)


def run_on_router(target: KeyStoreTarget, argv: list[str], *, stdin: str | None = None) -> dict[str, Any]:
    """`llmgw keys ARGV --json` on the router host, as the router's user with its store; its JSON.

    `stdin` (a new key) reaches the command only through the no_log task's standard input."""
    assert target.router is not None and target.site is not None
    router = target.router
    extravars: dict[str, Any] = {"llmgw_keys_argv": [*argv, "--json"]}
    if stdin is not None:
        extravars["llmgw_keys_stdin"] = stdin
    result = run_playbook(ansible_content.playbook("router_keys.yml"), target.site.inventory, limit=router,
                          extravars=extravars, capture=(REPORT_TASK,), forks=1, timeout=ROUTER_TIMEOUT_S)
    task = result.results.get(router, {}).get(REPORT_TASK)
    if task is None or not isinstance(task.result.get("msg"), dict):
        why = result.host_errors.get(router) or (result.output_tail[-1] if result.output_tail else "no result")
        raise RunnerError(f"could not reach router {router} to act on its key store: {why}",
                          hint="check that Ansible reaches it (`llmgw facts`), or act on a shared PostgreSQL "
                               "store with `store:` in llmgw.yaml")
    said: dict[str, Any] = task.result["msg"]
    rc = int(said.get("rc", -1))
    stderr = [ln for ln in str(said.get("stderr") or "").splitlines() if ln.strip()]
    if rc != 0:
        first = next((i for i, ln in enumerate(stderr) if ln.startswith("Error: ")), None)
        if first is not None:  # the router host's llmgw refused (no such key, a group in use...): its words
            message = stderr[first].removeprefix("Error: ")
            rest = stderr[first + 1:]
            hint = " ".join(ln for ln in rest if not ln.startswith("  ")) or None
            if rc == 2 and "no such option" in message.lower():
                hint = f"router {router} runs an older llmgw: `llmgw apply` installs this one there"
            raise StoreError(f"{message} (router {router}'s store)", hint=hint,
                             detail=[ln.strip() for ln in rest if ln.startswith("  ")])
        raise RunnerError(f"`llmgw keys` did not run on router {router} (exit {rc})", detail=stderr[-3:],
                          hint="is the router installed there? `llmgw apply` installs it; an older router "
                               "install may lack this command: apply again after upgrading llmgw")
    try:
        data = json.loads(str(said.get("stdout") or ""))
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise RunnerError(f"router {router}'s `llmgw keys` printed no JSON", detail=stderr[-3:])
    return data
