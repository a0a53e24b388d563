"""API key material: generation and hashing.

Keys are 256 random bits, so a plain SHA-256 is enough to store them safely (a slow
password hash protects low-entropy secrets; it would only cost the router time on a
cache miss). The prefix kept in clear lets people tell keys apart in `keys list`.
"""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "sk-llmgw-"
SHOWN_PREFIX_LEN = len(KEY_PREFIX) + 6


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


_KEY = re.compile(r"^sk-llmgw-[A-Za-z0-9_-]{43}$")


def is_key(text: str) -> bool:
    """Whether `text` has the shape of a key `new_key` makes (one made elsewhere, handed in)."""
    return bool(_KEY.match(text))


def new_key_id() -> str:
    return secrets.token_hex(6)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def shown_prefix(key: str) -> str:
    return key[:SHOWN_PREFIX_LEN]
