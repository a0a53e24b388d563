"""A narrow test double of an engine for the endpoints the lab's llama-server cannot serve.

The lab's engine is llama-server with a tiny text model: no audio model (transcriptions,
translations), no cross-encoder (score), and it keeps no responses (GET/cancel of a
response id). This double answers those on vLLM's paths, records every request it gets
(method, path, the model it was asked for, what a multipart upload carried), and says in
each answer which double it is, so a test can tell where the router sent a request. It
checks what it receives as strictly as the real server would for the fields the router
touches: the `model` field, the multipart framing, the upload's bytes.

It is not a model of vLLM's behaviour beyond that: the tests that use it say so.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web

from tests.support.net import free_port

_ids = itertools.count(1)


@dataclass
class Seen:
    method: str
    path: str
    model: str | None
    upload_bytes: int = 0
    upload_chunks: int = 0


@dataclass
class EngineDouble:
    name: str
    models: tuple[str, ...]
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [f"{s.method} {s.path}" for s in self.seen]

    # -- handlers -----------------------------------------------------------------------
    def _model(self, model: Any) -> web.Response | None:
        if model not in self.models:
            return web.json_response({"error": {"message": f"The model `{model}` does not exist.", "type":
                                                "NotFoundError", "code": 404}}, status=404)
        return None

    async def _json(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        body = await request.json()
        self.seen.append(Seen(request.method, request.path, body.get("model")))
        return body, self._model(body.get("model"))

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def props(self, request: web.Request) -> web.Response:
        """The router asks a llama.cpp replica its slots (router/slots.py) as it checks health:
        not a client's request, so not recorded; the double has no slot count to give."""
        return web.json_response({"error": "no slots here"}, status=404)

    async def rerank(self, request: web.Request) -> web.Response:
        body, bad = await self._json(request)
        if bad:
            return bad
        docs = body.get("documents", [])
        results = [{"index": i, "relevance_score": 1.0 / (i + 1), "document": {"text": d}} for i, d in enumerate(docs)]
        return web.json_response({"id": f"rerank-{next(_ids)}", "model": body["model"], "results": results,
                                  "usage": {"total_tokens": 7 * len(docs)}, "served_by": self.name})

    async def score(self, request: web.Request) -> web.Response:
        body, bad = await self._json(request)
        if bad:
            return bad
        return web.json_response({"id": f"score-{next(_ids)}", "object": "list", "model": body["model"],
                                  "data": [{"index": 0, "object": "score", "score": 0.5}],
                                  "usage": {"prompt_tokens": 9, "total_tokens": 9}, "served_by": self.name})

    async def tokenize(self, request: web.Request) -> web.Response:
        body, bad = await self._json(request)
        if bad:
            return bad
        tokens = [ord(c) for c in body.get("prompt", "")]
        return web.json_response({"tokens": tokens, "count": len(tokens), "served_by": self.name})

    async def detokenize(self, request: web.Request) -> web.Response:
        body, bad = await self._json(request)
        if bad:
            return bad
        return web.json_response({"prompt": "".join(chr(t) for t in body.get("tokens", [])), "served_by": self.name})

    async def audio(self, request: web.Request) -> web.Response:
        reader = await request.multipart()
        model: str | None = None
        size = chunks = 0
        filename = None
        async for part in reader:
            if not isinstance(part, BodyPartReader):  # pragma: no cover - no nested forms sent
                continue
            if part.name == "model":
                model = (await part.read()).decode()
            elif part.name == "file":
                filename = part.filename
                while chunk := await part.read_chunk(64 * 1024):
                    size += len(chunk)
                    chunks += 1
            else:
                await part.read()
        self.seen.append(Seen(request.method, request.path, model, size, chunks))
        bad = self._model(model)
        if bad:
            return bad
        if filename is None:
            return web.json_response({"error": {"message": "file is required", "type": "BadRequestError",
                                                "code": 400}}, status=400)
        return web.json_response({"text": f"{self.name} heard {size} bytes of {filename} for {model}"})

    async def create_response(self, request: web.Request) -> web.Response:
        body, bad = await self._json(request)
        if bad:
            return bad
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.responses:
            return web.json_response({"error": {"message": f"Response with id '{previous}' not found.",
                                                "type": "invalid_request_error", "code": 404}}, status=404)
        rid = f"resp_{self.name}_{next(_ids)}"
        resp = {"id": rid, "object": "response", "created_at": 0, "model": body["model"], "status": "completed",
                "output": [{"type": "message", "id": f"msg_{rid}", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": f"{self.name} after {previous}",
                                         "annotations": []}]}],
                "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}}
        self.responses[rid] = resp
        return web.json_response(resp)

    async def get_response(self, request: web.Request) -> web.Response:
        rid = request.match_info["rid"]
        self.seen.append(Seen(request.method, request.path, None))
        found = self.responses.get(rid)
        if found is None:
            return web.json_response({"error": {"message": f"Response with id '{rid}' not found.",
                                                "type": "invalid_request_error", "code": 404}}, status=404)
        return web.json_response(found)

    async def cancel_response(self, request: web.Request) -> web.Response:
        rid = request.match_info["rid"]
        self.seen.append(Seen(request.method, request.path, None))
        found = self.responses.get(rid)
        if found is None:
            return web.json_response({"error": {"message": f"Response with id '{rid}' not found."}}, status=404)
        return web.json_response({**found, "status": "cancelled"})

    async def anything(self, request: web.Request) -> web.Response:
        """Management paths (LoRA loading, profiling, sleep): recorded, so a test sees they were never reached."""
        self.seen.append(Seen(request.method, request.path, None))
        return web.json_response({"managed": request.path})

    # -- lifecycle ----------------------------------------------------------------------
    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/props", self.props)
        app.router.add_post("/v1/rerank", self.rerank)
        app.router.add_post("/v1/score", self.score)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/v1/audio/transcriptions", self.audio)
        app.router.add_post("/v1/audio/translations", self.audio)
        app.router.add_post("/v1/responses", self.create_response)
        app.router.add_get("/v1/responses/{rid}", self.get_response)
        app.router.add_post("/v1/responses/{rid}/cancel", self.cancel_response)
        app.router.add_route("*", "/{tail:.*}", self.anything)
        return app

    def start(self) -> EngineDouble:
        self.port = free_port()
        started = threading.Event()
        loop = self._loop = asyncio.new_event_loop()

        async def serve() -> None:
            self._runner = web.AppRunner(self._app(), access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            started.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"double-{self.name}", daemon=True)
        self._thread.start()
        assert started.wait(10), f"engine double {self.name} did not start"
        return self

    def stop(self) -> None:
        loop, runner = self._loop, self._runner
        if loop is None or runner is None:
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()
        self._loop = None
