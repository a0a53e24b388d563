"""Batch API files: their bytes on disk, and the checks an upload passes before it is kept.

An upload arrives as a multipart form spooled to disk (batches.py); its parts are found in
the file through mmap, never read into memory whole. A batch input file is JSONL up to
OpenAI's limits (`MAX_FILE_BYTES`, `MAX_REQUESTS`); `scan_lines` checks every line and
says which line is wrong and how. The bytes of each file live in `FileDir` under the file's
id: never a name a client chose.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Callable
from pathlib import Path

from llmgw.router.openai_errors import RouterError
from llmgw.store.batches import BatchLine

# OpenAI's limits for a batch input file.
MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_REQUESTS = 50_000
FORM_SLACK = 64 * 1024  # the multipart form's own bytes around the file
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
_DISPOSITION = re.compile(rb'(?i)content-disposition:[^\r\n]*')
_PARAM = re.compile(rb'(?i);\s*(name|filename)="([^"\r\n]*)"')
_CUSTOM_ID_MAX = 512


def bad(message: str, param: str | None = None) -> RouterError:
    return RouterError(400, message, code="invalid_request", param=param)


class FileDir:
    """File bytes on disk, one file per id (never a name a client chose)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, file_id: str) -> Path:
        return self.root / file_id

    def ensure(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def write(self, file_id: str, lines: list[str]) -> int:
        """Write a whole file (temporary name, then renamed), returning its size."""
        self.ensure()
        tmp = self.root / f".{file_id}.tmp"
        data = "".join(ln + "\n" for ln in lines).encode()
        with open(tmp, "wb") as f:
            f.write(data)
        tmp.replace(self.root / file_id)
        return len(data)

    def read(self, file_id: str, start: int, length: int) -> bytes:
        with open(self.root / file_id, "rb") as f:
            f.seek(start)
            return f.read(length)


def form_parts(buf: mmap.mmap, boundary: bytes) -> dict[str, tuple[int, int, str | None]]:
    """The form's fields: name -> (start, end, filename), from the whole body on disk."""
    delim = b"--" + boundary
    out: dict[str, tuple[int, int, str | None]] = {}
    pos = buf.find(delim)
    if pos < 0:
        raise bad("the multipart body has no part with its boundary")
    while True:
        pos += len(delim)
        if buf[pos:pos + 2] == b"--":
            return out
        head_end = buf.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise bad("a multipart part has no end to its headers")
        head = buf[pos:head_end]
        end = buf.find(b"\r\n" + delim, head_end + 4)
        if end < 0:
            raise bad("the multipart body ends before its closing boundary")
        disposition = _DISPOSITION.search(head)
        params = {k.lower(): v for k, v in _PARAM.findall(disposition.group(0))} if disposition else {}
        name = params.get(b"name")
        if name is not None:
            filename = params.get(b"filename")
            out[name.decode("utf-8", "replace")] = (head_end + 4, end,
                                                     None if filename is None else filename.decode("utf-8", "replace"))
        pos = end + 2


def scan_lines(data: bytes | mmap.mmap, start: int, end: int, models: Callable[[str], bool],
               endpoint: str | None = None) -> list[BatchLine]:
    """Check a batch input file's lines (see the module's doc); their places in the file.
    `endpoint`: every line's url must be this one (a batch's)."""
    lines: list[BatchLine] = []
    seen: dict[str, int] = {}
    pos, number = start, 0
    while pos < end:
        nl = data.find(b"\n", pos, end)
        stop = end if nl < 0 else nl
        number += 1
        where = f"line {number}"
        raw = bytes(data[pos:stop]).rstrip(b"\r")
        if not raw.strip():
            raise bad(f"{where} is empty: every line must be one request (a JSON object)")
        if number > MAX_REQUESTS:
            raise bad(f"the file has more than {MAX_REQUESTS} requests, the most one batch may hold; split it")
        try:
            req = json.loads(raw)
        except (ValueError, RecursionError):
            raise bad(f"{where} is not valid JSON") from None
        if not isinstance(req, dict):
            raise bad(f"{where} must be a JSON object with custom_id, method, url and body")
        cid = req.get("custom_id")
        if not isinstance(cid, str) or not cid or len(cid) > _CUSTOM_ID_MAX:
            raise bad(f"{where}: `custom_id` must be a non-empty string of at most {_CUSTOM_ID_MAX} characters")
        if cid in seen:
            raise bad(f"{where}: custom_id {cid[:80]!r} is used on line {seen[cid]} too; each request needs "
                       "its own")
        seen[cid] = number
        if req.get("method") != "POST":
            raise bad(f"{where}: `method` must be \"POST\"")
        url = req.get("url")
        if url not in ENDPOINTS:
            raise bad(f"{where}: `url` must be one of {', '.join(ENDPOINTS)}, not {json.dumps(url)[:80]}")
        if endpoint is not None and url != endpoint:
            raise bad(f"{where}: `url` is {url} but the batch's endpoint is {endpoint}; every request of a batch "
                       "goes to its endpoint", param="endpoint")
        body = req.get("body")
        if not isinstance(body, dict):
            raise bad(f"{where}: `body` must be a JSON object, the request as the endpoint takes it")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise bad(f"{where}: the body names no `model`")
        if not models(model):
            raise bad(f"{where}: the model `{model[:100]}` does not exist or you do not have access to it")
        if body.get("stream") is True:
            raise bad(f"{where}: a batch request cannot be streamed; drop `stream`")
        lines.append(BatchLine(number, cid, pos, stop - pos))
        pos = stop + 1
    if not lines:
        raise bad("the file holds no requests")
    return lines
