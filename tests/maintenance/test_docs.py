"""The docs' examples are what the code writes, and the repository points at nothing outside itself."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from llmgw.planner.spec import replica_number, unit_name
from llmgw.state import State

ROOT = Path(__file__).resolve().parents[2]


def test_state_doc_example_is_a_state_the_planner_could_write() -> None:
    text = (ROOT / "docs" / "state.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block, "docs/state.md has a ```json example"
    state = State.model_validate_json(block.group(1))
    assert state.replicas
    for r in state.replicas:
        assert replica_number(r.id, r.model) is not None, f"{r.id}: ids are <model>-<n> (planner/spec.py)"
        for s in r.shards:
            assert s.unit == unit_name(r.id, s.rank), f"{s.unit}: units are {unit_name(r.id, s.rank)}"


def test_nothing_points_outside_the_repository() -> None:
    """No reference to ../shared or to design notes the repository does not have."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    design = re.compile(r"\b(DESIGN|STYLE|TESTING)\.md\b")
    shared = re.compile(r"\.\./shared/(\S+?)[`'\")\s]")
    found = []
    for rel in files:
        path = ROOT / rel
        if rel == "tests/maintenance/test_docs.py" or not path.is_file() or path.stat().st_size > 1_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            # ../shared/x inside the repository (molecule/shared) is fine; the checkout's neighbour is not
            targets = [(path.parent / "../shared" / m).resolve() for m in shared.findall(line + " ")]
            outside = [t for t in targets if not t.is_relative_to(ROOT) or not t.exists()]
            if design.search(line) or outside:
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "references outside the repository:\n" + "\n".join(found)
