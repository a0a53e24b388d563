"""The fabrics a router's dashboard shows, made on the bastion at apply and read from its site
copy (llmgw.views.fabric_copy): the same views as the bastion's, and a file that is not what
apply wrote refused with a sentence naming it."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from llmgw.errors import FabricError
from llmgw.site import Site
from llmgw.views import Runtime, SiteData, SiteDataCache
from llmgw.views.fabric_copy import FABRICS_FILE, CopiedFabrics, FabricCopyError, FabricsCopy, fabric_file
from llmgw.views.nodes import node_detail, nodes_view
from llmgw.views.planned import BASTION, load_site_data
from llmgw.views.sitedata import COPY
from llmgw.views.status import fabrics_list, status_view
from llmgw.web import DashboardSources, dashboard_router, handed_in
from tests.support.example_site import NOW, example_site
from tests.support.site_copy import ship_site_copy_files

H100 = "ib-0c42a10300b20000"  # the example site's H100 fabric (a degraded cable, misaligned rails)
A100 = "ib-0c42a10300c70000"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = example_site(tmp_path_factory.mktemp("fabric-copy"))
    names = ship_site_copy_files(root)
    assert {FABRICS_FILE, fabric_file(H100), fabric_file(A100)} <= set(names)
    return root


def _copy(root: Path) -> SiteData:
    return SiteDataCache(root, COPY).get()


def test_the_router_shows_the_fabrics_as_the_bastion_does(shipped: Path) -> None:
    bastion, router = load_site_data(Site.load(shipped)), _copy(shipped)
    assert not isinstance(bastion.fabrics, CopiedFabrics) and isinstance(router.fabrics, CopiedFabrics)
    assert list(router.fabric_map.glances) == list(bastion.fabric_map.glances) == [H100, A100]
    unknown = Runtime.unknown()
    assert status_view(router, unknown, NOW)["fabrics"] == status_view(bastion, unknown, NOW)["fabrics"]
    assert fabrics_list(router) == fabrics_list(bastion)
    assert [n["fabrics"] for n in nodes_view(router)["nodes"]] == [n["fabrics"] for n in nodes_view(bastion)["nodes"]]
    for fid in (H100, A100):
        assert _json(router.fabrics.topology(fid)) == _json(bastion.fabrics.topology(fid))
        assert _json(router.fabrics.drawing(fid)) == _json(bastion.fabrics.drawing(fid))
    for node in sorted(router.inventory.nodes):
        assert node_detail(router, node) == node_detail(bastion, node)
    d = node_detail(router, "gpu-node-03")
    assert d is not None and [a["degraded"] for a in d["adapters"]] == [False, True, False, False]
    # A fabric by a unique prefix or its switch GUID, as `llmgw fabrics show` finds it.
    assert router.fabrics.find("ib-0c42a10300b2") == router.fabrics.find("0x0c42a10300b20000") == H100
    with pytest.raises(FabricError, match="matches 2 fabrics"):
        router.fabrics.find("ib-0c42")


def _json(doc: object) -> object:
    """As a client reads it (a cable's two ports are a tuple read, a list written)."""
    return json.loads(json.dumps(doc))


def _page(root: Path, path: str, *, loaders: object = COPY) -> tuple[int, str]:
    app = FastAPI()
    app.include_router(dashboard_router(DashboardSources(site=SiteDataCache(root, loaders),  # type: ignore[arg-type]
                                                         runtime=handed_in(Runtime.unknown("no router here")))))
    r = TestClient(app).get(path)
    return r.status_code, r.text


def test_the_fabric_pages_are_the_same_bytes_from_the_copy(shipped: Path) -> None:
    """Rendered from the shipped files or from the fabrics parsed on the bastion, a fabric's
    page, the list and a node's page are one page (but for the time they were written)."""
    for path in (f"/fabrics/{H100}", "/fabrics", "/nodes/gpu-node-03", f"/api/v1/fabrics/{A100}/topology"):
        code, text = _page(shipped, path)
        code_b, text_b = _page(shipped, path, loaders=BASTION)
        assert code == code_b == 200
        assert _timeless(text) == _timeless(text_b), path
    assert 'class="el cable degraded"' in _page(shipped, f"/fabrics/{H100}")[1]


def _timeless(html: str) -> str:
    """The page but the time it was rendered at (base.html's header)."""
    return re.sub(r'<span class="when" title="rendered at">[^<]*</span>', "", html)


def _fresh(tmp_path: Path, shipped: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(shipped, root)
    return root


@pytest.mark.parametrize("text, says", [
    ("not json", "is not a fabrics list apply writes (the file: Invalid JSON"),
    ('{"version": 2}', "is not a fabrics list apply writes (version: Input should be 1)"),
    ('{"version": 1, "fabrics": [], "secrets": 1}', "(secrets: Extra inputs are not permitted)"),
    ('{"version": 1, "fabrics": [{"id": "../../etc/passwd"}]}', "fabrics.0.id: String should match pattern"),
])
def test_a_fabrics_list_apply_did_not_write_is_a_note_and_no_fabric(tmp_path: Path, shipped: Path, text: str,
                                                                    says: str) -> None:
    root = _fresh(tmp_path, shipped)
    (root / FABRICS_FILE).write_text(text)
    data = _copy(root)
    assert data.fabric_map.glances == {} and data.fabrics.rows() == [] and node_detail(data, "gpu-node-03")
    [note] = [n for n in data.notes if "fabrics" in n]
    assert note.startswith(f"fabrics not known here: {root / FABRICS_FILE} ") and says in note
    assert note.endswith("`llmgw apply` replaces it")
    assert data.fabric_notes == (note,)
    code, html = _page(root, "/fabrics")
    assert code == 200 and "fabrics not known here" in html


def test_no_fabrics_list_says_to_apply(tmp_path: Path, shipped: Path) -> None:
    root = _fresh(tmp_path, shipped)
    (root / FABRICS_FILE).unlink()
    assert _copy(root).fabric_notes == (
        f"fabrics not known here: no {root / FABRICS_FILE} (apply maps them on the bastion and ships them with the "
        "dashboard's site copy: run `llmgw apply`, or `llmgw fabrics` on the bastion)",)


def test_a_page_file_not_the_one_listed_is_refused(tmp_path: Path, shipped: Path) -> None:
    root = _fresh(tmp_path, shipped)
    page = root / fabric_file(H100)
    good = page.read_bytes()
    page.write_bytes(good.replace(b'"4xHDR"', b'"4xNDR"', 1))  # changed since apply: its digest differs
    with pytest.raises(FabricCopyError, match=r"its SHA-256 differs: a copy from another apply, or changed since"):
        _copy(root).fabrics.drawing(H100)
    code, html = _page(root, f"/fabrics/{H100}")
    assert code == 503 and "Fabric not readable" in html and "`llmgw apply` ships it again" in html
    assert _page(root, f"/api/v1/fabrics/{H100}/topology")[0] == 503
    assert _page(root, f"/fabrics/{A100}")[0] == 200  # the other fabric's page is its own file
    page.unlink()
    with pytest.raises(FabricCopyError, match=f"fabric {H100} is listed but its page is not here: no {page}"):
        _copy(root).fabrics.topology(H100)
    assert _page(root, "/nodes/gpu-node-03")[0] == 503


def test_a_page_file_of_the_listed_digest_is_still_checked(tmp_path: Path, shipped: Path) -> None:
    """Validated even when the digest matches: the list is input from disk too."""
    root = _fresh(tmp_path, shipped)

    def listing_with(page: bytes, fid: str = H100) -> None:
        (root / fabric_file(H100)).write_bytes(page)
        copy = FabricsCopy.model_validate_json((root / FABRICS_FILE).read_bytes())
        rows = tuple(r.model_copy(update={"sha256": hashlib.sha256(page).hexdigest()}) if r.id == fid else r
                     for r in copy.fabrics)
        (root / FABRICS_FILE).write_text(copy.model_copy(update={"fabrics": rows}).to_json())

    doc = json.loads((root / fabric_file(H100)).read_bytes())
    doc["drawing"]["links"][0]["x1"] = "<script>"
    listing_with(json.dumps(doc).encode())
    says = r"is not a fabric page apply writes \(drawing\.links\.0\.x1\.int: Input should be a valid int"
    with pytest.raises(FabricCopyError, match=says):
        _copy(root).fabrics.drawing(H100)
    doc = json.loads((root / fabric_file(A100)).read_bytes())
    listing_with(json.dumps(doc).encode())
    with pytest.raises(FabricCopyError, match=f"holds fabric {A100}, not {H100}"):
        _copy(root).fabrics.drawing(H100)


def test_a_fabric_file_name_is_made_from_an_id_only() -> None:
    assert fabric_file(H100) == f"fabric-{H100}.json"
    with pytest.raises(ValueError, match="not a fabric id"):
        fabric_file("../hosts")


def test_a_copy_from_before_fabrics_were_shipped_parses_nothing(tmp_path: Path) -> None:
    """A router's copy without fabrics.json (an apply of an older llmgw) shows no fabric and
    says why; it does not fall back to parsing the facts' ibnetdiscover texts."""
    root = example_site(tmp_path, state=False)
    data = _copy(root)
    assert data.fabric_map.glances == {} and fabrics_list(data) == []
    assert data.fabric_notes and data.fabric_notes[0].startswith("fabrics not known here: no ")


def test_a_router_keeps_the_last_pages_read_only(shipped: Path) -> None:
    fabrics = _copy(shipped).fabrics
    assert isinstance(fabrics, CopiedFabrics)
    first = fabrics.page(H100)
    assert fabrics.page(H100) is first  # its page, its topology, its nodes: one read
    fabrics.KEEP_PAGES = 1
    fabrics.page(A100)
    assert fabrics.page(H100) is not first  # read again: only the last is kept
