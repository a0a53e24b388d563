"""gpu_facts' health beyond ECC: Xid errors from the kernel log and NVML's events, the
recovery action, PCIe link width, NVLink state and counters, violation time, and what
could not be read (unknown is not healthy).

The NVML substitute has pynvml's shape (tests/support/facts.py); the kernel logs are
real Xid lines (tests/fixtures/kernel-log), and the kernel log of this machine is read
for real once.
"""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from tests.support.facts import FakeGpu, FakeNvml, module, util

gpu_facts = module("gpu_facts")
xid = util("xid")
host_io = util("host_io")
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "kernel-log"
JOURNAL = (LOGS / "journalctl-short-iso.txt").read_text()
DMESG = (LOGS / "dmesg-iso.txt").read_text()


def board(n: int = 8, **changes: object) -> list[FakeGpu]:
    return [FakeGpu(uuid=f"GPU-{i}", **changes) for i in range(n)]  # type: ignore[arg-type]


def answers(**by_program: tuple[int, str, str]) -> tuple[list[list[str]], object]:
    """A `run` that answers per program (journalctl, dmesg) and records what was run."""
    ran: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        ran.append(argv)
        return by_program.get(argv[0], (127, "", f"{argv[0]}: not found"))

    return ran, run


def test_xids_in_the_journal_land_on_their_gpu_by_pci_address() -> None:
    ran, run = answers(journalctl=(0, JOURNAL, ""))
    facts = gpu_facts.gpu_facts(FakeNvml(gpus=board()), run)
    gpus = facts["llmgw_gpus"]
    assert ran == [["journalctl", "-k", "-b", "0", "-o", "short-iso", "--no-pager", "-q"]]
    assert facts["llmgw_gpu_host"]["kernel_log"] == "journalctl"
    # 0000:43:00 is GPU 1 of the board: fallen off the bus.
    assert gpus[1]["problems"] == [
        "GPU 1 reported Xid 79 (GPU has fallen off the bus) in the kernel log at 2026-11-30T04:12:09+00:00: "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus; reboot the host and check the GPU's "
        "seating and power"]
    # 0000:c3:00 is GPU 5: a contained ECC error is a problem, the row-remap record beside it a note.
    assert [p.split(" in the kernel log")[0] for p in gpus[5]["problems"]] == [
        "GPU 5 reported Xid 94 (contained ECC error)"]
    assert [n.split(" in the kernel log")[0] for n in gpus[5]["notes"]] == [
        "GPU 5 reported Xid 63 (ECC page retirement or row remapping recorded)"]
    # 0000:52:00 is GPU 2: an application's fault, twice; a note, still placeable.
    assert gpus[2]["problems"] == []
    assert gpus[2]["notes"] == [
        "GPU 2 reported Xid 13 (graphics engine exception (usually the application's fault)) in the kernel log, "
        "2 times, the last at 2026-11-30T04:10:55+00:00: pid=48211, name=python3, Graphics Exception: ESR "
        "0x51a730=0x1000e 0x51a734=0x0 0x51a728=0xc81eb60 0x51a72c=0x1174"]
    # 0000:9d:00 is GPU 4: a recovery action that was later cleared.
    assert gpus[4]["problems"] == []
    assert gpus[4]["notes"][0].endswith("to 0x0 (None) (the action since cleared)")
    # Every other GPU is healthy and of known health.
    for i in (0, 3, 6, 7):
        assert (gpus[i]["problems"], gpus[i]["notes"], gpus[i]["unknown"]) == ([], [], [])
    # 0000:e4:00 is no GPU NVML lists (one fallen off the bus so hard it is gone): said for the host.
    assert facts["llmgw_gpu_host"]["notes"] == [
        "Xid 79 at PCI 0000:e4:00 in the kernel log: no GPU NVML lists has that address"]


def test_an_empty_journal_falls_back_to_dmesg_with_its_own_times() -> None:
    ran, run = answers(journalctl=(0, "-- No entries --\n", ""), dmesg=(0, DMESG, ""))
    facts = gpu_facts.gpu_facts(FakeNvml(gpus=board()), run)
    assert [a[0] for a in ran] == ["journalctl", "dmesg"]
    assert facts["llmgw_gpu_host"]["kernel_log"] == "dmesg"
    problems = facts["llmgw_gpus"][0]["problems"]
    assert [p.split(":")[0] for p in problems] == [
        "GPU 0 reported Xid 48 (double-bit ECC error) in the kernel log at 2026-11-30T08",
        "GPU 0 reported Xid 119 (GSP RPC timeout) in the kernel log, 2 times, the last at 2026-11-30T08"]
    assert "at 2026-11-30T08:44:11+00:00: pid=60112" in problems[1]


def test_plain_dmesg_gives_the_time_since_boot() -> None:
    found = xid.parse_kernel_log((LOGS / "dmesg-uptime.txt").read_text())
    assert found == [xid.Xid("0000:61:00", 74, "pid=39201, name=torchrun, NVLink: fatal error detected on link "
                                               "5(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)", "5377.3 s after boot")]


def test_an_unreadable_kernel_log_leaves_every_gpu_of_unknown_health() -> None:
    _ran, run = answers(journalctl=(1, "", "Failed to open journal: Permission denied"),
                        dmesg=(1, "", "dmesg: read kernel buffer failed: Operation not permitted"))
    facts = gpu_facts.gpu_facts(FakeNvml(gpus=board(2)), run)
    assert facts["llmgw_gpu_host"]["kernel_log"] is None
    assert facts["llmgw_gpus"][1]["problems"] == []
    assert facts["llmgw_gpus"][1]["unknown"] == [
        "GPU 1: Xid errors since boot are not known: the kernel log could not be read (`journalctl -k -b 0 -o "
        "short-iso --no-pager -q`: Failed to open journal: Permission denied; `dmesg --time-format iso`: dmesg: "
        "read kernel buffer failed: Operation not permitted; `dmesg`: dmesg: read kernel buffer failed: "
        "Operation not permitted)"]


def test_this_machines_kernel_log_is_read_for_real() -> None:
    """Here the journal keeps no kernel lines and dmesg works: the reader says which it used."""
    text, source, reason = xid.read_kernel_log(host_io.run_command)
    assert reason is None, reason
    assert source in ("journalctl", "dmesg")
    # Kernel lines, read for real (not the boot's first line: the ring buffer wraps on a busy host).
    assert text.strip() and all(line[:4].isdigit() or line.startswith("[") for line in text.splitlines()[:5])
    assert xid.parse_kernel_log(text) == []  # no NVIDIA driver here


@pytest.mark.parametrize(("action", "says"), [
    (pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET, "GPU 0 needs a GPU reset: the driver's recovery action is 1"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, "GPU 0 needs a node reboot: the driver's recovery action is 2"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P,
     "GPU 0 needs draining its peer-to-peer traffic: the driver's recovery action is 3"),
])
def test_nvmls_recovery_action_is_a_problem(action: int, says: str) -> None:
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[FakeGpu(recovery_action=action), FakeGpu()]))["llmgw_gpus"]
    assert gpus[0]["problems"] == [says]
    assert gpus[1]["problems"] == []


def test_a_driver_without_the_recovery_field_says_nothing() -> None:
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[FakeGpu(recovery_action=None)]))["llmgw_gpus"]
    assert gpus[0]["problems"] == []


def test_a_narrow_pcie_link_is_a_problem_a_slow_generation_a_note() -> None:
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[FakeGpu(pcie=(8, 16, 5, 5)), FakeGpu(pcie=(16, 16, 1, 5)),
                                              FakeGpu(pcie=None)]))["llmgw_gpus"]
    assert gpus[0]["problems"] == ["GPU 0's PCIe link is degraded: x8 of x16 lanes (gen 5 of 5): reseat the GPU "
                                   "or its riser"]
    assert (gpus[1]["problems"], gpus[1]["notes"]) == ([], ["GPU 1's PCIe link runs at gen 1 of 5 now (normal "
                                                            "while idle)"])
    assert (gpus[2]["problems"], gpus[2]["notes"]) == ([], [])  # a GPU that does not say: nothing


def test_an_nvlink_down_among_up_ones_is_a_problem_and_counters_are_notes() -> None:
    links = [True] * 18
    links[5] = links[11] = False
    sick = FakeGpu(nvlinks=links, nvlink_errors={pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 2})
    fine = FakeGpu(nvlinks=[True] * 18)
    pcie_card = FakeGpu(nvlinks=[False] * 18)  # no bridge: every link down says nothing
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[sick, fine, pcie_card, FakeGpu()]))["llmgw_gpus"]
    assert gpus[0]["problems"] == ["GPU 0 has NVLinks 5, 11 down (16 of 18 up): reset the GPU and check the NVLink "
                                   "connections"]
    assert gpus[0]["notes"] == ["GPU 0's NVLinks counted errors since the driver loaded: 36 recovery"]
    assert [g["problems"] + g["notes"] for g in gpus[1:]] == [[], [], []]


def test_time_held_back_by_limits_is_a_note() -> None:
    g = FakeGpu(violations_ns={pynvml.NVML_PERF_POLICY_THERMAL: 12_500_000_000})
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[g]))["llmgw_gpus"]
    assert (gpus[0]["problems"], gpus[0]["notes"]) == (
        [], ["GPU 0 was held back by its thermal limit for 12.5 s since the driver loaded"])


def test_a_health_query_that_fails_leaves_that_part_unknown() -> None:
    g = FakeGpu(failing={"nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_UNKNOWN,
                         "nvmlDeviceGetFieldValues": pynvml.NVML_ERROR_NO_PERMISSION})
    _ran, run = answers(journalctl=(0, JOURNAL, ""))
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[g]), run)["llmgw_gpus"]
    assert gpus[0]["problems"] == []
    assert gpus[0]["unknown"] == ["GPU 0: uncorrectable ECC errors could not be read (Unknown Error)",
                                  "GPU 0: its recovery action could not be read (Insufficient Permissions)"]


def test_nvml_events_catch_an_xid_while_gathering() -> None:
    nvml = FakeNvml(gpus=board(4), events=[(2, 48)])
    _ran, run = answers(journalctl=(0, "kernel: Linux version 6.8.0\n", ""))
    facts = gpu_facts.gpu_facts(nvml, run, event_wait_ms=150)
    gpus = facts["llmgw_gpus"]
    assert gpus[2]["problems"] == [
        "GPU 2 reported Xid 48 (double-bit ECC error) in the NVML events (time not known): reported while facts "
        "were gathered; reset the GPU; if it recurs the GPU needs service"]
    assert [g["problems"] for g in gpus if g["index"] != 2] == [[], [], []]
    assert nvml.waits == [150, 150]  # one event, then a wait that timed out
    assert "event-free" in nvml.calls
    assert facts["llmgw_gpu_host"]["notes"] == []


def test_events_unavailable_are_a_host_note_not_a_failure() -> None:
    nvml = FakeNvml(gpus=board(1), events_error=pynvml.NVML_ERROR_NOT_SUPPORTED)
    _ran, run = answers(journalctl=(0, JOURNAL, ""))
    facts = gpu_facts.gpu_facts(nvml, run, event_wait_ms=100)
    assert facts["llmgw_gpus"][0]["unknown"] == []
    assert "NVML events are not available here (Not Supported): Xids came from the kernel log only" \
        in facts["llmgw_gpu_host"]["notes"]


def test_a_gpu_outside_the_nvswitch_fabric_is_a_problem() -> None:
    """Fabric manager down on an NVSwitch system leaves every GPU unregistered: each says so."""
    waiting = FakeGpu(fabric=(pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED, pynvml.NVML_SUCCESS))
    failed = FakeGpu(fabric=(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_ERROR_UNKNOWN))
    joined = FakeGpu(fabric=(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS))
    gpus = gpu_facts.gpu_facts(FakeNvml(gpus=[waiting, failed, joined, FakeGpu()]))["llmgw_gpus"]
    assert gpus[0]["problems"] == ["GPU 0 has not joined the NVSwitch fabric (not started): start "
                                   "nvidia-fabricmanager and check its log"]
    assert gpus[1]["problems"] == ["GPU 1 failed to join the NVSwitch fabric (NVML error 999): check "
                                   "nvidia-fabricmanager's log"]
    assert gpus[2]["problems"] == gpus[3]["problems"] == []
