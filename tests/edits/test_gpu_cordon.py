"""`llmgw cordon/uncordon NODE --gpu N`: one GPU in llmgw_cordoned_gpus, the diff is the change,
refusals write nothing, and the planner then leaves that GPU (not the node) out."""

from __future__ import annotations

from pathlib import Path

from tests.edits.test_edits import changed_lines, site  # noqa: F401 (the fixture)
from tests.support.cli import run_cli


def hosts(root: Path) -> Path:
    return root / "inventory" / "hosts.yml"


def test_cordon_one_gpu_then_another_then_uncordon(site: Path) -> None:  # noqa: F811
    before = hosts(site).read_text()
    result = run_cli("-C", str(site), "cordon", "gpu-01", "--gpu", "3")
    assert result.exit_code == 0, result.stderr
    assert "GPU 3 of gpu-01 is now cordoned: no new shard will be placed on it" in result.stdout
    assert changed_lines(before, hosts(site).read_text()) == (
        [], ["          llmgw_cordoned_gpus: [3]"])
    assert run_cli("-C", str(site), "cordon", "gpu-01", "--gpu", "1").exit_code == 0
    assert "          llmgw_cordoned_gpus: [1, 3]\n" in hosts(site).read_text()
    again = run_cli("-C", str(site), "cordon", "gpu-01", "--gpu", "1")
    assert again.stdout.startswith("GPU 1 of gpu-01 is already cordoned; nothing was written.")
    assert run_cli("-C", str(site), "uncordon", "gpu-01", "--gpu", "3").exit_code == 0
    assert "          llmgw_cordoned_gpus: [1]\n" in hosts(site).read_text()
    # The node itself stays ready all along.
    assert "llmgw_node_state: ready  # set by llmgw cordon/drain" in hosts(site).read_text()


def test_cordon_a_gpu_of_a_flow_style_host(site: Path) -> None:  # noqa: F811
    assert run_cli("-C", str(site), "cordon", "gpu-04", "--gpu", "0").exit_code == 0
    assert ("        gpu-04: {ansible_host: 10.0.0.4, llmgw_labels: {role: x}, llmgw_cordoned_gpus: [0]}"
            in hosts(site).read_text())


def test_a_block_list_is_refused_with_nothing_written(site: Path) -> None:  # noqa: F811
    text = hosts(site).read_text().replace("          llmgw_labels:\n            role: batch\n",
                                           "          llmgw_labels:\n            role: batch\n"
                                           "          llmgw_cordoned_gpus:\n            - 2\n")
    hosts(site).write_text(text)
    result = run_cli("-C", str(site), "cordon", "gpu-02", "--gpu", "5")
    assert result.exit_code != 0
    assert "llmgw_cordoned_gpus is not a one-line list such as [2, 5]" in result.stderr
    assert "llmgw_cordoned_gpus: [2, 5]; nothing was written" in result.stderr
    assert hosts(site).read_text() == text


def _set_on_gpu_02(root: Path, line: str) -> None:
    text = hosts(root).read_text()
    hosts(root).write_text(text.replace("          ansible_host: 10.0.0.2\n",
                                        f"          ansible_host: 10.0.0.2\n          {line}\n", 1))


def test_bad_values_in_the_inventory_say_what_to_write(site: Path) -> None:  # noqa: F811
    for bad, want in (("[gpu0]", "a list of GPU indices, e.g. [2, 5]"), ("[-1]", "a list of GPU indices"),
                      ("yes", "a list of GPU indices")):
        _set_on_gpu_02(site, f"llmgw_cordoned_gpus: {bad}")
        result = run_cli("-C", str(site), "nodes")
        assert result.exit_code != 0 and want in result.stderr, result.stderr
        hosts(site).write_text(hosts(site).read_text().replace(f"          llmgw_cordoned_gpus: {bad}\n", ""))
    _set_on_gpu_02(site, "llmgw_gpu_health_unknown: maybe")
    result = run_cli("-C", str(site), "nodes")
    assert "llmgw_gpu_health_unknown is 'maybe', expected deny or allow" in result.stderr


def test_drain_has_no_gpu_form(site: Path) -> None:  # noqa: F811
    result = run_cli("-C", str(site), "drain", "gpu-01", "--gpu", "1")
    assert result.exit_code != 0 and "cordon the GPU instead" in result.stderr
