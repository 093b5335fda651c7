"""lab/experiments/seat_probe.py: a model's votes on a run's kept games, with the texts moved between seats."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spy_env.buffer import EpisodeBuffer
from spy_env.env import GameHost
from tests.helpers import experiment_module, kept_tiny_run
from trainers import SpyRLConfig


@pytest.fixture(scope="module")
def seat_probe():
    return experiment_module("seat_probe")


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    """A real run's first iteration kept on disk, its buffer voted by the model as saved; shared by the
    tests: a probe only reads it."""
    return kept_tiny_run(tmp_path_factory.mktemp("kept"), learning_rate=1e-3)


def test_the_played_arrangement_reproduces_the_recorded_votes_and_rotations_move_only_texts(
    seat_probe, kept_run, tmp_path
):
    model, run, config = kept_run
    out = tmp_path / "probe.json"
    args = [str(run), "--iterations", "1-1", "--config", str(config), "--model", str(model), "--out", str(out)]
    assert seat_probe.main(args) == 0
    result = json.loads(out.read_text())
    rows = EpisodeBuffer.load(run / "buffers" / "iter_00000.parquet").rows
    votes = [r for r in rows if r["stage"] == "vote" and r["round"] == 0 and r["role"] == "civilian"]
    assert result["games"] == 3 and result["votes"] == len(votes) == 12
    probed = result["models"][str(model)]
    # rotation 0 is the game as played: the probe's votes are the trainer's own, up to batching (1e-4)
    per_game = {}
    for r in votes:
        per_game.setdefault(r["game_id"], []).append(r["vote_probs"][r["spy_seat"]])
    assert probed["as_played"]["mean"] == pytest.approx(np.mean([np.mean(v) for v in per_game.values()]), abs=1e-4)
    assert probed["as_played"]["n"] == 3
    for metric in ("balanced", "text_effect", "seat_effect"):
        assert 0.0 <= probed[metric]["mean"] <= 1.0
    assert "vs_first" not in probed and len(probed["per_game"]["balanced"]) == 3
    lean = probed["seat_lean"]
    assert len(lean) == 5 and all(0.0 < p < 1.0 for p in lean)
    # in every rotation the voter's whole mass is on its four others
    game = seat_probe.played_games(run, 1, 1)[0]
    loaded = SpyRLConfig.from_yaml(config)
    host, policy = GameHost(loaded.game), seat_probe.voter_policy(str(model), loaded)
    voter = game["voters"][0]
    table, turns = seat_probe.vote_table(policy, host, game, voter)
    assert table.shape == (4, 5) and np.allclose(table.sum(axis=1), 1.0) and np.all(table[:, voter] == 0)
    shown = [seat_probe.vote_observation(host, game, voter, shows)["performances"] for shows in turns]
    assert all(turns[0][s] == s for s in turns[0])  # rotation 0: every seat shows its own text
    assert len({texts[turns[1][s]] for texts in shown[:1] for s in turns[1]}) > 1  # heuristic texts differ by copy
    for shows, texts in zip(turns, shown, strict=True):
        assert texts[voter] == shown[0][voter]  # the voter's own performance stays in its seat
        assert all(texts[s] == shown[0][shows[s]] for s in shows)  # seat s shows seat shows[s]'s text


def test_mistakes_are_one_error_line(seat_probe, tmp_path, capsys):
    assert seat_probe.main([str(tmp_path), "--iterations", "3-1", "--config", "x", "--model", "y", "--out", "o"]) == 2
    assert "error: --iterations '3-1'" in capsys.readouterr().err
    assert seat_probe.main([str(tmp_path), "--iterations", "1-1", "--config", "x", "--model", str(tmp_path),
                            "--out", "o"]) == 2  # fmt: skip
    assert "neither a model folder" in capsys.readouterr().err


def test_a_second_model_is_read_against_the_first_game_by_game(seat_probe, kept_run, tmp_path):
    model, run, config = kept_run
    out = tmp_path / "probe.json"
    args = [str(run), "--iterations", "1-1", "--config", str(config), "--model", str(model)]
    assert seat_probe.main([*args, "--model", str(run / "checkpoints" / "iter_00001" / "model"),
                            "--out", str(out)]) == 0  # fmt: skip
    first, second = json.loads(out.read_text())["models"].values()
    for metric in seat_probe.METRICS:
        change = np.subtract(second["per_game"][metric], first["per_game"][metric])
        assert second["vs_first"][metric]["mean"] == pytest.approx(change.mean())
        assert second["vs_first"][metric]["n"] == 3
    assert second["per_game"]["as_played"] != first["per_game"]["as_played"]  # one update moved the votes


def test_a_voter_that_reads_only_texts_has_no_seat_effect(seat_probe, kept_run, tmp_path):
    """The positive control: ``heuristic-soft`` votes by a softmax over the texts' heuristic scores, so a text
    carries its probability wherever it sits (seat effect 0) and the spy's odd text gets its own (text effect)."""
    _, run, config = kept_run
    out = tmp_path / "probe.json"
    args = [str(run), "--iterations", "1-1", "--config", str(config), "--model", "heuristic-soft", "--out", str(out)]
    assert seat_probe.main(args) == 0
    probed = json.loads(out.read_text())["models"]["heuristic-soft"]
    assert probed["seat_effect"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert probed["text_effect"]["mean"] > 0.01
    assert probed["balanced"]["mean"] == pytest.approx(probed["as_played"]["mean"])  # the seats change nothing
