"""Operator edits: the diff is the change, comments and order stay, refusals write nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from llmgw.edits import remove_item, set_key
from tests.support.cli import run_cli

INVENTORY = """\
# Fleet of the edit tests.
all:
  children:
    llmgw_nodes:
      hosts:
        gpu-01:
          ansible_host: 10.0.0.1   # rack 4
          llmgw_node_state: ready  # set by llmgw cordon/drain
          llmgw_labels:
            role: coding
        gpu-02:
          ansible_host: 10.0.0.2
          llmgw_labels:
            role: batch
          # more vars later
        gpu-03:
        gpu-04: {ansible_host: 10.0.0.4, llmgw_labels: {role: x}}   # flow style
    llmgw_routers:
      hosts:
        router-01:
          ansible_host: 10.0.0.9
"""

CATALOG = """\
# Chat models.
models:
  - name: big
    aliases: [large]
    source: hf://org/big/big.gguf
    fallbacks: [small]               # when big is down
    scaling: {min: 1, max: 2, idle_timeout: 30m}
    profiles:
      - name: cpu
        engine: llamacpp

  # the small one
  - name: small
    source: hf://org/small/small.gguf
    profiles:
      - name: cpu
        engine: llamacpp
        min_memory_gb: 4

  - name: tiny
    source: hf://org/tiny/tiny.gguf
    profiles: [{name: cpu, engine: llamacpp}]
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    (root / "inventory").mkdir(parents=True)
    (root / "catalog").mkdir()
    (root / "llmgw.yaml").write_text("")
    (root / "inventory" / "hosts.yml").write_text(INVENTORY)
    (root / "catalog" / "chat.yaml").write_text(CATALOG)
    return root


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    a, b = before.splitlines(), after.splitlines()
    return [x for x in a if x not in b], [x for x in b if x not in a]


def test_cordon_changes_one_value_and_keeps_its_comment(site: Path) -> None:
    result = run_cli("-C", str(site), "cordon", "gpu-01")
    assert result.exit_code == 0, result.stderr
    after = (site / "inventory" / "hosts.yml").read_text()
    assert changed_lines(INVENTORY, after) == (
        ["          llmgw_node_state: ready  # set by llmgw cordon/drain"],
        ["          llmgw_node_state: cordoned  # set by llmgw cordon/drain"])
    assert "gpu-01 is now cordoned: no new replicas will be placed there" in result.stdout
    assert "+          llmgw_node_state: cordoned" in result.stdout  # the diff is shown


def test_drain_adds_the_key_after_the_last_var(site: Path) -> None:
    assert run_cli("-C", str(site), "drain", "gpu-02", "--deadline", "1h").exit_code == 0
    after = (site / "inventory" / "hosts.yml").read_text()
    assert "            role: batch\n          llmgw_node_state: draining\n          llmgw_drain_deadline: " in after
    added = changed_lines(INVENTORY, after)
    assert added[0] == [] and added[1][0] == "          llmgw_node_state: draining"
    assert added[1][1].startswith('          llmgw_drain_deadline: "') and len(added[1]) == 2


def test_cordon_a_host_without_vars(site: Path) -> None:
    assert run_cli("-C", str(site), "cordon", "gpu-03").exit_code == 0
    after = (site / "inventory" / "hosts.yml").read_text()
    assert "        gpu-03:\n          llmgw_node_state: cordoned\n        gpu-04:" in after


def test_cordon_a_flow_style_host(site: Path) -> None:
    assert run_cli("-C", str(site), "cordon", "gpu-04").exit_code == 0
    after = (site / "inventory" / "hosts.yml").read_text()
    assert changed_lines(INVENTORY, after)[1] == [
        "        gpu-04: {ansible_host: 10.0.0.4, llmgw_labels: {role: x}, llmgw_node_state: cordoned}   # flow style"]


def test_uncordon_of_a_ready_node_writes_nothing(site: Path) -> None:
    path = site / "inventory" / "hosts.yml"
    mtime = path.stat().st_mtime_ns
    result = run_cli("-C", str(site), "uncordon", "gpu-01")
    assert result.exit_code == 0
    assert result.stdout == "gpu-01 is already ready; nothing was written.\n"
    assert path.stat().st_mtime_ns == mtime


def test_unknown_node_and_router_are_refused(site: Path) -> None:
    missing = run_cli("-C", str(site), "drain", "gpu-99")
    assert missing.exit_code == 2 and "no host gpu-99 in the inventory" in missing.stderr
    router = run_cli("-C", str(site), "drain", "router-01")
    assert router.exit_code == 2 and "router-01 is a router, not a node" in router.stderr
    assert (site / "inventory" / "hosts.yml").read_text() == INVENTORY


def test_host_vars_file_wins_over_the_inventory(site: Path) -> None:
    hv = site / "inventory" / "host_vars"
    hv.mkdir()
    (hv / "gpu-01.yml").write_text("# gpu-01's own vars\nllmgw_node_state: ready\n")
    assert run_cli("-C", str(site), "cordon", "gpu-01").exit_code == 0
    assert (hv / "gpu-01.yml").read_text() == "# gpu-01's own vars\nllmgw_node_state: cordoned\n"
    assert (site / "inventory" / "hosts.yml").read_text() == INVENTORY


def test_ini_inventory_is_refused_with_nothing_written(tmp_path: Path) -> None:
    root = tmp_path / "ini"
    root.mkdir()
    (root / "llmgw.yaml").write_text("inventory: hosts.ini\n")
    ini = "[llmgw_nodes]\ngpu-01 ansible_host=10.0.0.1\n"
    (root / "hosts.ini").write_text(ini)
    result = run_cli("-C", str(root), "cordon", "gpu-01")
    assert result.exit_code == 1
    assert "gpu-01 is defined in" in result.stderr and "llmgw edits only YAML inventories" in result.stderr
    assert (root / "hosts.ini").read_text() == ini
    assert sorted(p.name for p in root.iterdir()) == ["hosts.ini", "llmgw.yaml"]


def test_scale_edits_only_the_scaling_line(site: Path) -> None:
    result = run_cli("-C", str(site), "scale", "large", "--min", "2", "--max", "3")
    assert result.exit_code == 0, result.stderr
    after = (site / "catalog" / "chat.yaml").read_text()
    assert changed_lines(CATALOG, after) == (["    scaling: {min: 1, max: 2, idle_timeout: 30m}"],
                                             ["    scaling: {min: 2, max: 3, idle_timeout: 30m}"])


def test_scale_adds_a_scaling_block_where_there_is_none(site: Path) -> None:
    assert run_cli("-C", str(site), "scale", "small", "--min", "0", "--max", "2").exit_code == 0
    after = (site / "catalog" / "chat.yaml").read_text()
    assert "        min_memory_gb: 4\n    scaling: {min: 0, max: 2}\n\n  - name: tiny" in after
    assert changed_lines(CATALOG, after) == ([], ["    scaling: {min: 0, max: 2}"])


def test_scale_below_max_is_refused_with_nothing_written(site: Path) -> None:
    result = run_cli("-C", str(site), "scale", "big", "--min", "3")
    assert result.exit_code == 1
    assert "max: 2 is below min 3" in result.stderr and "nothing was written" in result.stderr
    assert (site / "catalog" / "chat.yaml").read_text() == CATALOG


def test_scale_help_says_when_replicas_above_min_start_and_stop() -> None:
    text = " ".join(run_cli("scale", "--help").stdout.split())
    assert ("Replicas above min start and stop only with the model's `scaling.target_in_flight` set and a "
            "controller run with --demand-listen") in text
    assert "Without target_in_flight nothing starts replicas above min" in text
    assert "`scale MODEL --min N --max N` makes it destroy those above N" in text
    assert "--idle-timeout DURATION" in text


def test_scale_prints_what_is_in_force_not_the_request(site: Path) -> None:
    # small has no scaling block: max follows min, so `--min 2` makes max 2 as well.
    result = run_cli("-C", str(site), "scale", "small", "--min", "2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == [
        "Scaled small; in force once applied: min 2, max 2, idle timeout 30m, on demand no. The planner keeps 2 "
        "replicas placed; the idle timeout applies to min 0 models only.",
        "Commit the change, then run `llmgw plan` to see what it does."]
    again = run_cli("-C", str(site), "scale", "big", "--min", "0")
    assert again.stdout.splitlines()[-2] == (
        "Scaled big; in force once applied: min 0, max 2, idle timeout 30m, on demand yes. No replica runs until a "
        "request asks for one; the controller (run with --demand-listen) starts it and stops it after 30m without a "
        "request. Nothing starts replicas above 1 (no target_in_flight); the planner leaves running ones up to max 2 "
        "alone.")


def test_scale_sets_the_idle_timeout(site: Path) -> None:
    result = run_cli("-C", str(site), "scale", "large", "--idle-timeout", "90m")
    assert result.exit_code == 0, result.stderr
    after = (site / "catalog" / "chat.yaml").read_text()
    assert changed_lines(CATALOG, after) == (["    scaling: {min: 1, max: 2, idle_timeout: 30m}"],
                                             ["    scaling: {min: 1, max: 2, idle_timeout: 1h30m}"])
    assert "in force once applied: min 1, max 2, idle timeout 1h30m, on demand no." in result.stdout
    same = run_cli("-C", str(site), "scale", "big", "--idle-timeout", "1h30m", "--min", "1")
    assert same.stdout.startswith("big already scales like that; nothing was written. In force: min 1, max 2, ")
    bad = run_cli("-C", str(site), "scale", "big", "--idle-timeout", "90")
    assert bad.exit_code == 2
    assert bad.stderr == "Error: --idle-timeout: '90' is not a duration; write it like 30m, 1h30m or 90s\n"


def test_scale_max_below_min_is_one_error_not_two(site: Path) -> None:
    # big falls back to small: the old answer also listed "'small' is not a model in the catalog".
    result = run_cli("-C", str(site), "scale", "small", "--min", "5", "--max", "3")
    assert result.exit_code == 2
    assert result.stderr == "Error: --max 3 is below --min 5; raise --max or lower --min; nothing was written\n"
    (site / "catalog" / "chat.yaml").write_text(CATALOG.replace(
        "    source: hf://org/small/small.gguf\n", "    source: hf://org/small/small.gguf\n"
        "    scaling: {min: 1, max: 2}\n"))
    kept_max = run_cli("-C", str(site), "scale", "small", "--min", "3")
    assert kept_max.exit_code == 1
    assert kept_max.stderr == (
        "Error: the catalog has 1 problem\n"
        "  catalog/chat.yaml:15: models[1].scaling.max: 2 is below min 3; raise max or lower min\n"
        "the change would leave the catalog invalid; nothing was written\n")


def test_model_add_writes_a_new_catalog_file(site: Path, tmp_path: Path) -> None:
    new = tmp_path / "new.yaml"
    new.write_text("# a coder\nname: coder\nsource: hf://org/coder/coder.gguf\nprofiles:\n"
                   "  - {name: cpu, engine: llamacpp}\n")
    result = run_cli("-C", str(site), "model", "add", "-f", str(new))
    assert result.exit_code == 0, result.stderr
    written = (site / "catalog" / "coder.yaml").read_text()
    assert written == ("# a coder\nmodels:\n  - name: coder\n    source: hf://org/coder/coder.gguf\n"
                       "    profiles:\n      - {name: cpu, engine: llamacpp}\n")
    again = run_cli("-C", str(site), "model", "add", "-f", str(new))
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_model_add_of_a_clashing_model_is_refused(site: Path, tmp_path: Path) -> None:
    new = tmp_path / "x.yaml"
    new.write_text("models:\n  - name: other\n    aliases: [small]\n    source: hf://o/r/f\n"
                   "    profiles: [{name: cpu, engine: llamacpp}]\n")
    result = run_cli("-C", str(site), "model", "add", "-f", str(new))
    assert result.exit_code == 1
    assert "'small' is already used by model 'small'" in result.stderr
    assert sorted(p.name for p in (site / "catalog").iterdir()) == ["chat.yaml"]


def test_model_add_of_one_mapping_points_at_its_own_line(site: Path, tmp_path: Path) -> None:
    # The old answer: catalog/coder.yaml:5, a file never written and a line one down (`models:` went in).
    new = tmp_path / "new.yaml"
    new.write_text("name: coder\nsource: hf://org/coder/coder.gguf\nprofiles:\n"
                   "  - {name: cpu, engine: llamacp}\n")
    result = run_cli("-C", str(site), "model", "add", "-f", str(new))
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {new} has 1 problem; nothing was written\n"
        f"  {new}:4: profiles[0].engine: 'llamacp' is not allowed: input should be 'vllm', 'sglang' or 'llamacpp'\n"
        f"fix {new}, then run `llmgw model add -f` again\n")
    assert sorted(p.name for p in (site / "catalog").iterdir()) == ["chat.yaml"]


def test_model_add_clash_is_blamed_on_the_new_entry(site: Path, tmp_path: Path) -> None:
    # `aaa` sorts before chat.yaml: the old answer blamed chat.yaml's `small`, "already used by
    # model 'aaa' at catalog/aaa.yaml:2", a file never written.
    new = tmp_path / "aaa.yaml"
    new.write_text("name: aaa\naliases: [large]\nsource: hf://org/aaa/aaa.gguf\nprofiles:\n"
                   "  - {name: cpu, engine: llamacpp}\n")
    result = run_cli("-C", str(site), "model", "add", "-f", str(new))
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {new} has 1 problem; nothing was written\n"
        f"  {new}:2: aliases[0]: 'large' is already used by model 'big' at catalog/chat.yaml:4; names and aliases "
        "must be unique across the catalog\n"
        f"fix {new}, then run `llmgw model add -f` again\n")


def test_model_remove_refuses_while_others_fall_back(site: Path) -> None:
    result = run_cli("-C", str(site), "model", "remove", "small")
    assert result.exit_code == 1
    assert "cannot remove small: big falls back to it" in result.stderr
    assert (site / "catalog" / "chat.yaml").read_text() == CATALOG


def test_model_remove_drops_one_item_and_keeps_the_rest(site: Path) -> None:
    assert run_cli("-C", str(site), "model", "remove", "tiny").exit_code == 0
    after = (site / "catalog" / "chat.yaml").read_text()
    assert after == CATALOG.split("\n  - name: tiny")[0].rstrip("\n") + "\n"
    assert run_cli("-C", str(site), "model", "remove", "big").exit_code == 0
    after = (site / "catalog" / "chat.yaml").read_text()
    assert after == "# Chat models.\nmodels:\n  # the small one\n" + CATALOG.split("  # the small one\n")[1].split(
        "\n  - name: tiny")[0].rstrip("\n") + "\n"


def test_model_remove_by_alias_is_refused(site: Path) -> None:
    result = run_cli("-C", str(site), "model", "remove", "large")
    assert result.exit_code == 2 and "large is an alias of big" in result.stderr


def test_model_remove_of_the_last_model_in_a_file_deletes_it(site: Path, tmp_path: Path) -> None:
    (site / "catalog" / "solo.yaml").write_text("models:\n  - name: solo\n    source: hf://o/s/s\n"
                                                "    profiles: [{name: cpu, engine: llamacpp}]\n")
    assert run_cli("-C", str(site), "model", "remove", "solo").exit_code == 0
    assert not (site / "catalog" / "solo.yaml").exists()


@pytest.mark.parametrize(("text", "at", "key", "value", "want"), [
    ("a:\n  b: 1 # c\n", ["a"], "b", "2", "a:\n  b: 2 # c\n"),
    ("a:\n  b: 'x'\n", ["a"], "b", "y", "a:\n  b: y\n"),
    ("a: {b: 1, c: 2}\n", ["a"], "c", "3", "a: {b: 1, c: 3}\n"),
    ("a: {b: 1}\n", ["a"], "d", "4", "a: {b: 1, d: 4}\n"),
    ("a: {}\n", ["a"], "d", "4", "a: {d: 4}\n"),
    ("a:\n  b:\n  - 1\n  - 2\nz: 1\n", ["a"], "c", "3", "a:\n  b:\n  - 1\n  - 2\n  c: 3\nz: 1\n"),
    ("h:\n  x: # none yet\n  y: 1\n", ["h", "x"], "k", "v", "h:\n  x: # none yet\n    k: v\n  y: 1\n"),
])
def test_set_key_cases(text: str, at: list[str], key: str, value: str, want: str) -> None:
    assert set_key(text, Path("t.yaml"), at, key, value) == want


def test_remove_item_keeps_comments_of_neighbours() -> None:
    text = textwrap.dedent("""\
        l:
          # first
          - a: 1
            b: 2

          # second
          - a: 3
        end: 1
        """)
    assert remove_item(text, Path("t.yaml"), ["l"], 0) == "l:\n  # second\n  - a: 3\nend: 1\n"
    assert remove_item(text, Path("t.yaml"), ["l"], 1) == "l:\n  # first\n  - a: 1\n    b: 2\n\nend: 1\n"
