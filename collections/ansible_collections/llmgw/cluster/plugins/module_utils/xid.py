# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""NVIDIA Xid errors: what each number means, and the `NVRM: Xid` lines of the kernel log.

Pure Python, no Ansible import, so `module_utils/gpu.py`, the unit tests and
`scripts/device-check` share it. The driver writes one line per Xid to the kernel log:

    NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.

The PCI address (domain:bus:device) names the GPU; NVML's PCI bus id of each GPU maps it.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import Run

# Xids that mean the GPU is broken until a reset, a reboot or service: each keeps the GPU
# out of placement. Meanings and actions after NVIDIA's Xid catalog
# (docs.nvidia.com/deploy/xid-errors). Numbers are the driver's ABI: fixed across versions.
FATAL: Dict[int, Tuple[str, str]] = {
    48: ("double-bit ECC error", "reset the GPU; if it recurs the GPU needs service"),
    61: ("internal micro-controller breakpoint", "reset the GPU"),
    62: ("internal micro-controller halt", "reset the GPU"),
    64: ("ECC page retirement or row remapping failure", "the GPU needs service"),
    74: ("NVLink error", "reset the GPU and check its NVLink connections"),
    79: ("GPU has fallen off the bus", "reboot the host and check the GPU's seating and power"),
    94: ("contained ECC error", "reset the GPU to remap the failed row"),
    95: ("uncontained ECC error", "reset the GPU; if it recurs the GPU needs service"),
    119: ("GSP RPC timeout", "reset the GPU"),
    120: ("GSP error", "reset the GPU"),
    140: ("unrecovered ECC error", "reset the GPU; if it recurs the GPU needs service"),
    154: ("GPU recovery action needed", "do the recovery action the driver asks for"),
}
# Xids an application or a passing event causes: reported as notes, the GPU stays placeable.
NOTED: Dict[int, str] = {
    13: "graphics engine exception (usually the application's fault)",
    31: "GPU memory page fault (usually the application's fault)",
    43: "GPU stopped processing (the application was stopped)",
    45: "preemptive cleanup after an earlier error",
    63: "ECC page retirement or row remapping recorded",
    92: "high single-bit ECC error rate",
}

XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})"
    r"(?:\.[0-9a-fA-F])?\): (?P<xid>[0-9]{1,4}),\s*(?P<text>.*)$")
# The time a line starts with: journalctl -o short-iso (2026-11-30T04:12:09+0000 or +00:00),
# dmesg --time-format iso (2026-11-30T04:12:09,123456+00:00), or plain dmesg ([  12.345678]).
_ISO = re.compile(r"^(?P<t>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.]\d+)?(?P<z>Z|[+-]\d{2}:?\d{2})?\s")
_UPTIME = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]\s")
# Xid 154 names the new action: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
_ACTION = re.compile(r"to 0x(?P<code>[0-9a-fA-F]+) \((?P<name>[^)]*)\)")

# Where the kernel log is read, in order: the journal of this boot, then the ring buffer.
SOURCES: Tuple[Tuple[str, List[str]], ...] = (
    ("journalctl", ["journalctl", "-k", "-b", "0", "-o", "short-iso", "--no-pager", "-q"]),
    ("dmesg", ["dmesg", "--time-format", "iso"]),
    ("dmesg", ["dmesg"]),
)


class Xid(NamedTuple):
    pci: str  # "0000:3b:00", as pci_key() makes it
    xid: int
    text: str  # the driver's words after the number
    time: Optional[str]  # ISO time, "12.3 s after boot", or None


def pci_key(domain: int, bus: int, device: int) -> str:
    """The form both NVML's bus id and the kernel log's address are compared in."""
    return "%04x:%02x:%02x" % (domain, bus, device)


def pci_key_of_bus_id(bus_id: str) -> Optional[str]:
    """NVML's `00000000:3B:00.0` (or the legacy `0000:3B:00.0`) -> `0000:3b:00`."""
    m = re.match(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?$", bus_id.strip())
    if not m:
        return None
    return pci_key(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16))


def _time(line: str) -> Optional[str]:
    m = _ISO.match(line)
    if m:
        zone = m.group("z") or ""
        if zone and zone != "Z" and ":" not in zone:
            zone = zone[:3] + ":" + zone[3:]
        return m.group("t") + zone
    m = _UPTIME.match(line)
    if m:
        return "%.1f s after boot" % float(m.group("s"))
    return None


def parse_kernel_log(text: str) -> List[Xid]:
    """Every `NVRM: Xid` line of a kernel log, in order."""
    found: List[Xid] = []
    for line in text.splitlines():
        m = XID_LINE.search(line)
        if not m:
            continue
        found.append(Xid(pci_key(int(m.group("domain"), 16), int(m.group("bus"), 16), int(m.group("device"), 16)),
                         int(m.group("xid")), m.group("text").strip(), _time(line)))
    return found


def read_kernel_log(run: Run) -> Tuple[Optional[str], str, Optional[str]]:
    """(text, source, reason): the kernel log since boot, from the first source that gives one.

    A readable log of the running boot is never empty (the kernel's own boot lines are in
    it), so an empty answer - journalctl's when the journal is not kept or not readable -
    counts as unreadable and the next source is tried. None with the reasons when none gave one.
    """
    reasons: List[str] = []
    for name, argv in SOURCES:
        try:
            rc, out, err = run(argv)
        except OSError as exc:
            reasons.append("%s: %s" % (argv[0], exc))
            continue
        if rc == 0 and any(ln.strip() and not ln.startswith("-- ") for ln in out.splitlines()):
            return out, name, None  # journalctl's "-- No entries --" is no log
        words = (err.strip().splitlines() or ["no lines" if rc == 0 else "exit %d" % rc])[-1]
        reasons.append("`%s`: %s" % (" ".join(argv), words))
    return None, "", "; ".join(reasons)


def describe(xid: int) -> str:
    if xid in FATAL:
        return FATAL[xid][0]
    return NOTED.get(xid, "see NVIDIA's Xid catalog")


def sentences(index: int, events: List[Xid], where: str) -> Tuple[List[str], List[str]]:
    """(problems, notes) for one GPU's Xids: one sentence per Xid number, with the count and
    the last time. Xid 154 is a problem only while its last report names an action other
    than none; NVML's recovery-action field, where the driver has it, is read separately."""
    by_xid: Dict[int, List[Xid]] = {}
    for e in events:
        by_xid.setdefault(e.xid, []).append(e)
    problems: List[str] = []
    notes: List[str] = []
    for number in sorted(by_xid):
        seen = by_xid[number]
        last = seen[-1]
        when = ("at %s" % last.time) if last.time else "(time not known)"
        times = "" if len(seen) == 1 else ", %d times, the last" % len(seen)
        head = "GPU %d reported Xid %d (%s) in the %s%s %s: %s" % (
            index, number, describe(number), where, times, when, last.text.rstrip("."))
        if number == 154:
            action = _ACTION.search(last.text)
            if action and int(action.group("code"), 16) == 0:
                notes.append(head + " (the action since cleared)")
                continue
        if number in FATAL:
            problems.append("%s; %s" % (head, FATAL[number][1]))
        else:
            notes.append(head)
    return problems, notes
