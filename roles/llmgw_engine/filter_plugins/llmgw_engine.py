# -*- coding: utf-8 -*-
"""Filters llmgw_engine_command (a shard's engine command line, word by word),
llmgw_engine_environment (what llmgw sets in its environment for the engine) and
llmgw_engine_refusals (what preflight refuses in a shard entry).

The command lines are built by llmgw's typed Python (llmgw.engines: one function per
engine and shape, unit-tested and checked by the engines' own parsers), and the entry is
checked by llmgw.engines.entry with the same lists `catalog validate` uses; these filters
only hand the role's shard entry and host layout over. They run on the control host,
where llmgw (which drives this role) is installed.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible.errors import AnsibleFilterError

try:
    from llmgw.engines import Layout, Shard, command, environment
    from llmgw.engines.entry import check_entry
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


def llmgw_engine_environment(shard: Dict[str, Any]) -> Dict[str, str]:
    """What llmgw sets in the shard's environment for its engine (vLLM's run-time LoRA switch)."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(f"llmgw_engine_environment needs the llmgw package on the control host: "
                                 f"{_IMPORT_ERROR}")
    try:
        return environment(Shard.from_entry(shard))
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError(f"shard {shard.get('unit', '?')}: {e}") from e


def llmgw_engine_refusals(shard: Dict[str, Any]) -> List[str]:
    """Every problem of a present shard entry (defaults filled in); [] when it is clean."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(f"llmgw_engine_refusals needs the llmgw package on the control host: {_IMPORT_ERROR}")
    return check_entry(shard)


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"llmgw_engine_command": llmgw_engine_command, "llmgw_engine_environment": llmgw_engine_environment,
                "llmgw_engine_refusals": llmgw_engine_refusals}
