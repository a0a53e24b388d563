"""One version and one license, the same everywhere they have to be written."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ruamel.yaml import YAML

import llmgw

ROOT = Path(__file__).resolve().parents[2]
GALAXY = ROOT / "collections" / "ansible_collections" / "llmgw" / "cluster" / "galaxy.yml"
LICENSE = "Apache-2.0"


def _yaml(path: Path) -> dict[str, object]:
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def test_one_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"], "pyproject reads llmgw.__version__"
    assert _yaml(GALAXY)["version"] == llmgw.__version__, "galaxy.yml needs a literal: keep it equal"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {llmgw.__version__}" in changelog


def test_one_license() -> None:
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == LICENSE
    assert _yaml(GALAXY)["license"] == [LICENSE]
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        info = _yaml(meta)["galaxy_info"]
        assert isinstance(info, dict) and info["license"] == LICENSE, meta
    others = [str(p.relative_to(ROOT)) for p in ROOT.glob("collections/**/*.py")
              if "General Public License" in p.read_text(encoding="utf-8")]
    assert not others, f"files that still say GPL: {others}"
