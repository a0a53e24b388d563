"""node_facts: memory (with cgroup limits), CPUs, filesystems once each, weights, units, engines.

/proc and /sys are fake trees under tmp_path; files, folders and file systems are real
(tmp_path on the root disk, /dev/shm a real tmpfs), and so is this machine's systemctl.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.facts import module, util, write_tree

cpu_memory = util("cpu_memory")
engine_versions = util("engine_versions")
host_io = util("host_io")
mounts = util("mounts")
units = util("units")
weight_files = util("weight_files")
cache_names = util("cache_names")
node_facts = module("node_facts")

GIB = 1024 * 1024 * 1024
MEMINFO = "MemTotal:       32768000 kB\nMemFree:         1000000 kB\n"  # 32000 MiB


# ---------------------------------------------------------------------------- memory


def test_memtotal_without_cgroup_limit(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"proc/meminfo": MEMINFO})
    assert cpu_memory.memory_facts(str(root)) == {"meminfo_total_mb": 32000, "cgroup_limit_mb": None, "total_mb": 32000}


def test_cgroup_v2_limit_of_the_container_lowers_memory(tmp_path: Path) -> None:
    """Inside a container the limit sits on the container's cgroup, the root of its view."""
    root = write_tree(tmp_path, {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": "0::/user.slice/user-0.slice/session-3.scope\n",
        "sys/fs/cgroup/cgroup.controllers": "cpu memory pids\n",
        "sys/fs/cgroup/memory.max": f"{4 * GIB}\n",
        "sys/fs/cgroup/user.slice/memory.max": "max\n",
        "sys/fs/cgroup/user.slice/user-0.slice/session-3.scope/memory.max": "max\n",
    })
    assert cpu_memory.memory_facts(str(root)) == {"meminfo_total_mb": 32000, "cgroup_limit_mb": 4096, "total_mb": 4096}


def test_cgroup_v2_tightest_limit_along_the_path_wins(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": "0::/a/b\n",
        "sys/fs/cgroup/cgroup.controllers": "memory\n",
        "sys/fs/cgroup/memory.max": f"{8 * GIB}\n",
        "sys/fs/cgroup/a/memory.max": f"{2 * GIB}\n",
        "sys/fs/cgroup/a/b/memory.max": "max\n",
    })
    assert cpu_memory.memory_facts(str(root))["total_mb"] == 2048


def test_cgroup_v1_limit_and_unlimited_value(tmp_path: Path) -> None:
    files = {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": "12:pids:/\n4:memory:/\n0::/\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{3 * GIB}\n",
    }
    assert cpu_memory.memory_facts(str(write_tree(tmp_path / "limited", files)))["total_mb"] == 3072
    files["sys/fs/cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712\n"  # v1's "no limit"
    assert cpu_memory.memory_facts(str(write_tree(tmp_path / "free", files)))["cgroup_limit_mb"] is None


def test_cgroup_v1_in_a_container_that_sees_only_its_own_subtree(tmp_path: Path) -> None:
    """podman on cgroup v1 (host cgroup namespace): /proc/self/cgroup names the full path,
    /sys/fs/cgroup/memory holds only the container's subtree (mountinfo says which)."""
    ctr = "/libpod_parent/libpod-f9fe9449"
    root = write_tree(tmp_path, {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": f"4:memory:{ctr}/user.slice/user-0.slice/session-1.scope\n0::{ctr}\n",
        "proc/self/mountinfo": (f"30 25 0:26 {ctr} /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"),
        "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{3 * GIB}\n",
        "sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes": f"{GIB}\n",
        "sys/fs/cgroup/memory/user.slice/user-0.slice/memory.limit_in_bytes": "9223372036854771712\n",
    })
    assert cpu_memory.memory_facts(str(root))["total_mb"] == 1024


def test_limit_above_memtotal_is_not_what_the_host_has(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": "0::/\n",
        "sys/fs/cgroup/cgroup.controllers": "memory\n",
        "sys/fs/cgroup/memory.max": f"{64 * GIB}\n",
    })
    assert cpu_memory.memory_facts(str(root))["total_mb"] == 32000


def test_unreadable_meminfo_is_unknown_not_zero(tmp_path: Path) -> None:
    assert cpu_memory.memory_facts(str(tmp_path))["total_mb"] is None


def test_real_memtotal_of_this_machine() -> None:
    with open("/proc/meminfo") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
    assert cpu_memory.meminfo_total_mb("/") == kb // 1024


# ---------------------------------------------------------------------------- CPUs


def test_cpus_from_affinity_and_quota(tmp_path: Path) -> None:
    files = {"proc/self/status": "Name:\tx\nCpus_allowed_list:\t0-3,8-11\n", "proc/self/cgroup": "0::/\n"}
    assert cpu_memory.cpu_count(str(write_tree(tmp_path / "a", files))) == 8
    files.update({"sys/fs/cgroup/cgroup.controllers": "cpu\n", "sys/fs/cgroup/cpu.max": "250000 100000\n"})
    assert cpu_memory.cpu_count(str(write_tree(tmp_path / "b", files))) == 3
    files["sys/fs/cgroup/cpu.max"] = "max 100000\n"
    assert cpu_memory.cpu_count(str(write_tree(tmp_path / "c", files))) == 8


def test_cpus_of_this_machine() -> None:
    assert cpu_memory.cpu_count("/") == len(os.sched_getaffinity(0))


# ---------------------------------------------------------------------------- filesystems


def test_mountinfo_parsing_unescapes_and_skips_junk() -> None:
    text = ("36 35 98:0 /mnt1 /mnt/my\\040disk rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
            "garbage line\n"
            "40 35 0:50 / /models rw,relatime shared:5 - nfs4 filer:/export/models rw,vers=4.2\n")
    parsed = mounts.parse_mountinfo(text)
    assert parsed == [mounts.Mount(98, 0, "/mnt/my disk", "ext3", "/dev/root"),
                      mounts.Mount(0, 50, "/models", "nfs4", "filer:/export/models")]


@pytest.mark.parametrize(("fstype", "shared"), [
    ("nfs", True), ("nfs4", True), ("lustre", True), ("gpfs", True), ("beegfs", True), ("ceph", True),
    ("cifs", True), ("smb3", True), ("fuse.sshfs", True), ("fuse.glusterfs", True), ("fuse.juicefs", True),
    ("ext4", False), ("xfs", False), ("tmpfs", False), ("overlay", False), ("fuse.fuse-overlayfs", False),
    ("fuse.lxcfs", False), ("zfs", False), ("btrfs", False),
])
def test_shared_file_systems(fstype: str, shared: bool) -> None:
    assert mounts.is_shared(fstype) is shared


def test_two_dirs_on_one_disk_are_one_pool_and_missing_dirs_are_skipped(tmp_path: Path) -> None:
    a, b = tmp_path / "models", tmp_path / "cache"
    a.mkdir()
    b.mkdir()
    fss = mounts.filesystems([str(a), str(b), str(tmp_path / "absent")], mounts.read_mounts("/"))
    assert len(fss) == 1
    fs = fss[0]
    vfs = os.statvfs(a)
    assert fs["paths"] == [str(a), str(b)]
    assert fs["total_bytes"] == vfs.f_blocks * vfs.f_frsize
    assert abs(fs["free_bytes"] - vfs.f_bavail * vfs.f_frsize) < 64 * 1024 * 1024  # others write meanwhile
    assert fs["shared"] is False
    assert str(a).startswith(fs["mount"])


def test_dirs_on_two_file_systems_are_two_pools(tmp_path: Path) -> None:
    shm = Path("/dev/shm") / f"llmgw-facts-test-{os.getpid()}"
    shm.mkdir()
    try:
        fss = mounts.filesystems([str(tmp_path), str(shm)], mounts.read_mounts("/"))
    finally:
        shm.rmdir()
    by_type = {f["fstype"]: f for f in fss}
    assert set(by_type) >= {"tmpfs"} and len(fss) == 2
    assert by_type["tmpfs"]["mount"] == "/dev/shm" and by_type["tmpfs"]["paths"] == [str(shm)]


def test_a_network_mount_is_shared(tmp_path: Path) -> None:
    """The device of a real dir, listed in a fake mountinfo as an NFS mount above it."""
    models = tmp_path / "models"
    models.mkdir()
    dev = os.stat(models).st_dev
    fake = write_tree(tmp_path / "root", {"proc/self/mountinfo": (
        f"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        f"2 1 {os.major(dev)}:{os.minor(dev)} / {tmp_path} rw - nfs4 filer:/export rw\n")})
    (fs,) = mounts.filesystems([str(models)], mounts.read_mounts(str(fake)))
    assert (fs["mount"], fs["fstype"], fs["device"], fs["shared"]) == (str(tmp_path), "nfs4", "filer:/export", True)


# ---------------------------------------------------------------------------- weights


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def test_weights_cache_entries_operator_files_and_what_is_not_weights(tmp_path: Path) -> None:
    cache, models = tmp_path / "cache", tmp_path / "models"
    src = "hf://Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf"
    entry = _file(cache / cache_names.cache_name(src), 4000)
    folder_entry = cache / cache_names.cache_name("hf://org/big-model")
    _file(folder_entry / "model-00001-of-00002.safetensors", 3000)
    _file(folder_entry / "model-00002-of-00002.safetensors", 2000)
    _file(cache / (cache_names.cache_name("hf://org/partial.gguf") + ".part"), 100)  # download in progress
    (cache / cache_names.cache_name("hf://org/empty")).mkdir()  # empty folder
    stray = _file(cache / "operator-dropped.gguf", 10)  # an operator's file inside the cache
    gguf = _file(models / "llama" / "Llama-3-8B.Q4_K_M.gguf", 500)
    hf = models / "mistral-7b"
    _file(hf / "config.json", 20)
    _file(hf / "model.safetensors", 700)
    _file(hf / "tokenizer.json", 30)
    _file(models / "empty.gguf", 0)
    _file(models / "x.gguf.part", 50)
    _file(models / ".hidden" / "y.gguf", 50)
    _file(models / "readme.txt", 5)
    (models / "nothing-here").mkdir()

    found = weight_files.find_weights([str(models), str(models / "llama")], str(cache), cache_names.is_cache_name)
    by_path = {w["path"]: w for w in found}
    assert set(by_path) == {str(entry), str(folder_entry), str(stray), str(gguf), str(hf)}
    assert by_path[str(entry)] == {"path": str(entry), "size_bytes": 4000, "cache": True,
                                   "cache_name": entry.name}
    assert by_path[str(folder_entry)]["size_bytes"] == 5000 and by_path[str(folder_entry)]["cache"]
    assert by_path[str(hf)] == {"path": str(hf), "size_bytes": 750, "cache": False, "cache_name": None,
                                "files": {"config.json": 20, "model.safetensors": 700, "tokenizer.json": 30}}
    assert by_path[str(stray)]["cache"] is False


def test_no_weights_is_an_empty_list(tmp_path: Path) -> None:
    assert weight_files.find_weights([str(tmp_path / "absent")], str(tmp_path / "nocache"),
                                     cache_names.is_cache_name) == []


# ---------------------------------------------------------------------------- units, engines, the module


def test_units_without_systemd_are_unknown_with_the_reason() -> None:
    """This machine does not boot systemd: the real systemctl says so, and units are unknown."""
    found, reason = units.llmgw_units(host_io.run_command)
    assert found is None
    assert reason is not None and "systemd" in reason


def test_a_missing_program_is_a_reason_not_a_crash() -> None:
    assert host_io.run_command(["/nonexistent/systemctl"])[0] == 127
    assert units.llmgw_units(lambda argv: host_io.run_command(["/nonexistent/" + argv[0]]))[1] == (
        "systemctl is not installed (no systemd)")


def test_no_engine_installed_here() -> None:
    assert engine_versions.engine_versions(host_io.run_command, ["/nonexistent"]) == {}


def test_vllm_and_sglang_in_the_engine_roles_virtualenvs(tmp_path: Path) -> None:
    engines = tmp_path / "engines"
    (engines / "vllm/lib/python3.11/site-packages/vllm-0.8.5.post1.dist-info").mkdir(parents=True)
    (engines / "sglang/lib/python3.12/site-packages/sglang-0.4.6.post5.dist-info").mkdir(parents=True)
    (engines / "sglang/lib/python3.12/site-packages/sglang_router-0.1.4.dist-info").mkdir(parents=True)
    assert engine_versions.engine_versions(host_io.run_command, [], str(engines)) == {"vllm": "0.8.5.post1",
                                                                         "sglang": "0.4.6.post5"}


@pytest.mark.engine
def test_llama_server_version_from_the_real_binary(tmp_path: Path) -> None:
    """The real build, installed the way role llmgw_engine does: engines/llamacpp/<checksum>/."""
    built = Path(os.environ.get("LLMGW_CACHE", Path.home() / ".cache/llmgw")) / "engine" / "llama-server"
    assert built.is_file(), f"build the engine first: scripts/build-engine ({built})"
    engine_dir = tmp_path / "engines" / "llamacpp" / "0123456789abcdef"
    engine_dir.mkdir(parents=True)
    (engine_dir / "llama-server").symlink_to(built)
    versions = engine_versions.engine_versions(host_io.run_command, [], str(tmp_path / "engines"))
    _, out, err = host_io.run_command([str(engine_dir / "llama-server"), "--version"])
    first = next(line for line in (out + err).splitlines() if line.startswith("version:"))
    assert versions["llamacpp"] == first.removeprefix("version:").strip()  # e.g. "0.5.0-dev (build 1, commit ...)"
    assert versions["llamacpp"][0].isdigit()


def test_module_facts_on_a_fake_root_with_real_dirs(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "root", {
        "proc/meminfo": MEMINFO,
        "proc/self/status": "Cpus_allowed_list:\t0-15\n",
        "proc/self/cgroup": "0::/\n",
        "sys/fs/cgroup/cgroup.controllers": "memory cpu\n",
        "sys/fs/cgroup/memory.max": f"{GIB}\n",
        "proc/self/mountinfo": Path("/proc/self/mountinfo").read_text(),
    })
    models = tmp_path / "models"
    _file(models / "m.gguf", 1234)
    params = {"root": str(root), "model_dirs": [str(models), "/nonexistent/dir"], "cache_dir": str(tmp_path / "c"),
              "engine_search_path": [], "engine_dir": str(tmp_path / "no-engines")}
    facts = node_facts.node_facts(params)
    assert facts["llmgw_memory_total_mb"] == 1024
    assert facts["llmgw_cpus"] == 16
    assert [f["paths"] for f in facts["llmgw_filesystems"]] == [[str(models)]]
    assert facts["llmgw_weights"] == [{"path": str(models / "m.gguf"), "size_bytes": 1234, "cache": False,
                                       "cache_name": None}]
    assert facts["llmgw_units"] is None and facts["llmgw_units_unknown_reason"]
    assert facts["llmgw_engines"] == {}
