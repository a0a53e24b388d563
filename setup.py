"""Packaging hook: the wheel carries llmgw's Ansible content.

The checkout keeps `playbooks/`, `roles/` and `collections/` at the top level, where
the design puts them; a wheel build copies them into `llmgw/ansible_data/`, where
`llmgw.ansible_content` finds them in an installed llmgw. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ANSIBLE_DIRS = ("playbooks", "roles", "collections")


class BuildWithAnsible(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "llmgw" / "ansible_data"
        for name in ANSIBLE_DIRS:
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(Path(name), target / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".molecule"))


setup(cmdclass={"build_py": BuildWithAnsible})
