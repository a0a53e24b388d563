"""The dashboard's nodes page: the host-stack column and the fleet's versions, as `llmgw nodes` shows them.

The page is asked of a real router's admin listener over the example site (the H200 hosts
gpu-node-09/10 recorded driver, CUDA, rdma-core and fabric manager); one host's driver
version is made hostile, as a host could report it, to show it stays text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmgw.facts.cache import read_facts, write_facts
from tests.support.example_site import example_site
from tests.support.router import site_router

HOSTILE = '<script>alert(1)</script>"\n'


@pytest.fixture
def page(tmp_path: Path) -> Iterator[str]:
    root = example_site(tmp_path)
    facts = read_facts(root / "facts")["gpu-node-01"]
    write_facts(root / "facts", facts.model_copy(update={"gpu_driver": HOSTILE, "cuda_version": "12.8"}))
    with site_router(root, tmp_path) as server:
        resp = httpx.get("http://{}:{}/nodes".format(*server.addresses["admin"]), timeout=60)
        assert resp.status_code == 200, resp.text
        yield resp.text


def row(html: str, node: str) -> str:
    m = re.search(rf'<tr data-node="{re.escape(node)}">(.*?)</tr>', html, re.S)
    assert m, f"no row for {node}"
    return m.group(1)


def cells(html: str, node: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row(html, node), re.S)]


def test_the_stack_column(page: str) -> None:
    header = re.findall(r"<th[^>]*>(.*?)</th>", page.split("</thead>")[0])
    col = header.index("Stack")
    assert header[col - 1] == "Classes" and header[col + 1] == "Memory"
    assert cells(page, "gpu-node-09")[col] == "580.95.05/13.0 rdma 50.0-2 fm active"
    assert cells(page, "gpu-node-10")[col] == "535.183.01/12.2"
    assert cells(page, "new-01")[col] == "-" and cells(page, "cpu-01")[col] == "-"
    assert all(len(cells(page, n)) == len(header) for n in ("gpu-node-09", "new-01"))


def test_the_fleet_versions(page: str) -> None:
    summary = page.split('<table class="versions">')[1].split("</table>")[0]
    driver = re.search(r'<tr data-versions="driver">(.*?)</tr>', summary, re.S)
    assert driver is not None
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", driver.group(1))).strip()
    assert text.startswith("NVIDIA driver 580.95.05: 1 ")
    assert "535.183.01: 1" in text and "unknown: 17" in text
    rdma = re.search(r'<tr data-versions="rdma_core">(.*?)</tr>', summary, re.S)
    assert rdma is not None and "50.0-2: 1" in rdma.group(1) and "unknown: 19" in rdma.group(1)


def test_a_hostile_version_is_text(page: str) -> None:
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;?/12.8" in row(page, "gpu-node-01")
