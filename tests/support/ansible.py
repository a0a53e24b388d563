"""ansible-playbook run against this machine (`-i localhost,`), as the role tests run it to
render a role's templates or run its tasks without a lab: the venv's Ansible, with this
interpreter on the (local) host, no colour or localhost warnings, and the repository's roles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def ansible_env(**extra: str) -> dict[str, str]:
    """This process's environment for an Ansible run here, plus `extra` (ANSIBLE_... settings)."""
    return {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_ROLES_PATH": str(REPO / "roles"), **extra}


def run_playbook(play: Path, extra_vars: Mapping[str, Any] | None = None, *, verbose: bool = False,
                 env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ansible-playbook -i localhost, PLAY -e EXTRA_VARS` (-vvv when `verbose`), its result as it is."""
    argv = [str(VENV_BIN / "ansible-playbook"), *(["-vvv"] if verbose else []), "-i", "localhost,", str(play),
            "-e", json.dumps({"ansible_python_interpreter": sys.executable, **(extra_vars or {})})]
    return subprocess.run(argv, capture_output=True, text=True, env=dict(env or ansible_env()), check=False,
                          timeout=300)


def playbook(play: Path, extra_vars: Mapping[str, Any] | None = None, *, verbose: bool = False,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """run_playbook, asserting it succeeded (the failure shows the end of Ansible's output)."""
    done = run_playbook(play, extra_vars, verbose=verbose, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done
