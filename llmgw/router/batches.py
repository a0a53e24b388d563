"""The OpenAI Files and Batch APIs on the client listener, as OpenAI shapes them.

    POST   /v1/files                 multipart: `purpose` (batch) and `file` (JSONL)
    GET    /v1/files                 ?purpose= &limit= &after= &order=
    GET    /v1/files/{id}            GET /v1/files/{id}/content      DELETE /v1/files/{id}
    POST   /v1/batches               {input_file_id, endpoint, completion_window: 24h, metadata}
    GET    /v1/batches               ?limit= &after=
    GET    /v1/batches/{id}          POST /v1/batches/{id}/cancel

An upload is streamed to disk (never held whole), at most `MAX_FILE_BYTES`, then checked
line by line before it is kept: at most `MAX_REQUESTS` lines, each a JSON object with a
`custom_id` unique in the file, `method` POST, a `url` the Batch API serves and a `body`
object naming a model this router serves, not streamed. Every refusal names the line.
Records live in the key store (store/batches.py), bytes in `batch_dir`, named by id.
A key sees the files and batches of its group (or its own, outside any group) only; any
other id is a 404, as if it did not exist. Running batches is batch_runner.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mmap
import os
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from llmgw.errors import StoreError
from llmgw.router.asgi import ClientGone, Receive, Scope, Send
from llmgw.router.batch_dispatch import Dispatch
from llmgw.router.batch_files import (
    ENDPOINTS,
    FORM_SLACK,
    MAX_FILE_BYTES,
    FileDir,
    bad,
    form_parts,
    scan_lines,
)
from llmgw.router.batch_runner import BatchRunner
from llmgw.router.bodies import header, multipart_boundary, read_body
from llmgw.router.openai_errors import RouterError, send_error
from llmgw.router.principal import Principal
from llmgw.router.settings import RouterSettings
from llmgw.router.table import RoutingTable
from llmgw.store import Store
from llmgw.store.batches import BatchConflict, BatchLine, BatchRecord, BatchStore, FileRecord

log = logging.getLogger("llmgw.router")

PREFIXES = ("/v1/files", "/v1/batches")
WINDOW = "24h"
WINDOW_SECONDS = 24 * 3600
_FILE_ID = re.compile(r"^file-[A-Za-z0-9]{1,64}$")
_BATCH_ID = re.compile(r"^batch_[A-Za-z0-9]{1,64}$")


def owner_of(principal: Principal) -> str:
    return f"group:{principal.group}" if principal.group is not None else f"key:{principal.key_id}"


def file_object(f: FileRecord) -> dict[str, Any]:
    return {"id": f.id, "object": "file", "bytes": f.bytes, "created_at": f.created_at, "filename": f.filename,
            "purpose": f.purpose, "status": "processed", "status_details": None, "expires_at": f.expires_at}


def batch_object(b: BatchRecord) -> dict[str, Any]:
    return {"id": b.id, "object": "batch", "endpoint": b.endpoint, "model": b.model,
            "errors": {"object": "list", "data": b.errors} if b.errors else None,
            "input_file_id": b.input_file_id, "completion_window": b.completion_window, "status": b.status,
            "output_file_id": b.output_file_id, "error_file_id": b.error_file_id, "created_at": b.created_at,
            "expires_at": b.expires_at, **{k: b.times.get(k) for k in (
                "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
                "cancelled_at")},
            "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
            "usage": {"input_tokens": b.input_tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": b.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": b.input_tokens + b.output_tokens},
            "metadata": b.metadata}


def _page(data: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": more}


class BatchService:
    """The Files and Batch API endpoints, and the runner that runs this router's share of batches."""

    def __init__(self, *, store: Store, settings: RouterSettings, state_path: Path,
                 table: Callable[[], RoutingTable], dispatch: Dispatch,
                 principal_of: Callable[[str], Principal | None]) -> None:
        self.settings = settings
        self.store = BatchStore(store)
        root = Path(settings.batch_dir) if settings.batch_dir else state_path.parent / "llmgw-files"
        self.files = FileDir(root)
        self.table = table
        self.runner = BatchRunner(self.store, self.files, dispatch, principal_of, settings)

    def _serves(self, model: str) -> bool:
        return self.table().resolve(model) is not None

    async def handle(self, scope: Scope, receive: Receive, send: Send, principal: Principal) -> None:
        try:
            status, body = await self._route(scope, receive, send, principal)
        except RouterError as err:
            await send_error(send, err)
            return
        except ClientGone:
            return
        except BatchConflict as err:
            await send_error(send, bad(str(err) + (f" ({err.hint})" if err.hint else "")))
            return
        except StoreError as err:
            log.warning("batches: the store failed: %s", err)
            await send_error(send, RouterError(503, "the router cannot reach its store right now; try again shortly",
                                               code="store_unavailable", headers={"Retry-After": "5"}))
            return
        if body is None:
            return  # streamed already
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _route(self, scope: Scope, receive: Receive, send: Send,
                     principal: Principal) -> tuple[int, dict[str, Any] | None]:
        method, path = scope["method"], scope["path"].rstrip("/")
        owner = owner_of(principal)
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        parts = path.split("/")[2:]  # files|batches, id, action
        kind, ident, action = parts[0], (parts[1] if len(parts) > 1 else None), "/".join(parts[2:]) or None
        routes = {("files", False, None): ("GET", "POST"), ("files", True, None): ("GET", "DELETE"),
                  ("files", True, "content"): ("GET",), ("batches", False, None): ("GET", "POST"),
                  ("batches", True, None): ("GET",), ("batches", True, "cancel"): ("POST",)}
        allowed = routes.get((kind, ident is not None, action))
        if allowed is None:
            raise RouterError(404, f"this router serves no endpoint `{method} {path}`", code="unknown_endpoint")
        if method not in allowed:
            raise RouterError(405, f"{path} takes {' or '.join(allowed)}", headers={"Allow": ", ".join(allowed)})
        if kind == "files":
            if ident is None:
                if method == "POST":
                    return 200, await self._upload(scope, receive, owner)
                return 200, await self._list_files(owner, query)
            record = await self._file(owner, ident)
            if action == "content":
                await self._content(send, record)
                return 200, None
            if method == "DELETE":
                if await asyncio.to_thread(self.store.delete_file, owner, record.id):
                    with contextlib.suppress(FileNotFoundError):
                        self.files.path(record.id).unlink()
                return 200, {"id": record.id, "object": "file", "deleted": True}
            return 200, file_object(record)
        if ident is None:
            if method == "POST":
                return 200, await self._create(scope, receive, principal, owner)
            return 200, await self._list_batches(owner, query)
        if not _BATCH_ID.match(ident):
            raise self._no_batch(ident)
        if action == "cancel":
            cancelled = await asyncio.to_thread(self.store.cancel_batch, owner, ident, int(time.time()))
            if cancelled is None:
                raise self._no_batch(ident)
            self.runner.poke()
            return 200, batch_object(cancelled)
        found = await asyncio.to_thread(self.store.get_batch, ident, owner)
        if found is None:
            raise self._no_batch(ident)
        return 200, batch_object(found)

    @staticmethod
    def _no_batch(ident: str) -> RouterError:
        return RouterError(404, f"No batch found with id '{ident[:100]}'.", code="batch_not_found")

    @staticmethod
    def _limit(query: dict[str, str], default: int, top: int) -> int:
        text = query.get("limit", str(default))
        if not text.isdigit() or not 1 <= int(text) <= top:
            raise bad(f"`limit` must be an integer from 1 to {top}", param="limit")
        return int(text)

    # -- files ---------------------------------------------------------------------------
    async def _file(self, owner: str, ident: str) -> FileRecord:
        record = await asyncio.to_thread(self.store.get_file, owner, ident) if _FILE_ID.match(ident) else None
        if record is None:
            raise RouterError(404, f"No such File object: {ident[:100]}", code="file_not_found", param="id")
        return record

    async def _list_files(self, owner: str, query: dict[str, str]) -> dict[str, Any]:
        limit = self._limit(query, 10000, 10000)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise bad("`order` must be asc or desc", param="order")
        found = await asyncio.to_thread(self.store.list_files, owner, purpose=query.get("purpose"),
                                        after=query.get("after"), limit=limit + 1, descending=order == "desc")
        return _page([file_object(f) for f in found[:limit]], len(found) > limit)

    async def _content(self, send: Send, record: FileRecord) -> None:
        try:
            f = open(self.files.path(record.id), "rb")  # noqa: SIM115 - closed below, across awaits
        except FileNotFoundError:
            raise RouterError(404, f"the bytes of file {record.id} are missing from this router's batch_dir",
                              code="file_not_found") from None
        with f:
            size = os.fstat(f.fileno()).st_size
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/octet-stream"),
                                    (b"content-length", str(size).encode())]})
            while True:
                chunk = await asyncio.to_thread(f.read, 1 << 20)
                await send({"type": "http.response.body", "body": chunk, "more_body": bool(chunk)})
                if not chunk:
                    return

    async def _upload(self, scope: Scope, receive: Receive, owner: str) -> dict[str, Any]:
        ctype = header(scope, b"content-type")
        if not ctype or not ctype.lower().startswith("multipart/form-data"):
            raise bad("POST /v1/files takes a multipart/form-data body with `purpose` and `file`")
        boundary = multipart_boundary(ctype)
        limit = MAX_FILE_BYTES + FORM_SLACK
        self.files.ensure()
        tmp = self.files.root / f".upload-{secrets.token_hex(8)}"
        try:
            await self._spool(scope, receive, tmp, limit)
            file_id = f"file-{secrets.token_hex(12)}"
            record = await asyncio.to_thread(self._keep, tmp, boundary, file_id, owner)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        await asyncio.to_thread(self.store.add_file, record)
        return file_object(record)

    async def _spool(self, scope: Scope, receive: Receive, tmp: Path, limit: int) -> None:
        """The request body into `tmp`, at most `limit` bytes (413 beyond)."""
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RouterError(413, f"the upload is {declared} bytes; a batch file may be at most "
                                   f"{MAX_FILE_BYTES} bytes", code="request_too_large")
        size = 0
        with open(tmp, "wb") as f:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise RouterError(413, f"the upload is over {MAX_FILE_BYTES} bytes, the most a batch file "
                                           "may be", code="request_too_large")
                if chunk:
                    await asyncio.to_thread(f.write, chunk)
                if not message.get("more_body", False):
                    return

    def _keep(self, tmp: Path, boundary: bytes, file_id: str, owner: str) -> FileRecord:
        """Check the spooled form and keep its file as `file_id` (in a worker thread)."""
        with open(tmp, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise bad("the upload is empty")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                fields = form_parts(buf, boundary)
                purpose = fields.get("purpose")
                if purpose is None:
                    raise bad("the form has no `purpose` field", param="purpose")
                purpose_text = bytes(buf[purpose[0]:purpose[1]]).decode("utf-8", "replace").strip()
                if purpose_text != "batch":
                    raise bad(f"this router keeps files for the Batch API only: `purpose` must be \"batch\", not "
                               f"{purpose_text[:40]!r}", param="purpose")
                part = fields.get("file")
                if part is None:
                    raise bad("the form has no `file` field", param="file")
                start, end, filename = part
                if end - start > MAX_FILE_BYTES:
                    raise RouterError(413, f"the file is {end - start} bytes; a batch file may be at most "
                                           f"{MAX_FILE_BYTES}", code="request_too_large")
                scan_lines(buf, start, end, self._serves)
                dest = self.files.path(file_id)
                with open(dest, "wb") as out:
                    for at in range(start, end, 1 << 20):
                        out.write(buf[at:min(end, at + (1 << 20))])
        name = "".join(c for c in (filename or "upload.jsonl") if c.isprintable())[:255] or "upload.jsonl"
        return FileRecord(file_id, owner, purpose_text, name, end - start, int(time.time()))

    # -- batches -------------------------------------------------------------------------
    async def _list_batches(self, owner: str, query: dict[str, str]) -> dict[str, Any]:
        limit = self._limit(query, 20, 100)
        found = await asyncio.to_thread(self.store.list_batches, owner, after=query.get("after"), limit=limit + 1)
        return _page([batch_object(b) for b in found[:limit]], len(found) > limit)

    async def _create(self, scope: Scope, receive: Receive, principal: Principal, owner: str) -> dict[str, Any]:
        raw = await read_body(scope, receive, 64 * 1024)
        try:
            req = json.loads(raw)
        except (ValueError, RecursionError):
            raise bad("the request body is not valid JSON") from None
        if not isinstance(req, dict):
            raise bad("the request body must be a JSON object")
        endpoint = req.get("endpoint")
        if endpoint not in ENDPOINTS:
            raise bad(f"`endpoint` must be one of {', '.join(ENDPOINTS)}", param="endpoint")
        if req.get("completion_window") != WINDOW:
            raise bad(f"`completion_window` must be \"{WINDOW}\"", param="completion_window")
        metadata = req.get("metadata")
        if metadata is not None and not (
                isinstance(metadata, dict) and len(metadata) <= 16
                and all(isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
                        for k, v in metadata.items())):
            raise bad("`metadata` must be at most 16 pairs of strings (keys up to 64 characters, values up to "
                       "512)", param="metadata")
        file_id = req.get("input_file_id")
        if not isinstance(file_id, str):
            raise bad("`input_file_id` must be the id of a file uploaded with purpose batch", param="input_file_id")
        record = await self._file(owner, file_id)
        if record.purpose != "batch":
            raise bad(f"file {file_id} has purpose {record.purpose!r}; a batch reads a file uploaded with purpose "
                       "\"batch\"", param="input_file_id")
        lines, models = await asyncio.to_thread(self._scan_file, record.id, endpoint)
        now = int(time.time())
        batch = BatchRecord(f"batch_{secrets.token_hex(12)}", owner, principal.key_id, endpoint,
                            models.pop() if len(models) == 1 else None, record.id, WINDOW, "validating", now,
                            now + WINDOW_SECONDS, metadata=metadata)
        await asyncio.to_thread(self.store.create_batch, batch, lines)
        self.runner.poke()
        created = await asyncio.to_thread(self.store.get_batch, batch.id)
        assert created is not None
        return batch_object(created)

    def _scan_file(self, file_id: str, endpoint: str) -> tuple[list[BatchLine], set[str]]:
        models: set[str] = set()

        def serves(model: str) -> bool:
            models.add(model)
            return self._serves(model)
        try:
            f = open(self.files.path(file_id), "rb")  # noqa: SIM115
        except FileNotFoundError:
            raise RouterError(404, f"the bytes of file {file_id} are missing from this router's batch_dir",
                              code="file_not_found") from None
        with f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return scan_lines(buf, 0, len(buf), serves, endpoint), models
