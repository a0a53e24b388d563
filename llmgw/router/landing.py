"""The landing page at `/`: how to connect, and nothing else.

It is reachable without a key, so it shows no data — no models, no counts, no
replica names. The base URL is rebuilt from what the client (or the proxy in front)
sent, and every part of it is HTML-escaped: those headers are attacker-controlled.
"""

from __future__ import annotations

import html

from llmgw.router.asgi import Scope


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope["headers"]:
        if k == name:
            return str(v.decode("latin-1")).split(",")[0].strip() or None
    return None


def base_url(scope: Scope) -> str:
    """The address clients use: X-Forwarded-Proto/Host/Prefix when a proxy set them."""
    proto = _header(scope, b"x-forwarded-proto") or scope.get("scheme", "http")
    host = _header(scope, b"x-forwarded-host") or _header(scope, b"host")
    if host is None:
        server = scope.get("server") or ("localhost", None)
        host = server[0] if server[1] in (None, 80, 443) else f"{server[0]}:{server[1]}"
    prefix = (_header(scope, b"x-forwarded-prefix") or "").rstrip("/")
    return f"{proto}://{host}{prefix}"


def landing_page(scope: Scope) -> str:
    api = html.escape(base_url(scope) + "/v1")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmgw</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:3rem auto;padding:0 1rem}}
pre{{background:#f4f4f4;padding:1rem;overflow-x:auto}}</style></head>
<body>
<h1>llmgw</h1>
<p>This is an OpenAI-compatible API. Point any OpenAI client at this base URL,
with an API key from your administrator:</p>
<pre>{api}</pre>
<h2>Python</h2>
<pre>from openai import OpenAI

client = OpenAI(base_url="{api}", api_key="sk-llmgw-...")
reply = client.chat.completions.create(
    model="MODEL", messages=[{{"role": "user", "content": "Hello"}}])
print(reply.choices[0].message.content)</pre>
<h2>curl</h2>
<pre>curl {api}/models -H "Authorization: Bearer $LLMGW_API_KEY"</pre>
<p>The models you may use are listed at <code>{api}/models</code> (with your key).</p>
</body></html>
"""
