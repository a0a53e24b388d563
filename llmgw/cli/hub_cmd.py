"""`llmgw models search QUERY` and `llmgw models inspect hf://ORG/REPO[@REV]`: browse the site's
Hugging Face endpoint (its `mirror:`, else the Hub) before adding a model to the catalog."""

from __future__ import annotations

from dataclasses import asdict

import click

from llmgw.catalog import load_catalog
from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import LlmgwError, WeightsError
from llmgw.facts.cache import read_facts
from llmgw.inventory import load_inventory
from llmgw.views.text import human_bytes
from llmgw.weights.check import hf_endpoint
from llmgw.weights.hub import is_repo_source


def _size(n: int | None) -> str:
    return "?" if n is None else human_bytes(n)


@click.command("search")
@click.argument("query")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 200), help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
def search(app: AppContext, query: str, limit: int, as_json: bool) -> None:
    """Repositories on the site's Hugging Face endpoint whose name matches QUERY."""
    # httpx and the Hub client inside the command: `llmgw models` and `llmgw status` import this
    # module for `models search` and `models inspect`, and need neither (0.15 s of imports).
    import httpx

    from llmgw.weights.browse import search as search_repos

    endpoint = hf_endpoint(app.site)
    try:
        with httpx.Client(timeout=30) as client:
            found = search_repos(query, endpoint, client, limit)
    except httpx.HTTPError as exc:
        raise WeightsError(f"cannot search {endpoint}: {exc}") from None
    if as_json:
        output.print_json({"endpoint": endpoint, "models": [asdict(f) for f in found]})
        return
    if not found:
        output.console.print(f"No repository on {endpoint} matches {query!r}.")
        return
    output.console.print(output.table(["REPOSITORY", "DOWNLOADS", "LIKES", "UPDATED", "TAGS"], [
        [f"hf://{f.repo}", "" if f.downloads is None else str(f.downloads), "" if f.likes is None else str(f.likes),
         (f.updated or "")[:10], ", ".join(f.tags)] for f in found]))


@click.command("inspect")
@click.argument("source")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@pass_app
def inspect(app: AppContext, source: str, as_json: bool) -> None:
    """What hf://ORG/REPO[@REVISION] holds: files, formats and quantizations, size per variant,
    and which catalog profiles and nodes could hold each variant (from the facts cache)."""
    if not is_repo_source(source):
        raise WeightsError(f"{source!r} is not a repository", hint="name one as hf://ORG/REPO or hf://ORG/REPO@REVISION")
    import httpx  # see `search`

    from llmgw.weights.browse import inspect as inspect_repo
    from llmgw.weights.browse import place

    site = app.site
    endpoint = hf_endpoint(site)
    try:
        with httpx.Client(timeout=30) as client:
            found = inspect_repo(source, endpoint, client)
    except httpx.HTTPError as exc:
        raise WeightsError(f"cannot inspect {source} on {endpoint}: {exc}") from None
    try:
        catalog = load_catalog(site.catalog_dir, root=site.root)
        nodes = load_inventory(site.inventory).nodes if site.inventory.exists() else {}
        place(found, catalog, nodes, read_facts(site.facts_dir))
    except LlmgwError as exc:  # a site without a catalog or facts still shows the repository
        output.err_console.print(f"[yellow]Note:[/] profiles and nodes not shown: {exc.message}")
    if as_json:
        output.print_json({"endpoint": endpoint, **asdict(found)})
        return
    output.console.print(f"{found.source} at commit {found.commit} on {endpoint}: {len(found.files)} files")
    columns = ["VARIANT", "FORMAT", "FILES", "SIZE", "ENGINES", "PROFILES", "NODES WITH ROOM"]
    output.console.print(output.table(columns, [
        [v.name, v.format, str(len(v.files)), _size(v.size_bytes), ", ".join(v.engines),
         ", ".join(v.profiles) or "-", ", ".join(v.nodes) or "-"] for v in found.variants]))
    output.console.print(output.table(["FILE", "SIZE"], [[n, _size(s)] for n, s in sorted(found.files.items())]))
