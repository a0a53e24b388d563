"""A profile's `requires: {driver, cuda}` against the host stack gpu_facts reports: the plan
rejects a host with a sentence naming the version it has; unknown is not new enough."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.planner import make_plan
from llmgw.stack import meets
from tests.planner.test_placement import placed_on, reasons
from tests.support.plan_inputs import facts, gpu_profile, host, inputs, model


def stacked(name: str, driver: str | None, cuda: str | None):  # type: ignore[no-untyped-def]
    return facts(name).model_copy(update={"gpu_driver": driver, "cuda_version": cuda})


@pytest.mark.parametrize(("version", "spec", "ok"), [
    ("570.133.20", ">=570", True), ("565.57.01", ">=570", False), ("570", ">570", False),
    ("12.8", ">=12.8", True), ("12.10", ">=12.8", True), ("13.0", ">=12.8,<13", False),
    ("12.2", "==12.2", True), ("not-a-version", ">=1", False),
])
def test_versions_compare_number_by_number(version: str, spec: str, ok: bool) -> None:
    assert meets(version, spec) is ok


def test_the_plan_rejects_old_stacks_naming_the_version() -> None:
    m = model("m", gpu_profile(gpus=8, gpu_class="H100-80GB", requires={"driver": ">=570", "cuda": ">=12.8"}),
              min=4)
    hosts = [host(n) for n in ("new", "old-driver", "old-cuda", "unknown")]
    fs = [stacked("new", "570.133.20", "12.8"), stacked("old-driver", "535.183.01", "12.8"),
          stacked("old-cuda", "570.86.10", "12.7"), stacked("unknown", None, None)]
    plan = make_plan(inputs([m], hosts, fs))
    assert placed_on(plan, "m") == [["new"]]
    assert reasons(plan, "m") == [
        "new: 0 of 8 H100-80GB GPUs free, needs 8",
        "old-cuda: has CUDA (as the driver supports it) 12.7, needs >=12.8",
        "old-driver: has NVIDIA driver 535.183.01, needs >=570",
        "unknown: NVIDIA driver version not known, needs >=570 (run `llmgw facts`; gpu_facts reports it)",
    ]


@pytest.mark.parametrize("bad", ["570", ">= 570.x", "~=570", "", ">=570,"])
def test_a_bad_requirement_says_how_to_write_one(bad: str) -> None:
    with pytest.raises(ValidationError, match=r"is not a version requirement; write e.g. \">=570\""):
        model("m", gpu_profile(gpus=1, requires={"driver": bad}))


def test_only_driver_and_cuda_can_be_required() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        model("m", gpu_profile(gpus=1, requires={"nccl": ">=2.21"}))
