"""Shared fixtures; importable helpers live in tests/support/."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.selection import unselectable

if TYPE_CHECKING:  # imported by the fixtures that use them: every xdist process loads this file
    from tests.support.hf_mirror import HfMirror
    from tests.support.lab import Lab

# Tests that need no host set-up but take seconds each: they run Ansible against this
# machine, build a wheel or a virtualenv, or start several servers. `make unit` leaves them
# out (marker `slow`) so it stays under a minute; `make test` runs them. New slow tests
# carry `@pytest.mark.slow` themselves; this list holds the ones measured when the marker came.
SLOW = (
    "tests/apply/test_shard_units.py",
    "tests/controller/test_controller_role.py",
    "tests/engines/test_parsers.py",
    "tests/facts/test_facts_gather.py",
    "tests/facts/test_runner.py",
    "tests/packaging/",
    "tests/security/test_ansible_preflight.py",
    "tests/security/test_ansible_unsafe.py",
    "tests/security/test_secrets_router.py",
    "tests/security/test_store_quotas.py",
    "tests/state/test_gitops.py",
    "tests/state/test_router_follow_role.py",  # ansible-playbook against this machine: ~8 s of CPU
    "tests/views/test_downloads.py",
    "tests/views/test_logs.py",
    "tests/views/test_router_dashboard.py",
    "tests/weights/test_browse.py",
    "tests/weights/test_hf_catalog.py",
    "tests/weights/test_hf_fetch.py",
    "tests/weights/test_shared_fetch.py",
    "tests/weights/test_weights_module.py::test_module_through_ansible",
    "tests/weights/test_weights_role.py",
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave uncollected a module or folder whose tests `-m` deselects whatever else they
    carry (tests/support/selection.py): `make unit`'s workers then never import the lab,
    browser and engine modules."""
    markexpr = config.getoption("markexpr", "")
    if not markexpr or collection_path.name == "conftest.py":
        return None
    try:
        rel = collection_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return None
    return True if unselectable(collection_path, rel, markexpr, SLOW) else None


# The lab tests run in a few processes at once (`make pytest`: LAB_WORKERS, `--dist loadscope`:
# a module's tests in one process, so each module's lab is made once). They mostly wait on
# their hosts (SSH round trips, units starting, engines loading), so two share two cores. The
# longest modules go first (the clean-clone CI log of 2026-12-04: vLLM 598 s, with its adapters
# loaded at start and at run time; apply 517 s in two tests, rollout 322 s, demand 346 s in two,
# multinode 310 s in two), so no process is left with a long one at the end while the other
# idles. (Not `--dist loadgroup`: with pytest 9.2 its `xdist_group` marks group nothing, as
# xdist 3.8 renames `item._nodeid`, which pytest no longer reads.)
LAB_LONGEST_FIRST = (
    "tests/e2e/test_vllm_lab.py",
    "tests/e2e/test_apply_lab.py",
    "tests/e2e/test_demand_lab.py",
    "tests/e2e/test_rollout_lab.py",
    "tests/e2e/test_multinode_lab.py",
    "tests/molecule/",
    "tests/state/test_shared_state_lab.py",
)


def _lab_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next((i for i, first in enumerate(LAB_LONGEST_FIRST) if path.startswith(first)), len(LAB_LONGEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
    # Stable: tests keep their order within a group, and groups without a rank keep theirs.
    items.sort(key=lambda item: _lab_rank(item) if item.get_closest_marker("lab") is not None
               else len(LAB_LONGEST_FIRST))


@pytest.fixture(autouse=True)
def _memo_per_test() -> Iterator[None]:
    """The CLI switches the facts memo on for its process (llmgw.cli, use_memo); a test that runs
    it in-process must not leave it on for the next test, which would then pass or fail by order."""
    import llmgw.facts as facts_pkg

    before = facts_pkg.memo_in_use()
    yield
    facts_pkg.use_memo(before)


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
    from tests.support.hf_mirror import running_mirror

    with running_mirror() as mirror:
        yield mirror


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab of three hosts for every test area that needs only its own site on them.

    Areas take turns (`tests.support.lab.turn`): each shapes the site, applies, and leaves
    the fleet empty again. Hosts start, and the router installs, once per session.
    """
    from tests.support.lab import SHARED_NODES, lab

    with lab(tmp_path_factory.mktemp("shared-lab"), nodes=SHARED_NODES, prefix="llmgw-shared") as it:
        yield it
