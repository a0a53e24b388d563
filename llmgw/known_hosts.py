"""A site's known-hosts file: the SSH host keys llmgw trusts (OpenSSH's own format).

`llmgw facts` records a host's key there on first contact (ssh's `accept-new`, through
llmgw.runner) and every other Ansible run and tunnel checks keys against it strictly. When
a host's key really changed (reinstalled), the operator checks the new key and runs
`llmgw facts --accept-new-key HOST`: `forget` removes the old entries for the host's names
(inventory name, address, `[address]:port`) and that gathering records the new key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from llmgw.inventory import Host
from llmgw.yamlio import atomic_write

HostKeys = Literal["strict", "accept-new"]
"""`strict`: a host must be in the known-hosts file with that key; `accept-new` (facts only):
a host not in it is recorded, one whose key changed is refused all the same."""


def host_key_args(known_hosts: Path | None, host_keys: HostKeys = "strict") -> list[str]:
    """ssh options that check host keys against `known_hosts` (None: ssh's own default files).

    First on ssh's command line, before the inventory's own options: ssh keeps the first
    value it is given for an option. HashKnownHosts=no keeps the recorded names readable, so
    the operator can review the file before committing it."""
    args = ["-o", f"StrictHostKeyChecking={'accept-new' if host_keys == 'accept-new' else 'yes'}",
            "-o", "HashKnownHosts=no", "-o", "CheckHostIP=no"]
    if known_hosts is not None:
        args += ["-o", f"UserKnownHostsFile={known_hosts}"]
    return args


def names_of(host: Host) -> list[str]:
    """The names ssh records `host` under: the address Ansible connects to (`[address]:port`
    on a port other than 22) and the inventory name."""
    address = str(host.vars.get("ansible_host") or host.vars.get("ansible_ssh_host") or host.name)
    port = str(host.vars.get("ansible_port") or host.vars.get("ansible_ssh_port") or "22")
    names = [address if port == "22" else f"[{address}]:{port}", host.name]
    return list(dict.fromkeys(names))


def _matches(pattern_field: str, name: str) -> bool:
    if pattern_field.startswith("|1|"):  # HashKnownHosts: |1|base64(salt)|base64(hmac-sha1(salt, name))
        try:
            salt_b64, digest_b64 = pattern_field[3:].split("|", 1)
            salt, digest = base64.b64decode(salt_b64), base64.b64decode(digest_b64)
        except ValueError:
            return False
        return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)
    return name in pattern_field.split(",")


def forget(known_hosts: Path, names: Iterable[str]) -> list[str]:
    """Remove every entry for any of `names` from `known_hosts`; the entries removed."""
    wanted = list(names)
    if not known_hosts.is_file():
        return []
    kept: list[str] = []
    removed: list[str] = []
    for line in known_hosts.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split()
        # a marker (@cert-authority, @revoked) comes before the host patterns
        patterns = fields[1] if fields and fields[0].startswith("@") and len(fields) > 1 else (fields[0] if fields
                                                                                              else "")
        if patterns and not line.lstrip().startswith("#") and any(_matches(patterns, n) for n in wanted):
            removed.append(line)
        else:
            kept.append(line)
    if removed:
        atomic_write(known_hosts, "".join(ln + "\n" for ln in kept))
    return removed


_KEY_CHANGED = "REMOTE HOST IDENTIFICATION HAS CHANGED"
_KEY_UNKNOWN = ("No ED25519 host key is known", "No RSA host key is known", "No ECDSA host key is known",
                "host key is known for", "Host key verification failed")


def host_key_problem(host: str, res: Mapping[str, Any], known_hosts: Path | None) -> tuple[bool, str] | None:
    """(changed?, the host's error in words) when ssh refused its host key (changed, or never
    recorded), else None."""
    text = " ".join(str(res.get(k, "")) for k in ("msg", "stderr", "module_stderr"))
    where = str(known_hosts) if known_hosts is not None else "ssh's known-hosts files"
    if _KEY_CHANGED in text:
        return True, (f"the SSH host key of {host} changed: it is not the one recorded in {where}, so llmgw "
                      "did not connect (someone may be in the middle). If you checked the new key (`ssh-keyscan` "
                      f"it and compare with the host's console), accept it with `llmgw facts --accept-new-key {host}`")
    if any(marker in text for marker in _KEY_UNKNOWN):
        return False, (f"the SSH host key of {host} is not in {where}: run `llmgw facts` to record it on first "
                       "contact (or add it to that file yourself)")
    return None
