"""The one wrapper around ansible-runner: run a playbook, get a typed result.

Nothing else in llmgw imports ansible_runner. `run_playbook` runs one playbook against
an inventory in a private temp folder (removed afterwards), with llmgw's collection and
roles on Ansible's search paths, SSH pipelining on and the forks asked for. Every event
is handed, typed, to an optional callback (the CLI draws progress from them), and the
results of chosen tasks are kept per host, e.g. the `ansible_facts` a module returned.

Host failures are data, not exceptions: a play where some hosts failed or were
unreachable returns normally, with per-host stats and reasons. A RunnerError means
Ansible could not run the playbook at all (missing binary, syntax error, bad inventory).

Extra vars are data: Ansible renders any string it trusts as a Jinja template, and it
trusts extra vars given on its command line, so a catalog value such as
`{{ lookup('pipe', 'id') }}` would run on the control host. llmgw therefore writes the
extra vars itself, to the run's `env/extravars` file, with every string (and mapping key)
tagged `!unsafe`: Ansible then uses them as text and never renders them.

Host keys are always checked (a man in the middle would be handed the HF token and engine
keys), against the known-hosts file of the inventory's site (llmgw.known_hosts); only
`llmgw facts` trusts a first contact. Ansible gets llmgw.childenv's environment, no secrets.

Why long: one job, running a playbook, whose settings, extra-vars encoding and typed results
must agree with each other; apart, each would re-derive the others.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from llmgw import ansible_content
from llmgw.childenv import without_secrets
from llmgw.errors import RunnerError
from llmgw.known_hosts import HostKeys, host_key_args, host_key_problem
from llmgw.site import known_hosts_of, recorded_site

TaskStatus = Literal["ok", "failed", "unreachable", "skipped"]
EventKind = Literal["play_start", "task_start", "host_start", "host_ok", "host_failed", "host_unreachable",
                    "host_skipped", "stats", "other"]

_KINDS: dict[str, EventKind] = {
    "playbook_on_play_start": "play_start",
    "playbook_on_task_start": "task_start",
    "runner_on_start": "host_start",
    "runner_on_ok": "host_ok",
    "runner_on_failed": "host_failed",
    "runner_on_unreachable": "host_unreachable",
    "runner_on_skipped": "host_skipped",
    "playbook_on_stats": "stats",
}
_STATUS: dict[EventKind, TaskStatus] = {"host_ok": "ok", "host_failed": "failed",
                                        "host_unreachable": "unreachable", "host_skipped": "skipped"}


@dataclass(frozen=True)
class HostStats:
    """The play recap of one host."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True)
class TaskResult:
    """One host's result of one task: what the module returned (`result`)."""

    host: str
    task: str
    action: str
    status: TaskStatus
    result: dict[str, Any]

    @property
    def facts(self) -> dict[str, Any]:
        facts = self.result.get("ansible_facts")
        return facts if isinstance(facts, dict) else {}

    @property
    def message(self) -> str:
        return _message(self.result)


@dataclass(frozen=True)
class RunEvent:
    """An ansible-runner event, typed for progress displays."""

    kind: EventKind
    host: str | None
    task: str | None
    action: str | None
    result: dict[str, Any] = field(repr=False)
    ignore_errors: bool = False

    @property
    def message(self) -> str:
        return _message(self.result)


@dataclass(frozen=True)
class RunResult:
    """What a playbook run did, per host."""

    status: str  # ansible-runner's: successful | failed | timeout | canceled
    rc: int
    stats: dict[str, HostStats]
    results: dict[str, dict[str, TaskResult]]  # host -> task name -> its result (captured tasks)
    host_errors: dict[str, str]  # host -> the first reason it failed or was unreachable
    output_tail: list[str] = field(default_factory=list, repr=False)
    key_changed: tuple[str, ...] = ()  # hosts refused because their SSH host key changed

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.host_errors

    @property
    def hosts(self) -> list[str]:
        return sorted(self.stats)

    @property
    def unreachable(self) -> list[str]:
        return sorted(h for h, s in self.stats.items() if s.unreachable)

    @property
    def failed(self) -> list[str]:
        return sorted(h for h, s in self.stats.items() if s.failed and not s.unreachable)


def _message(res: Mapping[str, Any]) -> str:
    """The one line that says why a task failed: msg, else stderr's last line; for a loop, the
    first failed item's (Ansible's own msg then is only "One or more items failed")."""
    items = res.get("results")
    if isinstance(items, list):
        for item in items:
            if isinstance(item, dict) and item.get("failed") and (why := _message(item)):
                return why
    for key in ("msg", "reason", "stderr", "module_stderr", "exception"):
        value = res.get(key)
        if isinstance(value, str) and value.strip():
            lines = [ln.strip() for ln in value.strip().splitlines() if ln.strip()]
            line = lines[0] if key == "msg" else lines[-1]
            return line.removeprefix("Task failed: ")
    return ""


def _ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.exists():
        return str(beside)
    found = shutil.which("ansible-playbook")
    if not found:
        raise RunnerError("ansible-playbook is not installed",
                          hint="install llmgw with its dependencies (ansible-core)")
    return found


def _search_path(first: Path, env_key: str) -> str:
    existing = os.environ.get(env_key)
    return f"{first}{os.pathsep}{existing}" if existing else str(first)


# Ansible's own default keeps an idle SSH connection 60 s; apply runs several playbooks in a
# row (weights, engines, routers), and a fleet's facts refresh takes minutes, so the next
# run reuses the connection instead of a new handshake per host (bench/apply_scale.py).
SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=600s -o ServerAliveInterval=30"


def default_forks() -> int:
    """Hosts Ansible works on at once: 20, more on a control host with more cores (up to 100).
    Each fork mostly waits on its host's SSH session, but spends control CPU per task
    (about 0.3 s per host and task measured by bench/apply_scale.py), so cores bound it."""
    return max(20, min(100, 8 * (os.cpu_count() or 1)))


def ansible_env(forks: int, known_hosts: Path | None = None, host_keys: HostKeys = "strict") -> dict[str, str]:
    """The Ansible settings llmgw runs with (exported so `ansible` by hand can match)."""
    ssh_args = os.environ.get("ANSIBLE_SSH_ARGS", SSH_ARGS)
    env = {
        "ANSIBLE_SSH_ARGS": shlex.join(host_key_args(known_hosts, host_keys)) + " " + ssh_args,
        "ANSIBLE_COLLECTIONS_PATH": _search_path(ansible_content.collections_path(), "ANSIBLE_COLLECTIONS_PATH"),
        "ANSIBLE_ROLES_PATH": _search_path(ansible_content.roles_path(), "ANSIBLE_ROLES_PATH"),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_FORKS": str(forks),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_NOCOLOR": "True",
        # True whatever the environment says: with False, Ansible adds StrictHostKeyChecking=no.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PYTHON_INTERPRETER": os.environ.get("ANSIBLE_PYTHON_INTERPRETER", "auto_silent"),
    }
    return env


# YAML's printable characters (what a double-quoted scalar may hold unescaped).
_PRINTABLE = re.compile("[\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _unsafe_str(text: str) -> str:
    """`text` as a `!unsafe` double-quoted YAML scalar, escaping all but printable characters."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif _PRINTABLE.fullmatch(ch):
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '!unsafe "' + "".join(out) + '"'


def unsafe_yaml(value: Any) -> str:
    """`value` (JSON-like data) as flow-style YAML in which every string is `!unsafe`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return _unsafe_str(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_unsafe_str(str(k))}: {unsafe_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(unsafe_yaml(v) for v in value) + "]"
    raise TypeError(f"extra var of type {type(value).__name__} cannot be passed to Ansible")


def run_playbook(
    playbook: Path,
    inventory: Path,
    *,
    limit: str | None = None,
    extravars: Mapping[str, Any] | None = None,
    forks: int = 20,
    capture: Collection[str] = (),
    on_event: Callable[[RunEvent], None] | None = None,
    check: bool = False,
    timeout: int | None = None,
    host_keys: HostKeys = "strict",
) -> RunResult:
    """Run `playbook` against `inventory` and return per-host stats and captured results.

    `capture` names the tasks whose per-host results to keep, by task name or by module
    (e.g. "llmgw.cluster.node_facts"); a skipped result never replaces a kept one.
    `on_event` sees every event as it happens, in the calling thread. `host_keys` says
    whether a host missing from the site's known-hosts file is refused or recorded.
    """
    import ansible_runner.interface  # the one place it is imported; imported late because it is slow

    if not playbook.is_file():
        raise RunnerError(f"no playbook at {playbook}")
    if not inventory.exists():
        raise RunnerError(f"no inventory at {inventory}", hint="set `inventory:` in llmgw.yaml")
    recorded = recorded_site(inventory)
    if recorded is not None:  # the last guard: each command that contacts hosts refuses earlier
        raise RunnerError(f"{recorded}: a recorded site (recorded: true); llmgw does not contact its hosts",
                          hint="copy the site, point its inventory at your hosts and remove `recorded: true`")
    known_hosts = known_hosts_of(inventory)
    wanted = set(capture)
    results: dict[str, dict[str, TaskResult]] = {}
    host_errors: dict[str, str] = {}
    stats: dict[str, HostStats] = {}
    key_changed: set[str] = set()

    def handle(raw: dict[str, Any]) -> bool:
        kind = _KINDS.get(str(raw.get("event", "")), "other")
        data = raw.get("event_data") or {}
        raw_res = data.get("res")
        res: dict[str, Any] = raw_res if isinstance(raw_res, dict) else {}
        event = RunEvent(kind=kind, host=data.get("host"), task=data.get("task"), action=data.get("task_action"),
                         result=res, ignore_errors=bool(data.get("ignore_errors")))
        if kind == "stats":
            stats.update(_stats(data))
        elif kind in _STATUS and event.host:
            status = _STATUS[kind]
            if status in ("failed", "unreachable") and not event.ignore_errors:
                key = host_key_problem(event.host, res, known_hosts)
                if key is not None and key[0]:
                    key_changed.add(event.host)
                why = (key[1] if key else "") or event.message or event.task or "no message"
                host_errors.setdefault(event.host, f"{status}: {why}")
            if event.task in wanted or event.action in wanted:
                name = event.task or event.action or ""
                per_host = results.setdefault(event.host, {})
                if not (status == "skipped" and name in per_host):
                    per_host[name] = TaskResult(host=event.host, task=name, action=event.action or "",
                                                status=status, result=dict(res))
        if on_event is not None:
            on_event(event)
        return False  # nothing to keep on disk: everything needed is taken here

    env = ansible_env(forks, known_hosts, host_keys)
    # ansible-runner starts `ansible-playbook` from PATH: the one beside this Python first.
    env["PATH"] = f"{Path(_ansible_playbook()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if known_hosts is not None and host_keys == "accept-new":
        known_hosts.parent.mkdir(parents=True, exist_ok=True)  # ssh records keys only in an existing folder
    workdir = Path(tempfile.mkdtemp(prefix="llmgw-run-"))
    try:
        # ansible-runner passes an `env/extravars` file as `-e @file`; given a dict it would
        # pass JSON on the command line, which Ansible trusts as templates (see above).
        (workdir / "env").mkdir(mode=0o700)
        (workdir / "env" / "extravars").write_text(unsafe_yaml(dict(extravars or {})) + "\n", encoding="utf-8")
        runner = ansible_runner.interface.init_runner(
            private_data_dir=str(workdir),
            playbook=str(playbook.resolve()),
            inventory=str(inventory.resolve()),
            limit=limit,
            forks=forks,
            envvars=env,
            cmdline="--check" if check else None,
            timeout=timeout,
            quiet=True,
            event_handler=handle,
            settings={"suppress_ansible_output": True},
        )
        # ansible-runner seeds the child's environment with all of this process's, and writes
        # it into the run's artifacts: only llmgw.childenv's share goes either way.
        runner.config.env = without_secrets(runner.config.env)
        runner.run()
        tail = _output_tail(runner)
        rc = int(runner.rc if runner.rc is not None else -1)
        status = str(runner.status)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if rc != 0 and not stats:
        raise RunnerError(f"Ansible could not run {playbook.name} (exit {rc}, {status})",
                          detail=tail[-8:], hint="the lines above are Ansible's own output")
    return RunResult(status=status, rc=rc, stats=stats, results=results, host_errors=host_errors,
                     output_tail=tail, key_changed=tuple(sorted(key_changed)))


def _stats(data: Mapping[str, Any]) -> dict[str, HostStats]:
    def count(key: str, host: str) -> int:
        table = data.get(key) or {}
        return int(table.get(host, 0)) if isinstance(table, dict) else 0

    hosts: set[str] = set()
    for key in ("processed", "ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"):
        table = data.get(key) or {}
        if isinstance(table, dict):
            hosts.update(table)
    return {h: HostStats(ok=count("ok", h), changed=count("changed", h), failed=count("failures", h),
                         unreachable=count("dark", h), skipped=count("skipped", h), rescued=count("rescued", h),
                         ignored=count("ignored", h)) for h in hosts}


def _output_tail(runner: Any, lines: int = 40) -> list[str]:
    try:
        text = (Path(runner.config.artifact_dir) / "stdout").read_text(encoding="utf-8", errors="replace")
    except (OSError, AttributeError, TypeError):
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]
