"""The host stack column and the fleet's version counts (llmgw.views.versions)."""

from __future__ import annotations

from typing import Any

from llmgw.views.versions import SHOWN_MAX, fleet_versions, shown, stack_text, summary_lines


def rec(driver: str | None = None, cuda: str | None = None, rdma: str | None = None, ofed: str | None = None,
        fm: str | None = None) -> dict[str, Any]:
    return {"gpu_driver": driver, "cuda_version": cuda, "rdma_core": rdma, "ofed": ofed, "fabric_manager": fm}


def test_stack_text_is_short_and_says_what_the_host_reported() -> None:
    assert stack_text(rec("570.86.15", "12.8", "50.0-2")) == "570.86.15/12.8 rdma 50.0-2"
    assert stack_text(rec("535.183.01")) == "535.183.01"  # no CUDA reported: the driver alone
    # MLNX_OFED names the release operators match; its rdma-core version is left out.
    assert stack_text(rec("570.86", "12.8", "2404mlnx51", "24.10-1.1.4.0", "active")) == \
        "570.86/12.8 ofed 24.10-1.1.4.0 fm active"
    assert stack_text(rec("570.86", "12.8", fm="failed")) == "570.86/12.8 fm failed"
    assert stack_text(rec("570.86", "12.8", fm="not installed")) == "570.86/12.8"  # a PCIe host: no noise
    assert stack_text(rec(rdma="50.0-2")) == "rdma 50.0-2"  # a CPU host with InfiniBand
    assert stack_text(rec()) == "-"
    assert stack_text({}) == "-"  # a record of a host with no facts at all


def test_hostile_versions_stay_on_one_short_line() -> None:
    # The driver's version is whatever NVML returned: newlines, escapes and spaces become `?`.
    assert stack_text(rec("570\n\x1b[31m[red]x", "12 .8")) == "570??[31m[red]x/12?.8"
    assert shown("") == "?"
    long = "5" * 200
    assert len(shown(long)) == SHOWN_MAX and shown(long).endswith("...")
    assert shown("570.133.20") == "570.133.20"


def test_fleet_counts_every_host_once_per_field_unknowns_apart() -> None:
    records = [rec("570.133.20", "12.8", "50.0-2"), rec("570.133.20", "12.8"), rec("535.183.01", "12.2"),
               rec("570.86.15", "12.8", "2404mlnx51", "24.10-1.1.4.0"), rec(), {}]
    s = fleet_versions(records)
    assert s["driver"]["versions"] == [{"version": "570.133.20", "hosts": 2}, {"version": "570.86.15", "hosts": 1},
                                       {"version": "535.183.01", "hosts": 1}]
    assert s["driver"]["unknown"] == 2
    assert s["cuda"]["versions"] == [{"version": "12.8", "hosts": 3}, {"version": "12.2", "hosts": 1}]
    assert s["rdma_core"] == {"label": "rdma-core", "unknown": 4, "versions": [
        {"version": "2404mlnx51", "hosts": 1}, {"version": "50.0-2", "hosts": 1}]}
    assert s["ofed"]["versions"] == [{"version": "24.10-1.1.4.0", "hosts": 1}] and s["ofed"]["unknown"] == 5
    for entry in s.values():
        assert sum(e["hosts"] for e in entry["versions"]) + entry["unknown"] == len(records)


def test_odd_versions_are_counted_as_reported_and_sorted_newest_first() -> None:
    records = [rec("570.9"), rec("570.10"), rec("570"), rec("unknown"), rec("beta-1"), rec("  "), rec("570.10")]
    s = fleet_versions(records)["driver"]
    # Numbers compare as numbers (570.10 is newer than 570.9); non-numeric after; a blank one is unknown.
    assert [e["version"] for e in s["versions"]] == ["570.10", "570.9", "570", "beta-1", "unknown"]
    assert s["versions"][0]["hosts"] == 2 and s["unknown"] == 1  # a host reporting "unknown" is not the count


def test_summary_lines() -> None:
    s = fleet_versions([rec("570.133.20", "12.8", "50.0-2"), rec("535.183.01\n", "12.2"), rec()])
    assert summary_lines(s) == [
        "NVIDIA driver: 570.133.20 on 1 host, 535.183.01? on 1 host, unknown on 1 host",
        "CUDA: 12.8 on 1 host, 12.2 on 1 host, unknown on 1 host",
        "rdma-core: 50.0-2 on 1 host, unknown on 2 hosts",
        "MLNX_OFED: unknown on 3 hosts"]
    assert summary_lines(fleet_versions([rec(), rec()])) == []  # nothing reported: the column says it all
    assert summary_lines(fleet_versions([])) == []
