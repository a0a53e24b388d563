"""A small recorded site for planner tests: a catalog, a YAML inventory and facts per host.

Used until (and beside) `inventories/example`: it holds every case a rejection reason
exists for (classes, unhealthy GPU, cordoned, CPU-only with little memory, unknown GPUs,
no facts, small disk, stale facts, a fabric from a real ibnetdiscover capture).
"""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

from llmgw.facts.records import Filesystem, Gpu, HostFacts, Unit, Weights
from llmgw.weights.names import cache_name
from llmgw.weights.sources import SourceInfo, catalog_spec, write_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ibnetdiscover"
GATHERED = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
GB = 1024**3
LLAMA = "hf://meta-llama/Llama-3.1-70B-Instruct"
GIANT = "hf://example/giant-405b"
# Whole repositories as `catalog validate` pins them (the commit `main` named when it ran).
PINNED = {LLAMA: f"{LLAMA}@{'1' * 40}", GIANT: f"{GIANT}@{'2' * 40}"}
CODER = "hf://Qwen/Qwen2.5-Coder-14B-Instruct-GGUF/qwen2.5-coder-14b-instruct-q4_k_m.gguf"

CATALOG = """\
# Models the test fleet serves.
models:
  - name: llama-70b
    source: hf://meta-llama/Llama-3.1-70B-Instruct
    scaling: {min: 2}
    profiles:
      - name: h100-2x8
        engine: vllm
        gpus: 8
        nodes: 2            # spans two nodes on one fabric
        gpu_class: H100-80GB
        min_memory_gb: 256

  - name: qwen-coder-14b
    aliases: [coder]
    source: hf://Qwen/Qwen2.5-Coder-14B-Instruct-GGUF/qwen2.5-coder-14b-instruct-q4_k_m.gguf
    fallbacks: [qwen-7b]
    scaling: {min: 2, max: 3, idle_timeout: 30m}
    profiles:
      - name: h100-tp2
        engine: vllm
        gpus: 2
        gpu_class: H100-80GB
        node_selector: {role: coding}
      - name: a100-tp2
        engine: vllm
        gpus: 2
        gpu_class: A100-80GB

  - name: qwen-7b
    source: hf://Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf
    scaling: {min: 0, max: 2, idle_timeout: 15m}
    profiles:
      - name: cpu
        engine: llamacpp
        min_memory_gb: 8

  - name: embed
    source: hf://BAAI/bge-small-en-v1.5-gguf/bge-small-en-v1.5-q8_0.gguf
    profiles:
      - name: cpu
        engine: llamacpp
        min_memory_gb: 4

  - name: giant
    source: hf://example/giant-405b
    profiles:
      - name: h200-tp8
        engine: vllm
        gpus: 8
        gpu_class: H200-141GB
      - name: a100-2x4
        engine: vllm
        gpus: 4
        nodes: 2
        gpu_class: A100-80GB
"""

INVENTORY = """\
# The test fleet.
all:
  children:
    llmgw_nodes:
      hosts:
        gpu-node-01:
          ansible_host: 10.0.1.1
        gpu-node-02:
          ansible_host: 10.0.1.2
        gpu-node-03:
          ansible_host: 10.0.1.3
          llmgw_labels: {role: coding}
        gpu-node-04:
          ansible_host: 10.0.1.4
        a100-01:
          ansible_host: 10.0.2.1
          llmgw_labels: {role: batch}
        a100-02:
          ansible_host: 10.0.2.2
          llmgw_node_state: cordoned   # waiting for a new PSU
        cpu-01:
          ansible_host: 10.0.3.1
        cpu-02:
          ansible_host: 10.0.3.2
        old-01:
          ansible_host: 10.0.3.9
    llmgw_routers:
      hosts:
        router-01:
          ansible_host: 10.0.0.2
"""

# Recorded: planned with no clock (llmgw.planner.load), so cpu-02's facts, stale since 2025,
# stay "stale" and never make it a lost node.
SITE = "ports: {start: 20000, end: 20099}\nrecorded: true\n"


def _gpus(n: int, cls: str, name: str, sick: dict[int, str] | None = None) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-{cls}-{i}", name=name, gpu_class=cls, memory_total_mb=81559,
                problems=[sick[i]] if sick and i in sick else []) for i in range(n)]


def _fs(free_gb: int, total_gb: int = 2000, *, shared: bool = False) -> list[Filesystem]:
    return [Filesystem(mount="/", device="/dev/nvme0n1p2", fstype="ext4", shared=shared, free_bytes=free_gb * GB,
                       total_bytes=total_gb * GB, paths=["/var/cache/llmgw"])]


def _h100(host: str, **kw: object) -> HostFacts:
    base: dict[str, object] = dict(
        host=host, gathered_at=GATHERED, cpus=128, memory_total_mb=2048 * 1024,
        gpus=_gpus(8, "H100-80GB", "NVIDIA H100 80GB HBM3"), filesystems=_fs(1500), weights=[], units=[],
        ib_adapters=[])
    base.update(kw)
    return HostFacts.model_validate(base)


def facts() -> list[HostFacts]:
    fabric = (FIXTURES / "a_small_1switch.ibnetdiscover.txt").read_text()
    llama_cache = Weights(path=f"/var/cache/llmgw/{cache_name(PINNED[LLAMA])}", size_bytes=140 * GB, cache=True,
                          cache_name=cache_name(PINNED[LLAMA]))
    return [
        _h100("gpu-node-01", weights=[llama_cache], ibnetdiscover=fabric),
        _h100("gpu-node-02", gpus=_gpus(8, "H100-80GB", "NVIDIA H100 80GB HBM3",
                                        {3: "uncorrectable ECC errors (volatile count 12)"})),
        _h100("gpu-node-03"),
        _h100("gpu-node-04", filesystems=_fs(50)),
        HostFacts(host="a100-01", gathered_at=GATHERED, cpus=64, memory_total_mb=512 * 1024,
                  gpus=_gpus(4, "A100-80GB", "NVIDIA A100-SXM4-80GB"), filesystems=_fs(800), weights=[], units=[]),
        HostFacts(host="a100-02", gathered_at=GATHERED, cpus=64, memory_total_mb=512 * 1024,
                  gpus=_gpus(4, "A100-80GB", "NVIDIA A100-SXM4-80GB"), filesystems=_fs(800), weights=[], units=[]),
        HostFacts(host="cpu-01", gathered_at=GATHERED, cpus=16, memory_total_mb=16 * 1024, gpus=[],
                  filesystems=_fs(200), weights=[], units=[]),
        HostFacts(host="cpu-02", gathered_at=GATHERED, cpus=32, memory_total_mb=64 * 1024, gpus=None,
                  gpus_unknown_reason="no NVIDIA driver", filesystems=None, weights=None, units=None,
                  stale_since=datetime(2025, 3, 1, 13, 0, tzinfo=UTC), stale_reason="host unreachable over SSH"),
    ]


def write_site(root: Path, *, catalog: str = CATALOG, inventory: str = INVENTORY) -> Path:
    """Write the site under `root` and return it."""
    (root / "catalog").mkdir(parents=True, exist_ok=True)
    (root / "inventory").mkdir(parents=True, exist_ok=True)
    (root / "facts").mkdir(parents=True, exist_ok=True)
    (root / "llmgw.yaml").write_text(SITE)
    (root / "catalog" / "models.yaml").write_text(textwrap.dedent(catalog))
    (root / "inventory" / "hosts.yml").write_text(inventory)
    for f in facts():
        (root / "facts" / f"{f.host}.json").write_text(f.model_dump_json(indent=2) + "\n")
    for source, size in ((LLAMA, 140 * GB), (CODER, 9 * GB), (GIANT, None)):
        spec, pinned = catalog_spec(source), PINNED.get(source)
        write_source(root / "facts", SourceInfo(source=spec, cache_name=cache_name(spec), size_bytes=size,
                                                format="other", inspected_at=GATHERED, pinned=pinned,
                                                commit=pinned.rsplit("@", 1)[1] if pinned else None))
    return root


__all__ = ["GATHERED", "Unit", "write_site"]
