"""The `weights` module against a real temporary cache: fetch once, remove only what is llmgw's.

Every adversarial case asserts both that nothing outside what it should was removed
and that the refusal is reported with a reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.llmgw.cluster.plugins.modules import weights as mod  # noqa: E402


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    d = tmp_path / "cache"
    d.mkdir()
    return d


def entry(cache: Path, source: str, data: bytes = b"weights") -> Path:
    path = cache / mod.cache_name(source)
    path.write_bytes(data)
    return path


def test_fetch_file_source_once(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "m.gguf"
    src.write_bytes(b"x" * 3_000_000)
    path, changed = mod.fetch(f"file://{src}", str(cache), model_dirs=[str(tmp_path)])
    assert changed and Path(path).read_bytes() == src.read_bytes()
    assert Path(path).name == mod.cache_name(f"file://{src}")
    assert not list(cache.glob("*.part")) and not list(cache.glob(".*.progress"))
    again, changed = mod.fetch(f"file://{src}", str(cache), model_dirs=[str(tmp_path)])
    assert again == path and not changed


def test_a_file_folder_is_copied_whole_once(tmp_path: Path, cache: Path) -> None:
    """A PEFT adapter is a folder (docs/adapters.md): fetched by file://, its files arrive whole,
    not world-readable, and a second fetch copies nothing."""
    src = tmp_path / "models" / "sql-lora"
    (src / "extra").mkdir(parents=True)
    (src / "adapter_config.json").write_text('{"r": 8}')
    (src / "adapter_model.safetensors").write_bytes(b"z" * 2_500_000)
    (src / "extra" / "README.md").write_text("notes")
    path, changed = mod.fetch(f"file://{src}", str(cache), model_dirs=[str(tmp_path / "models")])
    got = Path(path)
    assert changed and got.name == mod.cache_name(f"file://{src}")
    assert {str(p.relative_to(got)): p.read_bytes() for p in got.rglob("*") if p.is_file()} == \
        {str(p.relative_to(src)): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    assert {oct(p.stat().st_mode & 0o777) for p in got.rglob("*") if p.is_file()} == {"0o640"}
    assert not list(cache.glob("*.part")) and not list(cache.glob(".*.progress"))
    assert mod.fetch(f"file://{src}", str(cache), model_dirs=[str(tmp_path / "models")]) == (path, False)


def test_a_file_folder_holding_a_link_is_refused_and_leaves_no_entry(tmp_path: Path, cache: Path) -> None:
    """A link in the folder could lead out of the model dirs the source was checked against."""
    secret = tmp_path / "secret"
    secret.write_text("not weights")
    src = tmp_path / "models" / "sneaky-lora"
    src.mkdir(parents=True)
    (src / "adapter_config.json").write_text('{"r": 8}')
    (src / "adapter_model.safetensors").symlink_to(secret)
    with pytest.raises(mod.FetchError, match="is a link or not a regular file"):
        mod.fetch(f"file://{src}", str(cache), model_dirs=[str(tmp_path / "models")])
    assert not [p for p in cache.iterdir() if mod.is_cache_name(p.name)]


def test_concurrent_fetches_make_one_download(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "m.gguf"
    src.write_bytes(b"y" * 5_000_000)
    opened: list[str] = []
    real_open = open

    def counting_open(file: object, mode: str = "r", *a: object, **k: object) -> object:
        if str(file) == str(src):
            opened.append(mode)
        return real_open(file, mode, *a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", counting_open)
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(mod.fetch(f"file://{src}", str(cache),
                                                                        model_dirs=[str(tmp_path)])[1]))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert opened == ["rb"]


def test_failed_fetch_leaves_no_entry(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(mod.FetchError):
        mod.fetch(f"file://{tmp_path}/missing.gguf", str(cache), model_dirs=[str(tmp_path)])
    assert not [p for p in cache.iterdir() if mod.is_cache_name(p.name)]


def test_removes_an_orphan_and_reports_size(cache: Path) -> None:
    orphan = entry(cache, "hf://a/b/old.gguf", b"12345")
    removed, refused = mod.remove(str(cache), [orphan.name], [])
    assert removed == [{"name": orphan.name, "size_bytes": 5}] and refused == []
    assert not orphan.exists()


def test_check_mode_removes_nothing(cache: Path) -> None:
    orphan = entry(cache, "hf://a/b/old.gguf")
    removed, _ = mod.remove(str(cache), [orphan.name], [], check_mode=True)
    assert removed[0]["name"] == orphan.name and orphan.exists()


@pytest.mark.parametrize("name", ["../outside.gguf", "/etc/passwd", "..", ".", "", "a/../../b",
                                  "0123456789abcdef-x/../../../etc"])
def test_traversal_and_absolute_paths_refused(tmp_path: Path, cache: Path, name: str) -> None:
    outside = tmp_path / "outside.gguf"
    outside.write_bytes(b"operator")
    removed, refused = mod.remove(str(cache), [name], [])
    assert removed == []
    assert refused == [{"name": name, "reason": refused[0]["reason"]}]
    assert "not a llmgw cache name" in refused[0]["reason"]
    assert outside.read_bytes() == b"operator"
    assert Path("/etc/passwd").exists()


def test_operator_file_without_cache_name_is_never_touched(cache: Path) -> None:
    mine = cache / "my-model.gguf"
    mine.write_bytes(b"operator")
    removed, refused = mod.remove(str(cache), ["my-model.gguf"], [])
    assert removed == [] and "llmgw only removes what it fetched" in refused[0]["reason"]
    assert mine.exists()


def test_symlink_out_of_the_cache_refused(tmp_path: Path, cache: Path) -> None:
    target = tmp_path / "precious.gguf"
    target.write_bytes(b"precious")
    link = cache / mod.cache_name("hf://a/b/link.gguf")
    link.symlink_to(target)
    removed, refused = mod.remove(str(cache), [link.name], [])
    assert removed == [] and "symbolic link" in refused[0]["reason"]
    assert target.read_bytes() == b"precious" and link.is_symlink()


def test_cache_dir_reached_through_a_symlink_still_works(tmp_path: Path, cache: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(cache)
    orphan = entry(cache, "hf://a/b/old.gguf")
    removed, refused = mod.remove(str(alias), [orphan.name], [])
    assert [r["name"] for r in removed] == [orphan.name] and refused == []


def test_entry_in_use_by_a_replica_refused(cache: Path) -> None:
    used = entry(cache, "hf://a/b/used.gguf")
    removed, refused = mod.remove(str(cache), [used.name], [used.name])
    assert removed == [] and refused == [{"name": used.name, "reason": "in use by a replica"}]
    assert used.exists()


def test_entry_open_by_a_process_refused(cache: Path) -> None:
    busy = entry(cache, "hf://a/b/busy.gguf", b"z" * 4096)
    # A real process holding the file open (as an engine does), found through /proc.
    with subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1],'rb'); "
                           "print('ok', flush=True); time.sleep(60)", str(busy)], stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ok\n"
            removed, refused = mod.remove(str(cache), [busy.name], [])
        finally:
            proc.kill()
    assert removed == [] and refused[0]["reason"].startswith(f"open by process {proc.pid}")
    assert busy.exists()


def test_same_name_given_twice_is_removed_once(cache: Path) -> None:
    orphan = entry(cache, "hf://a/b/old.gguf")
    removed, refused = mod.remove(str(cache), [orphan.name, orphan.name], [])
    assert [r["name"] for r in removed] == [orphan.name]
    assert refused == [{"name": orphan.name, "reason": "given twice; handled once"}]


def test_part_download_is_not_an_entry(cache: Path) -> None:
    part = cache / (mod.cache_name("hf://a/b/x.gguf") + ".part")
    part.write_bytes(b"half")
    removed, refused = mod.remove(str(cache), [part.name], [])
    assert removed == [] and "not a llmgw cache name" in refused[0]["reason"] and part.exists()


def test_root_as_cache_dir_is_refused(cache: Path) -> None:
    removed, refused = mod.remove("/", ["0123456789abcdef-etc"], [])
    assert removed == [] and "not an absolute, non-root path" in refused[0]["reason"]


def test_module_through_ansible(tmp_path: Path, cache: Path) -> None:
    """The real module, run by ansible on localhost: fetch, then refuse and remove."""
    src = tmp_path / "m.gguf"
    src.write_bytes(b"m" * 1000)
    mine = cache / "operator.gguf"
    mine.write_bytes(b"operator")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"), "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "True",
           "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False"}
    ansible = str(Path(sys.executable).parent / "ansible")

    def run(args: str) -> dict[str, object]:
        out = subprocess.run([ansible, "localhost", "-m", "llmgw.cluster.weights", "-a", args],
                             env=env, capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        result: dict[str, object] = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
        return result

    fetched = run(f"cache_dir={cache} source=file://{src} model_dirs={tmp_path}")
    assert fetched["changed"] is True and fetched["size_bytes"] == 1000
    assert run(f"cache_dir={cache} source=file://{src} model_dirs={tmp_path}")["changed"] is False
    names = json.dumps({"cache_dir": str(cache), "state": "absent", "names": [fetched["name"], "operator.gguf"]})
    gone = run(names)
    assert gone["removed"] == [{"name": fetched["name"], "size_bytes": 1000}]
    assert gone["refused"][0]["name"] == "operator.gguf"  # type: ignore[index]
    assert mine.exists() and not Path(str(fetched["path"])).exists()


DOCUMENTED = ("weights", "weights_progress")


@pytest.fixture(scope="module")
def ansible_doc() -> dict[str, str]:
    """Both modules' pages from one ansible-doc run (each run is seconds of Ansible start-up)."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections")}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"),
                           *(f"llmgw.cluster.{m}" for m in DOCUMENTED)],
                          capture_output=True, text=True, env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pages: dict[str, str] = {}
    for page in proc.stdout.split("> MODULE ")[1:]:
        name = page.split(" (", 1)[0].split("llmgw.cluster.", 1)[1].split("\x1b", 1)[0]
        pages[name] = page
    return pages


@pytest.mark.parametrize("module", DOCUMENTED)
def test_ansible_doc_reads_the_module(module: str, ansible_doc: dict[str, str]) -> None:
    page = ansible_doc[module]
    assert "RETURN VALUES" in page and "EXAMPLES" in page
