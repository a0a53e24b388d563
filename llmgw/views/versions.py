"""The host stack of a node in one short text, and the fleet's versions counted.

`stack_text` is the version column of `llmgw nodes` and the dashboard's nodes page:
"570.133.20/12.8 rdma 50.0-2 fm active" (NVIDIA driver / the CUDA it supports, then
rdma-core or, where installed, MLNX_OFED, then the fabric manager's state where it has
one). `fleet_versions` counts hosts per driver, CUDA, rdma-core and OFED version; a host
that reported no version is counted apart as unknown (its facts do not say whether the
software is absent or could not be read, and unknown is not none).

The versions come from gathered facts, so they are data from the hosts: the driver's is
any string NVML returned. `shown` keeps one printable and short, so a hostile or broken
version cannot break a table line or the terminal; the JSON keeps the value as reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmgw.stack import version_tuple

UNKNOWN = "-"
SHOWN_MAX = 40  # longer versions are cut with "..." in the column (real ones are under 20 characters)
# The record field -> the name of its count in the fleet summary, in the order shown.
SUMMARY_FIELDS = (("gpu_driver", "driver"), ("cuda_version", "cuda"), ("rdma_core", "rdma_core"), ("ofed", "ofed"))
SUMMARY_LABELS = {"driver": "NVIDIA driver", "cuda": "CUDA", "rdma_core": "rdma-core", "ofed": "MLNX_OFED"}


def shown(version: str) -> str:
    """`version` fit for one table cell: non-printable characters and spaces as `?`, cut at SHOWN_MAX."""
    text = "".join(c if c.isprintable() and not c.isspace() else "?" for c in version) or "?"
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX - 3] + "..."


def stack_text(rec: dict[str, Any]) -> str:
    """A node record's (llmgw.views.nodes) host stack in short; `-` when it reported none of it."""
    parts: list[str] = []
    driver, cuda = rec.get("gpu_driver"), rec.get("cuda_version")
    if driver is not None:
        parts.append(shown(driver) + (f"/{shown(cuda)}" if cuda is not None else ""))
    # MLNX_OFED's version names its rdma-core too ("2404mlnx51"); the OFED release is what operators match.
    if rec.get("ofed") is not None:
        parts.append(f"ofed {shown(rec['ofed'])}")
    elif rec.get("rdma_core") is not None:
        parts.append(f"rdma {shown(rec['rdma_core'])}")
    fm = rec.get("fabric_manager")
    if fm is not None and fm != "not installed":  # not installed: a PCIe host, the usual case; no noise
        parts.append(f"fm {fm}")
    return " ".join(parts) or UNKNOWN


def _order(item: tuple[str, int]) -> tuple[int, tuple[int, ...], str]:
    """Most hosts first; among equal counts the newest version first, then by text (non-numeric last)."""
    version, count = item
    numbers = version_tuple(version) or ()
    return (-count, (*(-n for n in numbers), 1), version)


def fleet_versions(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per summary name (driver, cuda, rdma_core, ofed):
    `{"label", "versions": [{"version", "hosts"}], "unknown": hosts}`.

    `versions` is a list, ordered as `_order` says (a JSON object's keys get sorted on
    output); every record counts once per field, so each field's versions plus its unknown
    add up to the number of records.
    """
    counts: dict[str, dict[str, int]] = {name: {} for _, name in SUMMARY_FIELDS}
    unknown = dict.fromkeys(counts, 0)
    for rec in records:
        for field, name in SUMMARY_FIELDS:
            v = rec.get(field)
            if v is None or not v.strip():
                unknown[name] += 1
            else:
                counts[name][v] = counts[name].get(v, 0) + 1
    return {name: {"label": SUMMARY_LABELS[name],
                   "versions": [{"version": v, "hosts": n} for v, n in sorted(counts[name].items(), key=_order)],
                   "unknown": unknown[name]}
            for name in counts}


def summary_lines(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One line per field with any known version: "NVIDIA driver: 570.133.20 on 1 host, ..., unknown on 18 hosts"."""
    def hosts(n: int) -> str:
        return f"{n} host{'s' if n != 1 else ''}"

    if not any(entry["versions"] for entry in summary.values()):
        return []  # no host reported any: lines of only "unknown" say nothing the column does not
    lines = []
    for entry in summary.values():
        items = [f"{shown(e['version'])} on {hosts(e['hosts'])}" for e in entry["versions"]]
        if entry["unknown"]:
            items.append(f"unknown on {hosts(entry['unknown'])}")
        lines.append(f"{entry['label']}: " + ", ".join(items))
    return lines
