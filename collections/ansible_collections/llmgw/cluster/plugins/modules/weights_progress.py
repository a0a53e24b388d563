#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_progress
short_description: How far a download into llmgw's weights cache has got
description:
  - Reads what the C(llmgw.cluster.weights) module leaves beside a cache entry while it fetches it -
    C(.NAME.progress) (bytes, total, state) and the single-flight lock C(.NAME.lock) - and says whether
    the download is still running, finished, or failed.
  - A download is running while a process holds its lock. With the lock free, a finished entry is done;
    a progress file left in C(running) means the downloading process died; C(queued) (written by the
    role before it starts the download) means it has not started yet.
  - Read-only; never changes anything.
version_added: "0.1.0"
author: llmgw contributors
options:
  cache_dir:
    description: Absolute path of llmgw's weights cache on the host.
    type: path
    required: true
  name:
    description: The cache entry name of the download.
    type: str
    required: true
  queued_timeout:
    description:
      - Seconds a download may stay queued (the role wrote a C(queued) progress file and no process took it
        up) before it counts as failed; a module that never started cannot say so itself.
    type: int
    default: 300
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Follow a download
  llmgw.cluster.weights_progress:
    cache_dir: /var/cache/llmgw
    name: 5335b8e6e173fa17-tiny-llama
  register: progress
  until: progress.finished
  retries: 3600
  delay: 1
"""

RETURN = r"""
state:
  description: C(queued) (not started yet), C(running), C(done) or C(failed).
  type: str
  returned: always
finished:
  description: Whether there is nothing more to wait for (done or failed).
  type: bool
  returned: always
bytes:
  description: Bytes fetched so far (the entry's size when done); absent while pending.
  type: int
  returned: when known
total:
  description: Bytes expected, when the source or the control side said.
  type: int
  returned: when known
error:
  description: Why the download failed.
  type: str
  returned: state=failed
"""

import errno
import fcntl
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

try:  # running inside Ansible
    from ansible_collections.llmgw.cluster.plugins.module_utils.cache_names import is_cache_name, progress_name
except ImportError:  # imported directly by unit tests
    from cache_names import is_cache_name, progress_name  # type: ignore[no-redef]


def _size(path):
    if os.path.isdir(path):
        return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


def _lock_held(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # closing drops a lock we took
    return False


def read_progress(cache_dir, name, queued_timeout=300):
    """The download's state as a dict: state, finished, and bytes/total/error when known."""
    final = os.path.join(cache_dir, name)
    path = os.path.join(cache_dir, progress_name(name))
    try:
        with open(path) as fh:
            prog = json.load(fh)
        if not isinstance(prog, dict):
            prog = {}
        age = time.time() - os.stat(path).st_mtime
    except (OSError, ValueError):
        prog, age = {}, 0.0
    out = {k: prog[k] for k in ("bytes", "total") if isinstance(prog.get(k), int)}
    if _lock_held(os.path.join(cache_dir, "." + name + ".lock")):
        out.update(state="running", finished=False)
    elif os.path.exists(final):
        size = _size(final)
        out.update(state="done", finished=True, bytes=size, total=size)
    elif prog.get("state") == "failed":
        out.update(state="failed", finished=True, error=str(prog.get("error") or "the download failed"))
    elif prog.get("state") == "running":
        out.update(state="failed", finished=True,
                   error="the download stopped: its process (pid %s) is gone" % prog.get("pid", "?"))
    elif age > queued_timeout:
        out.update(state="failed", finished=True,
                   error="the download did not start within %d s" % queued_timeout)
    else:
        out.update(state="queued", finished=False)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(cache_dir=dict(type="path", required=True), name=dict(type="str", required=True),
                           queued_timeout=dict(type="int", default=300)),
        supports_check_mode=True,
    )
    name = module.params["name"]
    if not is_cache_name(name):
        module.fail_json(msg="%r is not a llmgw cache name" % name)
    progress = read_progress(module.params["cache_dir"], name, module.params["queued_timeout"])
    module.exit_json(changed=False, name=name, **progress)


if __name__ == "__main__":
    main()
