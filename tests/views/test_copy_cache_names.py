"""A replica the state keeps no weights cache entry for (a state from before replicas kept
theirs) shows its download from the catalog model's entry: named on the bastion by the one
rule (llmgw.weights.names), shipped to a router in placement.json, which holds no rule."""

from __future__ import annotations

from pathlib import Path

from llmgw.site import Site
from llmgw.state import read_state, write_state
from llmgw.views import Runtime, SiteData, SiteDataCache
from llmgw.views.placement import read_placement
from llmgw.views.planned import load_site_data
from llmgw.views.replicas import replicas_view
from llmgw.weights.names import cache_name
from tests.support.example_site import NOW, example_site
from tests.support.site_copy import ship_site_copy_files


def test_a_replica_without_its_entry_shows_its_download_on_the_router_too(tmp_path: Path) -> None:
    root = example_site(tmp_path)
    site = Site.load(root)
    state = read_state(site.state_file)
    old = state.replicas[0]
    write_state(site.state_file, state.model_copy(update={
        "replicas": [old.model_copy(update={"cache_name": None}), *state.replicas[1:]]}))
    ship_site_copy_files(root)
    model = load_site_data(site).catalog.models[old.model]
    name = cache_name(model.source)
    assert read_placement(root).cache_names[old.model] == name
    node = old.shards[0].node
    downloads = {(node, name): {"host": node, "name": name, "bytes": 5, "total": 10, "rate": None,
                                "eta_seconds": None, "replicas": [old.id]}}

    def shown(data: SiteData) -> list[dict[str, object]]:
        view = replicas_view(data, Runtime.unknown(), NOW, downloads=downloads)
        return list(next(r["downloads"] for r in view["replicas"] if r["id"] == old.id))

    bastion, router = shown(load_site_data(Site.load(root))), shown(SiteDataCache(root).get())
    assert bastion == router and [d["node"] for d in router] == [node]
