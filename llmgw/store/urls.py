"""Store URLs shown to people: the password taken out by parsing, never by guessing.

A PostgreSQL URL carries its password in the user info (`user:pass@host`, where the
password may itself hold `@`: the host starts after the LAST `@`) or in a query value
(`?password=...`, libpq's `sslpassword=` too). Everything a person sees (errors,
`/api/v1/status`, logs) goes through `redact_url`.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

MASK = "***"
# libpq parameters whose values are secrets.
SECRET_PARAMS = frozenset({"password", "sslpassword"})


def redact_url(url: str) -> str:
    """The URL with every password replaced by `***`; a URL that does not parse shows its scheme only."""
    if url.startswith("sqlite:"):
        return url  # a path, no credentials
    scheme, sep, _ = url.partition("://")
    if not sep:
        return "<a store URL without a scheme>"
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"{scheme}://{MASK}"
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{hostport}" if colon else f"{user}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in SECRET_PARAMS for k, _ in pairs):
            query = "&".join(f"{quote(k, safe='')}={MASK if k.lower() in SECRET_PARAMS else quote(v, safe='/-')}"
                             for k, v in pairs)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def password_problem(url: str) -> str | None:
    """How `url` carries a password (`user:password@`, `?password=`), or None when it does not."""
    try:
        parts = urlsplit(url)
    except ValueError:  # does not parse: judge the user info by its text
        userinfo = url.partition("://")[2].partition("/")[0].rpartition("@")[0]
        return "it carries a password (USER:PASSWORD@)" if ":" in userinfo else None
    if parts.password is not None:
        return "it carries a password (USER:PASSWORD@)"
    if any(k.lower() in SECRET_PARAMS for k, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return "it carries a password (?password=)"
    return None


def with_password(url: str, password: str) -> str:
    """`url` (PostgreSQL, without a password) with `password` in its user info, percent-encoded.
    The result lives in memory only: it is never printed (redact_url) nor put on a command line."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        raise ValueError("a password needs a user name in the URL (postgresql://USER@HOST/DB)")
    user = userinfo.partition(":")[0]
    return urlunsplit((parts.scheme, f"{user}:{quote(password, safe='')}@{hostport}", parts.path, parts.query,
                       parts.fragment))


def url_scheme(url: str) -> str:
    """Only the scheme of a URL (what an error about an unknown scheme may show)."""
    scheme, sep, _ = url.partition(":")
    if not sep or not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
        return "<none>"
    return scheme[:32]


def postgres_url_problem(url: str) -> str | None:
    """What is wrong with a PostgreSQL URL, in words that quote none of it; None when it parses.

    Checked before libpq sees the URL: libpq's own messages quote the text around a
    mistake, and around a password that is the password (`u:p@ss@db` makes it look up
    the host `ss@db`).
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        what = "its port is not a number" if "port" in str(exc).lower() else "it does not parse as a URL"
        return f"{what} (check brackets around an IPv6 address and the port)"
    if parts.netloc.count("@") > 1:
        return "its user or password holds an '@': percent-encode it as %40"
    if any(c in url for c in "\r\n\x00"):
        return "it holds a line break or NUL"
    return None


def secrets_of(url: str) -> list[str]:
    """The password strings in a URL (raw and decoded), to scrub from messages that quote it."""
    out: list[str] = []
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    netloc = parts.netloc if parts is not None else url.partition("://")[2].partition("/")[0]
    for userinfo in (netloc.rpartition("@")[0], netloc.partition("@")[0] if "@" in netloc else ""):
        password = userinfo.partition(":")[2]
        out += [password, unquote(password)]
    if parts is not None:
        out += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() in SECRET_PARAMS]
    return sorted({s for s in out if s}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` with every password of `url` (and the URL itself) replaced by `***`."""
    text = text.replace(url, redact_url(url))
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text
