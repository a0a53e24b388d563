"""One API key per replica, so engines answer only the router.

Keys are derived, not stored: HMAC-SHA256 of the replica id under a site secret, so
every apply (and every activation) gives a replica the same key without a list of keys
to keep in step, and a replica id reused later gets the same key again. The secret is
32 random bytes made on first use in `llmgw-engine-keys.secret` beside the state file
(0600, created exclusively; keep it out of git like the state), or given as hex in
`$LLMGW_ENGINE_KEY_SECRET` where several control hosts apply to one fleet (a
PostgreSQL state backend, the controller).

apply hands each engine host the keys of its serving shards (written there to a 0600
EnvironmentFile per unit by role llmgw_engine) and every router host all of them
(`engine-keys.json`, 0600, by role llmgw_router). Keys never enter the state file, a
unit's command line or Ansible's output (the tasks that write them are `no_log`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from llmgw.errors import LlmgwError

SECRET_FILE = "llmgw-engine-keys.secret"
SECRET_ENV = "LLMGW_ENGINE_KEY_SECRET"
KEY_PREFIX = "llmgw-engine-"


class EngineKeyring:
    def __init__(self, secret_path: Path) -> None:
        self.secret_path = secret_path
        self._secret: bytes | None = None

    @classmethod
    def beside(cls, state_file: Path) -> EngineKeyring:
        return cls(state_file.with_name(SECRET_FILE))

    def key(self, replica_id: str) -> str:
        digest = hmac.new(self._load(), replica_id.encode(), hashlib.sha256).hexdigest()
        return KEY_PREFIX + digest

    def _load(self) -> bytes:
        if self._secret is None:
            self._secret = _from_env() or self._from_file()
        return self._secret

    def _from_file(self) -> bytes:
        path = self.secret_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            pass
        except OSError as exc:
            raise LlmgwError(f"cannot create the engine key secret {path}: {exc.strerror}",
                             hint=f"make its folder writable, or set {SECRET_ENV}") from None
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32) + "\n")
        try:
            if path.stat().st_mode & 0o077:
                raise LlmgwError(f"{path} is readable by others; it holds the secret of every engine key",
                                 hint=f"chmod 600 {path}")
            text = path.read_text(encoding="ascii").strip()
            return bytes.fromhex(text) if len(text) >= 32 else _bad(path)
        except (OSError, ValueError):
            return _bad(path)


def _from_env() -> bytes | None:
    text = os.environ.get(SECRET_ENV, "").strip()
    if not text:
        return None
    try:
        value = bytes.fromhex(text)
    except ValueError:
        value = b""
    if len(value) < 16:
        raise LlmgwError(f"${SECRET_ENV} must be at least 32 hex digits", hint="make one with: openssl rand -hex 32")
    return value


def _bad(path: Path) -> bytes:
    raise LlmgwError(f"{path} does not hold an engine key secret (64 hex digits)",
                     hint="delete it to make a new one (engines restart with new keys at the next apply)")
