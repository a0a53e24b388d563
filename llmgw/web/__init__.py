"""The read-only dashboard on the router's admin listener: server-rendered Jinja2 pages.

Every page renders the dicts of `llmgw.views`, the very functions behind `llmgw status`,
`models` and `replicas`, so the browser and the terminal cannot disagree. One stylesheet,
no JavaScript toolchain: the fabric page carries a few lines of inline script for hover,
click and find; everything else is plain HTML. Jinja2 autoescaping is on for every
template: host names, model names and error texts are data, never markup.

    dashboard.py  the routes (pages, the fabric topology JSON, the stylesheet)
    process.py    the dashboard as a process of its own, which a router starts
    fabric_svg.py the fabric page's SVG elements and the details its script shows
    history.py    the history page: rates, TTFT, tokens/s and errors per model, from Prometheus
    templates/    one template per page, on base.html
    static/       style.css
"""

from llmgw.web.dashboard import DashboardSources, dashboard_router, handed_in

__all__ = ["DashboardSources", "dashboard_router", "handed_in"]
