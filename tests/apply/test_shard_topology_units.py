"""The unit lines a shard's topology makes (#38): CUDA_VISIBLE_DEVICES by UUID with the
indices kept in LLMGW_GPUS, NCCL_IB_HCA as the plan chose it, and the NUMA binding; rendered
by the role's template as the role does, checked by `systemd-analyze verify`."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.engines.entry import check_entry
from tests.apply.test_shard_units import env_of, render, shard, verify

UUIDS = [f"GPU-4f3c2a1b-0000-4000-8000-00000000000{i}" for i in range(4, 8)]
BOUND = shard(unit="llmgw-numa-1-0", replica="numa-1", gpus=[4, 5, 6, 7], gpu_uuids=UUIDS, numa_node=1,
              nodes=2, leader="10.0.0.1", peers=["10.0.0.1:20000", "10.0.0.2:20000"], fabric="fab-a",
              ib_hcas=["mlx5_2:1", "mlx5_3:1"])
PLAIN = shard(unit="llmgw-plain-1-0", replica="plain-1", gpus=[0, 1])


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("units")
    return out, render(out, [BOUND, PLAIN])


def test_uuids_adapters_and_numa_binding(units: tuple[Path, dict[str, str]]) -> None:
    tmp, rendered = units
    unit = rendered["llmgw-numa-1-0"]
    env = env_of(unit)
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(UUIDS)
    assert env["LLMGW_GPUS"] == "4,5,6,7"  # what facts read back (module_utils/units.py)
    assert env["NCCL_IB_HCA"] == "=mlx5_2:1,mlx5_3:1"
    lines = unit.splitlines()
    assert "NUMAPolicy=bind" in lines and "NUMAMask=1" in lines and "CPUAffinity=numa" in lines
    # The devices are still allowed by index: /dev/nvidiaN follows NVML's (PCI) order.
    assert [ln for ln in lines if ln.startswith("DeviceAllow=/dev/nvidia") and ln[len("DeviceAllow=/dev/nvidia")]
            .isdigit()] == [f"DeviceAllow=/dev/nvidia{i} rw" for i in (4, 5, 6, 7)]
    verify(tmp, "llmgw-numa-1-0")


def test_no_topology_keeps_the_indices_and_no_binding(units: tuple[Path, dict[str, str]]) -> None:
    tmp, rendered = units
    unit = rendered["llmgw-plain-1-0"]
    env = env_of(unit)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["LLMGW_GPUS"] == "0,1"
    assert "NUMAPolicy" not in unit and "CPUAffinity" not in unit
    verify(tmp, "llmgw-plain-1-0")


@pytest.mark.parametrize(("change", "says"), [
    ({"gpu_uuids": ["GPU-1\nExecStartPre=/bin/sh"]}, "control character"),
    ({"gpu_uuids": ["0"]}, "is not one NVML UUID (GPU-...) per GPU index of gpus"),
    ({"gpu_uuids": UUIDS[:2]}, "is not one NVML UUID (GPU-...) per GPU index of gpus"),
    ({"numa_node": "1 2"}, "numa_node '1 2' is not a NUMA node number (0-1023) or null"),
    ({"numa_node": 4096}, "is not a NUMA node number"),
])
def test_the_host_refuses_a_tampered_entry(change: dict[str, object], says: str) -> None:
    """A plan or state edited after it was made: the role's preflight (llmgw_engine_refusals) refuses it."""
    entry = {**BOUND, "state": "present", **change}
    assert any(says in why for why in check_entry(entry)), check_entry(entry)
    assert check_entry({**BOUND, "state": "present"}) == []
