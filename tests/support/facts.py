"""Helpers for the facts tests: the collection's modules, fake /proc and /sys trees, and
the one stand-in allowed here, a substitute for NVML (there is no GPU on this machine).

The substitute raises nvidia-ml-py's own exception classes with NVML's real return
codes, so the code under test handles exactly what pynvml raises on a real host.
"""

from __future__ import annotations

import ctypes
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


def pci_device(files: dict[str, str], links: dict[str, str], bus_id: str, root_complex: str, numa: int) -> None:
    """A PCI device as sysfs shows it: its folder under /sys/devices below its root complex
    (`pci0000:15`) with `numa_node`, and the /sys/bus/pci/devices link to it."""
    folder = f"sys/devices/{root_complex}/{root_complex[3:]}:01.0/{bus_id}"
    files[f"{folder}/numa_node"] = f"{numa}\n"
    links[f"sys/bus/pci/devices/{bus_id}"] = f"../../../devices/{root_complex}/{root_complex[3:]}:01.0/{bus_id}"


def write_links(root: Path, links: dict[str, str]) -> Path:
    """Symbolic links under `root`: {"sys/bus/pci/devices/0000:1b:00.0": "../../../devices/..."}."""
    for rel, target in links.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    return root


# ---------------------------------------------------------------------------- NVML substitute
#
# The shape of the real pynvml: its function names and arguments, its NVMLError subclasses
# (NVMLError(code) makes NVMLError_NotSupported & co.), and its ctypes results - device
# handles are c_nvmlDevice_t pointers, PCI info an nvmlPciInfo_t, field values an array of
# c_nvmlFieldValue_t with their own nvmlReturn, events c_nvmlEventData_t naming the device.

_HANDLE_BASE = 0x7F0000001000
_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)  # an HGX board's GPUs


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


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
    bus: int | None = None  # PCI bus; None: the board's slot for its index
    vbios: str = "96.00.89.00.01"
    pcie: tuple[int, int, int, int] | None = (16, 16, 5, 5)  # width now, max width, gen now, max gen
    nvlinks: list[bool] | None = None  # per link, up; None: no NVLink (NotSupported)
    nvlink_errors: dict[int, int] = field(default_factory=dict)  # per counter, on each link
    violations_ns: dict[int, int] = field(default_factory=dict)  # NVML_PERF_POLICY_* -> ns
    recovery_action: int | None = 0  # None: the driver has no such field (nvmlReturn NotSupported)
    fabric: tuple[int, int] | None = None  # NVSwitch fabric (state, status); None: no NVSwitch (NotSupported)
    failing: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code it returns
    # Other GPU index -> NVML_TOPOLOGY_* (nvmlDeviceGetTopologyCommonAncestor); a pair neither
    # GPU names answers NotSupported, as an old driver does.
    topology: dict[int, int] = field(default_factory=dict)
    # Per NVLink (with nvlinks), what is at its far end: a GPU index, or None for an NVSwitch.
    nvlink_remote: list[int | None] = field(default_factory=list)


class FakeNvml:
    """pynvml's call surface over a list of FakeGpu; `init_error` makes nvmlInit fail;
    `events` are (GPU index, Xid) pairs delivered by nvmlEventSetWait_v2, then Timeout."""

    def __init__(self, gpus: list[FakeGpu] | None = None, init_error: int | None = None, old_api: bool = False,
                 events: list[tuple[int, int]] | None = None, events_error: int | None = None,
                 driver: str = "570.133.20", cuda: int = 12080) -> None:
        self.gpus = gpus or []
        self.init_error = init_error
        self.old_api = old_api  # an older pynvml: no nvmlDeviceGetCurrentClocksEventReasons
        self.events = list(events or [])
        self.events_error = events_error
        self.driver, self.cuda = driver, cuda
        self.calls: list[str] = []
        self.shutdown = False
        self.waits: list[int] = []

    def __getattr__(self, name: str) -> Any:
        if name == "nvmlDeviceGetCurrentClocksEventReasons" and not self.old_api:
            return self._clock_events
        if name.startswith("c_nvml") and not self.old_api:  # pynvml's own structures
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _handle(self, index: int) -> Any:
        return ctypes.cast(ctypes.c_void_p(_HANDLE_BASE + 16 * index), pynvml.c_nvmlDevice_t)

    def _index(self, handle: Any) -> int:
        assert isinstance(handle, pynvml.c_nvmlDevice_t), "NVML takes the handle nvmlDeviceGetHandleByIndex gave"
        address = ctypes.cast(handle, ctypes.c_void_p).value
        assert address is not None
        return (address - _HANDLE_BASE) // 16

    def _gpu(self, handle: Any, fn: str = "") -> FakeGpu:
        gpu = self.gpus[self._index(handle)]
        if gpu.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.failing:
            raise _error(gpu.failing[fn])
        return gpu

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise _error(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if self.gpus[index].lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self._handle(index)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._index(handle)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> bytes:
        return self._gpu(handle).name.encode()  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        g = self._gpu(handle)
        mib = 1024 * 1024
        return pynvml.c_nvmlMemory_t(total=g.total_mib * mib, free=(g.total_mib - g.used_mib) * mib,
                                     used=g.used_mib * mib)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        index = self._index(handle)
        g = self._gpu(handle, "nvmlDeviceGetPciInfo")
        bus = _BUSES[index % len(_BUSES)] if g.bus is None else g.bus
        return pynvml.nvmlPciInfo_t(busIdLegacy=b"0000:%02X:00.0" % bus, domain=0, bus=bus, device=0,
                                    pciDeviceId=0x233010DE, pciSubSystemId=0x16C110DE,
                                    busId=b"00000000:%02X:00.0" % bus)

    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str:
        return self._gpu(handle).vbios

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        value = self._gpu(handle, "nvmlDeviceGetTotalEccErrors").ecc_uncorrected
        if value is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        value = self._gpu(handle, "nvmlDeviceGetRetiredPagesPendingStatus").pages_pending
        if value is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        value = self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped_rows
        if value is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _clock_events(self, handle: Any) -> int:
        return self._gpu(handle).clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._gpu(handle).clock_events

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> Any:
        g = self._gpu(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, fid in enumerate(field_ids):
            values[i].fieldId = fid
            if fid == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and g.recovery_action is not None:
                values[i].nvmlReturn = pynvml.NVML_SUCCESS
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = g.recovery_action
            else:
                values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, info_ref: Any) -> int:
        """As pynvml's: fills the c_nvmlGpuFabricInfo_t the caller passes by reference."""
        fabric = self._gpu(handle, "nvmlDeviceGetGpuFabricInfo").fabric
        info = info_ref._obj
        assert isinstance(info, pynvml.c_nvmlGpuFabricInfo_t)
        if fabric is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info.state, info.status = fabric
        return int(pynvml.NVML_SUCCESS)

    def _pcie(self, handle: Any, part: int) -> int:
        pcie = self._gpu(handle).pcie
        if pcie is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pcie[part]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, 0)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, 1)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, 2)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, 3)

    def _link(self, handle: Any, link: int) -> bool:
        links = self._gpu(handle).nvlinks
        if links is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= len(links):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        return pynvml.NVML_FEATURE_ENABLED if self._link(handle, link) else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        a, b = self._gpu(device1), self._gpu(device2)
        i, j = self._index(device1), self._index(device2)
        level = a.topology.get(j, b.topology.get(i))
        if level is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return level

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        """As pynvml's (the _v2 call): the PCI info of whatever is at the link's far end."""
        self._link(handle, link)
        remote = self._gpu(handle).nvlink_remote
        peer = remote[link] if link < len(remote) else None
        bus = 0x07 if peer is None else (_BUSES[peer % len(_BUSES)] if self.gpus[peer].bus is None
                                         else self.gpus[peer].bus)  # 07: an NVSwitch's own bus
        return pynvml.nvmlPciInfo_t(busIdLegacy=b"0000:%02X:00.0" % bus, domain=0, bus=bus, device=0,
                                    pciDeviceId=0x22A310DE, pciSubSystemId=0, busId=b"00000000:%02X:00.0" % bus)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        self._link(handle, link)
        return self._gpu(handle).nvlink_errors.get(counter, 0)

    def nvmlDeviceGetViolationStatus(self, handle: Any, policy: int) -> Any:
        g = self._gpu(handle, "nvmlDeviceGetViolationStatus")
        return pynvml.c_nvmlViolationTime_t(referenceTime=1_000_000_000_000,
                                            violationTime=g.violations_ns.get(policy, 0))

    def nvmlEventSetCreate(self) -> Any:
        if self.events_error is not None:
            raise _error(self.events_error)
        return pynvml.c_nvmlEventSet_t()

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        assert event_types == pynvml.nvmlEventTypeXidCriticalError
        assert isinstance(event_set, pynvml.c_nvmlEventSet_t)
        self._gpu(handle)

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        self.waits.append(timeout_ms)
        if not self.events:
            raise _error(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.events.pop(0)
        return pynvml.c_nvmlEventData_t(device=self._handle(index), eventType=pynvml.nvmlEventTypeXidCriticalError,
                                        eventData=xid, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self.calls.append("event-free")
