"""scripts/device-check's CPU-only parts, as CI runs them: its syntax (bash -n, shellcheck) and
its facts check on a recorded gpu_facts result. The whole check needs an NVIDIA GPU and never
runs here (docs/gpu-proof.md).

The recorded result (tests/fixtures/gpu-facts/hgx-h100-substitute.json) is gpu_facts' output
over the NVML substitute and the real-Xid kernel log, not yet a real GPU's: replace it with the
first real run's gpu-facts.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "device-check"
RECORDED = REPO / "tests" / "fixtures" / "gpu-facts" / "hgx-h100-substitute.json"
ENV = {"LLMGW_PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--check-facts", str(path)], capture_output=True, text=True,
                          env=ENV, timeout=120, check=False)


def test_syntax_and_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (scripts/setup-host installs it)")
    proc = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_the_recorded_facts_fit_llmgws_records() -> None:
    proc = check(RECORDED)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "facts: driver 570.133.20, CUDA 12.8, kernel log: journalctl"
    assert ("facts: GPU 1 H100-80GB GPU-00000001-7c7e-d4a2-8b1c-3f5d0e9a1b2c 0000:43:00.0 96.00.89.00.01, "
            "health problem") in lines
    assert any(line.startswith("facts:   problem: GPU 6's PCIe link is degraded: x8 of x16") for line in lines)
    assert lines[-1] == ("facts: host note: Xid 79 at PCI 0000:e4:00 in the kernel log: no GPU NVML lists has "
                         "that address")


def test_facts_that_do_not_fit_say_which_field(tmp_path: Path) -> None:
    result = json.loads(RECORDED.read_text())
    result["ansible_facts"]["llmgw_gpus"][2]["memory_total_mb"] = "lots"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(result))
    proc = check(bad)
    assert proc.returncode != 0
    assert "does not fit llmgw's records" in proc.stderr and "gpus.2.memory_total_mb" in proc.stderr
    del result["ansible_facts"]["llmgw_gpu_host"]
    bad.write_text(json.dumps(result))
    assert "lacks llmgw_gpu_host" in check(bad).stderr
