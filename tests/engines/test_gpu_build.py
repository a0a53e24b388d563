"""What each engine's pinned GPU build needs of a host's NVIDIA stack: declared once, in the
descriptor; the engine role's variables say the same (it cannot import llmgw), and its
preflight refuses a GPU shard on a host whose loaded driver is older. The preflight runs
through llmgw.runner (real ansible-runner, the real role) with the driver's version file
pointed at one of the test's own: no GPU needed."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

from llmgw.engines import descriptor, get
from llmgw.engines.descriptor import MIN_DRIVER, GpuBuild
from llmgw.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
PREFLIGHT = REPO / "tests" / "security" / "preflight.yml"


def test_every_engine_with_a_pinned_gpu_build_declares_what_it_needs() -> None:
    for e in descriptor.engines():
        if e.install == "venv":  # a pinned distribution, its GPU build among it
            assert e.gpu_build is not None, e.name
            assert e.gpu_build.driver == MIN_DRIVER[int(e.gpu_build.cuda.split(".")[0])]
        else:  # the operator builds it: a profile's `requires:` says what that build needs
            assert e.gpu_build is None, e.name
    assert get("vllm").gpu_build == GpuBuild("wheel", "13.0") and get("vllm").gpu_build_name() == "vLLM 0.32.0's wheel"
    assert get("sglang").gpu_build == GpuBuild("wheel", "13.0")


def test_a_venv_engine_without_its_gpu_build_is_refused() -> None:
    with pytest.raises(ValueError, match=r"engine vllm: a venv engine installs a pinned GPU build .*gpu_build="):
        dataclasses.replace(get("vllm"), gpu_build=None)


@pytest.mark.parametrize("cuda", ["13", "10.2", "13.x", ""])
def test_a_gpu_build_names_a_cuda_whose_driver_floor_is_known(cuda: str) -> None:
    with pytest.raises(ValueError, match=r"write MAJOR.MINOR of a CUDA release llmgw knows the driver floor of "
                                         r"\(11.x, 12.x, 13.x\)"):
        GpuBuild("wheel", cuda)


def test_the_roles_gpu_builds_are_the_descriptors() -> None:
    roles_vars = yaml.safe_load((REPO / "roles" / "llmgw_engine" / "vars" / "main.yml").read_text())
    assert roles_vars["_llmgw_engine_gpu_builds"] == {
        e.name: {"build": e.gpu_build_name(), "cuda": e.gpu_build.cuda, "driver": e.gpu_build.driver}
        for e in descriptor.engines() if e.gpu_build is not None}


def _preflight(tmp: Path, driver: str | None, **shard: object) -> tuple[bool, str]:
    inv = tmp / "hosts.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    version = tmp / "nvidia-version"
    if driver is not None:
        version.write_text(driver + "\n")
    entry = {"unit": "llmgw-x-1-0", "replica": "x-1", "model": "x", "engine": "vllm",
             "model_path": "/srv/models/x", "port": 20000, "gpus": [0], **shard}
    result = run_playbook(PREFLIGHT, inv, extravars={"shards": [entry],
                                                     "_llmgw_engine_nvidia_version_file": str(version)})
    return result.ok, "\n".join(result.output_tail)


def test_preflight_refuses_a_gpu_shard_on_an_older_driver(tmp_path: Path) -> None:
    ok, out = _preflight(tmp_path, "535.183.01")
    assert not ok
    assert ("shard llmgw-x-1-0: this host's NVIDIA driver is 535.183.01, and vLLM 0.32.0's wheel is built for "
            "CUDA 13.0, which needs driver >= 580") in " ".join(out.split()), out


def test_preflight_refuses_sglang_too(tmp_path: Path) -> None:
    ok, out = _preflight(tmp_path, "575.57.08", engine="sglang")
    assert not ok
    assert "this host's NVIDIA driver is 575.57.08, and SGLang 0.5.23's wheel" in " ".join(out.split()), out


@pytest.mark.parametrize(("driver", "shard"), [
    ("580.95.05", {}),  # new enough
    ("590.48.01", {"engine": "sglang"}),
    ("535.183.01", {"gpus": []}),  # a CPU shard: vLLM's CPU build needs no driver
    (None, {}),  # no NVIDIA module loaded: not judged here (preflight.yml says why)
])
def test_preflight_passes_what_the_build_can_run_on(tmp_path: Path, driver: str | None,
                                                    shard: dict[str, object]) -> None:
    ok, out = _preflight(tmp_path, driver, **shard)
    assert ok, out
