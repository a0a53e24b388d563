#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights
short_description: Fetch model weights into llmgw's cache, or remove llmgw's own cache entries safely
description:
  - With I(state=present), fetches I(source) (C(https://), C(hf://org/repo/file), C(file://)) into
    I(cache_dir) under a name derived from a hash of the source. The download goes to C(NAME.part)
    and is renamed when complete, so a finished name is always a whole file.
  - Single-flight per source on a host, through a lock file; eight shards starting together make one download.
  - Progress is readable while the download runs in C(.NAME.progress) (JSON with C(bytes), and C(total)
    only when the server sent a length).
  - With I(state=absent), removes the named cache entries, re-checking every one on the host before
    unlinking it - inside I(cache_dir) after resolving symlinks, with the cache-name pattern, no C(..),
    not a mount point, not open by any process, not listed in I(in_use). Anything else is refused and
    reported in C(refused); an operator's files (without llmgw's cache name) are never touched.
version_added: "0.1.0"
author: llmgw contributors
options:
  state:
    description: Whether the entry should be present (fetched) or absent (removed).
    type: str
    choices: [present, absent]
    default: present
  cache_dir:
    description: Absolute path of llmgw's weights cache on the host.
    type: path
    required: true
  source:
    description: The source to fetch; required with I(state=present).
    type: str
  names:
    description: Cache entry names to remove; with I(state=absent).
    type: list
    elements: str
    default: []
  in_use:
    description: Cache entry names the control side knows to be in use; never removed.
    type: list
    elements: str
    default: []
  hf_endpoint:
    description: Base URL of the Hugging Face hub for C(hf://) sources.
    type: str
    default: https://huggingface.co
  hf_token:
    description: Token for gated Hugging Face repositories.
    type: str
  timeout:
    description: Seconds to wait for the source server to answer.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Fetch a GGUF model into the cache
  llmgw.cluster.weights:
    cache_dir: /var/cache/llmgw
    source: hf://Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf

- name: Reclaim weights no catalog model wants any more
  llmgw.cluster.weights:
    state: absent
    cache_dir: /var/cache/llmgw
    names: [5335b8e6e173fa17-qwen2.5-7b-instruct-q4_k_m.gguf]
    in_use: []
"""

RETURN = r"""
name:
  description: The cache entry name (present).
  type: str
  returned: state=present
path:
  description: Absolute path of the cache entry (present).
  type: str
  returned: state=present
size_bytes:
  description: Size of the cache entry in bytes (present; not in check mode before a fetch).
  type: int
  returned: state=present
removed:
  description: Names removed (absent).
  type: list
  elements: dict
  returned: state=absent
  sample: [{"name": "5335b8e6e173fa17-m.gguf", "size_bytes": 1024}]
refused:
  description: Names not removed, each with the reason (absent).
  type: list
  elements: dict
  returned: state=absent
  sample: [{"name": "../etc", "reason": "not a llmgw cache name"}]
"""

import errno
import fcntl
import json
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

try:  # running inside Ansible
    from ansible_collections.llmgw.cluster.plugins.module_utils.cache_names import (
        PART_SUFFIX, cache_name, is_cache_name)
except ImportError:  # imported directly by unit tests
    from cache_names import PART_SUFFIX, cache_name, is_cache_name  # type: ignore[no-redef]

CHUNK = 1024 * 1024
PROGRESS_EVERY = 1.0  # seconds between progress file updates


def progress_path(cache_dir, name):
    return os.path.join(cache_dir, "." + name + ".progress")


def _write_progress(cache_dir, name, done, total):
    path = progress_path(cache_dir, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"bytes": done, "total": total, "updated": time.time()}, fh)
    os.replace(tmp, path)


def resolve_url(source, hf_endpoint):
    if source.startswith("hf://"):
        parts = source[len("hf://"):].strip("/").split("/")
        if len(parts) < 3:
            raise ValueError("hf:// sources must name a file: hf://org/repo/path/to/file")
        return "%s/%s/%s/resolve/main/%s" % (hf_endpoint.rstrip("/"), parts[0], parts[1], "/".join(parts[2:]))
    return source


def _copy_stream(reader, out, total, cache_dir, name):
    done = 0
    last = 0.0
    while True:
        chunk = reader.read(CHUNK)
        if not chunk:
            break
        out.write(chunk)
        done += len(chunk)
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY:
            _write_progress(cache_dir, name, done, total)
            last = now
    _write_progress(cache_dir, name, done, total)
    return done


def fetch(source, cache_dir, hf_endpoint="https://huggingface.co", hf_token=None, timeout=60):
    """Fetch `source` into the cache unless present; returns (path, changed). Single-flight per source."""
    name = cache_name(source)
    final = os.path.join(cache_dir, name)
    if os.path.exists(final):
        return final, False
    os.makedirs(cache_dir, mode=0o755, exist_ok=True)
    lock_fd = os.open(os.path.join(cache_dir, "." + name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        # Whoever holds the lock downloads; the others wait here and then find the file.
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if os.path.exists(final):
            return final, False
        part = final + PART_SUFFIX
        with open(part, "wb") as out:
            if source.startswith("file://"):
                src = source[len("file://"):]
                total = os.path.getsize(src)
                with open(src, "rb") as reader:
                    done = _copy_stream(reader, out, total, cache_dir, name)
            else:
                headers = {"Authorization": "Bearer " + hf_token} if hf_token else {}
                resp = open_url(resolve_url(source, hf_endpoint), headers=headers, timeout=timeout,
                                follow_redirects="all")
                length = resp.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                done = _copy_stream(resp, out, total, cache_dir, name)
            if total is not None and done != total:
                raise IOError("short download: %d of %d bytes" % (done, total))
            out.flush()
            os.fsync(out.fileno())
        os.rename(part, final)
        try:
            os.unlink(progress_path(cache_dir, name))
        except OSError:
            pass
        return final, True
    finally:
        os.close(lock_fd)


def _open_by(path):
    """(pid, command) of a process holding `path` open or mapped, else None."""
    real = os.path.realpath(path)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if target == real or target.startswith(real + "/"):
                    return pid, _comm(pid)
            with open("/proc/%s/maps" % pid) as maps:
                for line in maps:
                    if line.rstrip().endswith(real) or (real + "/") in line:
                        return pid, _comm(pid)
        except OSError:
            continue
    return None


def _comm(pid):
    try:
        with open("/proc/%s/comm" % pid) as fh:
            return fh.read().strip()
    except OSError:
        return "?"


def _size(path):
    if os.path.isdir(path) and not os.path.islink(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.lstat(path).st_size


def check_removable(cache_dir, name, in_use):
    """The reason `name` must not be removed from `cache_dir`, or None when it may be."""
    if not isinstance(name, str) or not name or "/" in name or "\x00" in name or ".." in name:
        return "not a llmgw cache name (a bare name is expected, without '/' or '..')"
    if not is_cache_name(name):
        return "not a llmgw cache name; llmgw only removes what it fetched"
    if name in in_use:
        return "in use by a replica"
    path = os.path.join(cache_dir, name)
    if not os.path.lexists(path):
        return "not present"
    if os.path.islink(path):
        return "is a symbolic link; llmgw never fetches links, so it is not its own"
    real_cache = os.path.realpath(cache_dir)
    if os.path.dirname(os.path.realpath(path)) != real_cache:
        return "resolves outside the cache directory %s" % real_cache
    if os.path.ismount(path):
        return "is a mount point"
    holder = _open_by(path)
    if holder is not None:
        return "open by process %s (%s)" % holder
    return None


def remove(cache_dir, names, in_use, check_mode=False):
    """Remove what passes every check; returns (removed, refused)."""
    removed, refused, seen = [], [], set()
    if not os.path.isabs(cache_dir) or os.path.realpath(cache_dir) == "/":
        return [], [{"name": n, "reason": "cache_dir %r is not an absolute, non-root path" % cache_dir}
                    for n in names]
    for name in names:
        if name in seen:
            refused.append({"name": name, "reason": "given twice; handled once"})
            continue
        seen.add(name)
        reason = check_removable(cache_dir, name, set(in_use))
        if reason:
            refused.append({"name": name, "reason": reason})
            continue
        path = os.path.join(cache_dir, name)
        size = _size(path)
        if not check_mode:
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError as exc:
                refused.append({"name": name, "reason": "could not be removed: %s" % os.strerror(exc.errno or errno.EIO)})
                continue
        removed.append({"name": name, "size_bytes": size})
    return removed, refused


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            cache_dir=dict(type="path", required=True),
            source=dict(type="str"),
            names=dict(type="list", elements="str", default=[]),
            in_use=dict(type="list", elements="str", default=[]),
            hf_endpoint=dict(type="str", default="https://huggingface.co"),
            hf_token=dict(type="str", no_log=True),
            timeout=dict(type="int", default=60),
        ),
        required_if=[("state", "present", ["source"])],
        supports_check_mode=True,
    )


def main():
    module = build_module()
    p = module.params
    if p["state"] == "present":
        name = cache_name(p["source"])
        path = os.path.join(p["cache_dir"], name)
        if module.check_mode:
            present = os.path.exists(path)
            module.exit_json(changed=not present, name=name, path=path,
                             size_bytes=os.path.getsize(path) if present else None)
        try:
            path, changed = fetch(p["source"], p["cache_dir"], p["hf_endpoint"], p["hf_token"], p["timeout"])
        except Exception as exc:  # noqa: BLE001 - every failure becomes a module failure with the reason
            module.fail_json(msg="cannot fetch %s: %s" % (p["source"], exc), name=name)
        module.exit_json(changed=changed, name=name, path=path, size_bytes=os.path.getsize(path))
    removed, refused = remove(p["cache_dir"], p["names"], p["in_use"], module.check_mode)
    module.exit_json(changed=bool(removed), removed=removed, refused=refused)


if __name__ == "__main__":
    main()
