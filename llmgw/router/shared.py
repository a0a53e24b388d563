"""Counters the router's worker processes share: in flight, requests and last use per replica.

A router with several workers (workers.py) keeps one table in shared memory: a memfd
the supervisor creates and hands every worker by file descriptor (nothing on disk,
nothing to clean up; a restarted worker maps the same one). Layout:

    header    64 bytes            magic, rows, slots
    serials   rows x int64        the state serial each worker routes by
    ids       slots x 16 bytes    replica id digests (blake2b-128); all zero: a free slot
    ints      rows x slots x 2    int64: in flight, requests started
    floats    rows x slots x 2    float64: last use (wall clock), last activity (monotonic)

Each worker owns one row and is its only writer, so the hot path (begin and end of an
attempt) is four stores into its own row: no lock, no atomics (Python has none across
processes). Readers — the least-load pick, drains, the admin API, idle stops — sum the
counts over the rows and take the latest times. An aligned 8-byte store is never seen
half-written; a reader may see a count one request old, which least-load and a drain
(polled) both tolerate. CLOCK_MONOTONIC is system-wide, so monotonic times compare
across processes.

Slots are found by replica id: each process caches id -> slot; a miss (a replica new to
this process) takes an flock on the memfd to find or claim the slot, so every process
agrees on it. When every slot is taken, a slot nobody has in flight whose replica is no
longer in the claimer's state is reused (zeroed first).

A worker that dies leaves its row behind: the supervisor zeroes it (`clear_row`) before
starting the replacement, so the requests that died with it stop counting against their
replicas (a drain is never held by a dead worker).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import time
from collections.abc import Collection

from llmgw.router.table import ReplicaRuntime
from llmgw.state import Replica

SLOTS = 4096  # replicas a router can count at once (a fleet of thousands of replicas fits)
_MAGIC = b"llmgwct1"
_HEADER = struct.Struct("8sqq")
_HEADER_SIZE = 64
_DIGEST = 16
_ZERO = bytes(_DIGEST)


def _digest(replica_id: str) -> bytes:
    return hashlib.blake2b(replica_id.encode(), digest_size=_DIGEST).digest()


class SharedTable:
    """The shared counters as one process sees them; `row` is the row it writes (None: reader)."""

    def __init__(self, fd: int, *, row: int | None = None) -> None:
        header = os.pread(fd, _HEADER.size, 0)
        if len(header) != _HEADER.size:
            raise ValueError("the shared counters file is too short")
        magic, rows, slots = _HEADER.unpack(header)
        if magic != _MAGIC or rows < 1 or slots < 1:
            raise ValueError("the file descriptor does not hold the router's shared counters")
        if row is not None and not 0 <= row < rows:
            raise ValueError(f"row {row} is outside the table's {rows} rows")
        self.fd = fd
        self.rows = int(rows)
        self.slots = int(slots)
        self.row = row
        self._map = mmap.mmap(fd, self.size(rows, slots))  # MAP_SHARED: every process sees every store
        view = memoryview(self._map)
        ids_start = _HEADER_SIZE + rows * 8
        ids_end = ids_start + slots * _DIGEST
        cells = rows * slots * 2 * 8
        self.serials = view[_HEADER_SIZE:ids_start].cast("q")
        self._ids = view[ids_start:ids_end]
        self.ints = view[ids_end:ids_end + cells].cast("q")
        self.floats = view[ids_end + cells:ids_end + 2 * cells].cast("d")
        self._cache: dict[str, int] = {}

    @staticmethod
    def size(rows: int, slots: int) -> int:
        return _HEADER_SIZE + rows * 8 + slots * _DIGEST + 2 * rows * slots * 2 * 8

    @classmethod
    def create(cls, rows: int, slots: int = SLOTS) -> SharedTable:
        """A new zeroed table in a memfd (a reader's view: the supervisor writes no row)."""
        fd = os.memfd_create("llmgw-router-counters", os.MFD_CLOEXEC)
        os.ftruncate(fd, cls.size(rows, slots))
        os.pwrite(fd, _HEADER.pack(_MAGIC, rows, slots), 0)
        return cls(fd)

    def close(self) -> None:
        self.serials.release()
        self._ids.release()
        self.ints.release()
        self.floats.release()
        self._map.close()

    # -- slots ---------------------------------------------------------------------------
    def slot(self, replica_id: str, live: Collection[str] = ()) -> int:
        """The slot of `replica_id`, claimed if new; `live`: the ids of the caller's state."""
        found = self._cache.get(replica_id)
        if found is not None:
            return found
        digest = _digest(replica_id)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            ids = self._ids.tobytes()
            at = self._find(ids, digest)
            if at is None:
                at = self._find(ids, _ZERO)
                if at is None:
                    at = self._reclaim(ids, {_digest(r) for r in live} | {digest})
                self._ids[at * _DIGEST:(at + 1) * _DIGEST] = digest
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        self._cache[replica_id] = at
        return at

    @staticmethod
    def _find(ids: bytes, digest: bytes) -> int | None:
        at = ids.find(digest)
        while at >= 0:
            if at % _DIGEST == 0:
                return at // _DIGEST
            at = ids.find(digest, at + 1)
        return None

    def _reclaim(self, ids: bytes, keep: set[bytes]) -> int:
        for s in range(self.slots):
            if ids[s * _DIGEST:(s + 1) * _DIGEST] not in keep and self.in_flight(s) <= 0:
                for r in range(self.rows):
                    i = self.base(r, s)
                    self.ints[i] = self.ints[i + 1] = 0
                    self.floats[i] = self.floats[i + 1] = 0.0
                return s
        raise RuntimeError(f"all {self.slots} shared counter slots are busy: more replicas in flight than the "
                           "router can count")

    # -- counts --------------------------------------------------------------------------
    def base(self, row: int, slot: int) -> int:
        """Index into `ints` / `floats` of (row, slot)'s first field."""
        return (row * self.slots + slot) * 2

    def in_flight(self, slot: int) -> int:
        ints, step, total = self.ints, self.slots * 2, 0
        for i in range(slot * 2, len(ints), step):
            total += ints[i]
        return total

    def clear_row(self, row: int) -> None:
        """Forget what a worker counted: it died, and its requests with it."""
        for i in range(self.base(row, 0), self.base(row + 1, 0), 2):
            self.ints[i] = 0  # in flight; its requests stay counted
        self.serials[row] = 0  # routes by nothing until its replacement loads the state

    # -- state serials -------------------------------------------------------------------
    def routing_by(self, serial: int) -> None:
        """This worker now routes by state `serial`."""
        if self.row is not None:
            self.serials[self.row] = serial

    def held_serial(self) -> int:
        """The serial every worker routes by (the lowest): a drain of a replica the newest
        state takes out of rotation is only over once no worker can still pick it."""
        return min(self.serials)


class SharedRuntime(ReplicaRuntime):
    """A replica's runtime whose counts live in the shared table: this process writes its
    own row; `in_flight`, `requests`, `last_used` and `last_active` read every row."""

    __slots__ = ("_bases", "_own", "_table")

    def __init__(self, record: Replica, table: SharedTable, live: Collection[str] = ()) -> None:
        slot = table.slot(record.id, live)
        self._table = table
        self._bases = tuple(table.base(r, slot) for r in range(table.rows))
        self._own = -1 if table.row is None else table.base(table.row, slot)
        super().__init__(record)

    def _start_counters(self) -> None:
        self.first_seen = time.monotonic()

    def begin(self) -> None:
        i = self._own
        if i < 0:
            raise RuntimeError("the supervisor reads the shared counters; only workers count requests")
        ints, floats = self._table.ints, self._table.floats
        ints[i] += 1
        ints[i + 1] += 1
        floats[i] = time.time()
        floats[i + 1] = time.monotonic()

    def end(self) -> None:
        i = self._own
        ints, floats = self._table.ints, self._table.floats
        ints[i] -= 1
        floats[i] = time.time()
        floats[i + 1] = time.monotonic()

    @property
    def in_flight(self) -> int:  # type: ignore[override]
        ints, total = self._table.ints, 0
        for b in self._bases:
            total += ints[b]
        return total

    @property
    def requests(self) -> int:  # type: ignore[override]
        ints, total = self._table.ints, 0
        for b in self._bases:
            total += ints[b + 1]
        return total

    @property
    def last_used(self) -> float | None:  # type: ignore[override]
        floats = self._table.floats
        latest = max(floats[b] for b in self._bases)
        return latest if latest > 0 else None

    @property
    def last_active(self) -> float:  # type: ignore[override]
        floats = self._table.floats
        return max(self.first_seen, *(floats[b + 1] for b in self._bases))

    @property
    def in_flight_by_worker(self) -> list[int] | None:
        ints = self._table.ints
        return [ints[b] for b in self._bases]
