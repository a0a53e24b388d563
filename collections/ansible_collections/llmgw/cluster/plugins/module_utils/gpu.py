# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""GPUs through NVML, as llmgw's placement needs them: pure Python, no Ansible import.

Kept free of Ansible so three callers share it: the `gpu_facts` module, the unit tests
(which hand in a substitute NVML object) and `scripts/gpu-check` (which runs on a GPU
machine with only python3 and nvidia-ml-py).

The NVML handle is anything with pynvml's function names (`nvmlInit`,
`nvmlDeviceGetCount`, ...) whose errors carry pynvml's numeric `value`. The real one
is the `pynvml` module of nvidia-ml-py.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Dict

GpuDict = Dict[str, Any]  # typing.Dict: hosts may run Python 3.8

# NVML return codes and clock-event bits: part of NVML's C ABI, so fixed across versions
# (spelled out here so an old pynvml without the newer names still works).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_FEATURE_ENABLED = 1

CLOCKS_EVENT_SW_THERMAL = 0x20
CLOCKS_EVENT_HW_THERMAL = 0x40
CLOCKS_EVENT_HW_POWER_BRAKE = 0x80

NO_LIBRARY_REASON = "nvidia-ml-py is not installed on the host (pip install nvidia-ml-py, or set llmgw_install_nvml)"

# Marketing memory sizes NVIDIA sells, in GB; a GPU's class takes the nearest one, since
# NVML reports usable memory (an "80GB" H100 shows 81559 MiB, an "48GB" L40S 46068 MiB).
NOMINAL_GB = (4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 120, 141, 144, 180, 192, 288)
_VENDOR_WORDS = {"NVIDIA", "TESLA", "GEFORCE", "QUADRO"}
_GB_IN_NAME = re.compile(r"(?<![0-9])([0-9]{1,3})\s*GB\b", re.IGNORECASE)


def error_code(exc: BaseException) -> int | None:
    """The NVML return code an exception carries (pynvml's NVMLError.value), or None."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def nominal_gb(memory_total_mb: int) -> int:
    """The marketed size of a GPU's memory from what NVML reports (MiB)."""
    gib = memory_total_mb / 1024.0
    return min(NOMINAL_GB, key=lambda n: (abs(n - gib), n))


def gpu_class(name: str, memory_total_mb: int | None) -> str:
    """A placement class such as `H100-80GB` from NVML's name and memory.

    The model comes from the name without vendor words ("NVIDIA H100 80GB HBM3" ->
    H100, "NVIDIA A100-SXM4-40GB" -> A100, "NVIDIA GeForce RTX 4090" -> RTX4090); the
    size from the name when it says one, else the nominal size nearest the memory.
    Always MODEL-NNGB, so one rule covers every part and the catalog can name any.
    """
    tokens = [t for t in re.split(r"[\s_-]+", name.strip()) if t and t.upper() not in _VENDOR_WORDS]
    if not tokens:
        return "UNKNOWN"
    model = tokens[0].upper()
    if model == "RTX" and len(tokens) > 1:
        model = tokens[1].upper() if tokens[1].upper().startswith("A") else "RTX" + tokens[1].upper()
    size = None
    match = _GB_IN_NAME.search(name)
    if match and not model.startswith("GH"):  # "GH200 480GB" names the superchip's total
        size = int(match.group(1))
    elif memory_total_mb:
        size = nominal_gb(memory_total_mb)
    return "%s-%dGB" % (model, size) if size else model


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _lost(index: int, exc: BaseException) -> str:
    return "GPU %d is lost or inaccessible (%s): it fell off the bus or needs a reset" % (index, exc)


def health_problems(nvml: Any, handle: Any, index: int) -> list[str]:
    """Every problem that keeps this GPU out of placement, each as a sentence.

    A query the GPU does not support (ECC on consumer parts, row remapping before
    Ampere) says nothing about health and is skipped; a GPU lost mid-query is a problem.
    """
    problems: list[str] = []

    def query(fn: str, *args: int) -> Any:
        try:
            return getattr(nvml, fn)(handle, *args)
        except AttributeError:
            return None  # an older pynvml without this call
        except Exception as exc:  # NVMLError
            code = error_code(exc)
            if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
                raise
            return None

    ecc = query("nvmlDeviceGetTotalEccErrors", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
    if ecc:
        problems.append("GPU %d has %d uncorrectable ECC error%s since the driver loaded"
                        % (index, ecc, "" if ecc == 1 else "s"))
    pending = query("nvmlDeviceGetRetiredPagesPendingStatus")
    if pending == NVML_FEATURE_ENABLED:
        problems.append("GPU %d has retired pages pending: reset the GPU to retire them" % index)
    rows = query("nvmlDeviceGetRemappedRows")
    if rows:
        _corr, _unc, row_pending, row_failure = rows
        if row_failure:
            problems.append("GPU %d had a row-remapping failure: the GPU needs service" % index)
        elif row_pending:
            problems.append("GPU %d has row remapping pending: reset the GPU to apply it" % index)
    reasons = query("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = query("nvmlDeviceGetCurrentClocksThrottleReasons")
    if reasons:
        if reasons & (CLOCKS_EVENT_HW_THERMAL | CLOCKS_EVENT_SW_THERMAL):
            problems.append("GPU %d is thermally throttled: check its cooling" % index)
        if reasons & CLOCKS_EVENT_HW_POWER_BRAKE:
            problems.append("GPU %d is power-brake throttled: check the power supply" % index)
    return problems


def _init_reason(exc: BaseException) -> str:
    code = error_code(exc)
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) is not installed"
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "the NVIDIA driver is not loaded"
    if code == NVML_ERROR_NO_PERMISSION:
        return "no permission to query the NVIDIA driver"
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "the NVML library does not match the loaded NVIDIA driver (reboot after a driver upgrade)"
    return "NVML could not start: %s" % exc


def collect_gpus(nvml: Any) -> tuple[list[GpuDict] | None, str | None]:
    """(gpus, reason): a list of GPU dicts, or None with the reason nothing is known.

    `nvml` None means nvidia-ml-py is missing. Never raises for a missing driver or
    library: those are facts about the host, not failures of the play.
    """
    if nvml is None:
        return None, NO_LIBRARY_REASON
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return None, _init_reason(exc)
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            return None, "NVML could not count the GPUs: %s" % exc
        gpus: list[GpuDict] = []
        for index in range(count):
            gpus.append(_one_gpu(nvml, index))
        return gpus, None
    finally:
        with contextlib.suppress(Exception):  # shutting down must not hide what was read
            nvml.nvmlShutdown()


def _one_gpu(nvml: Any, index: int) -> GpuDict:
    gpu: GpuDict = {"index": index, "uuid": "unknown-%d" % index, "name": "unknown", "gpu_class": "UNKNOWN",
           "memory_total_mb": None, "memory_used_mb": None, "problems": []}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpu["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))
        gpu["name"] = _text(nvml.nvmlDeviceGetName(handle))
        try:
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpu["memory_total_mb"] = int(mem.total) // (1024 * 1024)
            gpu["memory_used_mb"] = int(mem.used) // (1024 * 1024)
        except Exception as exc:
            if error_code(exc) in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
                raise
        gpu["gpu_class"] = gpu_class(gpu["name"], gpu["memory_total_mb"])
        gpu["problems"] = health_problems(nvml, handle, index)
    except Exception as exc:
        gpu["problems"] = [_lost(index, exc)]
    return gpu


def load_nvml() -> Any:
    """The real NVML binding, or None when nvidia-ml-py is not importable."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml
