"""Operator edits of the site's YAML, made so that the diff is the change and nothing else.

    yamltext.py       text surgery on one file (set or drop a key, drop a list item), proven by re-parsing
    node_state.py     `llmgw cordon/uncordon/drain`: a node's llmgw_node_state in the inventory
    gpu_cordon.py     `llmgw cordon/uncordon NODE --gpu N`: the node's llmgw_cordoned_gpus
    catalog_edits.py  `llmgw scale`, `llmgw shift`, `llmgw model add/remove`: the catalog files

Code outside this package imports from here.
"""

from llmgw.edits.catalog_edits import (
    Scaled,
    Shifted,
    in_force,
    model_add_edit,
    model_remove_edit,
    parse_shares,
    scale_edit,
    shift_edit,
    split_of,
)
from llmgw.edits.gpu_cordon import gpu_cordon_edit
from llmgw.edits.node_state import HostEntry, host_entries, node_state_edit
from llmgw.edits.yamltext import FileEdit, UnsafeEdit, remove_item, remove_key, set_key

__all__ = [
    "FileEdit",
    "HostEntry",
    "Scaled",
    "Shifted",
    "UnsafeEdit",
    "gpu_cordon_edit",
    "host_entries",
    "in_force",
    "model_add_edit",
    "model_remove_edit",
    "node_state_edit",
    "parse_shares",
    "remove_item",
    "remove_key",
    "scale_edit",
    "set_key",
    "shift_edit",
    "split_of",
]
