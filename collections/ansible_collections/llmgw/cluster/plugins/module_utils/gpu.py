# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# Apache License 2.0 (see LICENSE at the root of the llmgw repository)
"""GPUs through NVML, as llmgw's placement needs them: pure Python, no Ansible import.

Kept free of Ansible so four callers share it: the `gpu_facts` module, the unit tests
(which hand in a substitute NVML object), `scripts/gpu-check` and `scripts/device-check`
(which run on a GPU machine with only python3 and nvidia-ml-py).

The NVML handle is anything with pynvml's function names (`nvmlInit`,
`nvmlDeviceGetCount`, ...) whose errors carry pynvml's numeric `value`. The real one
is the `pynvml` module of nvidia-ml-py.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.llmgw.cluster.plugins.module_utils.host_io import Run
from ansible_collections.llmgw.cluster.plugins.module_utils.topology import (
    gpu_topology,
    numa_node,
    nvlink_peers,
    pci_root,
)
from ansible_collections.llmgw.cluster.plugins.module_utils.xid import (
    Xid,
    parse_kernel_log,
    pci_key_of_bus_id,
    read_kernel_log,
    sentences,
)

GpuDict = Dict[str, Any]  # typing.Dict: hosts may run Python 3.8

# NVML return codes and clock-event bits: part of NVML's C ABI, so fixed across versions
# (spelled out here so an old pynvml without the newer names still works).
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_TIMEOUT = 10
# Answers that say a query does not apply to this GPU or driver: nothing about its health.
NOT_APPLICABLE = (NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)
NVML_SUCCESS = 0

NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
RECOVERY_ACTIONS = {1: "a GPU reset", 2: "a node reboot", 3: "draining its peer-to-peer traffic",
                    4: "draining and a GPU reset", 5: "recovering its IMEX domain", 6: "a PCIe bus reset",
                    7: "a system reboot"}
NVML_NVLINK_MAX_LINKS = 18  # links per GPU up to Blackwell; the loop stops at the first link not there
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVLINK_COUNTERS = ((NVML_NVLINK_ERROR_DL_RECOVERY, "recovery"), (NVML_NVLINK_ERROR_DL_REPLAY, "replay"),
                   (NVML_NVLINK_ERROR_DL_CRC_FLIT, "CRC"))
NVML_PERF_POLICY_POWER = 0
NVML_PERF_POLICY_THERMAL = 1
nvmlEventTypeXidCriticalError = 0x8
# An NVSwitch system's GPU joins the fabric through nvidia-fabricmanager; until it has, CUDA
# cannot use it. States of nvmlDeviceGetGpuFabricInfo (R525+; NotSupported without NVSwitch).
FABRIC_STATES = {1: "not started", 2: "in progress"}
NVML_GPU_FABRIC_STATE_COMPLETED = 3

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


class Health:
    """What one GPU's queries found: problems keep it out of placement, notes do not, and
    `unknown` says which checks could not be read (a GPU with no problem but something
    unknown is of unknown health, which is not placed unless the operator allows it)."""

    def __init__(self) -> None:
        self.problems: List[str] = []
        self.notes: List[str] = []
        self.unknown: List[str] = []
        self.nvswitch = False  # NVML answered for its NVSwitch fabric: an NVSwitch system


def _querier(nvml: Any, handle: Any, index: int, health: Health) -> Callable[..., Any]:
    def query(fn: str, *args: Any, what: str = "") -> Any:
        """The answer, or None when the call does not apply; a lost GPU raises."""
        try:
            return getattr(nvml, fn)(handle, *args)
        except AttributeError:
            return None  # an older pynvml without this call
        except Exception as exc:  # NVMLError
            code = error_code(exc)
            if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
                raise
            if code not in NOT_APPLICABLE and what:
                health.unknown.append("GPU %d: %s could not be read (%s)" % (index, what, exc))
            return None
    return query


def read_health(nvml: Any, handle: Any, index: int) -> Health:
    """Everything NVML says about this GPU's health, each problem and note a sentence.

    A query the GPU does not support (ECC on consumer parts, row remapping before
    Ampere, NVLink on PCIe cards) says nothing about health and is skipped; one that
    fails otherwise leaves that part unknown; a GPU lost mid-query is a problem.
    """
    health = Health()
    problems = health.problems
    query = _querier(nvml, handle, index, health)

    ecc = query("nvmlDeviceGetTotalEccErrors", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                what="uncorrectable ECC errors")
    if ecc:
        problems.append("GPU %d has %d uncorrectable ECC error%s since the driver loaded"
                        % (index, ecc, "" if ecc == 1 else "s"))
    pending = query("nvmlDeviceGetRetiredPagesPendingStatus", what="retired pages")
    if pending == NVML_FEATURE_ENABLED:
        problems.append("GPU %d has retired pages pending: reset the GPU to retire them" % index)
    rows = query("nvmlDeviceGetRemappedRows", what="row remapping")
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
    _recovery(nvml, handle, index, health)
    _fabric(nvml, handle, index, health)
    _pcie(query, index, health)
    _nvlink(nvml, handle, index, health)
    _violations(query, index, health)
    return health


def _recovery(nvml: Any, handle: Any, index: int, health: Health) -> None:
    """NVML's recovery-action field (drivers from R565 have it; older ones answer not supported)."""
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    except AttributeError:
        return
    except Exception as exc:
        code = error_code(exc)
        if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
            raise
        if code not in NOT_APPLICABLE:
            health.unknown.append("GPU %d: its recovery action could not be read (%s)" % (index, exc))
        return
    value = values[0]
    if value.nvmlReturn != NVML_SUCCESS:
        return  # this driver does not have the field
    action = int(value.value.uiVal)
    if action:
        health.problems.append("GPU %d needs %s: the driver's recovery action is %d" % (
            index, RECOVERY_ACTIONS.get(action, "an action NVML names %d" % action), action))


def _fabric(nvml: Any, handle: Any, index: int, health: Health) -> None:
    """On an NVSwitch system, a GPU that has not joined the fabric cannot run CUDA: a problem
    (fabric manager down leaves every GPU of the host so, which is what makes it host-wide)."""
    make = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if make is None:
        return  # an older pynvml
    info = make()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except Exception as exc:
        code = error_code(exc)
        if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
            raise
        if code not in NOT_APPLICABLE and code is not None:
            health.unknown.append("GPU %d: its NVSwitch fabric state could not be read (%s)" % (index, exc))
        return
    state = int(info.state)
    # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (0): some drivers answer so on GPUs without NVSwitch
    health.nvswitch = state != 0
    if state in FABRIC_STATES:
        health.problems.append("GPU %d has not joined the NVSwitch fabric (%s): start nvidia-fabricmanager and "
                               "check its log" % (index, FABRIC_STATES[state]))
    elif state == NVML_GPU_FABRIC_STATE_COMPLETED and int(info.status) != NVML_SUCCESS:
        health.problems.append("GPU %d failed to join the NVSwitch fabric (NVML error %d): check "
                               "nvidia-fabricmanager's log" % (index, int(info.status)))


def _pcie(query: Callable[..., Any], index: int, health: Health) -> None:
    """A link narrower than the GPU and slot allow is a fault (a riser, a seating); a slower
    generation is not: the link drops its generation when idle to save power."""
    width, widest = query("nvmlDeviceGetCurrPcieLinkWidth"), query("nvmlDeviceGetMaxPcieLinkWidth")
    gen, top = query("nvmlDeviceGetCurrPcieLinkGeneration"), query("nvmlDeviceGetMaxPcieLinkGeneration")
    if width and widest and width < widest:
        health.problems.append("GPU %d's PCIe link is degraded: x%d of x%d lanes (gen %s of %s): reseat the "
                               "GPU or its riser" % (index, width, widest, gen or "?", top or "?"))
    elif gen and top and gen < top:
        health.notes.append("GPU %d's PCIe link runs at gen %d of %d now (normal while idle)" % (index, gen, top))


def _nvlink(nvml: Any, handle: Any, index: int, health: Health) -> None:
    """A link down while others are up is a problem; error counters are notes (fatal NVLink
    errors also come as Xid 74)."""
    up: List[int] = []
    down: List[int] = []
    counts: Dict[str, int] = {}
    for link in range(NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except AttributeError:
            return
        except Exception as exc:
            if error_code(exc) in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
                raise
            break  # no such link (or no NVLink at all): the GPU's links are numbered from 0
        (up if state == NVML_FEATURE_ENABLED else down).append(link)
        for counter, name in NVLINK_COUNTERS:
            try:
                counts[name] = counts.get(name, 0) + int(nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
            except Exception as exc:
                if error_code(exc) in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
                    raise
    if up and down:
        health.problems.append("GPU %d has NVLink%s %s down (%d of %d up): reset the GPU and check the NVLink "
                               "connections" % (index, "s" if len(down) > 1 else "", ", ".join(map(str, down)),
                                                len(up), len(up) + len(down)))
    errors = ", ".join("%d %s" % (n, name) for name, n in counts.items() if n)
    if errors:
        health.notes.append("GPU %d's NVLinks counted errors since the driver loaded: %s" % (index, errors))


def _violations(query: Callable[..., Any], index: int, health: Health) -> None:
    """Time held back by the thermal or power limit since the driver loaded: notes (a GPU
    throttled now is a problem, above)."""
    for policy, name in ((NVML_PERF_POLICY_THERMAL, "thermal"), (NVML_PERF_POLICY_POWER, "power")):
        seen = query("nvmlDeviceGetViolationStatus", policy)
        if seen is not None and seen.violationTime:
            health.notes.append("GPU %d was held back by its %s limit for %.1f s since the driver loaded"
                                % (index, name, seen.violationTime / 1e9))


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


def collect(nvml: Any, run: Optional[Run] = None, event_wait_ms: int = 0, root: str = "/") -> Dict[str, Any]:
    """The facts for an NVML handle: `gpus` (None when nothing is known, with `reason`) and
    `host`: the driver and CUDA versions and host-wide notes.

    `nvml` None means nvidia-ml-py is missing. `run` reads the kernel log for Xid errors
    (None: not read, so every GPU's Xid history is unknown). `event_wait_ms` > 0 also
    listens that long for NVML's critical-Xid events. `root` is where /sys is read (the
    GPUs' NUMA nodes and PCIe roots; tests change it). Never raises for a missing driver or
    library: those are facts about the host, not failures of the play.
    """
    host: Dict[str, Any] = {"driver_version": None, "cuda_version": None, "kernel_log": None, "notes": [],
                            "fabric_manager": None}
    out: Dict[str, Any] = {"gpus": None, "reason": None, "host": host}
    if nvml is None:
        out["reason"] = NO_LIBRARY_REASON
        return out
    try:
        nvml.nvmlInit()
    except Exception as exc:
        out["reason"] = _init_reason(exc)
        return out
    try:
        host["driver_version"] = _driver(nvml)
        host["cuda_version"] = _cuda(nvml)
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            out["reason"] = "NVML could not count the GPUs: %s" % exc
            return out
        handles: Dict[int, Any] = {}
        gpus: List[GpuDict] = []
        for index in range(count):
            gpus.append(_one_gpu(nvml, index, handles))
        xids, where, unread = _kernel_xids(run)
        host["kernel_log"] = where or None
        if event_wait_ms > 0:
            events, event_note = _event_xids(nvml, handles, event_wait_ms)
            xids += events
            if event_note:
                host["notes"].append(event_note)
        _assign_xids(gpus, xids, unread, host)
        _place_gpus(nvml, gpus, handles, root)
        host["fabric_manager"] = _fabric_manager(gpus, run)
        out["gpus"] = gpus
        return out
    finally:
        with contextlib.suppress(Exception):  # shutting down must not hide what was read
            nvml.nvmlShutdown()


def collect_gpus(nvml: Any) -> Tuple[Optional[List[GpuDict]], Optional[str]]:
    """(gpus, reason) from NVML alone (no kernel log): `scripts/gpu-check`'s quick look."""
    found = collect(nvml)
    return found["gpus"], found["reason"]


def _driver(nvml: Any) -> Optional[str]:
    try:
        return _text(nvml.nvmlSystemGetDriverVersion())
    except Exception:
        return None


def _cuda(nvml: Any) -> Optional[str]:
    """The newest CUDA the driver supports: NVML's 12080 -> "12.8"."""
    try:
        value = int(nvml.nvmlSystemGetCudaDriverVersion())
    except Exception:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def _kernel_xids(run: Optional[Run]) -> Tuple[List[Tuple[str, Xid]], str, Optional[str]]:
    """(("kernel log", xid) pairs, the log's source, why it could not be read)."""
    if run is None:
        return [], "", "the kernel log was not read"
    text, source, reason = read_kernel_log(run)
    if text is None:
        return [], "", "the kernel log could not be read (%s)" % reason
    return [("kernel log", x) for x in parse_kernel_log(text)], source, None


def _event_xids(nvml: Any, handles: Dict[int, Any], wait_ms: int) -> Tuple[List[Tuple[str, Xid]], Optional[str]]:
    """Critical Xids NVML reports while we listen `wait_ms`: catches one the kernel log has
    not been flushed with yet. Unavailable events (containers, old drivers) are a note only."""
    found: List[Tuple[str, Xid]] = []
    try:
        events = nvml.nvmlEventSetCreate()
    except Exception as exc:
        return found, "NVML events are not available here (%s): Xids came from the kernel log only" % exc
    try:
        registered = 0
        for handle in handles.values():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, events)
                registered += 1
            except Exception:
                continue
        if not registered:
            return found, "no GPU here reports NVML Xid events: Xids came from the kernel log only"
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(events, wait_ms)
            except Exception as exc:
                if error_code(exc) != NVML_ERROR_TIMEOUT:
                    return found, "waiting for NVML events failed (%s)" % exc
                return found, None
            try:
                bus = _text(nvml.nvmlDeviceGetPciInfo(data.device).busId)
            except Exception:
                continue
            key = pci_key_of_bus_id(bus)
            if key:
                found.append(("NVML events", Xid(key, int(data.eventData), "reported while facts were gathered",
                                                 None)))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlEventSetFree(events)


def _assign_xids(gpus: List[GpuDict], xids: List[Tuple[str, Xid]], unread: Optional[str],
                 host: Dict[str, Any]) -> None:
    by_pci = {g["pci_bus_id"] and pci_key_of_bus_id(g["pci_bus_id"]): g for g in gpus}
    per: Dict[Tuple[str, str], List[Xid]] = {}
    for where, x in xids:
        per.setdefault((x.pci, where), []).append(x)
    for (pci, where), seen in sorted(per.items()):
        g = by_pci.get(pci)
        if g is None:
            numbers = ", ".join(sorted({str(x.xid) for x in seen}, key=int))
            host["notes"].append("Xid %s at PCI %s in the %s: no GPU NVML lists has that address" % (
                numbers, pci, where))
            continue
        problems, notes = sentences(g["index"], seen, where)
        g["problems"] += problems
        g["notes"] += notes
    if unread:
        for g in gpus:
            g["unknown"].append("GPU %d: Xid errors since boot are not known: %s" % (g["index"], unread))


def _one_gpu(nvml: Any, index: int, handles: Dict[int, Any]) -> GpuDict:
    gpu: GpuDict = {"index": index, "uuid": "unknown-%d" % index, "name": "unknown", "gpu_class": "UNKNOWN",
                    "memory_total_mb": None, "memory_used_mb": None, "pci_bus_id": None, "vbios": None,
                    "numa_node": None, "pci_root": None, "topology": None, "nvlink_peers": None,
                    "problems": [], "notes": [], "unknown": []}
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
        with contextlib.suppress(Exception):
            gpu["pci_bus_id"] = _bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))
        with contextlib.suppress(Exception):
            gpu["vbios"] = _text(nvml.nvmlDeviceGetVbiosVersion(handle))
        handles[index] = handle
        health = read_health(nvml, handle, index)
        gpu["problems"], gpu["notes"], gpu["unknown"] = health.problems, health.notes, health.unknown
        gpu["_nvswitch"] = health.nvswitch
    except Exception as exc:
        gpu["problems"] = [_lost(index, exc)]
    return gpu


def _place_gpus(nvml: Any, gpus: List[GpuDict], handles: Dict[int, Any], root: str) -> None:
    """Each GPU's NUMA node and PCIe root (sysfs), NVML's level to every other GPU, and its
    NVLink peers: what packs a shard's GPUs close together (llmgw.planner.topology)."""
    levels = gpu_topology(nvml, handles)
    by_bus = {pci_key_of_bus_id(g["pci_bus_id"]): g["index"] for g in gpus if g["pci_bus_id"]}
    for g in gpus:
        g["numa_node"] = numa_node(root, g["pci_bus_id"])
        g["pci_root"] = pci_root(root, g["pci_bus_id"])
        g["topology"] = levels.get(g["index"]) or None
        handle = handles.get(g["index"])
        g["nvlink_peers"] = None if handle is None else nvlink_peers(nvml, handle, by_bus, NVML_NVLINK_MAX_LINKS)
    # On an NVSwitch board the links end at switches, not GPUs: every GPU of the fabric reaches
    # every other over NVLink.
    switched = [g["index"] for g in gpus if g.get("_nvswitch") and g["nvlink_peers"] is not None]
    for g in gpus:
        if g["index"] in switched:
            g["nvlink_peers"] = sorted(set(g["nvlink_peers"]) | set(switched) - {g["index"]})


def _fabric_manager(gpus: List[GpuDict], run: Optional[Run]) -> Optional[str]:
    """nvidia-fabricmanager's state on an NVSwitch system: "active", "inactive", "failed"...
    (systemd's word), "not installed"; None on a host without NVSwitch GPUs (not needed) or
    when it could not be asked. A GPU that has not joined the fabric already says so itself;
    this is the host-wide cause, which keeps every GPU of the host out (llmgw.gpus)."""
    nvswitch = [g.pop("_nvswitch", False) for g in gpus]
    if run is None or not any(nvswitch):
        return None
    rc, out, _err = run(["systemctl", "is-active", "nvidia-fabricmanager.service"])
    word = out.strip().splitlines()[0] if out.strip() else ""
    if rc == 127:
        return None
    if word in ("active", "inactive", "failed", "activating", "deactivating", "reloading"):
        return word
    return "not installed" if rc == 4 else None


def _bus_id(text: str) -> Optional[str]:
    """NVML's `00000000:3B:00.0` as sysfs spells it: `0000:3b:00.0`."""
    key = pci_key_of_bus_id(text)
    return None if key is None else key + "." + (text.strip()[-1].lower() if "." in text else "0")


def load_nvml() -> Any:
    """The real NVML binding, or None when nvidia-ml-py is not importable."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml
