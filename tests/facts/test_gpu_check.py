"""scripts/gpu-check: with Ansible (the module file run as Ansible runs it) and without
(system python3, no Ansible, no nvidia-ml-py); its summary of GPUs via the NVML substitute."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.support.facts import FakeGpu, FakeNvml, module

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check"


def load_script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_here_through_the_module_file() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip() == ("No GPUs known (gpu_facts module): no NVIDIA driver: the NVML library "
                                   "(libnvidia-ml.so.1) is not installed")


def test_here_without_ansible_or_nvidia_ml_py() -> None:
    """Debian's own python3 has neither Ansible nor nvidia-ml-py."""
    proc = subprocess.run(["/usr/bin/python3", str(SCRIPT)], capture_output=True, text=True, check=False,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("No GPUs known (gpu module_util, without Ansible): nvidia-ml-py is not installed")


def test_summary_of_gpus_and_their_problems() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(uuid="GPU-a", used_mib=100), FakeGpu(uuid="GPU-b", ecc_uncorrected=4)])
    result = {"changed": False, "ansible_facts": module("gpu_facts").gpu_facts(nvml)}
    text = load_script().summary(result, "test")
    assert text.splitlines() == [
        "2 GPUs (test), 1 healthy:",
        "  GPU 0  H100-80GB    NVIDIA H100 80GB HBM3  GPU-a  100/81559 MiB used",
        "  GPU 1  H100-80GB    NVIDIA H100 80GB HBM3  GPU-b  0/81559 MiB used",
        "      problem: GPU 1 has 4 uncorrectable ECC errors since the driver loaded",
    ]
