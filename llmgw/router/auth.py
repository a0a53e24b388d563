"""API keys on the client listener: who is calling, checked from memory.

Every active key's SHA-256 is held in a dict refreshed from the store every couple of
seconds, so a request costs one hash and one lookup, never a query. A key the cache
does not know waits for the next refresh, at most once per `key_miss_refresh_interval`,
so a key created a moment ago works (within that interval) while a flood of wrong keys
costs the store at most one read per interval. A revoked key stops working at the next refresh.

Paths exempt from auth are listed exactly (no prefixes): `/` is the landing page only.
"""

from __future__ import annotations

import asyncio
import logging
import time

from llmgw.router.openai_errors import RouterError
from llmgw.router.principal import DEFAULT_PRIORITY, DEFAULT_SHARE, UNGROUPED, GroupQuota, Principal, Tenancy
from llmgw.store import GroupRecord, KeyRecord, Store
from llmgw.store.keys import hash_key

log = logging.getLogger("llmgw.router")

# Exact paths a client may call without a key. Everything else needs one.
AUTH_EXEMPT_PATHS = frozenset({"/", "/health"})


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class KeyCache:
    """Keys and group quotas in memory, refreshed from the store off the request path."""

    def __init__(self, store: Store, *, refresh_interval: float = 2.0,
                 miss_refresh_interval: float = 1.0) -> None:
        self.store = store
        self.refresh_interval = refresh_interval
        self.miss_refresh_interval = miss_refresh_interval
        self.by_hash: dict[str, Principal] = {}
        self.groups: dict[str, GroupRecord] = {}
        self.quotas: dict[str, GroupQuota] = {}
        self.key_groups: dict[str, str | None] = {}  # every key id (revoked too) -> group
        self.key_names: dict[str, str] = {}
        self.loaded = False
        self.last_refresh = 0.0
        self._refreshing: asyncio.Future[None] | None = None

    # -- the request path ----------------------------------------------------------------
    async def authenticate(self, headers: list[tuple[bytes, bytes]]) -> Principal:
        token = bearer_token(headers)
        if token is None:
            if self.loaded and not self.by_hash:
                raise self._no_keys()
            raise RouterError(401, "missing API key: send it as 'Authorization: Bearer <key>'",
                              code="missing_api_key")
        digest = hash_key(token)
        principal = self.by_hash.get(digest)
        if principal is not None:
            return principal
        # An unknown key waits for the next allowed refresh rather than failing inside the
        # window: a key created a moment ago then always works, and wrong keys still cost
        # the store at most one read per interval (concurrent misses share it).
        wait = self.miss_refresh_interval - (time.monotonic() - self.last_refresh)
        if wait > 0:
            await asyncio.sleep(wait)
        await self.refresh()
        principal = self.by_hash.get(digest)
        if principal is not None:
            return principal
        if not self.by_hash:
            raise self._no_keys()
        raise RouterError(401, "invalid API key", code="invalid_api_key")

    @staticmethod
    def _no_keys() -> RouterError:
        return RouterError(401, "no API keys exist yet: create one on the router host with "
                                "`llmgw keys create NAME` (same --store as the router), then send it "
                                "as 'Authorization: Bearer <key>'", code="invalid_api_key")

    # -- refresh -------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Reload keys and groups; concurrent callers share one store read."""
        if self._refreshing is not None:
            await asyncio.shield(self._refreshing)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refreshing = fut
        try:
            keys, groups = await asyncio.to_thread(self._read)
            self._install(keys, groups)
            fut.set_result(None)
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters see it through shield
            raise
        finally:
            self.last_refresh = time.monotonic()
            self._refreshing = None

    def _read(self) -> tuple[list[KeyRecord], list[GroupRecord]]:
        return self.store.list_keys(include_revoked=True), self.store.list_groups()

    def _install(self, keys: list[KeyRecord], groups: list[GroupRecord]) -> None:
        self.groups = {g.name: g for g in groups}
        quotas: dict[str, GroupQuota] = {}
        for g in groups:
            q = self.quotas.get(g.name)
            if q is None:
                q = GroupQuota(g.name, g.rpm, g.tokens_per_day)
            else:
                q.rpm, q.tokens_per_day = g.rpm, g.tokens_per_day
            quotas[g.name] = q
        self.quotas = quotas
        by_hash: dict[str, Principal] = {}
        for k in keys:
            self.key_groups[k.id] = k.group
            self.key_names[k.id] = k.name
            if k.active:
                chain = tuple(q for q in (quotas[g] for g in self.ancestry(k.group)) if q.limited)
                by_hash[k.hash] = Principal(k.id, k.name, k.group, chain, self.tenancy(k.group))
        self.by_hash = by_hash
        self.loaded = True

    def tenancy(self, group: str | None) -> Tenancy:
        """The key's group for fair sharing, with each admission setting from the nearest
        group in its ancestry that sets it, else the default."""
        line = [self.groups[g] for g in self.ancestry(group)]
        share = next((g.share for g in line if g.share is not None), DEFAULT_SHARE)
        priority = next((g.priority for g in line if g.priority is not None), DEFAULT_PRIORITY)
        choose = next((g.may_choose_priority for g in line if g.may_choose_priority is not None), False)
        return Tenancy(group or UNGROUPED, share, priority, choose)

    def ancestry(self, group: str | None) -> list[str]:
        """The group and its ancestors, nearest first (stops at a loop or a missing parent)."""
        out: list[str] = []
        while group is not None and group in self.groups and group not in out:
            out.append(group)
            group = self.groups[group].parent
        return out

    async def run(self) -> None:
        """Refresh forever; a store outage keeps the last good cache."""
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                await self.refresh()
            except Exception as exc:  # the store may be down for a while; keep serving
                log.warning("key refresh failed, keeping the cached keys: %s", exc)
