"""Link widths and speeds as ibnetdiscover prints them, and how fast each one is.

A cable is judged by its *active* rate (width x speed, e.g. `4xHDR`), compared with the
rate its peers trained at, so every rate must be comparable: the table below holds the
usable data rate per lane after line encoding. ibnetdiscover prints `??` / `???` for a
width or speed it cannot name; such a rate is kept, printed, and never judged.
"""

from __future__ import annotations

from dataclasses import dataclass

# Lanes per width code, in the spelling infiniband-diags uses.
WIDTH_LANES: dict[str, int] = {"1x": 1, "2x": 2, "4x": 4, "8x": 8, "12x": 12}
# Data rate per lane in Gb/s (after 8b/10b or 64b/66b encoding): what a job can use.
SPEED_GBPS: dict[str, float] = {
    "SDR": 2.0, "DDR": 4.0, "QDR": 8.0, "FDR10": 10.0, "FDR": 13.64,
    "EDR": 25.0, "HDR": 50.0, "NDR": 100.0, "XDR": 200.0,
}
UNKNOWN_WIDTH = "??"
UNKNOWN_SPEED = "???"

WIDTHS = (*WIDTH_LANES, UNKNOWN_WIDTH)
# Longest first, so `FDR10` is never read as `FDR` followed by junk.
SPEEDS = (*sorted(SPEED_GBPS, key=len, reverse=True), UNKNOWN_SPEED)


@dataclass(frozen=True, order=True, slots=True)
class Rate:
    """An active link rate: `Rate("4x", "HDR")` prints as `4xHDR`."""

    width: str
    speed: str

    def __str__(self) -> str:
        return f"{self.width}{self.speed}"

    @property
    def known(self) -> bool:
        return self.width in WIDTH_LANES and self.speed in SPEED_GBPS

    @property
    def gbps(self) -> float | None:
        """Usable Gb/s of the whole link; None when either half is unknown."""
        if not self.known:
            return None
        return WIDTH_LANES[self.width] * SPEED_GBPS[self.speed]


def slower(a: Rate, b: Rate) -> Rate:
    """The rate a cable really carries when its two ends report different ones."""
    ga, gb = a.gbps, b.gbps
    if ga is None:
        return a
    if gb is None:
        return b
    return a if ga <= gb else b
