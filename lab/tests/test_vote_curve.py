"""lab/experiments/vote_curve.py: a run's training votes and every rule, window by window, from its kept buffers."""

from __future__ import annotations

import json
import math

import pytest

import spy_env
from agents import HeuristicAgent
from agents.rules import RULES, played_shares
from agents.scripted import SoftHeuristicAgent
from spy_env.runner import rollout
from tests.helpers import experiment_module


@pytest.fixture(scope="module")
def vote_curve():
    return experiment_module("vote_curve")


def _run(folder, iterations: int, first: int = 0):
    """A run folder whose buffers are real games: soft heuristic voters (they record their distributions) and
    plain heuristic performers in every seat, one buffer an iteration, as the trainer keeps them."""
    config = spy_env.GameConfig(n_players=5, degrade="mask_spans", max_document_chars=600)
    played = []
    for i in range(first, first + iterations):
        policies = [SoftHeuristicAgent(seed=10 * i + s) if s % 2 else HeuristicAgent(seed=10 * i + s) for s in range(5)]
        buffer = rollout(config, policies, 2, seed=100 + i, games_per_document=2, replay_setup=True)
        buffer.save(folder / "buffers" / f"iter_{i:05d}.parquet")
        played.append(buffer.rows)
    return played


def test_windows_score_the_votes_cast_their_distributions_and_the_rules(vote_curve, tmp_path):
    played = _run(tmp_path, 5)
    out = tmp_path / "curve.json"
    assert vote_curve.main([str(tmp_path), "--window", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    assert result["iterations"] == 5 and [w["iterations"] for w in result["windows"]] == [[1, 2], [3, 4], [5, 5]]
    per_iteration = [vote_curve.iteration_scores(rows) for rows in played]
    votes = [s["votes"] for s in per_iteration]
    assert votes == [sum(map(_first_civilian_vote, rows)) for rows in played] and min(votes) > 0
    assert [w["votes"] for w in result["windows"]] == [sum(votes[:2]), sum(votes[:4]), sum(votes)]
    for w, part in zip(result["windows"], ([0, 1], [2, 3], [4]), strict=True):
        # the model's sampled accuracy, counted here from the rows themselves
        hits = [sum(r["vote"] == r["spy_seat"] for r in played[i] if _first_civilian_vote(r)) / votes[i] for i in part]
        assert w["model_sampled"]["mean"] == pytest.approx(sum(hits) / len(hits))
        assert w["model_sampled"]["n"] == len(part)
        for name, rule in RULES.items():
            shares = [sum(s) / len(s) for i in part if (s := played_shares(played[i], rule))]
            assert w[name]["mean"] == pytest.approx(sum(shares) / len(shares))
        assert 0.0 <= w["model_expected"]["mean"] <= 1.0
    # the soft voters' probability on the spy, from what they recorded; the plain heuristic recorded none
    expected = [
        r["vote_probs"][r["spy_seat"]]
        for r in played[0] + played[1]
        if _first_civilian_vote(r) and len(r["vote_probs"])
    ]
    assert expected and len(expected) < votes[0] + votes[1]
    per_game = [per_iteration[i]["model_expected"] for i in (0, 1)]
    assert result["windows"][0]["model_expected"]["mean"] == pytest.approx(sum(per_game) / 2)
    change = result["change"]["model_sampled"]
    assert change["mean"] == pytest.approx(
        result["windows"][2]["model_sampled"]["mean"] - result["windows"][0]["model_sampled"]["mean"]
    )
    assert change["low"] <= change["mean"] <= change["high"]


def _first_civilian_vote(row) -> bool:
    return row["stage"] == "vote" and row["round"] == 0 and row["role"] == "civilian"


def test_a_difference_of_two_samples_and_of_nothing(vote_curve):
    d = vote_curve.difference([1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0])
    assert d.mean == pytest.approx(0.5) and -1.0 <= d.low < 0.5 < d.high <= 1.0
    assert math.isnan(vote_curve.difference([], [1.0]).mean)


def test_a_run_without_buffers_or_with_a_gap_is_one_error_line(vote_curve, tmp_path, capsys):
    assert vote_curve.main([str(tmp_path), "--out", str(tmp_path / "c.json")]) == 2
    assert "keep_buffers" in capsys.readouterr().err
    _run(tmp_path, 1)
    _run(tmp_path, 1, first=2)
    assert vote_curve.main([str(tmp_path), "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the buffers' own progress bars
    assert err.startswith("error: ") and "misses iterations: it holds 0..2, 2 files" in err
    _run(tmp_path / "whole", 1)
    assert vote_curve.main([str(tmp_path / "whole"), "--window", "0", "--out", str(tmp_path / "c.json")]) == 2
    assert "--window and --iterations must be >= 1" in capsys.readouterr().err
    assert vote_curve.main([str(tmp_path / "whole"), "--iterations", "2", "--out", str(tmp_path / "c.json")]) == 2
    assert "holds 1 iterations' buffers" in capsys.readouterr().err


def test_iterations_reads_what_a_continued_run_held_at_that_point(vote_curve, tmp_path):
    played = _run(tmp_path, 3)
    assert (
        vote_curve.main([str(tmp_path), "--window", "1", "--iterations", "2", "--out", str(tmp_path / "a.json")]) == 0
    )
    _run(tmp_path / "first_two", 2)  # the same games, as a run that stopped there holds them
    assert vote_curve.main([str(tmp_path / "first_two"), "--window", "1", "--out", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert a["iterations"] == 2 and a["windows"] == b["windows"] and a["change"] == b["change"]
    assert len(played) == 3
