"""docs/FIDELITY.md and docs/SAFETY.md name only functions and tests that exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIDELITY = (ROOT / "docs" / "FIDELITY.md").read_text(encoding="utf-8")
ROWS = [line for line in FIDELITY.splitlines() if line.startswith("| ") and not line.startswith("| Element")]


def resolve(dotted: str):
    """Import the longest module prefix of ``dotted``, then walk the attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def test_the_table_has_rows_with_a_function_and_a_test_each():
    assert len(ROWS) >= 20
    for row in ROWS:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert re.fullmatch(r"`[\w.]+`", cells[2]), row
        assert re.fullmatch(r"`tests/\w+\.py::\w+`", cells[3]), row


@pytest.mark.parametrize("dotted", sorted(set(re.findall(r"`((?:spy_env|trainers|agents|spyrl)\.[\w.]+)`", FIDELITY))))
def test_named_functions_exist(dotted):
    assert callable(resolve(dotted))


@pytest.mark.parametrize("path,name", sorted(set(re.findall(r"`(tests/\w+\.py)::(\w+)`", FIDELITY))))
def test_named_tests_exist(path, name):
    assert re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M), f"{path}::{name}"


def test_named_files_exist():
    for path in re.findall(r"`((?:benchmarks|examples|docs)/[\w/.]+)`", FIDELITY):
        assert (ROOT / path).exists(), path


SAFETY = (ROOT / "docs" / "SAFETY.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("path,name", sorted(set(re.findall(r"`(tests/\w+\.py)::(\w+)`", SAFETY))))
def test_the_tests_docs_safety_names_exist(path, name):
    """docs/SAFETY.md lists each guarantee with the test that holds it: that test exists."""
    assert re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M), f"{path}::{name}"


def test_every_guarantee_line_of_docs_safety_names_a_test():
    guarantees = [line for line in SAFETY.splitlines() if line.startswith("- ")]
    assert len(guarantees) >= 15
    assert all(re.search(r" — `tests/\w+\.py::\w+`", line) for line in guarantees), guarantees
