"""Topology facts: each GPU's NUMA node, PCIe root, NVML level to every other GPU and NVLink
peers; each InfiniBand adapter's PCI address and NUMA node; fabric manager and RDMA versions.

NVML is the substitute of tests/support/facts.py (pynvml's functions, constants, errors and
structures); sysfs is a fake tree with the links the kernel makes, read by the real code.
"""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest
from pydantic import ValidationError

from llmgw.facts.records import Gpu, HostFacts, IbAdapter
from llmgw.gpus import gpu_left_out
from llmgw.inventory import Host
from tests.support.facts import FakeGpu, FakeNvml, module, pci_device, util, write_links, write_tree

gpu_facts = module("gpu_facts")
ib_facts = module("ib_facts")

BUSES = ("1b", "43", "52", "61", "9d", "c3", "d1", "df")  # the substitute's bus per GPU index
ROOTS = ("pci0000:15", "pci0000:15", "pci0000:3a", "pci0000:3a", "pci0000:9a", "pci0000:9a", "pci0000:c0",
         "pci0000:c0")
ADAPTERS = (("mlx5_0", "0000:1c:00.0", "pci0000:15", 0), ("mlx5_1", "0000:3b:00.0", "pci0000:3a", 0),
            ("mlx5_2", "0000:9b:00.0", "pci0000:9a", 1), ("mlx5_3", "0000:c1:00.0", "pci0000:c0", 1))


def level(a: int, b: int) -> int:
    """Two NUMA nodes of four GPUs, two GPUs per PCIe switch."""
    if a // 2 == b // 2:
        return pynvml.NVML_TOPOLOGY_SINGLE
    return pynvml.NVML_TOPOLOGY_NODE if a // 4 == b // 4 else pynvml.NVML_TOPOLOGY_SYSTEM


def two_numa_host(tmp_path: Path) -> Path:
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for i, bus in enumerate(BUSES):
        pci_device(files, links, f"0000:{bus}:00.0", ROOTS[i], i // 4)
    for name, bus, root, numa in ADAPTERS:
        pci_device(files, links, bus, root, numa)
        files[f"sys/class/infiniband/{name}/node_guid"] = f"b83f:d203:00a2:00{int(name[-1]):02x}\n"
        files[f"sys/class/infiniband/{name}/ports/1/state"] = "4: ACTIVE\n"
        links[f"sys/class/infiniband/{name}/device"] = f"../../../{bus}"
    write_tree(tmp_path, files)
    return write_links(tmp_path, links)


def gpus(**kw: object) -> list[FakeGpu]:
    return [FakeGpu(uuid=f"GPU-{i}", topology={j: level(i, j) for j in range(8) if j != i}, **kw)  # type: ignore[arg-type]
            for i in range(8)]


def test_numa_nodes_roots_and_nvml_levels(tmp_path: Path) -> None:
    root = two_numa_host(tmp_path)
    found = gpu_facts.gpu_facts(FakeNvml(gpus=gpus()), root=str(root))["llmgw_gpus"]
    assert [g["numa_node"] for g in found] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g["pci_root"] for g in found] == list(ROOTS)
    assert found[0]["topology"] == {1: "single", 2: "node", 3: "node", 4: "system", 5: "system", 6: "system",
                                    7: "system"}
    assert found[5]["topology"][4] == "single" and found[5]["topology"][6] == "node"
    assert all(g["nvlink_peers"] is None for g in found)  # PCIe cards: no NVLink
    # What the module returns is what the facts records take.
    assert Gpu.model_validate(found[0]).topology == {1: "single", 2: "node", 3: "node", 4: "system", 5: "system",
                                                     6: "system", 7: "system"}


def test_nvlink_bridges_name_their_peers(tmp_path: Path) -> None:
    sixteen = gpus()
    for i, g in enumerate(sixteen):  # NVLink bridges joining GPUs pairwise (0-1, 2-3...)
        g.nvlinks, g.nvlink_remote = [True, True, False], [i ^ 1, i ^ 1, i ^ 1]
    found = gpu_facts.gpu_facts(FakeNvml(gpus=sixteen), root=str(tmp_path))["llmgw_gpus"]
    assert [g["nvlink_peers"] for g in found[:4]] == [[1], [0], [3], [2]]
    assert found[0]["numa_node"] is None and found[0]["pci_root"] is None  # no sysfs entry: not known


def test_an_nvswitch_board_is_nvlink_everywhere_and_its_fabric_manager_asked() -> None:
    board = [FakeGpu(uuid=f"GPU-{i}", nvlinks=[True] * 18, nvlink_remote=[None] * 18, fabric=(3, 0))
             for i in range(8)]
    asked: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        asked.append(argv)
        if argv[0] == "systemctl":
            return 3, "inactive\n", ""
        return 1, "", "not here"

    facts = gpu_facts.gpu_facts(FakeNvml(gpus=board), run=run)
    assert [g["nvlink_peers"] for g in facts["llmgw_gpus"]][:2] == [[1, 2, 3, 4, 5, 6, 7], [0, 2, 3, 4, 5, 6, 7]]
    assert facts["llmgw_gpu_host"]["fabric_manager"] == "inactive"
    assert ["systemctl", "is-active", "nvidia-fabricmanager.service"] in asked
    assert all("_nvswitch" not in g for g in facts["llmgw_gpus"])


def test_no_nvswitch_no_fabric_manager_question() -> None:
    asked: list[list[str]] = []
    facts = gpu_facts.gpu_facts(FakeNvml(gpus=gpus()), run=lambda argv: (asked.append(argv), (1, "", ""))[1])
    assert facts["llmgw_gpu_host"]["fabric_manager"] is None
    assert not [a for a in asked if a[0] == "systemctl"]


def test_fabric_manager_down_keeps_every_gpu_of_the_host_out() -> None:
    host = Host(name="hgx-01", groups=frozenset({"llmgw_nodes"}))
    g = Gpu(index=3, uuid="GPU-3", name="NVIDIA H100 80GB HBM3", gpu_class="H100-80GB")
    assert gpu_left_out(g, host, "active") is None
    why = gpu_left_out(g, host, "failed")
    assert why is not None and why.startswith("GPU 3 unusable: nvidia-fabricmanager is failed")
    assert "systemctl start nvidia-fabricmanager" in why


def test_adapters_pci_address_and_numa_node(tmp_path: Path) -> None:
    root = two_numa_host(tmp_path)
    versions = {"dpkg-query": (0, "50.0-2", ""), "ofed_info": (127, "", "ofed_info: not found")}
    facts = ib_facts.ib_facts({"root": str(root), "ibnetdiscover": False, "ibnetdiscover_path": "ibnetdiscover",
                               "timeout": 10}, run=lambda argv: versions.get(argv[0], (1, "", "")))
    got = [(a["name"], a["pci_bus_id"], a["pci_root"], a["numa_node"]) for a in facts["llmgw_ib_adapters"]]
    assert got == list(ADAPTERS)
    assert facts["llmgw_ib_stack"] == {"rdma_core": "50.0-2", "ofed": None}
    assert IbAdapter.model_validate(facts["llmgw_ib_adapters"][2]).numa_node == 1


def test_ofed_version_from_ofed_info(tmp_path: Path) -> None:
    root = two_numa_host(tmp_path)
    versions = {"dpkg-query": (1, "", "no packages found"), "rpm": (0, "2404mlnx51", ""),
                "ofed_info": (0, "MLNX_OFED_LINUX-24.10-1.1.4.0:\n", "")}
    facts = ib_facts.ib_facts({"root": str(root), "ibnetdiscover": False, "ibnetdiscover_path": "ibnetdiscover",
                               "timeout": 10}, run=lambda argv: versions.get(argv[0], (1, "", "")))
    assert facts["llmgw_ib_stack"] == {"rdma_core": "2404mlnx51", "ofed": "24.10-1.1.4.0"}


@pytest.mark.parametrize(("field", "value", "says"), [
    ("numa_node", -1, "greater than or equal to 0"),
    ("numa_node", "0", "valid integer"),
    ("numa_node", True, "valid integer"),
    ("pci_root", "../../etc", "should match pattern"),
    ("topology", {"1": "nvlink"}, "'internal', 'single', 'multiple', 'hostbridge', 'node' or 'system'"),
    ("topology", {"-1": "single"}, "greater than or equal to 0"),
    ("topology", {"5000": "system"}, "less than or equal to 1023"),
    ("nvlink_peers", ["1; rm"], "valid integer"),
])
def test_hostile_gpu_topology_is_refused_with_what_is_wrong(field: str, value: object, says: str) -> None:
    doc = {"index": 0, "uuid": "GPU-0", "name": "x", "gpu_class": "X-8GB", field: value}
    with pytest.raises(ValidationError) as err:
        Gpu.model_validate(doc)
    assert says in str(err.value)
    assert field in str(err.value)


@pytest.mark.parametrize(("field", "value"), [("pci_bus_id", "0000:3b:00.0\nExecStart=/bin/sh"),
                                              ("pci_bus_id", "3b:00.0"), ("numa_node", 4096)])
def test_hostile_adapter_placement_is_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        IbAdapter.model_validate({"name": "mlx5_0", field: value})


def test_stack_versions_are_bounded_words() -> None:
    with pytest.raises(ValidationError, match="rdma_core"):
        HostFacts.model_validate({"host": "h", "gathered_at": "2026-01-01T00:00:00Z", "rdma_core": "50 && reboot"})
    with pytest.raises(ValidationError, match="fabric_manager"):
        HostFacts.model_validate({"host": "h", "gathered_at": "2026-01-01T00:00:00Z", "fabric_manager": "fine"})


def test_a_unit_naming_gpus_by_uuid_reports_their_indices_from_llmgw_gpus() -> None:
    """CUDA_VISIBLE_DEVICES by UUID names no index; LLMGW_GPUS keeps them for other states' plans."""
    units = util("units")
    show = ("Id=llmgw-big-1-0.service\nEnvironment=LLMGW_LINEAGE=5b0c CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb "
            "LLMGW_GPUS=4,5\nMemoryCurrent=1048576\n")
    found = units.unit_environments(lambda argv: (0, show, ""), ["llmgw-big-1-0.service"])
    assert found == {"llmgw-big-1-0.service": ("5b0c", [4, 5], 1)}


def test_a_fabric_state_of_not_supported_is_no_nvswitch_system() -> None:
    """Some drivers answer nvmlDeviceGetGpuFabricInfo with state NOT_SUPPORTED on PCIe cards:
    that is no NVSwitch, and the fabric manager is not asked (an absent one would leave every GPU out)."""
    asked: list[list[str]] = []
    cards = [FakeGpu(uuid=f"GPU-{i}", fabric=(pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, 0)) for i in range(2)]
    facts = gpu_facts.gpu_facts(FakeNvml(gpus=cards), run=lambda argv: (asked.append(argv), (3, "inactive\n", ""))[1])
    assert facts["llmgw_gpu_host"]["fabric_manager"] is None
    assert not [a for a in asked if a[0] == "systemctl"]
