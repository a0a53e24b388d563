"""Names and fingerprints the plan hands out: replica ids, unit names, spec hashes.

They live in one place because apply, facts (drift) and the router all meet them:
a unit found on a host is matched back to its replica by name alone.
"""

from __future__ import annotations

import hashlib
import json

from llmgw.catalog import Model, Profile, profile_adapters

# Defined with the state's schema, which checks every unit name it holds against them.
from llmgw.state.model import UNIT_RE, endpoint_url, replica_number, unit_name

__all__ = ["UNIT_RE", "endpoint_url", "parse_unit", "replica_number", "spec_hash", "unit_name"]


def parse_unit(name: str) -> tuple[str, int] | None:
    """(replica id, rank) of a shard unit name; None for any other unit (the router's, ...)."""
    m = UNIT_RE.fullmatch(name)  # fullmatch: `$` alone lets a trailing newline through
    return (m.group("replica"), int(m.group("rank"))) if m else None


# Profile keys added after replicas were first recorded: left out of the hash at their default.
_ADDED_KEYS = ("trust_remote_code", "numa")
# Profile keys only routers read (the state's model records carry them): no engine runs
# differently, so a change replaces nothing.
_ROUTER_KEYS = frozenset({"max_in_flight"})


def spec_hash(model: Model, profile: Profile) -> str:
    """A fingerprint of everything a replica was made from: the source and the whole profile.

    A replica whose recorded hash differs from its profile's current one is replaced:
    its engine runs with a definition the catalog no longer holds.
    """
    # A key left at its default is left out, so that adding one to the catalog's schema
    # (trust_remote_code) replaces no replica that does not set it.
    exclude = {k for k in _ADDED_KEYS if getattr(profile, k) == Profile.model_fields[k].default}
    exclude |= _ROUTER_KEYS
    doc: dict[str, object] = {"source": model.source, "profile": profile.model_dump(mode="json", exclude=exclude)}
    # The LoRA adapters its engine loads at start (their names and sources; a new scale or alias
    # is the router's alone): only when there are some, so a replica without any keeps its hash.
    adapters = [[a.name, a.source] for a in profile_adapters(model, profile.name)]
    if adapters:
        doc["adapters"] = adapters
    if model.adapter_loading == "runtime" and adapters:  # other flags and environment for its engine
        doc["adapter_loading"] = ["runtime", model.max_loras]
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
