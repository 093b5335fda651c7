"""lab/experiments/spy_numbers.py: whether a run's own votes find a spy that names numbers more often, from its kept
games (the feature spy-v1's detectors reward)."""

from __future__ import annotations

import doctest
import json

import pytest

from agents.scripted import numbers_in
from spy_env.buffer import EpisodeBuffer
from tests.helpers import experiment_module, kept_tiny_run


@pytest.fixture(scope="module")
def spy_numbers():
    return experiment_module("spy_numbers")


@pytest.fixture(scope="module")
def kept_runs(tmp_path_factory):
    """Two real runs' first iterations kept on disk (heuristic performers, a tiny model's votes)."""
    return [kept_tiny_run(tmp_path_factory.mktemp(f"kept{seed}"), seed=seed)[1] for seed in (0, 1)]


def test_the_examples_in_its_docstrings_hold(spy_numbers):
    assert doctest.testmod(spy_numbers).failed == 0


def test_each_game_is_read_from_the_spys_performance_row(spy_numbers, kept_runs, tmp_path):
    run = kept_runs[0]
    rows = EpisodeBuffer.load(run / "buffers" / "iter_00000.parquet").rows
    spies = [r for r in rows if r["stage"] == "perform" and r["role"] == "spy" and r["round"] == 0]
    games = spy_numbers.spy_games(run, 1, 1)
    assert len(games) == len(spies) == 3
    assert [g["votes"] for g in games] == [float(r["votes_received"]) for r in spies]
    assert [g["spy_numbers"] for g in games] == [float(bool(numbers_in(r["completion"]))) for r in spies]
    assert all(len(g["civilian_numbers"]) == 4 for g in games)
    for game, spy in zip(games, spies, strict=True):  # the voters' recorded probabilities on the spy's seat, summed
        votes = [r for r in rows if r["stage"] == "vote" and r["round"] == 0 and r["game_id"] == spy["game_id"]]
        assert len(votes) == 5 and all(len(r["vote_probs"]) for r in votes)
        assert game["expected_votes"] == pytest.approx(sum(r["vote_probs"][spy["spy_seat"]] for r in votes))
        assert 0.0 <= game["expected_votes"] <= 4.0
    out = tmp_path / "numbers.json"
    assert spy_numbers.main([*map(str, kept_runs), "--iterations", "1-1", "--out", str(out)]) == 0
    result = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert list(result) == [*map(str, kept_runs), "all runs"]
    assert result["all runs"]["1-1"]["games"] == 6
    assert result[str(run)]["1-1"]["spy_numbers"]["mean"] == pytest.approx(sum(g["spy_numbers"] for g in games) / 3)


def test_the_votes_difference_is_with_numbers_minus_without(spy_numbers):
    games = [
        {"spy_numbers": 1.0, "civilian_numbers": [1.0, 0.0], "votes": 3.0, "expected_votes": 2.5},
        {"spy_numbers": 1.0, "civilian_numbers": [1.0, 1.0], "votes": 2.0, "expected_votes": 1.5},
        {"spy_numbers": 0.0, "civilian_numbers": [0.0, 0.0], "votes": 0.0, "expected_votes": 0.5},
    ]
    row = spy_numbers.numbers(games)
    assert row["spy_numbers"]["mean"] == pytest.approx(2 / 3) and row["civilian_numbers"]["mean"] == pytest.approx(0.5)
    assert row["votes_with_numbers"]["mean"] == 2.5 and row["votes_without_numbers"]["mean"] == 0.0
    assert row["votes_difference"]["mean"] == 2.5 and row["votes_difference"]["low"] >= 2.0
    assert row["expected_with_numbers"]["mean"] == 2.0 and row["expected_without_numbers"]["mean"] == 0.5
    assert row["expected_difference"]["mean"] == 1.5 and row["expected_difference"]["high"] <= 2.0
    empty = spy_numbers.numbers(games[:2])["votes_difference"]  # no game without numbers: no difference
    assert empty["mean"] != empty["mean"]  # NaN


def test_a_range_past_the_kept_buffers_is_one_error_line(spy_numbers, kept_runs, tmp_path, capsys):
    out = tmp_path / "numbers.json"
    assert spy_numbers.main([str(kept_runs[0]), "--iterations", "1-2", "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "iteration 2" in last and not out.exists()
