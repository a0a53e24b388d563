"""Where llmgw's Ansible content lives: `playbooks/`, `roles/` and `collections/`.

The CLI runs the same playbooks from a checkout and from an installed wheel, so the
folder holding them is found, in this order:

1. `$LLMGW_ANSIBLE_DIR`, when set (an operator's own copy, e.g. vendored into AWX).
2. The copy packaged inside the wheel, `llmgw/ansible_data/` (read through
   `importlib.resources`); a wheel build copies the three top-level folders there.
3. The checkout: the folder above the `llmgw` package (an editable install or running
   from source), recognised by `playbooks/` and the `llmgw.cluster` collection.

The packaged copy is a build output, never committed: the checkout keeps one copy of
each file, at the paths the design names.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType

from llmgw.errors import RunnerError

ENV_VAR = "LLMGW_ANSIBLE_DIR"
PACKAGED = "ansible_data"
COLLECTION_REL = Path("collections/ansible_collections/llmgw/cluster")


def _looks_right(root: Path) -> bool:
    return (root / "playbooks").is_dir() and (root / COLLECTION_REL).is_dir()


def ansible_root() -> Path:
    """The folder holding `playbooks/`, `roles/` and `collections/`."""
    override = os.environ.get(ENV_VAR)
    if override:
        root = Path(override).expanduser().resolve()
        if not _looks_right(root):
            raise RunnerError(f"${ENV_VAR} is {override}, which has no playbooks/ and llmgw.cluster collection",
                              hint=f"point {ENV_VAR} at a copy of llmgw's playbooks/, roles/ and collections/, "
                                   "or unset it")
        return root
    packaged = resources.files("llmgw") / PACKAGED
    if isinstance(packaged, Path) and _looks_right(packaged):
        return packaged.resolve()
    checkout = Path(__file__).resolve().parent.parent
    if _looks_right(checkout):
        return checkout
    raise RunnerError("llmgw's playbooks and collection are missing from this installation",
                      detail=[f"looked in {packaged} and {checkout}"],
                      hint=f"reinstall llmgw, or set {ENV_VAR} to a checkout of llmgw")


def playbooks_path() -> Path:
    return ansible_root() / "playbooks"


def playbook(name: str) -> Path:
    """A playbook by file name (`facts.yml`); an unknown name is a RunnerError."""
    path = playbooks_path() / name
    if not path.is_file():
        raise RunnerError(f"no playbook {name} in {path.parent}", hint="reinstall llmgw; its playbooks are incomplete")
    return path


def roles_path() -> Path:
    return ansible_root() / "roles"


def collections_path() -> Path:
    """The folder to put on ANSIBLE_COLLECTIONS_PATH (it holds `ansible_collections/`)."""
    return ansible_root() / "collections"


def collection_path() -> Path:
    """The llmgw.cluster collection itself."""
    return ansible_root() / COLLECTION_REL


@cache
def module_util(name: str) -> ModuleType:
    """A module_util of the llmgw.cluster collection, imported from its file.

    The host modules and the control side share these (cache names, GPU classes), so
    the control side loads the very file Ansible ships to the hosts; no second copy.
    """
    path = collection_path() / "plugins" / "module_utils" / f"{name}.py"
    if not path.is_file():
        raise RunnerError(f"the llmgw.cluster collection has no module_util {name} ({path})")
    qualified = f"llmgw._module_utils.{name}"
    spec = importlib.util.spec_from_file_location(qualified, path)
    if spec is None or spec.loader is None:
        raise RunnerError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module
