"""ib_facts: adapters from a fake /sys/class/infiniband; ibnetdiscover for real, on ibsim.

The ibnetdiscover runs are the real tool (infiniband-diags) against a fabric simulated
by ibsim with OpenSM as subnet manager (Debian ibsim-utils, infiniband-diags, opensm),
the way the fixtures in tests/fixtures/ibnetdiscover were made.
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.facts import module, plugin, util, write_tree

ib = util("ib")
ib_facts = module("ib_facts")

HERE = Path(__file__).parent
REPO = HERE.parents[1]
NET = REPO / "inventories/example/fabrics/a100_fabric.net"


def adapter_files(name: str, node_guid: str, desc: str, ports: dict[int, tuple[str, str, str, str, int]],
                  ) -> dict[str, str]:
    """sysfs files of one adapter; ports: n -> (state, rate, link layer, GID 0, SM LID)."""
    base = f"sys/class/infiniband/{name}"
    files = {f"{base}/node_guid": node_guid + "\n", f"{base}/node_desc": desc + "\n"}
    for n, (state, rate, layer, gid, sm_lid) in ports.items():
        files.update({f"{base}/ports/{n}/state": state + "\n", f"{base}/ports/{n}/rate": rate + "\n",
                      f"{base}/ports/{n}/link_layer": layer + "\n", f"{base}/ports/{n}/gids/0": gid + "\n",
                      f"{base}/ports/{n}/sm_lid": f"0x{sm_lid:x}\n"})
    return files


def gid(port_guid: int, prefix: str = "fe80:0000:0000:0000") -> str:
    h = f"{port_guid:016x}"
    return prefix + ":" + ":".join(h[i:i + 4] for i in range(0, 16, 4))


HDR = "200 Gb/sec (4X HDR)"


def gpu_node_05(root: Path) -> Path:
    """gpu-node-05 of fixture c: four HCAs (GUIDs as in the fixture), plus a RoCE NIC and a down port."""
    files: dict[str, str] = {}
    for k in range(4):
        guid = 0xb83fd20300a20020 + 2 * k
        files.update(adapter_files(f"mlx5_{k}", f"{guid >> 48:04x}:{guid >> 32 & 0xffff:04x}:"
                                                f"{guid >> 16 & 0xffff:04x}:{guid & 0xffff:04x}",
                                   f"gpu-node-05 mlx5_{k}", {1: ("4: ACTIVE", HDR, "InfiniBand", gid(guid + 1), 1)}))
    files.update(adapter_files("mlx5_4", "0c42:a103:0011:2233", "gpu-node-05 mlx5_4",
                               {1: ("4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet", gid(0x0e42a1fffe112233), 0)}))
    files.update(adapter_files("mlx5_5", "b83f:d203:00a2:0030", "gpu-node-05 mlx5_5",
                               {1: ("1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand", gid(0), 0)}))
    return write_tree(root, files)


def test_adapters_ports_and_guids_from_sysfs(tmp_path: Path) -> None:
    facts = ib_facts.ib_facts({"root": str(gpu_node_05(tmp_path)), "ibnetdiscover": False,
                               "ibnetdiscover_path": "ibnetdiscover", "timeout": 10})
    adapters = facts["llmgw_ib_adapters"]
    assert [a["name"] for a in adapters] == [f"mlx5_{k}" for k in range(6)]
    assert adapters[2] == {"name": "mlx5_2", "node_guid": "0xb83fd20300a20024", "node_desc": "gpu-node-05 mlx5_2",
                           "ports": [{"port": 1, "state": "ACTIVE", "rate": HDR, "link_layer": "InfiniBand",
                                      "port_guid": "0xb83fd20300a20025"}],
                           # no `device` link in this tree: where it sits is not known
                           "pci_bus_id": None, "numa_node": None, "pci_root": None}
    assert adapters[5]["ports"][0]["state"] == "DOWN" and adapters[5]["ports"][0]["port_guid"] is None
    # The RoCE NIC and the down port are no InfiniBand fabric: four active IB ports, one SM.
    assert facts["llmgw_ib_fabric_key"] == "fe80:0000:0000:0000/1"
    assert facts["llmgw_ibnetdiscover"] is None and facts["llmgw_ibnetdiscover_reason"] is None


def test_a_host_without_infiniband(tmp_path: Path) -> None:
    facts = ib_facts.ib_facts({"root": str(tmp_path), "ibnetdiscover": True, "ibnetdiscover_path": "ibnetdiscover",
                               "timeout": 10})
    assert facts == {"llmgw_ib_adapters": [], "llmgw_ib_fabric_key": "", "llmgw_ibnetdiscover": None,
                     "llmgw_ibnetdiscover_reason": "no active InfiniBand port on this host",
                     "llmgw_ib_stack": None}  # no adapter: the RDMA packages are not asked about


def test_missing_ibnetdiscover_is_a_reason(tmp_path: Path) -> None:
    facts = ib_facts.ib_facts({"root": str(gpu_node_05(tmp_path)), "ibnetdiscover": True,
                               "ibnetdiscover_path": "/nonexistent/ibnetdiscover", "timeout": 10})
    assert facts["llmgw_ibnetdiscover"] is None
    assert facts["llmgw_ibnetdiscover_reason"] == ib.MISSING_TOOL
    assert len(facts["llmgw_ib_adapters"]) == 6


@pytest.mark.parametrize(("text", "want"), [
    ("b83f:d203:00a2:0000", "0xb83fd20300a20000"), ("0x0c42a10300b20003", "0x0c42a10300b20003"),
    ("0xc42a10300b20003", "0x0c42a10300b20003"), ("", None), ("zz", None),
])
def test_guid_normalisation(text: str, want: str | None) -> None:
    assert ib.guid(text) == want


# ---------------------------------------------------------------------------- fabric probes


def test_one_probe_per_fabric_flags_first() -> None:
    fp = plugin("filter", "fabric_probes")
    keys = {"gpu-node-01": "p/1,p/7", "gpu-node-02": "p/1,p/7", "stor-01": "p/7", "a100-node-01": "q/1",
            "a100-node-02": "q/1", "cpu-01": ""}
    assert fp.choose_probes(keys, {}) == ["a100-node-01", "gpu-node-01"]
    # Flagged hosts always probe and cover their fabrics; false never probes.
    assert fp.choose_probes(keys, {"stor-01": True, "a100-node-01": False}) == ["a100-node-02", "gpu-node-01",
                                                                                 "stor-01"]


# ---------------------------------------------------------------------------- real ibnetdiscover on ibsim


@pytest.fixture(scope="module")
def ibsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """ibsim on the example site's A100 fabric with OpenSM up; yields the env to reach it."""
    libs = glob.glob("/usr/lib/*/umad2sim/libumad2sim.so")
    assert libs, "install Debian ibsim-utils infiniband-diags opensm (scripts/setup-host does)"
    work = tmp_path_factory.mktemp("ibsim")
    env = dict(os.environ, IBSIM_SOCKNAME=f"llmgw-facts-{os.getpid()}")
    preload = dict(env, LD_PRELOAD=libs[0], OSM_TMP_DIR=str(work), OSM_CACHE_DIR=str(work))
    conf = (HERE / "ibsim/opensm-sim.conf").read_text().replace("/tmp/osm-dump", str(work / "dump"))
    (work / "sim.conf").write_text(conf)
    with open(work / "ibsim.log", "wb") as log:
        sim = subprocess.Popen(["ibsim", "-s", "-n", str(NET)], stdout=log, stderr=log, env=env)
    osm = None
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(["ibstat"], env=preload, capture_output=True, check=False).returncode != 0:
            assert time.monotonic() < deadline and sim.poll() is None, (work / "ibsim.log").read_text()[-2000:]
            time.sleep(0.2)
        with open(work / "osm.out", "wb") as out:
            osm = subprocess.Popen(["opensm", "-F", str(work / "sim.conf"), "-f", str(work / "osm.log")],
                                   stdout=out, stderr=out, env=preload)
        deadline = time.monotonic() + 60
        while "SUBNET UP" not in ((work / "osm.log").read_text() if (work / "osm.log").exists() else ""):
            assert time.monotonic() < deadline and osm.poll() is None, "OpenSM never brought the subnet up"
            time.sleep(0.2)
        yield {"IBSIM_SOCKNAME": env["IBSIM_SOCKNAME"], "LD_PRELOAD": libs[0]}
    finally:
        for proc in (osm, sim):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)


def test_real_ibnetdiscover_maps_the_fabric_once(tmp_path: Path, ibsim: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """a100-node-01's two HCAs are on one fabric: one ibnetdiscover run maps both."""
    root = write_tree(tmp_path, {
        **adapter_files("ibsim0", "b83f:d203:00c7:0000", "a100-node-01 mlx5_0",
                        {1: ("4: ACTIVE", HDR, "InfiniBand", gid(0xb83fd20300c70001), 1)}),
        # Not known to the simulator: running ibnetdiscover on it would fail; it must be skipped.
        **adapter_files("mlx5_1", "b83f:d203:00c7:0002", "a100-node-01 mlx5_1",
                        {1: ("4: ACTIVE", HDR, "InfiniBand", gid(0xb83fd20300c70003), 1)}),
    })
    for key, value in ibsim.items():
        monkeypatch.setenv(key, value)  # the ibnetdiscover child reaches the simulator
    facts = ib_facts.ib_facts({"root": str(root), "ibnetdiscover": True, "ibnetdiscover_path": "ibnetdiscover",
                               "timeout": 60})
    text = facts["llmgw_ibnetdiscover"]
    assert facts["llmgw_ibnetdiscover_reason"] is None
    assert text is not None and text.count("# Topology file") == 1
    for host in range(1, 5):
        for hca in range(2):
            assert f'"a100-node-0{host} mlx5_{hca}"' in text
    assert "MF0;a100-spine-01:MQM8790/U1" in text


def test_a_failing_ibnetdiscover_is_a_reason(tmp_path: Path, ibsim: dict[str, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path, adapter_files("mlx5_7", "b83f:d203:00c7:00f0", "x mlx5_7",
                                              {1: ("4: ACTIVE", HDR, "InfiniBand", gid(0xb83fd20300c700f1), 1)}))
    for key, value in ibsim.items():
        monkeypatch.setenv(key, value)
    facts = ib_facts.ib_facts({"root": str(root), "ibnetdiscover": True, "ibnetdiscover_path": "ibnetdiscover",
                               "timeout": 60})
    assert facts["llmgw_ibnetdiscover"] is None
    assert facts["llmgw_ibnetdiscover_reason"].startswith("ibnetdiscover on mlx5_7 port 1 failed: ")
