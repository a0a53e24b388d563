"""Every Molecule scenario under molecule/, run for real: podman hosts booting systemd.

Each runs its whole sequence (syntax, create, prepare, check, converge, idempotence,
verify, side effect, destroy) with the shared base config, from the repository root
with the virtualenv first on PATH (Molecule and the podman driver find Ansible there).
"""

from __future__ import annotations

import os
import subprocess
import sys
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


def test_there_is_a_scenario() -> None:
    assert scenarios(), "molecule/ holds no scenario"
    assert (REPO / BASE).is_file()


@pytest.mark.parametrize("scenario", scenarios())
def test_scenario(scenario: str) -> None:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0", "NO_COLOR": "1"}
    proc = subprocess.run([str(VENV_BIN / "molecule"), "-c", BASE, "test", "-s", scenario],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"molecule test -s {scenario} failed (exit {proc.returncode}):\n{out[-6000:]}"
