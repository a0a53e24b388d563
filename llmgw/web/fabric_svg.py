"""The fabric page's SVG elements (cables, switches, adapters), written in Python.

A 4,096-host fabric with 8 rails draws some 98,000 cables, 33,000 adapters and 3,700
switches. Written by the template's loops (a dozen escaped, filtered expressions each) that
took 12 of the page's 14 s; the same markup from f-strings takes a fraction of it. Every
value goes through markupsafe's `escape`, as the template's autoescaping did, and numbers
are rounded as Jinja's `round(1)` filter rounds them (Python's `round`), so the page is the
same bytes it was.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from markupsafe import Markup, escape

# Kinds, rates, colours, rails, sizes: a handful of values on 100,000 elements, escaped once each.
_same = lru_cache(maxsize=256)(escape)


def _r(value: float) -> float:
    return round(value, 1)


def _markup(items: list[dict[str, Any]], element: Callable[[dict[str, Any]], str]) -> Markup:
    return Markup("".join(map(element, items)))  # every value in an element is escaped


def cables(drawing: dict[str, Any]) -> Markup:
    return _markup(drawing["links"], _cable)


def switches(drawing: dict[str, Any]) -> Markup:
    return _markup(drawing["switches"], _switch)


def adapters(drawing: dict[str, Any]) -> Markup:
    return _markup(drawing["adapters"], _adapter)


def _cable(c: dict[str, Any]) -> str:
    return (f'<line class="el cable{" degraded" if c["degraded"] else ""}" data-a="{escape(c["a"])}" '
            f'data-b="{escape(c["b"])}" data-rate="{_same(c["rate"])}" data-kind="{_same(c["kind"])}" '
            f'data-degraded="{"true" if c["degraded"] else "false"}"\n'
            f'      x1="{_r(c["x1"])}" y1="{_r(c["y1"])}" x2="{_r(c["x2"])}" y2="{_r(c["y2"])}" '
            f'stroke="{_same(c["colour"])}"><title>{escape(c["title"])}</title></line>\n')


def _switch(s: dict[str, Any]) -> str:
    tier, name = escape(s["tier"]), escape(s["name"])
    return (f'<g class="el node switch tier-{tier}" data-key="{escape(s["key"])}" data-tier="{tier}" '
            f'data-name="{name}" tabindex="0">\n'
            f'    <rect x="{_r(s["x"])}" y="{_r(s["y"])}" width="{escape(s["w"])}" height="{escape(s["h"])}" '
            f'rx="5"></rect>\n'
            f'    <text x="{_r(s["x"] + s["w"] / 2)}" y="{_r(s["y"] + s["h"] / 2 + 4)}">{escape(s["short"])}</text>\n'
            f'    <title>{name} ({tier}, {escape(s["guid"])})</title>\n'
            f'  </g>\n')


def _adapter(a: dict[str, Any]) -> str:
    label = escape(a["label"])
    title = (f'{label} port {_same(a["port"])}'
             + (f', rail {_same(a["rail"])}' if a["rail"] else "")
             + (f', {_same(a["rate"])}' if a["rate"] else "")
             + (f' (degraded, expected {escape(a["expected"])})' if a["degraded"] else ""))
    return (f'<g class="el node adapter{" degraded" if a["degraded"] else ""}'
            f'{" endpoint" if a["kind"] == "endpoint" else ""}" data-key="{escape(a["key"])}" '
            f'data-host="{escape(a["host"] or "")}" data-rail="{_same(a["rail"] or "")}" tabindex="0">\n'
            f'    <rect x="{_r(a["x"])}" y="{_r(a["y"])}" width="{_same(a["w"])}" height="{_same(a["h"])}" rx="2" '
            f'fill="{_same(a["colour"])}"></rect>\n'
            f'    <text class="ad-label" transform="translate({_r(a["x"] + a["w"] / 2 + 3.5)} '
            f'{_r(a["y"] + a["h"] + 6)}) rotate(90)">{label}</text>\n'
            f'    <title>{title}</title>\n'
            f'  </g>\n')
