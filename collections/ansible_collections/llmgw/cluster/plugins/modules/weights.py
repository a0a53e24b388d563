#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmgw contributors
from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights
short_description: Fetch model weights into llmgw's cache, or remove llmgw's own cache entries safely
description:
  - With I(state=present), fetches I(source) (C(https://), C(hf://org/repo/file), C(file://), or a whole
    Hugging Face repository C(hf://org/repo@COMMIT[?include=P,P&exclude=P])) into I(cache_dir) under a
    name derived from a hash of the source. The download goes to C(NAME.part) and is renamed when
    complete, so a finished name is always a whole file (or a whole snapshot folder). A C(file://)
    folder (a PEFT adapter's) is copied whole, its plain files and folders only (a link is refused).
  - A whole repository is fetched with C(huggingface_hub) (resumable, verified) pinned to its commit;
    the entry is the snapshot folder an engine loads.
  - An C(http(s)://) source is fetched only from I(hf_endpoint)'s own scheme, host and port (redirects
    from there are followed, as the Hub's downloads need); any other URL is refused before anything is
    opened or written.
  - The token goes only to I(hf_endpoint)'s own origin, over https (http only with I(hf_allow_http)),
    never to another host a source names or a redirect leads to. C(file://) sources are read only under
    I(model_dirs). Entries are 0750/0640, root's and I(group)'s, never world-readable.
  - Single-flight per source on a host, through a lock file; eight shards starting together make one download.
  - Progress is readable while the download runs in C(.NAME.progress) (JSON with C(bytes), and C(total)
    only when the server sent a length).
  - With I(state=present) and I(present_at), fetches nothing. It checks that the operator's copy at
    I(present_at) exists and lies under I(model_dirs) (after resolving symlinks), outside I(cache_dir),
    and reports it; it never writes there (the weights are served where they are).
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
  hf_allow_http:
    description: Send the token to I(hf_endpoint) over plain http (a local mirror the site configured).
    type: bool
    default: false
  model_dirs:
    description: The host's C(llmgw_model_dirs); C(file://) sources outside them are refused.
    type: list
    elements: path
    default: []
  present_at:
    description:
      - An operator's copy of I(source) under I(model_dirs) that the shard is served from; nothing is
        fetched or written, the copy is only checked (with I(state=present)).
    type: path
  expected_bytes:
    description: The size the control side expects, reported as the progress total for whole repositories.
    type: int
  group:
    description: Group that owns the cache entries (the engines' group); root's when unset.
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

- name: Check an operator's copy served in place (nothing is fetched)
  llmgw.cluster.weights:
    cache_dir: /var/cache/llmgw
    source: hf://Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf
    present_at: /models/qwen2.5-7b-instruct-q4_k_m.gguf
    model_dirs: [/models]

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
  description: Absolute path of the cache entry, or of the operator's copy with I(present_at) (present).
  type: str
  returned: state=present
fetched:
  description: Whether anything was downloaded or copied (false for I(present_at) and for a present entry).
  type: bool
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

import contextlib
import errno
import fcntl
import grp
import json
import os
import re
import shutil
import sys
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError
from ansible.module_utils.six.moves.urllib.parse import urljoin, urlsplit
from ansible.module_utils.urls import open_url

try:  # running inside Ansible
    from ansible_collections.llmgw.cluster.plugins.module_utils.cache_names import (
        PART_SUFFIX,
        cache_name,
        is_cache_name,
        progress_name,
    )
except ImportError:  # imported directly by unit tests
    from cache_names import PART_SUFFIX, cache_name, is_cache_name, progress_name  # type: ignore[no-redef]

CHUNK = 1024 * 1024
PROGRESS_EVERY = 1.0  # seconds between progress file updates
MAX_REDIRECTS = 10
# hf://org/repo@<commit>[?include=a,b&exclude=c]: a whole repository, pinned by llmgw plan
HF_REPO_RE = re.compile(r"^hf://([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(?:@([A-Za-z0-9._-]+))?(?:\?(.*))?$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
PATTERN_RE = re.compile(r"^[A-Za-z0-9._*?\[\]/-]{1,200}$")


class FetchError(Exception):
    """A refusal or failure with a reason meant for the operator."""


def progress_path(cache_dir, name):
    return os.path.join(cache_dir, progress_name(name))


def _write_progress(cache_dir, name, done, total, state="running", error=None):
    path = progress_path(cache_dir, name)
    tmp = path + ".tmp"
    doc = {"state": state, "pid": os.getpid(), "bytes": done, "total": total, "updated": time.time()}
    if error:
        doc["error"] = error
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def _forget_progress(cache_dir, name):
    with contextlib.suppress(OSError):
        os.unlink(progress_path(cache_dir, name))


def parse_hf_repo(source):
    """(org/repo, revision, include, exclude) for a whole-repository hf:// source, else None."""
    m = HF_REPO_RE.match(source)
    if not m:
        return None
    include, exclude = [], []
    for part in (m.group(4) or "").split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        if key not in ("include", "exclude"):
            raise FetchError("unknown hf:// option %r (include= and exclude= are known)" % key)
        pats = [v for v in value.split(",") if v]
        bad = [v for v in pats if not PATTERN_RE.match(v) or ".." in v]
        if bad:
            raise FetchError("hf:// %s patterns may hold only letters, digits and . _ - / * ? [ ]: %r" % (key, bad))
        (include if key == "include" else exclude).extend(pats)
    return "%s/%s" % (m.group(1), m.group(2)), m.group(3), include, exclude


def resolve_url(source, hf_endpoint):
    if source.startswith("hf://"):
        parts = source[len("hf://"):].strip("/").split("/")
        if len(parts) < 3:
            raise FetchError("hf:// sources name a file (hf://org/repo/path/to/file) or a whole repository "
                             "pinned to a commit (hf://org/repo@<commit>)")
        return "%s/%s/%s/resolve/main/%s" % (hf_endpoint.rstrip("/"), parts[0], parts[1], "/".join(parts[2:]))
    return source


def _origin(url):
    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def check_origin(source, hf_endpoint):
    """Refuse an http(s) source that is not on the endpoint's own scheme, host and port.

    A host fetches as root from inside the fleet's network: a catalog URL to any other host
    (an internal service, a cloud metadata address) would be a request made for whoever
    wrote the catalog. `catalog validate` and `plan` refuse such a source; this is the
    host's own check, before anything is opened or written."""
    if source.startswith(("https://", "http://")) and _origin(source) != _origin(hf_endpoint):
        raise FetchError("refusing to fetch %s: hosts fetch only from the site's endpoint %s (`mirror:` in "
                         "llmgw.yaml)" % (source, hf_endpoint))


def endpoint_token(hf_endpoint, hf_token, allow_http):
    """The token, once checked that it may go to the endpoint: over https, or http when the site allows it."""
    if not hf_token:
        return None
    scheme = urlsplit(hf_endpoint).scheme
    if scheme == "https" or (scheme == "http" and allow_http):
        return hf_token
    raise FetchError("refusing to send the Hugging Face token to %s over %s; the token goes only over https "
                     "(or http to a local mirror configured with `mirror:` in llmgw.yaml)" % (hf_endpoint, scheme))


def open_source(url, hf_endpoint, token, timeout):
    """Open `url`, following redirects ourselves: the token goes only to the endpoint's own origin."""
    for _ in range(MAX_REDIRECTS + 1):
        same = token and _origin(url) == _origin(hf_endpoint)
        headers = {"Authorization": "Bearer " + token} if same else {}
        try:
            return open_url(url, headers=headers, timeout=timeout, follow_redirects="none")
        except HTTPError as exc:
            location = exc.headers.get("Location") if exc.headers else None
            if exc.code in (301, 302, 303, 307, 308) and location:
                url = urljoin(url, location)
                if urlsplit(url).scheme not in ("http", "https"):
                    raise FetchError("redirected to a non-http URL %s" % url) from None
                continue
            raise
    raise FetchError("more than %d redirects" % MAX_REDIRECTS)


def local_path(source, model_dirs):
    """The real path of a file:// source (a file, or a folder: a PEFT adapter's), only when it lies
    under one of the host's llmgw_model_dirs."""
    path = os.path.realpath(source[len("file://"):])
    for d in model_dirs:
        real = os.path.realpath(d)
        if real != "/" and (path + "/").startswith(real.rstrip("/") + "/") and path != real:
            if not (os.path.isfile(path) or os.path.isdir(path)):
                raise FetchError("%s is neither a file nor a folder" % path)
            return path
    raise FetchError("file:// sources must lie under the host's llmgw_model_dirs (%s); %s does not"
                     % (", ".join(model_dirs) or "none set", path))


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


def _copy_tree(src, part, cache_dir, name):
    """A file:// folder (a PEFT adapter's) copied whole into `part`: its regular files, each
    synced. A link is refused, not followed: it could lead out of the model dirs local_path checked."""
    if os.path.isdir(part) and not os.path.islink(part):  # what a killed copy left
        shutil.rmtree(part)
    elif os.path.lexists(part):
        os.unlink(part)
    total = _tree_bytes(src)
    done = 0
    for d, dirs, files in os.walk(src):
        target = os.path.join(part, os.path.relpath(d, src))
        os.makedirs(target, mode=0o750, exist_ok=True)
        for x in dirs + files:
            path = os.path.join(d, x)
            if os.path.islink(path) or not (os.path.isdir(path) or os.path.isfile(path)):
                raise FetchError("%s is a link or not a regular file; a file:// folder is copied only "
                                 "when it holds plain files and folders" % path)
        for x in files:
            with open(os.path.join(d, x), "rb") as reader, open(os.path.join(target, x), "wb") as out:
                shutil.copyfileobj(reader, out, CHUNK)
                done += out.tell()
                out.flush()
                os.fsync(out.fileno())
            _write_progress(cache_dir, name, done, total)


def _tree_bytes(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(d, f)).st_size
    return total


def repo_total(repo, revision, include, exclude, hf_endpoint, token, timeout):
    """Bytes the selected files of the snapshot hold (the progress total), or None when not known.

    Asked of the endpoint like huggingface_hub asks it (the revision's file list, then each
    file's metadata), so it works against offline mirrors that send no sizes in the list."""
    try:
        from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
        from huggingface_hub.utils import filter_repo_objects
        endpoint = hf_endpoint.rstrip("/")
        info = HfApi(endpoint=endpoint).model_info(repo, revision=revision, token=token or False, timeout=timeout)
        names = filter_repo_objects([s.rfilename for s in info.siblings or []], allow_patterns=include or None,
                                    ignore_patterns=exclude or None)
        total = 0
        for n in names:
            meta = get_hf_file_metadata(hf_hub_url(repo, n, revision=revision, endpoint=endpoint),
                                        token=token or False, timeout=timeout, endpoint=endpoint)
            if meta.size is None:
                return None
            total += meta.size
        return total
    except Exception:  # the total is for display only; the download reports its own errors
        return None


def _fetch_repo(source, part, cache_dir, name, hf_endpoint, token, expected, timeout):
    """A whole repository snapshot into the folder `part`, with huggingface_hub (resumable, verified)."""
    repo, revision, include, exclude = parse_hf_repo(source)
    if not revision or not COMMIT_RE.match(revision):
        raise FetchError("hf:// repositories reach hosts pinned to a commit (hf://%s@<40 hex>); `llmgw plan` "
                         "pins them, so a replica never changes weights silently" % repo)
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise FetchError("huggingface_hub is not installed for %s on this host; the llmgw_weights role installs "
                         "it from the control host's wheelhouse" % sys.executable) from None
    if expected is None:
        expected = repo_total(repo, revision, include, exclude, hf_endpoint, token, timeout)
    os.makedirs(part, mode=0o750, exist_ok=True)
    stop = threading.Event()

    def report():  # bytes on disk so far (huggingface_hub's .incomplete files included)
        while not stop.wait(PROGRESS_EVERY):
            _write_progress(cache_dir, name, _tree_bytes(part), expected)

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    try:
        snapshot_download(repo, revision=revision, local_dir=part, endpoint=hf_endpoint.rstrip("/"),
                          token=token or False, allow_patterns=include or None, ignore_patterns=exclude or None,
                          etag_timeout=timeout)
    finally:
        stop.set()
        reporter.join()
    # huggingface_hub's resume metadata is no part of the model; the finished entry holds only its files.
    shutil.rmtree(os.path.join(part, ".cache"), ignore_errors=True)
    done = _tree_bytes(part)
    _write_progress(cache_dir, name, done, expected)
    return done


def _group_id(group):
    if not group:
        return -1
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise FetchError("group %r does not exist on this host (the engines' group)" % group) from None


def secure(path, gid):
    """0750 folders and 0640 files, root's and the engines' group: weights are not world-readable."""
    entries = [(path, os.path.isdir(path) and not os.path.islink(path))]
    if entries[0][1]:
        for d, dirs, files in os.walk(path):
            entries += [(os.path.join(d, x), True) for x in dirs] + [(os.path.join(d, x), False) for x in files]
    for p, is_dir in entries:
        if os.path.islink(p):
            continue
        os.chmod(p, 0o750 if is_dir else 0o640)
        if gid >= 0:
            os.chown(p, -1, gid)


def fetch(source, cache_dir, hf_endpoint="https://huggingface.co", hf_token=None, timeout=60, model_dirs=(),
          allow_http=False, expected_bytes=None, group=None):
    """Fetch `source` into the cache unless present; returns (path, changed). Single-flight per source."""
    check_origin(source, hf_endpoint)
    name = cache_name(source)
    final = os.path.join(cache_dir, name)
    gid = _group_id(group)
    old_umask = os.umask(0o027)
    try:
        if os.path.exists(final):
            secure(final, gid)
            _forget_progress(cache_dir, name)
            return final, False
        os.makedirs(cache_dir, mode=0o750, exist_ok=True)
        lock_fd = os.open(os.path.join(cache_dir, "." + name + ".lock"), os.O_RDWR | os.O_CREAT, 0o640)
        try:
            # Whoever holds the lock downloads; the others wait here and then find the entry.
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            if os.path.exists(final):
                _forget_progress(cache_dir, name)
                return final, False
            try:
                _write_progress(cache_dir, name, 0, expected_bytes)
                _fetch_locked(source, final, cache_dir, name, hf_endpoint, hf_token, timeout, model_dirs,
                              allow_http, expected_bytes)
            except Exception as exc:
                _write_progress(cache_dir, name, 0, expected_bytes, state="failed", error=str(exc))
                raise
            secure(final, gid)
            _forget_progress(cache_dir, name)
            return final, True
        finally:
            os.close(lock_fd)
    finally:
        os.umask(old_umask)


def _fetch_locked(source, final, cache_dir, name, hf_endpoint, hf_token, timeout, model_dirs, allow_http,
                  expected_bytes):
    part = final + PART_SUFFIX
    if source.startswith("hf://") and parse_hf_repo(source) is not None:
        token = endpoint_token(hf_endpoint, hf_token, allow_http)
        _fetch_repo(source, part, cache_dir, name, hf_endpoint, token, expected_bytes, timeout)
        os.rename(part, final)
        return
    src = local_path(source, model_dirs) if source.startswith("file://") else None
    if src is not None and os.path.isdir(src):
        _copy_tree(src, part, cache_dir, name)
        os.rename(part, final)
        return
    with open(part, "wb") as out:
        if src is not None:
            total = os.path.getsize(src)
            with open(src, "rb") as reader:
                done = _copy_stream(reader, out, total, cache_dir, name)
        elif source.startswith(("hf://", "https://", "http://")):
            token = endpoint_token(hf_endpoint, hf_token, allow_http)
            resp = open_source(resolve_url(source, hf_endpoint), hf_endpoint, token, timeout)
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            done = _copy_stream(resp, out, total, cache_dir, name)
        else:
            raise FetchError("unknown source scheme (https://, hf:// and file:// are fetched)")
        if total is not None and done != total:
            raise OSError("short download: %d of %d bytes" % (done, total))
        out.flush()
        os.fsync(out.fileno())
    os.rename(part, final)


def check_present(path, model_dirs, cache_dir):
    """The real path of an operator's copy served in place: it must exist, lie under one of the
    host's llmgw_model_dirs and not inside llmgw's cache (whose entries are llmgw's, not served so)."""
    real = os.path.realpath(path)
    inside = [d for d in model_dirs if real.startswith(os.path.realpath(d).rstrip("/") + "/")]
    if not inside:
        raise FetchError("the copy to serve in place must lie under the host's llmgw_model_dirs (%s); %s does not"
                         % (", ".join(model_dirs) or "none set", real))
    if real == os.path.realpath(cache_dir) or real.startswith(os.path.realpath(cache_dir).rstrip("/") + "/"):
        raise FetchError("%s is inside llmgw's cache %s; an operator's copy lives in a model dir" % (real, cache_dir))
    if not os.path.exists(real):
        raise FetchError("%s is not on this host (any more): gather facts again (`llmgw facts`) and plan" % real)
    return real


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
                why = os.strerror(exc.errno or errno.EIO)
                refused.append({"name": name, "reason": "could not be removed: %s" % why})
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
            hf_allow_http=dict(type="bool", default=False),
            model_dirs=dict(type="list", elements="path", default=[]),
            present_at=dict(type="path"),
            expected_bytes=dict(type="int"),
            group=dict(type="str"),
            timeout=dict(type="int", default=60),
        ),
        required_if=[("state", "present", ["source"])],
        supports_check_mode=True,
    )


def main():
    module = build_module()
    p = module.params
    if p["state"] == "present" and p["present_at"]:
        try:
            real = check_present(p["present_at"], p["model_dirs"], p["cache_dir"])
        except FetchError as exc:
            module.fail_json(msg="cannot serve %s in place: %s" % (p["source"], exc), name=cache_name(p["source"]))
        module.exit_json(changed=False, fetched=False, name=cache_name(p["source"]), path=real,
                         size_bytes=_size(real))
    if p["state"] == "present":
        name = cache_name(p["source"])
        path = os.path.join(p["cache_dir"], name)
        if module.check_mode:
            present = os.path.exists(path)
            module.exit_json(changed=not present, fetched=not present, name=name, path=path,
                             size_bytes=_size(path) if present else None)
        try:
            path, changed = fetch(p["source"], p["cache_dir"], p["hf_endpoint"], p["hf_token"], p["timeout"],
                                  p["model_dirs"], p["hf_allow_http"], p["expected_bytes"], p["group"])
        except Exception as exc:  # every failure becomes a module failure with the reason
            # weights_progress tells the role the download is over (a no-op when the cache is unwritable)
            with contextlib.suppress(OSError):
                _write_progress(p["cache_dir"], name, 0, None, state="failed", error=str(exc))
            module.fail_json(msg="cannot fetch %s: %s" % (p["source"], exc), name=name)
        module.exit_json(changed=changed, fetched=changed, name=name, path=path, size_bytes=_size(path))
    removed, refused = remove(p["cache_dir"], p["names"], p["in_use"], module.check_mode)
    module.exit_json(changed=bool(removed), removed=removed, refused=refused)


if __name__ == "__main__":
    main()
