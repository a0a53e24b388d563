"""apply's hook: a new replica's required capabilities (catalog `requires:`), checked on its
engine before apply records it ready.

The check goes to the replica's endpoint directly with its engine key (the router does
not route to a `starting` replica), from the control host, so the control host must
reach the engines' management addresses (with llmgw_engine_firewall_sources set, list it
there). A replica that fails stays `starting` and apply stops with the checks' verdicts;
the next plan replaces it. Results are stored like `llmgw check`'s, with the replica's id.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from llmgw.catalog import Catalog, load_catalog
from llmgw.errors import LlmgwError, RunnerError
from llmgw.planner import PlannedReplica
from llmgw.site import Site
from llmgw.store import CheckRecord, open_store

Verify = Callable[[Sequence[PlannedReplica]], None]


def replica_verifier(site: Site, engine_key: Callable[[str], str] | None,
                     say: Callable[[str], None] | None = None) -> Verify:
    """A function apply calls with the replicas it started, before it records them ready;
    `engine_key(replica_id)` is the replica's engine key (llmgw.apply.engine_keys)."""
    catalog: list[Catalog] = []
    tell = say or (lambda _line: None)

    def verify(replicas: Sequence[PlannedReplica]) -> None:
        if not catalog:
            catalog.append(load_catalog(site.catalog_dir, root=site.root) if site.catalog_dir.is_dir()
                           else Catalog([]))
        requires: dict[str, list[str]] = {m.name: list(m.requires) for m in catalog[0]}
        failed: list[str] = []
        for r in replicas:
            wanted = requires.get(r.model) or []
            if not wanted:
                continue
            if engine_key is None:
                raise RunnerError(f"cannot check {r.id}: no engine key to reach it with")
            tell(f"Checking {r.id} at {r.endpoint} for {', '.join(wanted)}")
            failed += _check_one(site, engine_key(r.id), r, wanted)
        if failed:
            raise RunnerError("new replicas lack capabilities their models require", detail=failed,
                              hint="they stay `starting` and the next apply replaces them; fix the profile "
                                   "(engine arguments, e.g. llama-server --jinja for tools) or the model's "
                                   "`requires:`, then run `llmgw apply` again")

    return verify


def _check_one(site: Site, key: str, r: PlannedReplica, wanted: list[str]) -> list[str]:
    import httpx

    from llmgw.probe.checks import run_checks
    from llmgw.probe.target import engine_version

    with httpx.Client() as client:
        results, fingerprint = run_checks(client, r.endpoint, key, r.model, wanted)
    now = datetime.now(UTC)
    run_id = secrets.token_hex(6)
    version = engine_version(r.engine, fingerprint)
    records = [CheckRecord(run_id=run_id, model=r.model, capability=c.capability, status=c.status, detail=c.detail,
                           profiles=r.profile, engine=r.engine, engine_version=version,
                           nodes=",".join(sorted({s.node for s in r.shards})), created_at=now, replica=r.id)
               for c in results]
    try:
        store = open_store(site.store_url)
        try:
            store.add_checks(records)
        finally:
            store.close()
    except LlmgwError:
        pass  # the verdict below is what apply acts on; an unreachable store must not hide it
    return [f"{r.id}: {c.capability}: {c.status}: {c.detail}" for c in results if c.status != "pass"]
