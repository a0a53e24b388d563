"""Text the parser cannot read: an error naming the line and what was expected, never a
traceback and never a partial map. Truncation is tried at every line of every capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.errors import FabricError
from llmgw.fabric import parse_ibnetdiscover
from tests.support.cli import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ibnetdiscover"
CAPTURES = sorted([*FIXTURES.glob("*.ibnetdiscover*.txt"),
                   *(Path(__file__).resolve().parent / "captures").glob("*.ibnetdiscover*.txt")])
SMALL = (FIXTURES / "a_small_1switch.ibnetdiscover.txt").read_text()
SMALL_P = (FIXTURES / "a_small_1switch.ibnetdiscover-p.txt").read_text()


def fails(text: str) -> FabricError:
    with pytest.raises(FabricError) as info:
        parse_ibnetdiscover(text, source="cap.txt")
    return info.value


def replace_line(text: str, n: int, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[n - 1] = new + "\n"
    return "".join(lines)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_empty_and_foreign_text() -> None:
    e = fails("")
    assert "cap.txt is empty: expected ibnetdiscover output" in e.message
    e = fails("\n\n  \n")
    assert "empty" in e.message
    e = fails("\nHello, world\n")
    assert e.message.startswith("cap.txt, line 2: cannot read 'Hello, world': expected "
                                "ibnetdiscover output")
    assert e.context["line"] == 2
    e = fails("#\n# just a header\n#\n")
    assert "found no node at all" in e.message


def test_malformed_switch_port_line_names_line_and_shape() -> None:
    n = line_of(SMALL, '[3]\t"H-')
    e = fails(replace_line(SMALL, n, '[3]\t"H-b83fd20300a10004"[1] oops'))
    assert e.message.startswith(f"cap.txt, line {n}: cannot read port line")
    assert "expected a line like" in e.message and "4xHDR" in e.message
    assert e.context == {"source": "cap.txt", "line": n}


def test_malformed_adapter_port_line() -> None:
    n = line_of(SMALL, "[1](b83fd20300a10007)")
    e = fails(replace_line(SMALL, n, "[1](b83fd20300a10007) \t\"S-0c42a10300b10000\"[4]"))
    assert e.message.startswith(f"cap.txt, line {n}: cannot read port line")


def test_unknown_speed_is_refused_not_guessed() -> None:
    e = fails(SMALL.replace('"gpu-node-02 mlx5_0" lid 3 4xHDR', '"gpu-node-02 mlx5_0" lid 3 4xGDR'))
    assert e.message.startswith(f"cap.txt, line {line_of(SMALL, 'lid 3 4xHDR')}: cannot read port")


def test_unknown_rate_spelled_like_infiniband_diags_is_kept_but_not_judged() -> None:
    """infiniband-diags prints `???` for a speed it cannot name (hardware newer than it)."""
    text = SMALL.replace('"gpu-node-02 mlx5_0" lid 3 4xHDR', '"gpu-node-02 mlx5_0" lid 3 4x???')
    text = text.replace('# lid 3 lmc 0 "MF0;ib-sw-01:MQM8790/U1" lid 2 4xHDR',
                        '# lid 3 lmc 0 "MF0;ib-sw-01:MQM8790/U1" lid 2 4x???')
    (fabric,) = parse_ibnetdiscover(text)
    odd = [lk for lk in fabric.links if str(lk.rate) == "4x???"]
    assert [lk.a.label for lk in odd] == ["gpu-node-02 mlx5_0 port 1"]
    assert not odd[0].degraded and fabric.degraded_links == ()
    assert fabric.notes == ("1 cable reports a rate ibnetdiscover could not name (?? or ???); "
                            "it is not judged",)


def test_garbage_between_blocks() -> None:
    n = line_of(SMALL, "devid=0x101b")
    e = fails(replace_line(SMALL, n, "devid 0x101b"))
    assert e.message.startswith(f"cap.txt, line {n}: cannot read 'devid 0x101b': expected a "
                                "node block")


def test_port_line_outside_a_node() -> None:
    n = line_of(SMALL, "caguid=0xb83fd20300a10006")
    lines = SMALL.splitlines(keepends=True)
    lines.insert(n - 1, '[9]\t"H-b83fd20300a10000"[1](b83fd20300a10001) \t\t# "x y" lid 1 4xHDR\n')
    e = fails("".join(lines))
    assert e.message.startswith(f"cap.txt, line {n}: found a port line outside any node")


def test_node_line_without_its_guid_line() -> None:
    n = line_of(SMALL, "caguid=0xb83fd20300a10006")
    e = fails(replace_line(SMALL, n, "sysimgguid=0xb83fd20300a10006"))
    assert e.message.startswith(f"cap.txt, line {n + 1}: found a `Ca` line without the caguid= line")


def test_node_name_and_guid_must_agree() -> None:
    e = fails(SMALL.replace("caguid=0xb83fd20300a10006", "caguid=0xb83fd20300a10008"))
    assert "expected the name to carry the same GUID" in e.message


def test_port_beyond_the_ports_a_node_has() -> None:
    text = SMALL.replace('Switch\t40 "S-0c42a10300b10000"', 'Switch\t3 "S-0c42a10300b10000"')
    e = fails(text)
    assert e.message.startswith(f"cap.txt, line {line_of(SMALL, '[4]')}: port 4 of "
                                "'MF0;ib-sw-01:MQM8790/U1': expected a port number from 1 to 3")


def test_cable_whose_ends_disagree() -> None:
    """Switch port 4 claims gpu-node-03's adapter, which says it is on port 3."""
    text = SMALL.replace('[4]\t"H-b83fd20300a10006"[1](b83fd20300a10007)',
                         '[4]\t"H-b83fd20300a10004"[1](b83fd20300a10005)')
    e = fails(text)
    assert e.message.startswith(f"cap.txt, line {line_of(SMALL, '[4]')}: port 4 of "
                                "'MF0;ib-sw-01:MQM8790/U1' connects to H-b83fd20300a10004 port 1, "
                                "but that node (line ")
    assert "says that port goes to S-0c42a10300b10000 port 3" in e.message
    assert "expected the same cable from both ends" in e.message


def test_same_capture_twice_is_refused() -> None:
    e = fails(SMALL + SMALL)
    assert "is listed twice (first on line 10)" in e.message
    assert e.message.startswith("cap.txt, line 52:")


def test_malformed_ports_format_line() -> None:
    n = 3
    e = fails(replace_line(SMALL_P, n, "CA     3  1 0xb83fd20300a10003 4x HDR - SW"))
    assert e.message.startswith(f"cap.txt, line {n}: cannot read 'CA     3  1 0xb83fd20300a10003 4x "
                                "HDR - SW': expected a port line like")


def truncations(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    return ["".join(lines[:k]) for k in range(1, len(lines))
            if "".join(lines[k:]).strip()]  # something real was cut off


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_truncation_is_an_error_with_a_line(path: Path) -> None:
    """Cut a capture after any line: the parser must refuse it, never map what is left."""
    text = path.read_text()
    full = [f.to_json() for f in parse_ibnetdiscover(text, source="cut")]
    for cut in truncations(text):
        if not cut.strip():
            continue
        try:
            got = [f.to_json() for f in parse_ibnetdiscover(cut, source="cut")]
        except FabricError as e:
            assert e.message.startswith("cut, line ") or e.message.startswith("cut is empty")
            continue
        assert got == full, f"a truncated capture parsed: {cut.splitlines()[-1]!r}"


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_cut_inside_the_last_lines_is_an_error(path: Path) -> None:
    """Cut in the middle of a line too (a capture copied while still being written)."""
    text = path.read_text()
    full = [f.to_json() for f in parse_ibnetdiscover(text, source="cut")]
    for k in range(len(text) - 300, len(text)):
        cut = text[:k]
        try:
            got = [f.to_json() for f in parse_ibnetdiscover(cut, source="cut")]
        except FabricError as e:
            assert e.message.startswith("cut, line ")
            continue
        assert got == full and not text[k:].strip(), f"cut at {k} parsed"


def test_cli_shows_the_error_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    n = line_of(SMALL, '[2]\t"H-')
    bad.write_text(replace_line(SMALL, n, "[2] broken"))
    r = run_cli("fabrics", "parse", str(bad))
    assert r.exit_code == 1
    assert f"Error: {bad}, line {n}: cannot read port line '[2] broken'" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert r.stdout == ""
    r = run_cli("fabrics", "parse", str(bad), "--json")
    assert r.exit_code == 1 and r.stdout == ""

    truncated = tmp_path / "cut.txt"
    truncated.write_text("".join(SMALL.splitlines(keepends=True)[:20]))
    r = run_cli("fabrics", "parse", str(truncated))
    assert r.exit_code == 1
    assert "looks truncated" in r.stderr and f"{truncated}, line " in r.stderr

    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"#\n#\n\xff\xfe\n")
    r = run_cli("fabrics", "parse", str(binary))
    assert r.exit_code == 1
    assert f"Error: {binary}, line 3: expected ibnetdiscover text, found bytes that are not UTF-8" \
        in r.stderr

    r = run_cli("fabrics", "parse", str(tmp_path / "missing.txt"))
    assert r.exit_code == 1
    assert "cannot read" in r.stderr and "No such file" in r.stderr
