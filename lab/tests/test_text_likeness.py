"""lab/experiments/text_likeness.py: how alike a run's civilian performances are, and how far the spy's."""

from __future__ import annotations

import doctest
import json

import pytest

from tests.helpers import experiment_module, kept_tiny_run


@pytest.fixture(scope="module")
def text_likeness():
    return experiment_module("text_likeness")


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    """A real run's first iteration kept on disk: heuristic performers, whose civilians write one text."""
    return kept_tiny_run(tmp_path_factory.mktemp("kept"))[1]


def test_the_examples_in_its_docstrings_hold(text_likeness):
    assert doctest.testmod(text_likeness).failed == 0


def test_heuristic_civilians_are_one_text_and_the_spy_is_the_least_alike(text_likeness, kept_run, tmp_path):
    out = tmp_path / "likeness.json"
    assert text_likeness.main([str(kept_run), "--iterations", "1-1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())["ranges"]["1-1"]
    assert result["games"] == 3
    assert result["civilian_likeness"]["mean"] == 1.0 and result["distinct_civilian_texts"]["mean"] == 1.0
    assert 0.0 < result["spy_likeness"]["mean"] < 1.0  # the spy's copy lost spans, so its text differs
    assert result["gap"]["mean"] == pytest.approx(1.0 - result["spy_likeness"]["mean"])
    assert result["least_alike_is_spy"]["mean"] == 1.0


def test_a_range_past_the_kept_buffers_is_one_error_line(text_likeness, kept_run, tmp_path, capsys):
    out = tmp_path / "likeness.json"
    assert text_likeness.main([str(kept_run), "--iterations", "1-2", "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the buffer loader's progress lines
    assert last.startswith("error: ") and "iteration 2" in last and not out.exists()


def test_a_game_whose_civilians_differ_as_much_as_the_spy_has_no_gap(text_likeness):
    m = text_likeness.game_likeness({0: "ab", 1: "cd", 2: "ef", 3: "gh"}, spy=2)
    assert m["civilian_likeness"] == m["spy_likeness"] == m["gap"] == 0.0
    assert m["distinct_civilian_texts"] == 3.0
    assert m["least_alike_is_spy"] == pytest.approx(0.25)  # a four-way tie shares the point
