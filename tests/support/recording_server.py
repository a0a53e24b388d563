"""A local HTTP server that records what it is sent (the Authorization header above all) and
either proxies to an upstream (the olah mirror), serves fixed bytes, or redirects some paths
to another server — the hostile or merely redirecting hosts a token must not reach."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

HOP = {"connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length"}


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None


@dataclass
class Recorder:
    url: str
    seen: list[Seen] = field(default_factory=list)

    def auths(self) -> set[str | None]:
        return {s.authorization for s in self.seen}


@contextmanager
def recording_server(host: str, *, upstream: str | None = None, body: bytes = b"",
                     redirect: Callable[[str], str | None] = lambda path: None) -> Iterator[Recorder]:
    """Serve on host:free port. `redirect(path)` -> a URL sends a 302 there; else proxy to
    `upstream` when given, else answer `body`."""
    rec = Recorder(url="")

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            rec.seen.append(Seen(self.command, self.path, self.headers.get("Authorization")))
            target = redirect(self.path)
            if target is not None:
                self.send_response(302)
                self.send_header("Location", target)
                if upstream is not None:  # as the Hub's redirect to its CDN: the file's metadata rides along
                    head = httpx.head(upstream + self.path, timeout=30)
                    for k, v in (("X-Repo-Commit", head.headers.get("x-repo-commit")),
                                 ("X-Linked-Etag", head.headers.get("etag")), ("ETag", head.headers.get("etag")),
                                 ("X-Linked-Size", head.headers.get("content-length"))):
                        if v:
                            self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if upstream is None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            resp = httpx.request(self.command, upstream + self.path, follow_redirects=False, timeout=30,
                                 headers={k: v for k, v in self.headers.items()
                                          if k.lower() not in ("host", "authorization", "accept-encoding")})
            self.send_response(resp.status_code)
            for k, v in resp.headers.items():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(resp.content)) if self.command != "HEAD"
                             else resp.headers.get("content-length", "0"))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(resp.content)

        do_GET = do_HEAD = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    rec.url = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
