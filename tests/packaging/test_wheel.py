"""The wheel carries what an installed llmgw needs: Ansible content, templates, the starter site."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_contains_ansible_content_and_web_assets(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps",
                    "-q", "-w", str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("llmgw-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = "llmgw/ansible_data/"
    for rel in ("playbooks/facts.yml", "playbooks/apply.yml", "roles/llmgw_engine/tasks/main.yml",
                "collections/ansible_collections/llmgw/cluster/plugins/modules/weights.py",
                "collections/ansible_collections/llmgw/cluster/plugins/module_utils/cache_names.py"):
        assert data + rel in names, rel
    assert "llmgw/site_template/catalog/models.yaml" in names
    assert any(n.startswith("llmgw/web/templates/") for n in names)
    assert any(n.startswith("llmgw/web/static/") for n in names)
    assert not any("__pycache__" in n for n in names)
