"""Weights where they are: the planner serves an operator's copy in place and counts only downloads.

The issue's example first (two L40S nodes with 1 GB free, the 4.4 GB GGUF present under
l40s-02's model dir), then what is a copy and what is not (llmgw.weights.present).
"""

from __future__ import annotations

from llmgw.facts.records import Weights
from llmgw.planner import Plan, load_plan, make_plan
from llmgw.planner.fleet import Fleet
from llmgw.planner.render import render_plan
from llmgw.state import State
from llmgw.weights.names import cache_name
from tests.support.plan_inputs import facts, gpu_profile, host, inputs, model

GGUF = "hf://Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf"
GGUF_BYTES = 4_683_073_536  # 4.4 GB as the planner writes sizes (GiB)
COMMIT = "a09a35458c702b33eeacc393d103063234e8bc28"
REPO = f"hf://Qwen/Qwen2.5-7B-Instruct@{COMMIT}"
REPO_FILES: dict[str, int | None] = {"config.json": 663, "model.safetensors": 15_000_000_000}


def l40s(gguf_at: str | None, size: int = GGUF_BYTES) -> tuple[Plan, list[str]]:
    m = model("qwen", gpu_profile("l40s", gpus=1, gpu_class="L40S-48GB"), source=GGUF)
    own = [Weights(path=gguf_at, size_bytes=size, cache=False)] if gguf_at else []
    fs = [facts("l40s-01", 4, "L40S-48GB", disk_free_gb=1),
          facts("l40s-02", 4, "L40S-48GB", disk_free_gb=1, weights=own)]
    plan = make_plan(inputs([m], [host("l40s-01"), host("l40s-02")], fs, sizes={GGUF: GGUF_BYTES}))
    reasons = [r.reason for u in plan.unplaced for r in u.rejections]
    return plan, reasons


def test_the_issues_example_serves_the_operators_gguf_where_it_is() -> None:
    plan, reasons = l40s("/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf")
    (replica,) = plan.desired.replicas
    assert [(s.node, s.present_at) for s in replica.shards] == [
        ("l40s-02", "/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf")]
    assert reasons == []
    # The saved plan carries the path and reads back with it (a plan file is checked input).
    again = load_plan(plan.to_json(), "plan.json")
    assert again.desired.replicas[0].shards[0].present_at == "/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf"


def test_a_copy_apply_would_not_serve_does_not_pass_the_disk_filter() -> None:
    # Outside the node's llmgw_model_dirs (/srv/models): apply would download, so disk counts.
    for path, size in (("/data/qwen2.5-7b-instruct-q4_k_m.gguf", GGUF_BYTES),
                       ("/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf", 1_000),  # same name, another file
                       ("/srv/models/my copy/qwen2.5-7b-instruct-q4_k_m.gguf", GGUF_BYTES)):  # no unit takes it
        plan, reasons = l40s(path, size)
        assert plan.desired.replicas == [], path
        assert reasons == ["l40s-01: 1 GB free on / (holding /var/cache/llmgw), weights need 4.4 GB",
                           "l40s-02: 1 GB free on / (holding /var/cache/llmgw), weights need 4.4 GB"], path


def test_the_cache_entry_is_served_as_before() -> None:
    m = model("qwen", gpu_profile(gpus=1), source=GGUF)
    both = [Weights(path="/var/cache/llmgw/x", size_bytes=GGUF_BYTES, cache=True, cache_name=cache_name(GGUF)),
            Weights(path="/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf", size_bytes=GGUF_BYTES, cache=False)]
    plan = make_plan(inputs([m], [host("a")], [facts("a", 8, disk_free_gb=1, weights=both)], sizes={GGUF: GGUF_BYTES}))
    assert [s.present_at for s in plan.desired.replicas[0].shards] == [None]


def repo_fleet(*copies: Weights, files: dict[str, int | None] | None = None) -> tuple[Fleet, list[str]]:
    m = model("qwen", gpu_profile(gpus=1), source=REPO)
    inp = inputs([m], [host(f"n{i}") for i in range(len(copies))],
                 [facts(f"n{i}", 8, weights=[w]) for i, w in enumerate(copies)])
    fleet = Fleet(inp.nodes, inp.facts, inp.fabrics, inp.ports, {REPO: 15_000_000_663},
                  {REPO: REPO_FILES if files is None else files})
    name = cache_name(REPO)
    return fleet, [fleet.copy_at(n, REPO, name) or "-" for n in fleet.nodes]


def folder(path: str, files: dict[str, int] | None) -> Weights:
    return Weights(path=path, size_bytes=sum((files or {}).values()), cache=False, files=files)


def test_hf_snapshots_in_a_model_dir_are_recognised_and_checked_against_the_pin() -> None:
    whole = {"config.json": 663, "model.safetensors": 15_000_000_000, "README.md": 10}
    snapshot = f"/srv/models/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/{COMMIT}"
    _, found = repo_fleet(
        folder(snapshot, whole),  # the Hugging Face cache layout at the pinned commit
        folder("/srv/models/Qwen2.5-7B-Instruct", whole),  # a plain folder named after the repository
        folder(f"/srv/models/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/{'b' * 40}", whole),  # another commit
        folder("/srv/models/Qwen2.5-7B-Instruct", {"config.json": 663}),  # weights missing
        folder("/srv/models/Qwen2.5-7B-Instruct", {"config.json": 663, "model.safetensors": 14}),  # truncated
        folder("/srv/models/Qwen2.5-7B-Instruct", None),  # facts from before file lists: not checkable
        folder("/elsewhere/Qwen2.5-7B-Instruct", whole),  # not in a model dir
    )
    assert found == [snapshot, "/srv/models/Qwen2.5-7B-Instruct", "-", "-", "-", "-", "-"]


def test_without_a_recorded_file_list_the_layout_and_the_pins_size_decide() -> None:
    whole = Weights(path="/srv/models/Qwen2.5-7B-Instruct", size_bytes=15_000_000_663, cache=False)
    short = Weights(path="/srv/models/Qwen2.5-7B-Instruct", size_bytes=15_000_000_662, cache=False)
    _, found = repo_fleet(whole, short, files={})
    assert found == ["/srv/models/Qwen2.5-7B-Instruct", "-"]


def test_a_file_source_is_served_from_its_own_path() -> None:
    src = "file:///srv/models/w.gguf"
    m = model("m", gpu_profile(gpus=1), source=src)
    own = Weights(path="/srv/models/w.gguf", size_bytes=10, cache=False)
    plan = make_plan(inputs([m], [host("a")], [facts("a", 8, disk_free_gb=0, weights=[own])], sizes={src: 10}))
    assert [s.present_at for s in plan.desired.replicas[0].shards] == ["/srv/models/w.gguf"]


def test_the_plan_shows_the_path_served_in_place() -> None:
    plan, _ = l40s("/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf")
    shard = [line for line in render_plan(plan, State(lineage="test")).splitlines() if "shard 0" in line]
    assert shard == ['      shard 0  = "l40s-02" gpus [0] port 20000 weights in place '
                     '"/srv/models/qwen2.5-7b-instruct-q4_k_m.gguf"']
