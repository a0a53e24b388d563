"""The plan schema as apply and scripts read it: its version is checked, its reasons carry codes."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llmgw.errors import PlanError
from llmgw.planner import PLAN_VERSION, REASON_CODES, load_plan, make_plan
from llmgw.planner.schema import PlannedAdapter, PlannedReplica, PlannedShard
from llmgw.state import State
from llmgw.weights.names import cache_name
from tests.support.plan_inputs import facts, gpu_profile, host, inputs, model

M = model("m", gpu_profile(gpus=4), min=2)
HOSTS = [host("a", address="10.0.0.1"), host("b", address="10.0.0.2")]
FACTS = [facts("a", 4), facts("b", 4)]


def test_plan_round_trips_with_its_version() -> None:
    plan = make_plan(inputs([M], HOSTS, FACTS))
    assert json.loads(plan.to_json())["version"] == PLAN_VERSION
    assert load_plan(plan.to_json(), "p.json") == plan


@pytest.mark.parametrize("version", [2, 0, None, "1"])  # None: written, but null
def test_a_plan_of_another_version_is_refused_by_name(version: object) -> None:
    raw = json.loads(make_plan(inputs([M], HOSTS, FACTS)).to_json())
    raw["version"] = version
    with pytest.raises(PlanError, match=rf"p.json is a plan of version {version!r}; this llmgw reads version 1"):
        load_plan(json.dumps(raw), "p.json")


@pytest.mark.parametrize("text", ["", "[]", "{not json", '{"version": 1}'])
def test_not_a_plan_is_refused(text: str) -> None:
    with pytest.raises(PlanError, match=r"p\.json is"):
        load_plan(text, "p.json")


def test_actions_carry_a_code_beside_the_prose() -> None:
    plan = make_plan(inputs([M], HOSTS, FACTS))
    assert [(a.action, a.code) for a in plan.actions] == [("create", "scaling_min"), ("create", "scaling_min")]
    state = plan.applied(State(lineage="test"))
    hosts = [host("a", "draining", address="10.0.0.1"), host("b", address="10.0.0.2"), host("c", address="10.0.0.3")]
    again = make_plan(inputs([M], hosts, [*FACTS, facts("c", 4)], state=state))
    assert [(a.action, a.code, a.reason) for a in again.actions] == [("replace", "node_draining", "node a is draining")]
    gone = make_plan(inputs([], HOSTS, FACTS, state=state))
    assert [a.code for a in gone.actions] == ["model_removed", "model_removed"]
    assert all(a.code in REASON_CODES for a in [*plan.actions, *again.actions, *gone.actions])


def test_plan_json_is_json_dumps_of_its_dump() -> None:
    # Plan.to_json walks the records itself (keys sorted as it goes): the bytes must be those of
    # json.dumps over pydantic's dump, with env keys out of order, non-ASCII text and nulls.
    env = {"VLLM_ZZ": "1", "VLLM_AA": "caf\u00e9", "VLLM_MM": ""}
    m = model("m2", gpu_profile(gpus=2, env=env, args=["--x", "y"]), min=3)
    plan = make_plan(inputs([m, M], HOSTS, FACTS))
    assert plan.unplaced and plan.desired.replicas
    assert plan.to_json() == json.dumps(plan.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    ascii_only = make_plan(inputs([M], HOSTS, FACTS))
    assert ascii_only.to_json() == json.dumps(ascii_only.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def test_records_pydantic_dumps_its_own_way_are_left_to_it() -> None:
    # The plan's walk (schema._ordered) gives up on a record with a serializer, an excluded or
    # aliased field, so a future schema change cannot make it write other bytes than pydantic.
    from pydantic import BaseModel, Field, field_serializer

    from llmgw.planner.schema import _NotPlain, _ordered

    class Excluded(BaseModel):
        x: int = Field(exclude=True)

    class Aliased(BaseModel):
        x: int = Field(serialization_alias="y")

    class Serialized(BaseModel):
        x: int

        @field_serializer("x")
        def _x(self, v: int) -> str:
            return str(v)

    for record in (Excluded(x=1), Aliased(x=1), Serialized(x=1)):
        with pytest.raises(_NotPlain):
            _ordered(record)
    assert _ordered({"b": [1, None], "a": "x"}) == {"a": "x", "b": [1, None]}
    assert list(_ordered({"b": 1, "a": 2})) == ["a", "b"]


def test_placed_records_are_the_validated_ones() -> None:
    """PlannedShard.placed / PlannedReplica.placed skip validation for the planner's own values:
    they must give every field (a field added to the schema fails here), equal and dump as the
    validated records do, and stay frozen."""
    shard_kw: dict[str, Any] = dict(node="n1", rank=0, gpus=[0, 1], port=20000, unit="llmgw-m-1-0.service",
                                    address="10.0.0.1")
    shard = PlannedShard.placed(**shard_kw)
    assert shard == PlannedShard(**shard_kw)
    assert list(shard.__dict__) == list(PlannedShard.model_fields)
    rep_kw: dict[str, Any] = dict(id="m-1", model="m", profile="p", engine="vllm", shards=[shard],
                                  endpoint="http://10.0.0.1:20000", spec_hash="0123456789abcdef", fabric="ib0",
                                  source="hf://o/r/m.gguf", cache_name=cache_name("hf://o/r/m.gguf"), args=["--x"],
                                  env={"VLLM_LOGGING_LEVEL": "1"}, trust_remote_code=True,
                                  adapters=[PlannedAdapter(name="m-lora", source="hf://o/r/l.gguf",
                                                           cache_name=cache_name("hf://o/r/l.gguf"),
                                                           path=f"/var/cache/llmgw/{cache_name('hf://o/r/l.gguf')}")],
                                  max_loras=2)
    rep = PlannedReplica.placed(**rep_kw)
    validated = PlannedReplica(status="new", **rep_kw)
    assert rep == validated
    assert list(rep.__dict__) == list(PlannedReplica.model_fields)
    assert rep.model_dump(mode="json") == validated.model_dump(mode="json")
    assert rep.model_dump_json() == validated.model_dump_json()
    assert rep.model_fields_set == validated.model_fields_set
    kept_kw = {k: rep_kw[k] for k in ("id", "model", "profile", "engine", "shards", "endpoint", "spec_hash", "fabric")}
    kept = PlannedReplica.kept(**kept_kw)
    assert kept == PlannedReplica(status="kept", **kept_kw)
    assert kept.model_dump_json() == PlannedReplica(status="kept", **kept_kw).model_dump_json()
    assert list(kept.__dict__) == list(PlannedReplica.model_fields)
    assert not PlannedReplica.__pydantic_post_init__ and not PlannedShard.__pydantic_post_init__
    with pytest.raises(ValidationError):
        rep.id = "other"


def _strings(doc: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], bool]]:
    """Every string of a JSON document: (its path, whether it is a mapping's key)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*path, k), True
            yield from _strings(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _strings(v, (*path, i))
    elif isinstance(doc, str):
        yield path, False


def _edited(doc: Any, path: tuple[str | int, ...], key: bool, suffix: str) -> Any:
    doc = copy.deepcopy(doc)
    *up, last = path
    parent = doc
    for p in up:
        parent = parent[p]
    if key:
        parent[f"{last}{suffix}"] = parent.pop(last)
    else:
        parent[last] += suffix
    return doc


def example_plan() -> str:
    """The example site's plan: new single- and multi-node replicas (a fabric, args, env),
    model records, unplaced models with rejections, on-demand models."""
    from llmgw.planner.load import site_plan
    from llmgw.site import Site
    from tests.support.example_site import EXAMPLE

    return site_plan(Site.load(EXAMPLE))[1].to_json()


def test_every_string_of_a_plan_is_checked_on_load() -> None:
    """A newline added to any string of a saved plan (value or key) is refused, naming the field:
    nothing in a plan can carry a line into a unit file. What the issue reproduced was `fabric`."""
    raw = json.loads(example_plan())
    raw["desired"]["replicas"][0]["env"] = {"VLLM_LOGGING_LEVEL": "INFO"}  # the example sets none
    paths = list(_strings(raw))
    fields = {tuple(p for p in path if isinstance(p, str)) for path, key in paths if not key}
    assert {("desired", "replicas", "fabric"), ("desired", "replicas", "args"),
            ("desired", "replicas", "env", "VLLM_LOGGING_LEVEL"),
            ("unplaced", "rejections", "reason"), ("desired", "models", "aliases")} <= fields  # the example has them
    for path, key in paths:
        if (key and path[-2:-1] != ("env",)) or path == ("version",):
            continue  # the schema's own field names: unknown ones are refused (extra="forbid")
        with pytest.raises(PlanError, match=r"^p\.json is not a llmgw plan: ") as caught:
            load_plan(json.dumps(_edited(raw, path, key, "\n[Service]\nExecStartPre=+/bin/sh")), "p.json")
        assert caught.value.hint and "llmgw plan --out FILE" in caught.value.hint, path
    load_plan(json.dumps(raw), "p.json")  # unedited, it loads


@pytest.mark.parametrize(("field", "value", "error"), [
    (("desired", "replicas", 0, "endpoint"), "http://198.51.100.1:20000", r"desired\.replicas\[0\]: .*rank 0's node"),
    (("desired", "replicas", 0, "shards", 0, "unit"), "llmgw-other-1-0.service",
     r"desired\.replicas\[0\]: shard 0's unit is 'llmgw-other-1-0.service'; llmgw names it llmgw-"),
    (("desired", "replicas", 0, "shards", 0, "port"), 0, r"desired\.replicas\[0\]\.shards\[0\]\.port"),
    (("desired", "replicas", 0, "shards", 0, "rank"), 5, r"desired\.replicas\[0\]: shard ranks are \[5"),
    (("desired", "replicas", 0, "shards", 0, "address"), "10.0.0.1/evil", r"address '10\.0\.0\.1/evil'"),
    (("desired", "replicas", 0, "cache_name"), "../../etc/x", r"desired\.replicas\[0\]: cache_name"),
    (("desired", "replicas", 0, "source"), "gopher://x/y", r"desired\.replicas\[0\]\.source: .*not a source"),
    (("desired", "replicas", 0, "id"), "m-1/../../x", r"desired\.replicas\[0\]\.id: String should match"),
    (("state_lineage",), "../x", r"state_lineage"),
])
def test_values_llmgw_derives_must_be_what_it_derives(field: tuple[str | int, ...], value: object,
                                                       error: str) -> None:
    raw = json.loads(make_plan(inputs([M], HOSTS, FACTS)).to_json())
    *up, last = field
    parent: Any = raw
    for p in up:
        parent = parent[p]
    parent[last] = value
    with pytest.raises(PlanError, match=error):
        load_plan(json.dumps(raw), "p.json")


def test_the_inputs_digest_follows_every_input_and_not_the_folder(tmp_path: Path) -> None:
    from llmgw.planner.load import inputs_digest
    from llmgw.site import Site
    from tests.support.example_site import example_site

    one, two = example_site(tmp_path / "1", state=False), example_site(tmp_path / "2", state=False)
    empty = State(lineage="")
    base = inputs_digest(Site.load(one), empty)
    assert inputs_digest(Site.load(two), empty) == base  # a copy elsewhere: the same inputs
    assert inputs_digest(Site.load(one), State(lineage="", serial=1)) != base
    for rel in ("catalog/chat.yaml", "inventory/hosts.yml", "facts/cpu-01.json", "llmgw.yaml"):
        path = two / rel
        path.write_text(path.read_text() + "\n# changed\n" if rel.endswith((".yaml", ".yml")) else
                        path.read_text() + "\n")
        assert inputs_digest(Site.load(two), empty) != base, rel
        base = inputs_digest(Site.load(two), empty)
    (two / "facts" / ".hidden.json").write_text("{}")
    (two / "notes.txt").write_text("not an input")
    assert inputs_digest(Site.load(two), empty) == base


def test_an_adapter_whose_cache_entry_is_not_its_sources_is_refused() -> None:
    """A plan file is read back with every check: an edited adapter entry cannot name another cache entry."""
    with pytest.raises(ValueError, match="adapter m-lora: cache_name 'x' is not the cache entry of its source"):
        PlannedAdapter(name="m-lora", source="hf://o/r/l.gguf", cache_name="x")
