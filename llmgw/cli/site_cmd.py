"""`llmgw init DIR`: a starter site with a commented catalog and inventory."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import click

from llmgw.cli import output
from llmgw.errors import SiteError


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def init(directory: Path) -> None:
    """Write a starter site into DIR (which must not already hold one)."""
    if (directory / "llmgw.yaml").exists():
        raise SiteError(f"{directory} already holds a site (llmgw.yaml exists)",
                        hint="choose an empty folder; nothing was written")
    template = resources.files("llmgw") / "site_template"
    with resources.as_file(template) as src:
        clashes = [p.relative_to(src) for p in Path(src).rglob("*")
                   if p.is_file() and (directory / p.relative_to(src)).exists()]
        if clashes:
            raise SiteError(f"{directory} already has {', '.join(map(str, clashes))}",
                            hint="choose an empty folder; nothing was written")
        shutil.copytree(src, directory, dirs_exist_ok=True)
    output.console.print(f"Wrote a starter site to {directory}. Next: edit catalog/ and "
                         f"inventory/, then `llmgw -C {directory} catalog validate`.")


# What `llmgw` attaches to its group, in the order of `llmgw --help`.
COMMANDS: list[click.Command] = [init]
