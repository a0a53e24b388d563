"""The real weights module fetching whole Hugging Face repositories with huggingface_hub from the
olah mirror, and the Sources rules (#13): where the token goes, what file:// may read, who may
read the cache. Real filesystem, real HTTP servers on 127.0.0.0/8."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.support.hf_mirror import HfMirror
from tests.support.recording_server import recording_server

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.llmgw.cluster.plugins.modules import weights as mod  # noqa: E402
from ansible_collections.llmgw.cluster.plugins.modules import weights_progress as progress  # noqa: E402

TOKEN = "hf_secret_token_for_tests"


def digests(folder: Path, names: list[str]) -> dict[str, str]:
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}


def modes(root: Path) -> set[tuple[str, int]]:
    out = {("dir" if root.is_dir() else "file", stat.S_IMODE(root.stat().st_mode))}
    for p in root.rglob("*"):
        out.add(("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode)))
    return out


def test_whole_repository_fetched_byte_for_byte(hf_mirror: HfMirror, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    source = f"hf://{hf_mirror.repo}@{hf_mirror.commit}"
    path, changed = mod.fetch(source, str(cache), hf_endpoint=hf_mirror.url, expected_bytes=123)
    entry = Path(path)
    assert changed and entry.name == mod.cache_name(source) and entry.name.endswith("-tiny-llama")
    names = hf_mirror.file_names()
    assert sorted(p.name for p in entry.iterdir()) == names  # the snapshot's files, no resume metadata
    assert digests(entry, names) == digests(hf_mirror.files, names)
    # Not world-readable: 0750 folders, 0640 files.
    assert modes(entry) == {("dir", 0o750), ("file", 0o640)}
    assert stat.S_IMODE(cache.stat().st_mode) == 0o750
    assert not list(cache.glob("*.part")) and not list(cache.glob(".*.progress"))
    assert progress.read_progress(str(cache), entry.name)["state"] == "done"
    again, changed = mod.fetch(source, str(cache), hf_endpoint=hf_mirror.url)
    assert again == path and not changed


def test_include_and_exclude_select_files(hf_mirror: HfMirror, tmp_path: Path) -> None:
    source = f"hf://{hf_mirror.repo}@{hf_mirror.commit}?include=*.json,*.md&exclude=generation_config.json"
    path, _ = mod.fetch(source, str(tmp_path / "c"), hf_endpoint=hf_mirror.url)
    want = sorted(n for n in hf_mirror.file_names()
                  if (n.endswith((".json", ".md"))) and n != "generation_config.json")
    assert sorted(p.name for p in Path(path).iterdir()) == want and "model.safetensors" not in want


def test_a_moving_revision_is_refused_on_hosts(hf_mirror: HfMirror, tmp_path: Path) -> None:
    with pytest.raises(mod.FetchError, match="pinned to a commit"):
        mod.fetch(f"hf://{hf_mirror.repo}@main", str(tmp_path / "c"), hf_endpoint=hf_mirror.url)
    failed = progress.read_progress(str(tmp_path / "c"), mod.cache_name(f"hf://{hf_mirror.repo}@main"))
    assert failed["state"] == "failed" and failed["finished"] and "pinned" in failed["error"]


def test_token_reaches_the_mirror_and_not_the_host_it_redirects_to(hf_mirror: HfMirror, tmp_path: Path) -> None:
    """The endpoint (127.0.0.1) redirects the weights file to another host (127.0.0.2), as the Hub
    does to its CDN: huggingface_hub follows, the token stays behind."""
    with recording_server("127.0.0.2", upstream=hf_mirror.url) as other, \
            recording_server("127.0.0.1", upstream=hf_mirror.url,
                             redirect=lambda p: (other.url + p) if p.endswith("/model.safetensors") and "/resolve/" in p
                             else None) as endpoint:
        source = f"hf://{hf_mirror.repo}@{hf_mirror.commit}"
        path, _ = mod.fetch(source, str(tmp_path / "c"), hf_endpoint=endpoint.url, hf_token=TOKEN,
                            allow_http=True)
    assert digests(Path(path), ["model.safetensors"]) == digests(hf_mirror.files, ["model.safetensors"])
    assert endpoint.auths() == {f"Bearer {TOKEN}"}
    assert other.seen and other.auths() == {None}


def test_token_not_sent_over_plain_http_unless_the_site_allows_it(hf_mirror: HfMirror, tmp_path: Path) -> None:
    with recording_server("127.0.0.1", upstream=hf_mirror.url) as endpoint:
        with pytest.raises(mod.FetchError, match="only over https"):
            mod.fetch(f"hf://{hf_mirror.repo}@{hf_mirror.commit}", str(tmp_path / "c"), hf_endpoint=endpoint.url,
                      hf_token=TOKEN)
        with pytest.raises(mod.FetchError, match="only over https"):
            mod.fetch(f"hf://{hf_mirror.repo}/config.json", str(tmp_path / "c"), hf_endpoint=endpoint.url,
                      hf_token=TOKEN)
    assert endpoint.seen == []


def test_file_source_token_stays_off_other_hosts_and_redirects(tmp_path: Path) -> None:
    """A single-file source: the token goes to the endpoint's origin; not to a URL on another host,
    not across the endpoint's redirect to another host."""
    data = os.urandom(50_000)
    with recording_server("127.0.0.2", body=data) as other, \
            recording_server("127.0.0.1", redirect=lambda p: other.url + p) as endpoint:
        path, _ = mod.fetch("hf://org/repo/m.gguf", str(tmp_path / "c"), hf_endpoint=endpoint.url,
                            hf_token=TOKEN, allow_http=True)
        assert Path(path).read_bytes() == data
        assert endpoint.auths() == {f"Bearer {TOKEN}"} and other.auths() == {None}
        asked = len(other.seen)
        # a source on another host is not fetched at all (tests/security/test_weights_ssrf.py): no token, no request
        with pytest.raises(mod.FetchError, match="only from the site's endpoint"):
            mod.fetch(f"{other.url}/direct.gguf", str(tmp_path / "c"), hf_endpoint=endpoint.url, hf_token=TOKEN,
                      allow_http=True)
        assert len(other.seen) == asked and other.auths() == {None}


def test_file_sources_only_under_model_dirs(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "ok.gguf").write_bytes(b"GGUF ok")
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:secret")
    (models / "link.gguf").symlink_to(secret)
    cache = tmp_path / "cache"
    for src in (f"file://{secret}", "file:///etc/shadow", f"file://{models}/../shadow", f"file://{models}/link.gguf"):
        with pytest.raises(mod.FetchError, match="llmgw_model_dirs"):
            mod.fetch(src, str(cache), model_dirs=[str(models)])
    with pytest.raises(mod.FetchError, match="none set"):
        mod.fetch(f"file://{models}/ok.gguf", str(cache))
    path, _ = mod.fetch(f"file://{models}/ok.gguf", str(cache), model_dirs=[str(models)])
    assert Path(path).read_bytes() == b"GGUF ok" and stat.S_IMODE(Path(path).stat().st_mode) == 0o640
    assert not [p for p in cache.iterdir() if p.is_file() and p.read_bytes() == b"root:secret"]


def test_progress_states(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    cache.mkdir()
    name = mod.cache_name("hf://a/b@" + "0" * 40)
    prog = cache / f".{name}.progress"
    assert progress.read_progress(str(cache), name) == {"state": "queued", "finished": False}
    prog.write_text('{"state": "queued"}')
    os.utime(prog, (0, 0))  # queued since 1970: the download never started
    gone = progress.read_progress(str(cache), name, queued_timeout=300)
    assert gone["state"] == "failed" and "did not start" in gone["error"]
    prog.write_text(json.dumps({"state": "running", "pid": 999999, "bytes": 10, "total": 20}))
    died = progress.read_progress(str(cache), name)
    assert died["state"] == "failed" and "process (pid 999999) is gone" in died["error"] and died["bytes"] == 10


def test_progress_total_is_asked_of_the_endpoint(hf_mirror: HfMirror) -> None:
    """Without a size from the control side, the host asks the endpoint (olah lists no sizes)."""
    names = hf_mirror.file_names()
    want = sum((hf_mirror.files / n).stat().st_size for n in names)
    assert mod.repo_total(hf_mirror.repo, hf_mirror.commit, [], [], hf_mirror.url, None, 30) == want
    jsons = sum((hf_mirror.files / n).stat().st_size for n in names if n.endswith(".json"))
    assert mod.repo_total(hf_mirror.repo, hf_mirror.commit, ["*.json"], [], hf_mirror.url, None, 30) == jsons
