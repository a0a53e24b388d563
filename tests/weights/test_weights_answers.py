"""What `weights orphans` and `catalog validate --offline` say on the example site, through the
real CLI: each answer pinned where an older one misled (#35)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.example_site import ready_example_site

CODER_ENTRY = "bbc40e7b720952e6-qwen2.5-coder-14b-instruct-q4_k_m.gguf"  # on l40s-01, in the recorded facts


def test_orphans_says_the_state_wants_what_the_catalog_no_longer_does(tmp_path: Path) -> None:
    root = ready_example_site(tmp_path)
    assert run_cli("-C", str(root), "weights", "orphans").stdout == (
        "No orphaned weights: every llmgw cache entry is wanted by the catalog.\n")
    # The coder leaves the catalog; its replica is still recorded (apply has not run), so its
    # weights are kept: by the state, which the old answer called "the catalog".
    (root / "catalog" / "coding.yaml").unlink()
    r = run_cli("-C", str(root), "weights", "orphans")
    assert r.exit_code == 0, r.stderr
    assert " ".join(r.stdout.split()) == (
        "Kept for replicas the state records, though the catalog no longer wants them (they become orphans once "
        "`llmgw apply` replaces or destroys those replicas): "
        f"l40s-01 {CODER_ENTRY} (qwen2.5-coder-14b-1) "
        "No orphaned weights: every llmgw cache entry is wanted by the catalog or by a replica the state records.")
    data = json.loads(run_cli("-C", str(root), "weights", "orphans", "--json").stdout)
    assert data["orphans"] == []
    assert data["kept_for_state"] == [{"host": "l40s-01", "name": CODER_ENTRY,
                                       "path": f"/var/cache/llmgw/{CODER_ENTRY}",
                                       "replicas": ["qwen2.5-coder-14b-1"]}]


def test_validate_offline_never_prints_none_files(tmp_path: Path) -> None:
    # The example's source records predate file counts: the old line said "None files".
    root = ready_example_site(tmp_path)
    r = run_cli("-C", str(root), "catalog", "validate", "--offline")
    assert r.exit_code == 0, r.stderr
    assert "None" not in r.stdout
    assert ("hf://deepseek-ai/DeepSeek-V3@main: commit c9a493d103166831c3d7efa93991694f002a518d, file count not "
            "recorded, 688.6 GB (688586727753 bytes)") in r.stdout.splitlines()
