"""The routers' dashboard copy of the site, packed into one archive (llmgw.apply.dashboard_site)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from llmgw.apply import hosts_for
from llmgw.apply.dashboard_site import DashboardSite
from llmgw.errors import RunnerError
from llmgw.fleetfile import FLEET_FILE
from llmgw.inventory import load_inventory
from llmgw.site import Site
from llmgw.state import read_state, write_state
from llmgw.views import SiteDataCache
from llmgw.views.fabric_copy import FABRICS_FILE, fabric_file
from llmgw.views.models import placement_failures
from llmgw.views.placement import PLACEMENT_FILE
from llmgw.views.planned import load_site_data
from llmgw.views.status import fabrics_list
from tests.support.example_site import REPO, example_site


def _site(root: Path) -> DashboardSite:
    (root / "catalog" / "team").mkdir(parents=True)
    (root / "catalog" / "models.yaml").write_text("models: []\n")
    (root / "catalog" / "team" / "more.yaml").write_text("models: []  # team\n")
    (root / "facts").mkdir()
    for i in range(3):
        (root / "facts" / f"node-{i}.json").write_text(f'{{"host": "node-{i}"}}\n')
    (root / "hosts.yml").write_text("all: {}\n")
    return DashboardSite(root / "catalog", root / "facts", root / "hosts.yml")


def test_the_archive_holds_the_catalog_facts_and_inventory_as_gnu_tar_unpacks_them(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    bundle = site.pack(tmp_path / "site.tar")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(bundle), "-C", str(out)], check=True)  # what unarchive runs on a router
    found = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert found == ["catalog/models.yaml", "catalog/team/more.yaml", "facts/node-0.json", "facts/node-1.json",
                     "facts/node-2.json", "hosts.yml"]
    assert (out / "catalog" / "team" / "more.yaml").read_text() == "models: []  # team\n"


def test_the_same_files_give_the_same_bytes_whatever_their_times(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    first = site.pack(tmp_path / "a.tar").read_bytes()
    os.utime(tmp_path / "site" / "facts" / "node-1.json", (1, 1))
    assert site.pack(tmp_path / "b.tar").read_bytes() == first  # an unchanged site is not sent again
    (tmp_path / "site" / "facts" / "node-1.json").write_text('{"host": "node-1", "cpus": 8}\n')
    assert site.pack(tmp_path / "c.tar").read_bytes() != first


def test_members_are_plain_files_and_folders_owned_by_root_with_fixed_modes(tmp_path: Path) -> None:
    with tarfile.open(_site(tmp_path / "site").pack(tmp_path / "site.tar")) as tar:
        members = tar.getmembers()
    assert {m.type for m in members} == {tarfile.REGTYPE, tarfile.DIRTYPE}
    assert {(m.uid, m.gid, m.mtime) for m in members} == {(0, 0, 0)}
    assert {m.mode for m in members if m.isfile()} == {0o640}
    assert {m.mode for m in members if m.isdir()} == {0o750}
    names = [m.name for m in members]
    assert names.index("catalog/team") < names.index("catalog/team/more.yaml")  # a folder before its files


def test_a_link_inside_the_folder_is_followed_and_one_leaving_it_is_refused(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    (tmp_path / "site" / "catalog" / "alias.yaml").symlink_to("models.yaml")
    with tarfile.open(site.pack(tmp_path / "site.tar")) as tar:
        alias = tar.getmember("catalog/alias.yaml")
        assert alias.isfile()
        assert tar.extractfile(alias).read() == b"models: []\n"  # type: ignore[union-attr]
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    (tmp_path / "site" / "facts" / "leak.json").symlink_to(secret)
    with pytest.raises(RunnerError, match=r"leak\.json is a link to .*secret\.txt, outside") as err:
        site.pack(tmp_path / "site2.tar")
    assert "SECRET" not in str(err.value)


def test_a_site_without_facts_or_inventory_packs_the_catalog_alone(tmp_path: Path) -> None:
    (tmp_path / "catalog").mkdir()
    (tmp_path / "catalog" / "m.yaml").write_text("models: []\n")
    site = DashboardSite(tmp_path / "catalog", tmp_path / "facts", tmp_path / "hosts.yml")
    with tarfile.open(site.pack(tmp_path / "site.tar")) as tar:
        assert tar.getnames() == ["catalog", "catalog/m.yaml"]


def test_a_folder_inventory_reaches_the_dashboard_as_one_file_of_its_hosts(tmp_path: Path) -> None:
    # Before, only a single-file inventory was packed: a folder with group_vars left the
    # dashboard without hosts. Now the inventory as llmgw reads it is written, merged.
    (tmp_path / "catalog").mkdir()
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  children:\n    llmgw_nodes:\n      hosts:\n        gpu-1:\n"
                                   "          llmgw_node_state: draining\n")
    (inv / "group_vars" / "llmgw_nodes.yml").write_text("llmgw_labels: {tier: h100}\n"
                                                         "ansible_become_password: hunter2\n")
    site = DashboardSite(tmp_path / "catalog", tmp_path / "facts", inv)
    with tarfile.open(site.pack(tmp_path / "site.tar")) as tar:
        member = tar.extractfile("hosts.yml")
        assert member is not None
        text = member.read().decode()
    (tmp_path / "copy.yml").write_text(text)
    copy = load_inventory(tmp_path / "copy.yml")
    assert sorted(copy.nodes) == ["gpu-1"]
    assert (copy.nodes["gpu-1"].node_state, copy.nodes["gpu-1"].labels) == ("draining", {"tier": "h100"})
    assert "hunter2" not in text and "become" not in text


def _router_site(tmp_path: Path, root: Path) -> Path:
    """The example site's archive unpacked as a router's `unarchive` does, beside the state
    apply delivers, with the llmgw.yaml the router role writes (templates/site.yaml.j2)."""
    bundle = hosts_for(Site.load(root)).dashboard_site.pack(tmp_path / "site.tar")  # type: ignore[union-attr]
    home = tmp_path / "router-home"
    (home / "site").mkdir(parents=True)
    subprocess.run(["tar", "-xf", str(bundle), "-C", str(home / "site")], check=True)
    shutil.copy(Site.load(root).state_file, home / "state.json")
    (home / "site" / "llmgw.yaml").write_text((REPO / "roles" / "llmgw_router" / "templates" / "site.yaml.j2")
                                              .read_text().split("{%")[0].replace("# {{ ansible_managed }}\n", ""))
    return home / "site"


def test_the_router_shows_the_placement_apply_planned_on_the_bastion(tmp_path: Path) -> None:
    """What cannot be placed is planned at apply and shipped: the router's dashboard (which
    never imports the planner) lists the same failures as `llmgw status` on the bastion."""
    root = example_site(tmp_path)
    copy = _router_site(tmp_path, root)
    bastion = placement_failures(load_site_data(Site.load(root)))
    assert "llama-4-maverick" in [f["model"] for f in bastion]  # fits nowhere in the example
    router = SiteDataCache(copy).get()
    assert placement_failures(router) == bastion
    assert router.placement.notes == ()
    assert sorted(p.name for p in copy.iterdir()) == [
        "catalog", fabric_file("ib-0c42a10300b20000"), fabric_file("ib-0c42a10300c70000"), FABRICS_FILE, "facts",
        FLEET_FILE, "hosts.yml", "llmgw.yaml", PLACEMENT_FILE]
    # The fabrics too: mapped on the bastion, shown by the router as the bastion shows them.
    assert fabrics_list(router) == fabrics_list(load_site_data(Site.load(root)))


def test_a_new_serial_with_the_same_placement_packs_the_same_archive(tmp_path: Path) -> None:
    """An apply that moved the state on but left the same models unplaceable sends no archive."""
    root = example_site(tmp_path)
    site = Site.load(root)
    dashboard = hosts_for(site).dashboard_site
    assert dashboard is not None
    first = dashboard.pack(tmp_path / "a.tar").read_bytes()
    state = read_state(site.state_file)
    write_state(site.state_file, state)  # a new serial, the same replicas
    assert read_state(site.state_file).serial == state.serial + 1
    assert dashboard.pack(tmp_path / "b.tar").read_bytes() == first


def test_a_router_without_a_placement_says_it_does_not_know(tmp_path: Path) -> None:
    copy = _router_site(tmp_path, example_site(tmp_path))
    (copy / PLACEMENT_FILE).unlink()
    data = SiteDataCache(copy).get()
    assert data.placement.unplaced == ()
    assert data.placement.notes == (
        f"what cannot be placed is not known here: no {copy / PLACEMENT_FILE} (apply plans it on the bastion "
        "and ships it with the dashboard's site copy: run `llmgw apply`, or `llmgw status` on the bastion)",)
    (copy / PLACEMENT_FILE).write_text('{"version": 2, "unplaced": []}')
    data = SiteDataCache(copy).get()
    assert data.placement.notes == (
        f"what cannot be placed is not known here: {copy / PLACEMENT_FILE} is not a placement apply writes "
        "(version: Input should be 1); `llmgw apply` replaces it",)
