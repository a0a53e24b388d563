# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a host has besides GPUs: memory, CPUs, model storage, weights, units, engines.

Pure Python, no Ansible import. Every reader takes `root` (where /proc and /sys live,
"/" on a host) and the few system calls it makes (stat, statvfs, running a command)
as arguments, so unit tests drive it against fake trees.

**Unknown is not zero**: a value that cannot be read is None, never 0.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

Run = Callable[[List[str]], Tuple[int, str, str]]  # argv -> (rc, stdout, stderr)
FactDict = Dict[str, Any]

MIB = 1024 * 1024
# A cgroup limit at or above this means "no limit" (v1 writes PAGE_COUNTER_MAX pages).
_UNLIMITED = 1 << 60

SHARED_FSTYPES = frozenset({"nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb3", "glusterfs",
                            "panfs", "wekafs", "orangefs"})
# FUSE file systems that are local despite the fuse. prefix.
LOCAL_FUSE = frozenset({"fuse.fuse-overlayfs", "fuse.lxcfs", "fuse.squashfuse", "fuse.gvfsd-fuse",
                        "fuse.portal", "fuse.snapfuse", "fuse.appimagefuse"})

WEIGHT_SUFFIXES = (".gguf", ".safetensors")
# Files that make a folder a Hugging Face-style model folder when beside a config.json.
_HF_WEIGHT_RE = re.compile(r"(\.safetensors|\.gguf|^pytorch_model.*\.bin|^model.*\.bin)$")
PART_SUFFIX = ".part"


def _path(root: str, rel: str) -> str:
    return os.path.join(root, rel.lstrip("/"))


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


# ---------------------------------------------------------------------------- memory

def meminfo_total_mb(root: str = "/") -> Optional[int]:
    """MemTotal from /proc/meminfo, in MiB."""
    text = _read(_path(root, "/proc/meminfo"))
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) // 1024  # kB
    return None


def _self_cgroups(root: str) -> Dict[str, str]:
    """controller -> cgroup path of this process ("" is the v2 unified hierarchy)."""
    out: Dict[str, str] = {}
    for line in (_read(_path(root, "/proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            out[controller] = parts[2]
    return out


def _mount_root(root: str, mount_point: str) -> str:
    """The cgroup path mounted at `mount_point` ("/" unless a container sees only its own)."""
    for line in (_read(_path(root, "/proc/self/mountinfo")) or "").splitlines():
        fields = line.split()
        if len(fields) > 4 and _unescape(fields[4]) == mount_point:
            return _unescape(fields[3])
    return "/"


def _ancestors(base: str, cgroup_path: str, mounted: str = "/") -> Iterator[str]:
    """`base`/cgroup_path and every folder above it up to `base` itself.

    `mounted` is the part of the hierarchy mounted at `base`: with the host's cgroup
    namespace a container sees its own cgroup path in /proc/self/cgroup, but only its
    subtree under /sys/fs/cgroup, so that prefix is taken off.
    """
    if mounted not in ("", "/") and (cgroup_path == mounted or cgroup_path.startswith(mounted.rstrip("/") + "/")):
        cgroup_path = cgroup_path[len(mounted.rstrip("/")):]
    rel = cgroup_path.strip("/")
    while True:
        yield os.path.join(base, rel) if rel else base
        if not rel:
            return
        rel = os.path.dirname(rel)


def _limit_value(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    value = text.strip()
    if not value or value == "max" or not value.isdigit():
        return None
    n = int(value)
    return n if n < _UNLIMITED else None


def cgroup_memory_limit_mb(root: str = "/") -> Optional[int]:
    """The tightest memory limit of the cgroups this process sits in (v1 or v2), in MiB.

    Walks from this process's cgroup up to the mounted root, because inside a container
    the limit is set on the container's cgroup, which is the root of its view.
    """
    groups = _self_cgroups(root)
    limits: List[int] = []
    v2 = groups.get("")
    if v2 is not None and os.path.exists(_path(root, "/sys/fs/cgroup/cgroup.controllers")):
        for folder in _ancestors(_path(root, "/sys/fs/cgroup"), v2, _mount_root(root, "/sys/fs/cgroup")):
            value = _limit_value(_read(os.path.join(folder, "memory.max")))
            if value is not None:
                limits.append(value)
    v1 = groups.get("memory")
    if v1 is not None:
        for mount in ("/sys/fs/cgroup/memory",):
            for folder in _ancestors(_path(root, mount), v1, _mount_root(root, mount)):
                value = _limit_value(_read(os.path.join(folder, "memory.limit_in_bytes")))
                if value is not None:
                    limits.append(value)
    return min(limits) // MIB if limits else None


def memory_facts(root: str = "/") -> FactDict:
    """What the host can really use: MemTotal, or a lower cgroup limit (containers)."""
    total = meminfo_total_mb(root)
    limit = cgroup_memory_limit_mb(root)
    usable = total
    if limit is not None and (usable is None or limit < usable):
        usable = limit
    return {"meminfo_total_mb": total, "cgroup_limit_mb": limit, "total_mb": usable}


# ---------------------------------------------------------------------------- CPUs

def _count_cpu_list(text: str) -> Optional[int]:
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()):
                return None
            count += int(hi) - int(lo) + 1
        elif part.isdigit():
            count += 1
        else:
            return None
    return count or None


def cpu_count(root: str = "/") -> Optional[int]:
    """CPUs this process may run on (affinity), lowered by a cgroup CPU quota."""
    allowed = None
    for line in (_read(_path(root, "/proc/self/status")) or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            allowed = _count_cpu_list(line.split(":", 1)[1])
    if allowed is None:
        text = _read(_path(root, "/sys/devices/system/cpu/online"))
        allowed = _count_cpu_list(text) if text else None
    quota = _cgroup_cpu_quota(root)
    if quota is not None and (allowed is None or quota < allowed):
        return quota
    return allowed


def _cgroup_cpu_quota(root: str) -> Optional[int]:
    groups = _self_cgroups(root)
    best: Optional[int] = None
    v2 = groups.get("")
    if v2 is not None and os.path.exists(_path(root, "/sys/fs/cgroup/cgroup.controllers")):
        for folder in _ancestors(_path(root, "/sys/fs/cgroup"), v2, _mount_root(root, "/sys/fs/cgroup")):
            parts = (_read(os.path.join(folder, "cpu.max")) or "").split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) > 0:
                cpus = max(1, -(-int(parts[0]) // int(parts[1])))
                best = cpus if best is None else min(best, cpus)
    v1 = groups.get("cpu")
    if v1 is not None:
        for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
            for folder in _ancestors(_path(root, mount), v1, _mount_root(root, mount)):
                q = (_read(os.path.join(folder, "cpu.cfs_quota_us")) or "").strip()
                p = (_read(os.path.join(folder, "cpu.cfs_period_us")) or "").strip()
                if q.isdigit() and p.isdigit() and int(p) > 0:
                    cpus = max(1, -(-int(q) // int(p)))
                    best = cpus if best is None else min(best, cpus)
    return best


# ---------------------------------------------------------------------------- filesystems

class Mount(NamedTuple):
    major: int
    minor: int
    mount_point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> List[Mount]:
    """/proc/self/mountinfo lines -> mounts (see proc(5)); malformed lines are skipped."""
    mounts: List[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
            major, minor = fields[2].split(":")
            mounts.append(Mount(int(major), int(minor), _unescape(fields[4]), fields[sep + 1],
                                _unescape(fields[sep + 2]) if len(fields) > sep + 2 else ""))
        except (ValueError, IndexError):
            continue
    return mounts


def read_mounts(root: str = "/") -> List[Mount]:
    return parse_mountinfo(_read(_path(root, "/proc/self/mountinfo")) or "")


def is_shared(fstype: str) -> bool:
    """Network and cluster file systems (NFS, Lustre, GPFS, BeeGFS, CephFS, CIFS, FUSE filers)."""
    if fstype in SHARED_FSTYPES:
        return True
    return fstype.startswith("fuse.") and fstype not in LOCAL_FUSE


def _under(path: str, mount_point: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_of(path: str, dev: int, mounts: List[Mount]) -> Optional[Mount]:
    """The mount a path lives on: same device, deepest mount point above the path.

    Falls back to the deepest mount point above the path when no mount has the device
    (btrfs subvolumes report an anonymous device).
    """
    above = [m for m in mounts if _under(path, m.mount_point)]
    same = [m for m in above if (m.major, m.minor) == (os.major(dev), os.minor(dev))]
    pool = same or above
    if not pool:
        return None
    return max(pool, key=lambda m: len(m.mount_point))


def filesystems(paths: List[str], mounts: List[Mount], stat: Callable[[str], Any] = os.stat,
                statvfs: Callable[[str], Any] = os.statvfs) -> List[FactDict]:
    """One entry per filesystem holding any of `paths`, counted once however many dirs.

    Grouped by device number (st_dev), so two dirs on one disk (or two bind mounts of
    it) are one pool. A missing dir is skipped: it holds nothing, and is not "0 free".
    """
    by_dev: Dict[int, FactDict] = {}
    for raw in paths:
        path = os.path.realpath(raw)
        try:
            st = stat(path)
        except OSError:
            continue
        dev = int(st.st_dev)
        if dev in by_dev:
            if raw not in by_dev[dev]["paths"]:
                by_dev[dev]["paths"].append(raw)
            continue
        try:
            vfs = statvfs(path)
        except OSError:
            continue
        mount = mount_of(path, dev, mounts)
        fstype = mount.fstype if mount else "unknown"
        by_dev[dev] = {
            "mount": mount.mount_point if mount else path,
            "device": mount.source if mount else "%d:%d" % (os.major(dev), os.minor(dev)),
            "fstype": fstype,
            "shared": is_shared(fstype),
            "free_bytes": int(vfs.f_bavail) * int(vfs.f_frsize),
            "total_bytes": int(vfs.f_blocks) * int(vfs.f_frsize),
            "paths": [raw],
        }
    return sorted(by_dev.values(), key=lambda f: str(f["mount"]))


# ---------------------------------------------------------------------------- weights

def _tree_size(path: str) -> int:
    if not os.path.isdir(path):
        try:
            return os.stat(path).st_size
        except OSError:
            return 0
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            if name.endswith(PART_SUFFIX):
                continue
            try:
                total += os.stat(os.path.join(folder, name)).st_size  # follows HF cache symlinks
            except OSError:
                continue
    return total


def _is_hf_folder(path: str, files: List[str]) -> bool:
    if "config.json" not in files:
        return False
    for name in files:
        if _HF_WEIGHT_RE.search(name) and not name.endswith(PART_SUFFIX):
            try:
                if os.stat(os.path.join(path, name)).st_size > 0:
                    return True
            except OSError:
                continue
    return False


def find_operator_weights(top: str, max_depth: int = 4, skip: Callable[[str, str], bool] = lambda d, n: False,
                          ) -> List[FactDict]:
    """Model files an operator put under `top`: *.gguf / *.safetensors files, and
    Hugging Face-style folders (config.json beside weight files) as one entry each.

    Empty files, `.part` downloads and hidden folders are not weights.
    """
    found: List[FactDict] = []
    if not os.path.isdir(top):
        return found
    base_depth = top.rstrip("/").count("/")
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not skip(folder, d))
        if folder != top and _is_hf_folder(folder, files):
            size = _tree_size(folder)
            if size > 0:
                found.append({"path": folder, "size_bytes": size, "cache": False, "cache_name": None})
            dirs[:] = []
            continue
        for name in sorted(files):
            if not name.endswith(WEIGHT_SUFFIXES) or skip(folder, name):
                continue
            path = os.path.join(folder, name)
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            if size > 0:
                found.append({"path": path, "size_bytes": size, "cache": False, "cache_name": None})
        if folder.rstrip("/").count("/") - base_depth >= max_depth:
            dirs[:] = []
    return found


def find_weights(model_dirs: List[str], cache_dir: Optional[str],
                 is_cache_name: Callable[[str], bool]) -> List[FactDict]:
    """Weights present: llmgw's cache entries (named by `is_cache_name`) and operator files.

    In the cache dir, a top-level entry with a cache name is one cache entry (file or
    folder, if not empty); anything else there is looked at like an operator's file.
    A path reached twice (a model dir inside another, or equal to the cache) counts once.
    """
    found: List[FactDict] = []
    seen: Set[str] = set()

    def add(entry: FactDict) -> None:
        real = os.path.realpath(entry["path"])
        if real not in seen:
            seen.add(real)
            found.append(entry)

    cache_real = os.path.realpath(cache_dir) if cache_dir else None
    if cache_dir and os.path.isdir(cache_dir):
        for name in sorted(os.listdir(cache_dir)):
            if not is_cache_name(name):
                continue
            path = os.path.join(cache_dir, name)
            size = _tree_size(path)
            if size > 0:
                add({"path": path, "size_bytes": size, "cache": True, "cache_name": name})

    def in_cache(folder: str, name: str) -> bool:
        return os.path.realpath(folder) == cache_real and is_cache_name(name)

    for top in list(model_dirs) + ([cache_dir] if cache_dir else []):
        for entry in find_operator_weights(top, skip=in_cache):
            add(entry)
    return sorted(found, key=lambda w: str(w["path"]))


# ---------------------------------------------------------------------------- units and engines

def run_command(argv: List[str], timeout: float = 20.0) -> Tuple[int, str, str]:
    """Run a command without a shell; a missing program is rc 127, a hang rc 124."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              check=False, universal_newlines=True)
    except FileNotFoundError:
        return 127, "", "%s: not found" % argv[0]
    except subprocess.TimeoutExpired:
        return 124, "", "%s: timed out after %ds" % (argv[0], timeout)
    except OSError as exc:
        return 126, "", "%s: %s" % (argv[0], exc)
    return proc.returncode, proc.stdout, proc.stderr


def llmgw_units(run: Run, pattern: str = "llmgw-*") -> Tuple[Optional[List[FactDict]], Optional[str]]:
    """llmgw's systemd units present on the host and their state: (units, reason if unknown).

    Loaded units come from `list-units --all`; unit files never loaded (installed but
    not started) from `list-unit-files`, as inactive. Templates are not units.
    """
    rc, out, err = run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "--full",
                        pattern])
    if rc == 127:
        return None, "systemctl is not installed (no systemd)"
    if rc != 0:
        return None, "systemctl failed: %s" % (err.strip() or "exit %d" % rc)
    units: Dict[str, FactDict] = {}
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) < 4:
            continue
        name, load, active, sub = parts[0].lstrip("●* "), parts[1], parts[2], parts[3]
        if not name or (load == "not-found" and active != "active"):
            continue
        units[name] = {"name": name, "active_state": active, "sub_state": sub}
    rc, out, _err = run(["systemctl", "list-unit-files", "--no-legend", "--no-pager", "--full", pattern])
    if rc == 0:
        for line in out.splitlines():
            parts = line.split()
            if not parts or "@." in parts[0] or parts[0] in units:
                continue
            units[parts[0]] = {"name": parts[0], "active_state": "inactive", "sub_state": "dead"}
    return [units[n] for n in sorted(units)], None


_VERSION_RE = re.compile(r"version:?\s*(\S.*)", re.IGNORECASE)


def _first_version(text: str) -> Optional[str]:
    match = _VERSION_RE.search(text)
    if match:
        return match.group(1).strip()[:80]  # "0.5.0-dev (build 1, commit 0c1e570)"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:80] if lines else None


def find_program(name: str, search_dirs: List[str]) -> Optional[str]:
    for folder in search_dirs:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which(name)


def _dist_version(dist: str) -> Optional[str]:
    try:
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415
    except ImportError:  # Python < 3.8
        return None
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _newest(paths: List[str]) -> Optional[str]:
    def mtime(path: str) -> float:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return 0.0

    existing = [p for p in paths if os.path.isfile(p) and os.access(p, os.X_OK)]
    return max(existing, key=mtime) if existing else None


def _venv_version(venv: str, dist: str) -> Optional[str]:
    """A package's version in a virtualenv, from its dist-info folder name (no process)."""
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "%s-*.dist-info" % dist)
    for folder in sorted(glob.glob(pattern), reverse=True):
        name = os.path.basename(folder)[len(dist) + 1:-len(".dist-info")]
        if name:
            return name
    return None


def engine_versions(run: Run, search_dirs: List[str], engine_dir: Optional[str] = None) -> FactDict:
    """Installed engines and their versions, keyed like the catalog (llamacpp, vllm, sglang).

    Where llmgw's engine role installs them first (`engine_dir`: llama-server builds in
    `llamacpp/<checksum>/`, the newest answering; vLLM and SGLang virtualenvs in
    `vllm/` and `sglang/`), then `search_dirs` and PATH for llama-server and vllm, then
    the Python packages of the interpreter running this module. llama.cpp's version is
    what `llama-server --version` prints. An engine not found is absent.
    """
    found: FactDict = {}
    builds = glob.glob(os.path.join(engine_dir, "llamacpp", "*", "llama-server")) if engine_dir else []
    llama = _newest(builds) or find_program("llama-server", search_dirs)
    if llama:
        rc, out, err = run([llama, "--version"])
        text = (out or "") + "\n" + (err or "")
        version = _first_version(text) if rc == 0 or "version" in text else None
        found["llamacpp"] = version or "unknown"
    for engine in ("vllm", "sglang"):
        version = _venv_version(os.path.join(engine_dir, engine), engine) if engine_dir else None
        if version is None:
            version = _dist_version(engine)
        program = find_program(engine, search_dirs) if engine == "vllm" and version is None else None
        if program:
            rc, out, err = run([program, "--version"])
            if rc == 0:
                version = _first_version(out or err)
        if version:
            found[engine] = version
    return found
