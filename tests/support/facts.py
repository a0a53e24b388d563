"""Helpers for the facts tests: the collection's modules, fake /proc and /sys trees, and
the one stand-in allowed here, a substitute for NVML (there is no GPU on this machine).

The substitute raises nvidia-ml-py's own exception classes with NVML's real return
codes, so the code under test handles exactly what pynvml raises on a real host.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml

from llmgw import ansible_content

PREFIX = "ansible_collections.llmgw.cluster.plugins"


def _on_path() -> None:
    path = str(ansible_content.collections_path())
    if path not in sys.path:
        sys.path.insert(0, path)


def module(name: str) -> ModuleType:
    """A module of the llmgw.cluster collection (gpu_facts, node_facts, ib_facts)."""
    _on_path()
    return importlib.import_module(f"{PREFIX}.modules.{name}")


def util(name: str) -> ModuleType:
    """A module_util of the collection, the same object the modules import."""
    _on_path()
    return importlib.import_module(f"{PREFIX}.module_utils.{name}")


def plugin(kind: str, name: str) -> ModuleType:
    """A plugin of the collection, e.g. plugin("filter", "fabric_probes")."""
    _on_path()
    return importlib.import_module(f"{PREFIX}.{kind}.{name}")


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Files under `root` (a fake `/`), e.g. {"proc/meminfo": "MemTotal: ..."}."""
    for rel, text in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# ---------------------------------------------------------------------------- NVML substitute


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    total_mib: int = 81559
    used_mib: int = 0
    ecc_uncorrected: int | None = 0  # None: not supported (consumer parts)
    pages_pending: int | None = 0
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corr, unc, pending, failure
    clock_events: int = 0
    lost: bool = False  # every query raises NVML_ERROR_GPU_IS_LOST


@dataclass
class _Mem:
    total: int
    used: int
    free: int


@dataclass
class FakeNvml:
    """pynvml's call surface over a list of FakeGpu; `init_error` makes nvmlInit fail."""

    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: int | None = None
    old_api: bool = False  # an older pynvml: no nvmlDeviceGetCurrentClocksEventReasons
    calls: list[str] = field(default_factory=list)
    shutdown: bool = False

    def __getattr__(self, name: str) -> Any:
        if name == "nvmlDeviceGetCurrentClocksEventReasons" and not self.old_api:
            return self._clock_events
        raise AttributeError(name)

    def _gpu(self, handle: int) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.gpus[index].lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self._gpu(handle).name.encode()  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> _Mem:
        g = self._gpu(handle)
        mib = 1024 * 1024
        return _Mem(total=g.total_mib * mib, used=g.used_mib * mib, free=(g.total_mib - g.used_mib) * mib)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        value = self._gpu(handle).ecc_uncorrected
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        value = self._gpu(handle).pages_pending
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        value = self._gpu(handle).remapped_rows
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _clock_events(self, handle: int) -> int:
        return self._gpu(handle).clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return self._gpu(handle).clock_events
