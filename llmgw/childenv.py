"""The environment llmgw hands the programs it starts (ansible, ssh, git, pip, podman).

llmgw itself reads secrets from its environment (the Hugging Face token, the store's and
the state's PostgreSQL passwords, the engine-key secret, a router API key). A child
inherits every variable it is not told otherwise about, and none of these children needs
them: Ansible gets the HF token as an inventory variable, never from the environment, and
a child's environment is readable by every process of its user (`/proc/PID/environ`) and
is written by ansible-runner into its artifacts. So every child gets `child_env()`: this
process's environment less those secrets.

A deny-list, not an allow-list: the operator's own settings (`ANSIBLE_*`, `SSH_AUTH_SOCK`,
proxies, locale, `PATH`) are trusted and must reach Ansible and ssh as they are. What is
removed: the names below, and any `LLMGW_*` name that says it is a secret (TOKEN, SECRET,
PASSWORD, KEY, CREDENTIAL), so a secret variable added later is covered without an edit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Read by llmgw (or by the libraries it calls for it) as secrets.
SECRET_VARS = frozenset({
    "HF_TOKEN",  # llmgw.weights.check: sizing gated repositories
    "HUGGING_FACE_HUB_TOKEN",  # huggingface_hub's older name for the same
    "PGPASSWORD",  # libpq: the store's or state's PostgreSQL password
    "LLMGW_STORE",  # a store URL, which may carry its password (the router's unit sets it)
    "LLMGW_STORE_PASSWORD",
    "LLMGW_STATE_PASSWORD",
    "LLMGW_ENGINE_KEY_SECRET",  # llmgw.apply.engine_keys
    "LLMGW_API_KEY",  # llmgw.probe.target: a router API key
})
_SECRET_NAME = re.compile(r"^LLMGW_\w*(TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL)", re.IGNORECASE)


def is_secret(name: str) -> bool:
    """Whether the variable `name` holds a secret no child of llmgw may inherit."""
    return name.upper() in SECRET_VARS or bool(_SECRET_NAME.match(name))


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less every secret variable (see the module's docstring)."""
    return {k: v for k, v in env.items() if not is_secret(k)}


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a program llmgw starts: this process's, less its secrets, plus `extra`."""
    env = without_secrets(os.environ)
    env.update(extra)
    return env
