"""Which fabric a reference names: its id (`ib-0c42a10300b20000`), a unique prefix of it,
or its switch GUID as ibnetdiscover prints it (`0x0c42a10300b20000`).

One rule for `llmgw fabrics show REF` (llmgw.fabric.index) and the dashboard's fabric
pages on a router (llmgw.views.fabric_copy), which knows the fabrics' ids from its site
copy and imports no fabric parser (#34).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from llmgw.errors import FabricError


def find_fabric_id(ref: str, ids: Iterable[str]) -> str:
    """The one id of `ids` that `ref` names; FabricError saying what to give when none or several do."""
    known = list(ids)
    if ref in known:
        return ref
    wanted = ref.strip().lower()
    if wanted.startswith("0x"):  # a switch GUID as ibnetdiscover prints it
        with contextlib.suppress(ValueError):
            wanted = f"ib-{int(wanted, 16):016x}"
    hits = [fid for fid in known if wanted and (fid.startswith(wanted) or fid[3:].startswith(wanted))]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise FabricError(f"{ref!r} matches {len(hits)} fabrics: {', '.join(hits)}",
                          hint="give more of the id", fabric=ref)
    raise FabricError(f"no fabric {ref!r} (known: {', '.join(known) or 'none'})",
                      hint="`llmgw fabrics` lists them", fabric=ref)
