"""Shared fixtures; importable helpers live in tests/helpers.py."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def site(tmp_path: Path) -> Callable[..., Path]:
    """Make a site under tmp_path: site(files={"catalog/a.yaml": "..."}) -> its folder."""

    def make(files: dict[str, str] | None = None, config: str = "") -> Path:
        root = tmp_path / "site"
        (root / "catalog").mkdir(parents=True, exist_ok=True)
        (root / "llmgw.yaml").write_text(config)
        for rel, text in (files or {}).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"))
        return root

    return make
