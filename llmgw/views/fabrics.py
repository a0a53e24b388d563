"""Fabrics on the bastion: the dashboard's fabric views answered live from the parsed
fabrics (`LiveFabrics`), one fabric laid out for drawing (`fabric_drawing`), and the files
apply ships them to the routers in (`fabric_copy_files`, llmgw.views.fabric_copy).

The layout is computed here, in Python, so the page is plain server-rendered SVG: switches
in rows by tier (core on top, leaves at the bottom), each leaf's adapters fanned out under
it (grouped by host), every cable a line of its own (parallel cables side by side), its
colour by trained rate, degraded ones red. Adapters are coloured by rail (`mlx5_0`,
`mlx5_1`...): under a rail-aligned leaf every adapter has one colour. It is computed at
apply, on the bastion, where the fabrics are parsed: a router's dashboard draws the layout
it was shipped and imports no module of llmgw.fabric (#34).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

from llmgw.fabric import End, Fabric, FabricIndex, Link
from llmgw.fabric.structure import TIER_ORDER, hexguid, natural_key
from llmgw.views.fabric_copy import (
    FABRICS_FILE,
    FabricPage,
    FabricRow,
    FabricsCopy,
    RowGlance,
    Summary,
    fabric_file,
    host_adapters,
)
from llmgw.views.sitedata import SiteData

# Eight rail colours that stay apart for most colour vision (Okabe-Ito, darkened yellow).
RAIL_COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#8c7a00", "#555555")
# Cable colours from the fastest rate down; degraded cables are always red.
RATE_COLOURS = ("#2b6cb0", "#2f855a", "#b7791f", "#6b46c1", "#718096")
DEGRADED = "#e02424"

SWITCH_W, SWITCH_H = 132, 34
AD_W, AD_H, AD_GAP, HOST_GAP, LEAF_GAP = 14, 22, 4, 10, 36
ROW_GAP, MARGIN, LABEL_ROOM = 130, 30, 120
GUTTER = 110  # left of the drawing: the tier labels


class LiveFabrics:
    """The bastion's answers to the fabric views (llmgw.views.fabric_copy.FabricViews), from
    the fabrics parsed here."""

    def __init__(self, index: FabricIndex) -> None:
        self.index = index

    def rows(self) -> list[dict[str, Any]]:
        return [{"id": fid, "source": f.source, "summary": f.summary(), "hosts": list(f.hosts)}
                for fid, f in self.index.fabrics.items()]

    def find(self, ref: str) -> str:
        return self.index.find(ref).id

    def topology(self, fabric_id: str) -> dict[str, Any]:
        return self.index.fabrics[fabric_id].to_json()

    def drawing(self, fabric_id: str) -> dict[str, Any]:
        return fabric_drawing(self.index.fabrics[fabric_id])

    def adapters(self, host: str) -> list[dict[str, Any]]:
        return [a for fid in self.index.fabrics_of(host)
                for a in host_adapters(fid, {"hosts": [{"host": h, "adapters": [ad.to_json() for ad in ads]}
                                                       for h, ads in self.index.fabrics[fid].hosts.items()]}, host)]


def fabric_copy_files(data: SiteData) -> dict[str, bytes]:
    """What a router's dashboard shows of the fabrics, made here for apply to ship (file name ->
    bytes): `fabrics.json` and each fabric's page file (llmgw.views.fabric_copy)."""
    fabrics, fmap = data.fabrics, data.fabric_map
    out: dict[str, bytes] = {}
    rows = []
    for row in fabrics.rows():
        fid = row["id"]
        # Not validated here (a second or so per large fabric at every apply): made by this
        # code, and validated where it is input, on the router (tests/views/test_fabric_copy.py
        # reads back what this writes).
        fields: dict[str, Any] = {"id": fid, "topology": fabrics.topology(fid), "drawing": fabrics.drawing(fid)}
        page = FabricPage.model_construct(**fields).to_json()
        out[fabric_file(fid)] = page
        glance = fmap.glances[fid]
        rows.append(FabricRow(id=fid, source=row["source"], summary=Summary.model_validate(row["summary"]),
                              glance=RowGlance(switches=glance.switches, degraded_links=glance.degraded_links,
                                               rails=glance.rails),
                              hosts=tuple(row["hosts"]), sha256=hashlib.sha256(page).hexdigest()))
    nodes = {n: tuple(ids) for n in sorted(data.inventory.nodes) if (ids := fmap.fabrics_of(n))}
    out[FABRICS_FILE] = FabricsCopy(fabrics=tuple(rows), nodes=nodes, notes=data.fabric_notes).to_json().encode()
    return out


@lru_cache(maxsize=1 << 16)
def _switch_key(guid: int) -> str:
    """A switch's key: the same few thousand per fabric, on every one of its cables."""
    return f"sw-{hexguid(guid)}"


def _end_key(end: End) -> str | None:
    if end.kind == "switch" and end.guid is not None:
        return _switch_key(end.guid)
    if end.host is not None and end.ca is not None:
        return f"ca-{end.host}-{end.ca}-{end.port}"
    if end.guid is not None:
        return f"ep-{hexguid(end.guid)}-{end.port}"
    return None


def short_switch_name(name: str) -> str:
    """`MF0;leaf-01:MQM8790/U1` -> `leaf-01`: the part an operator names a switch by."""
    text = name.split(";", 1)[1] if ";" in name else name
    return text.split(":", 1)[0] or name


def switch_width(name: str) -> float:
    """Room for the switch's short name in 12px bold, and never narrower than SWITCH_W."""
    return max(float(SWITCH_W), 7.6 * len(short_switch_name(name)) + 20)


def fabric_drawing(fabric: Fabric) -> dict[str, Any]:
    """Positions of every switch, adapter and cable of `fabric`, for an SVG.

    A cable carries its two ends' keys and ports, not its text: the page names the ends
    (`name`, as `End.label` does) when a cable is hovered. Its 98,000 titles, at 4,096
    hosts, were a fifth of the page's bytes and of the time to write it."""
    rates = sorted({link.rate for link in fabric.links if not link.degraded}, key=lambda r: (-(r.gbps or 0.0), str(r)))
    rate_colour = {str(r): RATE_COLOURS[min(i, len(RATE_COLOURS) - 1)] for i, r in enumerate(rates)}
    rails = sorted({a.rail for ads in fabric.hosts.values() for a in ads}, key=natural_key)
    rail_colour = {r: RAIL_COLOURS[i % len(RAIL_COLOURS)] for i, r in enumerate(rails)}

    by_tier: dict[str, list[Any]] = {}
    for s in fabric.switches:
        by_tier.setdefault(s.tier or "unreached", []).append(s)
    for ss in by_tier.values():
        ss.sort(key=lambda s: (natural_key(short_switch_name(s.name)), s.guid))
    tiers = [t for t in ("unreached", *reversed(TIER_ORDER)) if t in by_tier]

    # Adapters, and endpoints that belong to no host, grouped under the switch they are cabled to.
    under: dict[int | None, list[dict[str, Any]]] = {}
    hosts = sorted(fabric.hosts, key=natural_key)
    for host in hosts:
        for ad in fabric.hosts[host]:
            under.setdefault(ad.switch_guid, []).append({
                "key": f"ca-{host}-{ad.ca}-{ad.port}", "kind": "adapter", "host": host, "ca": ad.ca, "port": ad.port,
                "rail": ad.rail, "colour": rail_colour[ad.rail], "degraded": ad.degraded, "rate": str(ad.rate),
                "expected": None if ad.expected is None else str(ad.expected),
                "switch": ad.switch, "switch_port": ad.switch_port, "guid": hexguid(ad.guid),
                "port_guid": hexguid(ad.port_guid), "lid": ad.lid, "label": f"{host} {ad.ca}"})
    for e in fabric.endpoints:
        under.setdefault(e.peer.guid, []).append({
            "key": _end_key(e.end), "kind": "endpoint", "host": None, "ca": None, "port": e.end.port, "rail": None,
            "colour": "#a0aec0", "degraded": False, "rate": None, "expected": None, "switch": e.peer.name,
            "switch_port": e.peer.port, "guid": hexguid(e.end.guid), "port_guid": None, "lid": None,
            "label": e.end.name})

    y_of = {t: MARGIN + 20 + i * ROW_GAP for i, t in enumerate(tiers)}
    bottom_row_y = y_of[tiers[-1]] if tiers else MARGIN
    ad_y = bottom_row_y + ROW_GAP
    nodes: list[dict[str, Any]] = []
    adapters: list[dict[str, Any]] = []
    pos: dict[str, tuple[float, float, float, float]] = {}  # key -> x, y, w, h

    # The lowest row of switches gets the adapters; its width sets the drawing's.
    x = float(GUTTER)
    low = by_tier.get(tiers[-1], []) if tiers else []
    for s in low:
        group = under.get(s.guid, [])
        span = 0.0
        prev_host: str | None = None
        xs = []
        for a in group:
            if prev_host is not None and a["host"] != prev_host:
                span += HOST_GAP
            xs.append(span)
            span += AD_W + AD_GAP
            prev_host = a["host"]
        span = max(span - AD_GAP, 0.0)
        sw = switch_width(s.name)
        width = max(sw, span)
        pos[_switch_key(s.guid)] = (x + (width - sw) / 2, y_of[tiers[-1]], sw, SWITCH_H)
        ax0 = x + (width - span) / 2
        for a, dx in zip(group, xs, strict=True):  # each adapter is placed once: its dict takes the place
            a["x"], a["y"], a["w"], a["h"] = pos[a["key"]] = (ax0 + dx, ad_y, AD_W, AD_H)
            adapters.append(a)
        x += width + LEAF_GAP
    drawn_under = {s.guid for s in low}  # once, not once per group (1,640 groups at 4,096 hosts)
    orphans = [a for g, ads in under.items() if g not in drawn_under for a in ads]
    for a in orphans:
        a["x"], a["y"], a["w"], a["h"] = pos[a["key"]] = (x, ad_y, AD_W, AD_H)
        adapters.append(a)
        x += AD_W + AD_GAP
    width = max(x - LEAF_GAP + MARGIN, GUTTER + MARGIN + SWITCH_W)
    for t in tiers[:-1]:  # upper rows: spread evenly over the width, wide enough for every name
        row = by_tier[t]
        widths = [switch_width(s.name) for s in row]
        width = max(width, GUTTER + MARGIN + sum(widths) + LEAF_GAP * (len(row) - 1))
    for t in tiers[:-1]:
        row = by_tier[t]
        step = (width - GUTTER - MARGIN) / len(row)
        for i, s in enumerate(row):
            sw = switch_width(s.name)
            pos[_switch_key(s.guid)] = (GUTTER + step * (i + 0.5) - sw / 2, y_of[t], sw, SWITCH_H)
    for t in tiers:
        for s in by_tier[t]:
            key = _switch_key(s.guid)
            sx, sy, sw, sh = pos[key]
            nodes.append({"key": key, "name": s.name, "short": short_switch_name(s.name), "tier": t,
                          "guid": hexguid(s.guid), "hops": s.hops, "lid": s.lid, "ports": s.ports,
                          "x": sx, "y": sy, "w": sw, "h": sh})

    # Cables: parallel ones between the same two elements spread side by side.
    drawn: list[dict[str, Any]] = []
    missing = 0
    pairs: dict[tuple[str, str], list[Link]] = {}
    # A fabric has a few rates and 100,000 cables: each rate is written once, looked up by the
    # object's id (the parser shares one per distinct rate; a Rate's own hash is Python code).
    rate_text: dict[int, str] = {}
    for link in fabric.links:
        ka, kb = _end_key(link.a), _end_key(link.b)
        if ka is None or kb is None or ka not in pos or kb not in pos:
            missing += 1
            continue
        pairs.setdefault((ka, kb), []).append(link)
    names: dict[str, str] = {}  # each element's name as its cables' ends give it: the description
    for (ka, kb), links in pairs.items():
        names[ka], names[kb] = links[0].a.name, links[0].b.name
        ax, ay, aw, ah = pos[ka]
        bx, by, bw, bh = pos[kb]
        lower, upper = ((ax, ay, aw, ah), (bx, by, bw, bh)) if ay >= by else ((bx, by, bw, bh), (ax, ay, aw, ah))
        n = len(links)
        if n > 1:
            links.sort(key=lambda lk: (lk.a.port, lk.b.port))
        for i, link in enumerate(links):
            off = (i - (n - 1) / 2) * 6
            rate = rate_text.get(id(link.rate))
            if rate is None:
                rate = rate_text[id(link.rate)] = str(link.rate)
            expected = rate_text.get(id(link.expected))
            if expected is None and link.expected is not None:
                expected = rate_text[id(link.expected)] = str(link.expected)
            degraded = link.degraded
            drawn.append({
                "a": ka, "b": kb, "kind": link.kind, "rate": rate, "expected": expected, "degraded": degraded,
                "colour": DEGRADED if degraded else rate_colour.get(rate, RATE_COLOURS[-1]),
                "x1": lower[0] + lower[2] / 2 + off, "y1": lower[1],
                "x2": upper[0] + upper[2] / 2 + off, "y2": upper[1] + upper[3],
                "ports": (link.a.port, link.b.port)})
    for a in adapters:  # what a cable's tooltip names its ends by (`End.label`)
        a["name"] = names.get(a["key"], a["label"])
    height = ad_y + AD_H + LABEL_ROOM + MARGIN if adapters else bottom_row_y + SWITCH_H + MARGIN
    return {
        "width": round(width), "height": round(height),
        "tiers": [{"tier": t, "y": y_of[t], "label_y": y_of[t] + SWITCH_H / 2 + 4, "count": len(by_tier[t])}
                  for t in tiers],
        "adapter_label_y": ad_y + AD_H / 2 + 4,
        "adapter_row_y": ad_y,
        "switches": nodes, "adapters": adapters, "links": drawn, "links_not_drawn": missing,
        "hosts": hosts,  # what the page's find offers
        "rates": [{"rate": r, "colour": c} for r, c in rate_colour.items()],
        "rails": [{"rail": r, "colour": c} for r, c in rail_colour.items()],
        "degraded_colour": DEGRADED,
    }
