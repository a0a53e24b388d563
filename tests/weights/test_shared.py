"""Shared weights caches: hosts on one NFS/Lustre cache (facts) or a declared llmgw_shared_dirs
folder fetch each source once; a local cache is per host."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from llmgw.facts import Filesystem, HostFacts
from llmgw.inventory import Host
from llmgw.planner import make_plan
from llmgw.weights.shared import fetch_once, shared_cache_key
from tests.support.plan_inputs import cpu_profile, inputs, model
from tests.support.plan_inputs import facts as plan_facts
from tests.support.plan_inputs import host as plan_host


def host(name: str, cache: str = "/var/cache/llmgw", **vars_: object) -> Host:
    return Host(name=name, groups=frozenset({"llmgw_nodes"}), cache_dir=cache, vars=dict(vars_))


def facts(name: str, mount: str, device: str, fstype: str, shared: bool) -> HostFacts:
    fs = Filesystem(mount=mount, device=device, fstype=fstype, shared=shared, free_bytes=10**12,
                    total_bytes=2 * 10**12, paths=[])
    return HostFacts(host=name, gathered_at=datetime(2026, 12, 1, tzinfo=UTC), filesystems=[fs])


def test_nfs_cache_is_one_key_per_export_and_folder() -> None:
    a = shared_cache_key(host("a", "/shared/cache"), facts("a", "/shared", "filer:/export", "nfs4", True))
    b = shared_cache_key(host("b", "/mnt/x/cache"), facts("b", "/mnt/x", "filer:/export", "nfs4", True))
    other = shared_cache_key(host("c", "/shared/other"), facts("c", "/shared", "filer:/export", "nfs4", True))
    assert a == b == "filer:/export:cache" and other != a
    assert shared_cache_key(host("d"), facts("d", "/", "/dev/sda1", "ext4", False)) is None
    assert shared_cache_key(host("e"), None) is None


def test_declared_shared_dirs_count_even_when_facts_say_local() -> None:
    fuse = facts("a", "/", "/dev/sda1", "ext4", False)
    a = shared_cache_key(host("a", "/filer/llmgw", llmgw_shared_dirs=["/filer"]), fuse)
    b = shared_cache_key(host("b", "/filer/llmgw", llmgw_shared_dirs=["/filer/"]), None)
    assert a == b is not None
    assert shared_cache_key(host("c", "/var/cache/llmgw", llmgw_shared_dirs=["/filer"]), fuse) is None
    assert shared_cache_key(host("d", "/filer/llmgw", llmgw_shared_dirs="/filer"), fuse) is None  # not a list


def test_fetch_once_keeps_one_host_per_shared_cache() -> None:
    tiny, big = {"source": "hf://o/tiny@" + "1" * 40, "name": "t"}, {"source": "file:///m/big.gguf", "name": "b"}
    weights = {"n3": [tiny, big], "n1": [tiny], "n2": [tiny], "local": [tiny]}
    keys = {"n1": "nfs", "n2": "nfs", "n3": "nfs", "local": None}
    assert fetch_once(weights, keys.get) == {"n1": [tiny], "n3": [big], "local": [tiny]}


def test_declared_shared_dir_is_one_pool_in_the_disk_filter() -> None:
    """Two hosts whose facts show a local disk, declared shared: weights are counted once there."""
    a = model("a", cpu_profile(), source="hf://o/r/a.gguf", min=2)
    c = model("c", cpu_profile(), source="hf://o/r/c.gguf")
    gb = 1024**3
    nodes = [dataclasses.replace(plan_host(n), vars={"llmgw_shared_dirs": ["/var/cache"]}) for n in ("n1", "n2")]
    fs = [plan_facts(n, 0, disk_free_gb=100, mem_gb=10) for n in ("n1", "n2")]
    plan = make_plan(inputs([a, c], nodes, fs, sizes={a.source: 60 * gb, c.source: 60 * gb}))
    placed = sorted(s.node for r in plan.desired.replicas if r.model == "a" for s in r.shards)
    assert placed == ["n1", "n2"]  # one copy serves both nodes
    assert not [r for r in plan.desired.replicas if r.model == "c"]  # 40 GB left on the one pool, c needs 60
    # Undeclared, each host has its own 100 GB: c fits.
    plan = make_plan(inputs([a, c], [plan_host("n1"), plan_host("n2")], fs,
                            sizes={a.source: 60 * gb, c.source: 60 * gb}))
    assert [r for r in plan.desired.replicas if r.model == "c"]
