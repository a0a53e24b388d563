"""A whole Hugging Face repository onto a real lab host: olah bound to the lab network's gateway
(what the lab hosts reach, nothing wider), `catalog validate` pins it, `plan` names the commit
offline, and apply's weights step fetches it with huggingface_hub installed on the host from the
control side's wheelhouse (the lab hosts have no package index) — byte for byte, 0750/0640."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.apply.wiring import hosts_for
from llmgw.site import Site
from tests.support.hf_mirror import HfMirror, podman_gateway, running_mirror
from tests.support.lab import Lab, lab

pytestmark = pytest.mark.lab

CACHE = "/var/cache/llmgw"


@pytest.fixture
def one_host(tmp_path: Path) -> Iterator[Lab]:
    with lab(tmp_path, nodes=1, prefix="llmgw-hf") as it:
        yield it


def test_lab_host_fetches_a_pinned_repository_from_the_mirror(one_host: Lab) -> None:
    site = one_host.site
    with running_mirror(host=podman_gateway(one_host.name)) as mirror:
        _fetch_on_the_lab(one_host, site, mirror)


def _fetch_on_the_lab(one_host: Lab, site: Path, mirror: HfMirror) -> None:
    config = (site / "llmgw.yaml").read_text()
    (site / "llmgw.yaml").write_text(config + f"\nmirror: {mirror.url}\n")
    (site / "catalog" / "tiny-hf.yaml").write_text(f"""
models:
  - name: tiny-hf
    source: hf://{mirror.repo}
    scaling: {{min: 1, max: 1}}
    profiles:
      - {{name: cpu, engine: vllm, gpus: 0, min_memory_gb: 1}}
""")
    validated = one_host.ok("catalog", "validate")
    assert f"commit {mirror.commit}" in validated.stdout
    planned = json.loads(one_host.ok("plan", "--json").stdout)
    sources = {r["source"]: r["cache_name"] for r in _replicas(planned) if r.get("model") == "tiny-hf"}
    pinned = f"hf://{mirror.repo}@{mirror.commit}"
    assert list(sources) == [pinned]
    name = sources[pinned]
    # apply's weights step, exactly as apply runs it (hosts_for: the site's mirror reaches the role).
    seen: list[tuple[int, int | None]] = []
    hosts_for(Site.load(site)).engines({"node1": [{"source": pinned, "name": name}]}, {}, "start",
                                       lambda step, host, done, total: step == "weights" and seen.append((done, total)))
    listing = one_host.per_host(f"cd {CACHE}/{name} && sha256sum * && stat -c 'MODE=%a:%G' . * ")["node1"]
    want = {hashlib.sha256((mirror.files / n).read_bytes()).hexdigest() for n in mirror.file_names()}
    assert want <= listing, listing
    assert {w for w in listing if w.startswith("MODE=")} == {"MODE=750:llmgw", "MODE=640:llmgw"}
    assert seen and seen[-1][0] == sum((mirror.files / n).stat().st_size for n in mirror.file_names())


def _replicas(o: object) -> list[dict[str, object]]:
    if isinstance(o, dict):
        found = [o] if "source" in o and "cache_name" in o else []
        return found + [r for v in o.values() for r in _replicas(v)]
    if isinstance(o, list):
        return [r for v in o for r in _replicas(v)]
    return []
