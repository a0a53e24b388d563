"""`llmgw drain --deadline`: the deadline is recorded beside the state, uncordon clears it, bad
values (on the command line or written by hand) are refused with what to write instead."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from llmgw.edits import UnsafeEdit, remove_key
from llmgw.inventory import load_inventory
from llmgw.nodetime import DEFAULT_DRAIN_DEADLINE, deadline_after, format_time, parse_deadline
from tests.edits.test_edits import CATALOG, INVENTORY, changed_lines
from tests.support.cli import run_cli

STAMP = re.compile(r'llmgw_drain_deadline: "(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"')


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    (root / "inventory").mkdir(parents=True)
    (root / "catalog").mkdir()
    (root / "llmgw.yaml").write_text("")
    (root / "inventory" / "hosts.yml").write_text(INVENTORY)
    (root / "catalog" / "chat.yaml").write_text(CATALOG)
    return root


def _drain(site: Path, *args: str) -> tuple[str, datetime, datetime, datetime]:
    """Drain gpu-01; its stdout, the deadline written, and the clock just before and after."""
    before = datetime.now(UTC).replace(microsecond=0)
    result = run_cli("-C", str(site), "drain", "gpu-01", *args)
    after = datetime.now(UTC)
    assert result.exit_code == 0, result.stderr
    m = STAMP.search((site / "inventory" / "hosts.yml").read_text())
    assert m is not None
    return result.stdout, parse_deadline(m.group(1)), before, after


def test_drain_records_the_default_deadline_and_prints_it(site: Path) -> None:
    out, deadline, before, after = _drain(site)
    assert DEFAULT_DRAIN_DEADLINE == "1h"
    assert before + timedelta(hours=1) <= deadline <= after + timedelta(hours=1)
    assert (f"gpu-01 is now draining until {format_time(deadline)} (the default 1h from now): the next apply "
            "moves its replicas elsewhere, each replacement serving before its original stops; a replica no other "
            "node can take by then is destroyed by the first plan after it.") in out
    text = (site / "inventory" / "hosts.yml").read_text()
    assert changed_lines(INVENTORY, text) == (
        ["          llmgw_node_state: ready  # set by llmgw cordon/drain"],
        ["          llmgw_node_state: draining  # set by llmgw cordon/drain",
         f'          llmgw_drain_deadline: "{format_time(deadline)}"'])
    assert load_inventory(site / "inventory").hosts["gpu-01"].drain_deadline == deadline


def test_drain_again_keeps_the_deadline_unless_given_one(site: Path) -> None:
    _out, first, _b, _a = _drain(site, "--deadline", "2h")
    again = run_cli("-C", str(site), "drain", "gpu-01")
    assert again.stdout == (f"gpu-01 is already draining until {format_time(first)}; nothing was written. "
                            "Pass --deadline to set another.\n")
    out, second, before, after = _drain(site, "--deadline", "90s")
    assert before + timedelta(seconds=90) <= second <= after + timedelta(seconds=90)
    assert f"gpu-01 is now draining until {format_time(second)}: " in out
    assert (site / "inventory" / "hosts.yml").read_text().count("llmgw_drain_deadline") == 1


def test_uncordon_and_cordon_clear_the_deadline(site: Path) -> None:
    _drain(site, "--deadline", "10m")
    result = run_cli("-C", str(site), "uncordon", "gpu-01")
    assert result.exit_code == 0, result.stderr
    assert (site / "inventory" / "hosts.yml").read_text() == INVENTORY  # back to exactly what it was
    assert re.search(r'^-          llmgw_drain_deadline: "', result.stdout, re.M)
    _drain(site, "--deadline", "10m")
    assert run_cli("-C", str(site), "cordon", "gpu-01").exit_code == 0
    host = load_inventory(site / "inventory").hosts["gpu-01"]
    assert (host.node_state, host.drain_deadline) == ("cordoned", None)


@pytest.mark.parametrize("bad", ["soon", "0s", "-5m", "1d"])
def test_a_bad_duration_is_refused_with_nothing_written(site: Path, bad: str) -> None:
    result = run_cli("-C", str(site), "drain", "gpu-01", "--deadline", bad)
    assert result.exit_code == 2
    assert "--deadline: " in result.stderr
    assert (site / "inventory" / "hosts.yml").read_text() == INVENTORY


def test_a_bad_duration_says_what_to_write(site: Path) -> None:
    result = run_cli("-C", str(site), "drain", "gpu-01", "--deadline", "soon")
    assert "--deadline: 'soon' is not a duration; write it like 30m, 1h30m or 90s" in result.stderr
    zero = run_cli("-C", str(site), "drain", "gpu-01", "--deadline", "0s")
    assert "--deadline: '0s' is no time at all; give the drain at least a few seconds, like 10m" in zero.stderr


@pytest.mark.parametrize(("written", "says"), [
    ('"tomorrow"', "'tomorrow' is not a time; write it in UTC like 2026-01-31T18:00:00Z"),
    ('"2026-01-31T18:00:00"', "'2026-01-31T18:00:00' has no time zone; write it in UTC like 2026-01-31T18:00:00Z"),
    ("1700000000", "1700000000 is not a time; write it in UTC like 2026-01-31T18:00:00Z (quoted)"),
])
def test_a_bad_deadline_written_by_hand_names_the_file_and_line(site: Path, written: str, says: str) -> None:
    hosts = site / "inventory" / "hosts.yml"
    hosts.write_text(INVENTORY.replace("          llmgw_labels:\n            role: coding\n",
                                       f"          llmgw_labels:\n            role: coding\n"
                                       f"          llmgw_drain_deadline: {written}\n", 1))
    result = run_cli("-C", str(site), "plan")
    assert result.exit_code != 0
    assert f"{hosts}:11: host gpu-01: llmgw_drain_deadline: {says}" in result.stderr
    assert "set it again with `llmgw drain gpu-01 --deadline 1h`" in result.stderr


def test_a_deadline_in_another_zone_is_read_as_utc() -> None:
    assert parse_deadline("2026-01-31T19:00:00+01:00") == datetime(2026, 1, 31, 18, tzinfo=UTC)
    assert format_time(deadline_after("1h30m", datetime(2026, 1, 31, 18, 0, 0, 999, tzinfo=UTC))) == \
        "2026-01-31T19:30:00Z"


def test_remove_key_keeps_comments_and_refuses_flow_style() -> None:
    text = "a:\n  x: 1  # one\n  # about y\n  y: 2\n  z: 3\n"
    assert remove_key(text, Path("f.yml"), ["a"], "y") == "a:\n  x: 1  # one\n  # about y\n  z: 3\n"
    assert remove_key(text, Path("f.yml"), ["a"], "missing") == text
    with pytest.raises(UnsafeEdit):
        remove_key("a: {x: 1, y: 2}\n", Path("f.yml"), ["a"], "y")
