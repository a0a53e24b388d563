"""Who may approve: the controller's operators, each named by a token only they can read.

A token is `llmgw-operator.NAME.MAC`, MAC the HMAC of NAME under the controller's operator
secret; the admin API computes it again (constant-time compare) and records NAME as the run's
`approved_by`: an identity the controller verified, never one the client states (before,
`$LLMGW_AUTHOR`). Nothing but the secret is stored, and a new secret revokes every token.

On its first start the controller makes, in its home (`$LLMGW_CONTROLLER_HOME`, default
`/var/lib/llmgw-controller`, the llmgw_controller role's home), outside its checkout:

    operator.secret   0600, the controller's user: 32 random bytes (hex)
    operator.token    the token of operator `operators`: 0640 and group `llmgw-operators`
                      when the controller's user may give it that group (a member), else
                      0600, and it says so (add the controller's user and the operators to
                      that group); `Operators.mint(NAME)` makes a person's own token, whose
                      approvals then carry NAME

and refuses to start when either is readable by every user. Why a token file and not the
peer's unix user (SO_PEERCRED over a unix socket): the API is TCP, reached through SSH
tunnels and by tests over loopback like the router's, and a file's mode and group are
how a bastion already says who may act.
"""

from __future__ import annotations

import grp
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from llmgw.errors import LlmgwError

# The admin API's listener unless told otherwise (`controller run --listen`, `approve --controller`).
ADMIN_LISTEN = "127.0.0.1:8095"
HOME_ENV = "LLMGW_CONTROLLER_HOME"
DEFAULT_HOME = Path("/var/lib/llmgw-controller")
SECRET_FILE = "operator.secret"
TOKEN_FILE = "operator.token"
GROUP = "llmgw-operators"
DEFAULT_OPERATOR = "operators"
PREFIX = "llmgw-operator."
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}")


class CredentialError(LlmgwError):
    pass


def controller_home() -> Path:
    """Where the controller keeps its own files (not its checkout)."""
    return Path(os.environ.get(HOME_ENV, "").strip() or DEFAULT_HOME)


class Operators:
    """The controller's operator secret: mints and checks operator tokens."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise CredentialError("the operator secret is too short")
        self._secret = secret

    def mint(self, name: str) -> str:
        if not NAME.fullmatch(name):
            raise CredentialError(f"an operator's name is 1 to 100 letters, digits and _ . @ -, not {name!r}")
        return f"{PREFIX}{name}.{self._mac(name)}"

    def identify(self, token: str) -> str | None:
        """The operator a token names, or None when this controller's secret did not make it."""
        if not token.startswith(PREFIX) or len(token) > 300:
            return None
        name, _, mac = token[len(PREFIX):].rpartition(".")
        if not NAME.fullmatch(name):
            return None
        return name if hmac.compare_digest(mac.encode(), self._mac(name).encode()) else None

    def _mac(self, name: str) -> str:
        return hmac.new(self._secret, b"operator:" + name.encode(), hashlib.sha256).hexdigest()


def _create(path: Path, text: str) -> bool:
    """Write `text` to a new 0600 file; False when it exists already."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise CredentialError(f"cannot create {path}: {exc.strerror}",
                              hint=f"the controller's home must be writable by it (or set ${HOME_ENV})") from None
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(text + "\n")
    return True


def _private(path: Path, what: str, mask: int) -> str:
    """`path`'s text, refused when its mode grants what `mask` names or it is not a plain file."""
    try:
        st = path.lstat()
        if not path.is_file() or path.is_symlink():
            raise CredentialError(f"{path} ({what}) is not a plain file")
        if st.st_mode & mask:
            raise CredentialError(f"{path} ({what}) is open to {'every user' if mask == 0o007 else 'other users'}",
                                  hint=f"chmod {'640' if mask == 0o007 else '600'} {path}")
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(f"cannot read {path} ({what}): {exc}") from None


def ensure(home: Path, *, group: str = GROUP, say: Callable[[str], None] | None = None) -> Operators:
    """The controller's operators (secret and default token made on first start); see the module."""
    try:
        home.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as exc:
        raise CredentialError(f"cannot create the controller's home {home}: {exc.strerror}",
                              hint=f"create it for the controller's user, or set ${HOME_ENV}") from None
    secret_path = home / SECRET_FILE
    _create(secret_path, secrets.token_hex(32))
    try:
        operators = Operators(bytes.fromhex(_private(secret_path, "the operator secret", 0o077)))
    except ValueError:
        raise CredentialError(f"{secret_path} does not hold the operator secret (hex)",
                              hint="remove it; the controller makes a new one (every operator token changes)") from None
    token_path = home / TOKEN_FILE
    if _create(token_path, operators.mint(DEFAULT_OPERATOR)):
        share(token_path, group, say)
    _private(token_path, "the operators' token", 0o007)
    return operators


def share(path: Path, group: str, say: Callable[[str], None] | None = None) -> bool:
    """Give `path` to `group` (0640) when this process may; say what to do when it may not."""
    try:
        os.chown(path, -1, grp.getgrnam(group).gr_gid)
        os.chmod(path, 0o640)
        return True
    except (KeyError, PermissionError):
        if say is not None:
            say(f"{path} is readable by the controller's user alone: create group {group} with the controller's "
                f"user and the operators in it (the llmgw_controller role does), or `chgrp {group} {path}`")
        return False


def read_token(path: Path) -> str:
    """An operator's token from `path` (`llmgw approve`), with what to do when it cannot be read."""
    try:
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise CredentialError(f"no operator token at {path}",
                              hint="the controller writes it on first start; give --token-file, or "
                                   f"${HOME_ENV} for a controller whose home is elsewhere") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(f"cannot read the operator token {path}: {getattr(exc, 'strerror', None) or exc}",
                              hint=f"operators are members of group {GROUP}, which may read it") from None
    if not token.startswith(PREFIX):
        raise CredentialError(f"{path} does not hold an operator token")
    return token
