"""Per-replica engine API keys: what the router shows an engine so it answers.

Engines listen on their host's management address with an API key each (llama-server,
vLLM and SGLang all refuse a request without it), so the network reaches a model only
through the router, its keys and its quotas. apply generates one key per replica and
delivers them to every router host as `engine-keys.json` beside the state file (owner
only, 0600; never in the state file or on a command line): `{"replica-id": "key"}`.

The file is re-read when it changes (the state watcher stats it on each tick, and apply
delivers it before the state that names new replicas); a replica without a key is
called without one. A file that is unreadable, not JSON of that shape, or readable by
others is refused whole (the last good keys stay) and the reason kept in `error`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path

log = logging.getLogger("llmgw.router")

ENGINE_KEYS_FILE = "engine-keys.json"
# Keys travel in a header: printable ASCII without spaces, bounded.
_KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")
_MAX_FILE = 4 * 2**20


class EngineKeys:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: dict[str, str] = {}
        self.error: str | None = None
        self._signature: tuple[int, int, int] | None = None

    def authorize(self, replica_id: str, headers: dict[str, str]) -> dict[str, str]:
        """`headers` with the replica's key, if it has one: a new dict (callers pass shared
        constants, and one replica's key must never reach another)."""
        key = self.keys.get(replica_id)
        return headers if key is None else {**headers, "Authorization": f"Bearer {key}"}

    def refresh(self) -> None:
        """Re-read the file if it changed (a stat when it did not)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._signature is not None:
                log.warning("%s disappeared: engines are called without keys", self.path)
            self._signature, self.keys, self.error = None, {}, None
            return
        except OSError as exc:
            self._fail(f"cannot stat {self.path}: {exc.strerror}")
            return
        signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        if signature == self._signature:
            return
        self._signature = signature
        try:
            self.keys = self._read(st)
        except ValueError as exc:
            self._fail(str(exc))
            return
        self.error = None
        log.info("engine keys for %d replicas from %s", len(self.keys), self.path)

    def _read(self, st: os.stat_result) -> dict[str, str]:
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ValueError(f"{self.path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                             "it must be 0600")
        if st.st_size > _MAX_FILE:
            raise ValueError(f"{self.path} is over {_MAX_FILE} bytes")
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:
            raise ValueError(f"cannot read {self.path}: {type(exc).__name__}") from None
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) and _KEY.fullmatch(v)
                                                 for k, v in data.items()):
            raise ValueError(f"{self.path} is not a JSON object of replica ids to keys (16-512 characters "
                             "of A-Z a-z 0-9 . _ ~ + / = -)")
        return dict(data)

    def _fail(self, message: str) -> None:
        if self.error != message:
            log.error("%s; keeping the engine keys read before", message)  # never the keys themselves
        self.error = message
