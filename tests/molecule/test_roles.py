"""Every role documents every public variable it defaults in meta/argument_specs.yml."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())


def load(path: Path) -> dict[str, object]:
    data = YAML(typ="safe").load(path.read_text()) if path.is_file() else None
    return data or {}


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_cover_the_defaults(role: str) -> None:
    root = REPO / "roles" / role
    defaults = set(load(root / "defaults" / "main.yml"))
    specs = load(root / "meta" / "argument_specs.yml")
    main = specs.get("argument_specs", {})
    assert isinstance(main, dict) and "main" in main, f"{role}: meta/argument_specs.yml has no main entry point"
    options = set(main["main"].get("options", {}))
    assert defaults - options == set(), f"{role}: defaults without an argument spec"
    public = {o for o in options if o.startswith(f"{role}_")}
    assert public == options, f"{role}: options not named {role}_*: {sorted(options - public)}"
    assert options - defaults == set(), f"{role}: argument specs without a default in defaults/main.yml"
