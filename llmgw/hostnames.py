"""What a host name may be: a DNS name or an IP address (`is_host_name`, `is_ip_address`).

Its own module because two sides check it: the inventory, on the hosts it reads, and the
state's schema (llmgw.state.model), on the nodes and endpoints a plan or a state names. The
router imports the state's schema, and must not load the inventory (its Ansible reader and
the facts it takes along) for one rule.
"""

from __future__ import annotations

import ipaddress
import re

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")


def is_ip_address(name: str) -> bool:
    """An IPv4 or IPv6 literal (no brackets, no port)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_host_name(name: str) -> bool:
    """A DNS name (labels of letters, digits and inner hyphens, at most 253 characters) or an IP address."""
    return (len(name) <= 253 and bool(_DNS_NAME.match(name))) or is_ip_address(name)
