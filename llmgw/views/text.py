"""Small formatting rules shared by the terminal and the browser, so both say the same."""

from __future__ import annotations

from datetime import datetime

UNKNOWN = "?"  # the routers were not asked or did not answer: not known
NEVER = "-"  # known: never used


def iso(ts: datetime) -> str:
    """ISO 8601 as the facts files write it (UTC as Z)."""
    return ts.isoformat().replace("+00:00", "Z")


def duration(seconds: float | None) -> str:
    """`42s`, `5m`, `3h12m`, `4d2h`: two units at most, as an operator reads an age."""
    if seconds is None:
        return UNKNOWN
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m" if m else f"{h}h"
    d, h = divmod(h, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}" if value < 10 and unit != "B" else f"{value:.0f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def bar_cells(parts: list[tuple[str, int]], width: int) -> list[tuple[str, int]]:
    """Split `width` cells among (kind, count) parts in proportion, every non-zero part at
    least one cell, the cells adding up to `width` exactly (largest remainders first)."""
    total = sum(n for _, n in parts)
    if total <= 0:
        return [("empty", width)]
    exact = [(k, n * width / total) for k, n in parts]
    cells = [(k, max(1, int(x)) if n else 0) for (k, x), (_, n) in zip(exact, parts, strict=True)]
    short = width - sum(c for _, c in cells)
    order = sorted(range(len(parts)), key=lambda i: (-(exact[i][1] - int(exact[i][1])), i))
    while short != 0:
        before = short
        for i in order if short > 0 else reversed(order):
            k, c = cells[i]
            if short > 0 and parts[i][1]:
                cells[i] = (k, c + 1)
                short -= 1
            elif short < 0 and c > 1:
                cells[i] = (k, c - 1)
                short += 1
            if short == 0:
                break
        if short == before:  # too narrow to give every part a cell
            break
    return cells


def percent(part: int, whole: int) -> float:
    return 0.0 if whole <= 0 else round(100.0 * part / whole, 1)
