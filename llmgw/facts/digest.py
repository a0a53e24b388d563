"""SHA-256 digests of the fabric captures facts carry, worked out once per text.

A fabric map is memoised by its captures' digests (llmgw.fabric.hostmap.capture_key). At
4,096 hosts that is 27 MB of ibnetdiscover text to encode and hash again on every plan
and view (~30 ms), for texts the facts memo already hashed when it stored them. So the
facts memo keeps each capture's digest and, when it unpacks, hands both over here.

A digest is only ever given back for the very string object it was handed over with
(`is`, never equality, which would cost what hashing costs): a text that changed in any
way (a new file, a `model_copy`) is another object and is hashed afresh. Only the last
hand-over is kept, so a long-running process holds one fleet's captures, not every one
it ever read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

# id(text) -> (text, digest): the text is kept so its id cannot be reused while it is here.
_known: dict[int, tuple[str, str]] = {}


def text_digest(text: str) -> str:
    """SHA-256 of `text` (UTF-8), in hex: remembered when this object was handed over."""
    hit = _known.get(id(text))
    if hit is not None and hit[0] is text:
        return hit[1]
    return hashlib.sha256(text.encode()).hexdigest()


def remember(pairs: Iterable[tuple[str, str]]) -> None:
    """These (text, digest) pairs, each digest `text_digest` of its text, replace the last ones."""
    global _known
    _known = {id(text): (text, digest) for text, digest in pairs}
