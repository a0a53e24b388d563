"""A real Hugging Face mirror for tests: olah (scripts/hf_mirror.py) serving the tiny Llama offline.

`running_mirror()` starts it on 127.0.0.1 (the `hf_mirror` session fixture in
tests/conftest.py does, once); lab tests start one on the lab network's gateway address
(`podman_gateway`), which the lab hosts reach and nothing beyond the host does.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "hf_mirror.py"
sys.path.insert(0, str(SCRIPT.parent))
import hf_mirror  # noqa: E402

from tests.support.net import free_port  # noqa: E402


@dataclass(frozen=True)
class HfMirror:
    url: str  # the endpoint: http://HOST:PORT
    repo: str  # org/name of the tiny model
    commit: str  # what `main` resolves to
    files: Path  # the repository folder olah serves (compare downloads against it)

    def file_names(self) -> list[str]:
        return sorted(p.name for p in self.files.iterdir() if p.is_file())


# The host's own address on a podman network: where lab hosts reach services on this machine.
podman_gateway = hf_mirror.podman_gateway


@contextmanager
def running_mirror(host: str = "127.0.0.1", port: int | None = None, timeout: float = 90.0) -> Iterator[HfMirror]:
    files = hf_mirror.prepare()
    port = port or free_port(host)
    url = f"http://{host}:{port}"
    with tempfile.TemporaryDirectory(prefix="olah-") as run_dir:
        log = Path(run_dir) / "olah.out"
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, str(SCRIPT), "serve", "--host", host, "--port", str(port),
                                     "--run-dir", run_dir], stdout=out, stderr=subprocess.STDOUT)
        try:
            probe = f"{url}/api/models/{hf_mirror.REPO}/revision/main"
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"olah exited with {proc.returncode}: {log.read_text()[-2000:]}")
                try:
                    if httpx.get(probe, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"olah did not answer {probe} within {timeout:g} s: {log.read_text()[-2000:]}")
                time.sleep(0.2)
            yield HfMirror(url=url, repo=hf_mirror.REPO, commit=hf_mirror.commit(), files=files)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
