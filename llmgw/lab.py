"""The lab: a small fleet of local podman containers booting systemd, reached over SSH.

Every later piece of llmgw (facts, apply, the router, drains) needs hosts that behave
like real ones: systemd as PID 1, sshd, a distinct address per host. The lab gives
exactly that on one machine, so Ansible reaches lab hosts over SSH with a key, as it
would a GPU fleet, never through podman's own connection.

A lab belongs to a site folder (`inventories/lab` by default):

    <site>/.lab/id_ed25519[.pub]   the lab's SSH key (made on first `up`, kept by `down`)
    <site>/.lab/known_hosts        the hosts' SSH keys, collected through podman at boot: the
                                   site's known-hosts file (`known_hosts:` in the lab's llmgw.yaml),
                                   so every Ansible run and tunnel checks the lab's keys strictly
    <site>/.lab/name               the lab's name, so `down` and `status` find it again
    <site>/.lab/engine/llama-server  a link to $LLMGW_CACHE/engine/llama-server (and its caps)
    <site>/<inventory>             the inventory, rewritten by every `up`

Podman objects are named and labelled after the lab: network `<name>`, containers
`<name>-node1..N`, each with labels `llmgw.lab=<name>` and `llmgw.lab.site=<site>`.
`down` removes only containers and the network carrying both labels of this site, so a
second lab (a test's, another checkout's) is never touched.

Node 1 is larger (more memory, label `size: large`, `role: coding`) than the others
(`size: small`, `role: general`), so placement always has something to decide. Node 1
is also the lab's router host (group `llmgw_routers`): the control host has no systemd.
The tiny model reaches every host through a read-only mount of $LLMGW_CACHE/models at
/srv/models, listed in `llmgw_model_dirs`, like a model share on a real fleet; the engine
venvs scripts/build-engine-venvs builds (vLLM's CPU build) through one of
$LLMGW_CACHE/engine-venvs at /opt/llmgw/engine-venvs, listed in `llmgw_engine_venv_dirs`.

Why long: `up`, `down` and `status` share the names, labels, key and inventory
described above; apart, each would re-derive them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from llmgw.childenv import child_env
from llmgw.errors import LabError
from llmgw.inventory import DEFAULT_CACHE_DIR
from llmgw.site import Site
from llmgw.weights.servable import CAPS_FILE
from llmgw.yamlio import atomic_write, dumps_yaml, load_yaml

DEFAULT_NAME = "llmgw-lab"
DEFAULT_IMAGE = "localhost/llmgw-test:bookworm"
LAB_LABEL = "llmgw.lab"
SITE_LABEL = "llmgw.lab.site"
HOST_LABEL = "llmgw.lab.host"
LABELS_LABEL = "llmgw.lab.labels"
MODELS_MOUNT = "/srv/models"
# Where hosts see $LLMGW_CACHE/engine-venvs (scripts/build-engine-venvs: vLLM's CPU build),
# read-only, listed in llmgw_engine_venv_dirs: the role links the venv instead of
# installing 3.5 GB of wheels on every lab host (minutes of CPU each).
ENGINE_VENVS_MOUNT = "/opt/llmgw/engine-venvs"
LAB_DIR = ".lab"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")
MAX_NODES = 9
# llmgw_* host vars an operator may edit in the written inventory (`llmgw cordon`
# does); `lab up` keeps their values for hosts it keeps.
OPERATOR_VARS = ("llmgw_node_state", "llmgw_labels", "llmgw_model_dirs", "llmgw_cache_dir")

Progress = Callable[[str, str], None]
"""Called with (host, what is happening now) while the lab starts."""


def cache_root() -> Path:
    """$LLMGW_CACHE, where the engine binary and the tiny model are built (outside git)."""
    return Path(os.environ.get("LLMGW_CACHE") or Path.home() / ".cache" / "llmgw")


@dataclass(frozen=True)
class NodeSpec:
    """What one lab host should be: its inventory name, memory limit and llmgw labels."""

    host: str
    memory_mb: int
    labels: dict[str, str]


def node_specs(count: int) -> list[NodeSpec]:
    """node1 large, the rest small: a coding profile fits only node1, a general one anywhere."""
    if not 1 <= count <= MAX_NODES:
        raise LabError(f"a lab has 1 to {MAX_NODES} nodes, not {count}", hint="pass --nodes 1..9")
    # Limits, not reservations. A small node still holds vLLM's CPU build serving the tiny HF
    # model (about 3 GB with VLLM_CPU_KVCACHE_SPACE=1) beside a llama.cpp shard, so a vLLM
    # replica can move between nodes; node1 holds that and the router.
    specs = [NodeSpec("node1", 6144, {"role": "coding", "size": "large"})]
    specs += [NodeSpec(f"node{i}", 4608, {"role": "general", "size": "small"}) for i in range(2, count + 1)]
    return specs[:count]


@dataclass(frozen=True)
class LabNode:
    """One lab container as podman reports it."""

    host: str
    container: str
    state: str  # podman's: running, exited, created, ...
    address: str | None
    memory_mb: int | None
    labels: dict[str, str] = field(default_factory=dict)
    site: str = ""
    engine_venvs: bool = False  # created with the engine venvs mounted (ENGINE_VENVS_MOUNT)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "container": self.container, "state": self.state,
                "address": self.address, "memory_mb": self.memory_mb, "labels": self.labels}


@dataclass(frozen=True)
class LabStatus:
    name: str
    network: bool
    nodes: list[LabNode]

    def to_json(self) -> dict[str, Any]:
        return {"lab": self.name, "network": self.name if self.network else None,
                "nodes": [n.to_json() for n in self.nodes]}


@dataclass(frozen=True)
class DownResult:
    containers: list[str]
    network: bool


class Podman:
    """The podman command line; every failure becomes a LabError carrying its stderr."""

    def __init__(self, binary: str | None = None) -> None:
        found = binary or shutil.which("podman")
        if not found:
            raise LabError("podman is not installed", hint="run scripts/setup-host (as root) to install it")
        self.binary = found

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run([self.binary, *args], input=input, capture_output=True, text=True,
                                  check=False, timeout=timeout, env=child_env())
        except subprocess.TimeoutExpired:
            raise LabError(f"podman {args[0]} did not finish in {timeout:.0f}s",
                           detail=[" ".join(args)], hint="check `podman ps -a` and the host's load") from None
        if check and proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()][-5:]
            raise LabError(f"podman {args[0]} failed (exit {proc.returncode})", detail=lines,
                           hint=_hint_for(proc.stderr))
        return proc

    def json(self, *args: str) -> Any:
        out = self.run(*args).stdout.strip()
        return json.loads(out) if out else []


def _hint_for(stderr: str) -> str | None:
    if "hybrid mode" in stderr or "setrlimit" in stderr:
        return "podman needs runc and this host's ulimits: run scripts/setup-host to write its settings"
    if "image not known" in stderr or "no such image" in stderr.lower():
        return "build the base image with scripts/build-image"
    return None


class Lab:
    """The lab of one site: its podman objects, its SSH key and its inventory."""

    def __init__(self, site: Site, name: str | None = None, *, image: str | None = None,
                 podman: Podman | None = None) -> None:
        self.site = site
        self.dir = site.root / LAB_DIR
        self.name = name or self._recorded_name() or DEFAULT_NAME
        if not NAME_RE.match(self.name):
            raise LabError(f"{self.name!r} is not a lab name",
                           hint="use lowercase letters, digits, '.', '_' or '-' (at most 40)")
        self.image = image or os.environ.get("LLMGW_IMAGE") or DEFAULT_IMAGE
        self._podman = podman

    # -- paths ---------------------------------------------------------------------
    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """The site's known-hosts file (llmgw.runner checks every host against it): the lab pins
        its hosts' keys there, read through podman, so no first contact is ever trusted."""
        return self.site.known_hosts

    @property
    def inventory(self) -> Path:
        return self.site.inventory

    @property
    def podman(self) -> Podman:
        if self._podman is None:
            self._podman = Podman()
        return self._podman

    def container(self, host: str) -> str:
        return f"{self.name}-{host}"

    def _recorded_name(self) -> str | None:
        path = self.dir / "name"
        return (path.read_text().strip() or None) if path.is_file() else None

    # -- status ----------------------------------------------------------------------
    def status(self) -> LabStatus:
        nodes = self._nodes()
        has_net = self.podman.run("network", "exists", self.name, check=False).returncode == 0
        return LabStatus(self.name, has_net, nodes)

    def _nodes(self) -> list[LabNode]:
        ids = self.podman.run("ps", "-a", "-q", "--filter", f"label={LAB_LABEL}={self.name}").stdout.split()
        if not ids:
            return []
        nodes = [self._node(c) for c in self.podman.json("inspect", "--type", "container", *ids)]
        return sorted(nodes, key=lambda n: (len(n.host), n.host))

    def _node(self, c: dict[str, Any]) -> LabNode:
        labels = c.get("Config", {}).get("Labels") or {}
        nets = (c.get("NetworkSettings") or {}).get("Networks") or {}
        address = (nets.get(self.name) or {}).get("IPAddress") or None
        memory = (c.get("HostConfig") or {}).get("Memory") or 0
        try:
            node_labels = json.loads(labels.get(LABELS_LABEL, "{}"))
        except json.JSONDecodeError:
            node_labels = {}
        return LabNode(host=labels.get(HOST_LABEL, c.get("Name", "?")), container=c.get("Name", "?").lstrip("/"),
                       state=c.get("State", {}).get("Status", "unknown"), address=address,
                       memory_mb=memory // (1024 * 1024) if memory else None, labels=node_labels,
                       site=labels.get(SITE_LABEL, ""),
                       engine_venvs=any(isinstance(m, dict) and m.get("Destination") == ENGINE_VENVS_MOUNT
                                        for m in c.get("Mounts") or []))

    # -- up --------------------------------------------------------------------------
    def up(self, count: int = 3, progress: Progress | None = None) -> list[LabNode]:
        """Start (or keep) `count` nodes, then write the SSH files and the inventory.

        Running nodes are kept as they are; stopped ones are started; nodes beyond
        `count` from an earlier, larger lab are removed, so the lab matches the request.
        """
        say = progress or (lambda host, msg: None)
        specs = node_specs(count)
        self._preflight()
        existing = {n.host: n for n in self._nodes()}
        self._refuse_foreign(existing.values())
        self._ensure_key()
        self._ensure_network()
        wanted = {s.host for s in specs}
        extra = [n.container for h, n in existing.items() if h not in wanted]
        if extra:
            say("lab", f"removing {', '.join(extra)} (beyond --nodes {count})")
            self.podman.run("rm", "-f", "-t", "0", *extra)
        for spec in specs:
            node = existing.get(spec.host)
            if node is None:
                say(spec.host, "creating container")
                self._create(spec)
            elif node.state != "running":
                say(spec.host, f"starting ({node.state})")
                self.podman.run("start", node.container)
            else:
                say(spec.host, "already running")
        host_keys: dict[str, str] = {}
        for spec in specs:
            say(spec.host, "booting systemd")
            self._wait_booted(spec.host)
            say(spec.host, "installing the lab's SSH key")
            host_keys[spec.host] = self._install_key(spec.host)
        nodes = {n.host: n for n in self._nodes()}
        for spec in specs:
            node = nodes.get(spec.host)
            if node is None or not node.address:
                raise LabError(f"lab host {spec.host} has no address on network {self.name}",
                               hint=f"inspect it with `podman inspect {self.container(spec.host)}`")
            say(spec.host, f"waiting for sshd on {node.address}")
            self._wait_ssh(spec.host, node.address)
            say(spec.host, "ready")
        ordered = [nodes[s.host] for s in specs]
        self._write_known_hosts(ordered, host_keys)
        self._write_inventory(ordered, specs)
        self._link_engine()
        atomic_write(self.dir / "name", self.name + "\n")
        return ordered

    def _preflight(self) -> None:
        if self.podman.run("image", "exists", self.image, check=False).returncode != 0:
            raise LabError(f"the lab's base image {self.image} is not built",
                           hint="run scripts/build-image (about a minute, once)")
        if not shutil.which("ssh-keygen"):
            raise LabError("ssh-keygen is not installed", hint="run scripts/setup-host (openssh-client)")

    def _refuse_foreign(self, nodes: Iterable[LabNode]) -> None:
        foreign = sorted({n.site for n in nodes if n.site != str(self.site.root)})
        if foreign:
            raise LabError(f"lab {self.name!r} already runs for another site: {', '.join(foreign)}",
                           hint=f"pass --name NAME for a second lab, or run `llmgw -C {foreign[0]} lab down`",
                           lab=self.name)

    def _ensure_key(self) -> None:
        if self.key.is_file() and self.key.with_suffix(".pub").is_file():
            return
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.key.unlink(missing_ok=True)
        self.key.with_suffix(".pub").unlink(missing_ok=True)
        proc = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"llmgw lab {self.name}",
                               "-f", str(self.key)], capture_output=True, text=True, check=False, env=child_env())
        if proc.returncode != 0:
            raise LabError("ssh-keygen could not make the lab's key", detail=proc.stderr.splitlines()[-3:])

    def _ensure_network(self) -> None:
        if self.podman.run("network", "exists", self.name, check=False).returncode == 0:
            info = self.podman.json("network", "inspect", self.name)
            labels = (info[0] if info else {}).get("labels") or {}
            if labels.get(LAB_LABEL) != self.name:
                raise LabError(f"a podman network {self.name!r} exists that the lab did not make",
                               hint="pass --name NAME to use another name; the network was left alone")
            return
        self.podman.run("network", "create", "--label", f"{LAB_LABEL}={self.name}",
                        "--label", f"{SITE_LABEL}={self.site.root}", self.name)

    def _create(self, spec: NodeSpec) -> None:
        models = cache_root() / "models"
        models.mkdir(parents=True, exist_ok=True)
        venvs = cache_root() / "engine-venvs"
        name = self.container(spec.host)
        if self.podman.run("container", "exists", name, check=False).returncode == 0:
            raise LabError(f"a container {name!r} exists that the lab did not make",
                           hint="pass --name NAME to use another name; the container was left alone")
        self.podman.run(
            "run", "-d", "--name", name, "--hostname", spec.host,
            "--label", f"{LAB_LABEL}={self.name}", "--label", f"{SITE_LABEL}={self.site.root}",
            "--label", f"{HOST_LABEL}={spec.host}", "--label", f"{LABELS_LABEL}={json.dumps(spec.labels)}",
            "--network", self.name, "--network-alias", spec.host,
            "--systemd", "always", "--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m",
            # vLLM's processes share tensors through /dev/shm (160 MB for the tiny model); podman's
            # default is 64 MB. A limit, counted in the memory above when used.
            "--shm-size", "1g",
            # systemd's sandboxing (ProtectSystem, PrivateTmp) needs mount namespaces.
            "--cap-add", "SYS_ADMIN",
            "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
            "--volume", f"{models}:{MODELS_MOUNT}:ro",
            *(["--volume", f"{venvs}:{ENGINE_VENVS_MOUNT}:ro"] if venvs.is_dir() else []),
            self.image, "/sbin/init")

    def _exec(self, host: str, *cmd: str, input: str | None = None, check: bool = True,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.podman.run("exec", "-i", self.container(host), *cmd, input=input, check=check, timeout=timeout)

    def _wait_booted(self, host: str, timeout: float = 90) -> None:
        """Wait for systemd to finish starting units; its bus may not be up for a moment."""
        deadline = time.monotonic() + timeout
        state = "unknown"
        while time.monotonic() < deadline:
            left = max(1, int(deadline - time.monotonic()))
            proc = self._exec(host, "timeout", str(left), "systemctl", "is-system-running", "--wait",
                              check=False, timeout=left + 10)
            state = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "no bus yet"
            if state in ("running", "degraded"):
                return
            if state in ("stopping", "offline", "maintenance"):
                break
            time.sleep(0.2)
        raise LabError(f"systemd on lab host {host} did not finish booting (state: {state})",
                       hint=f"look inside with `podman exec -it {self.container(host)} systemctl --failed`",
                       host=host)

    def _install_key(self, host: str) -> str:
        """Authorize the lab's key for root; return the host's own SSH key for known_hosts."""
        pub = self.key.with_suffix(".pub").read_text()
        self._exec(host, "sh", "-c", "umask 077; mkdir -p /root/.ssh; cat > /root/.ssh/authorized_keys", input=pub)
        proc = self._exec(host, "sh", "-c",
                          "for i in $(seq 100); do [ -s /etc/ssh/ssh_host_ed25519_key.pub ] && break; sleep 0.1; done;"
                          " cat /etc/ssh/ssh_host_ed25519_key.pub", check=False)
        if proc.returncode != 0 or not proc.stdout.startswith("ssh-"):
            raise LabError(f"lab host {host} has no SSH host key",
                           hint=f"check `podman exec {self.container(host)} systemctl status ssh`", host=host)
        return " ".join(proc.stdout.split()[:2])

    def _wait_ssh(self, host: str, address: str, timeout: float = 30) -> None:
        """sshd is ready when it sends its banner on port 22 to this control host."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((address, 22), timeout=2) as sock:
                    sock.settimeout(2)
                    if sock.recv(64).startswith(b"SSH-"):
                        return
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise LabError(f"sshd on lab host {host} ({address}) does not answer", detail=[last] if last else [],
                       hint=f"check `podman exec {self.container(host)} systemctl status ssh`", host=host)

    def _write_known_hosts(self, nodes: Sequence[LabNode], keys: dict[str, str]) -> None:
        lines = [f"{n.host},{n.address} {keys[n.host]}" for n in nodes]
        atomic_write(self.known_hosts, "\n".join(lines) + "\n", mode=0o600)

    def _write_inventory(self, nodes: Sequence[LabNode], specs: Sequence[NodeSpec]) -> None:
        kept = self._operator_vars()
        spec_of = {s.host: s for s in specs}
        ssh_args = (f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes "
                    "-o IdentitiesOnly=yes")
        group_vars = CommentedMap([
            ("ansible_user", "root"),
            ("ansible_ssh_private_key_file", str(self.key)),
            ("ansible_ssh_common_args", ssh_args),
            ("ansible_python_interpreter", "/usr/bin/python3"),
            ("ansible_pipelining", True),
        ])
        hosts = CommentedMap()
        for n in nodes:
            spec = spec_of[n.host]
            hv = CommentedMap([
                ("ansible_host", n.address),
                ("llmgw_node_state", "ready"),
                ("llmgw_labels", _flow(CommentedMap(sorted(spec.labels.items())))),
                ("llmgw_model_dirs", _flow(CommentedSeq([MODELS_MOUNT]))),
                ("llmgw_cache_dir", DEFAULT_CACHE_DIR),
                ("llmgw_mgmt_address", n.address),
                ("llmgw_lab_container", n.container),
                ("llmgw_lab_memory_mb", spec.memory_mb),
            ])
            if n.engine_venvs:
                hv["llmgw_engine_venv_dirs"] = _flow(CommentedSeq([ENGINE_VENVS_MOUNT]))
            for key, value in kept.get(n.host, {}).items():
                hv[key] = value
            hosts[n.host] = hv
        doc = CommentedMap([("all", CommentedMap([
            ("vars", group_vars),
            ("children", CommentedMap([
                ("llmgw_nodes", CommentedMap([("hosts", hosts)])),
                ("llmgw_routers", CommentedMap([("hosts", CommentedMap([(nodes[0].host, None)]))])),
            ])),
        ]))])
        header = (f"# Written by `llmgw lab up` for lab {self.name!r}; rewritten by every `lab up`.\n"
                  "# Values of llmgw_node_state, llmgw_labels, llmgw_model_dirs and llmgw_cache_dir\n"
                  "# edited here (llmgw cordon does) are kept. The router runs on the first node.\n")
        atomic_write(self.inventory, header + dumps_yaml(doc))

    def _operator_vars(self) -> dict[str, dict[str, Any]]:
        if not self.inventory.is_file():
            return {}
        try:
            doc = load_yaml(self.inventory)
            hosts = doc["all"]["children"]["llmgw_nodes"]["hosts"]
        except Exception:  # an inventory we cannot read is simply rewritten
            return {}
        return {str(h): {k: v[k] for k in OPERATOR_VARS if k in v}
                for h, v in hosts.items() if isinstance(v, dict)}

    def _link_engine(self) -> None:
        """Point the site's engine artifact folder at the cached llama.cpp build (llama-server,
        the rpc-server of multi-node workers) and its caps."""
        for name in ("llama-server", "rpc-server", CAPS_FILE):
            target = cache_root() / "engine" / name
            link = self.dir / "engine" / name
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() and os.readlink(link) == str(target):
                continue
            tmp = link.with_name(f".{name}.tmp")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            os.replace(tmp, link)

    # -- down ------------------------------------------------------------------------
    def down(self) -> DownResult:
        """Remove this site's lab containers and network, and the inventory that named them."""
        nodes = self._nodes()
        self._refuse_foreign(nodes)
        names = [n.container for n in nodes]
        if names:
            self.podman.run("rm", "-f", "-t", "0", *names)
        removed_net = False
        if self.podman.run("network", "exists", self.name, check=False).returncode == 0:
            info = self.podman.json("network", "inspect", self.name)
            labels = (info[0] if info else {}).get("labels") or {}
            if labels.get(LAB_LABEL) == self.name and labels.get(SITE_LABEL, str(self.site.root)) == str(
                    self.site.root):
                self.podman.run("network", "rm", self.name)
                removed_net = True
        self.inventory.unlink(missing_ok=True)
        self.known_hosts.unlink(missing_ok=True)
        return DownResult(names, removed_net)


def _flow(node: CommentedMap | CommentedSeq) -> Any:
    node.fa.set_flow_style()
    return node
