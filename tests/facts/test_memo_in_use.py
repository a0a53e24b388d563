"""The memo of parsed inputs is the bastion's: readers memoise only where the CLI put one (#34).

llmgw.facts.memo unpickles what it stored; the router process, which reads its site copy for
the dashboard, must neither import nor use it. The inventory and facts readers ask
`llmgw.facts.memo_in_use()`, which the CLI sets for every verb but `router`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmgw import facts as facts_pkg
from llmgw.facts import memo, memo_in_use, use_memo
from llmgw.facts.cache import read_facts, write_facts
from llmgw.facts.records import HostFacts
from llmgw.inventory import MEMO_MIN_BYTES, load_inventory
from tests.support.cli import run_cli


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMGW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(facts_pkg, "_memo", None)  # whatever an earlier CLI test installed in this worker
    return tmp_path / "cache" / "inputs"


def big_inventory(path: Path) -> Path:
    hosts = "".join(f"        gpu-{n:04d}:\n          llmgw_labels: {{role: coding, rack: r{n % 40}}}\n"
                    for n in range(400))
    path.write_text("all:\n  children:\n    llmgw_nodes:\n      hosts:\n" + hosts)
    assert path.stat().st_size >= MEMO_MIN_BYTES
    return path


def inputs(tmp_path: Path) -> tuple[Path, Path]:
    for name in ("gpu-01", "gpu-02"):
        write_facts(tmp_path / "facts", HostFacts.model_validate({"host": name, "gathered_at": "2026-12-02T06:00:00Z"}))
    return tmp_path / "facts", big_inventory(tmp_path / "hosts.yml")


def test_without_a_memo_in_use_every_input_is_parsed(tmp_path: Path, cache: Path) -> None:
    facts_dir, inventory = inputs(tmp_path)
    assert memo_in_use() is None
    assert set(read_facts(facts_dir, memo_min=0)) == {"gpu-01", "gpu-02"}
    assert len(load_inventory(inventory).hosts) == 400
    assert not cache.exists() or not list(cache.iterdir())


def test_with_the_memo_in_use_inputs_are_memoised(tmp_path: Path, cache: Path) -> None:
    facts_dir, inventory = inputs(tmp_path)
    use_memo(memo)
    first = read_facts(facts_dir, memo_min=0)
    parsed = load_inventory(inventory)
    assert sorted(p.name.split("-")[0] for p in cache.glob("*.pickle")) == ["facts", "inventory"]
    assert read_facts(facts_dir, memo_min=0) == first
    assert load_inventory(inventory) == parsed


def test_the_cli_memoises_and_the_router_verb_does_not() -> None:
    result = run_cli("router", "--help")
    assert result.exit_code == 0, result.stderr
    assert memo_in_use() is None
    result = run_cli("catalog", "--help")
    assert result.exit_code == 0, result.stderr
    assert memo_in_use() is memo


def test_the_router_verb_never_imports_the_memo() -> None:
    """In a fresh interpreter: what `llmgw router --help` loads, the memo not among it."""
    import subprocess

    code = ("import sys\nfrom llmgw.cli import main\ntry:\n    main(['router', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint('llmgw.facts.memo' in sys.modules, 'llmgw.router' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip().splitlines()[-1] == "False True", done.stdout + done.stderr
