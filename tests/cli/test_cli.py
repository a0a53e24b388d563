"""The CLI's shape: -C, init, exit codes, errors without tracebacks."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

import llmgw.cli
from llmgw.cli import VERBS
from tests.support.cli import run_cli


def test_init_writes_a_valid_starter_site(tmp_path: Path) -> None:
    r = run_cli("init", str(tmp_path / "site"))
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / "site" / "catalog" / "models.yaml").read_text()
    assert text.startswith("# The catalog")
    r = run_cli("-C", str(tmp_path / "site"), "catalog", "validate")
    assert r.exit_code == 0, r.stderr
    r = run_cli("-C", str(tmp_path / "site"), "models", "--json")
    assert {m["name"] for m in json.loads(r.stdout)["models"]} == {"qwen2.5-coder-14b", "qwen2.5-7b"}


def test_init_keeps_secrets_and_runtime_files_out_of_git(tmp_path: Path) -> None:
    """A starter site committed as is must not carry the engine-key secret, the state as
    last delivered to routers (.llmgw/), lock files or the SQLite key store."""
    site = tmp_path / "site"
    assert run_cli("init", str(site)).exit_code == 0
    subprocess.run(["git", "init", "-q", str(site)], check=True)
    for rel in ("llmgw-engine-keys.secret", ".llmgw/state.json", "state.json.lock", "llmgw-store.sqlite"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("x")
    shown = subprocess.run(["git", "-C", str(site), "status", "--porcelain", "--untracked-files=all"],
                           capture_output=True, text=True, check=True).stdout
    assert "llmgw.yaml" in shown and "catalog/models.yaml" in shown
    for rel in ("llmgw-engine-keys.secret", ".llmgw", "state.json.lock", "llmgw-store.sqlite"):
        assert rel not in shown, shown


def test_init_refuses_an_existing_site_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "site"
    root.mkdir()
    (root / "llmgw.yaml").write_text("state: mine.json\n")
    r = run_cli("init", str(root))
    assert r.exit_code == 1
    assert "already holds a site" in r.stderr
    assert (root / "llmgw.yaml").read_text() == "state: mine.json\n"
    assert not (root / "catalog").exists()


def test_no_site_says_how_to_get_one(tmp_path: Path) -> None:
    r = run_cli("-C", str(tmp_path), "models")
    assert r.exit_code == 1
    assert r.stderr.startswith("Error: no llmgw.yaml in")
    assert "llmgw init" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_site_config_lists_keys(tmp_path: Path) -> None:
    (tmp_path / "llmgw.yaml").write_text("catalg: x\nports: {start: 30000, end: 20000}\n")
    r = run_cli("-C", str(tmp_path), "models")
    assert r.exit_code == 1
    assert "llmgw.yaml is invalid" in r.stderr
    assert "catalg: Extra inputs are not permitted" in r.stderr
    assert "end 20000 is below start 30000" in r.stderr


def test_usage_errors_exit_2() -> None:
    assert run_cli("no-such-verb").exit_code == 2
    assert run_cli("models", "--bogus").exit_code == 2


def test_help_lists_commands() -> None:
    r = run_cli("--help")
    assert r.exit_code == 0
    for verb in ("init", "catalog", "models"):
        assert verb in r.stdout


def test_every_command_module_is_in_the_verb_table() -> None:
    """`llmgw` imports a verb's module only when it runs (VERBS); a command defined in a
    module but missing from the table, or a table entry naming the wrong module, fails here."""
    defined = {}
    for info in pkgutil.iter_modules(llmgw.cli.__path__):
        module = import_module(f"llmgw.cli.{info.name}")
        for command in getattr(module, "COMMANDS", []):
            defined[command.name] = info.name
    assert defined == VERBS


def loaded_by(tmp_path: Path, args: list[str], unwanted: str) -> list[str]:
    """The modules matching `unwanted` (an expression of `m`, a module name) that `llmgw ARGS`
    loaded in a fresh interpreter, on a site `llmgw init` made; the command must succeed."""
    probe = ("import sys; from llmgw.cli import main\n"
             "try:\n    main(['-C', sys.argv[1], *sys.argv[2:]])\n"
             "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
             f"print(sorted(m for m in sys.modules if {unwanted}))")
    assert run_cli("init", str(tmp_path / "site")).exit_code == 0
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "site"), *args], capture_output=True, text=True,
                          check=True)
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))
    return found


def test_a_validate_run_loads_neither_ansible_nor_the_router(tmp_path: Path) -> None:
    """What a pull request's pipeline runs first stays cheap to start."""
    assert loaded_by(tmp_path, ["catalog", "validate", "--offline"],
                     "m.split('.')[0] in ('ansible_runner', 'ansible', 'aiohttp')"
                     " or m.startswith(('llmgw.router', 'llmgw.apply'))") == []


@pytest.mark.parametrize("args", [["plan"], ["status", "--no-router", "--json"], ["models", "--no-router", "--json"],
                                  ["nodes", "--json"]])
def test_json_views_and_plan_load_no_text_layout(tmp_path: Path, args: list[str]) -> None:
    """rich (tables, consoles, progress bars: ~35 ms) loads where text is printed, the gathering
    code where facts are gathered, the explainer where a plan is explained: views and plans of a
    large fleet are run often (scripts, dashboards' neighbours) and each millisecond is paid each time."""
    assert loaded_by(tmp_path, args, "m.split('.')[0] == 'rich'"
                     " or m in ('llmgw.facts.gather', 'llmgw.planner.explain', 'llmgw.cli.views_text')") == []
