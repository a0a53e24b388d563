"""One source per default that Python and Ansible share: a Python constant and role llmgw_defaults."""

from __future__ import annotations

import re
from pathlib import Path

from ruamel.yaml import YAML

from llmgw.inventory import DEFAULT_CACHE_DIR
from tests.support.facts import module

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_DEFAULTS = ROOT / "roles" / "llmgw_defaults" / "defaults" / "main.yml"
# Where the value may be written: its two sources, and text that only shows it (samples in
# module documentation, comments, Molecule scenarios that set it on purpose).
SOURCES = {"llmgw/inventory.py", "roles/llmgw_defaults/defaults/main.yml",
           "collections/ansible_collections/llmgw/cluster/plugins/modules/node_facts.py"}  # checked copy


def test_python_and_ansible_defaults_agree() -> None:
    defaults = YAML(typ="safe").load(ANSIBLE_DEFAULTS.read_text())
    assert defaults["llmgw_cache_dir"] == DEFAULT_CACHE_DIR


def test_node_facts_ad_hoc_default_is_a_checked_copy() -> None:
    """A module's argument default must be a literal; node_facts keeps one for ad-hoc runs."""
    assert module("node_facts").ARGUMENT_SPEC["cache_dir"]["default"] == DEFAULT_CACHE_DIR


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines that set or use values: no comments, no Ansible module documentation blocks."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":  # DOCUMENTATION/EXAMPLES/RETURN and docstrings are text
        text = re.sub(r'[rR]?"""(.*?)"""', lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return [(n, line) for n, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_cache_dir_is_written_only_in_its_sources() -> None:
    places = [*ROOT.glob("llmgw/**/*.py"), *ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/*/*.yml"),
              *ROOT.glob("roles/*/templates/*"), *ROOT.glob("collections/**/plugins/**/*.py")]
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in places
             if str(p.relative_to(ROOT)) not in SOURCES for n, line in _code_lines(p)
             if DEFAULT_CACHE_DIR in line.split("#")[0]]
    assert not found, "use llmgw.inventory.DEFAULT_CACHE_DIR or llmgw_cache_dir instead:\n" + "\n".join(found)
