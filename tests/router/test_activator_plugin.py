"""`router serve --activator MODULE:FACTORY`: the factory's contract (llmgw/router/plugins.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmgw.errors import UsageError
from llmgw.router.plugins import load_activator

called: list[dict[str, Any]] = []


def recording_factory(**kwargs: Any) -> Any:
    called.append(kwargs)
    return object()


@pytest.mark.parametrize("site_dir", [Path("/srv/site"), None])
def test_a_factory_gets_the_state_file_and_the_site_folder_not_a_loaded_site(site_dir: Path | None) -> None:
    called.clear()
    load_activator(f"{__name__}:recording_factory", Path("/srv/state.json"), site_dir)
    assert called == [{"state_path": Path("/srv/state.json"), "site_dir": site_dir}]


@pytest.mark.parametrize("spec", ["no-colon", f"{__name__}:missing", "llmgw.no_such_module:factory"])
def test_an_activator_that_cannot_load_is_a_usage_error(spec: str) -> None:
    with pytest.raises(UsageError):
        load_activator(spec, Path("/srv/state.json"), None)
