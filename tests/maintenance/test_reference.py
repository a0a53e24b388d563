"""The documentation site's reference pages are what the code says (scripts/gen_reference.py).

The CLI reference and the keys reference are generated; a change to a command or a catalog
key that is not followed by `make docs` fails here, so the site cannot drift from the code.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import click

from llmgw.catalog.schema import Model, Profile, Route, Scaling
from llmgw.cli import VERBS
from llmgw.site import SiteConfig

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_the_reference_pages_are_current() -> None:
    for path, text in generator().pages().items():
        assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `make docs` and commit it"
        assert path.read_text(encoding="utf-8") == text, \
            f"{path.relative_to(ROOT)} is not what the code says: run `make docs` and commit it"


def test_every_verb_and_sub_command_has_its_section() -> None:
    gen = generator()
    page = gen.cli_page()
    headings = set(re.findall(r"^## `(llmgw[^`]*)`$", page, re.M))
    assert {f"llmgw {v}" for v in VERBS} <= headings
    groups = [(path, cmd) for path, cmd, _ctx in gen.commands() if isinstance(cmd, click.Group) and path]
    assert any(path == ["state"] for path, _ in groups)  # sub-commands are walked, not only verbs
    assert "llmgw state follow" in headings and "llmgw keys create" in headings
    assert "Usage: llmgw state follow [OPTIONS]" in page


def test_every_catalog_and_site_key_is_in_the_keys_reference() -> None:
    page = generator().config_page()
    for model in (Model, Profile, Scaling, Route, SiteConfig):
        for name in model.model_fields:
            assert f"| `{name}` |" in page, f"{model.__name__}.{name} is missing from the keys reference"
    assert "| `state` | str | `state.json` |" in page  # a default, read from the model
    unsaid = [line.split("|")[1].strip() for line in page.splitlines() if line.startswith("| `") and
              line.rstrip().endswith("|  |")]
    assert not unsaid, f"keys with no words (a comment above the field, or NOTES in scripts/gen_reference.py): {unsaid}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """What `make lint` checks, in the unit tests too: a broken link or anchor fails here."""
    import os
    import subprocess

    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-q", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    assert (tmp_path / "site" / "guide" / "operator" / "index.html").is_file()
