"""gpu_facts: GPUs, their class and every health problem, through a substitute for NVML.

The substitute is the only stand-in in these tests (there is no GPU here); it raises
pynvml's own errors. The real nvidia-ml-py on this machine is also called once, and
must report "no GPUs known" with the reason, never fail.
"""

from __future__ import annotations

import pynvml
import pytest

from tests.support.facts import FakeGpu, FakeNvml, module, util

gpu = util("gpu")
gpu_facts = module("gpu_facts")
NO_HOST = {"driver_version": None, "cuda_version": None, "kernel_log": None, "notes": [], "fabric_manager": None}


def test_eight_healthy_h100() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(uuid=f"GPU-{i}", used_mib=512 * i) for i in range(8)])
    facts = gpu_facts.gpu_facts(nvml)
    assert facts["llmgw_gpus_unknown_reason"] is None
    gpus = facts["llmgw_gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert gpus[3] == {"index": 3, "uuid": "GPU-3", "name": "NVIDIA H100 80GB HBM3", "gpu_class": "H100-80GB",
                       "memory_total_mb": 81559, "memory_used_mb": 1536, "pci_bus_id": "0000:61:00.0",
                       "vbios": "96.00.89.00.01", "problems": [], "notes": [],
                       "unknown": ["GPU 3: Xid errors since boot are not known: the kernel log was not read"],
                       # no sysfs entry, no NVML topology call, no NVLink in this substitute: not known
                       "numa_node": None, "pci_root": None, "topology": None, "nvlink_peers": None}
    assert facts["llmgw_gpu_host"] == {"driver_version": "570.133.20", "cuda_version": "12.8", "kernel_log": None,
                                       "notes": [], "fabric_manager": None}
    assert nvml.shutdown


@pytest.mark.parametrize(("name", "mib", "cls"), [
    ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
    ("NVIDIA H100 NVL", 95830, "H100-94GB"),
    ("NVIDIA H200", 143771, "H200-141GB"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
    ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", 81920, "A100-80GB"),
    ("NVIDIA L40S", 46068, "L40S-48GB"),
    ("NVIDIA L4", 23034, "L4-24GB"),
    ("Tesla T4", 15360, "T4-16GB"),
    ("Tesla V100-SXM2-32GB", 32768, "V100-32GB"),
    ("NVIDIA RTX A6000", 49140, "A6000-48GB"),
    ("NVIDIA GeForce RTX 4090", 24564, "RTX4090-24GB"),
    ("NVIDIA GH200 480GB", 97871, "GH200-96GB"),
    ("NVIDIA B200", 183359, "B200-180GB"),
])
def test_class_from_name_and_memory(name: str, mib: int, cls: str) -> None:
    assert gpu.gpu_class(name, mib) == cls
    nvml = FakeNvml(gpus=[FakeGpu(name=name, total_mib=mib)])
    assert gpu_facts.gpu_facts(nvml)["llmgw_gpus"][0]["gpu_class"] == cls


@pytest.mark.parametrize(("sick", "says"), [
    (FakeGpu(ecc_uncorrected=3), "GPU 0 has 3 uncorrectable ECC errors since the driver loaded"),
    (FakeGpu(ecc_uncorrected=1), "GPU 0 has 1 uncorrectable ECC error since the driver loaded"),
    (FakeGpu(pages_pending=pynvml.NVML_FEATURE_ENABLED),
     "GPU 0 has retired pages pending: reset the GPU to retire them"),
    (FakeGpu(remapped_rows=(0, 2, 0, 1)), "GPU 0 had a row-remapping failure: the GPU needs service"),
    (FakeGpu(remapped_rows=(0, 1, 1, 0)), "GPU 0 has row remapping pending: reset the GPU to apply it"),
    (FakeGpu(clock_events=pynvml.nvmlClocksThrottleReasonHwThermalSlowdown),
     "GPU 0 is thermally throttled: check its cooling"),
    (FakeGpu(clock_events=pynvml.nvmlClocksThrottleReasonSwThermalSlowdown),
     "GPU 0 is thermally throttled: check its cooling"),
    (FakeGpu(clock_events=pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown),
     "GPU 0 is power-brake throttled: check the power supply"),
])
def test_each_health_problem_is_a_sentence(sick: FakeGpu, says: str) -> None:
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[sick, FakeGpu()]))["llmgw_gpus"]
    assert gpus[0]["problems"] == [says]
    assert gpus[1]["problems"] == []


def test_several_problems_on_one_gpu_and_idle_or_power_cap_clocks_are_fine() -> None:
    sick = FakeGpu(ecc_uncorrected=2, clock_events=pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
                   | pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown)
    idle = FakeGpu(clock_events=pynvml.nvmlClocksThrottleReasonGpuIdle | pynvml.nvmlClocksThrottleReasonSwPowerCap)
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[sick, idle]))["llmgw_gpus"]
    assert len(gpus[0]["problems"]) == 3
    assert gpus[1]["problems"] == []


def test_older_pynvml_uses_the_throttle_reasons_call() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(clock_events=pynvml.nvmlClocksThrottleReasonHwThermalSlowdown)], old_api=True)
    assert gpu_facts.gpu_facts(nvml)["llmgw_gpus"][0]["problems"] == ["GPU 0 is thermally throttled: check its cooling"]


def test_queries_a_gpu_does_not_support_say_nothing_about_health() -> None:
    consumer = FakeGpu(name="NVIDIA GeForce RTX 4090", total_mib=24564, ecc_uncorrected=None, pages_pending=None,
                       remapped_rows=None)
    assert gpu_facts.gpu_facts(FakeNvml(gpus=[consumer]))["llmgw_gpus"][0]["problems"] == []


def test_a_lost_gpu_is_reported_and_the_others_still_are() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(uuid="GPU-a"), FakeGpu(lost=True), FakeGpu(uuid="GPU-c")])
    gpus = gpu_facts.gpu_facts(nvml)["llmgw_gpus"]
    assert [g["uuid"] for g in gpus] == ["GPU-a", "unknown-1", "GPU-c"]
    assert gpus[1]["problems"] == ["GPU 1 is lost or inaccessible (GPU is lost): it fell off the bus or needs a reset"]
    assert gpus[1]["memory_total_mb"] is None
    assert gpus[0]["problems"] == gpus[2]["problems"] == []


@pytest.mark.parametrize(("code", "reason"), [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) is not installed"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "the NVIDIA driver is not loaded"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "no permission to query the NVIDIA driver"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
     "the NVML library does not match the loaded NVIDIA driver (reboot after a driver upgrade)"),
])
def test_no_driver_means_not_known_with_the_reason(code: int, reason: str) -> None:
    facts = gpu_facts.gpu_facts(FakeNvml(init_error=code))
    assert facts == {"llmgw_gpus": None, "llmgw_gpus_unknown_reason": reason, "llmgw_gpu_host": NO_HOST}


def test_no_library_means_not_known_with_the_reason() -> None:
    facts = gpu_facts.gpu_facts(None)
    assert facts["llmgw_gpus"] is None
    assert facts["llmgw_gpus_unknown_reason"].startswith("nvidia-ml-py is not installed on the host")


def test_working_nvml_without_gpus_is_known_none() -> None:
    assert gpu_facts.gpu_facts(FakeNvml())["llmgw_gpus"] == []


def test_the_real_nvml_here_reports_no_driver() -> None:
    """This machine has nvidia-ml-py but no NVIDIA driver: the real call says so."""
    nvml = gpu.load_nvml()
    assert nvml is pynvml
    facts = gpu_facts.gpu_facts(nvml)
    assert facts == {"llmgw_gpus": None, "llmgw_gpus_unknown_reason":
                     "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) is not installed",
                     "llmgw_gpu_host": NO_HOST}
