"""`llmgw catalog validate` and `llmgw models`."""

from __future__ import annotations

import click

from llmgw.catalog import Catalog, Model, format_duration, load_catalog
from llmgw.cli import output
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
    @pass_app
    def validate(app: AppContext) -> None:
        """Validate every file under the catalog folder; exit 1 with every problem found."""
        cat = load_site_catalog(app.site)
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
