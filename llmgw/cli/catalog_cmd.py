"""`llmgw catalog validate` and `llmgw models`."""

from __future__ import annotations

import click

from llmgw.catalog import Catalog, Model, format_duration, load_catalog
from llmgw.cli import output
from llmgw.errors import CatalogError
from llmgw.site import Site


def load_site_catalog(site: Site) -> Catalog:
    return load_catalog(site.catalog_dir, root=site.root)


def model_json(m: Model) -> dict[str, object]:
    return m.model_dump(mode="json")


def scaling_text(m: Model) -> str:
    s = m.scaling
    if s.min == 0:
        return f"on demand (max {s.maximum}, idle {format_duration(s.idle_timeout)})"
    return str(s.min) if s.min == s.maximum else f"{s.min}..{s.maximum}"


def register(cli: click.Group) -> None:
    from llmgw.cli import AppContext, pass_app

    @cli.group("catalog")
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
        output.console.print(f"The catalog is valid: {len(cat)} model{'s' if len(cat) != 1 else ''}.")

    @cli.command("models")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    @pass_app
    def models(app: AppContext, as_json: bool) -> None:
        """The catalog's models, their profiles and scaling."""
        cat = load_site_catalog(app.site)
        if as_json:
            output.print_json({"models": [model_json(m) for m in cat]})
            return
        rows = [[m.name, ", ".join(m.aliases) or "-",
                 ", ".join(f"{p.name} ({p.engine}, {p.nodes}x{p.gpus} GPU)" for p in m.profiles),
                 scaling_text(m), ", ".join(m.fallbacks) or "-"] for m in cat]
        output.console.print(output.table(["MODEL", "ALIASES", "PROFILES", "REPLICAS", "FALLBACKS"], rows))
