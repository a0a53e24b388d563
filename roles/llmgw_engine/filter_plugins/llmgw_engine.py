# -*- coding: utf-8 -*-
"""Filter llmgw_engine_command: a shard's engine command line, word by word.

The command lines are built by llmgw's typed Python (llmgw.engines: one function per
engine and shape, unit-tested and checked by the engines' own parsers); this filter only
hands the role's shard entry and host layout over. It runs on the control host, where
llmgw (which drives this role) is installed.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible.errors import AnsibleFilterError

try:
    from llmgw.engines import Layout, Shard, command
except ImportError as e:  # pragma: no cover - a control host without llmgw
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None


def llmgw_engine_command(shard: Dict[str, Any], install_dir: str, llamacpp_dir: str, listen_address: str,
                         llamacpp_parallel: Any) -> List[str]:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(f"llmgw_engine_command needs the llmgw package on the control host: {_IMPORT_ERROR}")
    layout = Layout(install_dir=str(install_dir), llamacpp_dir=str(llamacpp_dir),
                    listen_address=str(listen_address), llamacpp_parallel=int(llamacpp_parallel))
    try:
        return command(Shard.from_entry(shard), layout)
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError(f"shard {shard.get('unit', '?')}: {e}") from e


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"llmgw_engine_command": llmgw_engine_command}
