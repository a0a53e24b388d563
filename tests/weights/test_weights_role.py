"""The llmgw_weights role through apply's own path (llmgw.apply.hosts -> playbooks/apply.yml ->
ansible-runner) on this host: huggingface_hub installed offline from the wheelhouse apply builds,
a whole repository fetched from the olah mirror byte for byte, progress in bytes read by the
weights_progress module."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from llmgw.apply.hosts import Hosts
from llmgw.inventory import load_inventory
from llmgw.weights.names import cache_name
from tests.support.hf_mirror import HfMirror


def test_role_fetches_a_pinned_repository_with_huggingface_hub(hf_mirror: HfMirror, tmp_path: Path) -> None:
    cache, install = tmp_path / "cache", tmp_path / "opt"
    inv = tmp_path / "hosts.yml"
    inv.write_text(f"""
all:
  children:
    llmgw_nodes:
      hosts:
        localhost:
          ansible_connection: local
          ansible_python_interpreter: {sys.executable}
          llmgw_mgmt_address: 127.0.0.1
          llmgw_weights_cache_dir: {cache}
          llmgw_weights_install_dir: {install}
          llmgw_weights_group: root
""")
    source = f"hf://{hf_mirror.repo}@{hf_mirror.commit}"
    name = cache_name(source)
    seen: list[tuple[str, str, int, int | None]] = []
    hosts = Hosts(inv, load_inventory(inv), artifacts=None, forks=2,
                  extra={"llmgw_weights_hf_endpoint": hf_mirror.url, "llmgw_weights_hf_allow_http": True,
                         "llmgw_weights_poll": 1})
    hosts.engines({"localhost": [{"source": source, "name": name}]}, {}, "start",
                  lambda step, host, done, total: seen.append((step, host, done, total)))
    entry = cache / name
    names = hf_mirror.file_names()
    assert sorted(p.name for p in entry.iterdir()) == names
    for n in names:
        got, want = (entry / n).read_bytes(), (hf_mirror.files / n).read_bytes()
        assert hashlib.sha256(got).digest() == hashlib.sha256(want).digest(), n
    # huggingface_hub ran from the virtualenv the role made from the wheelhouse (no package index).
    venvs = list(install.glob("huggingface-hub-*/venv/bin/python"))
    assert len(venvs) == 1
    size = sum((entry / n).stat().st_size for n in names)
    assert ("weights", "localhost", size, size) in seen, seen
