"""Held-out split and evaluation: stable split, fixed games, per-game metrics, bootstrap intervals."""

from __future__ import annotations

import math

import pytest

from agents import HeuristicAgent, RandomAgent
from spy_env.config import GameConfig
from spy_env.corpus import is_heldout, load_embedded, split_documents
from spy_env.heldout import bootstrap, evaluate_heldout, paired_difference, per_game, summarize


def test_split_is_by_id_so_order_and_subsets_do_not_move_documents():
    docs = load_embedded()
    train, heldout = split_documents(docs)
    assert 8 <= len(heldout) <= 24 and len(train) + len(heldout) == len(docs)
    assert not {d.id for d in train} & {d.id for d in heldout}
    again = split_documents(list(reversed(docs[::2])))[1]
    assert {d.id for d in again} == {d.id for d in heldout if d in docs[::2]}
    assert all(is_heldout(d.id) for d in heldout)
    with pytest.raises(ValueError, match="fraction"):
        split_documents(docs, 1.0)


def test_trainer_presets_never_play_heldout_documents(tmp_path):
    from trainers import SpyRLConfig

    config = SpyRLConfig.preset("cpu-smoke", output_dir=str(tmp_path))
    from spy_env.corpus import CorpusFilter, load_corpus

    game = config.game
    docs = load_corpus(
        game.source.corpus,
        CorpusFilter(truncate=game.limits.max_document_chars),
        max_documents=game.source.max_documents,
    )
    train, heldout = split_documents(docs, config.run.heldout_fraction)
    assert heldout and not {d.id for d in train} & {d.id for d in heldout}


def test_same_seed_same_games_whatever_the_policy():
    config = GameConfig(n_players=3)
    _, heldout = split_documents(load_embedded())
    _, a = evaluate_heldout([HeuristicAgent()] * 3, config, heldout, 12, seed=7)
    _, b = evaluate_heldout([RandomAgent(seed=1)] * 3, config, heldout, 12, seed=7)
    assert [(g["document_id"], g["game_seed"], g["spy_seat"]) for g in a] == [
        (g["document_id"], g["game_seed"], g["spy_seat"]) for g in b
    ]
    assert {g["document_id"] for g in a} <= {d.id for d in heldout}
    # the heuristic beats random on the same games, and the paired interval says so
    diff = paired_difference(a, b, "detection_accuracy")
    assert diff.mean > 0 and diff.low <= diff.mean <= diff.high
    summary = summarize(a)
    assert summary["valid_vote_rate"].n == 12 and math.isnan(summary["expected_accuracy"].mean)  # no vote_probs


def test_per_game_metrics_by_hand():
    def row(stage, seat, role, vote=-1, violations=(), probs=()):
        return {
            "run_id": "r", "game_id": 0, "game_seed": 5, "document_id": "d", "spy_seat": 2, "spy_caught": True,
            "stage": stage, "seat": seat, "role": role, "vote": vote, "violations": list(violations),
            "vote_probs": list(probs),
        }  # fmt: skip

    rows = [
        row("perform", 0, "civilian", violations=["no_answer"]),
        row("perform", 1, "civilian"),
        row("perform", 2, "spy"),
        row("vote", 0, "civilian", vote=2, probs=[0, 0.2, 0.8, 0]),
        row("vote", 1, "civilian", vote=0, probs=[0.6, 0, 0.4, 0]),
        row("vote", 2, "spy", vote=-1, violations=["self_vote"], probs=[0.5, 0.5, 0, 0]),
    ]
    (game,) = per_game(rows)
    assert game["detection_accuracy"] == 0.5 and game["spy_caught"] == 1.0
    assert game["expected_accuracy"] == pytest.approx(0.6)
    assert game["na_rate"] == pytest.approx(1 / 3) and game["valid_vote_rate"] == pytest.approx(2 / 3)
    assert game["no_answer_rate"] == pytest.approx(1 / 3)


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_more_games():
    small = bootstrap([0, 1] * 10, seed=1)
    large = bootstrap([0, 1] * 500, seed=1)
    assert small.low < 0.5 < small.high and large.low < 0.5 < large.high
    assert large.high - large.low < small.high - small.low
    with pytest.raises(ValueError, match="same games"):
        paired_difference(
            [{"document_id": "a", "game_seed": 1, "x": 1}], [{"document_id": "b", "game_seed": 1, "x": 0}], "x"
        )
