"""Shared fixtures; importable helpers live in tests/support/."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.hf_mirror import HfMirror, running_mirror


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


@pytest.fixture(scope="session")
def hf_mirror() -> Iterator[HfMirror]:
    """A real Hugging Face mirror (olah, offline) on 127.0.0.1 serving the tiny Llama; one per test session."""
    with running_mirror() as mirror:
        yield mirror
