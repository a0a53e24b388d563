"""The fabric page's SVG elements (cables, switches, adapters) and the details its script
shows, written in Python.

A 4,096-host fabric with 8 rails draws some 98,000 cables, 33,000 adapters and 3,700
switches. Written by the template's loops (a dozen escaped, filtered expressions each) that
took 12 of the page's 14 s; the same markup from f-strings takes a fraction of it. Every
value goes through markupsafe's `escape`, as the template's autoescaping did, but each
distinct value once: a cable repeats its ends' keys (each switch's on dozens of cables),
and its rate, kind and colour are a handful of values on 100,000 elements. Numbers are
written with one decimal by the format itself, not by a `round` call per number.
"""

from __future__ import annotations

from typing import Any

from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup, escape

# What the page's script shows of a switch or an adapter when it is clicked or found.
SWITCH_FIELDS = ("key", "name", "short", "tier", "guid", "hops", "lid", "ports")
ADAPTER_FIELDS = ("key", "name", "host", "ca", "port", "rail", "degraded", "rate", "expected", "switch", "switch_port",
                  "guid", "port_guid", "lid", "label")


class _Escaped(dict[Any, str]):
    """Each value's escaped text, made the first time it is asked for."""

    def __missing__(self, value: Any) -> str:
        text = self[value] = str(escape(value))
        return text


def cables(drawing: dict[str, Any]) -> Markup:
    esc = _Escaped()
    return Markup("".join([  # every value in an element is escaped
        f'<line class="el cable{" degraded" if c["degraded"] else ""}" data-a="{esc[c["a"]]}" '
        f'data-b="{esc[c["b"]]}" data-p="{c["ports"][0]:d} {c["ports"][1]:d}" data-rate="{esc[c["rate"]]}" '
        f'data-kind="{esc[c["kind"]]}"{_expected(c) if c["degraded"] else ""} '
        f'x1="{c["x1"]:.1f}" y1="{c["y1"]:.1f}" x2="{c["x2"]:.1f}" y2="{c["y2"]:.1f}" '
        f'stroke="{esc[c["colour"]]}"></line>\n'
        for c in drawing["links"]]))


def _expected(cable: dict[str, Any]) -> str:
    """A degraded cable's expected rate, for its tooltip."""
    return f' data-expected="{escape(cable["expected"])}"'


def details(drawing: dict[str, Any]) -> Markup:
    """The switches' and adapters' details as JSON for a `<script>`: each a row under its
    table's field names, not an object repeating them. At 4,096 hosts the objects, with the
    drawing's positions the script never reads, were 14 MB of a 58 MB page."""
    return htmlsafe_json_dumps({
        "switches": {"fields": SWITCH_FIELDS, "rows": [[s[f] for f in SWITCH_FIELDS] for s in drawing["switches"]]},
        "adapters": {"fields": ADAPTER_FIELDS, "rows": [[a[f] for f in ADAPTER_FIELDS] for a in drawing["adapters"]]}})


def switches(drawing: dict[str, Any]) -> Markup:
    return Markup("".join(map(_switch, drawing["switches"])))


def adapters(drawing: dict[str, Any]) -> Markup:
    esc = _Escaped()
    return Markup("".join([_adapter(a, esc) for a in drawing["adapters"]]))


def _switch(s: dict[str, Any]) -> str:
    tier, name = escape(s["tier"]), escape(s["name"])
    return (f'<g class="el node switch tier-{tier}" data-key="{escape(s["key"])}" data-tier="{tier}" '
            f'data-name="{name}" tabindex="0">\n'
            f'    <rect x="{s["x"]:.1f}" y="{s["y"]:.1f}" width="{escape(s["w"])}" height="{escape(s["h"])}" '
            f'rx="5"></rect>\n'
            f'    <text x="{s["x"] + s["w"] / 2:.1f}" y="{s["y"] + s["h"] / 2 + 4:.1f}">{escape(s["short"])}</text>\n'
            f'    <title>{name} ({tier}, {escape(s["guid"])})</title>\n'
            f'  </g>\n')


def _adapter(a: dict[str, Any], esc: _Escaped) -> str:
    """An adapter, or an endpoint of no host, with its label. Its tooltip is the page's to
    make on hover, from the details, as a cable's is."""
    return (f'<g class="el node adapter{" degraded" if a["degraded"] else ""}'
            f'{" endpoint" if a["kind"] == "endpoint" else ""}" data-key="{escape(a["key"])}" '
            f'data-host="{esc[a["host"] or ""]}" data-rail="{esc[a["rail"] or ""]}" tabindex="0">'
            f'<rect x="{a["x"]:.1f}" y="{a["y"]:.1f}" width="{esc[a["w"]]}" height="{esc[a["h"]]}" rx="2" '
            f'fill="{esc[a["colour"]]}"></rect>'
            f'<text class="ad-label" transform="translate({a["x"] + a["w"] / 2 + 3.5:.1f} '
            f'{a["y"] + a["h"] + 6:.1f}) rotate(90)">{escape(a["label"])}</text></g>\n')
