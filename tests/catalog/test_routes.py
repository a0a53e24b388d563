"""Weighted routes in the catalog: validation at file:line, `llmgw shift` keeping comments, and
the plan saying the split before and after (docs/routes.md)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from llmgw.catalog import load_catalog
from llmgw.errors import CatalogError
from llmgw.planner.schema import load_plan
from llmgw.state import read_state, write_state
from tests.support.cli import run_cli
from tests.support.plan_site import write_site

MODELS = """\
models:
  - name: qwen3-8b
    aliases: [qwen3]
    source: hf://Qwen/Qwen3-8B-GGUF/qwen3-8b-q4_k_m.gguf
    profiles: [{name: cpu, engine: llamacpp}]
  - name: qwen3-8b-2511
    source: hf://Qwen/Qwen3-8B-2511-GGUF/qwen3-8b-2511-q4_k_m.gguf
    profiles: [{name: cpu, engine: llamacpp}]
  - name: small
    source: hf://org/small/small.gguf
    profiles: [{name: cpu, engine: llamacpp}]
"""

ROUTE = """\
# The chat name: a canary of the November build.
models:
  - name: chat
    aliases: [assistant]
    routes:
      - model: qwen3-8b        # stable
        weight: 90
      - {model: qwen3-8b-2511, weight: 10}   # the canary
    fallbacks: [small]
    guard: {max_error_rate: 0.05, max_ttft_p90: 2s, window: 1m}
"""


def catalog_dir(tmp_path: Path, route: str = ROUTE, models: str = MODELS) -> Path:
    root = tmp_path / "site"
    (root / "catalog").mkdir(parents=True)
    (root / "inventory").mkdir()
    (root / "llmgw.yaml").write_text("")
    (root / "inventory" / "hosts.yml").write_text("all:\n  children:\n    llmgw_nodes:\n      hosts:\n"
                                                  "        n1: {}\n")
    (root / "catalog" / "models.yaml").write_text(models)
    (root / "catalog" / "routes.yaml").write_text(textwrap.dedent(route))
    return root


def problems_of(root: Path) -> list[str]:
    with pytest.raises(CatalogError) as err:
        load_catalog(root / "catalog", root=root)
    return [str(p) for p in err.value.problems]


def test_a_route_loads_apart_from_the_models(tmp_path: Path) -> None:
    root = catalog_dir(tmp_path)
    catalog = load_catalog(root / "catalog", root=root)
    assert sorted(m.name for m in catalog) == ["qwen3-8b", "qwen3-8b-2511", "small"]  # a route is no model
    route = catalog.routes["chat"]
    assert [(t.model, t.weight) for t in route.routes] == [("qwen3-8b", 90), ("qwen3-8b-2511", 10)]
    assert route.stable == "qwen3-8b"
    assert route.guard is not None and (route.guard.max_error_rate, route.guard.max_ttft_p90,
                                        route.guard.window, route.guard.min_requests) == (0.05, 2.0, 60, 20)
    assert catalog.resolve_route("assistant") is route and catalog.resolve("chat") is None
    assert catalog.where_route("chat").line == 3


@pytest.mark.parametrize(("route", "expected"), [
    ("""\
     models:
       - name: chat
         routes:
           - {model: qwen3-8b, weight: 80}
           - {model: qwen3-8b-2511, weight: 10}
     """, "catalog/routes.yaml:3: models[0].routes: the weights add up to 90, not 100; they are percentages of "
          "the route's traffic: qwen3-8b 80, qwen3-8b-2511 10"),
    ("""\
     models:
       - name: chat
         routes:
           - {model: qwen3-8b, weight: 90}
           - {model: nope, weight: 10}
     """, "catalog/routes.yaml:5: models[0].routes[1].model: 'nope' is not a model in the catalog; add it or "
          "remove a target"),
    ("""\
     models:
       - name: chat
         routes:
           - {model: qwen3, weight: 90}
           - {model: qwen3-8b-2511, weight: 10}
     """, "catalog/routes.yaml:4: models[0].routes[0].model: 'qwen3' is an alias of 'qwen3-8b'; name the model "
          "itself"),
    ("""\
     models:
       - name: chat
         routes: [{model: qwen3-8b, weight: 50}, {model: qwen3-8b-2511, weight: 50}]
       - name: chat2
         routes: [{model: chat, weight: 100}]
     """, "catalog/routes.yaml:5: models[1].routes[0].model: 'chat' is a weighted route; a target of a route "
          "must be a model: name one of 'chat''s models"),
    ("""\
     models:
       - name: small
         routes: [{model: qwen3-8b, weight: 100}]
     """, "catalog/routes.yaml:2: models[0].name: 'small' is already used by model 'small' at "
          "catalog/models.yaml:9; names and aliases must be unique across the catalog"),
    ("""\
     models:
       - name: chat
         routes: [{model: qwen3-8b, weight: 100}]
         guard: {window: 30s}
     """, "catalog/routes.yaml:4: models[0].guard: a guard needs max_error_rate or max_ttft_p90 (or both); add "
          "one, or remove the guard"),
    ("""\
     models:
       - name: chat
         routes: [{model: qwen3-8b, weight: 90}, {model: qwen3-8b-2511, weight: 10}]
         source: hf://org/x/x.gguf
     """, "catalog/routes.yaml:4: models[0].source: unknown key 'source'; check its spelling"),
    ("""\
     models:
       - name: chat
         routes: [{model: qwen3-8b, weight: 90}, {model: qwen3-8b, weight: 10}]
     """, "catalog/routes.yaml:3: models[0].routes: 'qwen3-8b' is listed twice; each model once, with its "
          "whole share"),
    ("""\
     models:
       - name: chat
         routes: [{model: qwen3-8b, weight: 100.5}]
     """, "catalog/routes.yaml:3: models[0].routes[0].weight: "),
])
def test_bad_routes_are_refused_at_their_line(tmp_path: Path, route: str, expected: str) -> None:
    found = problems_of(catalog_dir(tmp_path, route))
    assert any(p.startswith(expected) for p in found), found


def test_a_model_may_not_fall_back_to_a_route(tmp_path: Path) -> None:
    models = MODELS.replace("    source: hf://org/small/small.gguf\n",
                            "    source: hf://org/small/small.gguf\n    fallbacks: [chat]\n")
    found = problems_of(catalog_dir(tmp_path, models=models))
    assert found == ["catalog/models.yaml:11: models[2].fallbacks[0]: 'chat' is a weighted route, not a model; "
                     "fall back to one of its models instead"]


def test_shift_edits_only_the_weights_keeping_comments(tmp_path: Path) -> None:
    root = catalog_dir(tmp_path)
    result = run_cli("-C", str(root), "shift", "assistant", "qwen3-8b-2511=50")
    assert result.exit_code == 0, result.stderr
    after = (root / "catalog" / "routes.yaml").read_text()
    assert after == ROUTE.replace("weight: 90", "weight: 50").replace("weight: 10}", "weight: 50}")
    assert "Shifted chat: qwen3-8b 90%, qwen3-8b-2511 10% -> qwen3-8b 50%, qwen3-8b-2511 50%, once applied." \
        in result.stdout
    assert "+        weight: 50" in result.stdout  # the diff to commit
    again = run_cli("-C", str(root), "shift", "chat", "qwen3-8b=50", "qwen3-8b-2511=50%", "--json")
    assert json.loads(again.stdout) == {"route": "chat", "changed": False, "before": {"qwen3-8b": 50,
                                        "qwen3-8b-2511": 50}, "after": {"qwen3-8b": 50, "qwen3-8b-2511": 50},
                                        "file": None}


@pytest.mark.parametrize(("args", "expected"), [
    (("chat", "qwen3-8b=60", "qwen3-8b-2511=60"),
     "the split would add up to 120%, not 100%: qwen3-8b=60, qwen3-8b-2511=60; nothing was written"),
    (("chat", "small=10"), "small is not a target of route chat (its targets: qwen3-8b, qwen3-8b-2511)"),
    (("chat", "qwen3-8b=ninety"), "'qwen3-8b=ninety' is not MODEL=PERCENT with a whole percentage from 0 to 100"),
    (("chat", "qwen3-8b=101"), "'qwen3-8b=101' is not MODEL=PERCENT"),
    (("qwen3-8b", "qwen3-8b=10"), "qwen3-8b is a model, not a weighted route"),
    (("chat",), "give at least one MODEL=PERCENT"),
])
def test_shift_refusals_write_nothing(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    root = catalog_dir(tmp_path)
    result = run_cli("-C", str(root), "shift", *args)
    assert result.exit_code == 2, result.stdout
    assert expected in result.stderr
    assert (root / "catalog" / "routes.yaml").read_text() == ROUTE


def test_scale_of_a_route_points_at_its_models_and_shift(tmp_path: Path) -> None:
    root = catalog_dir(tmp_path)
    result = run_cli("-C", str(root), "scale", "chat", "--min", "2")
    assert result.exit_code == 2
    assert "chat is a weighted route: it runs no replicas of its own" in result.stderr
    assert "scale its models (qwen3-8b, qwen3-8b-2511), or move its traffic with `llmgw shift chat " \
        "MODEL=PERCENT`" in " ".join(result.stderr.split())


def test_the_plan_shows_the_split_before_and_after(tmp_path: Path) -> None:
    site = write_site(tmp_path / "site")
    (site / "catalog" / "routes.yaml").write_text(
        "models:\n  - name: chat\n    routes:\n      - {model: qwen-coder-14b, weight: 90}\n"
        "      - {model: embed, weight: 10}   # the canary\n")
    first = run_cli("-C", str(site), "plan", "--json")
    plan = load_plan(first.stdout, "plan")
    (new,) = [a for a in plan.actions if a.model == "chat"]
    assert (new.action, new.code, new.reason) == (
        "update", "model_new", "new in the catalog; the routers learn of it (a route: split qwen-coder-14b 90%, "
                               "embed 10%)")
    (record,) = [m for m in plan.desired.models if m.name == "chat"]
    assert record.route is not None and [(t.model, t.weight) for t in record.route.targets] == [
        ("qwen-coder-14b", 90), ("embed", 10)]
    state_file = site / "state.json"
    write_state(state_file, plan.applied(read_state(state_file)))
    assert run_cli("-C", str(site), "shift", "chat", "embed=25").exit_code == 0
    text = run_cli("-C", str(site), "plan")
    assert ("# model chat will be updated in-place: split qwen-coder-14b 90%, embed 10% -> qwen-coder-14b 75%, "
            "embed 25%") in text.stdout, text.stdout
