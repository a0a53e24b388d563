"""Weights caches on a filesystem several hosts share: fetched once there, counted once.

A host's cache is shared when the facts show it on a network or cluster filesystem (NFS,
Lustre, GPFS, ...; `shared` in the facts) or when the inventory declares its folder in
`llmgw_shared_dirs` (for filers the facts cannot recognise: hosts that declare the same
folder share one filesystem there). Hosts with the same key see the same cache entries,
so apply fetches each source on one of them, and the planner spends the space once.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence

from llmgw.facts import Filesystem, HostFacts
from llmgw.inventory import Host


def declared_dir(host: Host) -> str | None:
    """The `llmgw_shared_dirs` entry holding the host's cache folder, if any."""
    dirs = host.vars.get("llmgw_shared_dirs") or []
    if not isinstance(dirs, list):
        return None
    cache = posixpath.normpath(host.cache_dir)
    for d in dirs:
        if isinstance(d, str) and d.startswith("/"):
            top = posixpath.normpath(d)
            if cache == top or cache.startswith(top.rstrip("/") + "/"):
                return top
    return None


def cache_filesystem(host: Host, facts: HostFacts | None) -> Filesystem | None:
    """The filesystem holding the host's cache folder: listed for it, else the longest mount prefix."""
    if facts is None or not facts.filesystems:
        return None
    for fs in facts.filesystems:
        if host.cache_dir in fs.paths:
            return fs
    best: Filesystem | None = None
    for fs in facts.filesystems:
        mount = fs.mount.rstrip("/") + "/"
        if (host.cache_dir + "/").startswith(mount) and (best is None or len(fs.mount) > len(best.mount)):
            best = fs
    return best


def shared_cache_key(host: Host, facts: HostFacts | None) -> str | None:
    """One key per shared cache folder (same filesystem, same place on it); None for a local cache."""
    declared = declared_dir(host)
    if declared is not None:
        return f"declared:{declared}:{posixpath.normpath(host.cache_dir)}"
    fs = cache_filesystem(host, facts)
    if fs is None or not fs.shared:
        return None
    return f"{fs.device}:{posixpath.relpath(posixpath.normpath(host.cache_dir), fs.mount)}"


def fetch_once(weights: Mapping[str, Sequence[Mapping[str, str]]],
               key_of: Callable[[str], str | None]) -> dict[str, list[dict[str, str]]]:
    """`weights` (host -> entries to fetch) with each entry kept on one host per shared cache:
    the first host by name fetches, the others find the entry there when their shards start.
    An entry served from an operator's copy (`present_at`) is checked on its own host and
    fetches nothing, so it neither fetches for the others nor is left out."""
    taken: set[tuple[str, str]] = set()
    out: dict[str, list[dict[str, str]]] = {}
    for host in sorted(weights):
        key = key_of(host)
        for entry in weights[host]:
            if key is not None and "present_at" not in entry:
                if (key, entry["name"]) in taken:
                    continue
                taken.add((key, entry["name"]))
            out.setdefault(host, []).append(dict(entry))
    return out
