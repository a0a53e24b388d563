"""Every Molecule scenario under molecule/, run for real: podman hosts booting systemd.

Each runs its whole sequence (syntax, create, prepare, converge, idempotence, verify,
destroy, and whatever else it lists) with the shared base config, from the repository
root with the virtualenv first on PATH (Molecule and the podman driver find Ansible
there). Scenarios are independent hosts, so the selected ones run side by side,
$LLMGW_MOLECULE_JOBS at a time (default 2): most of their time is waiting on hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
BASE = "molecule/base.yml"


def scenarios() -> list[pytest.ParameterSet]:
    found = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
    # Scenarios named engine_* also need the real llama-server (scripts/build-engine).
    return [pytest.param(name, marks=[pytest.mark.lab, *([pytest.mark.engine] if name.startswith("engine") else [])],
                         id=name) for name in found]


def run_scenario(name: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0", "NO_COLOR": "1"}
    return subprocess.run([str(VENV_BIN / "molecule"), "-c", BASE, "test", "-s", name],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)


@pytest.fixture(scope="session")
def molecule_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Start every selected scenario at once (bounded); each test waits for its own."""
    selected = [item.callspec.params["scenario"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_scenario" and hasattr(item, "callspec")]
    jobs = max(1, int(os.environ.get("LLMGW_MOLECULE_JOBS", "2")))
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="molecule")
    try:
        yield {name: pool.submit(run_scenario, name) for name in selected}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def test_there_is_a_scenario() -> None:
    assert scenarios(), "molecule/ holds no scenario"
    assert (REPO / BASE).is_file()


@pytest.mark.parametrize("scenario", scenarios())
def test_scenario(scenario: str, molecule_runs: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    proc = molecule_runs[scenario].result()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"molecule test -s {scenario} failed (exit {proc.returncode}):\n{out[-6000:]}"
