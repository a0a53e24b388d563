"""Facts report each llmgw unit's lineage (LLMGW_LINEAGE in its environment), read with one
`systemctl show`; the text below is what systemd 252 prints for units role llmgw_engine writes."""

from __future__ import annotations

from tests.support.facts import util

units = util("units")

LIST_UNITS = """\
llmgw-router.service     loaded active running llmgw router
llmgw-tiny-1-0.service   loaded active running llmgw llamacpp shard tiny-1/0 serving tiny
llmgw-tiny-7-0.service   loaded failed failed  llmgw llamacpp shard tiny-7/0 serving tiny
"""
SHOW = """\
Environment="HOME=/var/lib/llmgw" LLMGW_UNIT=llmgw-tiny-1-0 LLMGW_REPLICA=tiny-1 LLMGW_MODEL=tiny \
LLMGW_LINEAGE=5b0c-ours CUDA_VISIBLE_DEVICES=2,3
Id=llmgw-tiny-1-0.service
MemoryCurrent=5368709120

Environment=HOME=/var/lib/llmgw LLMGW_UNIT=llmgw-tiny-7-0 LLMGW_REPLICA=tiny-7 LLMGW_MODEL=tiny
Id=llmgw-tiny-7-0.service
MemoryCurrent=[not set]
"""


def fake_systemctl(calls: list[list[str]]):  # type: ignore[no-untyped-def]
    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        if argv[1] == "list-units":
            return 0, LIST_UNITS, ""
        if argv[1] == "list-unit-files":
            return 0, "", ""
        if argv[1] == "show":
            return 0, SHOW, ""
        return 1, "", "unexpected"

    return run


def test_each_shard_unit_reports_its_lineage_in_one_call() -> None:
    calls: list[list[str]] = []
    found, reason = units.llmgw_units(fake_systemctl(calls))
    assert reason is None
    assert {u["name"]: u["lineage"] for u in found} == {
        "llmgw-router.service": None, "llmgw-tiny-1-0.service": "5b0c-ours", "llmgw-tiny-7-0.service": None}
    shows = [c for c in calls if c[1] == "show"]
    assert len(shows) == 1 and "llmgw-router.service" not in shows[0]


def test_systemctl_show_failing_leaves_lineage_unknown() -> None:
    def run(argv: list[str]) -> tuple[int, str, str]:
        if argv[1] == "list-units":
            return 0, LIST_UNITS, ""
        return 1, "", "Failed to connect to bus"

    found, _ = units.llmgw_units(run)
    assert all(u["lineage"] is None for u in found)


def test_each_shard_unit_reports_its_gpus_and_memory_when_systemd_knows_them() -> None:
    """What another lineage's planner reserves (llmgw.planner.reconcile): the unit's GPUs and memory."""
    found, _ = units.llmgw_units(fake_systemctl([]))
    shown = {u["name"]: (u.get("gpus"), u.get("memory_mb")) for u in found}
    assert shown == {"llmgw-router.service": (None, None), "llmgw-tiny-1-0.service": ([2, 3], 5120),
                     "llmgw-tiny-7-0.service": (None, None)}
    assert units._gpu_list("GPU-5f1c,GPU-77aa") is None  # UUIDs name no index: not guessed
    assert units._mib(str(2**64 - 1)) is None  # systemd's "not accounted"
