"""`llmgw catalog validate` (`llmgw models` lives with the other views, in views_cmd)."""

from __future__ import annotations

import click

from llmgw.catalog import Catalog, load_catalog
from llmgw.cli import output
from llmgw.cli.context import AppContext, pass_app
from llmgw.errors import CatalogError
from llmgw.site import Site


def load_site_catalog(site: Site) -> Catalog:
    return load_catalog(site.catalog_dir, root=site.root)


@click.group("catalog")
def catalog_group() -> None:
    """Check the catalog of models."""

@catalog_group.command("validate")
@click.option("--offline", is_flag=True, help="Do not inspect sources; use what the facts cache recorded.")
@click.option("--refresh", is_flag=True, help="Inspect every source again, even those already recorded.")
@pass_app
def validate(app: AppContext, offline: bool, refresh: bool) -> None:
    """Validate every file under the catalog folder; exit 1 with every problem found.

    For llama.cpp profiles it also reads each GGUF source's header (a range request,
    recorded in the facts cache) and refuses a model the fleet's llama-server build
    cannot load.
    """
    from llmgw.weights.check import check_servable

    cat = load_site_catalog(app.site)
    result = check_servable(cat, app.site, inspect=not offline, refresh=refresh)
    for note in result.notes:
        output.err_console.print(f"[yellow]Note:[/] {note}", soft_wrap=True)
    if result.problems:
        raise CatalogError(result.problems)
    for line in result.sized:
        output.console.print(line, soft_wrap=True, highlight=False, markup=False)
    output.console.print(f"The catalog is valid: {len(cat)} model{'s' if len(cat) != 1 else ''}.")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [catalog_group]
