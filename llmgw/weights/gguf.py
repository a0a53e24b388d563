"""Read a GGUF header (metadata and tensor infos, no tensor data) from a file or over HTTP.

Only the header is read — over HTTP with range requests in growing chunks — so checking
a 70 GB model costs a few megabytes at most. The reader is strict: a header that is
truncated or internally inconsistent is an error with the byte offset, never a guess.

Format (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count
(u32 counts in version 1), kv pairs (string key, u32 type, value), then per tensor:
string name, u32 n_dims, u64 dims[n], u32 ggml type, u64 offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgw.errors import WeightsError

if TYPE_CHECKING:  # only an annotation here: `llmgw plan` imports this module, httpx costs it ~0.1 s
    import httpx

MAGIC = b"GGUF"
# A header larger than this is not a header (tokenizer vocabularies run to a few MB).
MAX_HEADER_BYTES = 256 * 1024 * 1024
_MAX_ITEMS = 100_000_000

# GGUF metadata value types.
_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GgufError(WeightsError):
    """A GGUF header that cannot be read; says where and what was expected."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    ggml_type: int


@dataclass(frozen=True)
class GgufHeader:
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None


Fetch = Callable[[int, int], bytes]  # (offset, length) -> up to length bytes


class _Reader:
    """Sequential reads over a fetch function, buffering in growing chunks."""

    def __init__(self, fetch: Fetch, source: str) -> None:
        self._fetch = fetch
        self._source = source
        self._buf = b""
        self._base = 0  # file offset of _buf[0]
        self.pos = 0
        self._chunk = 64 * 1024
        self._eof = False

    def _fill(self, need: int) -> None:
        while self._base + len(self._buf) < self.pos + need and not self._eof:
            if self.pos + need > MAX_HEADER_BYTES:
                raise GgufError(f"{self._source}: GGUF header runs past {MAX_HEADER_BYTES} bytes; not a model file?")
            start = self._base + len(self._buf)
            data = self._fetch(start, self._chunk)
            if len(data) < self._chunk:
                self._eof = True
            # Drop what was consumed so memory stays at about one chunk plus the request.
            keep_from = max(0, self.pos - self._base)
            self._buf = self._buf[keep_from:] + data
            self._base += keep_from
            self._chunk = min(self._chunk * 2, 8 * 1024 * 1024)

    def read(self, n: int, what: str) -> bytes:
        self._fill(n)
        start = self.pos - self._base
        data = self._buf[start:start + n]
        if len(data) < n:
            raise GgufError(f"{self._source}: truncated GGUF header at byte {self.pos}: expected {n} bytes of {what}, "
                            f"found {len(data)}", hint="the file is incomplete or not a GGUF model")
        self.pos += n
        return data

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]


def _count(r: _Reader, version: int, what: str) -> int:
    n = int(r.unpack("<I" if version == 1 else "<Q", what))
    if n > _MAX_ITEMS:
        raise GgufError(f"{r._source}: implausible {what} {n} at byte {r.pos}; the header is corrupt")
    return n


def _string(r: _Reader, version: int, what: str) -> str:
    n = _count(r, version, f"length of {what}")
    raw = r.read(n, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GgufError(f"{r._source}: {what} at byte {r.pos - n} is not UTF-8") from None


def _value(r: _Reader, version: int, vtype: int, key: str) -> Any:
    if vtype in _SCALARS:
        return r.unpack(_SCALARS[vtype], f"value of {key}")
    if vtype == _STRING:
        return _string(r, version, f"value of {key}")
    if vtype == _ARRAY:
        itype = int(r.unpack("<I", f"array type of {key}"))
        n = _count(r, version, f"array length of {key}")
        if itype in _SCALARS:
            size = struct.calcsize(_SCALARS[itype])
            data = r.read(size * n, f"array {key}")
            # Large arrays (token scores) are not needed by any check: keep only their length.
            return [x[0] for x in struct.iter_unpack(_SCALARS[itype], data)] if n <= 1024 else f"<{n} items>"
        return [_value(r, version, itype, key) for _ in range(n)]
    raise GgufError(f"{r._source}: unknown metadata value type {vtype} for key {key!r} at byte {r.pos}",
                    hint="the file is corrupt or from a GGUF version this llmgw does not know")


def read_header(fetch: Fetch, source: str) -> GgufHeader:
    r = _Reader(fetch, source)
    magic = r.read(4, "the GGUF magic")
    if magic != MAGIC:
        raise GgufError(f"{source}: not a GGUF file (starts with {magic!r}, expected b'GGUF')",
                        hint="llama.cpp profiles need a .gguf model; convert it or use a vllm/sglang profile")
    version = int(r.unpack("<I", "the GGUF version"))
    n_tensors = _count(r, version, "tensor count")
    n_kv = _count(r, version, "metadata count")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = _string(r, version, "metadata key")
        vtype = int(r.unpack("<I", f"type of {key}"))
        metadata[key] = _value(r, version, vtype, key)
    tensors = []
    for _ in range(n_tensors):
        name = _string(r, version, "tensor name")
        n_dims = int(r.unpack("<I", f"dimensions of {name}"))
        if n_dims > 8:
            raise GgufError(f"{source}: tensor {name!r} claims {n_dims} dimensions; the header is corrupt")
        dims = tuple(int(r.unpack("<Q", f"shape of {name}")) for _ in range(n_dims))
        ggml_type = int(r.unpack("<I", f"type of tensor {name}"))
        r.unpack("<Q", f"offset of tensor {name}")
        tensors.append(TensorInfo(name, dims, ggml_type))
    return GgufHeader(version, metadata, tensors)


def file_fetcher(path: Path) -> Fetch:
    def fetch(offset: int, length: int) -> bytes:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read(length)
    return fetch


def http_fetcher(url: str, client: httpx.Client) -> Fetch:
    """Range requests; a server that ignores Range is read only as far as needed, then closed."""

    def fetch(offset: int, length: int) -> bytes:
        headers = {"Range": f"bytes={offset}-{offset + length - 1}"}
        with client.stream("GET", url, headers=headers, follow_redirects=True) as resp:
            if resp.status_code == 416:
                return b""
            if resp.status_code not in (200, 206):
                raise GgufError(f"{url}: HTTP {resp.status_code} when reading the GGUF header",
                                hint="check the source URL and that the server is reachable from here")
            skip = offset if resp.status_code == 200 else 0
            out = bytearray()
            for chunk in resp.iter_bytes():
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                out += chunk
                if len(out) >= length:
                    break
            return bytes(out[:length])

    return fetch
