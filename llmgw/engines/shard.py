"""What an engine command line is built from: one shard of a replica, and the host's layout.

`Shard` is the role's shard entry (roles/llmgw_engine/meta/argument_specs.yml), typed;
`Layout` is where the role put the engines on this host and what every shard shares.
Multi-node port arithmetic lives here too, so that every engine agrees on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INIT_PORT_OFFSET = 10000
"""vLLM and SGLang ranks meet at the leader's port + this: outside llmgw's shard port
range, so never another shard's port."""

# A host name, IPv4 or bare IPv6 address, then `:port`: the shape apply writes a peer in
# (llmgw.apply.executor), and the only one the role's entry may hold (entry.check_entry).
_PEER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9.:-]{0,252}):([0-9]{1,5})$")


# A path on a host that llmgw writes into a unit or sends an engine (weights, adapters): absolute,
# plain characters, no `.` or `..` part (the entry check and the state's adapter paths).
HOST_PATH_RE = re.compile(r"^(/[A-Za-z0-9_][A-Za-z0-9._+-]*)+$")


def is_host_path(path: str) -> bool:
    return bool(HOST_PATH_RE.match(path)) and not {".", ".."} & set(path.split("/"))


@dataclass(frozen=True)
class Peer:
    """Where one shard of a replica listens: its host's management address and its port."""

    address: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Peer:
        """A peer of the role's entry, `address:port` (split once, here)."""
        m = _PEER.match(text)
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise ValueError(f"peers entry {text!r} is not address:port")
        return cls(m.group(1), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class ShardAdapter:
    """A LoRA adapter the shard's engine loads at start: its served name, where its weights are
    on the host, and its rank where the adapter's config said (vLLM sizes its LoRA slots by it)."""

    name: str
    path: str
    rank: int | None = None

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ShardAdapter:
        rank = entry.get("rank")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
            raise ValueError(f"adapter {entry.get('name')!r}: rank must be a positive whole number, not {rank!r}")
        return cls(name=str(entry["name"]), path=str(entry["path"]), rank=rank)


@dataclass(frozen=True)
class Shard:
    """One shard: the engine serving `model` from `model_path`, rank `rank` of `nodes`."""

    engine: str
    model: str
    model_path: str
    port: int
    gpus: tuple[int, ...] = ()
    args: tuple[str, ...] = ()
    rank: int = 0
    nodes: int = 1
    leader: str = ""
    peers: tuple[Peer, ...] = ()  # every shard, in rank order
    key_config: str = ""  # a file of options holding the API key, for engines that read one (SGLang)
    trust_remote_code: bool = False  # the profile's reviewed key: the engine runs the model's own code
    # LoRA adapters loaded at start, in catalog order: llama.cpp numbers them 0, 1, ... in this order.
    adapters: tuple[ShardAdapter, ...] = ()
    # > 0: the model's `adapter_loading: runtime`: the engine starts with none of `adapters` and
    # room for this many at once; the router loads them while it serves (router/lora.py).
    max_loras: int = 0

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def gpus_per_node(self) -> int:
        """Tensor parallel size inside one node (1 on a CPU)."""
        return max(len(self.gpus), 1)

    @property
    def init_port(self) -> int:
        """Where the ranks of a vLLM or SGLang replica meet: the leader's port + 10000."""
        return (self.peers[0].port if self.peers else self.port) + INIT_PORT_OFFSET

    @property
    def workers(self) -> tuple[Peer, ...]:
        """Every shard but rank 0 (llama.cpp's RPC workers)."""
        return self.peers[1:]

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Shard:
        """A shard entry of the role (defaults filled in), as Ansible hands it over."""
        return cls(engine=str(entry["engine"]), model=str(entry["model"]), model_path=str(entry["model_path"]),
                   port=int(entry["port"]), gpus=tuple(int(g) for g in entry.get("gpus") or ()),
                   args=tuple(str(a) for a in entry.get("args") or ()), rank=int(entry.get("rank") or 0),
                   nodes=int(entry.get("nodes") or 1), leader=str(entry.get("leader") or ""),
                   peers=tuple(Peer.parse(str(p)) for p in entry.get("peers") or ()),
                   key_config=str(entry.get("key_config") or ""),
                   trust_remote_code=_flag(entry.get("trust_remote_code")),
                   adapters=tuple(ShardAdapter.from_entry(a) for a in entry.get("adapters") or ()),
                   max_loras=_count(entry.get("max_loras"), "max_loras"))


def _count(value: Any, key: str) -> int:
    """A whole number >= 0 of the shard entry (None: 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a whole number >= 0, not {value!r}")
    return value


def _flag(value: Any) -> bool:
    """A yes/no of the shard entry: a real boolean only (`"false"` is a string Ansible may
    hand over, and must not turn trust on)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ValueError(f"trust_remote_code must be true or false, not {value!r}")


@dataclass(frozen=True)
class Layout:
    """Where the engines are on the host, and what every shard there shares."""

    install_dir: str = "/opt/llmgw/engines"
    llamacpp_dir: str = "/opt/llmgw/engines/llamacpp"  # the folder named by the build's checksum
    listen_address: str = "127.0.0.1"  # the role binds the host's management address
    llamacpp_parallel: int = 2

    def venv_python(self, engine: str) -> str:
        """The Python of an engine's pinned virtualenv."""
        return f"{self.install_dir}/{engine}/bin/python"
