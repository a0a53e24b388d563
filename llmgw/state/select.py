"""Which backend holds a site's state: `state:` in llmgw.yaml, a path or a PostgreSQL URL.

The password of a PostgreSQL state never sits in llmgw.yaml (a file people commit) or
on a command line: it comes from $LLMGW_STATE_PASSWORD, from the file named by
$LLMGW_STATE_PASSWORD_FILE, or from libpq's own ~/.pgpass. A URL carrying one is
refused, and the error never repeats it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from llmgw.errors import LlmgwError, StateError
from llmgw.site import SITE_FILE, Site
from llmgw.state.backend import StateBackend
from llmgw.state.local import LocalBackend
from llmgw.state.postgres import DEFAULT_LEASE, PostgresBackend
from llmgw.yamlio import line_of, load_yaml

URL_SCHEMES = ("postgresql://", "postgres://")


def is_state_url(spec: str) -> bool:
    return spec.startswith(URL_SCHEMES)


def url_password_problem(url: str) -> str | None:
    """Why `url` must not be used as written (it carries a password), or None."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "it is not a valid URL"
    if parts.password is not None:
        return "it carries a password (user:password@)"
    if any(k.lower() == "password" for k, _v in parse_qsl(parts.query)):
        return "it carries a password (?password=)"
    return None


def state_password() -> str | None:
    """The PostgreSQL state's password from the environment or a file; None leaves it to libpq."""
    pw = os.environ.get("LLMGW_STATE_PASSWORD")
    if pw:
        return pw
    file = os.environ.get("LLMGW_STATE_PASSWORD_FILE")
    if file:
        try:
            return Path(file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise StateError(f"cannot read $LLMGW_STATE_PASSWORD_FILE {file}: {exc.strerror}") from None
    return None


def lease_seconds() -> float:
    raw = os.environ.get("LLMGW_STATE_LEASE")
    if not raw:
        return DEFAULT_LEASE
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise StateError(f"$LLMGW_STATE_LEASE is {raw!r}, not seconds between 0 and 86400",
                         hint="unset it for the default of 60 seconds")
    return value


def open_backend(spec: str, *, root: Path, cache: Path | None = None, where: str = "") -> StateBackend:
    """The backend `spec` names: a PostgreSQL URL, or a path relative to `root`.

    `where` says where the spec came from (`llmgw.yaml:4`, `--to`) for the error."""
    if is_state_url(spec):
        problem = url_password_problem(spec)
        if problem is not None:
            raise StateError(f"{where or 'the state URL'}: the PostgreSQL state URL is refused: {problem}",
                             hint="remove the password from the URL; give it in $LLMGW_STATE_PASSWORD, in a file "
                                  "named by $LLMGW_STATE_PASSWORD_FILE, or in ~/.pgpass")
        return PostgresBackend(spec, password=state_password(), lease=lease_seconds(), cache=cache)
    if "://" in spec:
        raise StateError(f"{where or 'state'}: unknown state backend {spec.split('://', 1)[0]!r}",
                         hint="use a file path (state.json) or postgresql://user@host/db")
    return LocalBackend((root / spec).resolve())


def backend_for(site: Site) -> StateBackend:
    """The site's state backend; a PostgreSQL one keeps its last copy at `site.state_file`."""
    spec = site.config.state
    if not is_state_url(spec):
        return LocalBackend(site.state_file)
    where = SITE_FILE
    with contextlib.suppress(LlmgwError, OSError, ValueError):
        where = f"{site.root / SITE_FILE}:{line_of(load_yaml(site.root / SITE_FILE), ['state'])}"
    return open_backend(spec, root=site.root, cache=site.state_file, where=where)
