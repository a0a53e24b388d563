"""What the router process can import: its closure outside llmgw/router, pinned (#34).

The router runs on every router host beside the client traffic; whatever it imports is
code that runs there, memory it holds and a surface an attacker on its listeners can reach.
It serves the state. Its dashboard renders the site copy apply ships it (llmgw.apply.
dashboard_site) from a process of its own (llmgw.router.dashboard_child, llmgw.web.process),
so no view, template or site loader runs in the router; what the dashboard needs from a
plan is planned on the bastion, and the fabrics are mapped there, so neither the planner
nor the fabric parser runs anywhere on a router host (nor does anything of the control side).

Read from the source like test_codebase's cycle check, `if TYPE_CHECKING:` imports and
imports inside functions included: a late import still runs in the router, and a type-only
one is a dependency a maintainer has to read.
"""

from __future__ import annotations

from tests.maintenance.test_codebase import MODULES, imports_of

# The router's entry points: the ASGI app a worker serves, the server, a worker process.
ENTRY_POINTS = ("llmgw.router.asgi", "llmgw.router.server", "llmgw.router.worker")
# llmgw modules outside llmgw/router the router reaches. It only goes down: when a change
# brings it below, lower it here. 87 before the dashboard's plan was made at apply (#34), 68
# after; 76 once the same round's features landed beside it: what the router itself serves
# (catalog.routes: weighted routes; store.batches: the Batch API; engines.descriptor) and
# one-rule modules the planner and the views share so the views need no planner (gpus,
# idle, nodetime, stack, views.held). 76 again after the next round took llmgw.facts.memo out
# and brought state.capabilities in; 77 with views.versions, the dashboard's host-stack column;
# 67 once the fabric views were made at apply (views.fabric_copy: no llmgw.fabric parser); 62
# with the bastion's ways of asking the routers apart (views.ask_routers, the feed in
# views.live_downloads: no SSH tunnel, no known_hosts) and the weights cache names shipped
# in placement.json (no weights.names, no ansible_content). 34 once the dashboard ran in a
# process of its own (router.dashboard_child: no llmgw.web, no llmgw.views, no site loader),
# the state's door left out its backend selection (llmgw.state.select: no llmgw.site), the
# state schema checked host names without the inventory (llmgw.hostnames), an activator
# plugin was handed the site's folder, not the site, and fleet.json's schema stood alone
# (llmgw.fleetfile).
MOST = 34
# Beside the control side: the fabric parser (a router shows the fabrics apply mapped on the
# bastion, views.fabric_copy); the SSH tunnels and known_hosts, which only the bastion opens
# to reach the routers; the weights package and the collection's rules it loads; the
# dashboard, its views and the site and inventory loaders they read with (its own process).
NEVER = ("llmgw.web", "llmgw.views", "llmgw.site", "llmgw.inventory",
         "llmgw.planner", "llmgw.apply", "llmgw.controller", "llmgw.runner", "llmgw.edits",
         "llmgw.facts.gather", "llmgw.cli", "llmgw.fabric", "llmgw.known_hosts",
         "llmgw.weights", "llmgw.ansible_content")


def closure(roots: tuple[str, ...]) -> dict[str, list[str]]:
    """Every llmgw module `roots` import, directly or not, TYPE_CHECKING and late imports
    included, a package's __init__ counted with each of its modules; one import path to each."""
    graph = {name: imports_of(name, types=True) for name in MODULES}
    paths = {r: [r] for r in roots}
    todo = list(roots)
    while todo:
        m = todo.pop()
        parents = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        for n in sorted((graph[m] | parents) & set(MODULES)):
            if n not in paths:
                paths[n] = [*paths[m], n]
                todo.append(n)
    return paths


def outside_router(paths: dict[str, list[str]]) -> dict[str, list[str]]:
    return {m: p for m, p in paths.items() if m != "llmgw.router" and not m.startswith("llmgw.router.")}


def test_the_closure_follows_type_checking_late_and_package_imports() -> None:
    paths = closure(("llmgw.views",))
    assert "llmgw.views.runtime" in paths  # under `if TYPE_CHECKING:` in llmgw/views/__init__.py
    assert "llmgw" in paths  # a package's __init__ runs before its modules
    assert "llmgw.views.planned" not in closure(("llmgw.views.status",))


def test_the_entry_points_exist() -> None:
    assert set(ENTRY_POINTS) <= set(MODULES)


def test_every_never_entry_names_modules() -> None:
    """A NEVER entry that names no module (a rename) would keep nothing out."""
    assert all(any(m == e or m.startswith(f"{e}.") for m in MODULES) for e in NEVER), \
        [e for e in NEVER if not any(m == e or m.startswith(f"{e}.") for m in MODULES)]


def test_the_router_imports_no_planner_and_nothing_of_the_control_side() -> None:
    paths = outside_router(closure(ENTRY_POINTS))
    bad = {m: " -> ".join(p) for m, p in sorted(paths.items()) if m.startswith(NEVER)}
    assert not bad, f"the router process reaches: {bad}"


def test_the_router_closure_only_shrinks() -> None:
    paths = outside_router(closure(ENTRY_POINTS))
    listing = "\n".join(f"{m}  <- {' -> '.join(p[-4:])}" for m, p in sorted(paths.items()))
    assert len(paths) <= MOST, f"the router reaches {len(paths)} llmgw modules outside llmgw/router, " \
        f"more than {MOST}: import less, or say in the review why it must\n{listing}"
    print(f"router closure: {len(paths)} modules outside llmgw/router (ceiling {MOST})")


def test_the_router_unpickles_no_memo() -> None:
    """llmgw.facts.memo unpickles what it stored: code the router process should not hold. The
    readers it shares with the bastion ask llmgw.facts.memo_in_use(), which only the CLI sets
    (tests/facts/test_memo_in_use.py)."""
    paths = outside_router(closure(ENTRY_POINTS))
    assert "llmgw.facts.memo" not in paths, " -> ".join(paths["llmgw.facts.memo"])
