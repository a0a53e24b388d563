"""tests/conftest.py leaves uncollected the modules a `-m` expression cannot select
(tests/support/selection.py). What it must never do: skip a module holding a test the
expression selects. And the convention that makes `make unit` cheap: a lab module says so
at its top, so no unit run imports it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SLOW
from tests.support.selection import could_select, module_markers, unselectable

TESTS = Path(__file__).resolve().parents[1]
UNIT = "not lab and not engine and not postgres and not browser and not root and not slow"  # the Makefile's


@pytest.mark.parametrize(("expr", "present", "want"), [
    ("not lab", {"lab"}, False),
    ("not lab", {"engine"}, True),
    ("lab", {"engine"}, True),  # the test may carry lab too
    (UNIT, {"lab", "engine"}, False),
    (UNIT, {"slow"}, False),
    (UNIT, {"xdist_group"}, True),
    ("not lab or engine", {"lab"}, True),  # a test marked engine as well is selected
    ("not (lab and slow)", {"lab"}, True),
    ("not (lab and slow)", {"lab", "slow"}, False),
    ("not unproven and lab", {"lab", "engine"}, True),
    ("not unproven and lab", {"lab", "unproven"}, False),
    ("not lab(x=1)", {"lab"}, True),  # a marker's arguments are never decided from its name
    ("lab(x=1)", {"engine"}, True),
])
def test_a_module_is_skipped_only_when_no_test_in_it_can_match(expr: str, present: set[str], want: bool) -> None:
    assert could_select(expr, frozenset(present)) is want


@pytest.mark.parametrize(("source", "want"), [
    ("import pytest\npytestmark = pytest.mark.lab\n", {"lab"}),
    ("import pytest\npytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.xdist_group('g')]\n",
     {"lab", "engine"}),
    ("import pytest\npytestmark = (pytest.mark.postgres,)\n", {"postgres"}),
    ("import pytest\n", set()),
    # Bound twice, or in a form read only by running it: nothing is known, the module is collected.
    ("import pytest\npytestmark = pytest.mark.lab\npytestmark = []\n", set()),
    ("import pytest\npytestmark = pytest.mark.lab\ndel pytestmark\n", set()),
    ("import pytest\nif True:\n    pytestmark = pytest.mark.lab\n", set()),
    ("import pytest\nMARKS = [pytest.mark.lab]\npytestmark = MARKS\n", set()),
    ("from pytest import mark\npytestmark = mark.lab\n", set()),
    ("import pytest\npytestmark = pytest.mark.lab(reason='x')\n", set()),
])
def test_module_markers_are_read_only_from_a_plain_pytestmark(source: str, want: set[str]) -> None:
    assert module_markers(source) == want


def test_slow_paths_and_module_marks_together(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text("import pytest\npytestmark = pytest.mark.engine\n")
    assert unselectable(module, "tests/a/test_x.py", "not engine", ())
    assert not unselectable(module, "tests/a/test_x.py", "engine", ())
    assert unselectable(module, "tests/a/test_x.py", "not slow", ("tests/a/test_x.py",))
    assert not unselectable(module, "tests/a/test_x.py", "not slow", ("tests/a/test_x.py::test_one",))
    assert unselectable(tmp_path, "tests/a", "not slow", ("tests/a/",))
    assert not unselectable(tmp_path, "tests/ab", "not slow", ("tests/a/",))
    plain = tmp_path / "test_y.py"
    plain.write_text("import pytest\n\n@pytest.mark.engine\ndef test_y() -> None: ...\n")
    assert not unselectable(plain, "tests/a/test_y.py", "not engine", ())  # marks on tests are not read


def test_every_lab_module_says_lab_at_its_top() -> None:
    # `make unit` never imports a lab module (its lab, engine and browser helpers) only because of this.
    lab_modules = sorted(TESTS.rglob("*_lab.py"))
    assert lab_modules
    missing = [str(p.relative_to(TESTS)) for p in lab_modules
               if "lab" not in module_markers(p.read_text(encoding="utf-8"))]
    assert not missing, f"a module named *_lab.py without `pytestmark = pytest.mark.lab`: {missing}"
    skipped = [p for p in lab_modules if unselectable(p, str(p.relative_to(TESTS.parent)), UNIT, SLOW)]
    assert skipped == lab_modules
