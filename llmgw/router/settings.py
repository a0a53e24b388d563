"""The router's tunables, in one place, with the defaults `llmgw router serve` uses."""

from __future__ import annotations

import os
from dataclasses import dataclass


def default_workers() -> int:
    """Worker processes by default: one per CPU this process may run on (its affinity,
    which a container's or a unit's CPU set narrows), so a router host uses every core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class RouterSettings:
    # Upstream timeouts (seconds). "First byte" covers the wait for the response
    # headers and the first body chunk; for a non-streamed completion that is the whole
    # generation, so it is long. "Chunk gap" is the longest silence inside a body.
    connect_timeout: float = 5.0
    first_byte_timeout: float = 600.0
    chunk_gap_timeout: float = 120.0
    # Largest request body accepted (bytes); more is refused with 413.
    max_body_bytes: int = 16 * 1024 * 1024
    # Attempts per request, across replicas and fallbacks, before giving up with 503.
    max_attempts: int = 4
    # One deadline per request, across every attempt: the response must start within it
    # (504 after), however many replicas were tried. A replica that timed out on a
    # request is never tried again for it.
    request_timeout: float = 600.0
    # Idle pooled connections to engines are closed after this many seconds: before the
    # engines close them (llama-server after 5 s, uvicorn-based engines after 5 s), so a
    # request is not written into a connection the engine is closing.
    upstream_keepalive: float = 2.0
    # Ejection (Envoy-style outlier detection): this many failures in a row eject a
    # replica (a refused connection or a failed health check: one); at most this share of
    # a model's ready replicas are ejected at once (always at least one may be).
    eject_after_failures: int = 3
    max_ejected_share: float = 0.5
    # Active health checks: GET <endpoint>/health every `health_interval` seconds.
    health_interval: float = 2.0
    health_timeout: float = 2.0
    # An ejected replica is skipped for backoff_base * 2**(n-1) seconds after its n-th
    # ejection in a row, at most backoff_max; then requests may try it again.
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    # How often the state file is checked for changes (stat only; read when changed).
    state_poll_interval: float = 0.5
    # Key cache refresh, and the shortest gap between store reads forced by unknown keys.
    key_refresh_interval: float = 2.0
    key_miss_refresh_interval: float = 1.0
    # Usage and request counters are written to the store in batches this often.
    usage_flush_interval: float = 1.0
    # On demand: how long a request waits for a replica to be started; how often idle
    # on-demand replicas are looked for.
    activation_timeout: float = 300.0
    idle_check_interval: float = 5.0
    # Retry-After (seconds) sent with 503 when nothing can serve a model.
    retry_after: int = 5
    # -- what one client may hold of the router (every listener; server.py enforces) -----
    # The request line and headers together, in bytes (431 beyond), and how many headers
    # (431 beyond). Buffered in memory until complete, so they are bounded.
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    # Seconds from a request's first byte to the end of its headers, and from there to
    # the end of its body (408 after either): a slow client cannot hold a connection.
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    # A body still arriving must average this many bytes a second since its headers,
    # looked at every `body_check_interval` seconds (408 below it): a client trickling a
    # few bytes now and then is cut off at the first look, not after all of body_timeout.
    body_min_rate: float = 1024.0
    body_check_interval: float = 5.0
    # Seconds an idle connection (new, or between requests) stays open. Above the idle
    # timeout of any load balancer in front, or it reuses connections the router closed.
    keep_alive_timeout: float = 20.0
    # Open connections per listener; beyond it a new one gets 503 and is closed.
    max_connections: int = 4096
    # -- token quotas (quotas.py) ----------------------------------------------------------
    # Reserved at admission for a request that names no max_tokens (max_completion_tokens),
    # and written into its body when its key is under a token limit, so the engine stops
    # there: keep it within the context of the models limited groups use (vLLM refuses a
    # max_tokens the context cannot hold).
    default_max_tokens: int = 4096
    # The largest completion budget (max_tokens, ...) and sequence count (n, best_of) a
    # request may name: more is a 400, not a reservation beyond any model's context.
    max_budget_tokens: int = 1_048_576
    max_choices: int = 128
    # The prompt is reserved as one token per this many request-body bytes: 1 is an upper
    # bound for text (a token is at least one byte), so a daily limit holds; raise it to
    # reserve less for bodies carrying images or other bulky data.
    prompt_bytes_per_token: float = 1.0
    # When that bound is what refuses a request, its prompt is counted exactly by the engines'
    # tokenizers (tokenize.py) and admitted by the count; this long at most for the count
    # (the byte bound's refusal stands after it). 0: never count, the byte bound alone.
    tokenize_timeout: float = 5.0
    # A reservation whose router never settled it (killed) stops counting after this many
    # seconds; longer than any request lives.
    reservation_ttl: float = 3600.0
    # -- the Batch API (batches.py, batch_runner.py) ---------------------------------------
    # Where uploaded files and batch outputs are kept, named by their ids ("": a folder
    # `llmgw-files` beside the state file). Routers sharing a PostgreSQL store must share it.
    batch_dir: str = ""
    # Requests of batches this router sends at once (across its batches), and batches it runs at once.
    batch_concurrency: int = 8
    batch_max_running: int = 2
    # A running batch's lease in the store: renewed every third of this; a router that stops
    # renewing loses the batch to another after this many seconds.
    batch_lease_ttl: float = 30.0
    # How often a router looks for batches to run, and a running batch for a cancel.
    batch_poll_interval: float = 1.0
    # -- admission and queueing per model (admission.py, scheduler.py) ---------------------
    # Requests one replica holds at once; beyond the sum over a model's ready replicas,
    # requests wait in the router. 0: the slots the engine says it runs (llama.cpp's
    # --parallel, from its /props: slots.py), else no router limit.
    max_in_flight: int = 0
    # Requests waiting per model, at most (a newcomer beyond it sheds the newest waiter of a
    # lower class, or is refused with 429), and how long one waits (then 503).
    max_queue: int = 1024
    queue_timeout: float = 60.0
    # A lower class's oldest waiter goes first once it has waited this many seconds, so a
    # steady interactive load cannot starve batch work for ever; 0: strict priority.
    starve_after: float = 0.0
    # The last this many free slots of a model (per worker) go only to a group holding none,
    # so a light group's next request finds a slot instead of waiting out a heavy group's
    # running one. Costs the busiest group that much of the model while nobody else sends;
    # 0: every free slot to whoever is next (work-conserving).
    headroom_slots: int = 0
