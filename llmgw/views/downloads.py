"""Downloads in progress: the weights module's `.<name>.progress` files, read through Ansible.

Facts do not carry download progress (it changes by the second), so `llmgw replicas
--downloads` asks the nodes of the replicas still `starting` with `playbooks/downloads.yml`
(llmgw.runner). What it returns is the `downloads` mapping `replicas_view` takes:
(node, cache name) -> {"bytes": int, "total": int | None}. A node that cannot be reached,
or has no progress file, simply has no line.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from llmgw import ansible_content
from llmgw.runner import run_playbook
from llmgw.views.sitedata import SiteData
from llmgw.weights.names import cache_name

TASK = "Read the download progress files"


def progress_path(cache_dir: str, name: str) -> str:
    """Where the weights module writes progress (its `progress_path`)."""
    return f"{cache_dir.rstrip('/')}/.{name}.progress"


def parse_progress(text: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("bytes"), int):
        return None
    total = doc.get("total")
    return {"bytes": doc["bytes"], "total": total if isinstance(total, int) and total > 0 else None}


def fetch_downloads(data: SiteData) -> Mapping[tuple[str, str], Mapping[str, Any]]:
    files: dict[str, list[str]] = {}
    wanted: dict[tuple[str, str], str] = {}  # (node, path) -> cache name
    for r in data.state.replicas:
        model = data.catalog.models.get(r.model)
        if r.state != "starting" or model is None:
            continue
        # The entry apply recorded (a whole repository's is named after its pinned commit).
        name = r.cache_name or cache_name(model.source)
        for s in r.shards:
            host = data.inventory.nodes.get(s.node)
            if host is None:
                continue
            path = progress_path(host.cache_dir, name)
            if (s.node, path) not in wanted:
                files.setdefault(s.node, []).append(path)
                wanted[(s.node, path)] = name
    if not files:
        return {}
    nodes = sorted(files)
    result = run_playbook(ansible_content.playbook("downloads.yml"), data.site.inventory, limit=",".join(nodes),
                          extravars={"llmgw_downloads_targets": ",".join(nodes), "llmgw_downloads_files": files},
                          capture=(TASK,), forks=max(1, min(len(nodes), 50)))
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for node in nodes:
        task = result.results.get(node, {}).get(TASK)
        for item in (task.result.get("results", []) if task else []):
            if not isinstance(item, dict) or not item.get("content") or item.get("item") not in files[node]:
                continue
            try:
                text = base64.b64decode(str(item["content"])).decode("utf-8")
            except ValueError:
                continue
            progress = parse_progress(text)
            if progress is not None:
                out[(node, wanted[(node, str(item["item"]))])] = progress
    return out
