"""The site's facts cache: one JSON document per host, `<facts dir>/<host>.json`.

One file per host, so a partial gathering rewrites only the hosts it reached, a diff
shows what changed on which host, and the planner reads the fleet without Ansible.
Files are written atomically with sorted keys, so the same facts give the same bytes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import ValidationError

from llmgw import collector
from llmgw.errors import FactsError, LlmgwError
from llmgw.facts import Memo, memo_in_use
from llmgw.facts.digest import remember, text_digest
from llmgw.facts.records import HostFacts, pack_records, unpack_records
from llmgw.yamlio import FileError, atomic_write, json_text, read_text

SUFFIX = ".json"
# A fabric's raw ibnetdiscover text rides in one host's facts: thousands of hosts make megabytes.
MAX_FACTS_BYTES = 64 * 1024 * 1024
_DEVICE_NAME = re.compile(r"[A-Za-z0-9._:-]{1,64}")
# Below this many hosts, parsing the facts costs less than a memo would (and tests stay uncached).
MEMO_MIN_FILES = 256
# The modules whose code decides what a memoised HostFacts is: a change to one is a miss.
_MEMO_MODULES = ("llmgw.facts.records", "llmgw.facts.cache", "llmgw.facts.digest")
# What the memo holds: ([(file name, fingerprint)], the facts as records.pack_records packs them,
# {host: its fabric capture's digest (llmgw.facts.digest)}).
_MEMO_FORM = "found, packed records, capture digests"
Fingerprint = tuple[int, int, int, int]


def facts_path(facts_dir: Path, host: str) -> Path:
    """Where `host`'s facts live; a host name that is not a plain file name is refused."""
    if not host or "/" in host or "\0" in host or host.startswith("."):
        raise FactsError(f"host name {host!r} cannot name a facts file", host=host,
                         hint="use inventory host names without '/' and not starting with '.'")
    return facts_dir / f"{host}{SUFFIX}"


def facts_json(facts: HostFacts) -> str:
    return json_text(facts.model_dump(mode="json"))


def read_facts(facts_dir: Path, *, memo_min: int = MEMO_MIN_FILES) -> dict[str, HostFacts]:
    """host -> facts for every `<host>.json` in `facts_dir`; a missing folder is no facts.

    A file that is not valid facts is an error naming the file: planning on a fleet
    with a host silently missing would move replicas off it. With `memo_min` files or
    more, in a process that memoises (llmgw.facts.memo_in_use), each file's validated facts
    are memoised by its fingerprint (size, times, inode: what any write changes), so only
    new or changed files are parsed again.
    """
    if not facts_dir.is_dir():
        return {}
    # 82,000 records at 4,096 hosts and no cycles (llmgw.collector): paused here for every
    # caller (facts, apply, weights), not only those that pause around their own work.
    with collector.paused():
        return _read_facts(facts_dir, memo_min)


def _read_facts(facts_dir: Path, memo_min: int) -> dict[str, HostFacts]:
    found: list[tuple[str, Fingerprint]] = []
    with os.scandir(facts_dir) as entries:
        for entry in entries:
            if entry.name.endswith(SUFFIX) and not entry.name.startswith(".") and entry.is_file():
                st = entry.stat()
                found.append((entry.name, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)))
    found.sort()
    memo = memo_in_use() if len(found) >= memo_min else None
    where = facts_dir.resolve()
    version = (_MEMO_FORM, *memo.code_version(_MEMO_MODULES)) if memo is not None else ()
    stored, records = _memoised(memo, where, version) if memo is not None else ([], [])
    if stored == found:  # the common case: no file changed since the memo was written
        return {facts.host: facts for facts in records}
    known = {name: (fingerprint, facts) for (name, fingerprint), facts in zip(stored, records, strict=True)}
    out: dict[str, HostFacts] = {}
    records = []  # in the order of `found`
    for name, fingerprint in found:
        hit = known.get(name)
        facts = hit[1] if hit is not None and hit[0] == fingerprint else _read_one(facts_dir / name)
        out[facts.host] = facts
        records.append(facts)
    if memo is not None:
        digests = {f.host: text_digest(f.ibnetdiscover) for f in records if f.ibnetdiscover is not None}
        memo.store("facts", where, version, (found, pack_records(records), digests))
        _hand_over(records, digests)
    return out


def _memoised(memo: Memo, where: Path, version: tuple[object, ...]) \
        -> tuple[list[tuple[str, Fingerprint]], list[HostFacts]]:
    """The files the memo was made from (name, fingerprint) and their facts; none when there is none to trust."""
    stored = memo.load("facts", where, version)
    if stored is not None:
        try:
            found, packed, digests = stored
            records = unpack_records(packed)
            if type(found) is list and len(found) == len(records) and type(digests) is dict:
                # Each digest was made from the very text unpacked here (the memo's payload is
                # checked whole): a plan need not hash its 27 MB of captures again.
                _hand_over(records, digests)
                return found, records
        except Exception:  # not the form this code writes (the key should have said so): a miss
            pass
    return [], []


def _hand_over(records: list[HostFacts], digests: dict[str, str]) -> None:
    """Give llmgw.facts.digest each record's capture with the digest made from that text."""
    remember((f.ibnetdiscover, digests[f.host]) for f in records if f.ibnetdiscover is not None)


def _read_one(path: Path) -> HostFacts:
    """One host's facts file, validated (untrusted: a pull request may change it)."""
    try:
        # bounded and UTF-8 only: facts are committed with the site, so a pull request may change them
        text = read_text(path, max_bytes=MAX_FACTS_BYTES)
    except FileError as exc:
        raise FactsError(f"facts file {exc}", path=str(path),
                         hint="delete the file and run `llmgw facts` to gather it again") from None
    except LlmgwError as exc:
        raise FactsError(f"cannot read facts file {path}: {exc}", path=str(path)) from None
    try:
        facts = HostFacts.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the document"
        raise FactsError(f"facts file {path} is not llmgw facts (version 1): {where}: {first['msg']}",
                         path=str(path), hint="delete the file and run `llmgw facts` to gather it again") from None
    for hca in facts.ib_adapters or []:
        # HCA names go into engine units (NCCL_IB_HCA): a committed facts file is untrusted
        if not _DEVICE_NAME.fullmatch(hca.name):
            line = text.count("\n", 0, max(0, text.find(json.dumps(hca.name)[:40]))) + 1
            raise FactsError(f"facts file {path}:{line}: InfiniBand adapter name {hca.name!r} is not a device "
                             "name (letters, digits, '.', '_', '-', ':')", path=str(path),
                             hint="delete the file and run `llmgw facts` to gather it again")
    expected = path.name[: -len(SUFFIX)]
    if facts.host != expected:
        raise FactsError(f"facts file {path} holds facts of host {facts.host!r}, not {expected!r}",
                         path=str(path), hint="rename or delete the file, then run `llmgw facts`")
    return facts


def write_facts(facts_dir: Path, facts: HostFacts) -> None:
    """Write one host's facts atomically (temp file, fsync, rename)."""
    atomic_write(facts_path(facts_dir, facts.host), facts_json(facts))
